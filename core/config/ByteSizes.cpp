#include "config/ByteSizes.h"

#include <cctype>
#include <cmath>
#include <regex>

#include "common/Errors.h"

namespace tb {

std::optional<std::int64_t> parseByteSize(const std::string& text)
{
    static const std::regex size("^\\s*([0-9]{1,15}(?:\\.[0-9]{1,9})?)\\s*([kmgtp]?)(i?)(b|bytes?)\\s*$", std::regex::icase);
    std::smatch m;
    if (!std::regex_match(text, m, size)) return std::nullopt;
    double value = std::stod(m[1].str());
    const char unit = m[2].str().empty() ? '\0' : static_cast<char>(std::tolower(static_cast<unsigned char>(m[2].str()[0])));
    const bool binary = !m[3].str().empty(); // MiB binary, MB decimal
    const double base = binary ? 1024.0 : 1000.0;
    const std::string order = "kmgtp";
    if (unit != '\0') value *= std::pow(base, static_cast<double>(order.find(unit) + 1));
    if (!(value < 9.0e18)) return std::nullopt;
    return static_cast<std::int64_t>(std::llround(value));
}

std::int64_t budgetBytes(const std::string& text, const std::string& option)
{
    bool digits = !text.empty();
    for (const char c : text) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    std::optional<std::int64_t> bytes;
    if (digits && text.size() < 19) bytes = std::stoll(text);
    else if (!digits) bytes = parseByteSize(text);
    if (!bytes || *bytes <= 0) {
        throw InputError(option + " must be a positive size in bytes (\"4294967296\") or with a unit (\"4 GiB\", "
                         "\"512 MiB\"), got \"" + text + "\"");
    }
    return *bytes;
}

} // namespace tb
