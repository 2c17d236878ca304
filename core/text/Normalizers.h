#pragma once
// The normalizer stage of a tokenizer.json (tokenizers' normalizers): NFC,
// NFD, NFKC, NFKD, Prepend, Replace, Lowercase, Strip, StripAccents and
// Sequence. Internal to tb_text.

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tb::text {

class Normalizer {
public:
    virtual ~Normalizer() = default;
    virtual void apply(std::string& s) const = 0;
};
using NormalizerPtr = std::unique_ptr<Normalizer>;

// From a tokenizer.json's "normalizer"; `at` names it in messages.
NormalizerPtr makeNormalizer(const nlohmann::json& j, const std::string& at, int depth = 0);

} // namespace tb::text
