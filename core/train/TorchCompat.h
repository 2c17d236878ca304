#pragma once
// The one place where LibTorch version differences live (1.13 on Debian, 2.x in
// PyTorch wheels on GPU servers).

#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>

namespace tb::compat {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline void setAutocast(c10::DeviceType device, bool enabled, at::ScalarType dtype)
{
    at::autocast::set_autocast_enabled(device, enabled);
    at::autocast::set_autocast_dtype(device, dtype);
}
inline bool autocastEnabled(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
inline at::ScalarType autocastDtype(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
#else
inline void setAutocast(c10::DeviceType device, bool enabled, at::ScalarType dtype)
{
    if (device == c10::DeviceType::CUDA) {
        at::autocast::set_enabled(enabled);
        at::autocast::set_autocast_gpu_dtype(dtype);
    } else {
        at::autocast::set_cpu_enabled(enabled);
        at::autocast::set_autocast_cpu_dtype(dtype);
    }
}
inline bool autocastEnabled(c10::DeviceType device)
{
    return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
inline at::ScalarType autocastDtype(c10::DeviceType device)
{
    return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                           : at::autocast::get_autocast_cpu_dtype();
}
#endif

// Enables autocast for a scope and restores the previous state after it.
class AutocastScope final {
public:
    AutocastScope(c10::DeviceType device, bool enabled, at::ScalarType dtype)
        : m_device(device), m_wasEnabled(autocastEnabled(device)), m_oldDtype(autocastDtype(device)),
          m_active(enabled)
    {
        if (m_active) setAutocast(device, true, dtype);
    }
    ~AutocastScope()
    {
        if (!m_active) return;
        setAutocast(m_device, m_wasEnabled, m_oldDtype);
        at::autocast::clear_cache();
    }
    AutocastScope(const AutocastScope&) = delete;
    AutocastScope& operator=(const AutocastScope&) = delete;

private:
    c10::DeviceType m_device;
    bool m_wasEnabled;
    at::ScalarType m_oldDtype;
    bool m_active;
};

// scaled_dot_product_attention arrived in LibTorch 2.0; 1.13 has only eager attention.
#if TORCH_VERSION_MAJOR >= 2
inline constexpr bool kHasFusedAttention = true;
inline torch::Tensor fusedCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          double dropout)
{
    return at::scaled_dot_product_attention(q, k, v, {}, dropout, true);
}
#else
inline constexpr bool kHasFusedAttention = false;
inline torch::Tensor fusedCausalAttention(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double)
{
    TORCH_CHECK(false, "scaled_dot_product_attention needs LibTorch 2.0 or newer");
}
#endif

// Puts a parameter's optimizer state where the optimizer looks for it: 1.13
// keys its state by the parameter's TensorImpl address as text, 2.x by the
// address itself.
inline void setOptimizerState(torch::optim::Optimizer& optimizer, const torch::Tensor& parameter,
                              std::unique_ptr<torch::optim::OptimizerParamState> state)
{
#if TORCH_VERSION_MAJOR >= 2
    optimizer.state()[parameter.unsafeGetTensorImpl()] = std::move(state);
#else
    optimizer.state()[c10::guts::to_string(parameter.unsafeGetTensorImpl())] = std::move(state);
#endif
}

// RNG state of a generator as a byte tensor, and back. The state is made
// inside an operator scope of its own, so that the derived planner's device
// rules can tell it (a CPU generator's state is a tensor the CPU step
// allocates; a CUDA generator's is host memory: memory/DeviceRules.h).
inline torch::Tensor generatorState(at::Generator& gen)
{
    at::RecordFunction scope(at::RecordScope::FUNCTION);
    if (scope.isActive()) scope.before("trainbench::generator_state", c10::ArrayRef<const c10::IValue>{});
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
}
inline void setGeneratorState(at::Generator& gen, const torch::Tensor& state)
{
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
}
inline at::Generator defaultGenerator(const torch::Device& device)
{
    return at::globalContext().defaultGenerator(device);
}

} // namespace tb::compat
