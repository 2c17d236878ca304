#pragma once
// The largest n in [1, limit] whose peak fits a budget, for a peak that does
// not fall as n grows (a step's memory against its batch or sequence); 0 when
// not even 1 fits.
//
// largestFitting asks only "fits or not": doubling, then bisection, about
// 2 log2(answer) evaluations. largestUnderBudget uses the peaks themselves:
// each guess is where the parabola through the last three peaks crosses the
// budget (a step's peak is close to linear in the batch and quadratic at
// most in the sequence), else the line through the last two, else false
// position between what is known to fit and what is known not to, always
// strictly between the two; after two guesses in a row that did not halve
// that bracket, a bisection. While nothing is known not to fit, a guess
// goes at most kLargestGrowth times past the largest that fits (doubling
// went 2 times), so a peak is not asked for far beyond its answer. Same
// answer for a peak that does not fall, in a handful of evaluations: a fit
// answer on a GPU replays the caching allocator's model once per
// evaluation, about a millisecond for a 7B model. Limits beyond 2^52 are
// treated as 2^52 (the guesses are computed in doubles).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

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

// Where the parabola through three points (distinct x) crosses zero inside
// (lo, hi), the crossing nearest the last point; NaN when it does not.
inline double parabolaCrossing(const double (&x)[3], const double (&y)[3], double lo, double hi)
{
    const double d01 = (y[1] - y[0]) / (x[1] - x[0]), d12 = (y[2] - y[1]) / (x[2] - x[1]);
    const double a = (d12 - d01) / (x[2] - x[0]);
    const double b = d12 - a * (x[1] + x[2]), c = y[2] - d12 * x[2] + a * x[1] * x[2];
    double roots[2] = {std::nan(""), std::nan("")};
    if (std::abs(a) * (hi - lo) < 1e-9 * std::abs(b)) {
        if (b != 0) roots[0] = -c / b;
    } else {
        const double disc = b * b - 4 * a * c;
        if (disc < 0) return std::nan("");
        const double q = -0.5 * (b + std::copysign(std::sqrt(disc), b));
        roots[0] = q / a;
        if (q != 0) roots[1] = c / q;
    }
    double best = std::nan("");
    for (const double r : roots) {
        if (!(r > lo && r < hi)) continue;
        if (std::isnan(best) || std::abs(r - x[2]) < std::abs(best - x[2])) best = r;
    }
    return best;
}

constexpr std::int64_t kLargestGrowth = 16;

namespace detail {

// largestUnderBudget's search from what is known: lo fits (overLo: its peak
// less the budget, <= 0); hi does not (overHi > 0) when bounded, else it is
// past the limit; xs/os the last `seen` evaluations, oldest first.
template <typename Over>
std::int64_t searchBracket(Over&& over, std::int64_t lo, double overLo, std::int64_t hi, double overHi, bool bounded,
                           double (&xs)[3], double (&os)[3], int seen)
{
    int slow = 0; // guesses in a row that made little progress
    while (hi - lo > 1) {
        double at = std::nan("");
        const double l = static_cast<double>(lo), h = static_cast<double>(hi);
        if (seen == 1) {
            at = l + 1; // a second point, for the slope
        } else if (slow >= 2) {
            // Bisect, or double while nothing is known not to fit.
            at = bounded ? static_cast<double>(lo + (hi - lo) / 2) : 2 * l;
            slow = 0;
        } else {
            // The parabola through the last three (a step's peak is at most
            // quadratic in the sequence), else the line through the last two,
            // else false position between the ends of the bracket.
            if (seen >= 3) at = parabolaCrossing(xs, os, l, bounded ? h : std::numeric_limits<double>::infinity());
            if (std::isnan(at)) {
                const double slope = (os[2] - os[1]) / (xs[2] - xs[1]);
                at = slope > 0 ? xs[2] - os[2] / slope : h - 1; // flat: as far as allowed
                if (bounded && !(at > l && at < h)) at = l + (h - l) * (-overLo) / (overHi - overLo);
            }
        }
        // Strictly inside the bracket (and, while nothing is known not to
        // fit, at most kLargestGrowth times the largest that fits); rounding
        // down aims at the last n that fits, and the next guess then tries
        // the one after it.
        const double most = bounded ? h - 1 : std::min(h - 1, static_cast<double>(kLargestGrowth) * l);
        const auto guess = static_cast<std::int64_t>(std::clamp(std::floor(at), l + 1, std::max(l + 1, most)));
        const std::int64_t loBefore = lo, widthBefore = hi - lo;
        const double o = over(guess);
        if (o <= 0) {
            lo = guess, overLo = o;
        } else {
            hi = guess, overHi = o;
            bounded = true;
        }
        // Little progress: a bracket not halved, or, while nothing is known
        // not to fit, a guess short of twice the last that fitted.
        const bool progress = bounded ? 2 * (hi - lo) <= widthBefore : lo >= 2 * loBefore;
        slow = progress ? 0 : slow + 1;
        xs[0] = xs[1], os[0] = os[1];
        xs[1] = xs[2], os[1] = os[2];
        xs[2] = static_cast<double>(guess), os[2] = o;
        seen = std::min(seen + 1, 3);
    }
    return lo;
}

} // namespace detail

template <typename Peak>
std::int64_t largestUnderBudget(Peak&& peak, std::int64_t budget, std::int64_t limit)
{
    if (limit < 1) return 0;
    limit = std::min<std::int64_t>(limit, std::int64_t{1} << 52);
    const auto over = [&](std::int64_t n) { return static_cast<double>(static_cast<std::int64_t>(peak(n)) - budget); };
    const double overLo = over(1);
    if (overLo > 0) return 0;
    double xs[3] = {0, 0, 1}, os[3] = {0, 0, overLo};
    return detail::searchBracket(over, 1, overLo, limit + 1, 0, false, xs, os, 1);
}

// The same search where lo (peak peakLo, within the budget) and hi > lo
// (peakHi, over it) are known already: only sizes strictly between them are
// asked for.
template <typename Peak>
std::int64_t largestBetween(Peak&& peak, std::int64_t budget, std::int64_t lo, std::int64_t peakLo, std::int64_t hi,
                            std::int64_t peakHi)
{
    const auto over = [&](std::int64_t n) { return static_cast<double>(static_cast<std::int64_t>(peak(n)) - budget); };
    const double overLo = static_cast<double>(peakLo - budget), overHi = static_cast<double>(peakHi - budget);
    double xs[3] = {0, static_cast<double>(lo), static_cast<double>(hi)}, os[3] = {0, overLo, overHi};
    return detail::searchBracket(over, lo, overLo, hi, overHi, true, xs, os, 2);
}

// The indices of the `count` figures nearest the budget (either side),
// nearest first: the fit map's cells worth evaluating exactly.
inline std::vector<std::size_t> nearestToBudget(const std::vector<std::int64_t>& figures, std::int64_t budget,
                                                std::size_t count)
{
    std::vector<std::size_t> order(figures.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto distance = [&](std::size_t i) { return std::abs(figures[i] - budget); };
    count = std::min(order.size(), count);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count), order.end(),
                      [&](std::size_t x, std::size_t y) { return distance(x) < distance(y); });
    order.resize(count);
    return order;
}

} // namespace tb
