#include "text/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "common/Errors.h"
#include "text/Bpe.h"
#include "text/SentencePieceModel.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace tb::text {
namespace {

using json = nlohmann::json;
constexpr int kMaxDepth = 16;                                 // nested Sequence components
constexpr std::uintmax_t kMaxFileBytes = 2ull * 1024 * 1024 * 1024; // a tokenizer.json is tens of MB

// A stretch of the input on its way through the pipeline: plain text, or an
// added token already found (id >= 0). `atStart`: it begins where the
// original input begins (Metaspace's prepend_scheme "first" asks).
struct Piece {
    std::string text;
    bool atStart = false;
    std::int32_t id = -1;
};

// ---------------------------------------------------------------- splitting

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
    std::size_t start, end;
    bool flag; // is a match (before the behavior), or: remove (after it)
};

// Covers s with matches and the gaps between them (tokenizers' Pattern::find_matches).
std::vector<Span> spansFromMatches(std::string_view s, const std::vector<std::pair<std::size_t, std::size_t>>& matches)
{
    std::vector<Span> out;
    if (s.empty()) {
        out.push_back({0, 0, false});
        return out;
    }
    std::size_t prev = 0;
    for (const auto& [st, en] : matches) {
        if (prev != st) out.push_back({prev, st, false});
        out.push_back({st, en, true});
        prev = en;
    }
    if (prev != s.size()) out.push_back({prev, s.size(), false});
    return out;
}

template <typename Pred>
std::vector<Span> spansFromChars(std::string_view s, Pred isMatch)
{
    std::vector<Span> out;
    if (s.empty()) {
        out.push_back({0, 0, false});
        return out;
    }
    std::size_t lastOffset = 0, i = 0;
    while (i < s.size()) {
        const std::size_t b = i;
        const char32_t c = nextCodePoint(s, i);
        if (isMatch(c)) {
            if (lastOffset < b) out.push_back({lastOffset, b, false});
            out.push_back({b, i, true});
            lastOffset = i;
        }
    }
    if (s.size() > lastOffset) out.push_back({lastOffset, s.size(), false});
    return out;
}

std::vector<Span> literalSpans(std::string_view s, std::string_view needle)
{
    std::vector<std::pair<std::size_t, std::size_t>> matches;
    if (!needle.empty())
        for (std::size_t at = s.find(needle); at != std::string_view::npos; at = s.find(needle, at + needle.size()))
            matches.emplace_back(at, at + needle.size());
    return spansFromMatches(s, matches);
}

// NormalizedString::split: the behavior folds matches into pieces.
void splitPiece(const Piece& p, std::vector<Span> spans, Behavior behavior, std::vector<Piece>& out)
{
    std::vector<Span> pieces;
    switch (behavior) {
    case Behavior::Isolated:
        for (auto& s : spans) pieces.push_back({s.start, s.end, false});
        break;
    case Behavior::Removed:
        pieces = std::move(spans);
        break;
    case Behavior::Contiguous: {
        bool previous = false;
        for (const auto& s : spans) {
            if (s.flag == previous && !pieces.empty()) pieces.back().end = s.end;
            else pieces.push_back({s.start, s.end, false});
            previous = s.flag;
        }
        break;
    }
    case Behavior::MergedWithPrevious: {
        bool previous = false;
        for (const auto& s : spans) {
            if (s.flag && !previous && !pieces.empty()) pieces.back().end = s.end;
            else pieces.push_back({s.start, s.end, false});
            previous = s.flag;
        }
        break;
    }
    case Behavior::MergedWithNext: {
        bool previous = false;
        for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
            if (it->flag && !previous && !pieces.empty()) pieces.back().start = it->start;
            else pieces.push_back({it->start, it->end, false});
            previous = it->flag;
        }
        std::reverse(pieces.begin(), pieces.end());
        break;
    }
    }
    for (const auto& s : pieces) {
        if (s.flag || s.end <= s.start) continue; // removed, or empty (PreTokenizedString drops empties)
        out.push_back({p.text.substr(s.start, s.end - s.start), p.atStart && s.start == 0, -1});
    }
}

// Applies f(piece, out) to every piece that is not yet a token.
template <typename F>
void splitEach(std::vector<Piece>& pieces, F f)
{
    std::vector<Piece> out;
    out.reserve(pieces.size() * 2);
    for (auto& p : pieces) {
        if (p.id >= 0) out.push_back(std::move(p));
        else f(p, out);
    }
    pieces = std::move(out);
}

// ---------------------------------------------------------------- patterns

std::string where(const std::string& source, const std::string& path) { return source + ": " + path; }

const std::string& stringField(const json& j, const char* key, const std::string& at)
{
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) throw InputError(at + "." + key + " must be a string");
    return it->get_ref<const std::string&>();
}

bool boolField(const json& j, const char* key, bool fallback, const std::string& at)
{
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw InputError(at + "." + key + " must be true or false");
    return it->get<bool>();
}

char32_t charField(const json& j, const char* key, const std::string& at)
{
    const std::string& s = stringField(j, key, at);
    std::size_t i = 0;
    if (s.empty() || firstInvalidUtf8(s) != std::string::npos) throw InputError(at + "." + key + " must be one character");
    const char32_t c = nextCodePoint(s, i);
    if (i != s.size()) throw InputError(at + "." + key + " must be one character");
    return c;
}

// A Split or Replace pattern: {"String": s} or {"Regex": r}.
struct Pattern {
    std::string literal;
    std::shared_ptr<Regex> regex;

    Pattern(const json& j, const std::string& at)
    {
        if (!j.is_object() || j.size() != 1) throw InputError(at + " must be {\"String\": ...} or {\"Regex\": ...}");
        if (const auto s = j.find("String"); s != j.end() && s->is_string()) literal = s->get<std::string>();
        else if (const auto r = j.find("Regex"); r != j.end() && r->is_string()) regex = std::make_shared<Regex>(r->get<std::string>(), at);
        else throw InputError(at + " must be {\"String\": ...} or {\"Regex\": ...}");
    }
    std::vector<Span> spans(std::string_view s) const { return regex ? spansFromMatches(s, regex->findAll(s)) : literalSpans(s, literal); }
    std::string replaceAll(std::string_view s, std::string_view content) const
    {
        std::string out;
        for (const auto& sp : spans(s)) {
            if (sp.flag) out += content;
            else out.append(s.substr(sp.start, sp.end - sp.start));
        }
        return out;
    }
};

std::string typeOf(const json& j, const std::string& at)
{
    if (!j.is_object()) throw InputError(at + " must be an object");
    return stringField(j, "type", at);
}

// ---------------------------------------------------------------- normalizers

struct Normalizer {
    virtual ~Normalizer() = default;
    virtual void apply(std::string& s) const = 0;
};
using NormalizerPtr = std::unique_ptr<Normalizer>;

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

NormalizerPtr makeNormalizer(const json& j, const std::string& at, int depth)
{
    if (depth > kMaxDepth) throw InputError(at + ": Sequence nested deeper than " + std::to_string(kMaxDepth));
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
        const auto it = j.find("normalizers");
        if (it == j.end() || !it->is_array()) throw InputError(here + ".normalizers must be an array");
        auto n = std::make_unique<SequenceNormalizer>();
        for (std::size_t i = 0; i < it->size(); ++i)
            n->parts.push_back(makeNormalizer((*it)[i], at + ".normalizers[" + std::to_string(i) + "]", depth + 1));
        return n;
    }
    throw InputError(at + ": the normalizer \"" + clipForMessage(type) +
                     "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, Lowercase, Strip, StripAccents, Sequence)");
}

// ---------------------------------------------------------------- pre-tokenizers

struct PreTokenizer {
    virtual ~PreTokenizer() = default;
    virtual void apply(std::vector<Piece>& pieces) const = 0;
};
using PreTokenizerPtr = std::unique_ptr<PreTokenizer>;

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

// Code point -> byte for the byte-level alphabet; -1 outside it.
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

struct ByteLevelPreTokenizer final : PreTokenizer {
    bool addPrefixSpace = true;
    bool useRegex = true;
    std::shared_ptr<Regex> regex;

    void apply(std::vector<Piece>& pieces) const override
    {
        splitEach(pieces, [&](Piece& p, std::vector<Piece>& out) {
            if (addPrefixSpace && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
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
    enum class Prepend { Always, First, Never };
    char32_t replacement = U'\u2581';
    std::string rep;
    Prepend prepend = Prepend::Always;
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
            if ((prepend == Prepend::Always && !startsWithRep) || (prepend == Prepend::First && !startsWithRep && p.atStart))
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

MetaspacePreTokenizer::Prepend prependSchemeFrom(const json& j, const std::string& at)
{
    using P = MetaspacePreTokenizer::Prepend;
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
    if (depth > kMaxDepth) throw InputError(at + ": Sequence nested deeper than " + std::to_string(kMaxDepth));
    const std::string type = typeOf(j, at);
    const std::string here = at + " (" + type + ")";
    if (type == "ByteLevel") {
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
    if (type == "Split") {
        auto p = std::make_unique<SplitPreTokenizer>();
        if (!j.contains("pattern")) throw InputError(here + ".pattern is missing");
        p->pattern = std::make_unique<Pattern>(j.at("pattern"), here + ".pattern");
        p->behavior = behaviorFrom(j, here);
        p->invert = boolField(j, "invert", false, here);
        return p;
    }
    if (type == "Metaspace") {
        auto p = std::make_unique<MetaspacePreTokenizer>();
        p->replacement = charField(j, "replacement", here);
        appendUtf8(p->rep, p->replacement);
        p->prepend = prependSchemeFrom(j, here);
        p->split = boolField(j, "split", true, here);
        return p;
    }
    if (type == "Digits") {
        auto p = std::make_unique<DigitsPreTokenizer>();
        p->individual = boolField(j, "individual_digits", false, here);
        return p;
    }
    if (type == "Sequence") {
        const auto it = j.find("pretokenizers");
        if (it == j.end() || !it->is_array()) throw InputError(here + ".pretokenizers must be an array");
        auto p = std::make_unique<SequencePreTokenizer>();
        for (std::size_t i = 0; i < it->size(); ++i)
            p->parts.push_back(makePreTokenizer((*it)[i], at + ".pretokenizers[" + std::to_string(i) + "]", depth + 1));
        return p;
    }
    throw InputError(at + ": the pre-tokenizer \"" + clipForMessage(type) +
                     "\" is not supported (supported: ByteLevel, Split, Metaspace, Digits, Sequence)");
}

// ---------------------------------------------------------------- post-processors

struct PostProcessor {
    virtual ~PostProcessor() = default;
    virtual void apply(std::vector<std::int32_t>& ids, bool addSpecialTokens) const = 0;
};
using PostProcessorPtr = std::unique_ptr<PostProcessor>;

// The single-sequence template: special tokens around $A.
struct TemplatePostProcessor final : PostProcessor {
    std::vector<std::int32_t> before, after;
    void apply(std::vector<std::int32_t>& ids, bool addSpecialTokens) const override
    {
        if (!addSpecialTokens) return;
        ids.insert(ids.begin(), before.begin(), before.end());
        ids.insert(ids.end(), after.begin(), after.end());
    }
};

struct SequencePostProcessor final : PostProcessor {
    std::vector<PostProcessorPtr> parts;
    void apply(std::vector<std::int32_t>& ids, bool addSpecialTokens) const override
    {
        for (const auto& p : parts) p->apply(ids, addSpecialTokens);
    }
};

struct NoOpPostProcessor final : PostProcessor {
    void apply(std::vector<std::int32_t>&, bool) const override {}
};

std::int32_t idOfPair(const json& j, const char* key, const std::string& at)
{
    const auto it = j.find(key);
    if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer())
        throw InputError(at + "." + key + " must be [token, id]");
    return (*it)[1].get<std::int32_t>();
}

PostProcessorPtr makePostProcessor(const json& j, const std::string& at, int depth)
{
    if (depth > kMaxDepth) throw InputError(at + ": Sequence nested deeper than " + std::to_string(kMaxDepth));
    const std::string type = typeOf(j, at);
    const std::string here = at + " (" + type + ")";
    if (type == "ByteLevel") return std::make_unique<NoOpPostProcessor>(); // it only trims offsets
    if (type == "TemplateProcessing") {
        const auto single = j.find("single");
        if (single == j.end() || !single->is_array())
            throw InputError(here + ".single must be an array of {\"SpecialToken\": ...} and {\"Sequence\": ...}");
        const auto specials = j.find("special_tokens");
        auto p = std::make_unique<TemplatePostProcessor>();
        bool seenSequence = false;
        for (const auto& piece : *single) {
            if (piece.is_object() && piece.contains("Sequence")) {
                if (seenSequence) throw InputError(here + ".single has two sequences");
                seenSequence = true;
                continue;
            }
            if (!piece.is_object() || !piece.contains("SpecialToken") || !piece["SpecialToken"].is_object())
                throw InputError(here + ".single must be an array of {\"SpecialToken\": ...} and {\"Sequence\": ...}");
            const std::string& name = stringField(piece["SpecialToken"], "id", here + ".single[].SpecialToken");
            if (specials == j.end() || !specials->is_object() || !specials->contains(name))
                throw InputError(here + ": the special token \"" + clipForMessage(name) + "\" of the template is not in special_tokens");
            const auto& ids = (*specials)[name]["ids"];
            if (!ids.is_array()) throw InputError(here + ".special_tokens[\"" + clipForMessage(name) + "\"].ids must be an array");
            auto& target = seenSequence ? p->after : p->before;
            for (const auto& id : ids) {
                if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > 0x7FFFFFFF)
                    throw InputError(here + ".special_tokens[\"" + clipForMessage(name) + "\"].ids holds a non-id");
                target.push_back(id.get<std::int32_t>());
            }
        }
        if (!seenSequence) throw InputError(here + ".single has no sequence $A");
        return p;
    }
    if (type == "BertProcessing" || type == "RobertaProcessing") {
        auto p = std::make_unique<TemplatePostProcessor>();
        p->before.push_back(idOfPair(j, "cls", here));
        p->after.push_back(idOfPair(j, "sep", here));
        return p;
    }
    if (type == "Sequence") {
        const auto it = j.find("processors");
        if (it == j.end() || !it->is_array()) throw InputError(here + ".processors must be an array");
        auto p = std::make_unique<SequencePostProcessor>();
        for (std::size_t i = 0; i < it->size(); ++i)
            p->parts.push_back(makePostProcessor((*it)[i], at + ".processors[" + std::to_string(i) + "]", depth + 1));
        return p;
    }
    throw InputError(at + ": the post-processor \"" + clipForMessage(type) +
                     "\" is not supported (supported: TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence)");
}

// ---------------------------------------------------------------- decoders

struct Decoder {
    virtual ~Decoder() = default;
    virtual std::vector<std::string> chain(std::vector<std::string> tokens) const = 0;
};
using DecoderPtr = std::unique_ptr<Decoder>;

struct ByteLevelDecoder final : Decoder {
    std::vector<std::string> chain(std::vector<std::string> tokens) const override
    {
        const auto& table = unicodeToByte();
        std::string bytes;
        for (const auto& t : tokens) {
            const std::size_t mark = bytes.size();
            bool all = true;
            for (std::size_t i = 0; i < t.size();) {
                const char32_t c = nextCodePoint(t, i);
                if (c >= table.size() || table[c] < 0) {
                    all = false;
                    break;
                }
                bytes.push_back(char(table[c]));
            }
            if (!all) {
                bytes.resize(mark);
                bytes += t;
            }
        }
        return {utf8Lossy(bytes)};
    }
};

// "<0x41>" -> 0x41, as Rust's u8::from_str_radix(&token[3..5], 16) reads it.
int byteToken(const std::string& t)
{
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
    const char a = t[3], b = t[4];
    if (a == '+') return hex(b);
    if (hex(a) < 0 || hex(b) < 0) return -1;
    return hex(a) * 16 + hex(b);
}

struct ByteFallbackDecoder final : Decoder {
    std::vector<std::string> chain(std::vector<std::string> tokens) const override
    {
        std::vector<std::string> out;
        std::string pending;
        auto flush = [&] {
            if (pending.empty()) return;
            if (firstInvalidUtf8(pending) == std::string::npos) out.push_back(pending);
            else
                for (std::size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
            pending.clear();
        };
        for (auto& t : tokens) {
            const int b = byteToken(t);
            if (b >= 0) {
                pending.push_back(char(b));
                continue;
            }
            flush();
            out.push_back(std::move(t));
        }
        flush();
        return out;
    }
};

struct FuseDecoder final : Decoder {
    std::vector<std::string> chain(std::vector<std::string> tokens) const override
    {
        std::string all;
        for (const auto& t : tokens) all += t;
        return {all};
    }
};

struct StripDecoder final : Decoder {
    char32_t content = ' ';
    std::size_t start = 0, stop = 0;
    std::vector<std::string> chain(std::vector<std::string> tokens) const override
    {
        for (auto& t : tokens) {
            std::vector<char32_t> chars;
            for (std::size_t i = 0; i < t.size();) chars.push_back(nextCodePoint(t, i));
            std::size_t startCut = 0;
            for (std::size_t i = 0; i < std::min(start, chars.size()); ++i) {
                if (chars[i] == content) startCut = i + 1;
                else break;
            }
            std::size_t stopCut = chars.size();
            for (std::size_t i = 0; i < stop && i < chars.size(); ++i) {
                const std::size_t index = chars.size() - i - 1;
                if (chars[index] == content) stopCut = index;
                else break;
            }
            std::string s;
            for (std::size_t i = startCut; i < std::max(startCut, stopCut); ++i) appendUtf8(s, chars[i]);
            t = std::move(s);
        }
        return tokens;
    }
};

struct ReplaceDecoder final : Decoder {
    Pattern pattern;
    std::string content;
    ReplaceDecoder(const json& j, const std::string& at) : pattern(j.at("pattern"), at + ".pattern"), content(stringField(j, "content", at)) {}
    std::vector<std::string> chain(std::vector<std::string> tokens) const override
    {
        for (auto& t : tokens) t = pattern.replaceAll(t, content);
        return tokens;
    }
};

struct MetaspaceDecoder final : Decoder {
    char32_t replacement = U'\u2581';
    bool prepend = true; // prepend_scheme is not "never"
    std::vector<std::string> chain(std::vector<std::string> tokens) const override
    {
        for (std::size_t k = 0; k < tokens.size(); ++k) {
            std::string s;
            const std::string& t = tokens[k];
            for (std::size_t i = 0; i < t.size();) {
                const char32_t c = nextCodePoint(t, i);
                if (c == replacement) {
                    if (!(k == 0 && prepend)) s.push_back(' ');
                } else {
                    appendUtf8(s, c);
                }
            }
            tokens[k] = std::move(s);
        }
        return tokens;
    }
};

struct SequenceDecoder final : Decoder {
    std::vector<DecoderPtr> parts;
    std::vector<std::string> chain(std::vector<std::string> tokens) const override
    {
        for (const auto& d : parts) tokens = d->chain(std::move(tokens));
        return tokens;
    }
};

DecoderPtr makeDecoder(const json& j, const std::string& at, int depth)
{
    if (depth > kMaxDepth) throw InputError(at + ": Sequence nested deeper than " + std::to_string(kMaxDepth));
    const std::string type = typeOf(j, at);
    const std::string here = at + " (" + type + ")";
    if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse") return std::make_unique<FuseDecoder>();
    if (type == "Strip") {
        auto d = std::make_unique<StripDecoder>();
        d->content = charField(j, "content", here);
        const auto start = j.find("start"), stop = j.find("stop");
        if (start == j.end() || !start->is_number_unsigned() || stop == j.end() || !stop->is_number_unsigned())
            throw InputError(here + ": start and stop must be non-negative integers");
        d->start = start->get<std::size_t>();
        d->stop = stop->get<std::size_t>();
        return d;
    }
    if (type == "Replace") {
        if (!j.contains("pattern")) throw InputError(here + ".pattern is missing");
        return std::make_unique<ReplaceDecoder>(j, here);
    }
    if (type == "Metaspace") {
        auto d = std::make_unique<MetaspaceDecoder>();
        d->replacement = charField(j, "replacement", here);
        d->prepend = prependSchemeFrom(j, here) != MetaspacePreTokenizer::Prepend::Never;
        return d;
    }
    if (type == "Sequence") {
        const auto it = j.find("decoders");
        if (it == j.end() || !it->is_array()) throw InputError(here + ".decoders must be an array");
        auto d = std::make_unique<SequenceDecoder>();
        for (std::size_t i = 0; i < it->size(); ++i)
            d->parts.push_back(makeDecoder((*it)[i], at + ".decoders[" + std::to_string(i) + "]", depth + 1));
        return d;
    }
    throw InputError(at + ": the decoder \"" + clipForMessage(type) +
                     "\" is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence)");
}

// ---------------------------------------------------------------- added tokens

struct AddedToken {
    std::string content;
    std::string pattern; // what is matched: content, or its normalised form for normalized tokens
    std::int32_t id = 0;
    bool special = false, normalized = true, lstrip = false, rstrip = false, singleWord = false;
};

// Leftmost-longest matching of a set of strings (a byte trie).
class TokenTrie {
public:
    void add(const std::string& s, std::size_t value)
    {
        if (s.empty()) return;
        if (m_nodes.empty()) m_nodes.emplace_back();
        std::size_t node = 0;
        for (const char c : s) {
            const auto key = (std::uint64_t(node) << 8) | static_cast<unsigned char>(c);
            const auto it = m_edges.find(key);
            if (it != m_edges.end()) node = it->second;
            else {
                m_nodes.emplace_back();
                m_edges.emplace(key, m_nodes.size() - 1);
                node = m_nodes.size() - 1;
            }
        }
        m_nodes[node].value = std::int64_t(value);
        m_first[static_cast<unsigned char>(s[0])] = true;
    }
    bool empty() const { return m_nodes.empty(); }
    // The leftmost-longest match at or after `from`: {start, end, value}.
    bool find(std::string_view s, std::size_t from, std::size_t& start, std::size_t& end, std::size_t& value) const
    {
        for (std::size_t i = from; i < s.size(); ++i) {
            if (!m_first[static_cast<unsigned char>(s[i])]) continue;
            std::size_t node = 0;
            std::int64_t best = -1;
            std::size_t bestEnd = 0;
            for (std::size_t k = i; k < s.size(); ++k) {
                const auto it = m_edges.find((std::uint64_t(node) << 8) | static_cast<unsigned char>(s[k]));
                if (it == m_edges.end()) break;
                node = it->second;
                if (m_nodes[node].value >= 0) {
                    best = m_nodes[node].value;
                    bestEnd = k + 1;
                }
            }
            if (best >= 0) {
                start = i;
                end = bestEnd;
                value = std::size_t(best);
                return true;
            }
        }
        return false;
    }

private:
    struct Node {
        std::int64_t value = -1;
    };
    std::vector<Node> m_nodes;
    std::unordered_map<std::uint64_t, std::size_t> m_edges;
    std::array<bool, 256> m_first{};
};

bool endsWithWord(std::string_view s)
{
    if (s.empty()) return false;
    std::size_t st = s.size() - 1;
    while (st > 0 && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
    return isWordChar(nextCodePoint(s, st));
}

bool startsWithWord(std::string_view s)
{
    if (s.empty()) return false;
    std::size_t i = 0;
    return isWordChar(nextCodePoint(s, i));
}

std::uint64_t fnv1a(std::string_view s)
{
    std::uint64_t h = 1469598103934665603ull;
    for (const char c : s) {
        h ^= static_cast<unsigned char>(c);
        h *= 1099511628211ull;
    }
    return h;
}

} // namespace

// ---------------------------------------------------------------- the tokenizer

struct Tokenizer::Impl {
    std::string source;
    std::string hash;
    NormalizerPtr normalizer;
    PreTokenizerPtr preTokenizer;
    std::unique_ptr<Bpe> model;
    // A tokenizer.model instead of a tokenizer.json: SentencePiece encodes
    // the text between special tokens; BOS/EOS as tokenizer_config.json says.
    std::shared_ptr<const SentencePieceModel> sp;
    bool spAddBos = true, spAddEos = false;
    std::int32_t spBos = -1, spEos = -1;
    PostProcessorPtr postProcessor;
    DecoderPtr decoder;
    std::vector<AddedToken> added;
    std::unordered_map<std::int32_t, std::size_t> addedById;
    std::unordered_map<std::string, std::int32_t> addedByContent;
    std::unordered_set<std::string> specialContents;
    TokenTrie rawTrie, normalizedTrie;
    std::int32_t limit = 0;

    void splitAdded(std::vector<Piece>& pieces, const TokenTrie& trie) const;
};

void Tokenizer::Impl::splitAdded(std::vector<Piece>& pieces, const TokenTrie& trie) const
{
    if (trie.empty()) return;
    splitEach(pieces, [&](Piece& p, std::vector<Piece>& out) {
        const std::string_view s = p.text;
        std::size_t startOffset = 0, from = 0, st = 0, en = 0, index = 0;
        while (trie.find(s, from, st, en, index)) {
            from = en;
            const AddedToken& t = added[index];
            if (t.singleWord) {
                const bool startSpace = st == 0 || !endsWithWord(s.substr(0, st));
                const bool stopSpace = en == s.size() || !startsWithWord(s.substr(en));
                if (!startSpace || !stopSpace) continue;
            }
            if (t.lstrip) {
                std::size_t ns = st; // the leftmost start of the whitespace that ends s[0, st)
                while (ns > 0) {
                    std::size_t cs = ns - 1;
                    while (cs > 0 && (static_cast<unsigned char>(s[cs]) & 0xC0) == 0x80) --cs;
                    std::size_t i = cs;
                    if (!isWhiteSpace(nextCodePoint(s, i))) break;
                    ns = cs;
                }
                st = std::max(ns, startOffset);
            }
            if (t.rstrip) {
                std::size_t i = en;
                while (i < s.size()) {
                    std::size_t k = i;
                    if (!isWhiteSpace(nextCodePoint(s, k))) break;
                    i = k;
                }
                en = i;
                from = en;
            }
            if (startOffset < st) out.push_back({p.text.substr(startOffset, st - startOffset), p.atStart && startOffset == 0, -1});
            out.push_back({p.text.substr(st, en - st), p.atStart && st == 0, t.id});
            startOffset = en;
        }
        if (startOffset < s.size()) out.push_back({p.text.substr(startOffset), p.atStart && startOffset == 0, -1});
    });
}

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : m(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::fromFile(const std::filesystem::path& file)
{
    if (file.extension() == ".model") return fromSentencePiece(file);
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    if (ec) throw InputError(file.string() + ": cannot read the tokenizer (" + ec.message() + ")");
    if (size > kMaxFileBytes) throw InputError(file.string() + ": " + std::to_string(size) + " bytes is too large for a tokenizer.json");
    std::ifstream in(file, std::ios::binary);
    if (!in) throw InputError(file.string() + ": cannot open the tokenizer");
    std::string text(size, '\0');
    in.read(text.data(), std::streamsize(size));
    if (!in) throw InputError(file.string() + ": cannot read the tokenizer");
    return fromJson(text, file.string());
}

std::filesystem::path Tokenizer::folderTokenizerFile(const std::filesystem::path& dir)
{
    // tokenizer.json first, as transformers' fast tokenizers read it.
    std::error_code ec;
    for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
        if (std::filesystem::is_regular_file(dir / name, ec)) return dir / name;
    }
    return {};
}

bool Tokenizer::folderHasTokenizer(const std::filesystem::path& dir) { return !folderTokenizerFile(dir).empty(); }

Tokenizer Tokenizer::fromModelFolder(const std::filesystem::path& dir)
{
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) throw InputError(dir.string() + " is not a folder");
    const auto file = folderTokenizerFile(dir);
    if (file.empty()) throw InputError(dir.string() + " has no tokenizer.json or tokenizer.model");
    return fromFile(file);
}

Tokenizer Tokenizer::fromSentencePiece(const std::filesystem::path& file)
{
    auto impl = std::make_shared<Impl>();
    impl->sp = SentencePieceModel::load(file);
    impl->source = file.string();
    std::string content;
    {
        std::ifstream in(file, std::ios::binary);
        content.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const auto configFile = file.parent_path() / "tokenizer_config.json";
    std::optional<json> config;
    {
        std::error_code ec;
        if (std::filesystem::is_regular_file(configFile, ec)) {
            std::ifstream in(configFile, std::ios::binary);
            std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            content += text; // add_bos_token and the added tokens change the ids
            try {
                config = json::parse(text);
            } catch (const json::parse_error& e) {
                throw InputError(configFile.string() + ": not valid JSON at byte " + std::to_string(e.byte));
            }
            if (!config->is_object()) throw InputError(configFile.string() + ": must be a JSON object");
        }
    }
    {
        char buf[17];
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(content)));
        impl->hash = buf;
    }
    const auto addSpecial = [&](const std::string& content, std::int32_t id, bool special, bool lstrip, bool rstrip) {
        if (content.empty() || impl->addedByContent.count(content)) return;
        AddedToken t;
        t.content = t.pattern = content;
        t.id = id;
        t.special = special;
        t.normalized = false;
        t.lstrip = lstrip;
        t.rstrip = rstrip;
        impl->addedByContent[content] = id;
        if (special) impl->specialContents.insert(content);
        impl->addedById[id] = impl->added.size();
        impl->added.push_back(t);
    };
    // Tokens tokenizer_config.json adds (chat markers beyond the model's
    // pieces, or pieces made special), as transformers' added_tokens_decoder.
    if (config) {
        const std::string at = configFile.string();
        if (const auto it = config->find("added_tokens_decoder"); it != config->end() && it->is_object()) {
            for (const auto& [key, a] : it->items()) {
                std::int32_t id = -1;
                try {
                    id = std::stoi(key);
                } catch (const std::exception&) {
                    throw InputError(at + ": added_tokens_decoder key \"" + clipForMessage(key) + "\" is not a token id");
                }
                const std::string where = at + ": added_tokens_decoder[\"" + key + "\"]";
                if (!a.is_object()) throw InputError(where + " must be an object");
                const std::string text = stringField(a, "content", where);
                if (firstInvalidUtf8(text) != std::string::npos) throw InputError(where + ".content is not valid UTF-8");
                if (id < 0 || id > 16'000'000) throw InputError(where + ": the id must be from 0 to 16000000");
                if (id < impl->sp->size() && impl->sp->piece(id) != text) {
                    throw InputError(where + ": \"" + clipForMessage(text) + "\" but tokenizer.model's piece " + key + " is \""
                                     + clipForMessage(*impl->sp->piece(id)) + "\"");
                }
                addSpecial(text, id, boolField(a, "special", false, where), boolField(a, "lstrip", false, where),
                           boolField(a, "rstrip", false, where));
            }
        }
        const auto flag = [&](const char* key, bool fallback) {
            const auto it = config->find(key);
            return it != config->end() && it->is_boolean() ? it->get<bool>() : fallback;
        };
        impl->spAddBos = flag("add_bos_token", true);
        impl->spAddEos = flag("add_eos_token", false);
    }
    // SentencePiece's control symbols (<s>, </s>) and its unknown piece are
    // special: their text in the input becomes the token.
    for (std::int32_t id = 0; id < impl->sp->size(); ++id) {
        if (impl->sp->isControlOrUnknown(id)) addSpecial(*impl->sp->piece(id), id, true, false, false);
    }
    // BOS and EOS: tokenizer_config.json's bos_token/eos_token, else the
    // model's own (its trainer's bos_id and eos_id).
    const auto tokenNamed = [&](const char* key, std::int32_t fallback) -> std::int32_t {
        if (!config) return fallback;
        const auto it = config->find(key);
        if (it == config->end()) return fallback;
        if (it->is_null()) return -1;
        std::string text;
        if (it->is_string()) text = it->get<std::string>();
        else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) text = (*it)["content"].get<std::string>();
        else throw InputError(configFile.string() + ": " + key + " must be a string or {\"content\": ...}");
        if (const auto a = impl->addedByContent.find(text); a != impl->addedByContent.end()) return a->second;
        if (const auto id = impl->sp->id(text)) return *id;
        throw InputError(configFile.string() + ": " + key + " \"" + clipForMessage(text) + "\" is not a piece of tokenizer.model "
                         "nor an added token");
    };
    impl->spBos = tokenNamed("bos_token", impl->sp->bos());
    impl->spEos = tokenNamed("eos_token", impl->sp->eos());
    if (impl->spAddBos && impl->spBos < 0) impl->spAddBos = false;
    if (impl->spAddEos && impl->spEos < 0) impl->spAddEos = false;
    impl->limit = impl->sp->size();
    for (std::size_t i = 0; i < impl->added.size(); ++i) {
        impl->rawTrie.add(impl->added[i].content, i);
        impl->limit = std::max(impl->limit, impl->added[i].id + 1);
    }
    return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::fromJson(const std::string& text, const std::string& source)
{
    json j;
    try {
        j = json::parse(text);
    } catch (const json::parse_error& e) {
        throw InputError(source + ": not valid JSON at byte " + std::to_string(e.byte) + "; is it a tokenizer.json?");
    }
    if (!j.is_object() || !j.contains("model")) throw InputError(source + ": not a tokenizer.json (no \"model\")");
    auto impl = std::make_shared<Impl>();
    impl->source = source;
    {
        char buf[17];
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
        impl->hash = buf;
    }

    const json& model = j["model"];
    if (!model.is_object()) throw InputError(source + ": \"model\" must be an object");
    std::string modelType = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "";
    if (modelType.empty() && model.contains("merges")) modelType = "BPE"; // older files leave the type out
    if (modelType != "BPE")
        throw InputError(source + ": the tokenizer model \"" + clipForMessage(modelType) +
                         "\" is not supported; Trainbench reads BPE tokenizers (GPT-2, Llama, Mistral, Qwen, Gemma style), not Unigram or WordPiece");
    impl->model = std::make_unique<Bpe>(model, source);

    auto component = [&](const char* key) -> const json* {
        const auto it = j.find(key);
        return it == j.end() || it->is_null() ? nullptr : &*it;
    };
    if (const auto* n = component("normalizer")) impl->normalizer = makeNormalizer(*n, where(source, "normalizer"), 0);
    if (const auto* p = component("pre_tokenizer")) impl->preTokenizer = makePreTokenizer(*p, where(source, "pre_tokenizer"), 0);
    if (const auto* p = component("post_processor")) impl->postProcessor = makePostProcessor(*p, where(source, "post_processor"), 0);
    if (const auto* d = component("decoder")) impl->decoder = makeDecoder(*d, where(source, "decoder"), 0);

    // Added tokens get their ids as the Rust library's add_tokens gives them:
    // the id the content already has, else the next free one.
    std::int32_t nextId = std::int32_t(impl->model->vocabSize());
    if (const auto* list = component("added_tokens")) {
        if (!list->is_array()) throw InputError(source + ": added_tokens must be an array");
        for (std::size_t i = 0; i < list->size(); ++i) {
            const json& a = (*list)[i];
            const std::string at = where(source, "added_tokens[" + std::to_string(i) + "]");
            if (!a.is_object()) throw InputError(at + " must be an object");
            AddedToken t;
            t.content = stringField(a, "content", at);
            t.special = boolField(a, "special", false, at);
            t.normalized = boolField(a, "normalized", !t.special, at);
            t.lstrip = boolField(a, "lstrip", false, at);
            t.rstrip = boolField(a, "rstrip", false, at);
            t.singleWord = boolField(a, "single_word", false, at);
            if (t.content.empty()) continue;
            if (firstInvalidUtf8(t.content) != std::string::npos) throw InputError(at + ".content is not valid UTF-8");
            if (const auto it = impl->addedByContent.find(t.content); it != impl->addedByContent.end()) t.id = it->second;
            else if (const auto v = impl->model->tokenToId(t.content)) t.id = *v;
            else t.id = nextId++;
            t.pattern = t.content;
            if (t.normalized && impl->normalizer) impl->normalizer->apply(t.pattern);
            impl->addedByContent[t.content] = t.id;
            if (t.special) impl->specialContents.insert(t.content);
            if (const auto it = impl->addedById.find(t.id); it != impl->addedById.end()) impl->added[it->second] = t;
            else {
                impl->addedById[t.id] = impl->added.size();
                impl->added.push_back(t);
            }
        }
    }
    impl->limit = impl->model->idLimit();
    for (std::size_t i = 0; i < impl->added.size(); ++i) {
        const auto& t = impl->added[i];
        (t.normalized ? impl->normalizedTrie : impl->rawTrie).add(t.normalized ? t.pattern : t.content, i);
        impl->limit = std::max(impl->limit, t.id + 1);
    }
    return Tokenizer(std::move(impl));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool addSpecialTokens) const
{
    if (const auto bad = firstInvalidUtf8(text); bad != std::string_view::npos)
        throw InputError("the text is not valid UTF-8 at byte " + std::to_string(bad) + "; tokenizers take UTF-8 text");
    std::vector<Piece> pieces;
    if (!text.empty()) pieces.push_back({std::string(text), true, -1});
    m->splitAdded(pieces, m->rawTrie);
    if (m->sp) {
        // SentencePiece: each stretch between special tokens is encoded on
        // its own (with its dummy-prefix space), as transformers' slow
        // Llama tokenizer does.
        std::vector<std::int32_t> ids;
        if (addSpecialTokens && m->spAddBos) ids.push_back(m->spBos);
        for (const auto& p : pieces) {
            if (p.id >= 0) ids.push_back(p.id);
            else m->sp->encode(p.text, ids);
        }
        if (addSpecialTokens && m->spAddEos) ids.push_back(m->spEos);
        return ids;
    }
    splitEach(pieces, [&](Piece& p, std::vector<Piece>& out) {
        if (m->normalizer) m->normalizer->apply(p.text);
        if (!p.text.empty()) out.push_back(std::move(p));
    });
    m->splitAdded(pieces, m->normalizedTrie);
    if (m->preTokenizer) m->preTokenizer->apply(pieces);
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    for (const auto& p : pieces) {
        if (p.id >= 0) ids.push_back(p.id);
        else m->model->tokenize(p.text, ids);
    }
    if (m->postProcessor) m->postProcessor->apply(ids, addSpecialTokens);
    return ids;
}

std::optional<std::string> Tokenizer::idToToken(std::int32_t id) const
{
    if (const auto it = m->addedById.find(id); it != m->addedById.end()) return m->added[it->second].pattern;
    if (m->sp) return m->sp->piece(id);
    if (const auto* t = m->model->idToToken(id)) return *t;
    return std::nullopt;
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids, bool skipSpecialTokens) const
{
    if (m->sp) {
        // Runs of model pieces go to SentencePiece; added and special tokens
        // are their text (none with skipSpecialTokens).
        std::string out;
        std::vector<std::int32_t> run;
        const auto flush = [&] {
            if (!run.empty()) out += m->sp->decode(run);
            run.clear();
        };
        for (const auto id : ids) {
            if (const auto it = m->addedById.find(id); it != m->addedById.end()) {
                flush();
                const auto& t = m->added[it->second];
                if (!(skipSpecialTokens && t.special)) out += t.content;
            } else if (id >= 0 && id < m->sp->size()) {
                run.push_back(id);
            } else {
                throw InputError("the id " + std::to_string(id) + " is not in the tokenizer's vocabulary (tokenizer.model's "
                                 "pieces are 0 to " + std::to_string(m->sp->size() - 1) + ", and the added tokens of "
                                 "tokenizer_config.json)");
            }
        }
        flush();
        return out;
    }
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const auto id : ids) {
        auto t = idToToken(id);
        if (!t)
            throw InputError("the id " + std::to_string(id) + " is not in the tokenizer's vocabulary (ids run from 0 to " +
                             std::to_string(m->limit - 1) + ")");
        if (skipSpecialTokens && m->specialContents.count(*t)) continue;
        tokens.push_back(std::move(*t));
    }
    if (!m->decoder) {
        std::string out;
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (i) out.push_back(' ');
            out += tokens[i];
        }
        return out;
    }
    std::string out;
    for (const auto& s : m->decoder->chain(std::move(tokens))) out += s;
    return out;
}

std::optional<std::int32_t> Tokenizer::tokenToId(std::string_view token) const
{
    if (const auto it = m->addedByContent.find(std::string(token)); it != m->addedByContent.end()) return it->second;
    if (m->sp) return m->sp->id(token);
    return m->model->tokenToId(token);
}

std::size_t Tokenizer::specialTokenAt(std::string_view text) const
{
    std::size_t best = 0;
    for (const auto& content : m->specialContents)
        if (content.size() > best && text.substr(0, content.size()) == content) best = content.size();
    return best;
}

bool Tokenizer::isSpecial(std::int32_t id) const
{
    const auto t = idToToken(id);
    return t && m->specialContents.count(*t) > 0;
}

std::int32_t Tokenizer::vocabLimit() const { return m->limit; }
const std::string& Tokenizer::source() const { return m->source; }
const std::string& Tokenizer::contentHash() const { return m->hash; }

namespace {

std::optional<json> readJsonFile(const std::filesystem::path& file)
{
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
    if (std::filesystem::file_size(file, ec) > (64u << 20)) throw InputError(file.string() + " is larger than 64 MiB");
    std::ifstream in(file, std::ios::binary);
    try {
        return json::parse(in);
    } catch (const json::parse_error& e) {
        throw InputError(file.string() + ": not valid JSON at byte " + std::to_string(e.byte));
    }
}

// "eos_token": "</s>" or {"content": "</s>", ...}
std::optional<std::string> tokenText(const json& config, const char* key)
{
    const auto it = config.find(key);
    if (it == config.end()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
    return std::nullopt;
}

std::int32_t tokenIdField(const json& config, const char* key)
{
    const auto it = config.find(key);
    if (it == config.end()) return -1;
    if (it->is_number_integer()) return it->get<std::int32_t>();
    if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) return (*it)[0].get<std::int32_t>();
    return -1;
}

} // namespace

FolderSpecialTokens readFolderSpecialTokens(const std::filesystem::path& dir, const Tokenizer& tok)
{
    FolderSpecialTokens out;
    if (const auto config = readJsonFile(dir / "tokenizer_config.json"); config && config->is_object()) {
        for (const auto& [key, target] : {std::pair<const char*, std::int32_t*>{"bos_token", &out.bos}, {"eos_token", &out.eos}}) {
            if (const auto text = tokenText(*config, key)) {
                const auto id = tok.tokenToId(*text);
                if (!id) throw InputError((dir / "tokenizer_config.json").string() + ": " + key + " \"" + clipForMessage(*text) +
                                          "\" is not a token of tokenizer.json");
                *target = *id;
            }
        }
    }
    for (const char* file : {"config.json", "generation_config.json"}) {
        if (out.bos >= 0 && out.eos >= 0) break;
        if (const auto config = readJsonFile(dir / file); config && config->is_object()) {
            if (out.bos < 0) out.bos = tokenIdField(*config, "bos_token_id");
            if (out.eos < 0) out.eos = tokenIdField(*config, "eos_token_id");
        }
    }
    if (out.eos >= tok.vocabLimit()) out.eos = -1;
    if (out.bos >= tok.vocabLimit()) out.bos = -1;
    return out;
}

std::vector<std::int64_t> parseTokenIds(std::string_view text, const std::string& what, std::int64_t limit)
{
    std::vector<std::int64_t> ids;
    const auto bad = [&](std::string_view entry) {
        return InputError(what + " must be token ids separated by commas or spaces, each from 0 to " + std::to_string(limit - 1)
                          + " (e.g. 1,15043,29892); entry " + std::to_string(ids.size() + 1) + " is \""
                          + clipForMessage(std::string(entry), 40) + "\"");
    };
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    std::size_t i = 0;
    bool needId = false; // after a comma, an id must come
    while (true) {
        while (i < text.size() && space(text[i])) ++i;
        if (i == text.size()) {
            if (needId) throw bad("");
            return ids;
        }
        if (text[i] == ',') throw bad(""); // a comma with no id before it
        std::size_t end = i;
        while (end < text.size() && !space(text[end]) && text[end] != ',') ++end;
        const std::string_view entry = text.substr(i, end - i);
        // At most 18 digits: the value fits in 64 bits before it is compared.
        if (entry.empty() || entry.size() > 18) throw bad(entry);
        std::int64_t value = 0;
        for (const char c : entry) {
            if (c < '0' || c > '9') throw bad(entry);
            value = value * 10 + (c - '0');
        }
        if (value >= limit) throw bad(entry);
        ids.push_back(value);
        i = end;
        while (i < text.size() && space(text[i])) ++i;
        needId = i < text.size() && text[i] == ',';
        if (needId) ++i;
    }
}

} // namespace tb::text
