#pragma once
// Using a trained model: sampling text from a checkpoint and exporting its
// weights for other tools. No LibTorch types here, so the CLI and the GUI
// include it cheaply.

#include <cstdint>
#include <string>
#include <vector>

#include "config/RunConfig.h"

namespace tb {

struct SampleRequest {
    std::string prompt;
    int maxTokens = 64;
    double temperature = 1.0; // 0: greedy
    int topK = 0;             // 0: no top-k filter
    std::uint64_t seed = 1;
};

struct SampleResult {
    std::string prompt;
    std::string completion;                  // as the task writes it (addition: the sum, digits in the usual order)
    std::vector<std::int64_t> completionIds; // the generated token ids only
};

// Builds the model `config` describes, loads the weights of `checkpointPath`
// and generates on the CPU. Throws InputError for a prompt the task cannot
// read or a checkpoint that does not fit.
SampleResult sampleFromCheckpoint(const RunConfig& config, const std::string& checkpointPath,
                                  const SampleRequest& request);

struct ExportedModel {
    std::string weightsPath;   // <dir>/model.safetensors
    std::string configPath;    // <dir>/config.json (Llama family), else empty
    std::int64_t tensors = 0;
    std::int64_t parameters = 0;
    bool mergedLora = false;
};

// Writes model.safetensors (and, for a Llama-family model, a Hugging Face
// config.json for LlamaForCausalLM) into outputDir, each through a temporary
// file and a rename. With mergeLora, adapters are folded into the base weights
// (W + alpha/r * B A) and not written.
ExportedModel exportModel(const RunConfig& config, const std::string& checkpointPath, const std::string& outputDir,
                          bool mergeLora);

} // namespace tb
