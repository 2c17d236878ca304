#pragma once

#include <string>

namespace tb {

struct ThreadSetup {
    int intraOp = 1; // LibTorch's OpenMP pool (elementwise ops, reductions)
    int blas = 1;    // the system BLAS's own pool (matrix products)
};

// train.threads = 0: the measured fastest setup for this machine (see
// Threads.cpp); N > 0: N threads for both pools.
ThreadSetup threadSetupFor(int threads);
// Applies it: LibTorch's intra-op threads and, where OpenBLAS is the system
// BLAS, its own pool, which at::set_num_threads does not reach. Selects the
// BLAS kernels first (selectBlasKernels).
void applyThreadCount(int threads);
// The pools' sizes now (blas 0: no OpenBLAS to ask).
ThreadSetup currentThreadSetup();
// Keeps the pools' sizes across a scope that trains with its own (the
// derived plan's traces, train/DerivedPlan.cpp, in a process that trains
// next): restored when it ends.
class KeepThreadCounts {
public:
    KeepThreadCounts();
    ~KeepThreadCounts();
    KeepThreadCounts(const KeepThreadCounts&) = delete;
    KeepThreadCounts& operator=(const KeepThreadCounts&) = delete;

private:
    ThreadSetup m_saved;
};

// The kernels OpenBLAS runs matrix products with, and what it had chosen
// itself where Trainbench chose others.
struct BlasKernels {
    std::string core;     // OpenBLAS's core ("Haswell", "SkylakeX", ...); empty when the BLAS is not OpenBLAS
    std::string replaced; // what OpenBLAS had picked, when it was replaced; else empty
    // "OpenBLAS kernels: SkylakeX (OpenBLAS picked Prescott for this CPU)", or "" when not OpenBLAS.
    std::string describe() const;
};
// OpenBLAS picks its kernels from the CPU's family and model, and falls back
// to Prescott (SSE3) for a model it does not know; Debian 12's 0.3.21 does
// not know Intel's Emerald Rapids (family 6, model 207), where the Prescott
// kernels made training several times slower (Threads.cpp has the figures).
// Where it fell back so and the CPU has AVX2 and FMA, this selects the
// kernels for what the CPU can do (AVX-512 with bf16: Cooperlake; AVX-512:
// SkylakeX; else Haswell) through OpenBLAS's own run-time selection, which
// reads OPENBLAS_CORETYPE: it sets the variable for that call and unsets it
// after. A user's OPENBLAS_CORETYPE is left as it is (and then this does
// nothing). Runs once per process, when the program loads (Threads.cpp);
// later calls return what was chosen.
BlasKernels selectBlasKernels();
// The choice itself, made anew on each call (tests make OpenBLAS's fallback
// on purpose and check it is replaced); programs call selectBlasKernels.
BlasKernels chooseBlasKernels();

} // namespace tb
