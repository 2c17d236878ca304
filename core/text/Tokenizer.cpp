#include "text/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "common/Errors.h"
#include "text/Regex.h"
#include "text/TokenizerConfig.h"
#include "text/TokenizerPipeline.h"
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

std::string hashContent(std::string_view content)
{
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(content)));
    return buf;
}

void Tokenizer::Impl::finish()
{
    added.finish();
    limit = std::max(model->idLimit(), added.idLimit());
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

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool addSpecialTokens) const
{
    if (const auto bad = firstInvalidUtf8(text); bad != std::string_view::npos)
        throw InputError("the text is not valid UTF-8 at byte " + std::to_string(bad) + "; tokenizers take UTF-8 text");
    std::vector<Piece> pieces;
    if (!text.empty()) pieces.push_back({std::string(text), true, -1});
    m->added.splitRaw(pieces);
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

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids, bool skipSpecialTokens) const
{
    // Ids -> tokens: an added token is its text; each run of the model's ids
    // between them is the model's (one token per id, or the run's text).
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    std::vector<std::int32_t> run;
    const auto flush = [&] {
        if (!run.empty()) m->model->decodeRun(run, tokens);
        run.clear();
    };
    for (const auto id : ids) {
        if (const AddedToken* t = m->added.byId(id)) {
            flush();
            if (!(skipSpecialTokens && m->added.isSpecialContent(t->pattern))) tokens.push_back(t->pattern);
        } else if (m->model->hasId(id)) {
            run.push_back(id);
        } else {
            throw InputError("the id " + std::to_string(id) + " is not in the tokenizer's vocabulary (" + m->model->describeIds(m->limit) + ")");
        }
    }
    flush();
    std::string out;
    if (!m->decoder) {
        // No decoder: tokenizers joins the tokens with spaces.
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (i) out.push_back(' ');
            out += tokens[i];
        }
        return out;
    }
    for (const auto& s : m->decoder->chain(std::move(tokens))) out += s;
    return out;
}

std::optional<std::string> Tokenizer::idToToken(std::int32_t id) const
{
    if (const AddedToken* t = m->added.byId(id)) return t->pattern;
    return m->model->idToToken(id);
}

std::optional<std::int32_t> Tokenizer::tokenToId(std::string_view token) const
{
    if (const auto id = m->added.idOf(token)) return id;
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
    const TokenizerConfig config = readTokenizerConfig(dir);
    const auto idOf = [&](const char* key, const TokenizerConfig::SpecialToken& token, std::int32_t& target) {
        if (!token.content) return; // missing or null: config.json may say
        const auto id = tok.tokenToId(*token.content);
        if (!id) throw InputError(config.file.string() + ": " + key + " \"" + clipForMessage(*token.content) +
                                  "\" is not a token of tokenizer.json");
        target = *id;
    };
    idOf("bos_token", config.bosToken, out.bos);
    idOf("eos_token", config.eosToken, out.eos);
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
