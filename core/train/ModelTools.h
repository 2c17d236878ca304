#pragma once
// Using a trained model: sampling text from a checkpoint and exporting its
// weights for other tools. No LibTorch types here, so the CLI and the GUI
// include it cheaply.

#include <cstdint>
#include <string>
#include <vector>

#include "config/RunConfig.h"

namespace tb {

// The files export-model writes into its folder: the ones it refuses to write
// over the store, and the ones the window asks before replacing.
inline const std::vector<std::string>& exportModelFiles()
{
    static const std::vector<std::string> files{"model.safetensors", "config.json", "model.safetensors.index.json",
                                                "adapter_model.safetensors", "adapter_config.json"};
    return files;
}

struct SampleRequest {
    std::string prompt;
    int maxTokens = 64;
    double temperature = 1.0; // 0: greedy
    int topK = 0;             // 0: no top-k filter
    std::uint64_t seed = 1;
    bool chat = false; // the prompt is one user message, rendered with the model's chat template
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

// Running a Hugging Face model folder directly, without a run.
struct FolderSampleRequest {
    std::vector<std::int64_t> promptIds;
    int maxTokens = 64;       // 0: a plain forward pass over the prompt
    double temperature = 1.0; // 0: greedy
    int topK = 0;
    std::uint64_t seed = 1;
    bool logits = false;      // keep the fp32 logits of every prompt position
    std::string precision = "fp32"; // fp32 | bf16 | fp16: the dtype the model computes in
    std::string quantize = "none";  // none | nf4 | int8: the block linears quantized as they load (a bitsandbytes folder is as stored)
};

struct FolderSampleResult {
    std::vector<std::int64_t> completionIds;  // generated ids only
    std::vector<std::vector<float>> logits;   // [prompt position][vocab], before the first generated token
    bool stoppedAtEos = false;
    std::string architecture;                 // HfArchitecture::summary()
    double loadSeconds = 0.0;    // reading config.json, building the model and copying the weights in
    double computeSeconds = 0.0; // the forward passes
};

// Builds the folder's model in the requested precision on the CPU and
// generates, stopping at generation_config.json's (or config.json's)
// eos_token_id. Throws InputError for a bad folder or an id outside the vocabulary.
FolderSampleResult sampleFromFolder(const std::string& folder, const FolderSampleRequest& request);

struct ExportedModel {
    std::string weightsPath;   // <dir>/model.safetensors (sharded: the index), or adapter_model.safetensors
    std::string configPath;    // <dir>/config.json (Llama family, hf), adapter_config.json (PEFT), else empty
    std::string format = "safetensors"; // safetensors | hf (a Hugging Face folder) | peft (an adapter folder)
    std::int64_t tensors = 0;
    std::int64_t parameters = 0;
    bool mergedLora = false;
    bool quantized = false; // written in bitsandbytes' layout (a QLoRA run's model)
};

// Writes model.safetensors (and, for a Llama-family model, a Hugging Face
// config.json for LlamaForCausalLM) into outputDir. A run of a Hugging Face
// folder (model.type hf) exports a folder of its own family: the source's
// config.json, generation and tokenizer files, and the weights (sharded above
// 5 GB); with LoRA and without mergeLora, a PEFT adapter folder instead
// (adapter_config.json, adapter_model.safetensors with PEFT's names). Each file is written through a temporary
// file and a rename. With mergeLora, adapters are folded into the base weights
// (W + alpha/r * B A) and not written; a QLoRA run's merged model is written
// in bf16. With `quantized` (a QLoRA run only), the merged model's block
// linears are quantized again in the run's format and the folder written as
// transformers saves a bitsandbytes model (quantization_config, Linear4bit's
// or Linear8bitLt's keys), the rest in bf16.
ExportedModel exportModel(const RunConfig& config, const std::string& checkpointPath, const std::string& outputDir,
                          bool mergeLora, bool quantized = false);

} // namespace tb
