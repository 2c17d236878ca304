#include "train/Threads.h"

#include <dlfcn.h>

#include <ATen/Parallel.h>

namespace tb {

int defaultThreadCount()
{
    // Measured on the 2-core development machine with bench/train_threads.sh
    // (GPT d_model 128, 2 layers, seq 64, batch 32): see README, "Threads".
    return 1;
}

void applyThreadCount(int threads)
{
    if (threads <= 0) threads = defaultThreadCount();
    at::set_num_threads(threads);
    // Debian's LibTorch calls the system BLAS; OpenBLAS keeps its own pthread
    // pool that at::set_num_threads does not reach.
    using SetThreads = void (*)(int);
    if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(threads);
}

} // namespace tb
