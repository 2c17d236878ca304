#pragma once
// The decoder stage (tokenizers' decoders): ByteLevel, ByteFallback, Fuse,
// Strip, Replace, Metaspace and Sequence, each a step of decode_chain over
// the tokens. Internal to tb_text.

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tb::text {

class Decoder {
public:
    virtual ~Decoder() = default;
    virtual std::vector<std::string> chain(std::vector<std::string> tokens) const = 0;
};
using DecoderPtr = std::unique_ptr<Decoder>;

// From a tokenizer.json's "decoder"; `at` names it in messages.
DecoderPtr makeDecoder(const nlohmann::json& j, const std::string& at, int depth = 0);
// Joins the tokens into one string (tokenizers' Fuse).
DecoderPtr makeFuseDecoder();

} // namespace tb::text
