#include "text/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/Errors.h"
#include "text/AddedVocabulary.h"
#include "text/Bpe.h"
#include "text/Decoders.h"
#include "text/JsonFields.h"
#include "text/Normalizers.h"
#include "text/Pieces.h"
#include "text/PostProcessors.h"
#include "text/PreTokenizers.h"
#include "text/SentencePieceModel.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace tb::text {
namespace {

using json = nlohmann::json;
constexpr std::uintmax_t kMaxFileBytes = 2ull * 1024 * 1024 * 1024; // a tokenizer.json is tens of MB

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
    AddedVocabulary added;
    std::int32_t limit = 0;

};

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
        if (content.empty() || impl->added.contains(content)) return;
        AddedToken t;
        t.content = t.pattern = content;
        t.id = id;
        t.special = special;
        t.normalized = false;
        t.lstrip = lstrip;
        t.rstrip = rstrip;
        impl->added.add(t);
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
        if (const auto a = impl->added.idOf(text)) return *a;
        if (const auto id = impl->sp->id(text)) return *id;
        throw InputError(configFile.string() + ": " + key + " \"" + clipForMessage(text) + "\" is not a piece of tokenizer.model "
                         "nor an added token");
    };
    impl->spBos = tokenNamed("bos_token", impl->sp->bos());
    impl->spEos = tokenNamed("eos_token", impl->sp->eos());
    if (impl->spAddBos && impl->spBos < 0) impl->spAddBos = false;
    if (impl->spAddEos && impl->spEos < 0) impl->spAddEos = false;
    impl->added.finish();
    impl->limit = std::max(impl->sp->size(), impl->added.idLimit());
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
    if (const auto* n = component("normalizer")) impl->normalizer = makeNormalizer(*n, componentPath(source, "normalizer"), 0);
    if (const auto* p = component("pre_tokenizer")) impl->preTokenizer = makePreTokenizer(*p, componentPath(source, "pre_tokenizer"), 0);
    if (const auto* p = component("post_processor")) impl->postProcessor = makePostProcessor(*p, componentPath(source, "post_processor"), 0);
    if (const auto* d = component("decoder")) impl->decoder = makeDecoder(*d, componentPath(source, "decoder"), 0);

    // Added tokens get their ids as the Rust library's add_tokens gives them:
    // the id the content already has, else the next free one.
    std::int32_t nextId = std::int32_t(impl->model->vocabSize());
    if (const auto* list = component("added_tokens")) {
        if (!list->is_array()) throw InputError(source + ": added_tokens must be an array");
        for (std::size_t i = 0; i < list->size(); ++i) {
            const json& a = (*list)[i];
            const std::string at = componentPath(source, "added_tokens[" + std::to_string(i) + "]");
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
            if (const auto id = impl->added.idOf(t.content)) t.id = *id;
            else if (const auto v = impl->model->tokenToId(t.content)) t.id = *v;
            else t.id = nextId++;
            t.pattern = t.content;
            if (t.normalized && impl->normalizer) impl->normalizer->apply(t.pattern);
            impl->added.add(t);
        }
    }
    impl->added.finish();
    impl->limit = std::max(impl->model->idLimit(), impl->added.idLimit());
    return Tokenizer(std::move(impl));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool addSpecialTokens) const
{
    if (const auto bad = firstInvalidUtf8(text); bad != std::string_view::npos)
        throw InputError("the text is not valid UTF-8 at byte " + std::to_string(bad) + "; tokenizers take UTF-8 text");
    std::vector<Piece> pieces;
    if (!text.empty()) pieces.push_back({std::string(text), true, -1});
    m->added.splitRaw(pieces);
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
    m->added.splitNormalized(pieces);
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
    if (const AddedToken* t = m->added.byId(id)) return t->pattern;
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
            if (const AddedToken* t = m->added.byId(id)) {
                flush();
                if (!(skipSpecialTokens && t->special)) out += t->content;
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
        if (skipSpecialTokens && m->added.isSpecialContent(*t)) continue;
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
    if (const auto id = m->added.idOf(token)) return id;
    if (m->sp) return m->sp->id(token);
    return m->model->tokenToId(token);
}

std::size_t Tokenizer::specialTokenAt(std::string_view text) const { return m->added.specialTokenAt(text); }

bool Tokenizer::isSpecial(std::int32_t id) const
{
    const auto t = idToToken(id);
    return t && m->added.isSpecialContent(*t);
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
