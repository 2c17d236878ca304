#include "train/Bf16AdamW.h"

#include <cmath>
#include <sstream>
#include <type_traits>

namespace tb {
namespace {

// The key Optimizer::state_ files a parameter under: its TensorImpl, as a
// string in LibTorch 1.13 and as the pointer itself in 2.x.
template <typename Map>
typename Map::key_type stateKey(const Map&, const torch::Tensor& p)
{
    if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
        std::ostringstream s;
        s << p.unsafeGetTensorImpl();
        return s.str();
    } else {
        return static_cast<typename Map::key_type>(p.unsafeGetTensorImpl());
    }
}

} // namespace

torch::Tensor stochasticRoundToBf16(const torch::Tensor& x, at::Generator& gen)
{
    // bf16 is the top 16 bits of an fp32. Adding uniform noise to the low 16
    // bits carries into the kept bits with probability equal to the dropped
    // fraction, in magnitude (the sign bit is apart), then truncating is exact.
    const auto bits = x.contiguous().view(torch::kInt);
    // The noise is drawn where the weight lives: from `gen` on the CPU, from the
    // device's own generator elsewhere (a CPU generator cannot fill a CUDA tensor,
    // and copying 4 bytes a parameter to the GPU each step would cost more than the step).
    const auto noise = x.device().is_cpu()
        ? torch::randint(0, 1 << 16, x.sizes(), gen, torch::TensorOptions().dtype(torch::kInt))
        : torch::randint(0, 1 << 16, x.sizes(), torch::TensorOptions().dtype(torch::kInt).device(x.device()));
    const auto kept = (bits + noise).bitwise_and(static_cast<std::int64_t>(static_cast<std::int32_t>(0xFFFF0000u)));
    return kept.view(torch::kFloat).to(torch::kBFloat16);
}

Bf16AdamW::Bf16AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
                     std::uint64_t seed)
    : torch::optim::AdamW(std::move(groups), std::move(defaults)), m_seed(seed)
{
}

torch::Tensor Bf16AdamW::step(LossClosure closure)
{
    torch::NoGradGuard noGrad;
    torch::Tensor loss;
    if (closure) {
        at::AutoGradMode enable(true);
        loss = closure();
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(m_seed);
    std::uint64_t index = 0;
    for (auto& group : param_groups()) {
        const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
        const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
        for (auto& p : group.params()) {
            ++index;
            if (!p.grad().defined()) continue;
            const auto key = stateKey(state_, p);
            if (state_.find(key) == state_.end()) {
                auto fresh = std::make_unique<torch::optim::AdamWParamState>();
                fresh->step(0);
                fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
                fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
                state_[key] = std::move(fresh);
            }
            auto& state = static_cast<torch::optim::AdamWParamState&>(*state_[key]);
            state.step(state.step() + 1);
            const auto stepCount = static_cast<double>(state.step());
            // The arithmetic of LibTorch's AdamW, in fp32.
            auto w = p.detach().to(torch::kFloat);
            const auto g = p.grad().detach().to(torch::kFloat);
            if (o.weight_decay() != 0.0) w.mul_(1.0 - o.lr() * o.weight_decay());
            const auto m = state.exp_avg().to(torch::kFloat).mul_(beta1).add_(g, 1.0 - beta1);
            const auto v = state.exp_avg_sq().to(torch::kFloat).mul_(beta2).addcmul_(g, g, 1.0 - beta2);
            // The moments are bf16 state too and take the same unbiased rounding: rounded to
            // nearest, 0.999 v rounds back to v (a bf16 half-step is >= 0.2%), so v never decays.
            if (state.exp_avg().scalar_type() == torch::kBFloat16) {
                gen.set_current_seed(m_seed ^ (static_cast<std::uint64_t>(state.step()) * 0x9e3779b97f4a7c15ULL + index
                                               + 0x5851f42d4c957f2dULL));
                state.exp_avg().copy_(stochasticRoundToBf16(m, gen));
                state.exp_avg_sq().copy_(stochasticRoundToBf16(v, gen));
            } else {
                state.exp_avg().copy_(m);
                state.exp_avg_sq().copy_(v);
            }
            const double correction1 = 1.0 - std::pow(beta1, stepCount);
            const double correction2 = 1.0 - std::pow(beta2, stepCount);
            const auto denom = (v.sqrt() / std::sqrt(correction2)).add_(o.eps());
            w.addcdiv_(m, denom, -o.lr() / correction1);
            if (p.scalar_type() == torch::kBFloat16) {
                gen.set_current_seed(m_seed ^ (static_cast<std::uint64_t>(state.step()) * 0x9e3779b97f4a7c15ULL + index));
                p.detach().copy_(stochasticRoundToBf16(w, gen));
            } else {
                p.detach().copy_(w);
            }
        }
    }
    return loss;
}

} // namespace tb
