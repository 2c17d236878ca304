#pragma once
// GPU discovery through the NVIDIA driver libraries loaded at run time
// (libcuda.so.1 and libnvidia-ml.so.1), so the program runs where neither
// exists. Sits behind GpuDriver so tests can inject fake drivers and devices.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/Capability.h"

namespace tb {

struct DeviceUsage {
    std::int64_t freeBytes = 0;
    std::int64_t usedBytes = 0;
    std::optional<int> temperatureC;
    std::optional<int> utilizationPercent;
    std::optional<double> powerWatts;
};

struct DeviceInfo {
    int index = 0; // CUDA ordinal
    std::string name;
    ComputeCapability cc;
    int smCount = 0;
    std::int64_t totalBytes = 0;
    std::optional<DeviceUsage> usage; // NVML, read without creating a CUDA context
};

class GpuDriver {
public:
    virtual ~GpuDriver() = default;
    // libcuda.so.1 loaded and cuInit succeeded.
    virtual bool loaded() const = 0;
    virtual std::string loadError() const = 0;
    virtual int cudaDriverVersion() const = 0; // e.g. 12040 for 12.4
    virtual std::string driverVersion() const = 0; // "550.54.15"; empty without NVML
    virtual std::vector<DeviceInfo> devices() const = 0;
    virtual std::optional<DeviceUsage> usage(int index) const = 0;
};

// The real driver, loaded with dlopen.
std::unique_ptr<GpuDriver> makeNvidiaDriver();

// What LibTorch here can use.
struct TorchCudaInfo {
    bool builtWithCuda = false;
    bool available = false;
    int deviceCount = 0;
    int cudaRuntimeVersion = 0; // e.g. 12010; 0 unknown
};

enum class GpuState { Usable, NoDriverLibrary, NoDevice, TorchWithoutCuda, DriverTooOld };

struct GpuReport {
    GpuState state = GpuState::NoDriverLibrary;
    std::string summary; // one sentence
    std::string fix;     // what to do
    int cudaDriverVersion = 0;
    std::string driverVersion;
    std::vector<DeviceInfo> devices;
    TorchCudaInfo torch;
};

GpuReport discoverGpus(const GpuDriver& driver, const TorchCudaInfo& torch);
// "12.4" from 12040.
std::string cudaVersionText(int version);

} // namespace tb
