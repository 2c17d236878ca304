#pragma once
// tokenizer_config.json, the file transformers writes beside a model's
// tokenizer: the one reader of it in Trainbench. Only the keys Trainbench
// uses are read; the others are left alone.
//
// One rule for values: a key that is missing or null takes its default; a
// key of the wrong kind (add_bos_token: "yes", bos_token: 5, chat_template:
// 3, ...) is an InputError "FILE: KEY must be ..., not ...". Nothing bad is
// passed over in silence.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tb::text {

struct TokenizerConfig {
    // One of bos_token, eos_token, unk_token, pad_token: written as a string
    // or as {"content": "..."}. `declared` with no content: the key is null
    // (the model says it has none).
    struct SpecialToken {
        bool declared = false;
        std::optional<std::string> content;
    };
    // An entry of added_tokens_decoder ("ID": {"content": ..., "special": ...}).
    struct AddedTokenEntry {
        std::int32_t id = 0;
        std::string content;
        bool special = false, lstrip = false, rstrip = false;
    };

    // The file read; empty when the folder has none (every field its default).
    std::filesystem::path file;
    // Its bytes (content hashes of tokenizers read with it include them).
    std::string text;

    // In the order of their keys as strings ("10" before "2"), as the file
    // was always read.
    std::vector<AddedTokenEntry> addedTokens;
    std::optional<bool> addBosToken, addEosToken;
    SpecialToken bosToken, eosToken, unkToken, padToken;
    // "chat_template": the string, or of a list of {"name", "template"} the
    // one named "default"; none when the key is missing, null, or the list
    // has no default.
    std::optional<std::string> chatTemplate;

    // The four special tokens by key, in the order transformers lists them.
    std::vector<std::pair<const char*, const SpecialToken*>> specialTokens() const;
};

// DIR/tokenizer_config.json; a default TokenizerConfig (empty `file`) when
// the folder has none. Throws InputError naming the file when it is larger
// than 64 MiB, not JSON, not an object, or a key holds a bad value.
TokenizerConfig readTokenizerConfig(const std::filesystem::path& dir);
// The same, from the text of a tokenizer_config.json; `file` names it in messages.
TokenizerConfig parseTokenizerConfig(std::string text, const std::filesystem::path& file);

} // namespace tb::text
