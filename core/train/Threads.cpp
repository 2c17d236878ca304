#include "train/Threads.h"

#include <dlfcn.h>

#include <cstdlib>
#include <strings.h>
#include <thread>
#include <vector>

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

namespace {

void applySetup(const ThreadSetup& setup)
{
    at::set_num_threads(setup.intraOp);
    using SetThreads = void (*)(int);
    if (setup.blas <= 0) return;
    if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(setup.blas);
}

} // namespace

void applyThreadCount(int threads)
{
    (void)selectBlasKernels();
    applySetup(threadSetupFor(threads));
}

ThreadSetup currentThreadSetup()
{
    ThreadSetup setup;
    setup.intraOp = at::get_num_threads();
    using GetThreads = int (*)();
    const auto fn = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    setup.blas = fn ? fn() : 0;
    return setup;
}

KeepThreadCounts::KeepThreadCounts() : m_saved(currentThreadSetup()) {}

KeepThreadCounts::~KeepThreadCounts() { applySetup(m_saved); }

namespace {

std::string openBlasCore()
{
    using CoreName = char* (*)();
    const auto fn = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    const char* name = fn ? fn() : nullptr;
    return name ? name : "";
}

// OpenBLAS's name for the kernels this CPU can run, best first.
std::vector<const char*> coresForThisCpu()
{
    __builtin_cpu_init();
    std::vector<const char*> cores;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")
        && __builtin_cpu_supports("avx512vl")) {
        if (__builtin_cpu_supports("avx512bf16")) cores.push_back("Cooperlake");
        cores.push_back("SkylakeX");
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) cores.push_back("Haswell");
    return cores;
}

} // namespace

std::string BlasKernels::describe() const
{
    if (core.empty()) return "";
    return "OpenBLAS kernels: " + core + (replaced.empty() ? "" : " (OpenBLAS picked " + replaced + " for this CPU)");
}

BlasKernels chooseBlasKernels()
{
    BlasKernels kernels;
    kernels.core = openBlasCore();
    // Measured on a 2-core Intel Xeon (Emerald Rapids, family 6 model
    // 207) under Debian 12's OpenBLAS 0.3.21, which fell back to Prescott
    // there: the 3-layer, d_model 128 Llama of the addition task at batch
    // 128 trained 60 steps (trainbench-cli train, start-up included) in
    // 11.8 s with Prescott's kernels and in 6.3-6.9 s with Cooperlake's;
    // sgemm took half the time of a Prescott run (perf).
    if (strcasecmp(kernels.core.c_str(), "Prescott") != 0 || std::getenv("OPENBLAS_CORETYPE")) return kernels;
    using Hook = void (*)();
    const auto quit = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
    const auto init = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
    if (!quit || !init) return kernels; // not a DYNAMIC_ARCH build: its kernels are fixed
    const auto cores = coresForThisCpu();
    if (cores.empty()) return kernels; // no AVX2: Prescott's kernels may be this CPU's best
    for (const char* core : cores) {
        // gotoblas_dynamic_init returns at once while a core is chosen;
        // quit unsets it, and init then reads OPENBLAS_CORETYPE.
        setenv("OPENBLAS_CORETYPE", core, 1);
        quit();
        init();
        unsetenv("OPENBLAS_CORETYPE");
        const auto now = openBlasCore();
        if (strcasecmp(now.c_str(), core) == 0) {
            kernels.replaced = kernels.core;
            kernels.core = now;
            return kernels;
        }
    }
    // None took: back to what OpenBLAS chose itself.
    quit();
    init();
    kernels.core = openBlasCore();
    return kernels;
}

BlasKernels selectBlasKernels()
{
    static const BlasKernels kernels = chooseBlasKernels();
    return kernels;
}

namespace {
// At load, as OpenBLAS chooses its own: before main() and any thread of the
// program's (OpenBLAS's idle workers aside), so that setting the variable
// OpenBLAS reads races with no one and no matrix product is running.
const bool g_blasKernelsSelected = (selectBlasKernels(), true);
} // namespace

} // namespace tb
