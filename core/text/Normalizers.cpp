#include "text/Normalizers.h"

#include <nlohmann/json.hpp>

#include <vector>

#include "common/Errors.h"
#include "text/JsonFields.h"
#include "text/Pieces.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace tb::text {
namespace {

using json = nlohmann::json;

struct UnicodeNormalizer final : Normalizer {
    NormalForm form;
    explicit UnicodeNormalizer(NormalForm f) : form(f) {}
    void apply(std::string& s) const override { s = normalize(s, form); }
};

struct PrependNormalizer final : Normalizer {
    std::string prefix;
    void apply(std::string& s) const override
    {
        if (!s.empty()) s.insert(0, prefix);
    }
};

struct ReplaceNormalizer final : Normalizer {
    Pattern pattern;
    std::string content;
    ReplaceNormalizer(const json& j, const std::string& at) : pattern(j.at("pattern"), at + ".pattern"), content(stringField(j, "content", at)) {}
    void apply(std::string& s) const override { s = pattern.replaceAll(s, content); }
};

struct LowercaseNormalizer final : Normalizer {
    void apply(std::string& s) const override
    {
        std::string out;
        out.reserve(s.size());
        for (std::size_t i = 0; i < s.size();) appendLowercase(out, nextCodePoint(s, i));
        s = std::move(out);
    }
};

struct StripNormalizer final : Normalizer {
    bool left = true, right = true;
    void apply(std::string& s) const override { s = stripWhiteSpace(s, left, right); }
};

struct StripAccentsNormalizer final : Normalizer {
    void apply(std::string& s) const override
    {
        std::string out;
        out.reserve(s.size());
        for (std::size_t i = 0; i < s.size();) {
            const char32_t c = nextCodePoint(s, i);
            if (!isCombiningMark(c)) appendUtf8(out, c);
        }
        s = std::move(out);
    }
};

struct SequenceNormalizer final : Normalizer {
    std::vector<NormalizerPtr> parts;
    void apply(std::string& s) const override
    {
        for (const auto& n : parts) n->apply(s);
    }
};

} // namespace

NormalizerPtr makeNormalizer(const json& j, const std::string& at, int depth)
{
    checkDepth(depth, at);
    const std::string type = typeOf(j, at);
    const std::string here = at + " (" + type + ")";
    if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFC);
    if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFD);
    if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKC);
    if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKD);
    if (type == "Prepend") {
        auto n = std::make_unique<PrependNormalizer>();
        n->prefix = stringField(j, "prepend", here);
        return n;
    }
    if (type == "Replace") {
        if (!j.contains("pattern")) throw InputError(here + ".pattern is missing");
        return std::make_unique<ReplaceNormalizer>(j, here);
    }
    if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
    if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
    if (type == "Strip") {
        auto n = std::make_unique<StripNormalizer>();
        n->left = boolField(j, "strip_left", true, here);
        n->right = boolField(j, "strip_right", true, here);
        return n;
    }
    if (type == "Sequence") {
        auto n = std::make_unique<SequenceNormalizer>();
        readSequenceParts(j, "normalizers", here, at, depth, n->parts,
                          [](const auto& part, const std::string& path, int d) { return makeNormalizer(part, path, d); });
        return n;
    }
    throw InputError(at + ": the normalizer \"" + clipForMessage(type) +
                     "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, Lowercase, Strip, StripAccents, Sequence)");
}

} // namespace tb::text
