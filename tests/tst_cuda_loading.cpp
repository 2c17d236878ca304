// libcuda stays loaded after cuInit: the driver cannot be de-initialised, so
// unloading it (and loading it again for the next query) is undefined
// behaviour. Runs against a fake libcuda.so.1 (tests/fake) found through
// LD_LIBRARY_PATH, so it needs no GPU.
#include <QtTest>

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include "gpu/Discovery.h"

using namespace tb;

class TestCudaLoading : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void driverStaysLoadedAfterCuInit()
    {
        {
            const auto driver = makeNvidiaDriver();
            QVERIFY2(driver->loaded(), driver->loadError().c_str());
            QCOMPARE(driver->cudaDriverVersion(), 12040);
        }
        // Destroyed: the library must still be mapped.
        void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        QVERIFY2(handle != nullptr, "libcuda.so.1 was unloaded when the driver object was destroyed");
        dlclose(handle);
        // And a second driver object works as the first did.
        QVERIFY(makeNvidiaDriver()->loaded());
    }

    // The driver's library without its kernel module (a chroot or container
    // with libcuda1 installed) is no driver, not a driver that sees no GPU:
    // cuInit answers 100 in both, and the kernel module's /proc entry tells.
    void libraryWithoutKernelModuleIsNoDriver()
    {
        setenv("FAKE_CUINIT_RC", "100", 1);
        const auto driver = makeNvidiaDriver();
        unsetenv("FAKE_CUINIT_RC");
        QVERIFY(!driver->loaded());
        const bool module = std::filesystem::exists("/proc/driver/nvidia/version");
        QCOMPARE(driver->loadError(), std::string(module ? "no CUDA device" : "the NVIDIA kernel module is not loaded"));
        const auto report = discoverGpus(*driver, TorchCudaInfo{true, false, 0, 12040});
        QVERIFY2(QString::fromStdString(report.summary).contains(module ? "sees no GPU" : "kernel module is not loaded"),
                 report.summary.c_str());
        QVERIFY2(QString::fromStdString(report.summary).contains("built with CUDA 12.4"), report.summary.c_str());
    }
};

QTEST_GUILESS_MAIN(TestCudaLoading)
#include "tst_cuda_loading.moc"
