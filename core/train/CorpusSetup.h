#pragma once
// The tokenized corpus a config's text, jsonl or chat data makes (an hf
// model's folder gives the tokenizer, its special tokens and chat template):
// one reading for the trainer (Datasets.cpp), the data preview, the dataset
// browser and `trainbench-cli data`. No LibTorch here.

#include <memory>
#include <string>

#include "config/RunConfig.h"
#include "text/ChatTemplate.h"
#include "text/Corpus.h"
#include "text/Tokenizer.h"

namespace tb {

struct CorpusSetup {
    std::shared_ptr<const text::Tokenizer> tokenizer;
    std::unique_ptr<text::ChatTemplate> chat; // chat data: the folder's template (spec.chat points here)
    text::CorpusSpec spec;
    std::string shown; // the data file as messages name it ("the bundled sample text" without data.path)
};

// Throws InputError for a folder without a tokenizer or (chat) a template.
// `tokenizer`: the folder's, when the caller has it loaded already.
CorpusSetup corpusSetupFor(const RunConfig& config, const std::string& tokenCacheRoot,
                           std::shared_ptr<const text::Tokenizer> tokenizer = nullptr);

} // namespace tb
