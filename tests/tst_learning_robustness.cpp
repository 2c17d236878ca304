// The initialisations that made RoPE models stall on the addition plateau,
// checked on the seeds where they stalled, at the step where it showed. The
// many-seed statistics behind them (16+ seeds per model beside a plain-PyTorch
// reference, per kernel set) are bench/learning_robustness.sh's, with their
// figures in docs/learning.md; this suite keeps one fast check per bug, each
// of which fails on the code that had it:
//   - GPT with RoPE, zero-initialised residual outputs (before 2026-11-24):
//     seed 1 under 80% at step 500 on the development machine.
//   - GPT with RoPE, N(0, 0.02) token embeddings (before 2026-11-25): seed 9
//     stalled at 12.6% at step 500.
//   - Llama, N(0, 0.02) token embeddings: seeds 4 and 5 at 17% and 12% at
//     step 300 (the Llama runs are judged there and stopped). Seed 1 is
//     trained too, as the LoRA test's base.
// The current defaults reach 100% on all of them on every kernel set
// measured (docs/learning.md). Each run is a real training as a user runs
// it: default train.threads, the machine's own kernels, no pin.
//
// The first Llama that learned (seed 1 here; its step-300 checkpoint) is
// then the base of a LoRA fine-tune to 3 digits, so the suite trains no model
// twice. Over the suite's usual 120 s (seven trainings, the fewest that cover
// the three bugs and LoRA learning on a trained base); ctest runs it as two entries
// (tests/CMakeLists.txt) so that they balance against the other suites.
#include <QtTest>

#include <functional>

#include "TestPaths.h"
#include "TestPrinters.h"

#include "config/RunConfig.h"
#include "train/Trainer.h"

using namespace tb;

namespace {

using Weights = std::vector<std::pair<std::string, std::vector<float>>>;

constexpr double kBar = 0.8;

TrainResult train(const RunConfig& config, const TrainerOptions& options = {}, Weights* weights = nullptr)
{
    Trainer trainer(config, options);
    const auto result = trainer.run({});
    if (weights) *weights = trainer.parameterValues();
    return result;
}

// resources/examples/addition.json's GPT (checked, so the test follows it) at 2 digits, 500 steps.
RunConfig gptAddition(const std::string& encoding)
{
    RunConfig c = loadConfigFile(tb::test::sourcePath("resources/examples/addition.json"));
    if (c.model.type != "gpt" || c.model.nLayer != 3 || c.model.dModel != 128 || c.model.nHead != 4
        || c.model.tieEmbeddings || c.optim.lr != 1e-3 || c.optim.warmupSteps != 50 || c.train.batchSize != 128)
        qFatal("resources/examples/addition.json moved: update tst_learning_robustness and the bench together");
    c.device = "cpu";
    c.model.positionalEncoding = encoding;
    c.data.digits = 2;
    c.train.steps = 500;
    c.train.evalEvery = 500;
    c.train.checkpointEvery = 0;
    return c;
}

// The Llama model at its documented setting (docs/learning.md): 4 query and 2 key-value heads, lr 3e-3.
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
    c.train.evalEvery = steps;
    c.train.precision = "fp32";
    return c;
}

// Trains every seed up to `step` (an evaluation step of the config), prints
// each result, and fails on any run under the bar there. A run whose config goes
// further is stopped right after that evaluation: its learning-rate schedule
// is still the config's, so the figure is the one a full run has at `step`,
// and no step is trained that nothing judges. Checkpoints go under `dir`;
// `keep` sees each run's result and trained weights.
QString missesOf(const char* what, int step, const std::vector<int>& seeds, const QTemporaryDir& dir,
                 const std::function<RunConfig(int)>& configFor,
                 const std::function<void(int, const TrainResult&, Weights&&)>& keep = {})
{
    QStringList results, misses;
    for (int seed : seeds) {
        auto config = configFor(seed);
        config.train.seed = static_cast<std::uint64_t>(seed);
        if (config.train.threads != 0) return "the test must run with the default train.threads";
        TrainerOptions options;
        options.checkpointDir = dir.filePath(QString("%1-seed-%2").arg(QString(what).replace(' ', '-')).arg(seed)).toStdString();
        Weights weights;
        double atStep = -1;
        TrainerCallbacks callbacks;
        Trainer trainer(config, options);
        callbacks.onEval = [&](const EvalMetrics& e) {
            if (e.step != step) return;
            atStep = e.valAccuracy;
            if (step < config.train.steps) trainer.requestCancel();
        };
        const auto result = trainer.run(callbacks);
        if (keep) weights = trainer.parameterValues();
        const auto expected = step < config.train.steps ? TrainResult::Status::Cancelled : TrainResult::Status::Finished;
        if (result.status != expected || result.stepsDone != step) return QString("seed %1 did not reach step %2: %3").arg(seed).arg(step).arg(QString::fromStdString(result.message));
        if (atStep < 0) return QString("seed %1 was not evaluated at step %2").arg(seed).arg(step);
        if (keep) keep(seed, result, std::move(weights));
        const QString figure = QString("seed %1: %2% at step %3").arg(seed).arg(100.0 * atStep, 0, 'f', 1).arg(step);
        qInfo("%s, %s", what, qPrintable(figure));
        results << figure;
        if (atStep < kBar) misses << figure;
    }
    if (misses.isEmpty()) return {};
    return QString("%1: %2 of %3 seeds under %4% held-out exact match at step %5 (%6)")
        .arg(what)
        .arg(misses.size())
        .arg(seeds.size())
        .arg(100 * kBar)
        .arg(step)
        .arg(results.join(", "));
}

} // namespace

class TestLearningRobustness : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::string m_llamaBase; // the first 2-digit Llama that learned (seed 1 here, at step 300), base of the LoRA test
    Weights m_llamaBaseWeights;

private Q_SLOTS:
    void gptWithRopeEscapesThePlateau();
    void llamaEscapesThePlateauByStep300();
    void loraFineTuneOfTrainedBaseLearnsThreeDigits();
};

void TestLearningRobustness::gptWithRopeEscapesThePlateau()
{
    // Seed 1: zero residual outputs missed it; seed 9: N(0, 0.02) token embeddings stalled there.
    const auto failure = missesOf("gpt rope", 500, {1, 9}, m_dir, [](int) { return gptAddition("rope"); });
    QVERIFY2(failure.isEmpty(), qPrintable(failure));
}

void TestLearningRobustness::llamaEscapesThePlateauByStep300()
{
    // Seeds 4 and 5: 17% and 12% at step 300 with N(0, 0.02) token embeddings.
    // Seed 1 first: its model is the LoRA test's base (seed 4's, at 99%, took
    // the 3-digit adapters only to 10% in 500 steps on a 2-core AMD EPYC).
    const auto failure = missesOf("llama", 300, {1, 4, 5}, m_dir, [](int) { auto c = llamaAddition(2, 500); c.train.evalEvery = 100; return c; },
                                  [this](int, const TrainResult& result, Weights&& weights) {
                                      // Keep the first model that learned: the LoRA test tunes it.
                                      if (!m_llamaBase.empty() || result.finalValAccuracy < kBar) return;
                                      m_llamaBase = result.lastCheckpoint;
                                      m_llamaBaseWeights = std::move(weights);
                                  });
    QVERIFY2(failure.isEmpty(), qPrintable(failure));
}

void TestLearningRobustness::loraFineTuneOfTrainedBaseLearnsThreeDigits()
{
    if (m_llamaBase.empty()) QFAIL("no Llama seed reached the bar: nothing to fine-tune");
    auto tune = llamaAddition(3, 500);
    tune.lora.rank = 16;
    tune.lora.alpha = 32;
    tune.train.initFrom = m_llamaBase;
    Weights tunedWeights;
    const auto tuned = train(tune, {}, &tunedWeights);
    // What the base does on 3 digits before the adapters learn: one step
    // (from B = 0, the adapters barely move), then the evaluation.
    auto untrained = tune;
    untrained.train.steps = 1;
    untrained.train.evalEvery = 1;
    untrained.optim.warmupSteps = 0;
    TrainResult before;
    try {
        before = train(untrained, {});
    } catch (const std::exception& e) {
        QFAIL(e.what());
    }
    qInfo("3-digit held-out exact match from the 2-digit base: %.1f%% after 500 LoRA steps, %.1f%% after 1",
          100 * tuned.finalValAccuracy, 100 * before.finalValAccuracy);
    QVERIFY2(tuned.finalValAccuracy >= 0.5 && tuned.finalValAccuracy >= before.finalValAccuracy + 0.3,
             qPrintable(QString("after 500 steps %1, after 1 %2").arg(tuned.finalValAccuracy).arg(before.finalValAccuracy)));
    const std::map<std::string, std::vector<float>> base(m_llamaBaseWeights.begin(), m_llamaBaseWeights.end());
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

QTEST_GUILESS_MAIN(TestLearningRobustness)
#include "tst_learning_robustness.moc"
