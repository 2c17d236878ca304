#include "config/LearningRate.h"

#include <algorithm>
#include <cmath>

namespace tb {

double learningRateAt(const OptimConfig& o, int step, int totalSteps)
{
    const double peak = o.lr;
    if (o.warmupSteps > 0 && step <= o.warmupSteps) return peak * step / o.warmupSteps;
    if (o.schedule == "constant") return peak;
    const double span = std::max(1, totalSteps - o.warmupSteps);
    const double progress = std::clamp((step - o.warmupSteps) / span, 0.0, 1.0);
    const double floor = o.minLrRatio * peak;
    if (o.schedule == "linear") return peak - (peak - floor) * progress;
    return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

} // namespace tb
