#pragma once
// Dynamic loss scaling for fp16 training (LibTorch C++ has no GradScaler).
// The loss is multiplied by a scale before backward so small fp16 gradients
// do not flush to zero; gradients are unscaled before clipping and the step.
// A step whose gradients hold Inf/NaN is skipped and the scale halves; after
// growthInterval clean steps the scale doubles (the policy of
// torch.cuda.amp.GradScaler). Trainable weights stay fp32, so the scaler
// never sees fp16 or bf16 parameters.

#include <vector>

#include <torch/torch.h>

namespace tb {

class DynamicLossScaler final {
public:
    explicit DynamicLossScaler(double initialScale = 65536.0, double growthFactor = 2.0,
                               double backoffFactor = 0.5, int growthInterval = 2000);

    torch::Tensor scale(const torch::Tensor& loss) const { return loss * m_scale; }
    // Divides every gradient by the scale; returns false if any is not finite.
    bool unscale(const std::vector<torch::Tensor>& parameters) const;
    // Records the outcome of one step and adjusts the scale.
    void update(bool gradientsFinite);

    double currentScale() const { return m_scale; }
    void setScale(double scale, int goodSteps)
    {
        m_scale = scale;
        m_goodSteps = goodSteps;
    }
    int goodSteps() const { return m_goodSteps; }

private:
    double m_scale;
    double m_growth;
    double m_backoff;
    int m_interval;
    int m_goodSteps = 0;
};

} // namespace tb
