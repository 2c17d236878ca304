#pragma once
// AdamW for pure bf16 training (train.precision "bf16-pure"): weights,
// gradients and both moments stay bf16 tensors, as torchtune and Lightning's
// bf16-true keep them, but each update is computed in fp32 and written back
// to the bf16 weight and moments with stochastic rounding. Rounded to nearest, an update
// smaller than half a bf16 step (lr 1e-3 on a weight of 0.2 is about 1.5
// steps; lr 1e-4 is a fifth of one) is lost, and plain bf16 AdamW fell 29-33%
// behind mixed precision on the same run (docs/hf-models.md).
//
// The state is AdamW's own (exp_avg, exp_avg_sq, step), so checkpoints save
// and load it unchanged. On the CPU the rounding noise is drawn from a
// generator seeded by (seed, step, parameter index): a resumed run rounds as
// the original did. On a GPU it comes from the device's generator.

#include <cstdint>

#include <torch/torch.h>

namespace tb {

class Bf16AdamW final : public torch::optim::AdamW {
public:
    Bf16AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults, std::uint64_t seed);
    torch::Tensor step(LossClosure closure = nullptr) override;

private:
    std::uint64_t m_seed;
};

// x (fp32) rounded to bf16 up or down with probability given by the distance: unbiased.
torch::Tensor stochasticRoundToBf16(const torch::Tensor& x, at::Generator& gen);

} // namespace tb
