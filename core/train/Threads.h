#pragma once

namespace tb {

struct ThreadSetup {
    int intraOp = 1; // LibTorch's OpenMP pool (elementwise ops, reductions)
    int blas = 1;    // the system BLAS's own pool (matrix products)
};

// train.threads = 0: the measured fastest setup for this machine (see
// Threads.cpp); N > 0: N threads for both pools.
ThreadSetup threadSetupFor(int threads);
// Applies it: LibTorch's intra-op threads and, where OpenBLAS is the system
// BLAS, its own pool, which at::set_num_threads does not reach.
void applyThreadCount(int threads);

} // namespace tb
