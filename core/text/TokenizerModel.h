#pragma once
// The model stage of a tokenizer (Hugging Face tokenizers' Model trait): text
// the pre-tokenizer left -> ids, and ids back to the strings the decoder
// stage joins. Its variants: Bpe (a tokenizer.json's BPE model) and
// SentencePieceModel (a tokenizer.model run by libsentencepiece). Internal
// to tb_text.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tb::text {

class TokenizerModel {
public:
    virtual ~TokenizerModel() = default;

    // Appends the ids of one stretch of text: a pre-tokenized word (BPE), or
    // the text between two added tokens (SentencePiece, which has no
    // pre-tokenizer and adds its own dummy-prefix space to each stretch).
    virtual void tokenize(std::string_view text, std::vector<std::int32_t>& ids) const = 0;

    virtual std::optional<std::int32_t> tokenToId(std::string_view token) const = 0;
    virtual std::optional<std::string> idToToken(std::int32_t id) const = 0;
    // Whether `id` is one of the model's own ids.
    virtual bool hasId(std::int32_t id) const = 0;
    // A run of the model's own ids (hasId, no added token among them) as the
    // strings the decoder stage takes: one token per id (BPE), or the run's
    // text (SentencePiece decodes a run as a whole: byte pieces, the dummy
    // prefix).
    virtual void decodeRun(std::span<const std::int32_t> ids, std::vector<std::string>& out) const = 0;
    // The largest id of the model plus one.
    virtual std::int32_t idLimit() const = 0;
    // The ids a tokenizer with this model has, for "not in the vocabulary"
    // messages; `tokenizerLimit` counts the added tokens too.
    virtual std::string describeIds(std::int32_t tokenizerLimit) const = 0;
};

} // namespace tb::text
