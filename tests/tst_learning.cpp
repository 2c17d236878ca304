// The models actually learn: the default example and the addition task.
// About 2 minutes on 2 cores (over the suite's usual 120 s): the two
// bundled examples trained as a user runs them (the default text GPT, 300
// steps; 3-digit addition at batch 128 on its own schedule, judged at step
// 500) and a small GPT in fp32 and in bf16 autocast. Each is the only check
// that what a newcomer runs first learns.
#include <QtTest>

#include "TestPaths.h"
#include "TestPrinters.h"

#include "config/RunConfig.h"
#include "train/Trainer.h"

using namespace tb;

namespace {

struct Curve {
    std::vector<EvalMetrics> evals;
    std::vector<double> losses; // training loss per step
    TrainResult result;
};

Curve train(const RunConfig& config, const TrainerOptions& options = {},
            std::vector<std::pair<std::string, std::vector<float>>>* weights = nullptr)
{
    Curve curve;
    Trainer trainer(config, options);
    TrainerCallbacks callbacks;
    callbacks.onEval = [&](const EvalMetrics& e) {
        curve.evals.push_back(e);
        qInfo("step %d: val loss %.4f, exact match %.1f%%", e.step, e.valLoss, 100.0 * e.valAccuracy);
    };
    callbacks.onStep = [&](const StepMetrics& s) { curve.losses.push_back(s.loss); };
    curve.result = trainer.run(callbacks);
    if (weights) *weights = trainer.parameterValues();
    return curve;
}

} // namespace

class TestLearning : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void defaultExampleHalvesValidationLoss();
    void additionReachesNinetyPercentOnHeldOutSums();
    void bf16AutocastMatchesFp32();
};

void TestLearning::defaultExampleHalvesValidationLoss()
{
    RunConfig config = loadConfigFile(tb::test::sourcePath("resources/examples/default.json"));
    config.device = "cpu";
    const auto curve = train(config);
    QCOMPARE(curve.result.status, TrainResult::Status::Finished);
    QVERIFY(curve.evals.size() >= 2);
    QCOMPARE(curve.evals.front().step, 0);
    const double first = curve.evals.front().valLoss, last = curve.evals.back().valLoss;
    QVERIFY2(last <= 0.5 * first, qPrintable(QString("validation loss %1 -> %2").arg(first).arg(last)));
    // It generalises: at the end the validation loss is within 1.25x the
    // training loss (the mean of the last 10 steps). Without dropout it was
    // 2.11 against 0.89, flat since step 100: the 9 KB text memorised.
    QVERIFY(curve.losses.size() >= 10);
    double train = 0;
    for (std::size_t i = curve.losses.size() - 10; i < curve.losses.size(); ++i) train += curve.losses[i] / 10.0;
    QVERIFY2(last <= 1.25 * train, qPrintable(QString("validation %1 against training %2").arg(last).arg(train)));
}

void TestLearning::additionReachesNinetyPercentOnHeldOutSums()
{
    // The example as it ships (its 1,000-step schedule), judged at its
    // step-500 evaluation and stopped there: the held-out exact match is
    // 97.9% then and 100% at the end (docs/learning.md), so the second half
    // adds time, not a check.
    RunConfig config = loadConfigFile(tb::test::sourcePath("resources/examples/addition.json"));
    config.device = "cpu";
    QCOMPARE(config.train.steps, 1000);
    QCOMPARE(500 % config.train.evalEvery, 0);
    double atStep500 = -1;
    Trainer trainer(config, {});
    TrainerCallbacks callbacks;
    callbacks.onEval = [&](const EvalMetrics& e) {
        qInfo("step %d: val loss %.4f, exact match %.1f%%", e.step, e.valLoss, 100.0 * e.valAccuracy);
        if (e.step != 500) return;
        atStep500 = e.valAccuracy;
        trainer.requestCancel();
    };
    const auto result = trainer.run(callbacks);
    QCOMPARE(result.status, TrainResult::Status::Cancelled);
    QCOMPARE(result.stepsDone, 500);
    QVERIFY2(atStep500 >= 0.9, qPrintable(QString("exact match on held-out sums at step 500: %1").arg(atStep500)));
}

void TestLearning::bf16AutocastMatchesFp32()
{
    RunConfig c;
    c.device = "cpu";
    c.model.nLayer = 2;
    c.model.dModel = 64;
    c.model.nHead = 4;
    c.data.source = "text";
    c.data.seqLen = 32;
    c.optim.lr = 3e-3;
    c.optim.warmupSteps = 20;
    c.train.batchSize = 16;
    c.train.steps = 150;
    c.train.evalEvery = 150;
    double valLoss[2];
    for (int bf16 : {0, 1}) {
        c.train.precision = bf16 ? "bf16" : "fp32";
        const auto curve = train(c);
        QCOMPARE(curve.result.status, TrainResult::Status::Finished);
        valLoss[bf16] = curve.result.finalValLoss;
        QVERIFY(curve.evals.back().valLoss < 0.7 * curve.evals.front().valLoss); // it learned
    }
    qInfo("final validation loss: fp32 %.4f, bf16 autocast %.4f", valLoss[0], valLoss[1]);
    QVERIFY2(std::abs(valLoss[1] - valLoss[0]) <= 0.05 * valLoss[0],
             qPrintable(QString("fp32 %1 vs bf16 %2").arg(valLoss[0]).arg(valLoss[1])));
}

QTEST_GUILESS_MAIN(TestLearning)
#include "tst_learning.moc"
