// A tokenizer.json -> the pipeline: each stage built from its JSON, the BPE
// model, and the added tokens with the ids tokenizers gives them.
#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "text/Bpe.h"
#include "text/JsonFields.h"
#include "text/Regex.h"
#include "text/TokenizerPipeline.h"
#include "text/Unicode.h"

namespace tb::text {
namespace {

using json = nlohmann::json;

// The model stage: BPE is the variant a tokenizer.json may name.
std::shared_ptr<const Bpe> makeModel(const json& model, const std::string& source)
{
    if (!model.is_object()) throw InputError(source + ": \"model\" must be an object");
    std::string modelType = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "";
    if (modelType.empty() && model.contains("merges")) modelType = "BPE"; // older files leave the type out
    if (modelType != "BPE")
        throw InputError(source + ": the tokenizer model \"" + clipForMessage(modelType) +
                         "\" is not supported; Trainbench reads BPE tokenizers (GPT-2, Llama, Mistral, Qwen, Gemma style), not Unigram or WordPiece");
    return std::make_shared<const Bpe>(model, source);
}

AddedToken addedTokenFrom(const json& a, const std::string& at)
{
    if (!a.is_object()) throw InputError(at + " must be an object");
    AddedToken t;
    t.content = stringField(a, "content", at);
    t.special = boolField(a, "special", false, at);
    t.normalized = boolField(a, "normalized", !t.special, at);
    t.lstrip = boolField(a, "lstrip", false, at);
    t.rstrip = boolField(a, "rstrip", false, at);
    t.singleWord = boolField(a, "single_word", false, at);
    return t;
}

// Added tokens get their ids as the Rust library's add_tokens gives them:
// the id the content already has, else the model's id for it, else the next
// free one (the file's "id" fields are not read).
void addTokens(Tokenizer::Impl& impl, const json& list, const std::string& source, std::int32_t nextId)
{
    if (!list.is_array()) throw InputError(source + ": added_tokens must be an array");
    for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string at = componentPath(source, "added_tokens[" + std::to_string(i) + "]");
        AddedToken t = addedTokenFrom(list[i], at);
        if (t.content.empty()) continue;
        if (firstInvalidUtf8(t.content) != std::string::npos) throw InputError(at + ".content is not valid UTF-8");
        if (const auto id = impl.added.idOf(t.content)) t.id = *id;
        else if (const auto v = impl.model->tokenToId(t.content)) t.id = *v;
        else t.id = nextId++;
        t.pattern = t.content;
        if (t.normalized && impl.normalizer) impl.normalizer->apply(t.pattern);
        impl.added.add(t);
    }
}

} // namespace

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
    impl->hash = hashContent(text);
    const auto bpe = makeModel(j["model"], source);
    impl->model = bpe;

    auto component = [&](const char* key) -> const json* {
        const auto it = j.find(key);
        return it == j.end() || it->is_null() ? nullptr : &*it;
    };
    if (const auto* n = component("normalizer")) impl->normalizer = makeNormalizer(*n, componentPath(source, "normalizer"));
    if (const auto* p = component("pre_tokenizer")) impl->preTokenizer = makePreTokenizer(*p, componentPath(source, "pre_tokenizer"));
    if (const auto* p = component("post_processor")) impl->postProcessor = makePostProcessor(*p, componentPath(source, "post_processor"));
    if (const auto* d = component("decoder")) impl->decoder = makeDecoder(*d, componentPath(source, "decoder"));
    if (const auto* list = component("added_tokens")) addTokens(*impl, *list, source, std::int32_t(bpe->vocabSize()));
    impl->finish();
    return Tokenizer(std::move(impl));
}

} // namespace tb::text
