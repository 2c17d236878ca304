// The counting allocator measures tensor bytes exactly on the CPU.
#include <QtTest>

#include <torch/torch.h>

#include "memory/MemoryProbe.h"

using namespace tb;

class TestMemoryProbe : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { MemoryProbe::installCpuCounter(); }
    void countsExactBytes();
    void peakIsResettable();
    void adamwStepHoldsFourCopiesOfTheParameters();
};

void TestMemoryProbe::countsExactBytes()
{
    const auto before = MemoryProbe::snapshot("cpu").currentBytes;
    {
        auto t = torch::empty({1000}, torch::kFloat);
        QCOMPARE(MemoryProbe::snapshot("cpu").currentBytes - before, std::int64_t(4000));
        auto d = torch::empty({10, 10}, torch::kDouble);
        QCOMPARE(MemoryProbe::snapshot("cpu").currentBytes - before, std::int64_t(4800));
    }
    QCOMPARE(MemoryProbe::snapshot("cpu").currentBytes, before);
}

void TestMemoryProbe::peakIsResettable()
{
    MemoryProbe::resetPeak("cpu");
    const auto base = MemoryProbe::snapshot("cpu");
    QCOMPARE(base.peakBytes, base.currentBytes);
    { auto big = torch::empty({1 << 20}, torch::kFloat); }
    const auto after = MemoryProbe::snapshot("cpu");
    QCOMPARE(after.peakBytes - base.currentBytes, std::int64_t(4 << 20));
    MemoryProbe::resetPeak("cpu");
    QCOMPARE(MemoryProbe::snapshot("cpu").peakBytes, after.currentBytes);
}

void TestMemoryProbe::adamwStepHoldsFourCopiesOfTheParameters()
{
    const auto before = MemoryProbe::snapshot("cpu").currentBytes;
    torch::nn::Linear layer(256, 128);
    std::int64_t paramBytes = 0;
    for (const auto& p : layer->parameters()) paramBytes += p.numel() * 4;
    torch::optim::AdamW optimizer(layer->parameters(), torch::optim::AdamWOptions(1e-3));
    {
        auto loss = layer(torch::randn({8, 256})).pow(2).sum();
        loss.backward();
    }
    optimizer.step();
    // parameters + gradients + exp_avg + exp_avg_sq, and nothing else left over
    QCOMPARE(MemoryProbe::snapshot("cpu").currentBytes - before, 4 * paramBytes);
}

QTEST_GUILESS_MAIN(TestMemoryProbe)
#include "tst_memory_probe.moc"
