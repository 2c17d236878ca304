#pragma once
// The BPE model of a tokenizer.json (Hugging Face tokenizers' models::bpe):
// characters to ids, merges by rank, byte fallback, unknown-token fusing,
// ignore_merges, and a cache of whole words. One variant of the model stage.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "text/TokenizerModel.h"

namespace tb::text {

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

class Bpe final : public TokenizerModel {
public:
    // `where` names the file for messages.
    Bpe(const nlohmann::json& model, const std::string& where);

    // Appends the ids of one pre-tokenized word.
    void tokenize(std::string_view word, std::vector<std::int32_t>& out) const override;

    std::optional<std::int32_t> tokenToId(std::string_view token) const override;
    std::optional<std::string> idToToken(std::int32_t id) const override;
    bool hasId(std::int32_t id) const override { return tokenAt(id) != nullptr; }
    // One token per id: the decoder stage works on the tokens.
    void decodeRun(std::span<const std::int32_t> ids, std::vector<std::string>& out) const override;
    // The largest id in the vocabulary plus one.
    std::int32_t idLimit() const override { return std::int32_t(m_vocabR.size()); }
    std::string describeIds(std::int32_t tokenizerLimit) const override;
    // Entries in the vocabulary: added tokens new to it are numbered from here.
    std::size_t vocabSize() const { return m_vocab.size(); }

private:
    const std::string* tokenAt(std::int32_t id) const;
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
