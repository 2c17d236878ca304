#include "train/Threads.h"

#include <dlfcn.h>

#include <thread>

#include <ATen/Parallel.h>

namespace tb {

ThreadSetup threadSetupFor(int threads)
{
    if (threads > 0) return {threads, threads};
    // Measured with bench/train_throughput.sh on the 2-core development machine
    // (GPT d_model 128, 2 layers, seq 64, batch 32, OpenBLAS), one round: 1 OpenMP
    // thread with OpenBLAS on both cores ran 27.5k tokens/s; 1 + 1 ran 20.4k;
    // 2 + 2 ran 13.6k, because the two pools oversubscribe the cores.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return {1, cores};
}

void applyThreadCount(int threads)
{
    const auto setup = threadSetupFor(threads);
    at::set_num_threads(setup.intraOp);
    using SetThreads = void (*)(int);
    if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(setup.blas);
}

} // namespace tb
