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
        // Causal: the block of queries at m meets keys up to m + its rows.
        for (std::int64_t m = 0; m < T; m += qSplit) {
            const auto qb = std::min(qSplit, T - m);
            const auto keys = std::min(m + qb, T);
            ask(qb, std::min(kvSplit, keys));
            if (keys > kvSplit) ask(qb, (keys - 1) % kvSplit + 1);
        }
    }
    f.backwardScratch = threads * 2 * qSplit * kvSplit * (4 + (reduced ? e : 0)) + threads * qSplit * 4
                        + threads * products;
}

} // namespace

FusedAttentionBytes fusedAttentionBytes(const ArchitectureSpec& a, const TrainingSetup& s, std::int64_t e,
                                        bool exactTemps)
{
    FusedAttentionBytes f;
    if (s.attention != "fused") return f;
    if (!s.gpu && s.dropout > 0.0) {
        f.math = true;
        return f;
    }
    f.fused = true;
    const std::int64_t B = s.batch, H = a.heads, T = s.seqLen, D = a.headDim();
    f.out = B * T * H * D * e;
    if (!s.gpu) {
        // The output takes q's layout: a head-split view of a projection
        // gives [B, T, H, D], which merges as a view; RoPE's rotated q is a
        // contiguous [B, H, T, D], whose merge copies.
        // (One head, or one position: the transpose moves no data, a view.)
        f.mergeCopies = (a.family == "llama" || a.positional == "rope") && H > 1 && T > 1;
        f.lse = B * H * T * 4;
        cpuFlash(f, B, H, T, D, e, std::max(1, s.cpuThreads));
        return f;
    }
    const int cc = s.computeCapability;
    const bool sm8x = cc == 86 || cc == 89;
    const bool flash = e == 2 && (cc == 0 || (cc >= 80 && cc <= 90)) && D <= 256 && !(sm8x && D > 192 && D <= 224);
    const std::int64_t rows = exactTemps ? roundUp(T, flash ? 128 : 32) : T;
    if (flash) {
        f.lse = B * H * T * 4;
        f.backwardTemps = B * H * rows * 4 + B * rows * H * roundUp(roundUp(D, 8), 32) * 4;
    } else {
        f.lse = B * H * rows * 4;
        f.backwardTemps = B * H * rows * 4; // delta
    }
    return f;
}

} // namespace tb
