#pragma once

namespace tb {

// The intra-op thread count used when train.threads is 0 (see Threads.cpp for
// the measurement behind it).
int defaultThreadCount();
// Sets LibTorch's intra-op threads and, where OpenBLAS is the system BLAS, its
// own pool, so the two do not oversubscribe the cores.
void applyThreadCount(int threads);

} // namespace tb
