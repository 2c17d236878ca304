#include "text/jinja/PythonString.h"

#include <cctype>
#include <vector>

#include "text/Unicode.h"

namespace tb::text::jinja {
namespace {

json splitForward(const std::string& s, const std::string& sep, long long maxsplit)
{
    json out = json::array();
    std::size_t at = 0;
    long long n = 0;
    while (maxsplit < 0 || n < maxsplit) {
        const auto f = s.find(sep, at);
        if (f == std::string::npos) break;
        out.push_back(s.substr(at, f - at));
        at = f + sep.size();
        ++n;
    }
    out.push_back(s.substr(at));
    return out;
}

json splitBackward(const std::string& s, const std::string& sep, long long maxsplit)
{
    std::vector<std::string> parts;
    std::size_t end = s.size();
    long long n = 0;
    while (maxsplit < 0 || n < maxsplit) {
        if (end < sep.size()) break;
        const auto f = s.rfind(sep, end - sep.size());
        if (f == std::string::npos) break;
        parts.push_back(s.substr(f + sep.size(), end - f - sep.size()));
        end = f;
        ++n;
    }
    parts.push_back(s.substr(0, end));
    json out = json::array();
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) out.push_back(*it);
    return out;
}

// split() without a separator (rsplit() too: it splits from the left here).
json splitWhiteSpace(const std::string& s, long long maxsplit)
{
    json out = json::array();
    const auto u = toU32(s);
    std::size_t i = 0;
    long long n = 0;
    while (i < u.size()) {
        while (i < u.size() && isWhiteSpace(u[i])) ++i;
        if (i >= u.size()) break;
        if (maxsplit >= 0 && n >= maxsplit) {
            std::size_t e = u.size();
            while (e > i && isWhiteSpace(u[e - 1])) --e;
            out.push_back(fromU32(u.substr(i, e - i)));
            break;
        }
        std::size_t j = i;
        while (j < u.size() && !isWhiteSpace(u[j])) ++j;
        out.push_back(fromU32(u.substr(i, j - i)));
        i = j;
        ++n;
    }
    return out;
}

// capitalize(), or title() when eachWord.
std::string capitalized(const std::string& s, bool eachWord)
{
    std::string out;
    bool start = true;
    for (const char32_t c : toU32(s)) {
        const bool alpha = c < 0x80 ? std::isalpha(int(c)) != 0 : isWordChar(c);
        if (start && c < 0x80 && c >= 'a' && c <= 'z') out.push_back(char(c - 32));
        else if (!start && c < 0x80 && c >= 'A' && c <= 'Z') out.push_back(char(c + 32));
        else appendUtf8(out, c);
        start = eachWord && !alpha;
    }
    return out;
}

} // namespace

std::string pyStrip(const std::string& s, const std::string* chars, bool left, bool right)
{
    const auto u = toU32(s);
    std::u32string set;
    if (chars) set = toU32(*chars);
    auto drop = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : isWhiteSpace(c); };
    std::size_t b = 0, e = u.size();
    if (left)
        while (b < e && drop(u[b])) ++b;
    if (right)
        while (e > b && drop(u[e - 1])) --e;
    return fromU32(u.substr(b, e - b));
}

json pySplit(const std::string& s, const std::optional<std::string>& sep, long long maxsplit, bool fromRight)
{
    if (!sep) return splitWhiteSpace(s, maxsplit);
    if (sep->empty()) throw EvalError("split() with an empty separator");
    return fromRight ? splitBackward(s, *sep, maxsplit) : splitForward(s, *sep, maxsplit);
}

std::string pyUpper(const std::string& s)
{
    std::string out;
    for (const char32_t c : toU32(s)) {
        if (c < 0x80) out.push_back(char(c >= 'a' && c <= 'z' ? c - 32 : c));
        else appendUtf8(out, c);
    }
    return out;
}

std::string pyLower(const std::string& s)
{
    std::string out;
    for (const char32_t c : toU32(s)) appendLowercase(out, c);
    return out;
}

std::string pyCapitalize(const std::string& s) { return capitalized(s, false); }
std::string pyTitle(const std::string& s) { return capitalized(s, true); }

std::string pyReplace(const std::string& s, const std::string& from, const std::string& to)
{
    if (from.empty()) return s;
    std::string out;
    std::size_t at = 0;
    for (auto f = s.find(from); f != std::string::npos; f = s.find(from, at)) {
        out += s.substr(at, f - at) + to;
        at = f + from.size();
    }
    return out + s.substr(at);
}

long long pyFind(const std::string& s, const std::string& needle)
{
    const auto f = s.find(needle);
    return f == std::string::npos ? -1LL : (long long)toU32(s.substr(0, f)).size();
}

} // namespace tb::text::jinja
