#include "train/CudaCapability.h"

#include <dlfcn.h>

namespace tb {

ComputeCapability cudaComputeCapability(int index)
{
    // CUDA driver API: cuInit(0), cuDeviceGet(&dev, i), cuDeviceGetAttribute(&v, attr, dev)
    // with CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75 and _MINOR = 76.
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!lib) return {};
    using Init = int (*)(unsigned);
    using DeviceGet = int (*)(int*, int);
    using GetAttribute = int (*)(int*, int, int);
    auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
    auto deviceGet = reinterpret_cast<DeviceGet>(dlsym(lib, "cuDeviceGet"));
    auto attribute = reinterpret_cast<GetAttribute>(dlsym(lib, "cuDeviceGetAttribute"));
    ComputeCapability cc;
    int device = 0;
    if (init && deviceGet && attribute && init(0) == 0 && deviceGet(&device, index) == 0) {
        if (attribute(&cc.major, 75, device) != 0 || attribute(&cc.minor, 76, device) != 0) cc = {};
    }
    dlclose(lib);
    return cc;
}

} // namespace tb
