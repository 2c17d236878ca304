#include "text/Pieces.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/Errors.h"
#include "text/Regex.h"

namespace tb::text {

std::vector<Span> spansFromMatches(std::string_view s, const std::vector<std::pair<std::size_t, std::size_t>>& matches)
{
    std::vector<Span> out;
    if (s.empty()) {
        out.push_back({0, 0, false});
        return out;
    }
    std::size_t prev = 0;
    for (const auto& [st, en] : matches) {
        if (prev != st) out.push_back({prev, st, false});
        out.push_back({st, en, true});
        prev = en;
    }
    if (prev != s.size()) out.push_back({prev, s.size(), false});
    return out;
}

std::vector<Span> literalSpans(std::string_view s, std::string_view needle)
{
    std::vector<std::pair<std::size_t, std::size_t>> matches;
    if (!needle.empty())
        for (std::size_t at = s.find(needle); at != std::string_view::npos; at = s.find(needle, at + needle.size()))
            matches.emplace_back(at, at + needle.size());
    return spansFromMatches(s, matches);
}

namespace {

// Spans that are matches join the span before them.
std::vector<Span> mergedWithPrevious(const std::vector<Span>& spans)
{
    std::vector<Span> pieces;
    bool previous = false;
    for (const auto& s : spans) {
        if (s.flag && !previous && !pieces.empty()) pieces.back().end = s.end;
        else pieces.push_back({s.start, s.end, false});
        previous = s.flag;
    }
    return pieces;
}

// Spans that are matches join the span after them.
std::vector<Span> mergedWithNext(const std::vector<Span>& spans)
{
    std::vector<Span> pieces;
    bool previous = false;
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->flag && !previous && !pieces.empty()) pieces.back().start = it->start;
        else pieces.push_back({it->start, it->end, false});
        previous = it->flag;
    }
    std::reverse(pieces.begin(), pieces.end());
    return pieces;
}

// Runs of matches, and runs of the rest, each one piece.
std::vector<Span> contiguous(const std::vector<Span>& spans)
{
    std::vector<Span> pieces;
    bool previous = false;
    for (const auto& s : spans) {
        if (s.flag == previous && !pieces.empty()) pieces.back().end = s.end;
        else pieces.push_back({s.start, s.end, false});
        previous = s.flag;
    }
    return pieces;
}

} // namespace

void splitPiece(const Piece& p, std::vector<Span> spans, Behavior behavior, std::vector<Piece>& out)
{
    std::vector<Span> pieces;
    switch (behavior) {
    case Behavior::Isolated:
        for (auto& s : spans) pieces.push_back({s.start, s.end, false});
        break;
    case Behavior::Removed: pieces = std::move(spans); break;
    case Behavior::Contiguous: pieces = contiguous(spans); break;
    case Behavior::MergedWithPrevious: pieces = mergedWithPrevious(spans); break;
    case Behavior::MergedWithNext: pieces = mergedWithNext(spans); break;
    }
    for (const auto& s : pieces) {
        if (s.flag || s.end <= s.start) continue; // removed, or empty (PreTokenizedString drops empties)
        out.push_back({p.text.substr(s.start, s.end - s.start), p.atStart && s.start == 0, -1});
    }
}

Pattern::Pattern(const nlohmann::json& j, const std::string& at)
{
    if (!j.is_object() || j.size() != 1) throw InputError(at + " must be {\"String\": ...} or {\"Regex\": ...}");
    if (const auto s = j.find("String"); s != j.end() && s->is_string()) literal = s->get<std::string>();
    else if (const auto r = j.find("Regex"); r != j.end() && r->is_string()) regex = std::make_shared<Regex>(r->get<std::string>(), at);
    else throw InputError(at + " must be {\"String\": ...} or {\"Regex\": ...}");
}

std::vector<Span> Pattern::spans(std::string_view s) const
{
    return regex ? spansFromMatches(s, regex->findAll(s)) : literalSpans(s, literal);
}

std::string Pattern::replaceAll(std::string_view s, std::string_view content) const
{
    std::string out;
    for (const auto& sp : spans(s)) {
        if (sp.flag) out += content;
        else out.append(s.substr(sp.start, sp.end - sp.start));
    }
    return out;
}

} // namespace tb::text
