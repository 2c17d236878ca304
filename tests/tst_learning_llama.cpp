// The Llama-family model learns, and LoRA fine-tuning of a trained base is
// real: 2-digit addition first, then adapters for 3 digits. A suite of its
// own so ctest runs it beside tst_learning.
#include <QtTest>

#include "TestPrinters.h"

#include "config/RunConfig.h"
#include "train/Trainer.h"

using namespace tb;

namespace {

using Weights = std::vector<std::pair<std::string, std::vector<float>>>;

TrainResult train(const RunConfig& config, const TrainerOptions& options, Weights* weights = nullptr)
{
    Trainer trainer(config, options);
    TrainerCallbacks callbacks;
    callbacks.onEval = [](const EvalMetrics& e) {
        qInfo("step %d: val loss %.4f, exact match %.1f%%", e.step, e.valLoss, 100.0 * e.valAccuracy);
    };
    const auto result = trainer.run(callbacks);
    if (weights) *weights = trainer.parameterValues();
    return result;
}

// Settings measured to learn (2-digit: 100% at step 500; README, "Learning").
RunConfig llamaAddition(int digits, int steps)
{
    RunConfig c;
    c.device = "cpu";
    c.model.type = "llama";
    c.model.nLayer = 3;
    c.model.dModel = 128;
    c.model.nHead = 4;
    c.model.nKvHead = 2;
    c.model.positionalEncoding = "rope";
    c.model.tieEmbeddings = false;
    c.data.digits = digits;
    c.optim.lr = 3e-3;
    c.optim.warmupSteps = digits == 2 ? 50 : 30;
    c.train.batchSize = 128;
    c.train.steps = steps;
    c.train.evalEvery = 100;
    c.train.precision = "fp32";
    // One thread: the same float reductions as the measurement behind these
    // settings (two threads reached 85.8% at step 500 where one reached 100%).
    c.train.threads = 1;
    return c;
}

} // namespace

class TestLearningLlama : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::string m_baseCheckpoint; // the 2-digit model, base of the LoRA test
    Weights m_baseWeights;

private Q_SLOTS:
    void llamaLearnsAddition();
    void loraFineTuneOfTrainedBaseBeatsRandomBase();
};

void TestLearningLlama::llamaLearnsAddition()
{
    TrainerOptions options;
    options.checkpointDir = m_dir.filePath("base").toStdString();
    const auto result = train(llamaAddition(2, 500), options, &m_baseWeights);
    QCOMPARE(result.status, TrainResult::Status::Finished);
    m_baseCheckpoint = result.lastCheckpoint;
    QVERIFY2(result.finalValAccuracy >= 0.9,
             qPrintable(QString("exact match on held-out 2-digit sums: %1").arg(result.finalValAccuracy)));
}

void TestLearningLlama::loraFineTuneOfTrainedBaseBeatsRandomBase()
{
    if (m_baseCheckpoint.empty()) QSKIP("needs llamaLearnsAddition's model");
    auto tune = llamaAddition(3, 500);
    tune.lora.rank = 16;
    tune.lora.alpha = 32;
    auto fromRandom = tune;
    tune.train.initFrom = m_baseCheckpoint;
    Weights tunedWeights;
    const auto tuned = train(tune, {}, &tunedWeights);
    const auto random = train(fromRandom, {});
    qInfo("3-digit held-out exact match after 500 LoRA steps: %.1f%% from the 2-digit base, %.1f%% from a random base",
          100 * tuned.finalValAccuracy, 100 * random.finalValAccuracy);
    QVERIFY2(tuned.finalValAccuracy >= 0.5 && tuned.finalValAccuracy >= random.finalValAccuracy + 0.3,
             qPrintable(QString("trained base %1, random base %2").arg(tuned.finalValAccuracy).arg(random.finalValAccuracy)));
    // Only the adapters moved.
    const std::map<std::string, std::vector<float>> base(m_baseWeights.begin(), m_baseWeights.end());
    int adapters = 0;
    for (const auto& [name, values] : tunedWeights) {
        if (name.find("lora_") != std::string::npos) {
            ++adapters;
            continue;
        }
        QVERIFY2(values == base.at(name), name.c_str());
    }
    QCOMPARE(adapters, 2 * 7 * 3); // A and B on 7 projections in 3 layers
}

QTEST_GUILESS_MAIN(TestLearningLlama)
#include "tst_learning_llama.moc"
