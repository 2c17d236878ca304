#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/Errors.h"

namespace tb {

struct ModelConfig {
    // gpt | llama (built in) | torchscript (a user's scripted causal LM in `path`:
    // forward(int64 token ids [batch, seq]) -> logits [batch, seq, vocab]; the
    // size fields below do not apply to it) | hf (a Hugging Face model folder in
    // `path`, Llama family; the size fields are its config.json's, filled in
    // when the config is read, and a given one that differs is refused)
    std::string type = "gpt";
    std::string path; // torchscript: the saved module (torch.jit.save); hf: the folder; relative to the config's folder
    int nLayer = 2;
    int dModel = 128;
    int nHead = 4;
    int nKvHead = 0; // llama: key/value heads (grouped-query attention); 0 = n_head
    int dFf = 0;     // 0: 4 * d_model (gpt), the Llama rule 2/3 * 4 * d_model rounded up to 64 (llama)
    std::string positionalEncoding = "learned"; // learned | sinusoidal | rope (llama: rope)
    double ropeTheta = 10000.0;
    double rmsNormEps = 1e-5; // llama
    double dropout = 0.0;
    std::string attention = "eager"; // eager | sdpa (LibTorch >= 2.0)
    bool tieEmbeddings = true;       // default true for gpt, false for llama
    int vocabSize = 0;               // hf: the folder's vocab_size (filled in when read); else unused (0)
    // none | nf4 | int8: the frozen base's linear layers stored quantized (QLoRA;
    // llama and hf, with LoRA). nf4: 4-bit NormalFloat in blocks of 64;
    // int8: 8 bits per weight with a per-row scale.
    std::string quantize = "none";
    bool doubleQuant = true; // nf4: the block scales stored in 8 bits

    int feedForwardWidth() const
    {
        if (dFf > 0) return dFf;
        if (type == "llama") return ((8 * dModel / 3) + 63) / 64 * 64;
        return 4 * dModel;
    }
};

struct DataConfig {
    // addition | text | jsonl (one JSON object per line; hf models) | tokens (little-endian
    // token ids, nanoGPT's .bin layout). text and jsonl train an hf model on its own tokenizer's
    // ids (tokenized once into a cache); a built-in model reads text byte by byte.
    std::string source = "addition";
    std::string tokenDtype = "uint16"; // tokens: uint16 | uint32
    int digits = 3;                  // addition only
    std::string path;                // text: empty = bundled sample text; jsonl: the records; tokens: the id file
    std::string field = "text";      // jsonl: the string field holding each document
    bool skipBadLines = false;       // text, jsonl: skip and count bad lines instead of stopping at the first
    int seqLen = 0;                  // 0: what the dataset needs (addition), 64 for text
    double valFraction = 0.05;
};

struct OptimConfig {
    std::string optimizer = "adamw"; // adamw | sgd
    double lr = 1e-3;
    double weightDecay = 0.01;
    std::array<double, 2> betas{0.9, 0.99};
    double momentum = 0.9;
    int warmupSteps = 0;
    std::string schedule = "cosine"; // cosine | linear | constant (config/LearningRate.h)
    double minLrRatio = 0.1;         // cosine, linear: the last step's rate, a fraction of lr
    double gradClip = 1.0;           // 0: off
    bool decayEmbeddings = false;    // AdamW weight decay on embedding tables too
};

struct TrainConfig {
    int batchSize = 32;
    int gradAccum = 1;
    int steps = 200;
    std::uint64_t seed = 1;
    std::string precision = "auto"; // auto | fp32 | fp16 | bf16
    bool activationCheckpointing = false;
    int evalEvery = 0;   // 0: ten evaluations per run
    int evalBatches = 8; // batches per validation pass
    int logEvery = 1;
    int checkpointEvery = 0; // 0: only at the end and on cancel
    int keepCheckpoints = 3; // newest checkpoints kept per run; 0 = all
    int threads = 0;         // 0: the measured default (see Threads.cpp)
    // Data parallel: how long a rank waits on the others (rendezvous, a
    // collective) before the run fails; a dead or hung rank fails it this soon.
    int distTimeoutS = 300;
    // Data parallel: the size of a gradient bucket in MB (PyTorch DDP's
    // bucket_cap_mb); the first bucket is at most 1 MB. Smaller buckets start
    // communicating earlier in backward; each costs one all-reduce call.
    int distBucketMb = 25;
    // Data parallel: the number of processes (ranks) the run trains with;
    // train.batch_size is per rank. Recorded with every run; a config with
    // more than 1 makes 'trainbench-cli train' start that many (--nproc).
    int worldSize = 1;
    // Start from trained weights: a run id of the same store ("run:12" or "12"),
    // a Trainbench checkpoint (.pt), a .safetensors file or a folder holding
    // model.safetensors. Empty: random initialisation.
    std::string initFrom;
    // Describe a setup for planning and preflight (a Hugging Face script's
    // choices); Trainbench itself trains fp32 weights on one device, so a run
    // refuses anything but the defaults.
    std::string weightsDtype = "fp32"; // fp32 | fp16 | bf16: the dtype the weights are loaded in
    std::string offload = "none";      // none | cpu: layers offloaded to the CPU (device_map)
};

struct LoraConfig {
    int rank = 0; // 0: off
    double alpha = 16.0;
    std::vector<std::string> targets{"attn", "mlp"};
    double dropout = 0.0; // on each adapter's input while training (PEFT's lora_dropout)
};

struct RunConfig {
    std::string name = "experiment";
    std::string device = "auto"; // auto | cpu | cuda | cuda:N
    ModelConfig model;
    DataConfig data;
    OptimConfig optim;
    TrainConfig train;
    LoraConfig lora;

    // Relative data paths are resolved against this folder (the config's own).
    std::string baseDir;
};

// One problem in a config, e.g. {"train.batch_size", "must be a positive integer, got -4"}.
struct ConfigIssue {
    std::string path;
    std::string message;
    std::string text() const { return path.empty() ? message : path + ": " + message; }
};

class ConfigError : public InputError {
public:
    ConfigError(std::string source, std::vector<ConfigIssue> issues);
    const std::vector<ConfigIssue>& issues() const { return m_issues; }
    const std::string& source() const { return m_source; }

private:
    std::string m_source;
    std::vector<ConfigIssue> m_issues;
};

// Parses and validates JSON text. Collects every problem; throws ConfigError if any.
// Relative data paths resolve against baseDir (empty: the working directory).
RunConfig parseConfig(const std::string& jsonText, const std::string& sourceName = "config",
                      const std::string& baseDir = "");
// Reads a file (relative data paths resolve against its folder) and parses it.
RunConfig loadConfigFile(const std::string& path);
// data.path made absolute against baseDir; empty for the bundled sample text.
std::string resolvedDataPath(const RunConfig& config);
// model.path made absolute against baseDir; empty unless set.
std::string resolvedModelPath(const RunConfig& config);
// Whether the memory planner models this config's architecture (the built-in
// families; a TorchScript model is only measured).
inline bool plannableModel(const RunConfig& config) { return config.model.type != "torchscript"; }
// Every problem of an already-built config (ranges, combinations). Empty = valid.
// With checkFiles, data.path must name an existing file.
std::vector<ConfigIssue> validateConfig(const RunConfig& config, bool checkFiles = true);
// LoRA over a base kept in train.weights_dtype (fp16 or bf16; the adapters
// in fp32): why it cannot train at `precision` (the resolved one, or as
// asked; "auto" passes), or "". Its products need autocast (not fp32), and
// bf16-pure keeps every weight in bf16. The trainer and preflight ask it.
std::string halfBaseProblem(const RunConfig& config, const std::string& precision);
// The whole config as pretty JSON, every key present.
std::string configToJson(const RunConfig& config);
// Every field a config can set, as sorted dotted paths ("optim.lr",
// "train.batch_size"), from the parser's own tables.
const std::vector<std::string>& configFieldPaths();

// Tokens the model sees per example for an addition task with this many digits:
// a, '+', b, '=', then the (digits+1)-digit sum; the end marker is only a target.
inline int additionSequenceLength(int digits) { return 3 * digits + 3; }
// The sequence length the model is built for (data.seq_len or the dataset's default).
int effectiveSeqLen(const RunConfig& config);
// The projections LoRA adapts: "attn" and "mlp" expand to the model family's
// projection names (llama: q_proj ... down_proj; gpt: qkv, proj, fc, out);
// other names pass through. Order kept, duplicates dropped.
std::vector<std::string> loraProjections(const std::string& modelType, const std::vector<std::string>& targets);
// The names lora.targets accepts for the config's model: "attn" and "mlp",
// and the model's own projections (a Llama's q_proj ... down_proj; a Hugging
// Face folder's by its family, read from its config.json: when that cannot be
// read, only "attn" and "mlp").
std::vector<std::string> loraTargetNames(const RunConfig& config);

// The fields (dotted paths, "name" left out) whose values differ between
// configs given as JSON text, with each config's value as compact JSON ("" where
// it lacks the field). Throws InputError naming the config that is not JSON.
struct ConfigDifference {
    std::string path;
    std::vector<std::string> values;
};
std::vector<ConfigDifference> configDifferences(const std::vector<std::string>& configJsons);

// A run's default name: the config's name, the run's id and up to three fields
// that differ from the previous run of the same config name, as
// "default-text #3 lr=0.001 batch_size=16 +2 more". previousConfigJson empty:
// the first such run ("default-text #1"), or one that trains another model or
// on other data (model.type or path, data.source or path): just the id. At
// most 200 characters.
std::string defaultRunName(const std::string& name, std::int64_t id, const std::string& configJson,
                           const std::string& previousConfigJson);

// Levenshtein distance, for did-you-mean suggestions.
int editDistance(const std::string& a, const std::string& b);
// The closest of candidates within a small distance, or "".
std::string closestName(const std::string& name, const std::vector<std::string>& candidates);

} // namespace tb
