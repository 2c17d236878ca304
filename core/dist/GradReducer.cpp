#include "dist/GradReducer.h"

#include <ATen/ATen.h>

#include "dist/ProcessGroup.h"

namespace tb {

GradReducer::GradReducer(DistGroup& group, std::vector<at::Tensor> parameters, Options options)
    : m_group(group), m_parameters(std::move(parameters)), m_options(options)
{
    m_slots.resize(m_parameters.size());
    // Reverse order; a new bucket when the dtype changes or the size limit is passed.
    std::int64_t bytes = 0, numel = 0;
    const auto close = [&] {
        if (m_buckets.empty()) return;
        const auto& first = m_parameters[m_buckets.back().parameters.front()];
        m_buckets.back().flat = at::zeros({numel}, first.options().requires_grad(false));
    };
    for (std::size_t k = m_parameters.size(); k-- > 0;) {
        const auto& p = m_parameters[k];
        const std::int64_t size = p.numel() * static_cast<std::int64_t>(p.element_size());
        const std::int64_t limit = m_buckets.size() == 1 ? m_options.firstBucketBytes : m_options.bucketBytes;
        const bool fresh = m_buckets.empty() || (bytes > 0 && bytes + size > limit)
            || m_parameters[m_buckets.back().parameters.front()].scalar_type() != p.scalar_type();
        if (fresh) {
            close();
            m_buckets.emplace_back();
            bytes = 0;
            numel = 0;
        }
        m_slots[k] = {m_buckets.size() - 1, numel, false};
        m_buckets.back().parameters.push_back(k);
        bytes += size;
        numel += p.numel();
    }
    close();
    for (std::size_t k = 0; k < m_parameters.size(); ++k) {
        m_hooks.push_back(m_parameters[k].register_hook([this, k](const at::Tensor& grad) { onGradient(k, grad); }));
    }
}

GradReducer::~GradReducer()
{
    for (std::size_t k = 0; k < m_hooks.size(); ++k) m_parameters[k].remove_hook(m_hooks[k]);
}

void GradReducer::arm()
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_armed = true;
    m_nextToStart = 0;
    for (auto& s : m_slots) s.ready = false;
    for (auto& b : m_buckets) {
        b.pending = b.parameters.size();
        b.started = false;
    }
}

// Copies the parameter's whole gradient of this step into its bucket: the
// incoming one plus what earlier micro-batches accumulated in .grad (the
// engine adds the incoming one to .grad only after this hook).
void GradReducer::fill(std::size_t index, const at::Tensor* grad)
{
    auto& slot = m_slots[index];
    if (slot.ready) return;
    const auto& p = m_parameters[index];
    auto view = m_buckets[slot.bucket].flat.narrow(0, slot.offset, p.numel()).view(p.sizes());
    const auto& accumulated = p.grad();
    if (grad && grad->defined()) {
        view.copy_(*grad);
        if (accumulated.defined()) view.add_(accumulated);
    } else if (accumulated.defined()) {
        view.copy_(accumulated);
    } else {
        view.zero_(); // a parameter this step did not use
    }
    slot.ready = true;
    --m_buckets[slot.bucket].pending;
}

void GradReducer::startReady()
{
    while (m_nextToStart < m_buckets.size() && m_buckets[m_nextToStart].pending == 0) {
        auto& b = m_buckets[m_nextToStart++];
        b.started = true;
        m_group.startSum(b.flat);
    }
}

void GradReducer::onGradient(std::size_t index, const at::Tensor& grad)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_armed) return;
    fill(index, &grad);
    if (m_options.overlap) startReady();
}

double GradReducer::finish()
{
    std::lock_guard<std::mutex> lock(m_mutex);
    for (std::size_t k = 0; k < m_parameters.size(); ++k) fill(k, nullptr);
    startReady();
    m_armed = false;
    const double waited = m_group.waitStarted();
    for (std::size_t k = 0; k < m_parameters.size(); ++k) {
        auto& p = m_parameters[k];
        const auto& slot = m_slots[k];
        const auto sum = m_buckets[slot.bucket].flat.narrow(0, slot.offset, p.numel()).view(p.sizes());
        if (p.grad().defined()) {
            p.mutable_grad().copy_(sum);
        } else {
            p.mutable_grad() = sum.clone();
        }
    }
    return waited;
}

} // namespace tb
