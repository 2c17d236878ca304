#pragma once
// A Hugging Face tokenizer.json, run in C++ with the ids Hugging Face's own
// `tokenizers` library gives: added tokens split out first, then the
// normalizer, pre-tokenizer, model, post-processor; the decoder back
// (TokenizerPipeline.h). The model is BPE; Unigram and WordPiece models are
// refused by name. A folder with only a SentencePiece tokenizer.model runs
// the same pipeline with libsentencepiece as the model, tokenizer_config.json
// (TokenizerConfig.h) giving its added tokens and BOS/EOS.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tb::text {

class Tokenizer final {
public:
    // Reads a tokenizer.json (or a SentencePiece FILE.model). Throws
    // InputError naming the file and what is wrong or unsupported.
    static Tokenizer fromFile(const std::filesystem::path& file);
    // A SentencePiece tokenizer.model, with tokenizer_config.json beside it
    // when there is one: its added_tokens_decoder, add_bos_token (default
    // true) and add_eos_token (default false), bos_token and eos_token.
    // Special-token text (those, and SentencePiece's control and unknown
    // pieces) is split out before SentencePiece encodes the text between.
    static Tokenizer fromSentencePiece(const std::filesystem::path& file);
    // Reads the text of a tokenizer.json; `source` names it in messages.
    static Tokenizer fromJson(const std::string& text, const std::string& source);
    // The tokenizer of a model folder: DIR/tokenizer.json, else DIR/tokenizer.model.
    static Tokenizer fromModelFolder(const std::filesystem::path& dir);
    // Whether a model folder has a tokenizer Trainbench reads.
    static bool folderHasTokenizer(const std::filesystem::path& dir);
    // The file fromModelFolder reads: DIR/tokenizer.json, else
    // DIR/tokenizer.model; empty when the folder has neither.
    static std::filesystem::path folderTokenizerFile(const std::filesystem::path& dir);

    // Text -> ids. Special-token text in `text` becomes its token whether or
    // not `addSpecialTokens` is set; `addSpecialTokens` runs the
    // post-processor's template (BOS/EOS). Throws InputError when `text` is
    // not valid UTF-8, naming the byte offset.
    std::vector<std::int32_t> encode(std::string_view text, bool addSpecialTokens) const;
    // Ids -> text. Throws InputError naming an id that is not in the vocabulary.
    std::string decode(const std::vector<std::int32_t>& ids, bool skipSpecialTokens = false) const;

    std::optional<std::int32_t> tokenToId(std::string_view token) const;
    // The length of the longest special added token whose text starts `text` (0: none).
    std::size_t specialTokenAt(std::string_view text) const;
    std::optional<std::string> idToToken(std::int32_t id) const;
    bool isSpecial(std::int32_t id) const;
    // Ids run from 0 to vocabLimit() - 1 (model vocabulary and added tokens).
    std::int32_t vocabLimit() const;
    // The file it was read from, and a hash of its content (for cache keys).
    const std::string& source() const;
    const std::string& contentHash() const;

    ~Tokenizer();
    Tokenizer(const Tokenizer&);
    Tokenizer& operator=(const Tokenizer&);
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    struct Impl;

private:
    explicit Tokenizer(std::shared_ptr<const Impl> impl);
    std::shared_ptr<const Impl> m;
};

// Token ids as people type them: "1,15043,29892", "1 15043 29892" or
// "1, 15043" (commas, white space or both between ids). Throws InputError
// naming `what` and the first bad entry, counted from 1: not a non-negative
// integer, an empty entry between two commas, or an id at or above `limit`.
// Text with no ids (empty, or white space only) gives an empty list.
std::vector<std::int64_t> parseTokenIds(std::string_view text, const std::string& what, std::int64_t limit = 0x80000000LL);

// The special tokens a model folder declares (its chat template: text::readFolderChatTemplate): BOS and EOS
// from tokenizer_config.json (bos_token, eos_token), else config.json's or
// generation_config.json's bos_token_id / eos_token_id; -1 when none says.
struct FolderSpecialTokens {
    std::int32_t bos = -1;
    std::int32_t eos = -1;
};
FolderSpecialTokens readFolderSpecialTokens(const std::filesystem::path& dir, const Tokenizer& tokenizer);

} // namespace tb::text
