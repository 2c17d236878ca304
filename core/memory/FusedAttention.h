#pragma once
// What scaled_dot_product_attention allocates (attention "sdpa", LibTorch
// 2.x), for the rules that size a recorded step's kernels (the CPU flash
// kernel's blocks, StepProgram.h; a GPU's kernels, DeviceRules.h). Written
// from LibTorch 2.6's source:
//
// - On the CPU, a call with dropout goes to the math fallback
//   (_scaled_dot_product_attention_math), a composite of the eager path's
//   operations that keeps the same maps (probabilities, noise, dropped copy)
//   and scaled copies of q and k (in bf16 it computes in fp32). Any other
//   call runs the flash kernel (native/cpu/FlashAttentionKernel.cpp): its
//   output takes q's layout (empty_like), the log-sum-exp is fp32 [B, T, H],
//   and while it runs it holds per-thread blocks of qSplit x kvSplit scores
//   (qSplit 32, 64 or 256 by the length, kvSplit 512, each at most T); bf16
//   adds reduced copies and, where oneDNN's ISA has AMX, keys and values
//   packed for brgemm. Backward makes zeroed q, k and v gradients ([B, T, H,
//   D]), per-thread blocks and a row sum, and in bf16 runs its gradient
//   updates as oneDNN products, whose scratch CpuGemmScratch asks of oneDNN.
// - On a GPU (LibTorch 2.6's choice, sdp_utils.cpp) the flash kernel (sm80
//   to sm90, fp16 or bf16, head dim up to 256) saves the output (q's layout,
//   as on the CPU) and an fp32 log-sum-exp [B, H, T]; its backward allocates
//   dq, dk, dv, softmax_d and an fp32 dq accumulator, both with T rounded up
//   to 128 (head dim rounded up to 8, then 32). The memory-efficient kernel
//   (sm50 to sm90; bf16 from sm80) allocates its output [B, T, H, D] (a view
//   to merge), rounds the log-sum-exp's T up to 32, and its backward adds an
//   fp32 delta and a workspace of about an fp32 copy of q. A setup neither
//   takes (bf16 below sm80, a newer card than sm90) runs the math fallback.
//   Neither kernel keeps a T x T map. (Not modelled: q, k and v padded to a
//   head dim that is a multiple of 8, the flash kernel's split-KV buffers.)

#include <cstdint>

#include "memory/Estimator.h"

namespace tb {

struct FusedAttentionBytes {
    bool fused = false;              // false: eager attention, or SDPA's math fallback
    bool math = false;               // SDPA's math fallback (the CPU with dropout; a GPU neither kernel takes)
    bool mergeCopies = false;        // merging the heads of the output copies it (an output in q's layout, RoPE's contiguous q)
    std::int64_t out = 0;            // the output, saved (q's dtype)
    std::int64_t lse = 0;            // the log-sum-exp, fp32, saved
    std::int64_t forwardScratch = 0; // CPU: the kernel's blocks while it runs
    std::int64_t backwardTemps = 0;  // GPU: softmax_d and the dq accumulator (flash), delta and workspace (efficient) while backward runs
    std::int64_t backwardScratch = 0; // CPU: blocks, row sums and the bf16 products' scratch while backward runs
};

// The CPU flash kernel's own blocks while one call (backward: its backward)
// runs, for a query of [B, H, T, D] in `elementBytes` and `threads` threads
// (FlashAttentionKernel.cpp, LibTorch 2.6): what a recorded step's program
// sizes by this rule
// (StepProgram.h, RecordedStep::Event::rule), since the blocks follow no
// product of the widths (qSplit and kvSplit are capped by the length).
std::int64_t cpuFlashScratchBytes(bool backward, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                                  std::int64_t elementBytes, std::int64_t threads);

// A GPU's call for a query of [B, H, T, D] in `elementBytes`, on a card of
// compute capability cc (0: unknown, taken as one that runs both kernels):
// the kernel LibTorch 2.6 chooses and what it keeps (math: neither kernel).
// mergeCopies: the output takes q's layout (the flash kernel's). exactTemps
// false: the rounded T is left unrounded (a compiled step's polynomials).
FusedAttentionBytes gpuFusedAttentionBytes(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                                           std::int64_t elementBytes, int cc, bool fp16, bool dropout, bool exactTemps = true);

} // namespace tb
