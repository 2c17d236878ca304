// The NVIDIA driver API and NVML, loaded at run time. Signatures follow
// cuda.h and nvml.h; return code 0 is success in both.
#include <dlfcn.h>

#include <filesystem>

#include <cstring>

#include "gpu/Discovery.h"

namespace tb {
namespace {

using CuInit = int (*)(unsigned);
using CuDriverGetVersion = int (*)(int*);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuDeviceTotalMem = int (*)(std::size_t*, int);
using CuDeviceGetAttribute = int (*)(int*, int, int);
using CuDeviceGetPCIBusId = int (*)(char*, int, int);

using NvmlInit = int (*)();
using NvmlShutdown = int (*)();
using NvmlDeviceGetHandleByPciBusId = int (*)(const char*, void**);
struct NvmlMemory {
    unsigned long long total, free, used;
};
using NvmlDeviceGetMemoryInfo = int (*)(void*, NvmlMemory*);
using NvmlDeviceGetTemperature = int (*)(void*, int, unsigned*);
struct NvmlUtilization {
    unsigned gpu, memory;
};
using NvmlDeviceGetUtilizationRates = int (*)(void*, NvmlUtilization*);
using NvmlDeviceGetPowerUsage = int (*)(void*, unsigned*);
using NvmlSystemGetDriverVersion = int (*)(char*, unsigned);

// CUdevice_attribute values from cuda.h.
constexpr int kAttrSmCount = 16, kAttrCcMajor = 75, kAttrCcMinor = 76;

template <typename T>
T symbol(void* lib, const char* name)
{
    return lib ? reinterpret_cast<T>(dlsym(lib, name)) : nullptr;
}

class NvidiaDriver final : public GpuDriver {
public:
    NvidiaDriver()
    {
        m_cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (!m_cuda) {
            m_error = "libcuda.so.1 not found";
            return;
        }
        auto init = symbol<CuInit>(m_cuda, "cuInit");
        // Once cuInit has run, the driver cannot be de-initialised: the
        // library stays loaded for the life of the process (never dlclose'd).
        m_cudaInitialised = init != nullptr;
        const int rc = init ? init(0) : -1;
        if (rc != 0) {
            // The user-space library without the kernel module (a container
            // or chroot with libcuda1 installed, no driver running): cuInit
            // fails as it does without a GPU (CUDA_ERROR_NO_DEVICE, 100).
            if (!std::filesystem::exists("/proc/driver/nvidia/version")) {
                m_error = "the NVIDIA kernel module is not loaded";
            } else {
                m_error = rc == 100 ? "no CUDA device" : "cuInit failed with CUDA error " + std::to_string(rc);
            }
            return;
        }
        m_loaded = true;
        if (auto version = symbol<CuDriverGetVersion>(m_cuda, "cuDriverGetVersion")) version(&m_cudaVersion);
        m_nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
        auto nvmlInit = symbol<NvmlInit>(m_nvml, "nvmlInit_v2");
        m_nvmlReady = nvmlInit && nvmlInit() == 0;
        if (m_nvmlReady) {
            char text[96] = {};
            if (auto v = symbol<NvmlSystemGetDriverVersion>(m_nvml, "nvmlSystemGetDriverVersion"); v && v(text, sizeof text) == 0) {
                m_driverVersion = text;
            }
        }
    }
    ~NvidiaDriver() override
    {
        if (m_nvmlReady) {
            if (auto shutdown = symbol<NvmlShutdown>(m_nvml, "nvmlShutdown")) shutdown();
        }
        if (m_nvml) dlclose(m_nvml);
        if (m_cuda && !m_cudaInitialised) dlclose(m_cuda);
    }

    bool loaded() const override { return m_loaded; }
    std::string loadError() const override { return m_error; }
    int cudaDriverVersion() const override { return m_cudaVersion; }
    std::string driverVersion() const override { return m_driverVersion; }

    std::vector<DeviceInfo> devices() const override
    {
        std::vector<DeviceInfo> out;
        if (!m_loaded) return out;
        auto count = symbol<CuDeviceGetCount>(m_cuda, "cuDeviceGetCount");
        auto get = symbol<CuDeviceGet>(m_cuda, "cuDeviceGet");
        auto name = symbol<CuDeviceGetName>(m_cuda, "cuDeviceGetName");
        auto mem = symbol<CuDeviceTotalMem>(m_cuda, "cuDeviceTotalMem_v2");
        auto attr = symbol<CuDeviceGetAttribute>(m_cuda, "cuDeviceGetAttribute");
        int n = 0;
        if (!count || !get || count(&n) != 0) return out;
        for (int i = 0; i < n; ++i) {
            int dev = 0;
            if (get(&dev, i) != 0) continue;
            DeviceInfo d;
            d.index = i;
            char text[256] = {};
            if (name && name(text, sizeof text, dev) == 0) d.name = text;
            std::size_t total = 0;
            if (mem && mem(&total, dev) == 0) d.totalBytes = static_cast<std::int64_t>(total);
            if (attr) {
                attr(&d.cc.major, kAttrCcMajor, dev);
                attr(&d.cc.minor, kAttrCcMinor, dev);
                attr(&d.smCount, kAttrSmCount, dev);
            }
            d.usage = usage(i);
            out.push_back(d);
        }
        return out;
    }

    std::optional<DeviceUsage> usage(int index) const override
    {
        if (!m_nvmlReady) return std::nullopt;
        // NVML orders devices by PCI bus, CUDA by speed: match them by bus id.
        auto get = symbol<CuDeviceGet>(m_cuda, "cuDeviceGet");
        auto busId = symbol<CuDeviceGetPCIBusId>(m_cuda, "cuDeviceGetPCIBusId");
        auto byBus = symbol<NvmlDeviceGetHandleByPciBusId>(m_nvml, "nvmlDeviceGetHandleByPciBusId_v2");
        auto memory = symbol<NvmlDeviceGetMemoryInfo>(m_nvml, "nvmlDeviceGetMemoryInfo");
        int dev = 0;
        char bus[64] = {};
        void* handle = nullptr;
        NvmlMemory m{};
        if (!get || !busId || !byBus || !memory || get(&dev, index) != 0 || busId(bus, sizeof bus, dev) != 0
            || byBus(bus, &handle) != 0 || memory(handle, &m) != 0) {
            return std::nullopt;
        }
        DeviceUsage u;
        u.freeBytes = static_cast<std::int64_t>(m.free);
        u.usedBytes = static_cast<std::int64_t>(m.used);
        unsigned value = 0;
        if (auto temp = symbol<NvmlDeviceGetTemperature>(m_nvml, "nvmlDeviceGetTemperature"); temp && temp(handle, 0, &value) == 0) {
            u.temperatureC = static_cast<int>(value);
        }
        NvmlUtilization util{};
        if (auto rates = symbol<NvmlDeviceGetUtilizationRates>(m_nvml, "nvmlDeviceGetUtilizationRates");
            rates && rates(handle, &util) == 0) {
            u.utilizationPercent = static_cast<int>(util.gpu);
        }
        if (auto power = symbol<NvmlDeviceGetPowerUsage>(m_nvml, "nvmlDeviceGetPowerUsage"); power && power(handle, &value) == 0) {
            u.powerWatts = value / 1000.0;
        }
        return u;
    }

private:
    void* m_cuda = nullptr;
    void* m_nvml = nullptr;
    bool m_loaded = false;
    bool m_cudaInitialised = false;
    bool m_nvmlReady = false;
    int m_cudaVersion = 0;
    std::string m_driverVersion;
    std::string m_error;
};

} // namespace

std::unique_ptr<GpuDriver> makeNvidiaDriver() { return std::make_unique<NvidiaDriver>(); }

} // namespace tb
