#pragma once
// Bytes as people read them in messages: "32.00 MiB", "14.74 GiB", "512 bytes"
// (binary units, as PyTorch prints them).

#include <cstdint>
#include <cstdio>
#include <string>

namespace tb {

inline std::string byteSizeText(std::int64_t bytes)
{
    char text[48];
    const double b = static_cast<double>(bytes);
    constexpr double KiB = 1024.0, MiB = KiB * 1024, GiB = MiB * 1024;
    if (b >= GiB) std::snprintf(text, sizeof text, "%.2f GiB", b / GiB);
    else if (b >= MiB) std::snprintf(text, sizeof text, "%.2f MiB", b / MiB);
    else if (b >= KiB) std::snprintf(text, sizeof text, "%.2f KiB", b / KiB);
    else std::snprintf(text, sizeof text, "%lld bytes", static_cast<long long>(bytes));
    return text;
}

} // namespace tb
