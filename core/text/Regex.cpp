#include "text/Regex.h"

// Oniguruma would #define UChar, which ICU (Unicode.cpp, when a unity batch
// holds both) declares as a type of its own; this file names OnigUChar only.
#define ONIG_ESCAPE_UCHAR_COLLISION
#include <oniguruma.h>

#include <mutex>

#include "common/Errors.h"
#include "text/Unicode.h"

namespace tb::text {

struct Regex::Impl {
    regex_t* reg = nullptr;
};

namespace {

void initOnig()
{
    static std::once_flag once;
    std::call_once(once, [] {
        OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
        onig_initialize(encodings, 1);
    });
}

} // namespace

std::string clipForMessage(std::string_view s, std::size_t max)
{
    if (s.size() <= max) return std::string(s);
    std::size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    return std::string(s.substr(0, cut)) + "...";
}

Regex::Regex(const std::string& pattern, const std::string& where) : m(std::make_unique<Impl>())
{
    initOnig();
    if (firstInvalidUtf8(pattern) != std::string::npos)
        throw InputError(where + ": the regex is not valid UTF-8");
    OnigErrorInfo info;
    const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
    const int rc = onig_new(&m->reg, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                            ONIG_SYNTAX_ONIGURUMA, &info);
    if (rc != ONIG_NORMAL) {
        OnigUChar text[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(text, rc, &info);
        m->reg = nullptr;
        throw InputError(where + ": the regex \"" + clipForMessage(pattern) + "\" does not compile (" +
                         reinterpret_cast<const char*>(text) + ")");
    }
}

Regex::~Regex()
{
    if (m && m->reg) onig_free(m->reg);
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::findAll(std::string_view s) const
{
    std::vector<std::pair<std::size_t, std::size_t>> out;
    const auto* begin = reinterpret_cast<const OnigUChar*>(s.data());
    const auto* end = begin + s.size();
    OnigRegion* region = onig_region_new();
    std::size_t lastEnd = 0;
    bool haveLastMatch = false;
    std::size_t lastMatchEnd = 0;
    while (lastEnd <= s.size()) {
        onig_region_clear(region);
        const auto r = onig_search(m->reg, begin, end, begin + lastEnd, end, region, ONIG_OPTION_NONE);
        if (r < 0) break; // ONIG_MISMATCH, or an error: no further match
        const auto st = std::size_t(region->beg[0]);
        const auto en = std::size_t(region->end[0]);
        if (st == en && haveLastMatch && lastMatchEnd == en) {
            lastEnd += lastEnd < s.size() ? utf8Length(static_cast<unsigned char>(s[lastEnd])) : 1;
            continue;
        }
        lastEnd = en;
        haveLastMatch = true;
        lastMatchEnd = en;
        out.emplace_back(st, en);
    }
    onig_region_free(region, 1);
    return out;
}

} // namespace tb::text
