#pragma once
// The BPE model of a tokenizer.json (Hugging Face tokenizers' models::bpe):
// characters to ids, merges by rank, byte fallback, unknown-token fusing,
// ignore_merges, and a cache of whole words.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tb::text {

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

class Bpe final {
public:
    // `where` names the file for messages.
    Bpe(const nlohmann::json& model, const std::string& where);

    // Appends the ids of one pre-tokenized word.
    void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;

    std::optional<std::int32_t> tokenToId(std::string_view token) const;
    const std::string* idToToken(std::int32_t id) const;
    std::size_t vocabSize() const { return m_vocab.size(); }
    // The largest id in the vocabulary plus one.
    std::int32_t idLimit() const { return std::int32_t(m_vocabR.size()); }

private:
    void mergeWord(std::string_view word, std::vector<std::int32_t>& out) const;

    Vocab m_vocab;
    std::vector<const std::string*> m_vocabR;
    std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::int32_t>> m_merges; // (a,b) -> (rank, new id)
    std::optional<std::string> m_unkToken;
    std::optional<std::string> m_prefix; // continuing_subword_prefix
    std::optional<std::string> m_suffix; // end_of_word_suffix
    bool m_fuseUnk = false;
    bool m_byteFallback = false;
    bool m_ignoreMerges = false;
    std::int32_t m_byteIds[256];

    mutable std::mutex m_cacheMutex;
    mutable std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>> m_cache;
};

} // namespace tb::text
