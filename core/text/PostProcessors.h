#pragma once
// The post-processor stage (tokenizers' processors): TemplateProcessing's
// single-sequence template, BertProcessing, RobertaProcessing, ByteLevel (ids
// unchanged) and Sequence. Internal to tb_text.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tb::text {

class PostProcessor {
public:
    virtual ~PostProcessor() = default;
    // Adds the special tokens around `ids` when `addSpecialTokens` asks.
    virtual void apply(std::vector<std::int32_t>& ids, bool addSpecialTokens) const = 0;
};
using PostProcessorPtr = std::unique_ptr<PostProcessor>;

// From a tokenizer.json's "post_processor"; `at` names it in messages.
PostProcessorPtr makePostProcessor(const nlohmann::json& j, const std::string& at, int depth = 0);
// The template "before $A after": e.g. BOS and EOS as tokenizer_config.json's
// add_bos_token and add_eos_token ask for a SentencePiece model.
PostProcessorPtr makeTemplatePostProcessor(std::vector<std::int32_t> before, std::vector<std::int32_t> after);

} // namespace tb::text
