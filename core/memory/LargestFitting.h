#pragma once
// The largest n in [1, limit] for which fits(n) holds, for a fits that
// holds up to some n and not beyond (a peak that grows with batch or
// sequence); 0 when not even 1 fits. Doubling, then bisection.

#include <algorithm>
#include <cstdint>

namespace tb {

template <typename Fits>
std::int64_t largestFitting(Fits&& fits, std::int64_t limit)
{
    if (!fits(1)) return 0;
    std::int64_t lo = 1, hi = 2;
    while (hi <= limit && fits(hi)) lo = hi, hi *= 2;
    hi = std::min(hi, limit + 1);
    while (hi - lo > 1) {
        const auto mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

} // namespace tb
