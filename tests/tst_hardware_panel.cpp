// The Hardware panel shows what a GPU can do, with reasons, and picks the target GPU.
#include <QtTest>

#include <QLabel>
#include <QProgressBar>

#include "FakeGpuDriver.h"
#include "HardwarePanel.h"

using namespace tb;
using namespace tb::ui;

class TestHardwarePanel : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void fakeT4ShowsBf16NoWithReason();
    void liveMemoryBarFromNvml();
    void noGpuIsStatedPlainly();
    void targetSelectorTakesCatalogueNamesAndCounts();
};

void TestHardwarePanel::fakeT4ShowsBf16NoWithReason()
{
    auto driver = std::make_shared<FakeGpuDriver>();
    driver->list = {FakeGpuDriver::t4()};
    HardwarePanel panel(driver, cudaTorch());
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    QVERIFY2(panel.capabilityTexts().contains("bf16: no (compute capability 7.5 < 8.0)"),
             qPrintable(panel.capabilityTexts().join(" | ")));
    QVERIFY(panel.capabilityTexts().contains("fp16_tensor_cores: yes (compute capability 7.5 >= 7.0)"));
    // The detected T4 is the default target.
    QCOMPARE(panel.target().gpu.name, std::string("Tesla T4"));
    QCOMPARE(panel.target().gpu.cc.text(), std::string("7.5"));
}

void TestHardwarePanel::liveMemoryBarFromNvml()
{
    auto driver = std::make_shared<FakeGpuDriver>();
    driver->list = {FakeGpuDriver::a100()};
    HardwarePanel panel(driver, cudaTorch());
    const auto bars = panel.findChildren<QProgressBar*>();
    QVERIFY(!bars.isEmpty());
    QTRY_VERIFY(bars.first()->text().contains("used of"));
    const auto labels = panel.findChildren<QLabel*>();
    QTRY_VERIFY(std::any_of(labels.begin(), labels.end(), [](QLabel* l) { return l->text().contains("35 °C"); }));
}

void TestHardwarePanel::noGpuIsStatedPlainly()
{
    auto driver = std::make_shared<FakeGpuDriver>();
    driver->isLoaded = false;
    driver->error = "libcuda.so.1 not found";
    HardwarePanel panel(driver, TorchCudaInfo{});
    auto* state = panel.findChild<QLabel*>("gpuState");
    QVERIFY(state->text().contains("No NVIDIA driver on this machine (libcuda.so.1 not found)"));
    QVERIFY(state->text().contains("catalogue"));
    QCOMPARE(panel.target().gpu.id, std::string("t4")); // plan for the common free GPU by default
}

void TestHardwarePanel::targetSelectorTakesCatalogueNamesAndCounts()
{
    auto driver = std::make_shared<FakeGpuDriver>();
    driver->isLoaded = false;
    HardwarePanel panel(driver, TorchCudaInfo{});
    QSignalSpy changed(panel.targets(), &GpuTargetModel::changed);
    QVERIFY(panel.selectTarget("2xT4"));
    QCOMPARE(panel.target().count, 2);
    QVERIFY(!changed.isEmpty());
    QCOMPARE(panel.targets()->target().label(), std::string("2 x Tesla T4"));
    QVERIFY(panel.selectTarget("A100"));
    QCOMPARE(panel.target().gpu.id, std::string("a100-80gb"));
    QString error;
    QVERIFY(!panel.selectTarget("nonsense-gpu", &error));
    QVERIFY(error.contains("unknown GPU"));
}

QTEST_MAIN(TestHardwarePanel)
#include "tst_hardware_panel.moc"
