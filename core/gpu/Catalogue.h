#pragma once
// Known GPUs for planning a run on hardware you do not have (resources/gpus.json,
// compiled in). Names match case-insensitively against names and aliases; a
// target may be N x one card ("2xT4").

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/Capability.h"

namespace tb {

struct CatalogueGpu {
    std::string id;   // "t4"
    std::string name; // "Tesla T4"
    std::vector<std::string> aliases;
    std::vector<std::string> defaultFor; // aliases this entry wins when several match
    ComputeCapability cc;
    std::int64_t memoryBytes = 0; // as PyTorch reports total memory
    double memoryGib = 0;
    double specMemoryGb = 0;      // the data-sheet figure
    double bandwidthGbs = 0;
    double fp32Tflops = 0;
    double fp16Tflops = 0; // dense tensor-core figure
    double bf16Tflops = 0; // 0: no native bf16
    std::string source;
};

struct GpuTarget {
    CatalogueGpu gpu;
    int count = 1;
    std::string note; // e.g. "\"A100\" matches several entries; chose A100 SXM 80GB (its default)"
    std::string label() const { return (count > 1 ? std::to_string(count) + " x " : std::string()) + gpu.name; }
};

class GpuCatalogue final {
public:
    // The bundled catalogue. Throws InputError if it is malformed (a build problem).
    static const GpuCatalogue& bundled();
    static GpuCatalogue fromJson(const std::string& json, const std::string& source);

    const std::vector<CatalogueGpu>& entries() const { return m_entries; }
    // "T4", "tesla t4", "2xT4", "a100-40gb", "A100 x 4". Throws InputError for an
    // unknown name, listing the closest names.
    GpuTarget resolve(const std::string& text) const;

private:
    std::vector<const CatalogueGpu*> matching(const std::string& name) const;
    std::vector<CatalogueGpu> m_entries;
};

std::string bundledGpuCatalogueJson();

} // namespace tb
