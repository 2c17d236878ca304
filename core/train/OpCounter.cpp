#include "train/OpCounter.h"

#include <cstring>
#include <vector>

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

thread_local std::vector<const char*>* t_stack = nullptr;

std::unique_ptr<at::ObserverContext> pushOpName(const at::RecordFunction& fn)
{
    if (t_stack) t_stack->push_back(fn.name());
    return nullptr;
}

void popOpName(const at::RecordFunction&, at::ObserverContext*)
{
    if (t_stack && !t_stack->empty()) t_stack->pop_back();
}

} // namespace

OpTracker::OpTracker()
{
    static thread_local std::vector<const char*> stack;
    stack.clear();
    t_stack = &stack;
    m_handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&pushOpName, &popOpName));
}

OpTracker::~OpTracker()
{
    at::removeCallback(m_handle);
    t_stack = nullptr;
}

std::string OpTracker::current()
{
    if (!t_stack || t_stack->empty()) return "-";
    std::string out;
    for (const char* name : *t_stack) {
        if (!out.empty()) out += '>';
        out += name;
    }
    return out;
}

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
