// A stand-in for libcuda.so.1 with no devices, for tst_cuda_loading: the
// driver API entry points Trainbench resolves first, each answering
// "success, zero devices".
extern "C" {
int cuInit(unsigned) { return 0; }
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
