#pragma once
// One model description: every shape and switch the trainer builds a model
// from (train/Layers.h calls it ModelOptions), made from a config's built-in
// model or from a Hugging Face folder's config.json, and what the memory
// planner plans from (the recorded step's probes move its widths; the hand
// replay's ArchitectureSpec of a config is made from it). No LibTorch here.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "config/HfArchitecture.h"
#include "config/RunConfig.h"

namespace tb {

struct ModelSpec {
    std::string type = "gpt"; // gpt | llama | torchscript (an hf folder of the Llama family builds "llama")
    std::string scriptPath;   // torchscript: the saved module; hf: the model folder
    std::string hfFamily;     // llama | mistral | qwen2 | qwen3 | phi3 | gemma3_text when built from a Hugging Face folder, else empty
    int vocabSize = 256;
    int maxLen = 64;
    int nLayer = 2;
    int dModel = 128;
    int nHead = 4;
    int nKvHead = 0; // llama: grouped-query attention; 0 = nHead
    int dFf = 512;
    std::string positionalEncoding = "learned"; // gpt only; llama is always rope
    // Hugging Face GPT-2 / GPT-NeoX (types "gpt2", "gpt_neox"):
    double layerNormEps = 1e-5;
    bool geluTanh = false;      // gelu_new rather than the exact GELU
    int rotaryDims = 0;         // GPT-NeoX: head dimensions RoPE rotates; the rest pass through
    bool parallelResidual = false;
    double ropeTheta = 10000.0;
    double rmsNormEps = 1e-5;
    double dropout = 0.0;
    bool tieEmbeddings = true;
    bool activationCheckpointing = false;
    std::string attention = "eager"; // eager | sdpa (LibTorch >= 2.0)
    // Hugging Face Llama-family variants (all false / 0 for the built-in models).
    int headDimOverride = 0;  // config.json "head_dim" when it is not d_model / n_head
    bool qkvBias = false;     // q, k, v projections with a bias (Qwen2, attention_bias)
    bool outputBias = false;  // o_proj with a bias (attention_bias)
    bool mlpBias = false;     // gate, up, down with a bias (mlp_bias)
    bool qkNorm = false;      // RMSNorm over each head's queries and keys before RoPE (Qwen3's q_norm, k_norm)
    bool fusedProjections = false; // Phi-3's qkv_proj (q, k, v along its output) and gate_up_proj (gate, then up)
    int slidingWindow = 0;    // Mistral: a query sees this many most recent positions, itself included
    // Gemma 3 (gemmaNorms): (1 + w) RMSNorms in fp32, before and after both
    // attention and the MLP; embeddings times embedScale; attention scaled by
    // queryScale; only the slidingLayers see slidingWindow positions, with
    // RoPE at localRopeTheta. A Llama MLP with geluTanh is GeGLU.
    bool gemmaNorms = false;
    double embedScale = 0.0;        // 0: none
    double queryScale = 0.0;        // 0: 1 / sqrt(head size)
    std::vector<bool> slidingLayers; // empty: every layer slides where slidingWindow > 0
    double localRopeTheta = 0.0;    // 0: the sliding layers use ropeTheta
    // rope_scaling of type llama3 (ropeFactor 0: none).
    double ropeFactor = 0.0, ropeLowFreqFactor = 1.0, ropeHighFreqFactor = 4.0;
    int ropeOriginalMaxPositions = 0;
    int loraRank = 0;
    double loraAlpha = 16.0;
    double loraDropout = 0.0; // on each adapter's input while training
    // Projection names that get adapters: gpt qkv/proj/fc/out, llama q_proj ... down_proj.
    std::set<std::string> loraTargets{"qkv", "proj", "fc", "out", "q_proj", "k_proj", "v_proj", "o_proj",
                                      "gate_proj", "up_proj", "down_proj"};

    int headDim() const { return headDimOverride > 0 ? headDimOverride : dModel / nHead; }
    int kvHeads() const { return nKvHead > 0 ? nKvHead : nHead; }
    int adapterRank(const std::string& projection) const { return loraTargets.count(projection) ? loraRank : 0; }
};

// A folder's architecture (config.json, read by HfArchitecture.h), for
// sequences of up to maxLen tokens.
ModelSpec modelSpecFromHf(const HfArchitecture& arch, const std::string& folder, int maxLen);
// The parameters of the model the trainer builds from `m` (adapters
// included; a quantized weight counts as its weights): the one count, for the
// window, the presets, the planner and the trainer's announcement alike.
std::int64_t parameterCount(const ModelSpec& m);

// A config's model: its folder's (model.type "hf"), or the built-in one with
// this vocabulary and sequence length (the dataset's); with the run's
// switches (dropout, attention, checkpointing, LoRA).
ModelSpec modelSpecFor(const RunConfig& config, int vocabSize, int seqLen);
// A built-in model's vocabulary: its dataset's (the addition task's 13
// symbols, else bytes). A folder's is its config.json's.
int builtInVocabSize(const RunConfig& config);
// The parameters of the model a config trains (its folder's, or the
// built-in one at its dataset's vocabulary and sequence length; adapters
// included). Throws InputError where a folder cannot be read.
std::int64_t parameterCount(const RunConfig& config);

} // namespace tb
