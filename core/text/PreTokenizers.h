#pragma once
// The pre-tokenizer stage of a tokenizer.json (tokenizers' pre_tokenizers):
// ByteLevel, Split, Metaspace, Digits and Sequence, and what the decoders
// share with them (the byte-level alphabet, Metaspace's prepend scheme).
// Internal to tb_text.

#include <array>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "text/Pieces.h"

namespace tb::text {

class PreTokenizer {
public:
    virtual ~PreTokenizer() = default;
    // Splits the pieces that are not tokens yet.
    virtual void apply(std::vector<Piece>& pieces) const = 0;
};
using PreTokenizerPtr = std::unique_ptr<PreTokenizer>;

// From a tokenizer.json's "pre_tokenizer"; `at` names it in messages.
PreTokenizerPtr makePreTokenizer(const nlohmann::json& j, const std::string& at, int depth = 0);

// GPT-2's byte-level alphabet: byte -> its character (UTF-8).
const std::array<std::string, 256>& byteToUnicode();
// Code point -> byte for the byte-level alphabet; -1 outside it.
const std::array<int, 324>& unicodeToByte();

enum class MetaspacePrepend { Always, First, Never };
// Metaspace's prepend_scheme (and the older add_prefix_space) of a pre-tokenizer or decoder.
MetaspacePrepend prependSchemeFrom(const nlohmann::json& j, const std::string& at);

} // namespace tb::text
