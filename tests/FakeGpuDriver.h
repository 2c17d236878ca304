#pragma once
// A GpuDriver with scripted answers, for discovery tests without a GPU.
#include "gpu/Discovery.h"

namespace tb {

class FakeGpuDriver final : public GpuDriver {
public:
    bool isLoaded = true;
    std::string error;
    int cudaVersion = 12040;
    std::string version = "550.54.15";
    std::vector<DeviceInfo> list;

    bool loaded() const override { return isLoaded; }
    std::string loadError() const override { return error; }
    int cudaDriverVersion() const override { return cudaVersion; }
    std::string driverVersion() const override { return version; }
    std::vector<DeviceInfo> devices() const override { return list; }
    std::optional<DeviceUsage> usage(int index) const override
    {
        for (const auto& d : list) {
            if (d.index == index) return d.usage;
        }
        return std::nullopt;
    }

    static DeviceInfo t4()
    {
        DeviceInfo d;
        d.name = "Tesla T4";
        d.cc = {7, 5};
        d.smCount = 40;
        d.totalBytes = 15827000000LL;
        d.usage = DeviceUsage{15000000000LL, 827000000LL, 41, 0, 27.5};
        return d;
    }
    static DeviceInfo a100()
    {
        DeviceInfo d;
        d.name = "NVIDIA A100-SXM4-80GB";
        d.cc = {8, 0};
        d.smCount = 108;
        d.totalBytes = 85051572224LL;
        d.usage = DeviceUsage{84000000000LL, 1051572224LL, 35, 3, 61.0};
        return d;
    }
};

inline TorchCudaInfo cudaTorch(int runtime = 12010) { return {true, true, 1, runtime}; }

} // namespace tb
