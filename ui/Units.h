#pragma once
// Byte counts as the panels show them.

#include <QString>

#include <cstdint>

namespace tb::ui {

// "14.74 GiB"
inline QString gibText(std::int64_t bytes)
{
    return QString::number(static_cast<double>(bytes) / 1073741824.0, 'f', 2) + " GiB";
}

// The unit that suits the size: "10.57 GiB", "50.9 MiB", "12.0 KiB".
inline QString bytesText(std::int64_t bytes)
{
    const double b = static_cast<double>(bytes);
    if (b >= 1073741824.0) return gibText(bytes);
    if (b >= 1048576.0) return QString::number(b / 1048576.0, 'f', 1) + " MiB";
    return QString::number(b / 1024.0, 'f', 1) + " KiB";
}

} // namespace tb::ui
