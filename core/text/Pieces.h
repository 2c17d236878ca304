#pragma once
// The input on its way through a tokenizer's pipeline: pieces of text, some
// already tokens, and how a stage splits a piece (tokenizers'
// NormalizedString::split and its SplitDelimiterBehavior). Internal to tb_text.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "text/Unicode.h"

namespace tb::text {

class Regex;

// A stretch of the input: plain text, or an added token already found
// (id >= 0). `atStart`: it begins where the original input begins
// (Metaspace's prepend_scheme "first" asks).
struct Piece {
    std::string text;
    bool atStart = false;
    std::int32_t id = -1;
};

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
    std::size_t start, end;
    bool flag; // is a match (before the behavior), or: remove (after it)
};

// Covers s with matches and the gaps between them (tokenizers' Pattern::find_matches).
std::vector<Span> spansFromMatches(std::string_view s, const std::vector<std::pair<std::size_t, std::size_t>>& matches);

// Each character for which isMatch holds is a match.
template <typename Pred>
std::vector<Span> spansFromChars(std::string_view s, Pred isMatch)
{
    std::vector<Span> out;
    if (s.empty()) {
        out.push_back({0, 0, false});
        return out;
    }
    std::size_t lastOffset = 0, i = 0;
    while (i < s.size()) {
        const std::size_t b = i;
        const char32_t c = nextCodePoint(s, i);
        if (isMatch(c)) {
            if (lastOffset < b) out.push_back({lastOffset, b, false});
            out.push_back({b, i, true});
            lastOffset = i;
        }
    }
    if (s.size() > lastOffset) out.push_back({lastOffset, s.size(), false});
    return out;
}

std::vector<Span> literalSpans(std::string_view s, std::string_view needle);

// NormalizedString::split: the behavior folds matches into pieces, appended to `out`.
void splitPiece(const Piece& p, std::vector<Span> spans, Behavior behavior, std::vector<Piece>& out);

// Applies f(piece, out) to every piece that is not yet a token.
template <typename F>
void splitEach(std::vector<Piece>& pieces, F f)
{
    std::vector<Piece> out;
    out.reserve(pieces.size() * 2);
    for (auto& p : pieces) {
        if (p.id >= 0) out.push_back(std::move(p));
        else f(p, out);
    }
    pieces = std::move(out);
}

// A Split or Replace pattern: {"String": s} or {"Regex": r}.
struct Pattern {
    std::string literal;
    std::shared_ptr<Regex> regex;

    Pattern(const nlohmann::json& j, const std::string& at);
    std::vector<Span> spans(std::string_view s) const;
    std::string replaceAll(std::string_view s, std::string_view content) const;
};

} // namespace tb::text
