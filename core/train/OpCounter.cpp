#include "train/OpCounter.h"

#include <cstring>

#include <ATen/record_function.h>

namespace tb {
namespace {

thread_local std::map<std::string, std::int64_t>* t_counts = nullptr;

std::unique_ptr<at::ObserverContext> countOp(const at::RecordFunction& fn)
{
    if (t_counts) {
        const char* name = fn.name();
        if (std::strncmp(name, "aten::", 6) == 0) ++(*t_counts)[name];
    }
    return nullptr;
}

} // namespace

OpCounter::OpCounter()
{
    t_counts = &m_counts;
    m_handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&countOp));
}

OpCounter::~OpCounter()
{
    at::removeCallback(m_handle);
    if (t_counts == &m_counts) t_counts = nullptr;
}

std::int64_t OpCounter::total() const
{
    std::int64_t sum = 0;
    for (const auto& [name, n] : m_counts) sum += n;
    return sum;
}

} // namespace tb
