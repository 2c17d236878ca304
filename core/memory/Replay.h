#pragma once
// The memory planner's replay: one training step's allocations and releases,
// in the order LibTorch makes them, with the live bytes and the peak tracked
// per category. Internal to core/memory (Estimator.cpp and the replays of
// particular steps).

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memory/CpuGemmScratch.h"
#include "memory/CudaAllocatorModel.h"
#include "memory/Estimator.h"
#include "memory/FusedAttention.h"
#include "memory/StepPolynomials.h"

namespace tb::memory_detail {

// Data whose loss is on some targets only carries a float mask beside the ids
// ([B, T], 4 bytes a position): the addition task (the answer's digits) and
// chat data (the assistant's tokens). The loss multiplies by it.
inline bool hasLossMask(const TrainingSetup& s) { return datasetHasLossMask(s.dataset); }

// Where live bytes belong, for the breakdown at the peak.
enum Cat { Weights, Gradients, OptimizerState, Data, Activations, AttentionMaps, Logits, Workspace, WeightCopies,
           LibraryWorkspace, kCats };
constexpr std::array<const char*, kCats> kCatNames{"weights",        "gradients",      "optimizer_state",
                                                   "data",           "activations",    "attention_maps",
                                                   "logits",         "workspace",      "weight_copies",
                                                   "cublas_workspace"};

// Replays the allocations and releases of one training step in the order
// LibTorch makes them, tracking the bytes live and the peak.
class Replay {
public:
    static constexpr std::array<const char*, 3> kPhases{"forward", "backward", "optimizer"};
    // On a GPU every block the caching allocator hands out is a multiple of 512 bytes.
    explicit Replay(std::int64_t granularity = 1, StepTrace* trace = nullptr)
        : m_granularity(granularity), m_trace(trace) {}
    // On the CPU, bf16 products take oneDNN's scratch while they run
    // (CpuGemmScratch.h); threads: LibTorch's intra-op threads. Off: none.
    void cpuProducts(int threads) { m_productThreads = threads; }
    bool productsTracked() const { return m_productThreads > 0; }
    // A bf16 product runs: its output was just added; its scratch is live
    // on top of everything until it returns (no allocation in between).
    void product(const GemmCall& c) { scratch(productScratch(c)); }
    // The scratch that product would take; 0 where none is tracked.
    std::int64_t productScratch(const GemmCall& c) const
    {
        // (Not in a recorded trace: the fit map's compiler samples tiny
        // shapes, where oneDNN's blocking says nothing of large ones; the map
        // replays the cells nearest the budget instead.)
        if (m_productThreads <= 0 || m_trace) return 0;
        return cpuGemmScratchBytes(c, m_productThreads);
    }
    // A buffer a kernel holds while it runs, with no allocation in between
    // (the CPU flash attention's blocks, FusedAttention.h): on top of
    // everything until it returns. Not in a recorded trace either: its size
    // follows the kernel's choice of blocks, no polynomial in B and T.
    void scratch(std::int64_t bytes)
    {
        if (bytes <= 0 || m_trace) return;
        const auto top = m_total + bytes;
        m_phasePeak[m_phase] = std::max(m_phasePeak[m_phase], top);
        if (top > m_peak) {
            m_peak = top;
            m_atPeak = m_live;
            m_atPeak[Workspace] += bytes;
            m_peakPhase = m_phase;
        }
    }
    // On a GPU target every allocation and release also goes through a model
    // of the CUDA caching allocator, for the bytes it reserves.
    void useAllocator(CudaAllocatorModel* model) { m_allocator = model; }
    void phase(const char* name)
    {
        m_phase = 0;
        while (m_phase + 1 < kPhases.size() && std::string_view(kPhases[m_phase]) != name) ++m_phase;
        m_phasePeak[m_phase] = std::max(m_phasePeak[m_phase], m_total);
    }
    // A zero size (a step the setup switches off: a cast in fp32, a
    // checkpoint-only tensor) is no allocation: not counted, not traced.
    void add(Cat c, std::int64_t bytes)
    {
        if (bytes == 0) return;
        bytes = round(bytes);
        m_live[c] += bytes;
        m_total += bytes;
        ++m_calls;
        if (m_allocator) m_blocks[c].push_back({bytes, m_allocator->allocate(bytes)});
        // A recorded trace has no scratch (product and scratch leave it
        // out), so its transients and products stay empty (StepTrace).
        if (m_trace) m_trace->live.push_back(m_total);
        m_phasePeak[m_phase] = std::max(m_phasePeak[m_phase], m_total);
        if (m_total > m_peak) {
            m_peak = m_total;
            m_atPeak = m_live;
            m_peakPhase = m_phase;
        }
    }
    // On a GPU the bytes released are the blocks' (each allocation rounded
    // on its own): a sum allocated as one and released in parts (or the
    // reverse) rounds differently, and releasing the rounded parts would
    // take more than the category holds (a term of -512 bytes per layer).
    void sub(Cat c, std::int64_t bytes)
    {
        if (bytes == 0) return;
        bytes = round(bytes);
        if (m_allocator) bytes = takeBlocks(c, bytes, nullptr);
        m_live[c] -= bytes;
        m_total -= bytes;
        ++m_calls;
    }
    // Live bytes that change role without an allocation (a temporary that
    // becomes a parameter's gradient).
    void move(Cat from, Cat to, std::int64_t bytes)
    {
        bytes = round(bytes);
        if (m_allocator) bytes = takeBlocks(from, bytes, &m_blocks[to]);
        m_live[from] -= bytes;
        m_live[to] += bytes;
    }
    std::int64_t total() const { return m_total; }
    bool recording() const { return m_trace != nullptr; }
    std::int64_t live(Cat c) const { return m_live[c]; }
    std::int64_t peak() const { return m_peak; }
    std::int64_t calls() const { return m_calls; }
    const std::array<std::int64_t, kCats>& atPeak() const { return m_atPeak; }
    std::string peakPhase() const { return kPhases[m_peakPhase]; }
    // In the order of a step; phases never entered are left out.
    std::vector<PhasePeak> phasePeaks() const
    {
        std::vector<PhasePeak> out;
        for (std::size_t i = 0; i < kPhases.size(); ++i) {
            if (i == 0 || m_phasePeak[i] > 0) out.push_back({kPhases[i], m_phasePeak[i]});
        }
        return out;
    }

private:
    // A block of the allocator model: the bytes the replay allocated, and its handle.
    struct Held {
        std::int64_t bytes;
        int handle;
    };
    // The replay releases (or moves) bytes of a category, at times several
    // tensors at once or part of one it allocated as a sum: the newest block
    // of exactly that size, else the newest blocks if together they are,
    // else the newest blocks that fit in what is left;
    // the part of a larger block is released as the block's release and a
    // new allocation of the rest (and of the part, when it moves), so the
    // model's allocated bytes follow the replay's live bytes. Returns the
    // bytes taken: less than asked only when the category holds less (the
    // rounded parts of what was allocated as one sum).
    std::int64_t takeBlocks(Cat c, std::int64_t bytes, std::vector<Held>* to)
    {
        auto& v = m_blocks[c];
        const auto give = [&](std::size_t i) {
            if (to) to->push_back(v[i]);
            else releaseHeld(v[i]);
            v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
        };
        for (std::size_t i = v.size(); i-- > 0;) {
            if (v[i].bytes == bytes) {
                give(i);
                return bytes;
            }
        }
        // The newest blocks, when together they are exactly that size.
        std::int64_t sum = 0;
        std::size_t first = v.size();
        while (first > 0 && sum < bytes) sum += v[--first].bytes;
        if (sum == bytes) {
            for (std::size_t i = v.size(); i-- > first;) give(i);
            return bytes;
        }
        const std::int64_t asked = bytes;
        for (std::size_t i = v.size(); i-- > 0 && bytes > 0;) {
            if (v[i].bytes <= bytes) {
                bytes -= v[i].bytes;
                give(i);
            }
        }
        if (bytes <= 0) return asked;
        for (std::size_t i = v.size(); i-- > 0;) {
            if (v[i].bytes > bytes) {
                releaseHeld(v[i]);
                v[i].bytes -= bytes;
                v[i].handle = m_allocator->allocate(v[i].bytes);
                if (to) to->push_back({bytes, m_allocator->allocate(bytes)});
                return asked;
            }
        }
        return asked - bytes;
    }
    void releaseHeld(const Held& h)
    {
        if (h.handle >= 0) m_allocator->release(h.handle);
    }
    std::int64_t round(std::int64_t bytes) const
    {
        return bytes > 0 ? (bytes + m_granularity - 1) / m_granularity * m_granularity : bytes;
    }
    std::int64_t m_granularity;
    StepTrace* m_trace; // the live total after each allocation, when set
    int m_productThreads = 0;
    CudaAllocatorModel* m_allocator = nullptr;
    std::array<std::vector<Held>, kCats> m_blocks{};
    std::array<std::int64_t, kCats> m_live{};
    std::array<std::int64_t, kCats> m_atPeak{};
    std::array<std::int64_t, kPhases.size()> m_phasePeak{};
    std::int64_t m_total = 0, m_peak = 0, m_calls = 0;
    std::size_t m_phase = 0, m_peakPhase = 0;
};

// Where a step's parameter gradients live. LibTorch 1.13's zero_grad zeroes
// them in place, so from the second step on they live through the whole step
// and each incoming gradient is added to its parameter's and freed. From 2.0
// zero_grad sets them to none: a step starts without them, and backward's
// AccumulateGrad keeps each incoming gradient as the parameter's own, no copy
// (the first micro-batch's; later micro-batches of an accumulating step add to
// them as 1.13 does, and the replays model the last micro-batch).
class GradientLife {
public:
    GradientLife(Replay& r, const TrainingSetup& s, std::int64_t trainableBytes)
        : m_r(r), m_freed(s.torchMajor >= 2 && s.gradAccum == 1), m_total(trainableBytes)
    {
        if (!m_freed) m_r.add(Gradients, m_total);
    }
    // An incoming gradient of `bytes`, live in `from`, is done with: added to
    // the parameter's and freed, or kept as the parameter's gradient.
    void done(std::int64_t bytes, Cat from = Workspace)
    {
        if (!m_freed) {
            m_r.sub(from, bytes);
            return;
        }
        m_r.move(from, Gradients, bytes);
        m_kept += bytes;
    }
    // An incoming gradient the replay does not follow as a temporary (its
    // transient never makes a 1.13 peak): kept as the parameter's from here.
    void appear(std::int64_t bytes)
    {
        if (!m_freed) return;
        m_r.add(Gradients, bytes);
        m_kept += bytes;
    }
    // A block's norm gains and biases (bytes), whose gradients the replays
    // do not follow one by one: where zero_grad freed them they appear as
    // the block's backward starts (on the safe side of each node's).
    void smallPerBlock(std::int64_t bytes) { m_perBlock = bytes; }
    void blockBackward() { appear(m_perBlock); }
    // After backward every trainable parameter has its gradient: those not
    // replayed one by one (the final norm's, the rest) are added here.
    void backwardDone()
    {
        if (m_freed && m_kept < m_total) m_r.add(Gradients, m_total - m_kept);
        m_kept = m_total;
    }
    bool freed() const { return m_freed; }

private:
    Replay& m_r;
    bool m_freed;
    std::int64_t m_total, m_kept = 0, m_perBlock = 0;
};


// RMSNorm's x^2: saved for mean's backward by LibTorch 1.13, a temporary of
// the norm's forward from 2.0 (mean's backward keeps only the shape).
inline bool meanSavesInput(const TrainingSetup& s) { return s.torchMajor < 2; }

// Pure bf16 RMSNorm's backward (train/Llama.cpp), from the gradient of its
// bf16 normed tensor (g * weight, `a` bytes, in Workspace) to the gradient of
// its input, cast back to bf16 and left in Workspace; on the way it releases
// what the forward saved in Activations: the fp32 copy of the input, its
// square while mean saves it (`sq32`: 1.13) and rsqrt (`m`).
inline void replayPureRmsBackward(Replay& r, std::int64_t a, std::int64_t m, std::int64_t sq32)
{
    const auto tmp = [&](std::int64_t b) { r.add(Workspace, b); };
    const auto untmp = [&](std::int64_t b) { r.sub(Workspace, b); };
    tmp(2 * a);   // the gradient cast to fp32
    untmp(a);
    tmp(2 * a);   // g32 * rsqrt
    tmp(2 * a);   // g32 * x32
    tmp(m);       // summed: the rsqrt gradient
    untmp(4 * a); // g32 * x32 and g32
    tmp(3 * m);   // rsqrt backward
    untmp(3 * m);
    r.sub(Activations, m); // rsqrt
    tmp(2 * a);   // mean backward
    untmp(m);
    r.sub(Activations, sq32);
    tmp(6 * a);   // pow backward: x32^1, two products
    untmp(6 * a); // mean backward's gradient and two of them
    r.sub(Activations, 2 * a); // x32
    tmp(2 * a);   // the two x32 gradients summed
    untmp(4 * a);
    tmp(a);       // cast back to bf16
    untmp(2 * a);
}

// A block projection's bf16 products as LibTorch's kernel receives them
// (`rows` = batch x sequence). nn.Linear keeps its weight [out, in] and
// computes x W^T (+ b); GPT-2's Conv1D keeps it [in, out] and computes
// addmm(b, x, W) (ArchitectureSpec::conv1d). The transposes move between the
// operands, and oneDNN's blocking, so its scratch, follows them.
struct ProjectionProducts {
    std::int64_t rows = 0;
    bool conv1d = false;
    // x W^T or x W: addmm with a bias (accumulating), else mm.
    GemmCall forward(std::int64_t in, std::int64_t out, bool bias) const
    {
        return {0, rows, in, out, false, !conv1d, bias};
    }
    // The input's gradient: grad . W, or grad . W^T.
    GemmCall inputGradient(std::int64_t in, std::int64_t out) const { return {0, rows, out, in, false, conv1d, false}; }
    // The weight's: grad^T . x ([out, in]), or x^T . grad ([in, out]).
    GemmCall weightGradient(std::int64_t in, std::int64_t out) const
    {
        return conv1d ? GemmCall{0, in, rows, out, true, false, false} : GemmCall{0, out, rows, in, true, false, false};
    }
};

// Dropout's saved noise, for a tensor of `bytes` with `elementBytes` per
// element: the CPU's dropout draws it in the tensor's dtype (scaled
// Bernoulli draws); CUDA's fused kernel (native_dropout) keeps a one-byte
// bool mask instead. (CUDA allocates the output before the mask; the
// replays keep the CPU's order, noise first.)
inline std::int64_t dropoutNoiseBytes(const TrainingSetup& s, std::int64_t bytes, std::int64_t elementBytes)
{
    return s.gpu ? bytes / elementBytes : bytes;
}

// Activation checkpointing saves the default generator's state with each
// block and holds the current one while it recomputes: on the CPU a tensor of
// this many bytes (mt19937 state); a CUDA generator's state is host memory.
// A block's state is kept in its autograd node's saved data
// (train/Layers.cpp), which its backward does not release: every block's
// goes with the graph, once the embedding's gradient is made (with LoRA,
// whose embedding is frozen, at the end of backward), on 1.13 as on 2.x.
constexpr std::int64_t kCpuRngStateBytes = 5056;
inline std::int64_t rngStateBytes(const TrainingSetup& s) { return s.checkpointing && !s.gpu ? kCpuRngStateBytes : 0; }


// The trainer's causal mask for eager attention (train/Layers.cpp
// tablesFor), T x T booleans of `bytes`, built once per forward pass and
// kept while masked_fill or a checkpoint saves it (the replays release it):
// ones, then their upper triangle. Past a sliding window
// (Mistral) the band below the window is or'd in, in one statement whose
// temporaries live to its end: ones, their lower triangle and the or'd mask
// while the first mask is still held, then the first mask goes. SDPA needs
// none.
inline void causalMask(Replay& r, const ArchitectureSpec& a, const TrainingSetup& s, std::int64_t bytes)
{
    if (s.attention == "fused") return;
    r.add(Workspace, bytes); // ones
    r.add(Activations, bytes);
    r.sub(Workspace, bytes);
    if (!a.windowedAt(s.seqLen)) return;
    r.add(Workspace, bytes);  // ones
    r.add(Workspace, bytes);  // their band below the window
    r.add(Workspace, bytes);  // the or'd mask ...
    r.sub(Activations, bytes); // ... replaces the first
    r.move(Workspace, Activations, bytes);
    r.sub(Workspace, bytes);
    r.sub(Workspace, bytes);
}


// matmul folds the batch dimensions of a [B, H, T, D] operand into one for
// bmm. A head-split view ([B, T, H, D] transposed) folds without a copy only
// when B or H is 1; otherwise it is copied and the copy is what autograd
// saves. Without the copy, the view keeps the whole projection output it came
// from (GPT's fused qkv) alive until the product's backward has run.
inline bool matmulFoldsViews(std::int64_t batch, std::int64_t heads) { return batch == 1 || heads == 1; }

// Grouped-query attention expands the keys and values to every query head
// (unsqueeze, expand, reshape), and the eager products fold the batch and
// head dimensions for bmm. With several key/value heads the reshape copies;
// with one it is a stride-0 view, which the fold copies at batch > 1 (bmm
// saves the copy) but takes as it is at batch 1: autograd then saves the
// rotated k and the v projection themselves. The fused kernel takes the
// stride-0 views as they are.
inline bool gqaExpandCopies(const ArchitectureSpec& a, std::int64_t batch, bool eager)
{
    return a.family == "llama" && a.kvHeads < a.heads && !(a.kvHeads == 1 && (batch == 1 || !eager));
}
// Where the expansion copies, with several key/value heads the reshape makes
// both copies before the scores; with one, the keys' is made by the fold of
// q k^T and the values' by that of probabilities x values, after the maps.
inline bool gqaValuesCopiedFirst(const ArchitectureSpec& a, std::int64_t batch, bool eager)
{
    return gqaExpandCopies(a, batch, eager) && a.kvHeads > 1;
}

// SDPA's math fallback (FusedAttention.h: on the CPU a call with dropout;
// on a GPU a setup neither fused kernel takes). LibTorch 2.6's
// _scaled_dot_product_attention_math copies bf16 (fp16) q, k and v to fp32,
// scales q and k^T by sqrt(scale) (new tensors), builds a float causal mask,
// and runs the products, _safe_softmax and dropout in fp32; the output is
// cast back. None of the bf16 q, k and v is saved. In fp32 nothing is
// copied or cast: bmm saves q and k^T scaled (or their copies), and v itself
// where it folds (the caller then keeps what holds it: callerValues).
struct MathAttention {
    std::int64_t a32 = 0, ah = 0; // q (and the expanded k, v): fp32, the inputs' dtype
    std::int64_t s32 = 0;         // one map, fp32
    std::int64_t noise = 0;       // dropout's: the CPU's in the map's dtype, CUDA's a bool mask; 0: no dropout
    std::int64_t tt = 0;          // T x T
    std::int64_t rows = 0;        // B x H x T
    bool upcast = true;           // bf16/fp16 inputs, copied to fp32
    // The fp32 operands bmm needs copied (a head-split layout, batch and
    // heads over 1), else saved themselves.
    bool cloneQ = false, cloneK = false, cloneV = false;
    bool mergeCopies = true; // the output is [B, H, T, D]: its gradient arrives non-contiguous
    // What needs a gradient (LoRA freezes some): q, k (either: the scores'
    // path), v. bmm keeps q scaled for k's gradient, k^T scaled for q's.
    bool gQ = true, gK = true, gValues = true;
    bool gScores() const { return gQ || gK; }
    // fp32, v folded: bmm saves the caller's v, which keeps these bytes (qkv,
    // the expanded values, the v projection) until the values' backward.
    std::int64_t callerValues = 0;
    bool keepsCallersValues() const { return !upcast && !cloneV && gScores(); }
    // What its nodes save and release themselves (besides the maps).
    std::int64_t savedBytes() const
    {
        return (gK ? a32 : 0) + (gQ ? a32 : 0) + (gScores() ? (keepsCallersValues() ? callerValues : a32) : 0);
    }
    void needs(bool q, bool k, bool v)
    {
        gQ = q;
        gK = k;
        gValues = v;
    }
};
inline MathAttention mathAttention(const ArchitectureSpec& a, const TrainingSetup& s, std::int64_t elementBytes)
{
    MathAttention m;
    const std::int64_t B = s.batch, T = s.seqLen, H = a.heads, D = a.headDim();
    m.ah = B * T * H * D * elementBytes;
    m.a32 = B * T * H * D * 4;
    m.s32 = B * H * T * T * 4;
    m.noise = s.dropout > 0.0 ? dropoutNoiseBytes(s, m.s32, 4) : 0;
    m.tt = T * T;
    m.rows = B * H * T;
    m.upcast = elementBytes != 4;
    const bool llama = a.family == "llama", rope = llama || a.positional == "rope";
    // matmul folds [B, H] for bmm: a head-split view of a projection ([B, T,
    // H, D], kept so by the fp32 copies) only with B or H 1; RoPE's cat and
    // grouped keys and values expanded as copies are contiguous; one
    // key/value head's stride-0 view is copied to fp32 contiguous, and in
    // fp32 it folds only at batch 1.
    const bool folds = matmulFoldsViews(B, H);
    m.cloneQ = m.cloneK = !rope && !folds;
    const bool oneKv = llama && a.kvHeads == 1 && H > 1;
    m.cloneV = llama && a.kvHeads < H && !oneKv ? false : oneKv ? !m.upcast && B > 1 : !folds;
    m.mergeCopies = H > 1; // (at T 1 a view, planned as a copy: sizes polynomial in T)
    return m;
}
// What further attention modules per layer (attentionModules) keep of
// SDPA: the fused kernel's output and log-sum-exp, or the math fallback's
// fp32 maps (softmax; with dropout its noise and the dropped copy).
inline std::int64_t sdpaExtraModuleBytes(const ArchitectureSpec& a, const FusedAttentionBytes& fused,
                                         const MathAttention& m)
{
    const std::int64_t perModule = fused.fused ? fused.out + fused.lse
                                   : fused.math ? m.s32 + (m.noise > 0 ? m.noise + m.s32 : 0)
                                                : 0;
    return (a.attentionModules - 1) * perModule;
}
// Forward, from q, k and v (wherever the replay keeps them) to the output
// (the inputs' dtype), left in the workspace. An fp32 caller whose v bmm
// keeps (keepsCallersValues) saves what holds it itself.
inline void replayMathAttentionForward(Replay& r, const MathAttention& m)
{
    const auto tmp = [&](std::int64_t b) { r.add(Workspace, b); };
    const auto untmp = [&](std::int64_t b) { r.sub(Workspace, b); };
    const auto save = [&](bool saved, std::int64_t b) { saved ? r.move(Workspace, Activations, b) : untmp(b); };
    if (m.upcast) {
        tmp(m.a32); // q, k and v in fp32 (locals)
        tmp(m.a32);
        tmp(m.a32);
    }
    tmp(m.a32);                      // q scaled (a local)
    tmp(m.tt);                       // the causal mask: ones, tril
    tmp(m.tt);
    untmp(m.tt);
    tmp(4 * m.tt);                   // as an fp32 additive mask (a local)
    untmp(m.tt);
    tmp(m.a32);                      // k^T scaled
    // Copies for bmm: saved, or (no gradient) gone after the product.
    if (m.cloneQ) tmp(m.a32);
    if (m.cloneK) tmp(m.a32);
    tmp(m.s32);                      // the scores
    if (m.cloneK) save(m.gQ, m.a32);
    if (m.cloneQ) save(m.gK, m.a32);
    save(!m.cloneK && m.gQ, m.a32);  // k^T scaled: saved itself, else gone
    r.add(AttentionMaps, m.s32);     // softmax
    tmp(m.s32 / 4);                  // _safe_softmax's isneginf and all
    tmp(m.rows);
    untmp(m.rows + m.s32 / 4);
    untmp(m.s32);                    // the scores
    if (m.noise > 0) {
        r.add(AttentionMaps, m.noise); // dropout's noise (mask)
        r.add(AttentionMaps, m.s32);   // dropped
        // Without a gradient for the scores nothing saved the noise and the
        // softmax: they go once dropout returns.
        if (!m.gScores()) r.sub(AttentionMaps, m.noise), r.sub(AttentionMaps, m.s32);
    }
    if (m.upcast) tmp(m.s32 / 2);    // the probabilities cast back (returned beside, unused)
    if (m.cloneV) tmp(m.a32);
    tmp(m.a32);                      // probabilities x values
    if (m.cloneV) save(m.gScores(), m.a32);
    if (m.upcast) {
        tmp(m.ah);                   // cast back: the output
        untmp(m.a32);
    }
    // Returned: the locals go, but for what bmm saved itself.
    save(!m.cloneQ && m.gK, m.a32);  // q scaled
    untmp(4 * m.tt);                 // the mask
    if (m.upcast) {
        untmp(m.a32);                // k and q in fp32
        untmp(m.a32);
        save(!m.cloneV && m.gScores(), m.a32); // v in fp32
        untmp(m.s32 / 2);
    }
    // The dropped copy, a local no gradient needs without one for the
    // values; without dropout the softmax, when no gradient needs it.
    if (m.noise > 0 && !m.gValues) r.sub(AttentionMaps, m.s32);
    if (m.noise == 0 && !m.gValues && !m.gScores()) r.sub(AttentionMaps, m.s32);
}
// Backward, from the output's gradient (in the workspace) to those of q, k
// and v (the inputs' dtype, full heads, left in the workspace; only v's
// without the scores' path).
inline void replayMathAttentionBackward(Replay& r, const MathAttention& m)
{
    const auto tmp = [&](std::int64_t b) { r.add(Workspace, b); };
    const auto untmp = [&](std::int64_t b) { r.sub(Workspace, b); };
    if (m.upcast) {
        tmp(m.a32);                  // the gradient in fp32
        untmp(m.ah);
    }
    if (m.mergeCopies) {
        tmp(m.a32);                  // made contiguous for bmm
        untmp(m.a32);
    }
    const bool gScores = m.gScores();
    if (m.gValues) tmp(m.a32);       // the values' gradient
    if (gScores) tmp(m.s32);         // the probabilities'
    untmp(m.a32);
    if (gScores) r.sub(Activations, m.keepsCallersValues() ? m.callerValues : m.a32); // the values bmm saved
    // The probabilities as used: the dropped copy, or the softmax when its
    // own backward does not need it.
    if (m.gValues && (m.noise > 0 || !gScores)) r.sub(AttentionMaps, m.s32);
    if (gScores) {
        if (m.noise > 0) {
            tmp(m.s32);              // dropout backward
            untmp(m.s32);
            r.sub(AttentionMaps, m.noise);
        }
        tmp(m.s32);                  // softmax backward
        untmp(m.s32);
        r.sub(AttentionMaps, m.s32); // the softmax
        if (m.gQ) tmp(m.a32);        // the gradients of q scaled and k^T scaled
        if (m.gK) tmp(m.a32);
        untmp(m.s32);
        if (m.gK) r.sub(Activations, m.a32); // what bmm saved of them
        if (m.gQ) r.sub(Activations, m.a32);
        for (const bool g : {m.gK, m.gQ}) {
            if (!g) continue;
            tmp(m.a32);              // the scaling's backward
            untmp(m.a32);
        }
    }
    if (!m.upcast) return;           // fp32: the gradients are the inputs'
    for (const bool g : {m.gValues, m.gK, m.gQ}) {
        if (!g) continue;
        tmp(m.ah);                   // cast back
        untmp(m.a32);
    }
}

// Buffers the built-in models register beside their parameters: the
// sinusoidal position table, or RoPE's cos and sin tables (half the rotated
// head dimensions wide), sized to the longest sequence the model is built
// for: fp32, or bf16 in pure bf16 (the trainer casts the whole module,
// buffers too).
inline std::int64_t positionTableBytes(const ArchitectureSpec& a, const TrainingSetup& s)
{
    const std::int64_t e = s.precision == "bf16-pure" ? 2 : 4;
    const bool rope = a.family == "llama" || a.positional == "rope";
    if (rope) return 2 * a.maxPositions * (a.ropeDims() / 2) * e;
    if (a.family != "llama" && a.positional == "sinusoidal") return a.maxPositions * a.hidden * e;
    return 0;
}

} // namespace tb::memory_detail
