#pragma once
// A SentencePiece tokenizer.model (Llama 2, Mistral and TinyLlama folders that
// ship no tokenizer.json), run by Debian's libsentencepiece. Internal to
// tb_text: Tokenizer splits special tokens out first (SentencePiece does not
// recognise "<s>" in text) and hands it the text between them.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tb::text {

class SentencePieceModel final {
public:
    // Throws InputError naming the file when it cannot be read as a
    // SentencePiece model, or when this build has no SentencePiece.
    static std::shared_ptr<const SentencePieceModel> load(const std::filesystem::path& file);
    ~SentencePieceModel();

    void encode(std::string_view text, std::vector<std::int32_t>& ids) const;
    // Ids of the model only (below size()).
    std::string decode(const std::vector<std::int32_t>& ids) const;
    std::int32_t size() const;
    std::optional<std::string> piece(std::int32_t id) const;
    std::optional<std::int32_t> id(std::string_view piece) const;
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
