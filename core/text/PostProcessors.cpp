#include "text/PostProcessors.h"

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "text/JsonFields.h"
#include "text/Regex.h"

namespace tb::text {
namespace {

using json = nlohmann::json;

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

// The ids of one {"SpecialToken": {"id": NAME}} of the template, from special_tokens.
std::vector<std::int32_t> specialTokenIds(const json& j, const json& piece, const std::string& here)
{
    const std::string& name = stringField(piece["SpecialToken"], "id", here + ".single[].SpecialToken");
    const auto specials = j.find("special_tokens");
    if (specials == j.end() || !specials->is_object() || !specials->contains(name))
        throw InputError(here + ": the special token \"" + clipForMessage(name) + "\" of the template is not in special_tokens");
    const auto& ids = (*specials)[name]["ids"];
    if (!ids.is_array()) throw InputError(here + ".special_tokens[\"" + clipForMessage(name) + "\"].ids must be an array");
    std::vector<std::int32_t> out;
    for (const auto& id : ids) {
        if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > 0x7FFFFFFF)
            throw InputError(here + ".special_tokens[\"" + clipForMessage(name) + "\"].ids holds a non-id");
        out.push_back(id.get<std::int32_t>());
    }
    return out;
}

PostProcessorPtr makeTemplateProcessing(const json& j, const std::string& here)
{
    const auto single = j.find("single");
    if (single == j.end() || !single->is_array())
        throw InputError(here + ".single must be an array of {\"SpecialToken\": ...} and {\"Sequence\": ...}");
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
        const auto ids = specialTokenIds(j, piece, here);
        auto& target = seenSequence ? p->after : p->before;
        target.insert(target.end(), ids.begin(), ids.end());
    }
    if (!seenSequence) throw InputError(here + ".single has no sequence $A");
    return p;
}

} // namespace

PostProcessorPtr makeTemplatePostProcessor(std::vector<std::int32_t> before, std::vector<std::int32_t> after)
{
    auto p = std::make_unique<TemplatePostProcessor>();
    p->before = std::move(before);
    p->after = std::move(after);
    return p;
}

PostProcessorPtr makePostProcessor(const json& j, const std::string& at, int depth)
{
    checkDepth(depth, at);
    const std::string type = typeOf(j, at);
    const std::string here = at + " (" + type + ")";
    if (type == "ByteLevel") return std::make_unique<NoOpPostProcessor>(); // it only trims offsets
    if (type == "TemplateProcessing") return makeTemplateProcessing(j, here);
    if (type == "BertProcessing" || type == "RobertaProcessing") {
        const std::int32_t cls = idOfPair(j, "cls", here);
        return makeTemplatePostProcessor({cls}, {idOfPair(j, "sep", here)});
    }
    if (type == "Sequence") {
        auto p = std::make_unique<SequencePostProcessor>();
        readSequenceParts(j, "processors", here, at, depth, p->parts,
                          [](const auto& part, const std::string& path, int d) { return makePostProcessor(part, path, d); });
        return p;
    }
    throw InputError(at + ": the post-processor \"" + clipForMessage(type) +
                     "\" is not supported (supported: TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence)");
}

} // namespace tb::text
