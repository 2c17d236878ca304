#include "text/AddedVocabulary.h"

#include <algorithm>

#include "text/Unicode.h"

namespace tb::text {

void TokenTrie::add(const std::string& s, std::size_t value)
{
    if (s.empty()) return;
    if (m_nodes.empty()) m_nodes.emplace_back();
    std::size_t node = 0;
    for (const char c : s) {
        const auto key = (std::uint64_t(node) << 8) | static_cast<unsigned char>(c);
        const auto it = m_edges.find(key);
        if (it != m_edges.end()) node = it->second;
        else {
            m_nodes.emplace_back();
            m_edges.emplace(key, m_nodes.size() - 1);
            node = m_nodes.size() - 1;
        }
    }
    m_nodes[node].value = std::int64_t(value);
    m_first[static_cast<unsigned char>(s[0])] = true;
}

bool TokenTrie::find(std::string_view s, std::size_t from, std::size_t& start, std::size_t& end, std::size_t& value) const
{
    for (std::size_t i = from; i < s.size(); ++i) {
        if (!m_first[static_cast<unsigned char>(s[i])]) continue;
        std::size_t node = 0;
        std::int64_t best = -1;
        std::size_t bestEnd = 0;
        for (std::size_t k = i; k < s.size(); ++k) {
            const auto it = m_edges.find((std::uint64_t(node) << 8) | static_cast<unsigned char>(s[k]));
            if (it == m_edges.end()) break;
            node = it->second;
            if (m_nodes[node].value >= 0) {
                best = m_nodes[node].value;
                bestEnd = k + 1;
            }
        }
        if (best >= 0) {
            start = i;
            end = bestEnd;
            value = std::size_t(best);
            return true;
        }
    }
    return false;
}

namespace {

bool endsWithWord(std::string_view s)
{
    if (s.empty()) return false;
    std::size_t st = s.size() - 1;
    while (st > 0 && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
    return isWordChar(nextCodePoint(s, st));
}

bool startsWithWord(std::string_view s)
{
    if (s.empty()) return false;
    std::size_t i = 0;
    return isWordChar(nextCodePoint(s, i));
}

// The start of the white space that ends s[0, end).
std::size_t whiteSpaceBefore(std::string_view s, std::size_t end)
{
    std::size_t ns = end;
    while (ns > 0) {
        std::size_t cs = ns - 1;
        while (cs > 0 && (static_cast<unsigned char>(s[cs]) & 0xC0) == 0x80) --cs;
        std::size_t i = cs;
        if (!isWhiteSpace(nextCodePoint(s, i))) break;
        ns = cs;
    }
    return ns;
}

// The end of the white space that starts s[start, ...).
std::size_t whiteSpaceAfter(std::string_view s, std::size_t start)
{
    std::size_t i = start;
    while (i < s.size()) {
        std::size_t k = i;
        if (!isWhiteSpace(nextCodePoint(s, k))) break;
        i = k;
    }
    return i;
}

} // namespace

void AddedVocabulary::add(const AddedToken& t)
{
    m_byContent[t.content] = t.id;
    if (t.special) m_specialContents.insert(t.content);
    if (const auto it = m_byId.find(t.id); it != m_byId.end()) m_tokens[it->second] = t;
    else {
        m_byId[t.id] = m_tokens.size();
        m_tokens.push_back(t);
    }
}

void AddedVocabulary::finish()
{
    for (std::size_t i = 0; i < m_tokens.size(); ++i) {
        const auto& t = m_tokens[i];
        if (t.normalized) m_normalizedTrie.add(t.pattern, i);
        else m_rawTrie.add(t.content, i);
    }
}

void AddedVocabulary::split(std::vector<Piece>& pieces, const TokenTrie& trie) const
{
    if (trie.empty()) return;
    splitEach(pieces, [&](Piece& p, std::vector<Piece>& out) {
        const std::string_view s = p.text;
        std::size_t startOffset = 0, from = 0, st = 0, en = 0, index = 0;
        while (trie.find(s, from, st, en, index)) {
            from = en;
            const AddedToken& t = m_tokens[index];
            if (t.singleWord) {
                const bool startSpace = st == 0 || !endsWithWord(s.substr(0, st));
                const bool stopSpace = en == s.size() || !startsWithWord(s.substr(en));
                if (!startSpace || !stopSpace) continue;
            }
            if (t.lstrip) st = std::max(whiteSpaceBefore(s, st), startOffset);
            if (t.rstrip) from = en = whiteSpaceAfter(s, en);
            if (startOffset < st) out.push_back({p.text.substr(startOffset, st - startOffset), p.atStart && startOffset == 0, -1});
            out.push_back({p.text.substr(st, en - st), p.atStart && st == 0, t.id});
            startOffset = en;
        }
        if (startOffset < s.size()) out.push_back({p.text.substr(startOffset), p.atStart && startOffset == 0, -1});
    });
}

bool AddedVocabulary::contains(std::string_view content) const { return m_byContent.count(std::string(content)) > 0; }

std::optional<std::int32_t> AddedVocabulary::idOf(std::string_view content) const
{
    if (const auto it = m_byContent.find(std::string(content)); it != m_byContent.end()) return it->second;
    return std::nullopt;
}

const AddedToken* AddedVocabulary::byId(std::int32_t id) const
{
    const auto it = m_byId.find(id);
    return it == m_byId.end() ? nullptr : &m_tokens[it->second];
}

bool AddedVocabulary::isSpecialContent(std::string_view text) const { return m_specialContents.count(std::string(text)) > 0; }

std::size_t AddedVocabulary::specialTokenAt(std::string_view text) const
{
    std::size_t best = 0;
    for (const auto& content : m_specialContents)
        if (content.size() > best && text.substr(0, content.size()) == content) best = content.size();
    return best;
}

std::int32_t AddedVocabulary::idLimit() const
{
    std::int32_t limit = 0;
    for (const auto& t : m_tokens) limit = std::max(limit, t.id + 1);
    return limit;
}

} // namespace tb::text
