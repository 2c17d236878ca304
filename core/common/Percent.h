#pragma once
// A signed share as people read it: "+3.1%", "-0.4%", and "0.0%" where the
// value rounds to zero, never "-0.0%" or "+-0.0%".

#include <cmath>
#include <cstdio>
#include <string>

namespace tb {

// `fraction` 0.031 -> "+3.1%" (decimals 1).
inline std::string signedPercentText(double fraction, int decimals = 1)
{
    if (!std::isfinite(fraction)) return "n/a";
    const double scale = std::pow(10.0, decimals);
    const double rounded = std::round(100.0 * fraction * scale) / scale;
    char text[48];
    if (rounded == 0.0) std::snprintf(text, sizeof text, "%.*f%%", decimals, 0.0);
    else std::snprintf(text, sizeof text, "%+.*f%%", decimals, rounded);
    return text;
}

} // namespace tb
