#include "memory/CpuGemmScratch.h"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <tuple>

#if defined(TB_HAVE_ONEDNN)
#include <dnnl.hpp>
#endif

namespace tb {
namespace {

// LibTorch's mkldnn_bf16_device_check: oneDNN takes bf16 products on CPUs
// with AVX-512 BW, VL and DQ.
bool cpuSendsBf16ToOneDnn()
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")
        && __builtin_cpu_supports("avx512dq");
}

#if defined(TB_HAVE_ONEDNN) && (DNNL_VERSION_MAJOR == 2 || DNNL_VERSION_MAJOR == 3)
// The library LibTorch runs must be the one whose headers this was built
// with: the descriptor's choices are that library's.
bool sameOneDnn()
{
    const auto* v = dnnl_version();
    return v && v->major == DNNL_VERSION_MAJOR && v->minor == DNNL_VERSION_MINOR;
}
#endif

// oneDNN sizes per-thread buffers by the OpenMP threads of the calling thread.
struct ThreadsFor {
    using Get = int (*)();
    using Set = void (*)(int);
    Get get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    Set set = reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    int before = 0;
    explicit ThreadsFor(int threads)
    {
        if (!get || !set) return;
        before = get();
        if (before != threads) set(threads);
    }
    ~ThreadsFor()
    {
        if (get && set && get() != before) set(before);
    }
};

using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int>;
std::mutex g_mutex;
std::map<Key, std::int64_t> g_cache;

std::int64_t ask(const GemmCall& c, int threads)
{
#if defined(TB_HAVE_ONEDNN) && (DNNL_VERSION_MAJOR == 2 || DNNL_VERSION_MAJOR == 3)
    using namespace dnnl;
    try {
    static engine cpu(engine::kind::cpu, 0);
    const bool batched = c.batch > 0;
    // Operands as LibTorch's tensors are: contiguous, or the transpose of a
    // contiguous tensor (LibTorch copies any other layout first).
    const auto strided = [&](std::int64_t rows, std::int64_t cols, bool transposed) {
        memory::dims dims = batched ? memory::dims{c.batch, rows, cols} : memory::dims{rows, cols};
        memory::dims strides = transposed ? memory::dims{1, rows} : memory::dims{cols, 1};
        if (batched) strides.insert(strides.begin(), rows * cols);
        return memory::desc(dims, memory::data_type::bf16, strides);
    };
    const auto src = strided(c.m, c.k, c.srcTransposed);
    const auto weights = strided(c.k, c.n, c.weightsTransposed);
    const memory::dims dstDims = batched ? memory::dims{c.batch, c.m, c.n} : memory::dims{c.m, c.n};
    const memory::desc dst(dstDims, memory::data_type::bf16, memory::format_tag::any);
    primitive_attr attr;
    if (c.accumulate) {
        post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
    }
    attr.set_scratchpad_mode(scratchpad_mode::user);
    {
        ThreadsFor scope(threads);
#if DNNL_VERSION_MAJOR == 2
        // LibTorch 1.13's ideep sets output scales (alpha) on every product.
        attr.set_output_scales(0, {1.0f});
        const matmul::primitive_desc pd(matmul::desc(src, weights, dst), attr, cpu);
#else
        // oneDNN 3 (LibTorch 2.x): no output scales; alpha 1 needs none.
        const matmul::primitive_desc pd(cpu, src, weights, dst, attr);
#endif
        return static_cast<std::int64_t>(pd.scratchpad_desc().get_size());
    }
    } catch (const dnnl::error&) {
        return 0; // a shape oneDNN declines: LibTorch would not run it there either
    }
#else
    (void)c;
    (void)threads;
    return 0;
#endif
}

} // namespace

bool cpuBf16ProductsUseOneDnn() { return cpuSendsBf16ToOneDnn(); }

bool cpuPacksBf16Attention()
{
#if defined(TB_HAVE_ONEDNN) && DNNL_VERSION_MAJOR == 3
    if (!cpuGemmScratchKnown()) return false;
    static const bool packs = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_amx;
    return packs;
#else
    return false;
#endif
}

bool cpuGemmScratchKnown() { return cpuGemmScratchUnknownReason().empty(); }

std::string cpuGemmScratchUnknownReason()
{
#if defined(TB_HAVE_ONEDNN) && (DNNL_VERSION_MAJOR == 2 || DNNL_VERSION_MAJOR == 3)
    static const std::string reason = !cpuSendsBf16ToOneDnn()
        ? std::string() // LibTorch keeps bf16 products from oneDNN here: no scratch to know
        : !sameOneDnn() ? "the oneDNN LibTorch runs is not the one this build was made with" : "";
    return reason;
#elif defined(TB_HAVE_ONEDNN)
    return cpuSendsBf16ToOneDnn() ? "this build's oneDNN is neither 2.x nor 3.x" : "";
#else
    return cpuSendsBf16ToOneDnn() ? "this build has no oneDNN headers" : "";
#endif
}

std::int64_t cpuGemmScratchBytes(const GemmCall& c, int threads)
{
    // LibTorch keeps small products from oneDNN: m k n (times the batch) at
    // most 16^3, and batched ones under 400 multiply-adds a matrix.
    if (!cpuSendsBf16ToOneDnn() || !cpuGemmScratchKnown()) return 0;
    if (c.m <= 0 || c.k <= 0 || c.n <= 0) return 0;
    const auto batch = c.batch > 0 ? c.batch : 1;
    const auto products = static_cast<__int128>(batch) * c.m * c.k * c.n; // (no overflow at any shape)
    if (products <= 16 * 16 * 16) return 0;
    if (c.batch > 0 && static_cast<__int128>(c.m) * c.k * c.n < 400) return 0;
    const Key key{c.batch, c.m, c.k, c.n, (c.srcTransposed ? 1 : 0) | (c.weightsTransposed ? 2 : 0) | (c.accumulate ? 4 : 0),
                  threads};
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = g_cache.find(key); it != g_cache.end()) return it->second;
    return g_cache[key] = ask(c, threads);
}

} // namespace tb
