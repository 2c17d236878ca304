#include "memory/FusedAttention.h"

#include <algorithm>

#include "memory/CpuGemmScratch.h"

namespace tb {
namespace {

std::int64_t roundUp(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }

// The CPU flash kernel (FlashAttentionKernel.cpp, LibTorch 2.6).
void cpuFlash(FusedAttentionBytes& f, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
              std::int64_t e, std::int64_t threads)
{
    const bool reduced = e == 2;
    const std::int64_t qSplit = std::min<std::int64_t>(T >= 768 ? 256 : T >= 192 ? 64 : 32, T);
    const std::int64_t kvSplit = std::min<std::int64_t>(512, T);
    const std::int64_t qSlices = (T + qSplit - 1) / qSplit;
    const std::int64_t kvTail = (T - 1) % kvSplit + 1;
    // bf16 keys and values are packed for brgemm when oneDNN has AMX, the
    // lengths are 64 or more and the products outweigh the packing 4 to 1.
    bool pack = reduced && cpuPacksBf16Attention() && T >= 64;
    if (pack) {
        const double packed = static_cast<double>(B * H * T * D);
        const double perThread = static_cast<double>((B * H * qSlices + threads - 1) / threads);
        pack = perThread * static_cast<double>(qSplit * T * D) / packed >= 4;
    }
    const std::int64_t eD = pack && D % 2 != 0 ? D + 1 : D;
    const std::int64_t ekvSplit = pack && kvSplit % 2 != 0 ? kvSplit + 1 : kvSplit;
    const std::int64_t ekvTail = pack && kvTail % 2 != 0 ? kvTail + 1 : kvTail;
    const std::int64_t kvPadded = (T - 1) / kvSplit * ekvSplit + ekvTail;
    // Forward: scores, row max and sum, and the output block per thread
    // (fp32), their reduced copy, the packed keys and values, a padded q for
    // an odd head dim, and (freed before the main loop) a transposed block.
    f.forwardScratch = threads * (qSplit * kvSplit + 2 * qSplit + qSplit * D) * 4
                       + (reduced ? threads * qSplit * ekvSplit * e : 0)
                       + (pack ? B * H * (eD * T + kvPadded * D) * e : 0)
                       + (pack && D % 2 != 0 ? threads * qSplit * eD * e : 0)
                       + (pack ? threads * kvSplit * D * e : 0);
    // Backward: scores and their gradient per thread (fp32, and reduced), a
    // row sum per thread; in bf16 the updates of the q, k and v gradients are
    // oneDNN products (mkldnn_gemm, adding into the gradient; those of q and
    // k scaled, with a 4-byte scale beside them), each thread running its own.
    std::int64_t products = 0;
    if (reduced) {
        const auto ask = [&](std::int64_t qb, std::int64_t kvb) {
            // grad_v += attn^T grad_out and grad_k += grad_attn^T q: [kvb x qb] [qb x D];
            // grad_q += grad_attn k: [qb x kvb] [kvb x D].
            const auto kv = cpuGemmScratchBytes({0, kvb, qb, D, true, false, true}, 1);
            const auto q = cpuGemmScratchBytes({0, qb, kvb, D, false, false, true}, 1);
            const auto most = std::max(kv, q);
            products = std::max(products, most > 0 ? most + 4 : 0);
        };
        // Causal: the block of queries at m meets the key blocks that start
        // before m + its rows, each kvSplit long or what is left of the
        // sequence (not of those keys: kvBlockSize = min(kvSplit, T - n)).
        for (std::int64_t m = 0; m < T; m += qSplit) {
            const auto qb = std::min(qSplit, T - m);
            const auto keys = std::min(m + qb, T);
            for (std::int64_t n = 0; n < keys; n += kvSplit) ask(qb, std::min(kvSplit, T - n));
        }
    }
    f.backwardScratch = threads * 2 * qSplit * kvSplit * (4 + (reduced ? e : 0)) + threads * qSplit * 4
                        + threads * products;
}

} // namespace

std::int64_t cpuFlashScratchBytes(bool backward, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                                  std::int64_t elementBytes, std::int64_t threads)
{
    FusedAttentionBytes f;
    cpuFlash(f, B, H, T, D, elementBytes, threads);
    return backward ? f.backwardScratch : f.forwardScratch;
}

FusedAttentionBytes gpuFusedAttentionBytes(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D, std::int64_t e,
                                           int cc, bool fp16, bool dropout, bool exactTemps)
{
    FusedAttentionBytes f;
    // LibTorch 2.6's choice on CUDA (sdp_utils.cpp): flash on sm80 to sm90 in
    // fp16/bf16 with a head dim up to 256 (on sm86 to sm89 not (192, 224],
    // nor over 224 with dropout, when training); else the memory-efficient
    // kernel on sm50 to sm90 (fp16 and fp32, bf16 from sm80; the head dim a
    // multiple of 8 in half precision, 4 in fp32); else the math fallback.
    // An unknown card (0) is taken as one that runs them.
    const bool known = cc > 0, half = e == 2, bf16 = half && !fp16;
    const bool sm86to89 = cc >= 86 && cc <= 89;
    const bool flash = half && (!known || (cc >= 80 && cc <= 90)) && D <= 256
                       && !(sm86to89 && ((D > 192 && D <= 224) || (D > 224 && dropout)));
    const bool efficient = !flash && (!known || (cc >= 50 && cc <= 90)) && (!bf16 || !known || cc >= 80)
                           && D % (half ? 8 : 4) == 0;
    if (!flash && !efficient) {
        f.math = true;
        return f;
    }
    f.fused = true;
    f.out = B * T * H * D * e;
    if (flash) {
        // mha_fwd's output is empty_like(q transposed): q's layout, as on the
        // CPU (the caller says whether merging the heads then copies).
        f.mergeCopies = true;
        f.lse = B * H * T * 4;
        const std::int64_t rows = exactTemps ? roundUp(T, 128) : T;
        f.backwardTemps = B * H * rows * 4 + B * rows * H * roundUp(roundUp(D, 8), 32) * 4; // softmax_d, dq accumulator
    } else {
        // [B, T, H, D] allocated as such; the log-sum-exp's T rounded up to
        // 32; backward's delta and its workspace, about an fp32 copy of q
        // (grad-q accumulators, kernel_backward.h: blocks of 64 queries).
        const std::int64_t rows = exactTemps ? roundUp(T, 32) : T;
        f.lse = B * H * rows * 4;
        f.backwardTemps = B * H * rows * 4 + B * H * (exactTemps ? roundUp(T, 64) : T) * roundUp(D, 32) * 4;
    }
    return f;
}

} // namespace tb
