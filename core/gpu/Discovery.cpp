#include "gpu/Discovery.h"

namespace tb {

std::string cudaVersionText(int version)
{
    if (version <= 0) return "unknown";
    return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

GpuReport discoverGpus(const GpuDriver& driver, const TorchCudaInfo& torch)
{
    GpuReport r;
    r.torch = torch;
    if (!driver.loaded()) {
        const std::string error = driver.loadError();
        if (error == "no CUDA device") {
            r.state = GpuState::NoDevice;
            r.summary = "The NVIDIA driver is installed but sees no GPU.";
            r.fix = "Check that the GPU is attached to this machine or container (nvidia-smi; docker --gpus all); "
                    "meanwhile plan for a GPU from the catalogue.";
        } else {
            r.state = GpuState::NoDriverLibrary;
            r.summary = "No NVIDIA driver library on this machine (" + error + ").";
            r.fix = "Install the NVIDIA driver to train on a GPU here, or pick the GPU you will rent from the "
                    "catalogue to plan for it.";
        }
        return r;
    }
    r.cudaDriverVersion = driver.cudaDriverVersion();
    r.driverVersion = driver.driverVersion();
    r.devices = driver.devices();
    if (r.devices.empty()) {
        r.state = GpuState::NoDevice;
        r.summary = "The NVIDIA driver (CUDA " + cudaVersionText(r.cudaDriverVersion) + ") is loaded but reports no device.";
        r.fix = "Check nvidia-smi and that the container was started with the GPU; meanwhile plan with the catalogue.";
        return r;
    }
    if (!torch.builtWithCuda) {
        r.state = GpuState::TorchWithoutCuda;
        r.summary = "This LibTorch is built without CUDA (Debian's LibTorch 1.13 is CPU-only), so training runs on "
                    "the CPU although " + std::to_string(r.devices.size()) + " GPU(s) are present.";
        r.fix = "Build Trainbench against the LibTorch inside a CUDA PyTorch wheel: cmake "
                "-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)').";
        return r;
    }
    if (torch.cudaRuntimeVersion > 0 && r.cudaDriverVersion > 0 && r.cudaDriverVersion < torch.cudaRuntimeVersion) {
        r.state = GpuState::DriverTooOld;
        r.summary = "The NVIDIA driver supports CUDA " + cudaVersionText(r.cudaDriverVersion) + ", older than the CUDA "
            + cudaVersionText(torch.cudaRuntimeVersion) + " runtime LibTorch was built with.";
        r.fix = "Update the NVIDIA driver, or use a LibTorch built for CUDA " + cudaVersionText(r.cudaDriverVersion)
            + " or older.";
        return r;
    }
    if (!torch.available) {
        r.state = GpuState::NoDevice;
        r.summary = "LibTorch cannot use the GPU(s) the driver reports.";
        r.fix = "Check CUDA_VISIBLE_DEVICES and that nothing else holds the GPU exclusively.";
        return r;
    }
    r.state = GpuState::Usable;
    r.summary = std::to_string(r.devices.size()) + " usable GPU(s), driver " + r.driverVersion + " (CUDA "
        + cudaVersionText(r.cudaDriverVersion) + ").";
    return r;
}

} // namespace tb
