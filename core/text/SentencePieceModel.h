#pragma once
// A SentencePiece tokenizer.model (Llama 2, Mistral and TinyLlama folders that
// ship no tokenizer.json), run by Debian's libsentencepiece: the model stage's
// SentencePiece variant. Its tokenizer has no normalizer or pre-tokenizer
// (the library normalises and splits itself); the added vocabulary splits
// special tokens out first (SentencePiece does not recognise "<s>" in text)
// and hands it the text between them.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/TokenizerModel.h"

namespace tb::text {

class SentencePieceModel final : public TokenizerModel {
public:
    // Throws InputError naming the file when it cannot be read as a
    // SentencePiece model, or when this build has no SentencePiece.
    static std::shared_ptr<const SentencePieceModel> load(const std::filesystem::path& file);
    ~SentencePieceModel() override;

    void tokenize(std::string_view text, std::vector<std::int32_t>& ids) const override;
    std::optional<std::int32_t> tokenToId(std::string_view piece) const override;
    std::optional<std::string> idToToken(std::int32_t id) const override;
    bool hasId(std::int32_t id) const override { return id >= 0 && id < size(); }
    // The run's text, decoded by the library as a whole.
    void decodeRun(std::span<const std::int32_t> ids, std::vector<std::string>& out) const override;
    std::int32_t idLimit() const override { return size(); }
    std::string describeIds(std::int32_t tokenizerLimit) const override;

    std::int32_t size() const;
    // Control symbols (<s>, </s>) and the unknown piece: special tokens.
    bool isControlOrUnknown(std::int32_t id) const;
    // The model's own BOS and EOS (its trainer's bos_id, eos_id); -1 when it has none.
    std::int32_t bos() const;
    std::int32_t eos() const;

    struct Impl;

private:
    explicit SentencePieceModel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m;
};

} // namespace tb::text
