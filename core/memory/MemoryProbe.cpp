#include "memory/MemoryProbe.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#ifdef TB_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace tb {
namespace {

std::atomic<std::int64_t> g_current{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<MemoryProbe::TraceFn> g_trace{nullptr};
thread_local MemoryProbe::TraceFn t_trace = nullptr;

// 64 bytes keep the payload aligned as LibTorch expects (it aligns to 64).
constexpr std::size_t kHeader = 64;

void countingDelete(void* ptr)
{
    if (!ptr) return;
    char* block = static_cast<char*>(ptr) - kHeader;
    const auto size = *reinterpret_cast<std::int64_t*>(block);
    const auto now = g_current.fetch_sub(size, std::memory_order_relaxed) - size;
    if (auto trace = g_trace.load(std::memory_order_relaxed)) trace(-size, now, ptr);
    if (auto trace = t_trace) trace(-size, now, ptr);
    std::free(block);
}

// LibTorch requires the DataPtr's context to equal its data pointer for raw
// allocations, so the size lives in a header in front of the payload.
// LibTorch 2.3 made Allocator::allocate non-const and added a pure copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define TB_ALLOCATE_CONST
#define TB_ALLOCATOR_COPY_DATA                                                                              \
    void copy_data(void* dest, const void* src, std::size_t count) const override                         \
    {                                                                                                       \
        default_copy_data(dest, src, count);                                                                \
    }
#else
#define TB_ALLOCATE_CONST const
#define TB_ALLOCATOR_COPY_DATA
#endif

class CountingCpuAllocator final : public c10::Allocator {
public:
    c10::DataPtr allocate(std::size_t bytes) TB_ALLOCATE_CONST override
    {
        void* block = nullptr;
        if (posix_memalign(&block, kHeader, bytes + kHeader) != 0 || !block) {
            throw std::bad_alloc();
        }
        *static_cast<std::int64_t*>(block) = static_cast<std::int64_t>(bytes);
        void* payload = static_cast<char*>(block) + kHeader;
        const auto now = g_current.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed)
            + static_cast<std::int64_t>(bytes);
        auto peak = g_peak.load(std::memory_order_relaxed);
        while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
        }
        if (auto trace = g_trace.load(std::memory_order_relaxed)) trace(static_cast<std::int64_t>(bytes), now, payload);
        if (auto trace = t_trace) trace(static_cast<std::int64_t>(bytes), now, payload);
        return {payload, payload, &countingDelete, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &countingDelete; }
    TB_ALLOCATOR_COPY_DATA
};

CountingCpuAllocator g_allocator;
std::once_flag g_installOnce;
std::atomic<bool> g_installed{false};

int cudaIndex(const std::string& device)
{
    const auto colon = device.find(':');
    return colon == std::string::npos ? 0 : std::atoi(device.c_str() + colon + 1);
}

} // namespace

void MemoryProbe::installCpuCounter()
{
    std::call_once(g_installOnce, [] {
        // Priority above LibTorch's default (0) so later registrations do not replace it.
        c10::SetCPUAllocator(&g_allocator, /*priority=*/10);
        g_installed = true;
    });
}

bool MemoryProbe::cpuCounterInstalled() { return g_installed; }

void MemoryProbe::setCpuTrace(TraceFn fn) { g_trace.store(fn); }

void MemoryProbe::setThreadCpuTrace(TraceFn fn) { t_trace = fn; }

MemorySnapshot MemoryProbe::snapshot(const std::string& device)
{
    if (device.rfind("cuda", 0) == 0) {
#ifdef TB_TORCH_CUDA
        const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(cudaIndex(device));
        // Index 0 is the aggregate over pool types in every LibTorch version we build against.
        const auto& aggregate = stats.allocated_bytes[0];
        return {aggregate.current, aggregate.peak};
#else
        (void)cudaIndex;
        return {};
#endif
    }
    return {g_current.load(std::memory_order_relaxed), g_peak.load(std::memory_order_relaxed)};
}

void MemoryProbe::resetPeak(const std::string& device)
{
    if (device.rfind("cuda", 0) == 0) {
#ifdef TB_TORCH_CUDA
        c10::cuda::CUDACachingAllocator::resetPeakStats(cudaIndex(device));
#endif
        return;
    }
    g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

} // namespace tb
