#pragma once
// The memory planner's error on a run's peak, as every panel and command
// reports it: (estimated - measured) / measured, positive when the plan was
// above the measurement; none when either is unknown.

#include <cstdint>
#include <optional>

namespace tb {

inline std::optional<double> peakEstimateError(std::int64_t estimatedBytes, std::int64_t measuredBytes)
{
    if (estimatedBytes <= 0 || measuredBytes <= 0) return std::nullopt;
    return static_cast<double>(estimatedBytes - measuredBytes) / static_cast<double>(measuredBytes);
}

} // namespace tb
