#pragma once
// The scratch buffer a bf16 matrix product takes on the CPU. LibTorch hands
// bf16 products (mm, addmm, bmm, baddbmm) to oneDNN on CPUs with AVX-512,
// and oneDNN asks the caller for a scratchpad whose size follows its choice
// of blocking for that shape, layout and thread count on that CPU: no
// polynomial in the shapes, and not the same on two CPUs. LibTorch allocates
// it through the CPU allocator for as long as the product runs, so it counts
// in a step's peak. The size comes from oneDNN itself: the primitive
// descriptor LibTorch's ideep builds for the call (plain strided operands,
// an output of any layout, a sum post-op for addmm and baddbmm, a user
// scratchpad; output scales with oneDNN 2.x, as LibTorch 1.13's ideep sets
// them), asked for its scratchpad, without running anything. oneDNN 2.x
// (LibTorch 1.13) and 3.x (LibTorch 2.x). No LibTorch here.

#include <cstdint>
#include <string>

namespace tb {

// One product as LibTorch's kernel receives it: [batch x] [m x k] . [k x n].
struct GemmCall {
    std::int64_t batch = 0; // 0: a 2-D product (mm, addmm); else bmm's batch
    std::int64_t m = 0, k = 0, n = 0;
    bool srcTransposed = false;     // the left operand is the transpose of a contiguous tensor
    bool weightsTransposed = false; // the right one is
    bool accumulate = false;        // beta != 0 (addmm, baddbmm): oneDNN adds into the output
    bool operator==(const GemmCall&) const = default;
};

// Whether this CPU sends bf16 products to oneDNN (LibTorch's check: AVX-512
// BW, VL and DQ); elsewhere they take no scratch.
bool cpuBf16ProductsUseOneDnn();
// Whether the scratch is known: this CPU does not send bf16 products to
// oneDNN, or this build can ask oneDNN (the one LibTorch runs, headers there).
bool cpuGemmScratchKnown();
// Why not, in words, when it is not known; else empty.
std::string cpuGemmScratchUnknownReason();
// The scratch bytes of one bf16 product run with `threads` intra-op threads;
// 0 for a product LibTorch keeps from oneDNN (too small: m k n at most
// 16^3) or where it is not known. Cached; thread-safe.
std::int64_t cpuGemmScratchBytes(const GemmCall& call, int threads = 1);

// Whether LibTorch 2.x's CPU flash attention packs bf16 keys and values for
// oneDNN's brgemm (cpublas::could_pack): oneDNN's CPU ISA is AMX or newer.
// False where oneDNN cannot be asked (no AMX is then assumed).
bool cpuPacksBf16Attention();

} // namespace tb
