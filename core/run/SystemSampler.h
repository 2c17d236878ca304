#pragma once
// A run's system metrics over time: this process's CPU use and resident
// memory, and on a GPU the device's utilisation, memory in use and power
// (NVML, where the driver reports them), sampled every few seconds as steps
// end and stored with the run's metrics (the keys below), so History
// overlays them and the Run tab plots them. No LibTorch here.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tb {

class GpuDriver;

class SystemSampler {
public:
    // cudaIndex < 0: the CPU only. The driver is made on the first GPU sample.
    explicit SystemSampler(int cudaIndex = -1, std::chrono::milliseconds every = std::chrono::seconds(2));
    ~SystemSampler();
    // The samples due now (empty until `every` has passed since the last;
    // the first call samples at once, the CPU's use then measured from the
    // sampler's creation).
    std::vector<std::pair<std::string, double>> sampleIfDue();

    // The stored keys.
    static constexpr const char* kCpuPercent = "sys_cpu_percent";      // CPU time of this process / wall time, % of one core
    static constexpr const char* kHostRssBytes = "sys_host_rss_bytes"; // this process's resident memory
    static constexpr const char* kGpuUtilPercent = "sys_gpu_util_percent";
    static constexpr const char* kGpuMemBytes = "sys_gpu_mem_bytes";   // in use on the device, every process's (nvidia-smi's figure)
    static constexpr const char* kGpuPowerWatts = "sys_gpu_power_w";

private:
    int m_cudaIndex;
    std::chrono::milliseconds m_every;
    std::chrono::steady_clock::time_point m_last;
    double m_lastCpuSeconds = 0;
    bool m_sampled = false;
    std::unique_ptr<GpuDriver> m_driver;
};

} // namespace tb
