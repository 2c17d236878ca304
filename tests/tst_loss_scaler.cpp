// Dynamic loss scaling policy for fp16 (LibTorch C++ has no GradScaler).
#include <QtTest>

#include "train/LossScaler.h"

using namespace tb;

class TestLossScaler : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void scalesAndUnscales();
    void overflowSkipsAndBacksOff();
    void growsAfterCleanInterval();
    void refusesHalfPrecisionWeights();
};

void TestLossScaler::scalesAndUnscales()
{
    DynamicLossScaler scaler(1024.0);
    auto w = torch::ones({3}, torch::requires_grad());
    scaler.scale((w * 2).sum()).backward();
    QCOMPARE(w.grad()[0].item<float>(), 2048.0f);
    QVERIFY(scaler.unscale({w}));
    QVERIFY(torch::allclose(w.grad(), torch::full({3}, 2.0)));
}

void TestLossScaler::overflowSkipsAndBacksOff()
{
    DynamicLossScaler scaler(65536.0);
    auto w = torch::ones({2}, torch::requires_grad());
    w.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity()});
    QVERIFY(!scaler.unscale({w}));
    scaler.update(false);
    QCOMPARE(scaler.currentScale(), 32768.0);
    w.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::quiet_NaN()});
    QVERIFY(!scaler.unscale({w}));
}

void TestLossScaler::growsAfterCleanInterval()
{
    DynamicLossScaler scaler(8.0, 2.0, 0.5, 3);
    scaler.update(true);
    scaler.update(true);
    QCOMPARE(scaler.currentScale(), 8.0);
    scaler.update(true);
    QCOMPARE(scaler.currentScale(), 16.0);
    scaler.update(false);
    QCOMPARE(scaler.currentScale(), 8.0);
    QCOMPARE(scaler.goodSteps(), 0);
}

void TestLossScaler::refusesHalfPrecisionWeights()
{
    DynamicLossScaler scaler;
    auto w = torch::ones({2}, torch::TensorOptions().dtype(torch::kBFloat16).requires_grad(true));
    w.mutable_grad() = torch::ones({2}, torch::kBFloat16);
    QVERIFY_EXCEPTION_THROWN(scaler.unscale({w}), c10::Error);
}

QTEST_GUILESS_MAIN(TestLossScaler)
#include "tst_loss_scaler.moc"
