#pragma once
// Using a trained model: sampling text from a checkpoint and exporting its
// weights for other tools. No LibTorch types here, so the CLI and the GUI
// include it cheaply.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
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

// How the next token is chosen, with the meanings and the order of
// transformers' generate: the repetition penalty on every id so far (the
// prompt's too), then temperature, top-k and top-p. Shared by sample, chat and
// the window's playground.
struct GenerationSettings {
    int maxNewTokens = 64;
    double temperature = 1.0;       // 0: greedy (the most likely token, after the repetition penalty)
    double topP = 1.0;              // 1: off; else the smallest set of tokens whose probability reaches it
    int topK = 0;                   // 0: off
    double repetitionPenalty = 1.0; // 1: off; > 1 divides a seen token's positive logit, multiplies a negative one
    std::uint64_t seed = 1;
};
// A conversation's defaults (trainbench-cli chat and the window's Chat tab):
// replies of up to 256 tokens at temperature 0.7, the rest off.
inline GenerationSettings chatDefaults()
{
    GenerationSettings s;
    s.maxNewTokens = 256;
    s.temperature = 0.7;
    return s;
}
// Throws InputError naming the first setting out of its range and the range;
// maxNewTokens may be 0 only where minNewTokens is 0.
void validateGenerationSettings(const GenerationSettings& settings, int minNewTokens = 1);

struct SampleRequest {
    std::string prompt;
    GenerationSettings generation;
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
    GenerationSettings generation; // maxNewTokens 0: a plain forward pass over the prompt
    bool logits = false;      // keep the fp32 logits of every prompt position
    bool probabilities = false; // keep the first new token's probabilities after the settings' filters
    std::string precision = "fp32"; // fp32 | bf16 | fp16: the dtype the model computes in
    std::string quantize = "none";  // none | nf4 | int8: the block linears quantized as they load (a bitsandbytes folder is as stored)
};

struct FolderSampleResult {
    std::vector<std::int64_t> completionIds;  // generated ids only
    std::vector<std::vector<float>> logits;   // [prompt position][vocab], before the first generated token
    std::vector<float> probabilities;         // [vocab]: the first new token's, as it was drawn (0 where filtered)
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

// A conversation with a trained run or a model folder: the chat playground's
// and `trainbench-cli chat`'s model, loaded once and asked turn after turn.
struct ChatMessage {
    std::string role; // system | user | assistant
    std::string content;
};

struct ChatReply {
    enum class End { EndOfTurn, MaxTokens, Stopped };
    std::string text;              // the reply, without the token that ended the turn
    std::vector<std::int64_t> ids; // the generated ids, that token included
    End end = End::MaxTokens;
    std::int64_t promptTokens = 0; // the conversation as the model read it
    bool promptCut = false;        // longer than the model's window: its beginning was not seen
    double seconds = 0.0;
};

class ChatModel {
public:
    // A run's model from one of its checkpoints, on the CPU in fp32; its data
    // gives the tokenizer and, for a Hugging Face folder, the chat template.
    // `name` is how describe() calls it. Throws InputError as sample does.
    static std::unique_ptr<ChatModel> fromRun(const RunConfig& config, const std::string& checkpoint, const std::string& name);
    // A Hugging Face folder with its tokenizer, computing in fp32, bf16 or
    // fp16, its block linears quantized as they load where quantize says so.
    static std::unique_ptr<ChatModel> fromFolder(const std::string& folder, const std::string& precision = "fp32",
                                                 const std::string& quantize = "none");
    ~ChatModel();
    ChatModel(const ChatModel&) = delete;
    ChatModel& operator=(const ChatModel&) = delete;

    // With a chat template the whole conversation is rendered through it
    // (system prompt, every turn, the generation prompt). Without one (a base
    // model, a built-in task) the last user message is continued on its own.
    bool hasChatTemplate() const;
    int window() const;           // the most tokens the model reads at once
    std::string describe() const; // "run 12 (Llama 3 template, window 2,048)"
    // Generates the assistant's next turn. onText gets the reply's text as it
    // grows, whole characters only; the pieces add up to the reply's text
    // (a task that writes its answer only when done, addition, gives it
    // whole at the end). `stop` set ends it after the token in
    // hand. One reply at a time per model. Throws InputError for bad
    // settings, an empty conversation or one the template refuses.
    ChatReply reply(const std::vector<ChatMessage>& messages, const GenerationSettings& settings,
                    const std::function<void(const std::string&)>& onText = {}, const std::atomic<bool>* stop = nullptr);

private:
    ChatModel();
    struct Impl;
    std::unique_ptr<Impl> m;
};

} // namespace tb
