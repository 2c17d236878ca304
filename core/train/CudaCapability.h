#pragma once

namespace tb {

struct ComputeCapability {
    int major = 0;
    int minor = 0;
    bool known() const { return major > 0; }
};

// Compute capability of CUDA device `index`, read through the driver API
// loaded at run time (libcuda.so.1); unknown where there is no driver.
ComputeCapability cudaComputeCapability(int index);

} // namespace tb
