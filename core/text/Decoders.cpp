#include "text/Decoders.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/Errors.h"
#include "text/JsonFields.h"
#include "text/Pieces.h"
#include "text/PreTokenizers.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace tb::text {
namespace {

using json = nlohmann::json;

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

DecoderPtr makeStrip(const json& j, const std::string& here)
{
    auto d = std::make_unique<StripDecoder>();
    d->content = charField(j, "content", here);
    const auto start = j.find("start"), stop = j.find("stop");
    if (start == j.end() || !start->is_number_unsigned() || stop == j.end() || !stop->is_number_unsigned())
        throw InputError(here + ": start and stop must be non-negative integers");
    d->start = start->get<std::size_t>();
    d->stop = stop->get<std::size_t>();
    return d;
}

} // namespace

DecoderPtr makeFuseDecoder() { return std::make_unique<FuseDecoder>(); }

DecoderPtr makeDecoder(const json& j, const std::string& at, int depth)
{
    checkDepth(depth, at);
    const std::string type = typeOf(j, at);
    const std::string here = at + " (" + type + ")";
    if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse") return makeFuseDecoder();
    if (type == "Strip") return makeStrip(j, here);
    if (type == "Replace") {
        if (!j.contains("pattern")) throw InputError(here + ".pattern is missing");
        return std::make_unique<ReplaceDecoder>(j, here);
    }
    if (type == "Metaspace") {
        auto d = std::make_unique<MetaspaceDecoder>();
        d->replacement = charField(j, "replacement", here);
        d->prepend = prependSchemeFrom(j, here) != MetaspacePrepend::Never;
        return d;
    }
    if (type == "Sequence") {
        auto d = std::make_unique<SequenceDecoder>();
        readSequenceParts(j, "decoders", here, at, depth, d->parts,
                          [](const auto& part, const std::string& path, int d) { return makeDecoder(part, path, d); });
        return d;
    }
    throw InputError(at + ": the decoder \"" + clipForMessage(type) +
                     "\" is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence)");
}

} // namespace tb::text
