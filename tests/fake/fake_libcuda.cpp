// A stand-in for libcuda.so.1 with no devices, for tst_cuda_loading: the
// driver API entry points Trainbench resolves first, each answering
// "success, zero devices". FAKE_CUINIT_RC set: cuInit fails with that code
// (100, CUDA_ERROR_NO_DEVICE, is what a library without its kernel module
// or without a GPU answers).
#include <cstdlib>

extern "C" {
int cuInit(unsigned)
{
    const char* rc = std::getenv("FAKE_CUINIT_RC");
    return rc ? std::atoi(rc) : 0;
}
int cuDriverGetVersion(int* version)
{
    *version = 12040;
    return 0;
}
int cuDeviceGetCount(int* count)
{
    *count = 0;
    return 0;
}
}
