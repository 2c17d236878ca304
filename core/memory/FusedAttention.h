#pragma once
// What scaled_dot_product_attention allocates (attention "sdpa", LibTorch
// 2.x), for the hand replays. Written from LibTorch 2.6's source:
//
// - On the CPU, a call with dropout goes to the math fallback
//   (_scaled_dot_product_attention_math), a composite of the eager path's
//   operations that keeps the same maps (probabilities, noise, dropped copy,
//   copies of q, k and v for the products): it is planned as eager. Any other
//   call runs the flash kernel (native/cpu/FlashAttentionKernel.cpp): its
//   output takes q's layout (empty_like), the log-sum-exp is fp32 [B, T, H],
//   and while it runs it holds per-thread blocks of qSplit x kvSplit scores
//   (qSplit 32, 64 or 256 by the length, kvSplit 512, each at most T); bf16
//   adds reduced copies and, where oneDNN's ISA has AMX, keys and values
//   packed for brgemm. Backward makes zeroed q, k and v gradients ([B, T, H,
//   D]), per-thread blocks and a row sum, and in bf16 runs its gradient
//   updates as oneDNN products, whose scratch CpuGemmScratch asks of oneDNN.
// - On a GPU the flash kernel (sm80 to sm90, fp16 or bf16, head dim up to 256)
//   saves the output ([B, T, H, D]: the merge after it is a view) and an fp32
//   log-sum-exp [B, H, T]; its backward allocates dq, dk, dv, softmax_d and an
//   fp32 dq accumulator, both with T rounded up to 128 (head dim rounded up
//   to 8, then 32). The memory-efficient kernel (the others) rounds the
//   log-sum-exp's T up to 32 and its backward allocates the three gradients
//   and an fp32 delta. Neither keeps a T x T map.

#include <cstdint>

#include "memory/Estimator.h"

namespace tb {

struct FusedAttentionBytes {
    bool fused = false;              // false: eager attention, or SDPA's math fallback
    bool math = false;               // SDPA's math fallback (the CPU, with dropout): Replay.h's MathAttention in bf16, eager in fp32
    bool mergeCopies = false;        // merging the heads of the output copies it (the CPU kernel's output is [B, H, T, D])
    std::int64_t out = 0;            // the output, saved (q's dtype)
    std::int64_t lse = 0;            // the log-sum-exp, fp32, saved
    std::int64_t forwardScratch = 0; // CPU: the kernel's blocks while it runs
    std::int64_t backwardTemps = 0;  // GPU: softmax_d and the fp32 accumulator while backward runs
    std::int64_t backwardScratch = 0; // CPU: blocks, row sums and the bf16 products' scratch while backward runs
};

// One attention call of batch x seqLen with q's `elementBytes` (4 fp32, 2
// bf16/fp16). exactTemps false: the GPU's rounded T is left unrounded (the
// fit map's compiled polynomials; the cells near the budget are replayed
// exactly).
FusedAttentionBytes fusedAttentionBytes(const ArchitectureSpec& a, const TrainingSetup& s, std::int64_t elementBytes,
                                        bool exactTemps = true);

} // namespace tb
