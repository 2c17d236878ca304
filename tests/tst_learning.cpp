// The models actually learn: the default example and the addition task.
#include <QtTest>

#include "TestPrinters.h"

#include "config/RunConfig.h"
#include "train/Trainer.h"

using namespace tb;

namespace {

struct Curve {
    std::vector<EvalMetrics> evals;
    TrainResult result;
};

Curve train(const RunConfig& config)
{
    Curve curve;
    Trainer trainer(config, {});
    TrainerCallbacks callbacks;
    callbacks.onEval = [&](const EvalMetrics& e) {
        curve.evals.push_back(e);
        qInfo("step %d: val loss %.4f, exact match %.1f%%", e.step, e.valLoss, 100.0 * e.valAccuracy);
    };
    curve.result = trainer.run(callbacks);
    return curve;
}

} // namespace

class TestLearning : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void defaultExampleHalvesValidationLoss();
    void additionReachesNinetyPercentOnHeldOutSums();
};

void TestLearning::defaultExampleHalvesValidationLoss()
{
    RunConfig config = loadConfigFile(TB_SOURCE_DIR "/resources/examples/default.json");
    config.device = "cpu";
    const auto curve = train(config);
    QCOMPARE(curve.result.status, TrainResult::Status::Finished);
    QVERIFY(curve.evals.size() >= 2);
    QCOMPARE(curve.evals.front().step, 0);
    const double first = curve.evals.front().valLoss, last = curve.evals.back().valLoss;
    QVERIFY2(last <= 0.5 * first, qPrintable(QString("validation loss %1 -> %2").arg(first).arg(last)));
}

void TestLearning::additionReachesNinetyPercentOnHeldOutSums()
{
    RunConfig config = loadConfigFile(TB_SOURCE_DIR "/resources/examples/addition.json");
    config.device = "cpu";
    const auto curve = train(config);
    QCOMPARE(curve.result.status, TrainResult::Status::Finished);
    QVERIFY2(curve.result.finalValAccuracy >= 0.9,
             qPrintable(QString("exact match on held-out sums: %1").arg(curve.result.finalValAccuracy)));
}

QTEST_GUILESS_MAIN(TestLearning)
#include "tst_learning.moc"
