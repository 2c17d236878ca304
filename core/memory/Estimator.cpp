#include "memory/Estimator.h"

#include "config/ModelSpec.h"

#include "config/HfArchitecture.h"
#include "memory/Concurrently.h"
#include "memory/Replay.h"
#include "memory/Architectures.h"
#include "memory/LargestFitting.h"
#include "memory/StepPolynomials.h"

#include <algorithm>
#include <cstdio>
#include <array>
#include <atomic>
#include <cmath>
#include <exception>
#include <future>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>

namespace tb {
using namespace memory_detail;
namespace {

struct Param {
    std::int64_t numel;
    bool trainable;
    bool decay; // matrices other than embeddings
};

// Parameters in registration order (the optimizer's order within a group).
std::vector<Param> parameters(const ArchitectureSpec& a, int rank, const std::vector<std::string>& targets)
{
    const bool lora = rank > 0;
    std::vector<Param> out;
    const auto push = [&](std::int64_t n, bool matrix, bool adapter = false) {
        out.push_back({n, !lora || adapter, matrix});
    };
    const auto linear = [&](const std::string& name, std::int64_t in, std::int64_t o, bool bias) {
        push(in * o, true);
        if (bias) push(o, false);
        if (lora && std::find(targets.begin(), targets.end(), name) != targets.end()) {
            push(rank * in, true, true);
            push(o * rank, true, true);
        }
    };
    const std::int64_t d = a.hidden, hd = a.headDim(), q = a.heads * hd, kv = a.kvHeads * hd, f = a.intermediate;
    if (a.family == "llama") {
        push(a.vocabSize * d, false); // embed_tokens
        for (std::int64_t l = 0; l < a.layers; ++l) {
            linear("q_proj", d, q, a.qkvBias);
            linear("k_proj", d, kv, a.qkvBias);
            linear("v_proj", d, kv, a.qkvBias);
            linear("o_proj", q, d, false);
            linear("gate_proj", d, f, false);
            linear("up_proj", d, f, false);
            linear("down_proj", f, d, false);
            push(d, false);
            push(d, false);
        }
        push(d, false);
        if (!a.tieEmbeddings) push(a.vocabSize * d, true);
        return out;
    }
    push(a.vocabSize * d, false); // wte
    if (a.positional == "learned") push(a.maxPositions * d, false);
    for (std::int64_t l = 0; l < a.layers; ++l) {
        push(d, false);
        push(d, false); // ln1
        linear("qkv", d, 3 * d, true);
        linear("proj", d, d, true);
        push(d, false);
        push(d, false); // ln2
        linear("fc", d, f, true);
        linear("out", f, d, true);
    }
    push(d, false);
    push(d, false); // lnf
    if (!a.tieEmbeddings) push(a.vocabSize * d, true);
    return out;
}

} // namespace

std::int64_t parameterCount(const ArchitectureSpec& arch, int loraRank, const std::vector<std::string>& loraTargets)
{
    std::int64_t n = 0;
    for (const auto& p : parameters(arch, loraRank, loraTargets)) n += p.numel;
    return n;
}

namespace {

// Validation examples kept resident for the whole run.
std::int64_t validationExamples(const TrainingSetup& S, std::int64_t batch, int gpus)
{
    // Data parallel: rank 0 evaluates the global batch's worth (the planned rank).
    const auto wanted = S.evalBatches * batch * std::max(1, gpus);
    return S.validationCap > 0 ? std::min(wanted, S.validationCap) : wanted;
}
std::int64_t validationExamples(const TrainingSetup& S) { return validationExamples(S, S.batch, S.gpus); }

std::int64_t exampleBytes(std::int64_t seqLen, const std::string& dataset)
{
    return (seqLen + 1) * 8 + (datasetHasLossMask(dataset) ? seqLen * 4 : 0);
}
std::int64_t exampleBytes(const TrainingSetup& S) { return exampleBytes(S.seqLen, S.dataset); }

// What data parallel adds to the tensors (the reducer's gradient buckets, on
// any device) and what a GPU adds to them: the CUDA context. (What the
// caching allocator reserves beyond the tensors comes from its model.)
struct GpuOverheads {
    std::int64_t buckets = 0, context = 0;
    std::int64_t total() const { return buckets + context; }
};

std::int64_t contextBytes(const TrainingSetup& S)
{
    return S.cudaContextBytes > 0 ? S.cudaContextBytes : cudaContextFor(S.computeCapability).bytes;
}

GpuOverheads gpuOverheads(const TrainingSetup& S, std::int64_t trainableBytes)
{
    const std::int64_t buckets = S.gpus > 1 ? trainableBytes : 0;
    if (!S.gpu) return {buckets, 0};
    return {buckets, contextBytes(S)};
}

// A replay whose allocations are recorded (the fit map's compiler).
struct Recording {
    StepTrace trace; // live bytes after each allocation
    std::int64_t calls = 0;          // allocations and releases replayed
    std::int64_t trainableBytes = 0;
};
MemoryEstimate estimateImpl(const ArchitectureSpec& arch, const TrainingSetup& S, Recording* recording)
{
    // LoRA is planned from its own training step only (ownStepReason).
    if (S.loraRank > 0) {
        throw InputError("LoRA adapters are planned from the model's own training step (trainbench-cli estimate "
                         "--config FILE, or the Memory planner), not by the hand replay");
    }
    // So is mixed precision (autocast over fp32 master weights).
    if (mixedPrecision(S.precision)) {
        throw InputError(S.precision + " mixed precision is planned from the model's own training step "
                         "(trainbench-cli estimate, or the Memory planner), not by the hand replay");
    }
    // Past a sliding window the trainer masks the band below it and runs
    // eager attention, SDPA asked for or not (train/Layers.cpp tablesFor).
    if (S.attention == "fused" && arch.windowedAt(S.seqLen)) {
        auto eager = S;
        eager.attention = "eager";
        auto est = estimateImpl(arch, eager, recording);
        est.notes.push_back("the sequence (" + std::to_string(S.seqLen) + ") is longer than the model's sliding window ("
                            + std::to_string(arch.slidingWindow) + "): the trainer masks the window and runs eager "
                            "attention, SDPA asked for or not, with its attention maps");
        return est;
    }
    // The built-in model is built for the sequence length it trains on.
    ArchitectureSpec sized;
    if (S.positionsFollowSeq && arch.maxPositions != S.seqLen) {
        sized = arch;
        sized.maxPositions = S.seqLen;
    }
    const ArchitectureSpec& A = S.positionsFollowSeq && arch.maxPositions != S.seqLen ? sized : arch;
    MemoryEstimate est;
    // Element bytes: fp32, or bf16 throughout for pure bf16 (mixed
    // precision is planned from its own step). The loss's log-softmax is
    // fp32 in every mode.
    const bool pure = S.precision == "bf16-pure";
    const std::int64_t e = pure ? 2 : 4;
    const std::int64_t B = S.batch, T = S.seqLen, C = A.hidden, H = A.heads, F = A.intermediate, V = A.vocabSize;
    const std::int64_t BT = B * T;
    const std::int64_t a = BT * C * e, f = BT * F * e, s = B * H * T * T * e, m = BT * 4, lg = BT * V * 4;
    // Further attention modules per layer keep their own maps (the replay's
    // transients are those of one module).
    // (Pure bf16 on a Llama-family model or GPT-NeoX: the fp32 softmax, its
    // cast back and the fp32 noise.)
    const bool pureMaps = pure && (A.family == "llama" || A.fp32Softmax);
    // The saved dropout noise of one map (fp32 where the softmax is) and of
    // one activation: on a GPU one-byte masks.
    const std::int64_t mapNoise = dropoutNoiseBytes(S, pureMaps ? 2 * s : s, pureMaps ? 4 : e);
    const std::int64_t noiseA = dropoutNoiseBytes(S, a, e);
    const std::int64_t extraMaps =
        (A.attentionModules - 1)
        * (pureMaps ? 3 * s + (S.dropout > 0.0 ? mapNoise : 0) : s + (S.dropout > 0.0 ? mapNoise + s : 0));
    const std::int64_t akv = a * A.kvHeads / A.heads;
    const std::int64_t idx = BT * 8; // an int64 copy of the token ids or targets
    const bool llama = A.family == "llama";
    // SDPA's fused kernel (FusedAttention.h), or its math fallback.
    const auto fused = fusedAttentionBytes(A, S, e, !recording);
    const bool eager = !fused.fused;
    const bool math = fused.math;
    auto mathShape = mathAttention(A, S, e);
    const std::int64_t extraAttention = sdpaExtraModuleBytes(A, fused, mathShape);
    const bool rope = llama || A.positional == "rope";
    const bool gqa = llama && A.kvHeads < A.heads;
    // The expanded keys and values are copies (the math fallback takes one
    // key/value head's stride-0 view to fp32 as it is).
    const bool expands = math ? gqa && A.kvHeads > 1 : gqaExpandCopies(A, B, eager);
    const bool folds = eager && !math && matmulFoldsViews(B, H); // head-split views go to bmm uncopied
    // In fp32 the math fallback's bmm may save v itself: qkv (GPT), the
    // expanded values, or the v projection (Llama) stay with it.
    mathShape.callerValues = !llama ? 3 * a : expands ? a : akv;
    const std::int64_t mathKeptValues = mathShape.keepsCallersValues() ? mathShape.callerValues : 0;
    const double p = S.dropout;
    const bool drop = p > 0.0;
    const std::int64_t rng = rngStateBytes(S);
    // Under checkpointing the gradient of a block's output is held by the
    // checkpoint node until the block's backward returns.
    const std::int64_t heldGrad = S.checkpointing ? a : 0;

    const auto params = parameters(A, 0, {});
    std::int64_t P = 0, Ptrain = 0, maxTrain = 0, maxDecay = 0;
    for (const auto& q : params) {
        P += q.numel;
        if (!q.trainable) continue;
        Ptrain += q.numel;
        maxTrain = std::max(maxTrain, q.numel);
        if (q.decay) maxDecay = std::max(maxDecay, q.numel);
    }
    est.parameters = P;
    est.trainableParameters = Ptrain;

    // A recording (the fit map's compiler) is exact: no rounding.
    Replay r(S.gpu && !recording ? 512 : 1, recording ? &recording->trace : nullptr);
    // bf16 on the CPU: each product takes oneDNN's scratch while it runs.
    const bool cpuBf16 = !S.gpu && (S.precision == "bf16" || S.precision == "bf16-pure");
    if (cpuBf16) r.cpuProducts(S.cpuThreads);
    std::optional<CudaAllocatorModel> allocator;
    if (S.gpu && !recording) {
        CudaAllocatorSettings settings;
        if (S.maxSplitSize > 0) settings.maxSplitSize = S.maxSplitSize;
        settings.expandableSegments = S.expandableSegments;
        allocator.emplace(settings);
        r.useAllocator(&*allocator);
        // Data parallel: the reducer's flat gradient buckets exist from the
        // start of the run (counted as a term of their own below).
        if (S.gpus > 1) (void)allocator->allocate(Ptrain * e);
    }
    // Between steps (from the second on): weights, gradients (with LibTorch
    // 1.13, whose zero_grad zeroes them in place), optimizer state, resident data.
    r.add(Weights, P * e);
    const std::int64_t tables = positionTableBytes(A, S);
    r.add(Weights, tables);
    GradientLife grads(r, S, Ptrain * e);
    {
        // Per block, the gradients the replay does not follow one by one:
        // the two norms' (gain and, in the GPT family, bias), and the Llama
        // family's q, k and v biases (where set). (The GPT replay follows
        // its biases with their weights.)
        const std::int64_t kv = A.kvHeads * A.headDim(), q = A.heads * A.headDim();
        const std::int64_t small = A.family == "llama" ? 2 * C + (A.qkvBias ? q + 2 * kv : 0) : 4 * C;
        grads.smallPerBlock(small * e);
    }
    std::int64_t stateTensors = 0;
    if (S.optimizer == "adamw") stateTensors = 2 * Ptrain * e;
    else if (S.optimizer == "adamw8bit") stateTensors = 2 * Ptrain; // one byte per moment (planning option)
    else if (S.optimizer == "sgd") stateTensors = Ptrain * e;     // momentum buffer
    r.add(OptimizerState, stateTensors);
    const bool masked = hasLossMask(S);
    // Resident for the whole run; the fit map adds it cell by cell (a cap
    // makes it piecewise in the batch).
    if (!recording) r.add(Data, validationExamples(S) * exampleBytes(S));
    // All micro-batches of a step are drawn before the first forward pass;
    // with data parallel every rank draws the global batch and trains on its rows.
    r.add(Data, S.gradAccum * B * std::max(1, S.gpus) * exampleBytes(S));
    // The cuBLAS workspaces, made on the first step's first products and
    // kept: one per thread's handle, the forward's and the autograd device
    // thread's (LibTorch 2.x allocates them through the caching allocator).
    if (S.gpu && S.torchMajor >= 2) {
        r.add(LibraryWorkspace, cublasWorkspaceBytes(S.torchMajor, S.computeCapability));
        r.add(LibraryWorkspace, cublasWorkspaceBytes(S.torchMajor, S.computeCapability));
    }
    const auto act = [&](std::int64_t bytes) { r.add(Activations, bytes); };
    const auto tmp = [&](std::int64_t bytes) { r.add(Workspace, bytes); };
    const auto untmp = [&](std::int64_t bytes) { r.sub(Workspace, bytes); };
    // ---- forward of one micro-batch ----
    r.phase("forward");
    // Embedding: the ids are copied to a contiguous int64 tensor first.
    tmp(idx);
    act(a);
    untmp(idx);
    if (!llama && A.positional == "learned") {
        tmp(T * C * e);
        act(a);
        r.sub(Activations, a);
        untmp(T * C * e);
    } else if (!llama && A.positional == "sinusoidal") {
        act(a);
        r.sub(Activations, a);
    }
    if (drop && !llama) {
        act(noiseA); // noise, saved; the dropped copy replaces the sum as the saved block input
        act(a);
        r.sub(Activations, a);
    }
    causalMask(r, A, S, T * T);
    // RMSNorm's x^2 while it stays saved (LibTorch 1.13).
    const std::int64_t sq = meanSavesInput(S) ? a : 0;
    // Pure bf16 on a Llama-family model (train/Llama.cpp, as transformers
    // computes it): RMSNorm works on an fp32 copy of its input and casts the
    // normalized tensor back, the softmax runs in fp32 and is cast back for
    // the product with the values, and the loss reads an fp32 copy of the
    // bf16 logits. Neither norm saves its bf16 input, so the residual stream
    // is not kept: a block's input and its mid-block sum go when it returns.
    // With checkpointing the checkpoint keeps each block's input instead.
    // Dropout (of the attention probabilities only) runs on the fp32 softmax.
    // (GPT-NeoX too computes its softmax in fp32: pureMaps.)
    const bool pureLlama = pure && llama;
    const std::int64_t sq32 = meanSavesInput(S) ? 2 * a : 0; // x32^2, saved by mean (1.13)
    const std::int64_t lg16 = BT * V * 2;                      // the bf16 logits
    const auto rmsForward = [&] {
        if (pureLlama) {
            act(2 * a);        // x.to(fp32), saved by pow and by the product
            act(sq32);         // x32^2, saved by mean (1.13) ...
            tmp(2 * a - sq32); // ... or a temporary
            tmp(m);            // mean
            tmp(m);            // + eps
            act(m);            // rsqrt
            tmp(2 * a);        // normed, fp32: a local until the norm returns
            untmp(2 * m + 2 * a - sq32);
            act(a);            // cast to bf16, saved by the product with the weight
            act(a);            // * weight
            untmp(2 * a);      // the fp32 normed
            return;
        }
        act(sq);  // x^2, saved by mean (1.13) ...
        tmp(a - sq); // ... or a temporary
        tmp(m);   // mean
        tmp(m);   // + eps
        act(m);   // rsqrt
        act(a);   // normed
        untmp(2 * m + a - sq);
        act(a);   // * weight
    };
    const auto attentionCore = [&](bool cloneQ, bool cloneK) {
        if (!eager || math) return;
        if (cloneQ) act(a);
        if (cloneK) act(a);
        tmp(s);      // q k^T
        tmp(s);      // * scale
        untmp(s);
        tmp(s);      // masked_fill
        untmp(s);
        if (pureMaps) {
            tmp(2 * s);                  // cast to fp32
            r.add(AttentionMaps, 2 * s); // softmax in fp32, saved
            untmp(2 * s);
            untmp(s);                    // masked_fill output
            if (drop) {
                r.add(AttentionMaps, mapNoise); // the fp32 noise (a GPU's mask), saved
                tmp(2 * s);                  // dropped
            }
            r.add(AttentionMaps, s);     // cast back, saved by the product with the values
            if (drop) untmp(2 * s);
            r.add(AttentionMaps, extraMaps);
            return;
        }
        r.add(AttentionMaps, s); // softmax, saved
        untmp(s);
        if (drop) {
            r.add(AttentionMaps, mapNoise); // noise (a GPU's mask)
            r.add(AttentionMaps, s);        // the dropped copy
        }
        r.add(AttentionMaps, extraMaps);
    };
    // The fused kernel: its output and log-sum-exp saved, its blocks while it
    // runs; the heads merged after it (a copy where the output is [B, H, T, D]).
    const auto fusedForward = [&] {
        act(fused.out);
        act(fused.lse);
        r.scratch(fused.forwardScratch);
        if (fused.mergeCopies) act(a);
        r.add(AttentionMaps, extraAttention); // further modules' outputs and log-sum-exps (or maps)
    };
    // Its backward, from the output's gradient (in the workspace) to those
    // of q, k and v (zeroed, full heads), then what it saved released
    // (`inputs`: q, k and v, or what keeps them) and the output's gradient.
    const auto fusedBackward = [&](std::initializer_list<std::int64_t> inputs) {
        tmp(a);
        tmp(a);
        tmp(a);
        tmp(fused.backwardTemps);
        r.scratch(fused.backwardScratch);
        untmp(fused.backwardTemps);
        untmp(a);
        for (const auto b : inputs) r.sub(Activations, b);
        r.sub(Activations, fused.out);
        r.sub(Activations, fused.lse);
        r.sub(AttentionMaps, extraAttention);
    };
    // A local released on return, unless the math fallback's bmm kept it.
    const auto releaseOrKeep = [&](std::int64_t bytes, std::int64_t kept) {
        if (kept > 0) r.move(Workspace, Activations, bytes);
        else untmp(bytes);
    };
    // The math fallback's output, [B, H, T, D]: its heads merged are a copy
    // the projection saves, or (one head) the output itself.
    const auto mathMerged = [&] {
        if (mathShape.mergeCopies) act(a);
        else r.move(Workspace, Activations, a);
    };
    // Forward of one block; returns the bytes it saved (for checkpointing).
    const auto blockForward = [&] {
        const auto before = r.live(Activations) + r.live(AttentionMaps);
        if (llama) {
            rmsForward();
            tmp(a);
            tmp(akv);
            tmp(akv); // q, k, v projections
            // RoPE: four products, a difference and a sum of half width, then cat.
            tmp(3 * a);
            math ? tmp(a) : act(a); // rotated q (the math fallback saves its own scaled q)
            untmp(3 * a);
            untmp(a); // q projection released (q reassigned)
            tmp(3 * akv);
            if (expands || math) tmp(akv); else act(akv); // rotated k: saved itself unless copied
            untmp(3 * akv);
            untmp(akv); // k projection released
            // Grouped-query keys and values expanded to every head: copies,
            // both made before the scores with several key/value heads.
            if (!eager) {
                // Fused: the expanded keys and values (copies with several
                // key/value heads), else the v projection itself, saved.
                if (expands) act(a), act(a);
                else r.move(Workspace, Activations, akv);
                fusedForward();
                tmp(a); // o_proj
            } else if (math) {
                if (expands) tmp(a), tmp(a); // the expanded keys and values (locals)
                replayMathAttentionForward(r, mathShape);
                r.add(AttentionMaps, extraAttention);
                mathMerged();
                tmp(a); // o_proj
                if (mathShape.mergeCopies) untmp(a); // the attention's output released
                untmp(a);   // locals: the rotated q and k,
                untmp(akv);
                if (expands) untmp(a), untmp(akv); // the expanded k and the v projection,
                releaseOrKeep(expands ? a : akv, mathKeptValues); // the values (fp32: bmm may keep them)
            } else {
            if (gqaValuesCopiedFirst(A, B, eager)) act(a), attentionCore(false, true);
            else if (expands) attentionCore(false, true), act(a);
            else if (folds) attentionCore(false, false), r.move(Workspace, Activations, akv); // v itself saved
            else attentionCore(false, false), act(a);   // values made contiguous
            tmp(a);   // probabilities x values
            act(a);   // heads merged
            tmp(a);   // o_proj
            untmp(a); // attention output released
            }
            untmp(math ? 0 : expands ? 2 * akv : folds || !eager ? 0 : akv); // locals k (expanded) and v released on return
            act(a);   // residual h
            untmp(a); // o_proj output
            rmsForward();
            act(4 * f); // gate, up, silu, product
            tmp(a);     // down
            act(a);     // residual out
            untmp(a);
            if (pureLlama) r.sub(Activations, a); // the mid-block sum, saved by no norm
        } else {
            act(a + 2 * m); // ln1
            tmp(3 * a);     // qkv
            if (rope) {
                // A partial rotary (GPT-NeoX) rotates the leading ra of each
                // head and cats the rest back on.
                const auto ra = a / A.headDim() * A.ropeDims();
                for (int i = 0; i < 2; ++i) {
                    tmp(3 * ra); // four products, a difference and a sum of half width
                    if (ra == a) {
                        math ? tmp(a) : act(a); // cat: the rotated q (then k)
                        untmp(3 * a);
                        continue;
                    }
                    tmp(ra);     // cat: the rotated part
                    untmp(3 * ra);
                    math ? tmp(a) : act(a); // cat: q (then k) whole again
                    untmp(ra);
                }
                attentionCore(false, false);
            } else {
                attentionCore(!folds, !folds); // q and k made contiguous for the batched product
            }
            if (!eager) {
                fusedForward();
                tmp(a); // proj
                r.move(Workspace, Activations, 3 * a); // qkv, kept by the v view the kernel saved
            } else if (math) {
                replayMathAttentionForward(r, mathShape);
                r.add(AttentionMaps, extraAttention);
                mathMerged();
                tmp(a); // proj
                if (mathShape.mergeCopies) untmp(a); // the attention's output released
                if (rope) untmp(a), untmp(a);  // locals: the rotated q and k, qkv
                releaseOrKeep(3 * a, mathKeptValues);
            } else {
            if (!folds) act(a); // v made contiguous
            tmp(a);   // probabilities x values
            act(a);   // heads merged
            tmp(a);   // proj
            untmp(a); // attention output released
            // qkv released on return, or kept by the views the products saved
            if (folds) r.move(Workspace, Activations, 3 * a);
            else untmp(3 * a);
            }
            if (drop) {
                act(noiseA); // noise
                tmp(a);      // dropped
                untmp(a);    // proj output
            }
            // GPT-NeoX's parallel block, x + attn(ln1(x)) + mlp(ln2(x)): ln2
            // reads the block input, so no mid-block sum is saved, and the
            // attention output (or its dropped copy) waits for the final sum.
            // (GPT-NeoX's layer holds the attention output as a local until it returns.)
            const bool parallel = A.parallelResidual, attentionLocal = parallel || A.neoxLayer;
            if (!parallel) {
                act(a); // residual h
                if (!attentionLocal) untmp(a); // proj (or dropped) output
            }
            act(a + 2 * m); // ln2
            act(2 * f);     // fc, gelu
            tmp(a);         // out
            if (drop) {
                act(noiseA); // noise
                tmp(a);      // dropped
            }
            // The temporaries live until the sum exists, but for out's own
            // output when what comes back is its dropped copy: GPT-2's MLP
            // module drops its output, and GPT-NeoX's parallel layer names its
            // (dropped) MLP branch before it makes x + attn.
            const bool outGoesFirst = drop && (parallel || (A.mlpModule && !A.neoxLayer));
            if (outGoesFirst) untmp(a);
            if (parallel) tmp(a); // x + attn
            act(a);               // the block output
            if (parallel) untmp(a);
            untmp(drop && !outGoesFirst ? 2 * a : a);
            if (attentionLocal) untmp(a); // the attention output
        }
        return r.live(Activations) + r.live(AttentionMaps) - before;
    };
    std::int64_t blockSaved = 0;
    for (std::int64_t l = 0; l < A.layers; ++l) {
        if (S.checkpointing) {
            // The generator's state, saved with the block before it runs.
            // Forward without grad: the block's tensors are temporaries; only
            // its output (the next block's saved input) stays.
            act(rng);
            const auto mapsBefore = r.live(AttentionMaps);
            blockSaved = blockForward();
            const auto maps = r.live(AttentionMaps) - mapsBefore;
            r.sub(AttentionMaps, maps);
            r.sub(Activations, blockSaved - maps - a);
        } else {
            blockSaved = blockForward();
            // Pure bf16: the block's input goes once it returns (the first
            // block's, the embedding output, is held until the final norm).
            if (pureLlama && l > 0) r.sub(Activations, a);
        }
    }
    // Final norm, head, loss.
    if (llama) rmsForward();
    else act(a + 2 * m);
    // The last block's output, and the embedding output (unless its
    // block's checkpoint keeps it).
    if (pureLlama) r.sub(Activations, S.checkpointing ? a : 2 * a);
    if (pure) {
        // Pure bf16 (any family): the loss reads an fp32 copy of the bf16 logits.
        r.add(Logits, lg16);       // logits, bf16
        act(idx);                  // targets made contiguous
        r.add(Logits, lg);         // their fp32 copy for the loss
        r.add(Logits, lg);         // log-softmax, saved
        tmp(m);                    // per-token loss
        if (masked) tmp(m);
        r.sub(Logits, lg);         // the fp32 copy
        untmp(masked ? 2 * m : m);
        r.sub(Logits, lg16);       // the logits themselves are not saved
    } else {
    r.add(Logits, lg); // logits
    act(idx);          // targets made contiguous
    r.add(Logits, lg); // log-softmax, saved
    tmp(m);            // per-token loss
    if (masked) tmp(m);
    untmp(masked ? 2 * m : m);
    r.sub(Logits, lg); // the logits themselves are not saved
    }

    // ---- backward ----
    r.phase("backward");
    const bool tied = A.tieEmbeddings;
    const std::int64_t headW = V * C * e;
    r.add(Logits, lg); // grad of log-softmax output
    r.sub(Activations, idx);
    r.add(Logits, lg); // grad of logits
    r.sub(Logits, 2 * lg);
    if (pure) {
        r.add(Logits, lg16); // cast back to bf16
        r.sub(Logits, lg);
    }
    // bf16 products (pure bf16 on the CPU: oneDNN's scratch while each runs):
    // a weight's gradient grad^T . x (rows x out x in) and an input's grad . W,
    // transposed the other way for a Conv1D block (ProjectionProducts).
    const ProjectionProducts head{BT, false}, projection{BT, A.conv1d};
    const auto weightProduct = [&](std::int64_t out, std::int64_t in) { r.product(projection.weightGradient(in, out)); };
    const auto inputProduct = [&](std::int64_t out, std::int64_t in) { r.product(projection.inputGradient(in, out)); };
    tmp(headW); // head weight gradient (tied: held until the embedding's)
    r.product(head.weightGradient(C, V));
    tmp(a);                        // grad of final norm output
    r.product(head.inputGradient(C, V));
    r.sub(Logits, pure ? lg16 : lg);
    if (!tied) grads.done(headW);
    // Pure bf16 RMSNorm backward, from the gradient of its output (in
    // Workspace; the output itself already released by its consumer).
    const auto rmsBackwardPure = [&] {
        tmp(a);             // grad of the bf16 normed: g * weight
        tmp(a);             // g * normed, for the weight's gradient
        untmp(a);
        untmp(a);           // g
        r.sub(Activations, a); // the bf16 normed
        replayPureRmsBackward(r, a, m, sq32);
    };
    // final norm backward
    if (pureLlama) {
        r.sub(Activations, a); // the final norm's output, saved by the head
        rmsBackwardPure();
    } else if (llama) {
        tmp(2 * a);
        untmp(2 * a);
        r.sub(Activations, 3 * a + sq + m); // its saved tensors and the last block's output
    } else {
        tmp(a);
        untmp(a);
        r.sub(Activations, 2 * a + 2 * m); // ln output (released by the head), its input and stats
    }
    // g (the running gradient, a) stays in Workspace from here on.
    // A projection's weight (and bias) gradient, out x in, made by a product.
    const auto weightGrad = [&](std::int64_t n, std::int64_t out, std::int64_t in) {
        tmp(n * e);
        weightProduct(out, in);
        grads.done(n * e);
    };
    // From the gradient of the probabilities (in the workspace) through
    // dropout and softmax, each saved map released once its node has run;
    // the gradient of the scores is left in the workspace. (Fused attention
    // saved no maps.)
    const auto mapsBackward = [&] {
        if (!eager) return;
        if (pureMaps) {
            r.sub(AttentionMaps, s); // the bf16 probabilities
            tmp(2 * s);              // their gradient cast to fp32
            untmp(s);
            if (drop) {
                tmp(2 * s);          // dropout backward
                untmp(2 * s);
                r.sub(AttentionMaps, mapNoise); // the noise
            }
            tmp(2 * s);              // softmax backward
            untmp(2 * s);
            r.sub(AttentionMaps, 2 * s + extraMaps); // the fp32 softmax
            tmp(s);                  // cast back to bf16
            untmp(2 * s);
            return;
        }
        if (drop) {
            r.sub(AttentionMaps, s); // the dropped copy, once its product's backward has run
            tmp(s);                  // dropout backward
            untmp(s);
            r.sub(AttentionMaps, mapNoise); // the noise
        }
        tmp(s); // softmax backward
        untmp(s);
        r.sub(AttentionMaps, s + extraMaps);
    };
    for (std::int64_t l = A.layers - 1; l >= 0; --l) {
        if (S.checkpointing) {
            // Recompute the block with grad enabled (the generator's state
            // held meanwhile), then back-propagate through it.
            tmp(rng);
            blockForward();
        }
        grads.blockBackward();
        if (llama) {
            // down_proj (bias-free, mm: its weight's gradient first)
            tmp(F * C * e);
            weightProduct(C, F);
            tmp(f);
            inputProduct(C, F);
            r.sub(Activations, f);
            grads.done(F * C * e);
            // silu(gate) * up
            tmp(2 * f);
            r.sub(Activations, 2 * f);
            untmp(f);
            // silu
            tmp(f);
            r.sub(Activations, f);
            untmp(f);
            // gate and up
            tmp(F * C * e);
            weightProduct(F, C);
            tmp(a);
            inputProduct(F, C);
            untmp(f);
            grads.done(F * C * e);
            tmp(F * C * e);
            weightProduct(F, C);
            tmp(a);
            inputProduct(F, C);
            untmp(f);
            r.sub(Activations, a); // norm output
            tmp(a);
            untmp(2 * a); // the two input gradients summed
            grads.done(F * C * e);
            if (pureLlama) {
                rmsBackwardPure();
            } else {
            // RMSNorm backward: about two full-size products at a time.
            tmp(2 * a);
            untmp(2 * a);
            tmp(a);
            untmp(a);
            r.sub(Activations, a + sq + m);
            tmp(3 * a);
            untmp(3 * a);
            }
            // residual sum (under checkpointing the node still holds the output's gradient)
            tmp(a);
            untmp(2 * a - heldGrad);
            if (!pureLlama) r.sub(Activations, a); // h
            // o_proj
            tmp(C * C * e);
            weightProduct(C, C);
            tmp(a);
            inputProduct(C, C);
            if (eager || fused.mergeCopies) r.sub(Activations, a); // merged heads (fused: else the kernel's output)
            grads.done(C * C * e);
            if (!eager) {
                fusedBackward({a, expands ? a : akv, expands ? a : akv}); // q, the keys and the values
            } else if (math) {
                replayMathAttentionBackward(r, mathShape);
                r.sub(AttentionMaps, extraAttention);
            } else {
            tmp(a);
            untmp(a); // reshape (replaces the o_proj input gradient)
            // probabilities x values
            tmp(a);
            r.add(Workspace, s);
            r.sub(Activations, expands ? a : akv); // the values (or v itself)
            untmp(a);
            mapsBackward();
            tmp(s);
            untmp(s); // masked_fill
            tmp(s);
            untmp(s); // scale
            tmp(2 * a);
            untmp(s);
            r.sub(Activations, a + (expands ? a : akv)); // q and the keys (or the rotated k itself)
            }
            // expanded heads summed back, RoPE backward
            if (gqa) {
                tmp(akv);
                untmp(a);
                tmp(akv);
                untmp(a);
            }
            tmp(2 * akv);
            untmp(2 * akv);
            tmp(2 * a);
            untmp(2 * a);
            // q, k, v projections and the sum of their input gradients
            tmp(a);
            tmp(C * C * e);
            tmp(a);
            untmp(a);
            untmp(a);
            grads.done(C * C * e);
            grads.appear(2 * A.kvHeads * A.headDim() * C * e); // k and v weights
            tmp(a);
            untmp(a);
            untmp(2 * akv);
            tmp(a);
            untmp(a);
            // input RMSNorm, then the residual sum
            if (pureLlama) {
                r.sub(Activations, a); // the norm's output, saved by the projections
                rmsBackwardPure();
                tmp(a);
                untmp(2 * a);
                // No norm saved the block input; a checkpoint did, with the
                // recomputed output (its generator state goes with the graph).
                if (S.checkpointing) r.sub(Activations, 2 * a);
                untmp(rng + heldGrad);
                continue;
            }
            tmp(2 * a);
            untmp(2 * a);
            r.sub(Activations, 2 * a + sq + m);
            tmp(3 * a);
            untmp(3 * a);
            tmp(a);
            untmp(2 * a);
            r.sub(Activations, a); // the block input, saved by the norm
            if (S.checkpointing) r.sub(Activations, a); // the recomputed output
            untmp(rng + heldGrad);
            continue;
        }
        // GPT block
        if (drop) {
            tmp(a); // gradient through the MLP dropout
            r.sub(Activations, noiseA);
        }
        // Each projection (addmm) makes its input's gradient, then its weight's.
        tmp(f);
        inputProduct(C, F);
        weightGrad(C * F + C, C, F);
        r.sub(Activations, f); // gelu output
        tmp(f);
        r.sub(Activations, f); // fc output
        untmp(f);
        tmp(a);
        inputProduct(F, C);
        weightGrad(C * F + F, F, C);
        untmp(f);
        r.sub(Activations, a); // ln2 output
        tmp(a);
        untmp(a);
        r.sub(Activations, (A.parallelResidual ? 0 : a) + 2 * m); // h (no parallel block saves one) and ln2 stats
        tmp(a);
        untmp(2 * a - heldGrad); // gradient of h (under checkpointing the node still holds the output's)
        if (drop) {
            untmp(a);
            tmp(a); // gradient through the attention output dropout
            r.sub(Activations, noiseA);
        }
        tmp(a);
        inputProduct(C, C);
        weightGrad(C * C + C, C, C);
        if (eager || fused.mergeCopies) r.sub(Activations, a); // merged heads (fused: else the kernel's output)
        if (drop) untmp(a);    // the gradient through the dropout, consumed
        if (!eager) {
            fusedBackward({3 * a, rope ? a : 0, rope ? a : 0}); // qkv, and the rotated q and k
        } else if (math) {
            replayMathAttentionBackward(r, mathShape);
            r.sub(AttentionMaps, extraAttention);
        } else {
        tmp(a);
        untmp(a);
        // probabilities x values
        tmp(a);
        tmp(s);
        r.sub(Activations, !folds ? a : rope ? 3 * a : 0); // v (a view: qkv, unless q and k still hold it)
        untmp(a);
        mapsBackward();
        tmp(s);
        untmp(s);
        tmp(s);
        untmp(s);
        tmp(2 * a);
        untmp(s);
        r.sub(Activations, folds && !rope ? 3 * a : 2 * a); // q and k (views: qkv)
        }
        if (rope) {
            tmp(2 * a);
            untmp(2 * a);
        }
        tmp(3 * a);
        untmp(3 * a); // stack of q, k, v gradients
        tmp(3 * a);
        untmp(3 * a);
        tmp(a);
        inputProduct(3 * C, C);
        weightGrad(3 * C * C + 3 * C, 3 * C, C);
        untmp(3 * a);
        r.sub(Activations, a + 2 * m); // ln1 output and stats
        tmp(a);
        untmp(a);
        r.sub(Activations, a); // block input
        tmp(a);
        untmp(2 * a);
        if (S.checkpointing) r.sub(Activations, a); // the recomputed output
        untmp(rng + heldGrad);
    }
    if (drop && !llama) r.sub(Activations, noiseA); // embedding dropout noise
    // Embeddings.
    if (!llama && A.positional == "learned") {
        tmp(T * C * e);
        tmp(A.maxPositions * C * e);
        untmp(T * C * e);
        grads.done(A.maxPositions * C * e);
    }
    tmp(headW); // dense embedding gradient
    tmp(idx);
    untmp(idx);
    untmp(a); // running gradient
    if (tied) {
        tmp(headW); // sum with the head's gradient (a transposed product's: not added in place)
        untmp(2 * headW);
    }
    grads.done(headW);
    // What the blocks' autograd nodes hold goes with the graph: their saved
    // generator states and the mask.
    r.sub(Activations, A.layers * rng);
    if (S.attention != "fused") r.sub(Activations, T * T);

    grads.backwardDone();

    // ---- optimizer ----
    r.phase("optimizer");
    if (pure && S.optimizer == "adamw") {
        // Pure bf16 AdamW (train/Bf16AdamW.cpp), one parameter at a time:
        // fp32 copies of the weight, its gradient and both moments, the
        // denominator, and stochastic rounding's noise, sum and mask while
        // the weight is rounded back: 32 bytes an element at the most.
        tmp(32 * maxTrain);
        untmp(32 * maxTrain);
    } else if (S.optimizer == "adamw" || S.optimizer == "adamw8bit") {
        // sqrt(v) and its division by sqrt(1 - beta2^t) for one parameter at a time.
        tmp(2 * maxTrain * e);
        untmp(2 * maxTrain * e);
    } else if (S.weightDecay && maxDecay > 0) {
        tmp(maxDecay * e); // grad + wd * param
        untmp(maxDecay * e);
    }

    est.endOfStepBytes = r.total();
    est.peakBytes = r.peak();
    if (recording) {
        recording->calls = r.calls();
        recording->trainableBytes = Ptrain * e;
        return est;
    }
    est.peakPhase = r.peakPhase();
    for (int c = 0; c < kCats; ++c) {
        const auto bytes = r.atPeak()[c];
        if (bytes == 0) continue;
        std::string formula;
        switch (c) {
        case Weights:
            formula = "parameters x " + std::to_string(e) + " bytes";
            if (tables > 0) formula += pure ? " + bf16 position tables" : " + fp32 position tables";
            break;
        case Gradients:
            formula = "trainable parameters x " + std::to_string(e) + " bytes (kept between steps)";
            break;
        case OptimizerState:
            formula = S.optimizer == "sgd"         ? "momentum: trainable parameters x " + std::to_string(e) + " bytes"
                : S.optimizer == "adamw8bit"       ? "8-bit AdamW moments: 2 x trainable parameters x 1 byte"
                                                   : "AdamW moments: 2 x trainable parameters x " + std::to_string(e) + " bytes";
            break;
        case Data: formula = "validation batches and this step's micro-batches (int64 ids, float mask)"; break;
        case Activations:
            formula = "tensors autograd saved for backward (per layer: norms, projections, MLP)";
            break;
        case AttentionMaps:
            formula = (pureMaps ? std::string("fp32 softmax probabilities and their bf16 copy, batch x heads x seq^2 x (4 + 2) bytes")
                                : "softmax probabilities, batch x heads x seq^2 x " + std::to_string(e) + " bytes")
                + " per attention module"
                + (A.attentionModules > 1 ? " (" + std::to_string(A.attentionModules) + " per layer)" : "")
                + (S.dropout > 0.0 ? ", three maps with dropout" : "");
            break;
        case Logits: formula = "log-softmax of batch x seq x vocab (fp32) and its gradients"; break;
        case LibraryWorkspace:
            formula = "cuBLAS workspaces through the caching allocator: the forward's and the autograd thread's handle, "
                      + std::to_string(cublasWorkspaceBytes(S.torchMajor, S.computeCapability)) + " bytes each";
            break;
        case Workspace: formula = "temporaries of the phase at its peak (gradients in flight, products, a bf16 product's CPU scratch)"; break;
        case WeightCopies:
            formula = "autocast's " + S.precision + " copies of the weights (2 bytes per element), saved for backward "
                      "and released layer by layer";
            break;
        }
        est.terms.push_back({kCatNames[c], bytes, formula});
    }
    est.phases = r.phasePeaks();
    const auto extra = gpuOverheads(S, Ptrain * e);
    if (extra.buckets > 0) {
        // Data parallel: the reducer's buckets hold one flat copy of the
        // trainable gradients from the start of the run (core/dist/GradReducer).
        est.terms.push_back({"ddp_buckets", extra.buckets,
                             "data parallel: the gradient buckets, trainable parameters x " + std::to_string(e) + " bytes"});
        est.peakBytes += extra.buckets;
        for (auto& p : est.phases) p.bytes += extra.buckets;
    }
    est.tensorPeakBytes = est.peakBytes;
    if (allocator) {
        // What a GPU adds to the tensors: what the caching allocator holds
        // beyond them at its reserved peak (unsplit remainders, cached free
        // blocks, the rest of its segments), and the CUDA context.
        est.allocatedPeakBytes = allocator->peakAllocated();
        est.reservedPeakBytes = allocator->peakReserved();
        const auto reservedExtra = std::max<std::int64_t>(0, est.reservedPeakBytes - est.peakBytes);
        est.terms.push_back({"allocator_reserved", reservedExtra,
                             "caching allocator: reserved beyond the tensors at the peak (segment rounding, cached "
                             "and unsplit blocks; modelled, " + std::to_string(allocator->segments()) + " segments)"});
        const auto context = cudaContextFor(S.computeCapability);
        est.terms.push_back({"cuda_context", extra.context,
                             S.cudaContextBytes > 0 ? std::string("CUDA context (the figure given)") : "CUDA context: " + context.source});
        est.peakBytes += reservedExtra + extra.context;
        if (S.torchMajor < 2) {
            // LibTorch 1.13 leaves cuBLAS its own workspaces, outside the allocator.
            const auto ws = 2 * cublasWorkspaceBytes(S.torchMajor, S.computeCapability);
            est.terms.push_back({"cublas_workspace", ws, "cuBLAS's own workspaces (LibTorch 1.13: outside the caching "
                                                         "allocator), the forward's and the autograd thread's handle"});
            est.peakBytes += ws;
        }
    }
    if (pure && S.gpu && (A.family == "llama" || A.fp32Softmax)) {
        // CUDA's softmax reads bf16 and writes fp32 without a cast-up copy.
        est.notes.push_back("pure bf16 follows the model as measured on the CPU: its fp32 softmax copy is planned "
                            "as there, on the safe side of a GPU run");
    }
    if (A.attentionModules > 1) {
        est.notes.push_back("further attention modules add their maps; their projections are not modelled");
    }
    if (!A.notExact.empty()) est.notes.push_back(A.notExact);
    if (cpuBf16 && cpuBf16ProductsUseOneDnn()) {
        const auto why = cpuGemmScratchUnknownReason();
        est.notes.push_back(why.empty()
            ? "bf16 matrix products on this CPU take oneDNN's scratch while they run; its size (oneDNN's blocking "
              "for each shape, not a formula) is oneDNN's own answer for each product's shape, with "
              + std::to_string(S.cpuThreads) + (S.cpuThreads == 1 ? " thread" : " threads")
            : "the scratch oneDNN takes for bf16 matrix products on this CPU is not counted (" + why
                  + "): small steps can measure a few percent more");
    }
    return est;
}

} // namespace

CudaContextFigure cudaContextFor(int cc)
{
    // nvidia-smi's figure for a process that has made its context and no
    // tensors, with lazy module loading (LibTorch's default since 1.13).
    if (cc == 86) {
        return {256LL << 20, "256 MiB on an RTX 3090 (compute capability 8.6), torch 2.7.1, nvidia-smi "
                             "(github.com/invoke-ai/InvokeAI/issues/9413)"};
    }
    if (cc == 89) {
        return {426LL << 20, "426 MiB on an RTX 6000 Ada (8.9), torch 2.10, nvidia-smi with nothing allocated "
                             "(github.com/unslothai/unsloth-zoo/pull/1053)"};
    }
    return {287047680, "287,047,680 bytes with lazy module loading, PyTorch PR #86509 (card not stated; no published "
                       "figure for compute capability " + (cc > 0 ? std::to_string(cc / 10) + "." + std::to_string(cc % 10) : std::string("unknown"))
                       + "; estimate --cuda-context takes a measured one)"};
}

std::int64_t cublasWorkspaceBytes(int torchMajor, int cc)
{
    // LibTorch 2.x: CUBLAS_WORKSPACE_CONFIG's default ":4096:2:16:8", or
    // 32 MiB on compute capability 9.0 (CublasHandlePool.cpp, PR #91564),
    // allocated through the caching allocator. 1.13 lets cuBLAS keep its
    // own, 4 MiB on cards before Hopper and 32 MiB on Hopper (the cuBLAS
    // reference, cublasSetWorkspace), outside the allocator.
    // Both: 32 MiB on compute capability 9.0 (Hopper) only, as PyTorch's check reads.
    if (torchMajor >= 2) return cc == 90 ? 32LL << 20 : 4096 * 1024 * 2 + 16 * 1024 * 8;
    return cc == 90 ? 32LL << 20 : 4LL << 20;
}

namespace {

// Why a Hugging Face folder's step is planned from the step itself (what the
// hand replays do not model), or empty. The form, the planner and preflight
// ask at every edit, on the GUI thread: config.json is parsed once per folder
// and version of the file (its time and size; edited in place, its time moves).
std::string hfFolderPlanning(const RunConfig& c)
{
    const auto folder = resolvedModelPath(c);
    std::error_code timeError, sizeError;
    const auto file = std::filesystem::path(folder) / "config.json";
    const auto time = std::filesystem::last_write_time(file, timeError);
    const auto size = std::filesystem::file_size(file, sizeError);
    using Version = std::pair<std::filesystem::file_time_type, std::uintmax_t>;
    static std::mutex mutex;
    static std::map<std::string, std::pair<Version, std::string>> answers;
    const bool known = !timeError && !sizeError;
    if (known) {
        std::lock_guard<std::mutex> lock(mutex);
        if (const auto it = answers.find(folder); it != answers.end() && it->second.first == Version{time, size}) {
            return it->second.second;
        }
    }
    std::string out;
    try {
        // (architectureFor turns any reading problem into a "not exact" note:
        // the folder is read here, and only what the replays lack counts.)
        out = handReplayGap(modelSpecFromHf(readHfArchitecture(folder), folder, 1));
    } catch (const InputError&) {
        return {};
    }
    if (known) {
        std::lock_guard<std::mutex> lock(mutex);
        answers[folder] = {Version{time, size}, out};
    }
    return out;
}

} // namespace

std::string ownStepReason(const RunConfig& c)
{
    if (!plannableModel(c)) return "a TorchScript model";
    if (c.model.quantize != "none") return "a quantized base (" + c.model.quantize + ")";
    // LoRA: every pattern, precision and base dtype from its own step.
    if (c.lora.rank > 0) return "LoRA adapters (lora.rank " + std::to_string(c.lora.rank) + ")";
    // Mixed precision: autocast's casts, as the trainer's step makes them
    // (bf16 weights trained in bf16 are pure bf16: setupFor).
    if (mixedPrecision(c.train.precision) && setupFor(c).precision != "bf16-pure") {
        return c.train.precision + " mixed precision";
    }
    if (c.model.type != "hf") return {};
    return hfFolderPlanning(c);
}

bool plannedFromItsStep(const RunConfig& c)
{
    return !ownStepReason(c).empty();
}

std::string handReplayGap(const ModelSpec& m)
{
    const auto family = m.hfFamily.empty() ? m.type : m.hfFamily;
    if (m.type == "torchscript") return "a TorchScript model";
    if (m.gemmaNorms) return "Gemma 3's layout (its norms, GeGLU, sliding and full layers)";
    if (m.qkNorm) return "query and key norms (" + family + ")";
    if (m.fusedProjections) return "fused q/k/v and gate/up projections (" + family + ")";
    if (m.headDimOverride > 0) {
        return "a head size apart from hidden / heads (head_dim " + std::to_string(m.headDimOverride)
            + ", hidden_size / num_attention_heads " + std::to_string(m.dModel / m.nHead) + ")";
    }
    return {};
}

ArchitectureSpec architectureOf(const ModelSpec& m)
{
    // What the hand replay does not model is planned from the model's own
    // step (ownStepReason routes such configs there).
    if (const auto gap = handReplayGap(m); !gap.empty()) throw InputError(gap + ": not in the hand-written plan");
    ArchitectureSpec a;
    a.vocabSize = m.vocabSize;
    a.layers = m.nLayer;
    a.hidden = m.dModel;
    a.heads = m.nHead;
    a.kvHeads = m.kvHeads();
    a.intermediate = m.dFf;
    a.maxPositions = m.maxLen;
    a.tieEmbeddings = m.tieEmbeddings;
    if (m.type == "gpt2") {
        // Conv1D projections and an MLP module, learned positions.
        a.family = "gpt";
        a.positional = "learned";
        a.mlpModule = true;
        a.conv1d = true;
    } else if (m.type == "gpt_neox") {
        a.family = "gpt";
        a.positional = m.rotaryDims > 0 ? "rope" : "none";
        a.rotaryDims = m.rotaryDims;
        a.parallelResidual = m.parallelResidual;
        a.fp32Softmax = true;
        a.neoxLayer = true;
        a.mlpModule = true;
    } else {
        a.family = m.type; // gpt | llama (a folder of the Llama family builds "llama")
        a.positional = m.type == "llama" ? "rope" : m.positionalEncoding;
        a.qkvBias = m.qkvBias;
        a.slidingWindow = m.slidingWindow;
    }
    return a;
}

ArchitectureSpec architectureFor(const RunConfig& c)
{
    if (!plannableModel(c)) {
        throw InputError("the memory planner models the built-in architectures (gpt, llama) and published ones; a "
                         "torchscript model's memory is measured while it trains (trainbench-cli measure)");
    }
    // The model the trainer builds (config/ModelSpec.h), the built-in one
    // with the vocabulary its data has.
    const int vocab = c.data.source == "addition" ? 13 : 256;
    try {
        auto a = architectureOf(modelSpecFor(c, vocab, effectiveSeqLen(c)));
        a.name = c.name;
        a.fromHfFolder = c.model.type == "hf";
        return a;
    } catch (const InputError& e) {
        if (c.model.type != "hf") throw;
        // The folder is gone, or has what the hand replay does not model (e.g.
        // a head_dim of its own): plan the sizes the run recorded from it, and
        // say that this is not the model the trainer builds.
        ArchitectureSpec a;
        a.notExact = std::string("not exact: ") + e.what()
            + "; planned from the config's sizes (hidden / heads as the head size), which can be well under "
              "the step's peak. 'trainbench-cli estimate' and the Memory planner derive this model's plan from "
              "its own training step instead; or measure it (trainbench-cli measure --config FILE)";
        a.name = c.name;
        a.family = "llama";
        a.fromHfFolder = true;
        a.vocabSize = c.model.vocabSize > 0 ? c.model.vocabSize : 256;
        a.layers = c.model.nLayer;
        a.hidden = c.model.dModel;
        a.heads = c.model.nHead;
        a.kvHeads = c.model.nKvHead > 0 ? c.model.nKvHead : c.model.nHead;
        a.intermediate = c.model.feedForwardWidth();
        a.maxPositions = effectiveSeqLen(c);
        a.tieEmbeddings = c.model.tieEmbeddings;
        a.positional = "rope";
        return a;
    }
}

std::vector<std::string> plannedLoraTargets(const std::string& modelType, const std::vector<std::string>& targets)
{
    auto projections = loraProjections(modelType, targets);
    if (modelType != "hf") return projections;
    // GPT-2's and GPT-NeoX's projections under the names the planner's GPT
    // family uses (qkv, proj, fc, out); the Llama family's are its own.
    static const std::map<std::string, std::vector<std::string>> kPlannerNames{
        {"c_attn", {"qkv"}}, {"attn.c_attn", {"qkv"}}, {"query_key_value", {"qkv"}}, {"attn.query_key_value", {"qkv"}},
        {"attn.c_proj", {"proj"}}, {"dense", {"proj"}}, {"attn.dense", {"proj"}}, {"c_proj", {"proj", "out"}},
        {"c_fc", {"fc"}}, {"mlp.c_fc", {"fc"}}, {"dense_h_to_4h", {"fc"}}, {"mlp.dense_h_to_4h", {"fc"}},
        {"mlp.c_proj", {"out"}}, {"dense_4h_to_h", {"out"}}, {"mlp.dense_4h_to_h", {"out"}}};
    std::vector<std::string> names;
    for (const auto& t : projections) {
        const auto it = kPlannerNames.find(t);
        for (const auto& n : it == kPlannerNames.end() ? std::vector<std::string>{t} : it->second) {
            if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
        }
    }
    return names;
}

TrainingSetup setupFor(const RunConfig& c)
{
    TrainingSetup s;
    s.batch = c.train.batchSize;
    s.seqLen = effectiveSeqLen(c);
    s.gradAccum = c.train.gradAccum;
    s.gpus = c.train.worldSize; // data parallel: the plan is per rank
    // As the trainer sets LibTorch's pool (train/Threads.h's threadSetupFor):
    // train.threads N, else one thread, or with data parallel the cores
    // shared among the ranks (planned as all on this machine).
    s.cpuThreads = c.train.threads > 0 ? c.train.threads : 1;
    if (c.train.threads == 0 && c.train.worldSize > 1) {
        s.cpuThreads = std::max(1, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) / c.train.worldSize);
    }
    s.optimizer = c.optim.optimizer == "sgd" ? (c.optim.momentum > 0 ? "sgd" : "sgd-plain") : "adamw";
    s.weightDecay = c.optim.weightDecay > 0;
    s.precision = c.train.precision == "auto" ? "fp32" : c.train.precision;
    s.checkpointing = c.train.activationCheckpointing;
    // Weights loaded in half precision: full training of bf16 weights is
    // pure bf16 (a LoRA base kept in it is planned from its own step).
    if (c.train.weightsDtype == "bf16" && c.lora.rank == 0 && c.train.precision == "bf16") s.precision = "bf16-pure";
    s.attention = c.model.attention == "sdpa" ? "fused" : "eager";
    s.loraRank = c.lora.rank;
    s.loraTargets = plannedLoraTargets(c.model.type, c.lora.targets);
    s.dropout = c.model.dropout;
    s.dataset = c.data.source == "tokens" ? "text" : c.data.source; // both are windows of a mapped file
    s.evalBatches = c.train.evalBatches;
    s.positionsFollowSeq = c.model.type != "hf"; // a folder's GPT-2 keeps its n_positions table
    if (c.data.source == "addition") {
        std::int64_t limit = 1;
        for (int i = 0; i < c.data.digits; ++i) limit *= 10;
        const auto total = limit * limit;
        if (total < 1000000) s.validationCap = static_cast<std::int64_t>(c.data.valFraction * total + 1);
    }
    return s;
}

MemoryEstimate estimateMemory(const ArchitectureSpec& A, const TrainingSetup& S) { return estimateImpl(A, S, nullptr); }

std::int64_t dataBytes(const TrainingSetup& S, std::int64_t batch, std::int64_t seqLen, const std::string& dataset, int gpus,
                       int gradAccum)
{
    return (validationExamples(S, batch, gpus) + gradAccum * batch * std::max(1, gpus)) * exampleBytes(seqLen, dataset);
}

std::int64_t dataBytes(const TrainingSetup& S) { return dataBytes(S, S.batch, S.seqLen, S.dataset, S.gpus, S.gradAccum); }

std::int64_t largestBatch(const ArchitectureSpec& arch, TrainingSetup setup, std::int64_t budget, std::int64_t limit)
{
    return largestUnderBudget(
        [&](std::int64_t b) {
            setup.batch = b;
            return estimateMemory(arch, setup).peakBytes;
        },
        budget, limit);
}

std::int64_t largestSequence(const ArchitectureSpec& arch, TrainingSetup setup, std::int64_t budget)
{
    return largestUnderBudget(
        [&](std::int64_t t) {
            setup.seqLen = t;
            return estimateMemory(arch, setup).peakBytes;
        },
        budget, arch.positional == "learned" && !setup.positionsFollowSeq ? arch.maxPositions : (1 << 20));
}

namespace {

// The fit map's compiled step: the hand replay's allocations as polynomials
// in B and T (StepPolynomials.h). Where a size is not polynomial over the
// whole range (the optimizer's largest parameter switches to a learned
// position table that grows with T), the range is split and each part
// compiled on its own.
struct CompiledStep {
    std::vector<CompiledSegment> segments; // ascending in T
    // Trainable bytes at tFirst and per token of sequence beyond it (a
    // learned position table sized to the sequence grows with T): the
    // data-parallel buckets follow them.
    std::int64_t trainableBytes = 0;
    std::int64_t trainableBytesPerToken = 0;
    std::int64_t tFirst = 1;
    std::int64_t trainableAt(std::int64_t t) const { return trainableBytes + trainableBytesPerToken * (t - tFirst); }
};


// The hand replay's allocation traces at (B, T), recorded once each: the
// compiler's samples and checks are known before it runs, so they are
// recorded side by side first (a Llama 2 7B step has about 4,000 allocations).
// The segments on either side of a sliding window compile side by side from
// one cache: a trace, once in, stays where it is (std::map) and is read in
// place; finding and adding are locked.
class TraceCache {
public:
    TraceCache(const ArchitectureSpec& arch, const TrainingSetup& setup) : m_arch(arch), m_setup(setup) {}
    void prefetch(std::vector<std::pair<std::int64_t, std::int64_t>> points)
    {
        std::sort(points.begin(), points.end());
        points.erase(std::unique(points.begin(), points.end()), points.end());
        {
            const std::lock_guard lock(m_mutex);
            std::erase_if(points, [&](const auto& p) { return m_traces.count(p) > 0; });
        }
        std::vector<Entry> made(points.size());
        forEachConcurrently(points.size(), [&](std::size_t i) { made[i] = record(points[i].first, points[i].second); });
        const std::lock_guard lock(m_mutex);
        for (std::size_t i = 0; i < points.size(); ++i) m_traces.emplace(points[i], std::move(made[i]));
    }
    const StepTrace& trace(std::int64_t B, std::int64_t T) { return entry(B, T).trace; }
    std::int64_t trainableBytes(std::int64_t B, std::int64_t T) { return entry(B, T).trainableBytes; }

private:
    struct Entry {
        StepTrace trace;
        std::int64_t trainableBytes = 0;
    };
    Entry record(std::int64_t B, std::int64_t T) const
    {
        Recording rec;
        auto setup = m_setup;
        setup.batch = B;
        setup.seqLen = T;
        (void)estimateImpl(m_arch, setup, &rec);
        Entry e;
        e.trace = std::move(rec.trace);
        e.trainableBytes = rec.trainableBytes;
        return e;
    }
    const Entry& entry(std::int64_t B, std::int64_t T)
    {
        {
            const std::lock_guard lock(m_mutex);
            const auto it = m_traces.find({B, T});
            if (it != m_traces.end()) return it->second;
        }
        auto made = record(B, T);
        const std::lock_guard lock(m_mutex);
        return m_traces.emplace(std::pair{B, T}, std::move(made)).first->second; // (kept if another thread was first)
    }
    const ArchitectureSpec& m_arch;
    TrainingSetup m_setup;
    std::mutex m_mutex;
    std::map<std::pair<std::int64_t, std::int64_t>, Entry> m_traces;
};

// The (B, T) at which compileSegment traces [t0, tLast] (its samples, then its checks).
std::vector<std::pair<std::int64_t, std::int64_t>> compilerPoints(std::int64_t t0, std::int64_t tLast, std::int64_t bMax)
{
    constexpr std::int64_t kGeneralFrom = 2;
    auto points = segmentChecks(t0, tLast, bMax);
    for (std::int64_t b = 1; b <= kGeneralFrom + 1; ++b) {
        for (std::int64_t u = 0; u < 3; ++u) points.emplace_back(b, t0 + u);
    }
    return points;
}

// Compiles [t0, tLast], splitting it where a size is not one polynomial over
// it. A piece too narrow to split (a switch point inside a few sequence
// lengths) is left uncompiled: the map replays its rows.
void compileRange(TraceCache& cache, std::int64_t t0, std::int64_t tLast, std::int64_t bMax,
                  std::vector<CompiledSegment>& out)
{
    cache.prefetch(compilerPoints(t0, tLast, bMax));
    const auto tracer = [&](std::int64_t B, std::int64_t T) { return &cache.trace(B, T); };
    if (auto segment = compileSegmentInPlace(tracer, t0, tLast, bMax, segmentChecks(t0, tLast, bMax))) {
        out.push_back(std::move(*segment));
        return;
    }
    if (tLast - t0 < 8) {
        CompiledSegment replayed;
        replayed.t0 = t0;
        replayed.tLast = tLast;
        replayed.compiled = false;
        out.push_back(std::move(replayed));
        return;
    }
    const auto mid = t0 + (tLast - t0) / 2;
    compileRange(cache, t0, mid, bMax, out);
    compileRange(cache, mid + 1, tLast, bMax, out);
}

std::optional<CompiledStep> compileStep(const ArchitectureSpec& arch, TrainingSetup setup, std::int64_t bMax,
                                        std::int64_t tFirst, std::int64_t tLast)
{
    CompiledStep out;
    TraceCache cache(arch, setup);
    // Past a sliding window the step masks it (and SDPA gives way to eager
    // attention): a step of other allocations, compiled on its own, side by
    // side with the one within the window.
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges{{tFirst, tLast}};
    if (arch.windowedAt(tLast) && !arch.windowedAt(tFirst)) {
        ranges = {{tFirst, arch.slidingWindow}, {arch.slidingWindow + 1, tLast}};
    }
    std::vector<std::pair<std::int64_t, std::int64_t>> points{{2, tFirst + 1}};
    for (const auto& [t0, t1] : ranges) {
        const auto more = compilerPoints(t0, t1, bMax);
        points.insert(points.end(), more.begin(), more.end());
    }
    cache.prefetch(points);
    out.trainableBytes = cache.trainableBytes(2, tFirst);
    out.tFirst = tFirst;
    if (tLast > tFirst) out.trainableBytesPerToken = cache.trainableBytes(2, tFirst + 1) - out.trainableBytes;
    std::vector<std::vector<CompiledSegment>> parts(ranges.size());
    forEachConcurrently(ranges.size(), [&](std::size_t i) {
        compileRange(cache, ranges[i].first, ranges[i].second, bMax, parts[i]);
    });
    for (auto& part : parts) {
        for (auto& segment : part) out.segments.push_back(std::move(segment));
    }
    // A step whose allocations do not follow polynomials anywhere is not compiled.
    if (std::none_of(out.segments.begin(), out.segments.end(), [](const auto& s) { return s.compiled; })) {
        return std::nullopt;
    }
    return out;
}

} // namespace

void placeAllocatorReserve(FitMap& map, const std::vector<std::int64_t>& placedBase, std::size_t lightIndex,
                           const MemoryEstimate& lightest, const std::function<MemoryEstimate(std::size_t)>& exact)
{
    // On a GPU the caching allocator reserves more than the tensors. Its
    // model replays a whole step (milliseconds for a 7B model), too slow for
    // every cell: the map places each cell with the fraction the model
    // reserves beyond the tensors at the cell nearest the budget, and
    // replays the kReplays cells whose placed figure is nearest the budget
    // (within kBand of it): those cells' figures and verdicts are the
    // estimate's. Elsewhere the figure is the placed one, and a cell near
    // the budget but not among the replayed can take the other verdict.
    constexpr double kBand = 0.10;
    constexpr std::size_t kReplays = 6;
    const auto budgetBytes = map.budgetBytes;
    const auto& seqLens = map.seqLens;
    const auto& batches = map.batches;
    const std::size_t cols = batches.size();
    double reservedPerTensorByte = 0;
    struct Cell {
        std::size_t index;
        std::int64_t t, b;
    };
    std::vector<std::pair<double, Cell>> nearBudget;
    std::vector<std::int64_t> reservedBase; // per placed cell: the tensors the allocator holds
    for (std::size_t index = 0; index < placedBase.size(); ++index) {
        if (placedBase[index] < 0) continue;
        nearBudget.push_back({static_cast<double>(map.peakBytes[index] - budgetBytes),
                              {index, seqLens[index / cols], batches[index % cols]}});
        reservedBase.push_back(placedBase[index]);
    }
    if (!nearBudget.empty()) {
        // What the allocator reserves beyond the tensors, replayed at the
        // cell whose lower bound is nearest the budget and at the lightest
        // cell (the smallest batch and sequence), and placed on the line
        // through the two (a segment's fixed part weighs most on small
        // steps). A replayed cell takes the estimate's peak.
        const auto figures = [&](const MemoryEstimate& e, std::size_t index) {
            map.peakBytes[index] = e.peakBytes;
            return std::pair{static_cast<double>(e.tensorPeakBytes),
                             static_cast<double>(std::max<std::int64_t>(0, e.reservedPeakBytes - e.tensorPeakBytes))};
        };
        std::size_t nearestIndex = 0;
        for (std::size_t i = 1; i < nearBudget.size(); ++i) {
            if (std::abs(nearBudget[i].first) < std::abs(nearBudget[nearestIndex].first)) nearestIndex = i;
        }
        const auto& near = nearBudget[nearestIndex].second;
        const auto [tNear, xNear] = figures(exact(near.index), near.index);
        nearBudget[nearestIndex].first = std::numeric_limits<double>::infinity(); // placed by its own replay
        const auto [tLight, xLight] = figures(lightest, lightIndex);
        for (auto& cell : nearBudget) {
            if (cell.second.index == lightIndex) cell.first = std::numeric_limits<double>::infinity();
        }
        reservedPerTensorByte = tNear > tLight ? (xNear - xLight) / (tNear - tLight) : (tNear > 0 ? xNear / tNear : 0.0);
        const double reservedAtZero = tNear > tLight ? xLight - reservedPerTensorByte * tLight : 0.0;
        for (std::size_t i = 0; i < nearBudget.size(); ++i) {
            auto& cell = nearBudget[i];
            if (std::isinf(cell.first)) continue;
            const auto placed = static_cast<std::int64_t>(
                std::max(0.0, reservedAtZero + reservedPerTensorByte * static_cast<double>(reservedBase[i])));
            map.peakBytes[cell.second.index] += placed;
            cell.first = static_cast<double>(map.peakBytes[cell.second.index] - budgetBytes);
        }
        const auto nearest = std::min(kReplays, nearBudget.size());
        std::partial_sort(nearBudget.begin(), nearBudget.begin() + static_cast<std::ptrdiff_t>(nearest), nearBudget.end(),
                          [](const auto& x, const auto& y) { return std::abs(x.first) < std::abs(y.first); });
        std::size_t within = 0;
        while (within < nearest && std::abs(nearBudget[within].first) <= kBand * static_cast<double>(budgetBytes)) ++within;
        forEachConcurrently(within, [&](std::size_t i) {
            const auto index = nearBudget[i].second.index;
            map.peakBytes[index] = exact(index).peakBytes;
        });
    }
}

FitMap fitMap(const ArchitectureSpec& arch, TrainingSetup setup, std::int64_t budgetBytes,
              const std::vector<std::int64_t>& batches, const std::vector<std::int64_t>& seqLens)
{
    FitMap map{batches, seqLens, {}, budgetBytes};
    if (batches.empty() || seqLens.empty()) return map;
    const auto bFirst = std::min_element(batches.begin(), batches.end());
    const auto tFirst = std::min_element(seqLens.begin(), seqLens.end());
    // On a GPU the lightest cell (the smallest batch and sequence) is
    // replayed through the allocator's model below whatever the compiler
    // finds: it runs while the step compiles.
    std::future<MemoryEstimate> lightest;
    if (setup.gpu) {
        auto s = setup;
        s.batch = *bFirst;
        s.seqLen = *tFirst;
        lightest = std::async(std::launch::async, [&arch, s] { return estimateMemory(arch, s); });
    }
    const auto compiled = compileStep(arch, setup, *std::max_element(batches.begin(), batches.end()),
                                      *std::min_element(seqLens.begin(), seqLens.end()),
                                      *std::max_element(seqLens.begin(), seqLens.end()));
    map.compiled = compiled.has_value();
    const std::int64_t granularity = setup.gpu ? 512 : 1;
    // On a GPU the caching allocator reserves more than the tensors. Its
    // model replays a whole step (milliseconds for a 7B model), too slow for
    // every cell: the map places each cell with the fraction the model
    // reserves beyond the tensors at the cell nearest the budget, and
    // replays the kReplays cells whose placed figure is nearest the budget
    // (within kBand of it): those cells' figures and verdicts are the
    // estimate's. Elsewhere the figure is the placed one, and a cell near
    // the budget but not among the replayed can take the other verdict.
    // Rows side by side: each cell is a few dozen dot products, or a replay
    // where the step did not compile.
    const std::size_t cols = batches.size();
    map.peakBytes.assign(seqLens.size() * cols, 0);
    std::vector<std::int64_t> placedBase(setup.gpu ? map.peakBytes.size() : 0, -1); // the tensors the allocator holds
    forEachConcurrently(seqLens.size(), [&](std::size_t row) {
        auto cell = setup;
        const auto t = seqLens[row];
        cell.seqLen = t;
        const CompiledSegment* segment = nullptr;
        if (compiled) {
            for (const auto& s : compiled->segments) {
                if (t >= s.t0 && t <= s.tLast && s.compiled) segment = &s;
            }
        }
        if (!segment) { // not polynomial in B and T here: replay the row's cells
            for (std::size_t col = 0; col < cols; ++col) {
                cell.batch = batches[col];
                map.peakBytes[row * cols + col] = estimateMemory(arch, cell).peakBytes;
            }
            return;
        }
        // What depends on the sequence only (the CUDA context's figure, the
        // data-parallel buckets), once per row.
        const auto example = exampleBytes(cell);
        const auto overheads = gpuOverheads(cell, compiled->trainableAt(t));
        std::int64_t fixed = overheads.total();
        if (cell.gpu && cell.torchMajor < 2) fixed += 2 * cublasWorkspaceBytes(cell.torchMajor, cell.computeCapability);
        for (std::size_t col = 0; col < cols; ++col) {
            const auto b = batches[col];
            const auto index = row * cols + col;
            cell.batch = b;
            std::int64_t tensors = segment->peak(b, t); // (bf16 products' CPU scratch: near the budget, below)
            const auto resident = validationExamples(cell) * example;
            tensors += (resident + granularity - 1) / granularity * granularity;
            // On a GPU, placed below (the allocator reserves at least the tensors).
            if (cell.gpu) placedBase[index] = tensors + overheads.buckets;
            map.peakBytes[index] = tensors + fixed;
        }
    });
    // On the CPU in bf16 each product takes oneDNN's scratch, whose size is
    // oneDNN's answer for its shape (microseconds a new shape: too slow for
    // every cell, and no polynomial for the compiler). The cells leave it
    // out, and the kExactCells nearest the budget are replayed with it, so
    // that there the figure and the verdict are the estimate's; elsewhere a
    // figure is under the estimate by at most one product's scratch.
    if (compiled && !setup.gpu && (setup.precision == "bf16" || setup.precision == "bf16-pure")
        && cpuBf16ProductsUseOneDnn() && cpuGemmScratchKnown()) {
        constexpr std::size_t kExactCells = 16;
        const auto order = nearestToBudget(map.peakBytes, budgetBytes, kExactCells);
        forEachConcurrently(order.size(), [&](std::size_t n) {
            const auto i = order[n];
            auto s = setup;
            s.seqLen = seqLens[i / cols];
            s.batch = batches[i % cols];
            map.peakBytes[i] = estimateMemory(arch, s).peakBytes;
        });
    }
    if (setup.gpu) {
        const auto lightIndex = static_cast<std::size_t>(tFirst - seqLens.begin()) * cols
                                + static_cast<std::size_t>(bFirst - batches.begin());
        placeAllocatorReserve(map, placedBase, lightIndex, lightest.get(), [&](std::size_t index) {
            auto s = setup;
            s.seqLen = seqLens[index / cols];
            s.batch = batches[index % cols];
            return estimateMemory(arch, s);
        });
    }
    return map;
}

std::vector<std::int64_t> fitMapAxis(std::int64_t first, std::int64_t last, int count)
{
    std::vector<std::int64_t> axis;
    if (count < 1 || last < first) return axis;
    if (count == 1) return {first};
    for (int i = 0; i < count; ++i) {
        const auto v = first + static_cast<std::int64_t>(
                                   static_cast<double>(last - first) * i / (count - 1) + 0.5);
        if (axis.empty() || v > axis.back()) axis.push_back(v);
    }
    return axis;
}

} // namespace tb
