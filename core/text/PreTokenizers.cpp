#include "text/PreTokenizers.h"

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "text/JsonFields.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace tb::text {
namespace {

using json = nlohmann::json;

struct ByteLevelPreTokenizer final : PreTokenizer {
    bool addPrefixSpace = true;
    bool useRegex = true;
    std::shared_ptr<Regex> regex;

    void apply(std::vector<Piece>& pieces) const override
    {
        splitEach(pieces, [&](Piece& p, std::vector<Piece>& out) {
            // A char, not " ": GCC 12 warns (-Wrestrict) falsely on insert(0, " ") here.
            if (addPrefixSpace && (p.text.empty() || p.text[0] != ' ')) p.text.insert(p.text.begin(), ' ');
            if (useRegex) splitPiece(p, spansFromMatches(p.text, regex->findAll(p.text)), Behavior::Isolated, out);
            else if (!p.text.empty()) out.push_back(std::move(p));
        });
        const auto& table = byteToUnicode();
        for (auto& p : pieces) {
            if (p.id >= 0) continue;
            std::string mapped;
            mapped.reserve(p.text.size() * 2);
            for (const char c : p.text) mapped += table[static_cast<unsigned char>(c)];
            p.text = std::move(mapped);
        }
    }
};

struct SplitPreTokenizer final : PreTokenizer {
    std::unique_ptr<Pattern> pattern;
    Behavior behavior = Behavior::Isolated;
    bool invert = false;
    void apply(std::vector<Piece>& pieces) const override
    {
        splitEach(pieces, [&](Piece& p, std::vector<Piece>& out) {
            auto spans = pattern->spans(p.text);
            if (invert)
                for (auto& s : spans) s.flag = !s.flag;
            splitPiece(p, std::move(spans), behavior, out);
        });
    }
};

struct MetaspacePreTokenizer final : PreTokenizer {
    char32_t replacement = U'\u2581';
    std::string rep;
    MetaspacePrepend prepend = MetaspacePrepend::Always;
    bool split = true;
    void apply(std::vector<Piece>& pieces) const override
    {
        splitEach(pieces, [&](Piece& p, std::vector<Piece>& out) {
            std::string s;
            s.reserve(p.text.size() + 3);
            for (const char c : p.text) {
                if (c == ' ') s += rep;
                else s.push_back(c);
            }
            const bool startsWithRep = s.compare(0, rep.size(), rep) == 0;
            if ((prepend == MetaspacePrepend::Always && !startsWithRep) ||
                (prepend == MetaspacePrepend::First && !startsWithRep && p.atStart))
                s.insert(0, rep);
            p.text = std::move(s);
            if (split) splitPiece(p, spansFromChars(p.text, [&](char32_t c) { return c == replacement; }), Behavior::MergedWithNext, out);
            else if (!p.text.empty()) out.push_back(std::move(p));
        });
    }
};

struct DigitsPreTokenizer final : PreTokenizer {
    bool individual = false;
    void apply(std::vector<Piece>& pieces) const override
    {
        splitEach(pieces, [&](Piece& p, std::vector<Piece>& out) {
            splitPiece(p, spansFromChars(p.text, isNumeric), individual ? Behavior::Isolated : Behavior::Contiguous, out);
        });
    }
};

struct SequencePreTokenizer final : PreTokenizer {
    std::vector<PreTokenizerPtr> parts;
    void apply(std::vector<Piece>& pieces) const override
    {
        for (const auto& p : parts) p->apply(pieces);
    }
};

Behavior behaviorFrom(const json& j, const std::string& at)
{
    const std::string& b = stringField(j, "behavior", at);
    if (b == "Removed") return Behavior::Removed;
    if (b == "Isolated") return Behavior::Isolated;
    if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
    if (b == "MergedWithNext") return Behavior::MergedWithNext;
    if (b == "Contiguous") return Behavior::Contiguous;
    throw InputError(at + ".behavior \"" + clipForMessage(b) +
                     "\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

PreTokenizerPtr makeByteLevel(const json& j, const std::string& here)
{
    auto p = std::make_unique<ByteLevelPreTokenizer>();
    p->addPrefixSpace = boolField(j, "add_prefix_space", true, here);
    p->useRegex = boolField(j, "use_regex", true, here);
    if (p->useRegex) {
        static const auto gpt2 = std::make_shared<Regex>(
            R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", "the ByteLevel regex");
        p->regex = gpt2;
    }
    return p;
}

PreTokenizerPtr makeSplit(const json& j, const std::string& here)
{
    auto p = std::make_unique<SplitPreTokenizer>();
    if (!j.contains("pattern")) throw InputError(here + ".pattern is missing");
    p->pattern = std::make_unique<Pattern>(j.at("pattern"), here + ".pattern");
    p->behavior = behaviorFrom(j, here);
    p->invert = boolField(j, "invert", false, here);
    return p;
}

PreTokenizerPtr makeMetaspace(const json& j, const std::string& here)
{
    auto p = std::make_unique<MetaspacePreTokenizer>();
    p->replacement = charField(j, "replacement", here);
    appendUtf8(p->rep, p->replacement);
    p->prepend = prependSchemeFrom(j, here);
    p->split = boolField(j, "split", true, here);
    return p;
}

} // namespace

const std::array<std::string, 256>& byteToUnicode()
{
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        std::array<bool, 256> direct{};
        for (int b = '!'; b <= '~'; ++b) direct[std::size_t(b)] = true;
        for (int b = 0xA1; b <= 0xAC; ++b) direct[std::size_t(b)] = true;
        for (int b = 0xAE; b <= 0xFF; ++b) direct[std::size_t(b)] = true;
        char32_t n = 0;
        for (int b = 0; b < 256; ++b) {
            const char32_t c = direct[std::size_t(b)] ? char32_t(b) : 256 + n++;
            appendUtf8(t[std::size_t(b)], c);
        }
        return t;
    }();
    return table;
}

const std::array<int, 324>& unicodeToByte()
{
    static const std::array<int, 324> table = [] {
        std::array<int, 324> t;
        t.fill(-1);
        const auto& forward = byteToUnicode();
        for (int b = 0; b < 256; ++b) {
            std::size_t i = 0;
            t[nextCodePoint(forward[std::size_t(b)], i)] = b;
        }
        return t;
    }();
    return table;
}

MetaspacePrepend prependSchemeFrom(const json& j, const std::string& at)
{
    using P = MetaspacePrepend;
    P scheme = P::Always;
    if (const auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
        const std::string s = it->is_string() ? it->get<std::string>() : "";
        if (s == "always") scheme = P::Always;
        else if (s == "first") scheme = P::First;
        else if (s == "never") scheme = P::Never;
        else throw InputError(at + ".prepend_scheme must be \"always\", \"first\" or \"never\"");
    }
    if (const auto it = j.find("add_prefix_space"); it != j.end() && it->is_boolean() && !it->get<bool>()) {
        if (scheme != P::Never && j.contains("prepend_scheme"))
            throw InputError(at + ": add_prefix_space false does not match prepend_scheme");
        scheme = P::Never;
    }
    return scheme;
}

PreTokenizerPtr makePreTokenizer(const json& j, const std::string& at, int depth)
{
    checkDepth(depth, at);
    const std::string type = typeOf(j, at);
    const std::string here = at + " (" + type + ")";
    if (type == "ByteLevel") return makeByteLevel(j, here);
    if (type == "Split") return makeSplit(j, here);
    if (type == "Metaspace") return makeMetaspace(j, here);
    if (type == "Digits") {
        auto p = std::make_unique<DigitsPreTokenizer>();
        p->individual = boolField(j, "individual_digits", false, here);
        return p;
    }
    if (type == "Sequence") {
        auto p = std::make_unique<SequencePreTokenizer>();
        readSequenceParts(j, "pretokenizers", here, at, depth, p->parts,
                          [](const auto& part, const std::string& path, int d) { return makePreTokenizer(part, path, d); });
        return p;
    }
    throw InputError(at + ": the pre-tokenizer \"" + clipForMessage(type) +
                     "\" is not supported (supported: ByteLevel, Split, Metaspace, Digits, Sequence)");
}

} // namespace tb::text
