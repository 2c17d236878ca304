#pragma once
// What the memory planner plans and answers in: a model's description
// (ArchitectureSpec: its name, sizes and context, for presets and lists),
// how it trains (TrainingSetup: batch, sequence, precision, checkpointing,
// LoRA, the GPU and its allocator's options), and the answer (MemoryEstimate,
// FitMap). The plan itself is the trainer's own step, recorded
// (train/DerivedPlan.h, memory/DerivedStep.h), asked through
// memory/MemoryPlan.h. No LibTorch here.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/RunConfig.h"

namespace tb {

// A model as lists and presets show it, and as tune's speed model reads
// it: its name, sizes and context length (made from the one model
// description, config/ModelSpec.h, by architectureOf). The plan itself is
// the trainer's recorded step; the parameter count is ModelSpec's.
struct ArchitectureSpec {
    std::string name;
    std::string family = "gpt"; // gpt (LayerNorm, GELU MLP) | llama (RMSNorm, SwiGLU): tune's count of MLP products
    std::int64_t vocabSize = 256;
    std::int64_t layers = 2;
    std::int64_t hidden = 128;
    std::int64_t heads = 4;
    std::int64_t kvHeads = 4;
    std::int64_t intermediate = 512;
    std::int64_t maxPositions = 64;
    bool tieEmbeddings = true;
    std::int64_t publishedParameters = 0; // from the model card, for presets; 0 = unknown

    std::int64_t headDim() const { return hidden / heads; }
};

// The major version of the LibTorch this build runs (1 or 2).
int builtTorchMajor();

// How it is trained.
struct TrainingSetup {
    std::int64_t batch = 32;
    std::int64_t seqLen = 64;
    int gradAccum = 1;
    std::string optimizer = "adamw"; // adamw | sgd (momentum > 0) | sgd-plain
    // fp32 | fp16 / bf16 (mixed: fp32 master weights, autocast) | bf16-pure
    // (weights, gradients, optimizer state and activations in bf16).
    std::string precision = "fp32";
    bool checkpointing = false;
    // The LibTorch the step runs on (its cuBLAS workspaces: 2.x allocates
    // them through the caching allocator). Default: this build's.
    int torchMajor = builtTorchMajor();
    std::string attention = "eager"; // eager | fused
    int loraRank = 0;
    std::vector<std::string> loraTargets; // projection names (q_proj, qkv, fc, ...)
    double dropout = 0.0;
    // Data the run keeps resident: validation batches, and the task's mask.
    std::string dataset = "text"; // text (token ids too) | jsonl | addition | chat (the last two: a float loss mask)
    std::int64_t evalBatches = 0;   // validation batches kept resident: evalBatches x batch examples
    std::int64_t validationCap = 0; // at most this many (a small task's whole validation split); 0: no cap
    // Where it runs. On a GPU every allocation goes through a model of the
    // CUDA caching allocator (CudaAllocatorModel.h), the plan adds the cuBLAS
    // workspace, and what the device must hold adds the CUDA context.
    bool gpu = false;
    // LibTorch's intra-op threads on the CPU (train.threads; 1 for the
    // default): oneDNN's scratch for bf16 products is per thread.
    int cpuThreads = 1;
    int gpus = 1;                          // data-parallel replicas (DDP adds gradient buckets)
    int computeCapability = 0;             // major x 10 + minor (90 for an H100); 0: not known
    std::int64_t cudaContextBytes = 0;     // 0: cudaContextFor(computeCapability); else the user's figure
    std::int64_t maxSplitSize = 0;         // PYTORCH_CUDA_ALLOC_CONF max_split_size_mb, in bytes; 0: unlimited
    bool expandableSegments = false;       // PYTORCH_CUDA_ALLOC_CONF expandable_segments:True (LibTorch 2.1 and later)
};

// The CUDA context a process holds on a card of this compute capability
// (bytes, as nvidia-smi counts them beyond what the allocator reserves), and
// where the figure comes from.
struct CudaContextFigure {
    std::int64_t bytes = 0;
    std::string source;
};
CudaContextFigure cudaContextFor(int computeCapability);
// The cuBLAS workspace of one handle and stream: LibTorch 2.x allocates it
// through the caching allocator on the first matrix product and keeps it;
// 1.13 leaves cuBLAS its own, outside the allocator. The plan counts two
// handles (the forward's thread and the autograd device thread).
std::int64_t cublasWorkspaceBytes(int torchMajor, int computeCapability);
// The data one replica holds during a step: the validation batches kept for
// the run and the step's micro-batches (int64 ids; the float loss mask of the
// addition task and of chat data). With data parallel every rank draws the global batch and trains on
// its rows, and rank 0 keeps the global batch's validation.
std::int64_t dataBytes(const TrainingSetup& setup);
// The same with the batch, sequence, dataset, ranks and micro-batches given
// apart from the setup's (the fit map asks it for every cell, without a
// copy of the setup).
std::int64_t dataBytes(const TrainingSetup& setup, std::int64_t batch, std::int64_t seqLen, const std::string& dataset,
                       int gpus, int gradAccum);
// Whether a dataset feeds a float loss mask beside the ids (the addition
// task's answer digits, chat data's assistant turns).
inline bool datasetHasLossMask(const std::string& dataset) { return dataset == "addition" || dataset == "chat"; }

struct MemoryTerm {
    std::string name;    // model_state, data, activations, attention_maps, logits, ... (BlockKind), allocator_reserved, cuda_context, ...
    std::int64_t bytes = 0;
    std::string formula; // in words
};

struct PhasePeak {
    std::string phase; // forward | backward | optimizer
    std::int64_t bytes = 0;
};

struct MemoryEstimate {
    std::int64_t parameters = 0;
    std::int64_t trainableParameters = 0;
    std::int64_t peakBytes = 0;
    std::string peakPhase;
    std::vector<MemoryTerm> terms; // what is live at the peak; sums to peakBytes
    std::vector<PhasePeak> phases;
    std::vector<std::string> notes; // what is approximate for this setup
    std::int64_t endOfStepBytes = 0; // live after the optimizer step (equals the start: a self-check)
    std::int64_t tensorPeakBytes = 0; // the tensors alone; peakBytes adds GPU overheads
    // The peak is a lower bound (a derived plan on a GPU: no allocator blocks in a CPU trace).
    bool lowerBound = false;
    // GPU: the caching allocator model's peaks, as torch.cuda.max_memory_allocated
    // (blocks, with unsplit remainders) and max_memory_reserved report them.
    // peakBytes is the reserved peak plus the CUDA context (what nvidia-smi shows).
    std::int64_t allocatedPeakBytes = 0;
    std::int64_t reservedPeakBytes = 0;
    // What a run's memory probe measures: the allocator's allocated peak on a
    // GPU (its blocks, unsplit remainders included), the tensors on the CPU.
    std::int64_t probePeakBytes() const { return allocatedPeakBytes > 0 ? allocatedPeakBytes : tensorPeakBytes; }
};

// The model a config trains (built-in, or a folder's), described: made from
// the trainer's description of it (config/ModelSpec.h); a folder that
// ArchitectureSpec cannot describe (architectureGap) or that is gone, by the
// sizes the config recorded from it.
ArchitectureSpec architectureFor(const RunConfig& config);
// A model's description; throws InputError naming what ArchitectureSpec
// does not describe (architectureGap).
struct ModelSpec;
ArchitectureSpec architectureOf(const ModelSpec& model);
// What of a model ArchitectureSpec does not describe, in words ("query and
// key norms (qwen3)", "a head size apart from hidden / heads (head_dim 128,
// ...)"), or empty.
std::string architectureGap(const ModelSpec& model);
// How a config trains, as its plan is asked (batch, sequence, precision with
// weights loaded in bf16 and trained in bf16 as pure bf16, LoRA, data).
TrainingSetup setupFor(const RunConfig& config);
// The projections the planner adapts for a config's lora.targets (groups
// expanded; a Hugging Face GPT-2's or GPT-NeoX's names as the planner's GPT
// family names them). setupFor and the Memory planner's target choice both use it.
std::vector<std::string> plannedLoraTargets(const std::string& modelType, const std::vector<std::string>& targets);


// The estimate over a batch x sequence grid (the planner's heat map).
struct FitMap {
    std::vector<std::int64_t> batches;   // columns
    std::vector<std::int64_t> seqLens;   // rows
    std::vector<std::int64_t> peakBytes; // row-major: peakBytes[row * batches.size() + column]
    std::int64_t budgetBytes = 0;
    // From the compiled step (polynomials in batch and sequence), not a
    // plan of each cell. On a GPU the caching allocator's reserve is
    // replayed at up to four cells, the lightest and, in up to three rows
    // spread along the sequence, the cell whose tensors are nearest the
    // budget, and placed on the others from them (placeAllocatorReserve):
    // a placed cell's figure and, near the budget, its verdict can differ
    // from the estimate's.
    bool compiled = false;
    std::int64_t at(std::size_t row, std::size_t column) const { return peakBytes[row * batches.size() + column]; }
};
// A GPU map's caching-allocator reserve: map.peakBytes holds each cell's
// tensors plus what lies outside the allocator, placedBase the tensors the
// allocator holds (-1: a cell already exact). exact(index) is the cell's
// estimate (the allocator replayed; its peak, tensor peak and reserved peak
// are read); lightest() the lightest cell's (at lightIndex), asked for after
// the other replays (it may run beside them). The reserve is replayed at the
// cell whose tensors are nearest the budget and at the same in two more rows
// spread along the sequence, and placed on each row's line through the
// lightest cell's and its row's, interpolated along the sequence
// (DerivedStep::fitMap).
void placeAllocatorReserve(FitMap& map, const std::vector<std::int64_t>& placedBase, std::size_t lightIndex,
                           const std::function<MemoryEstimate()>& lightest,
                           const std::function<MemoryEstimate(std::size_t)>& exact);
// Up to `count` distinct integers from `first` to `last`, evenly spaced.
std::vector<std::int64_t> fitMapAxis(std::int64_t first, std::int64_t last, int count);

} // namespace tb
