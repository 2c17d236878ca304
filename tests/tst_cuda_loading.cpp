// libcuda stays loaded after cuInit: the driver cannot be de-initialised, so
// unloading it (and loading it again for the next query) is undefined
// behaviour. Runs against a fake libcuda.so.1 (tests/fake) found through
// LD_LIBRARY_PATH, so it needs no GPU.
#include <QtTest>

#include <dlfcn.h>

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
};

QTEST_GUILESS_MAIN(TestCudaLoading)
#include "tst_cuda_loading.moc"
