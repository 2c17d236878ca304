// A SentencePiece tokenizer.model -> the pipeline. SentencePiece is the model
// stage's variant; the library normalises and splits the text itself, so
// the normalizer and pre-tokenizer stages are left out. tokenizer_config.json
// beside the model gives the added vocabulary (its added_tokens_decoder, and
// the model's control and unknown pieces) and the post-processor (BOS and EOS
// as add_bos_token and add_eos_token ask), as transformers' slow (legacy)
// Llama tokenizer reads them.
#include <fstream>
#include <iterator>

#include "common/Errors.h"
#include "text/Regex.h"
#include "text/SentencePieceModel.h"
#include "text/TokenizerConfig.h"
#include "text/TokenizerPipeline.h"

namespace tb::text {
namespace {

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
// or pieces made special), as transformers' added_tokens_decoder; then
// SentencePiece's control symbols (<s>, </s>) and its unknown piece, which
// are special: their text in the input becomes the token.
void addTokens(AddedVocabulary& added, const SentencePieceModel& sp, const TokenizerConfig& config)
{
    for (const auto& a : config.addedTokens) {
        if (a.id < sp.size() && sp.idToToken(a.id) != a.content) {
            const std::string key = std::to_string(a.id);
            throw InputError(config.file.string() + ": added_tokens_decoder[\"" + key + "\"]: \"" + clipForMessage(a.content) +
                             "\" but tokenizer.model's piece " + key + " is \"" + clipForMessage(*sp.idToToken(a.id)) + "\"");
        }
        addRaw(added, a.content, a.id, a.special, a.lstrip, a.rstrip);
    }
    for (std::int32_t id = 0; id < sp.size(); ++id) {
        if (sp.isControlOrUnknown(id)) addRaw(added, *sp.idToToken(id), id, true, false, false);
    }
}

// BOS or EOS: tokenizer_config.json's bos_token/eos_token (null: none), else
// the model's own (its trainer's bos_id and eos_id); -1 when there is none.
std::int32_t tokenNamed(const TokenizerConfig& config, const char* key, const TokenizerConfig::SpecialToken& token,
                        const AddedVocabulary& added, const SentencePieceModel& sp, std::int32_t fallback)
{
    if (!token.declared) return fallback;
    if (!token.content) return -1;
    if (const auto id = added.idOf(*token.content)) return *id;
    if (const auto id = sp.tokenToId(*token.content)) return *id;
    throw InputError(config.file.string() + ": " + key + " \"" + clipForMessage(*token.content) + "\" is not a piece of tokenizer.model "
                     "nor an added token");
}

} // namespace

Tokenizer Tokenizer::fromSentencePiece(const std::filesystem::path& file)
{
    auto impl = std::make_shared<Impl>();
    const auto sp = SentencePieceModel::load(file);
    impl->model = sp;
    impl->source = file.string();
    const TokenizerConfig config = readTokenizerConfig(file.parent_path());
    // add_bos_token and the added tokens change the ids.
    impl->hash = hashContent(fileBytes(file) + config.text);
    addTokens(impl->added, *sp, config);
    const std::int32_t bos = tokenNamed(config, "bos_token", config.bosToken, impl->added, *sp, sp->bos());
    const std::int32_t eos = tokenNamed(config, "eos_token", config.eosToken, impl->added, *sp, sp->eos());
    std::vector<std::int32_t> before, after;
    if (config.addBosToken.value_or(true) && bos >= 0) before.push_back(bos);
    if (config.addEosToken.value_or(false) && eos >= 0) after.push_back(eos);
    impl->postProcessor = makeTemplatePostProcessor(std::move(before), std::move(after));
    // The model decodes each run of its pieces to text; the decoder joins them
    // with the added tokens' text.
    impl->decoder = makeFuseDecoder();
    impl->finish();
    return Tokenizer(std::move(impl));
}

} // namespace tb::text
