// A SentencePiece tokenizer.model -> the pipeline. SentencePiece is the model
// stage's variant; the library normalises and splits the text itself, so
// the normalizer and pre-tokenizer stages are left out. tokenizer_config.json
// beside the model gives the added vocabulary (its added_tokens_decoder, and
// the model's control and unknown pieces) and the post-processor (BOS and EOS
// as add_bos_token and add_eos_token ask), as transformers' slow (legacy)
// Llama tokenizer reads them.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <optional>

#include "common/Errors.h"
#include "text/Regex.h"
#include "text/SentencePieceModel.h"
#include "text/JsonFields.h"
#include "text/TokenizerPipeline.h"

namespace tb::text {
namespace {

using json = nlohmann::json;

std::string fileBytes(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A token matched on the raw text, the first one with its content kept (as
// the slow tokenizer keeps the first).
void addRaw(AddedVocabulary& added, const std::string& content, std::int32_t id, bool special, bool lstrip, bool rstrip)
{
    if (content.empty() || added.contains(content)) return;
    AddedToken t;
    t.content = t.pattern = content;
    t.id = id;
    t.special = special;
    t.normalized = false;
    t.lstrip = lstrip;
    t.rstrip = rstrip;
    added.add(t);
}

// Tokens tokenizer_config.json adds (chat markers beyond the model's pieces,
// or pieces made special), as transformers' added_tokens_decoder.
void addConfigTokens(AddedVocabulary& added, const SentencePieceModel& sp, const json& config, const std::string& at)
{
    const auto it = config.find("added_tokens_decoder");
    if (it == config.end() || !it->is_object()) return;
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
        if (id < sp.size() && sp.idToToken(id) != text) {
            throw InputError(where + ": \"" + clipForMessage(text) + "\" but tokenizer.model's piece " + key + " is \""
                             + clipForMessage(*sp.idToToken(id)) + "\"");
        }
        addRaw(added, text, id, boolField(a, "special", false, where), boolField(a, "lstrip", false, where),
               boolField(a, "rstrip", false, where));
    }
}

// BOS or EOS: tokenizer_config.json's bos_token/eos_token (null: none), else
// the model's own (its trainer's bos_id and eos_id); -1 when there is none.
std::int32_t tokenNamed(const std::optional<json>& config, const std::filesystem::path& configFile, const char* key,
                        const AddedVocabulary& added, const SentencePieceModel& sp, std::int32_t fallback)
{
    if (!config) return fallback;
    const auto it = config->find(key);
    if (it == config->end()) return fallback;
    if (it->is_null()) return -1;
    std::string text;
    if (it->is_string()) text = it->get<std::string>();
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) text = (*it)["content"].get<std::string>();
    else throw InputError(configFile.string() + ": " + key + " must be a string or {\"content\": ...}");
    if (const auto id = added.idOf(text)) return *id;
    if (const auto id = sp.tokenToId(text)) return *id;
    throw InputError(configFile.string() + ": " + key + " \"" + clipForMessage(text) + "\" is not a piece of tokenizer.model "
                     "nor an added token");
}

// tokenizer_config.json beside the model, when there is one; its text joins the content hash.
std::optional<json> readConfig(const std::filesystem::path& configFile, std::string& content)
{
    std::error_code ec;
    if (!std::filesystem::is_regular_file(configFile, ec)) return std::nullopt;
    const std::string text = fileBytes(configFile);
    content += text; // add_bos_token and the added tokens change the ids
    json config;
    try {
        config = json::parse(text);
    } catch (const json::parse_error& e) {
        throw InputError(configFile.string() + ": not valid JSON at byte " + std::to_string(e.byte));
    }
    if (!config.is_object()) throw InputError(configFile.string() + ": must be a JSON object");
    return config;
}

} // namespace

Tokenizer Tokenizer::fromSentencePiece(const std::filesystem::path& file)
{
    auto impl = std::make_shared<Impl>();
    const auto sp = SentencePieceModel::load(file);
    impl->model = sp;
    impl->source = file.string();
    const auto configFile = file.parent_path() / "tokenizer_config.json";
    std::string content = fileBytes(file);
    const std::optional<json> config = readConfig(configFile, content);
    impl->hash = hashContent(content);
    bool addBos = true, addEos = false;
    if (config) {
        addConfigTokens(impl->added, *sp, *config, configFile.string());
        const auto flag = [&](const char* key, bool fallback) {
            const auto it = config->find(key);
            return it != config->end() && it->is_boolean() ? it->get<bool>() : fallback;
        };
        addBos = flag("add_bos_token", true);
        addEos = flag("add_eos_token", false);
    }
    // SentencePiece's control symbols (<s>, </s>) and its unknown piece are
    // special: their text in the input becomes the token.
    for (std::int32_t id = 0; id < sp->size(); ++id) {
        if (sp->isControlOrUnknown(id)) addRaw(impl->added, *sp->idToToken(id), id, true, false, false);
    }
    const std::int32_t bos = tokenNamed(config, configFile, "bos_token", impl->added, *sp, sp->bos());
    const std::int32_t eos = tokenNamed(config, configFile, "eos_token", impl->added, *sp, sp->eos());
    std::vector<std::int32_t> before, after;
    if (addBos && bos >= 0) before.push_back(bos);
    if (addEos && eos >= 0) after.push_back(eos);
    impl->postProcessor = makeTemplatePostProcessor(std::move(before), std::move(after));
    // The model decodes each run of its pieces to text; the decoder joins them
    // with the added tokens' text.
    impl->decoder = makeFuseDecoder();
    impl->finish();
    return Tokenizer(std::move(impl));
}

} // namespace tb::text
