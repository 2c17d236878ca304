#pragma once
// What only loading a TorchScript model can tell the preflight. Filled by
// inspectModelFile (train/DeviceAudit.h, which uses LibTorch); the preflight
// rules (diagnose/) read it without LibTorch.

#include <cstdint>
#include <string>

namespace tb {

struct ModelFileFacts {
    std::string loadError;          // non-empty: the file cannot be used as a scripted causal LM
    std::int64_t vocabSize = 0;     // the logits' width; 0 unknown
    std::int64_t maxTokenId = 0;    // the largest token id the dataset feeds it
    bool lookupOutOfRange = false;  // a forward of that id indexed out of range (the embedding is too small)
    std::string lookupError;        // what that forward said
};

} // namespace tb
