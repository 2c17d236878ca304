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
        // Three cases, three messages: a driver that sees no GPU; no driver
        // at all (no library, or the library without its kernel module);
        // and, said with either, a CUDA build of LibTorch that will run on
        // the CPU here.
        const std::string cudaBuild = torch.builtWithCuda
            ? " This LibTorch is built with CUDA" + (torch.cudaRuntimeVersion > 0 ? " " + cudaVersionText(torch.cudaRuntimeVersion) : std::string())
                + ", but without a GPU it trains on the CPU here."
            : std::string();
        if (error == "no CUDA device") {
            r.state = GpuState::NoDevice;
            r.summary = "The NVIDIA driver is running but sees no GPU." + cudaBuild;
            r.fix = "Check that the GPU is attached to this machine or container (nvidia-smi; docker --gpus all); "
                    "meanwhile plan for a GPU from the catalogue.";
        } else if (error == "the NVIDIA kernel module is not loaded") {
            r.state = GpuState::NoDriverLibrary;
            r.summary = "No NVIDIA driver is running here: its library (libcuda.so.1) is installed, but "
                + error + "." + cudaBuild;
            r.fix = "On a machine with a GPU, install and load the NVIDIA driver (nvidia-smi should list the GPU); "
                    "in a container, start it with the GPU (docker --gpus all). Meanwhile plan for a GPU from the catalogue.";
        } else {
            r.state = GpuState::NoDriverLibrary;
            r.summary = "No NVIDIA driver on this machine (" + error + ")." + cudaBuild;
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
