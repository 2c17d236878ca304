#include "text/Bpe.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <queue>

#include "common/Errors.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace tb::text {
namespace {

constexpr std::size_t kCacheCapacity = 10000; // as the Rust library's default
constexpr std::size_t kCacheMaxWord = 256;

std::optional<std::string> optionalString(const nlohmann::json& j, const char* key, const std::string& where)
{
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) throw InputError(where + ": model." + key + " must be a string or null");
    return it->get<std::string>();
}

bool optionalBool(const nlohmann::json& j, const char* key, const std::string& where)
{
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return false;
    if (!it->is_boolean()) throw InputError(where + ": model." + key + " must be true or false");
    return it->get<bool>();
}

std::uint64_t pairKey(std::int32_t a, std::int32_t b) { return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b); }

} // namespace

Bpe::Bpe(const nlohmann::json& model, const std::string& where)
{
    if (const auto d = model.find("dropout"); d != model.end() && !d->is_null()) {
        if (!d->is_number()) throw InputError(where + ": model.dropout must be a number or null");
        if (d->get<double>() != 0.0)
            throw InputError(where + ": BPE dropout (" + d->dump() +
                             ") makes tokenization random; Trainbench tokenizes deterministically. Set model.dropout to null.");
    }
    m_unkToken = optionalString(model, "unk_token", where);
    m_prefix = optionalString(model, "continuing_subword_prefix", where);
    m_suffix = optionalString(model, "end_of_word_suffix", where);
    m_fuseUnk = optionalBool(model, "fuse_unk", where);
    m_byteFallback = optionalBool(model, "byte_fallback", where);
    m_ignoreMerges = optionalBool(model, "ignore_merges", where);

    const auto vocab = model.find("vocab");
    const auto merges = model.find("merges");
    if (vocab == model.end() || merges == model.end()) throw InputError(where + ": the BPE model lacks vocab or merges");
    if (!vocab->is_object()) throw InputError(where + ": model.vocab must be an object of token: id");
    if (!merges->is_array()) throw InputError(where + ": model.merges must be an array");
    m_vocab.reserve(vocab->size());
    std::int32_t maxId = -1;
    for (const auto& [token, id] : vocab->items()) {
        if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > 0x7FFFFFFF)
            throw InputError(where + ": model.vocab[\"" + clipForMessage(token) + "\"] is not an id (a non-negative integer)");
        const auto v = std::int32_t(id.get<long long>());
        m_vocab[token] = v;
        maxId = std::max(maxId, v);
    }
    if (maxId >= 0x4000000) throw InputError(where + ": model.vocab has an id above 67108864");
    m_vocabR.assign(std::size_t(maxId + 1), nullptr);
    for (const auto& [token, id] : m_vocab) m_vocabR[std::size_t(id)] = &token;

    const std::size_t prefixLen = m_prefix ? m_prefix->size() : 0;
    m_merges.reserve(merges->size() * 2);
    std::string a, b, merged;
    std::uint32_t rank = 0;
    for (const auto& m : *merges) {
        if (m.is_string()) {
            const auto& line = m.get_ref<const std::string&>();
            if (line.rfind("#version", 0) == 0) continue;
            const auto sp = line.find(' ');
            if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
                throw InputError(where + ": merge " + std::to_string(rank + 1) + " (\"" + clipForMessage(line) +
                                 "\") is not two tokens separated by one space");
            a = line.substr(0, sp);
            b = line.substr(sp + 1);
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            a = m[0].get<std::string>();
            b = m[1].get<std::string>();
        } else {
            throw InputError(where + ": merge " + std::to_string(rank + 1) + " is neither \"a b\" nor [\"a\", \"b\"]");
        }
        const auto ia = m_vocab.find(a), ib = m_vocab.find(b);
        if (ia == m_vocab.end() || ib == m_vocab.end())
            throw InputError(where + ": merge " + std::to_string(rank + 1) + " uses \"" +
                             clipForMessage(ia == m_vocab.end() ? a : b) + "\", which is not in the vocabulary");
        if (b.size() < prefixLen) throw InputError(where + ": merge " + std::to_string(rank + 1) + " is shorter than its prefix");
        merged = a;
        merged.append(b, prefixLen, std::string::npos);
        const auto im = m_vocab.find(merged);
        if (im == m_vocab.end())
            throw InputError(where + ": merge " + std::to_string(rank + 1) + " makes \"" + clipForMessage(merged) +
                             "\", which is not in the vocabulary");
        m_merges[pairKey(ia->second, ib->second)] = {rank, im->second}; // a repeated pair keeps its last rank, as in the Rust library
        ++rank;
    }

    if (m_byteFallback) {
        char name[8];
        for (int byte = 0; byte < 256; ++byte) {
            std::snprintf(name, sizeof name, "<0x%02X>", byte);
            const auto it = m_vocab.find(std::string_view(name));
            m_byteIds[byte] = it == m_vocab.end() ? -1 : it->second;
        }
    }
}

std::optional<std::int32_t> Bpe::tokenToId(std::string_view token) const
{
    const auto it = m_vocab.find(token);
    if (it == m_vocab.end()) return std::nullopt;
    return it->second;
}

const std::string* Bpe::tokenAt(std::int32_t id) const
{
    if (id < 0 || std::size_t(id) >= m_vocabR.size()) return nullptr;
    return m_vocabR[std::size_t(id)];
}

std::optional<std::string> Bpe::idToToken(std::int32_t id) const
{
    if (const auto* t = tokenAt(id)) return *t;
    return std::nullopt;
}

void Bpe::decodeRun(std::span<const std::int32_t> ids, std::vector<std::string>& out) const
{
    for (const auto id : ids) out.push_back(*tokenAt(id));
}

std::string Bpe::describeIds(std::int32_t tokenizerLimit) const
{
    return "ids run from 0 to " + std::to_string(tokenizerLimit - 1);
}

void Bpe::tokenize(std::string_view word, std::vector<std::int32_t>& out) const
{
    if (word.empty()) return;
    if (m_ignoreMerges) {
        if (const auto it = m_vocab.find(word); it != m_vocab.end()) {
            out.push_back(it->second);
            return;
        }
    }
    if (word.size() < kCacheMaxWord) {
        std::lock_guard lock(m_cacheMutex);
        if (const auto it = m_cache.find(word); it != m_cache.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    const std::size_t first = out.size();
    mergeWord(word, out);
    if (word.size() < kCacheMaxWord) {
        std::lock_guard lock(m_cacheMutex);
        if (m_cache.size() < kCacheCapacity)
            m_cache.emplace(std::string(word), std::vector<std::int32_t>(out.begin() + std::ptrdiff_t(first), out.end()));
    }
}

void Bpe::mergeWord(std::string_view w, std::vector<std::int32_t>& out) const
{
    struct Symbol {
        std::int32_t c;
        std::int32_t prev;
        std::int32_t next;
        std::size_t len;
    };
    std::vector<Symbol> symbols;
    symbols.reserve(w.size());
    auto add = [&](std::int32_t id, std::size_t len) {
        const auto n = std::int32_t(symbols.size());
        if (n > 0) symbols.back().next = n;
        symbols.push_back({id, n - 1, -1, len});
    };

    bool haveUnk = false; // a pending unknown token, fused over unknown characters with fuse_unk
    std::int32_t unkId = 0;
    std::size_t unkLen = 0;
    std::string s;
    std::size_t i = 0;
    while (i < w.size()) {
        const std::size_t start = i;
        const std::size_t len = utf8Length(static_cast<unsigned char>(w[i]));
        i = std::min(w.size(), start + len);
        const bool isFirst = start == 0, isLast = i >= w.size();
        std::string_view piece = w.substr(start, i - start);
        if ((!isFirst && m_prefix && !m_prefix->empty()) || (isLast && m_suffix && !m_suffix->empty())) {
            s.clear();
            if (!isFirst && m_prefix) s += *m_prefix;
            s += piece;
            if (isLast && m_suffix) s += *m_suffix;
            piece = s;
        }
        const std::size_t byteLen = i - start;
        if (const auto it = m_vocab.find(piece); it != m_vocab.end()) {
            if (haveUnk) {
                add(unkId, unkLen);
                haveUnk = false;
            }
            add(it->second, byteLen);
            continue;
        }
        if (m_byteFallback) {
            bool all = true;
            for (const char ch : piece)
                if (m_byteIds[static_cast<unsigned char>(ch)] < 0) {
                    all = false;
                    break;
                }
            if (all) {
                for (const char ch : piece) add(m_byteIds[static_cast<unsigned char>(ch)], 1);
                continue;
            }
        }
        if (m_unkToken) {
            const auto u = m_vocab.find(*m_unkToken);
            if (u == m_vocab.end())
                throw InputError("the tokenizer's unk_token \"" + clipForMessage(*m_unkToken) + "\" is not in its vocabulary");
            if (haveUnk && m_fuseUnk) {
                unkLen += byteLen;
            } else {
                if (haveUnk) add(unkId, unkLen);
                haveUnk = true;
                unkId = u->second;
                unkLen = byteLen;
            }
        }
    }
    if (haveUnk) add(unkId, unkLen);

    struct Merge {
        std::size_t pos;
        std::uint32_t rank;
        std::int32_t newId;
    };
    auto later = [](const Merge& x, const Merge& y) { return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos; };
    std::priority_queue<Merge, std::vector<Merge>, decltype(later)> queue(later);
    auto lookup = [&](std::int32_t a, std::int32_t b) -> const std::pair<std::uint32_t, std::int32_t>* {
        const auto it = m_merges.find(pairKey(a, b));
        return it == m_merges.end() ? nullptr : &it->second;
    };
    for (std::size_t k = 0; k + 1 < symbols.size(); ++k)
        if (const auto* m = lookup(symbols[k].c, symbols[k + 1].c)) queue.push({k, m->first, m->second});

    while (!queue.empty()) {
        const Merge top = queue.top();
        queue.pop();
        Symbol& cur = symbols[top.pos];
        if (cur.len == 0 || cur.next == -1) continue;
        const auto nextPos = std::size_t(cur.next);
        const Symbol right = symbols[nextPos];
        const auto* m = lookup(cur.c, right.c);
        if (!m || m->second != top.newId) continue; // a stale entry
        cur.c = top.newId;
        cur.len += right.len;
        cur.next = right.next;
        symbols[nextPos].len = 0;
        if (right.next > -1 && std::size_t(right.next) < symbols.size()) symbols[std::size_t(right.next)].prev = std::int32_t(top.pos);
        if (cur.prev >= 0) {
            const Symbol& p = symbols[std::size_t(cur.prev)];
            if (const auto* pm = lookup(p.c, cur.c)) queue.push({std::size_t(cur.prev), pm->first, pm->second});
        }
        if (cur.next >= 0 && std::size_t(cur.next) < symbols.size()) {
            const Symbol& n = symbols[std::size_t(cur.next)];
            if (const auto* nm = lookup(cur.c, n.c)) queue.push({top.pos, nm->first, nm->second});
        }
    }
    for (const auto& sym : symbols)
        if (sym.len != 0) out.push_back(sym.c);
}

} // namespace tb::text
