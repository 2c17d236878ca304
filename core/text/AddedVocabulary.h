#pragma once
// The added vocabulary of a tokenizer (tokenizers' AddedVocabulary): tokens
// beside the model's (special tokens such as "<s>", chat markers), found in
// the input before the model sees it. Tokens with `normalized` false are
// matched on the raw input, the others on the normalizer's output.
// Internal to tb_text.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "text/Pieces.h"

namespace tb::text {

struct AddedToken {
    std::string content;
    std::string pattern; // what is matched: content, or its normalised form for normalized tokens
    std::int32_t id = 0;
    bool special = false, normalized = true, lstrip = false, rstrip = false, singleWord = false;
};

// Leftmost-longest matching of a set of strings (a byte trie).
class TokenTrie final {
public:
    void add(const std::string& s, std::size_t value);
    bool empty() const { return m_nodes.empty(); }
    // The leftmost-longest match at or after `from`: {start, end, value}.
    bool find(std::string_view s, std::size_t from, std::size_t& start, std::size_t& end, std::size_t& value) const;

private:
    struct Node {
        std::int64_t value = -1;
    };
    std::vector<Node> m_nodes;
    std::unordered_map<std::uint64_t, std::size_t> m_edges;
    std::array<bool, 256> m_first{};
};

class AddedVocabulary final {
public:
    // Adds `t`, or replaces the token that already has its id, as
    // tokenizers' add_tokens does. Its content is special from then on when
    // `t.special`.
    void add(const AddedToken& t);
    // Builds the matchers: call once, after the last add.
    void finish();

    // Splits the added tokens out of the pieces that are not tokens yet:
    // those matched on the raw input (before the normalizer), or on the
    // normalizer's output (after it).
    void splitRaw(std::vector<Piece>& pieces) const { split(pieces, m_rawTrie); }
    void splitNormalized(std::vector<Piece>& pieces) const { split(pieces, m_normalizedTrie); }

    bool contains(std::string_view content) const;
    std::optional<std::int32_t> idOf(std::string_view content) const;
    const AddedToken* byId(std::int32_t id) const;
    // Whether `text` is the content of a special token (decode's
    // skip_special_tokens asks about a token's text, as tokenizers does).
    bool isSpecialContent(std::string_view text) const;
    // The length of the longest special token's content that starts `text` (0: none).
    std::size_t specialTokenAt(std::string_view text) const;
    // The largest id plus one; 0 when there are no added tokens.
    std::int32_t idLimit() const;

private:
    void split(std::vector<Piece>& pieces, const TokenTrie& trie) const;

    std::vector<AddedToken> m_tokens;
    std::unordered_map<std::int32_t, std::size_t> m_byId;
    std::unordered_map<std::string, std::int32_t> m_byContent;
    std::unordered_set<std::string> m_specialContents;
    TokenTrie m_rawTrie, m_normalizedTrie;
};

} // namespace tb::text
