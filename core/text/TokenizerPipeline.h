#pragma once
// A tokenizer's pipeline, as Hugging Face's tokenizers runs it: the added
// vocabulary split out first, then normalizer -> pre-tokenizer -> model ->
// post-processor; the decoder back. A tokenizer.json fills every stage from
// its JSON (TokenizerJson.cpp); a SentencePiece tokenizer.model is the model
// stage's other variant, with no normalizer or pre-tokenizer and BOS/EOS as
// tokenizer_config.json asks (SentencePieceTokenizer.cpp). Internal to tb_text.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "text/AddedVocabulary.h"
#include "text/Decoders.h"
#include "text/Normalizers.h"
#include "text/PostProcessors.h"
#include "text/PreTokenizers.h"
#include "text/Tokenizer.h"
#include "text/TokenizerModel.h"

namespace tb::text {

struct Tokenizer::Impl {
    std::string source;
    std::string hash;
    // Stages that a tokenizer leaves out are null.
    NormalizerPtr normalizer;
    PreTokenizerPtr preTokenizer;
    std::shared_ptr<const TokenizerModel> model;
    PostProcessorPtr postProcessor;
    DecoderPtr decoder;
    AddedVocabulary added;
    std::int32_t limit = 0;

    // Once the stages are set: the added vocabulary's matchers and the id limit.
    void finish();
};

// A hash of the files a tokenizer was read from, for cache keys.
std::string hashContent(std::string_view content);

} // namespace tb::text
