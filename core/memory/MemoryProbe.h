#pragma once

#include <cstdint>
#include <string>

namespace tb {

struct MemorySnapshot {
    std::int64_t currentBytes = 0;
    std::int64_t peakBytes = 0;
};

// Measures the bytes held by tensors. On the CPU a counting allocator installed
// through c10::SetCPUAllocator gives exact figures; on CUDA the caching
// allocator's statistics (allocated bytes) do.
class MemoryProbe final {
public:
    // Installs the counting CPU allocator once per process (idempotent).
    // Tensors allocated before installation are not counted.
    static void installCpuCounter();
    static bool cpuCounterInstalled();

    // device: "cpu", "cuda" or "cuda:N".
    static MemorySnapshot snapshot(const std::string& device);
    static void resetPeak(const std::string& device);

    // Diagnostics (trainbench-cli measure --trace): called on every counted
    // CPU allocation (+bytes) and release (-bytes) with the bytes then live.
    // Not thread-safe to change while tensors are being allocated.
    using TraceFn = void (*)(std::int64_t delta, std::int64_t live, const void* payload);
    static void setCpuTrace(TraceFn fn);
    // The same for this thread's allocations and releases only (the derived
    // plan's probes, recorded on several threads at once).
    static void setThreadCpuTrace(TraceFn fn);
};

} // namespace tb
