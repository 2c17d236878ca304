#include "train/LossScaler.h"

namespace tb {

DynamicLossScaler::DynamicLossScaler(double initialScale, double growthFactor, double backoffFactor,
                                     int growthInterval)
    : m_scale(initialScale), m_growth(growthFactor), m_backoff(backoffFactor), m_interval(growthInterval)
{
}

bool DynamicLossScaler::unscale(const std::vector<torch::Tensor>& parameters) const
{
    TORCH_CHECK(m_scale > 0.0, "loss scale must be positive");
    const double inverse = 1.0 / m_scale;
    torch::Tensor anyBad;
    for (const auto& p : parameters) {
        if (!p.grad().defined()) continue;
        TORCH_CHECK(p.scalar_type() == torch::kFloat || p.scalar_type() == torch::kDouble,
                    "the loss scaler needs fp32 trainable weights, got ", p.scalar_type());
        auto g = p.mutable_grad();
        g.mul_(inverse);
        const auto bad = torch::logical_not(torch::isfinite(g)).any();
        anyBad = anyBad.defined() ? torch::logical_or(anyBad, bad) : bad;
    }
    // One device-to-host sync for all parameters.
    return !anyBad.defined() || !anyBad.item<bool>();
}

void DynamicLossScaler::update(bool gradientsFinite)
{
    if (!gradientsFinite) {
        m_scale *= m_backoff;
        m_goodSteps = 0;
        return;
    }
    if (++m_goodSteps >= m_interval) {
        m_scale *= m_growth;
        m_goodSteps = 0;
    }
}

} // namespace tb
