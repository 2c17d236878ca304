// Equivalences a user relies on without thinking: accumulation equals a
// bigger batch, checkpointing changes memory and not gradients, resume
// continues exactly, LoRA trains only adapters.
#include <QtTest>

#include <algorithm>
#include <csignal>
#include <fstream>

#include <sys/resource.h>

#include "TestPaths.h"
#include "HfFolderFixtures.h"
#include "ModelFixtures.h"
#include "TestPrinters.h"

#include "memory/MemoryProbe.h"
#include "config/HfArchitecture.h"
#include "config/LearningRate.h"
#include "train/Datasets.h"
#include "train/Gpt.h"
#include "train/Bf16AdamW.h"
#include "train/HfModel.h"
#include "train/Safetensors.h"
#include "train/TrainStep.h"
#include "train/Trainer.h"

using namespace tb;

namespace {

RunConfig smallTextConfig()
{
    RunConfig c;
    c.device = "cpu";
    c.model.nLayer = 2;
    c.model.dModel = 32;
    c.model.nHead = 4;
    c.data.source = "text";
    c.data.seqLen = 32;
    c.train.batchSize = 8;
    c.train.threads = 1;
    c.train.precision = "fp32";
    return c;
}

std::map<std::string, torch::Tensor> gradients(Gpt& model)
{
    std::map<std::string, torch::Tensor> out;
    for (const auto& p : model->named_parameters()) {
        if (p.value().grad().defined()) out[p.key()] = p.value().grad().clone();
    }
    return out;
}

double maxDifference(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b)
{
    double worst = 0;
    for (const auto& [name, g] : a) worst = std::max(worst, (g - b.at(name)).abs().max().item<double>());
    return worst;
}

Batch slice(const Batch& b, int start, int count)
{
    return {b.inputs.narrow(0, start, count), b.targets.narrow(0, start, count),
            b.mask.defined() ? b.mask.narrow(0, start, count) : b.mask};
}

void backwardOver(Gpt& model, const std::vector<Batch>& micro)
{
    model->zero_grad();
    const double normalizer = maskedTokenCount(micro);
    for (const auto& b : micro) maskedLossSum(model->forward(b.inputs), b, normalizer).backward();
}

} // namespace

class TestEquivalence : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        MemoryProbe::installCpuCounter();
        torch::set_num_threads(1);
    }
    void accumulationEqualsLargerBatch_data();
    void accumulationEqualsLargerBatch();
    void checkpointingKeepsGradientsAndLowersPeak();
    void cancelThenResumeReproducesTheRun();
    void loraTrainsOnlyAdapters();
    void loraWithCheckpointingStillGetsGradients();
    void checkpointingReplaysDropout();
    void weightDecaySkipsBiasesNormsAndEmbeddings_data();
    void weightDecaySkipsBiasesNormsAndEmbeddings();
    void pureBf16MomentsDecayAsInFp32();
    void fp16OverflowSkipsTheStepAndHalvesTheScale();
    void checkpointsOfEitherLibTorchResume_data();
    void checkpointsOfEitherLibTorchResume();
    void fusedAttentionMatchesEagerOrIsRefused_data();
    void fusedAttentionMatchesEagerOrIsRefused();
    // Checkpoint durability (each failed on the code before it).
    void unwritableCheckpointFolderIsRefusedBeforeStepOne();
    void oldCheckpointsArePrunedAndStalePartialRemoved();
    void fullDiskKeepsTheLastGoodCheckpoint();
};

void TestEquivalence::accumulationEqualsLargerBatch_data()
{
    QTest::addColumn<QString>("source");
    QTest::newRow("text") << "text";
    QTest::newRow("addition (masked loss)") << "addition";
}

void TestEquivalence::accumulationEqualsLargerBatch()
{
    QFETCH(QString, source);
    auto config = smallTextConfig();
    config.data.source = source.toStdString();
    if (config.data.source == "addition") config.data.seqLen = 0;
    const auto data = makeDataset(config);
    torch::manual_seed(5);
    Gpt model(modelOptionsFor(config, *data));
    openResidualBranches(*model);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const Batch batch = data->trainBatch(8, gen);

    backwardOver(model, {batch});                                 // batch 8 x accum 1
    const auto whole = gradients(model);
    backwardOver(model, {slice(batch, 0, 4), slice(batch, 4, 4)}); // batch 4 x accum 2
    const auto accumulated = gradients(model);
    QVERIFY(!whole.empty());
    const double diff = maxDifference(whole, accumulated);
    QVERIFY2(diff < 1e-5, qPrintable(QString("max gradient difference %1").arg(diff)));
}

void TestEquivalence::checkpointingKeepsGradientsAndLowersPeak()
{
    auto config = smallTextConfig();
    config.model.nLayer = 4;
    config.data.seqLen = 128;
    const auto data = makeDataset(config);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    const Batch batch = data->trainBatch(16, gen);

    std::map<std::string, torch::Tensor> grads[2];
    std::int64_t peak[2];
    for (int checkpointing : {0, 1}) {
        config.train.activationCheckpointing = checkpointing == 1;
        torch::manual_seed(9);
        Gpt model(modelOptionsFor(config, *data));
        openResidualBranches(*model);
        model->train();
        model->zero_grad();
        MemoryProbe::resetPeak("cpu");
        const auto before = MemoryProbe::snapshot("cpu").currentBytes;
        maskedLossSum(model->forward(batch.inputs), batch, maskedTokenCount({batch})).backward();
        peak[checkpointing] = MemoryProbe::snapshot("cpu").peakBytes - before;
        grads[checkpointing] = gradients(model);
    }
    const double diff = maxDifference(grads[0], grads[1]);
    QVERIFY2(diff < 1e-5, qPrintable(QString("max gradient difference %1").arg(diff)));
    qInfo("measured peak above baseline: %.1f MiB without checkpointing, %.1f MiB with",
          peak[0] / 1048576.0, peak[1] / 1048576.0);
    QVERIFY(peak[1] < peak[0]);
}

void TestEquivalence::cancelThenResumeReproducesTheRun()
{
    QTemporaryDir dir;
    auto config = smallTextConfig();
    config.train.steps = 16;
    config.train.evalEvery = 100;
    config.model.dropout = 0.1; // the RNG state must be restored too
    config.optim.warmupSteps = 3;
    config.optim.schedule = "linear"; // and each step at the schedule's rate, resumed too
    config.optim.minLrRatio = 0.3;

    QString wrongRate;
    const auto lossesOf = [&](Trainer& trainer, std::vector<double>& losses, int cancelAt) {
        TrainerCallbacks callbacks;
        callbacks.onStep = [&](const StepMetrics& s) {
            losses.push_back(s.loss);
            const double want = learningRateAt(config.optim, s.step, config.train.steps);
            if (s.lr != want && wrongRate.isEmpty()) wrongRate = QString("step %1 ran at lr %2, not %3").arg(s.step).arg(s.lr).arg(want);
            if (s.step == cancelAt) trainer.requestCancel();
        };
        return trainer.run(callbacks);
    };

    std::vector<double> uninterrupted;
    {
        Trainer trainer(config, {});
        QCOMPARE(lossesOf(trainer, uninterrupted, -1).status, TrainResult::Status::Finished);
    }
    std::vector<double> resumed;
    std::string checkpoint;
    {
        TrainerOptions options;
        options.checkpointDir = dir.filePath("ckpt").toStdString();
        Trainer trainer(config, options);
        const auto result = lossesOf(trainer, resumed, 7);
        QCOMPARE(result.status, TrainResult::Status::Cancelled);
        QCOMPARE(result.stepsDone, 7);
        checkpoint = result.lastCheckpoint;
        QVERIFY(QFile::exists(QString::fromStdString(checkpoint)));
    }
    {
        TrainerOptions options;
        options.resumeFrom = checkpoint;
        Trainer trainer(config, options);
        QCOMPARE(trainer.startStep(), 7);
        QCOMPARE(lossesOf(trainer, resumed, -1).status, TrainResult::Status::Finished);
    }
    QVERIFY2(wrongRate.isEmpty(), qPrintable(wrongRate));
    QCOMPARE(resumed.size(), uninterrupted.size());
    for (std::size_t i = 0; i < resumed.size(); ++i) {
        QVERIFY2(resumed[i] == uninterrupted[i],
                 qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(resumed[i], 0, 'g', 17).arg(uninterrupted[i], 0, 'g', 17)));
    }
}

void TestEquivalence::loraTrainsOnlyAdapters()
{
    auto config = smallTextConfig();
    config.lora.rank = 4;
    config.train.steps = 3;
    const auto data = makeDataset(config);
    Trainer trainer(config, {});
    QVERIFY(trainer.trainableParameterCount() < trainer.parameterCount() / 4);

    // Same model, by hand: only lora_* change after optimizer steps.
    torch::manual_seed(2);
    Gpt model(modelOptionsFor(config, *data));
    openResidualBranches(*model);
    model->freezeBaseForLora();
    std::map<std::string, torch::Tensor> before;
    std::vector<torch::Tensor> trainable;
    for (const auto& p : model->named_parameters()) {
        before[p.key()] = p.value().detach().clone();
        if (p.value().requires_grad()) trainable.push_back(p.value());
    }
    torch::optim::AdamW optimizer(trainable, torch::optim::AdamWOptions(1e-2));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    for (int i = 0; i < 2; ++i) {
        const auto b = data->trainBatch(4, gen);
        optimizer.zero_grad();
        maskedLossSum(model->forward(b.inputs), b, maskedTokenCount({b})).backward();
        optimizer.step();
    }
    int changedAdapters = 0;
    for (const auto& p : model->named_parameters()) {
        const bool adapter = p.key().find("lora_") != std::string::npos;
        const bool changed = !torch::equal(before[p.key()], p.value());
        if (!adapter) QVERIFY2(!changed, p.key().c_str());
        changedAdapters += adapter && changed;
    }
    QVERIFY(changedAdapters > 0);
}

void TestEquivalence::loraWithCheckpointingStillGetsGradients()
{
    // With a frozen embedding the checkpointed blocks' inputs need no grad;
    // the adapters must still receive gradients.
    auto config = smallTextConfig();
    config.lora.rank = 4;
    config.train.activationCheckpointing = true;
    const auto data = makeDataset(config);
    torch::manual_seed(2);
    Gpt model(modelOptionsFor(config, *data));
    openResidualBranches(*model);
    model->freezeBaseForLora();
    model->train();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const auto b = data->trainBatch(4, gen);
    maskedLossSum(model->forward(b.inputs), b, maskedTokenCount({b})).backward();
    // lora_B starts at zero, so lora_A's first gradient is zero by design; lora_B's is not.
    for (const auto& p : model->named_parameters()) {
        if (p.key().find("lora_B") != std::string::npos) {
            QVERIFY2(p.value().grad().defined() && p.value().grad().abs().sum().item<double>() > 0, p.key().c_str());
        }
    }
}

void TestEquivalence::checkpointingReplaysDropout()
{
    // Recomputation must draw the same dropout masks as the original forward.
    auto config = smallTextConfig();
    config.model.dropout = 0.1;
    const auto data = makeDataset(config);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    const Batch batch = data->trainBatch(4, gen);
    std::map<std::string, torch::Tensor> grads[2];
    for (int checkpointing : {0, 1}) {
        config.train.activationCheckpointing = checkpointing == 1;
        torch::manual_seed(9);
        auto model = makeModel(modelOptionsFor(config, *data));
        openResidualBranches(*model);
        model->train();
        torch::manual_seed(21); // the same dropout stream for both
        maskedLossSum(model->forward(batch.inputs), batch, maskedTokenCount({batch})).backward();
        for (const auto& p : model->named_parameters()) grads[checkpointing][p.key()] = p.value().grad().clone();
    }
    const double diff = maxDifference(grads[0], grads[1]);
    QVERIFY2(diff < 1e-6, qPrintable(QString("max gradient difference %1").arg(diff)));
}

void TestEquivalence::weightDecaySkipsBiasesNormsAndEmbeddings_data()
{
    QTest::addColumn<QString>("type");
    QTest::addColumn<bool>("decayEmbeddings");
    QTest::newRow("gpt") << "gpt" << false;
    QTest::newRow("gpt, embeddings decayed") << "gpt" << true;
    QTest::newRow("llama") << "llama" << false;
    // Hugging Face folders name their tables transformer.wte/wpe (GPT-2) and
    // gpt_neox.embed_in (GPT-NeoX); they were decayed as matrices.
    QTest::newRow("hf gpt2") << "gpt2" << false;
    QTest::newRow("hf gpt_neox") << "gpt_neox" << false;
}

namespace {

// A tiny folder of a GPT-2 or GPT-NeoX model with random weights, and a token file.
RunConfig hfFolderConfig(const QString& dir, const std::string& family)
{
    const std::string folder = dir.toStdString();
    writeHfFolder(folder, family == "gpt2"
        ? R"({"model_type": "gpt2", "vocab_size": 40, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64})"
        : R"({"model_type": "gpt_neox", "vocab_size": 40, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64, "rotary_pct": 0.5})",
        40);
    RunConfig c = smallTextConfig();
    c.model.type = "hf";
    c.model.path = folder;
    c.data.source = "tokens";
    c.data.path = folder + "/train.bin";
    c.data.seqLen = 16;
    return c;
}

} // namespace

void TestEquivalence::weightDecaySkipsBiasesNormsAndEmbeddings()
{
    // One AdamW step with and without decay: the gradient part is identical, so
    // the parameters differ exactly where decay applies.
    QFETCH(QString, type);
    QFETCH(bool, decayEmbeddings);
    auto config = smallTextConfig();
    QTemporaryDir folder;
    if (type == "gpt2" || type == "gpt_neox") {
        config = hfFolderConfig(folder.path(), type.toStdString());
    } else {
        config.model.type = type.toStdString();
    }
    if (config.model.type == "llama") {
        config.model.positionalEncoding = "rope";
        config.model.tieEmbeddings = false;
    }
    config.train.steps = 1;
    config.optim.lr = 0.1;
    config.optim.decayEmbeddings = decayEmbeddings;
    std::vector<std::pair<std::string, std::vector<float>>> initial, after[2];
    for (int decay : {0, 1}) {
        config.optim.weightDecay = decay ? 0.5 : 0.0;
        Trainer trainer(config, {});
        initial = trainer.parameterValues();
        QCOMPARE(trainer.run({}).status, TrainResult::Status::Finished);
        after[decay] = trainer.parameterValues();
    }
    int decayed = 0;
    for (std::size_t i = 0; i < after[0].size(); ++i) {
        const auto& name = after[0][i].first;
        const bool differs = after[0][i].second != after[1][i].second;
        const auto endsWith = [&](const std::string& tail) {
            return name == tail || (name.size() > tail.size() && name.compare(name.size() - tail.size() - 1, std::string::npos, "." + tail) == 0);
        };
        const bool embedding = endsWith("wte.weight") || endsWith("wpe.weight") || endsWith("embed_tokens.weight")
            || endsWith("embed_in.weight");
        const bool vector = name.find("bias") != std::string::npos || name.find("ln") != std::string::npos
            || name.find("norm") != std::string::npos;
        // Decay scales the starting value, so a matrix that starts at zero (the
        // GPT's residual-branch outputs) cannot show it after one step.
        const bool startsAtZero = std::all_of(initial[i].second.begin(), initial[i].second.end(),
                                              [](float v) { return v == 0.0f; });
        const bool expected = !vector && (!embedding || decayEmbeddings) && !startsAtZero;
        QVERIFY2(differs == expected, qPrintable(QString::fromStdString(name) + (differs ? " decayed" : " not decayed")));
        decayed += differs;
    }
    QVERIFY(decayed > 0);
}

void TestEquivalence::pureBf16MomentsDecayAsInFp32()
{
    // One gradient of 1, then 999 steps of none: AdamW's second moment is
    // (1 - beta2) * beta2^999 = 3.7e-4. Kept in bf16 and rounded to nearest,
    // 0.999 v rounded back to v and it stayed at 1e-3; stochastic rounding
    // decays it on average as fp32 does.
    auto w = torch::zeros({4096}, torch::kBFloat16).requires_grad_(true);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{w});
    Bf16AdamW optimizer(std::move(groups), torch::optim::AdamWOptions(1e-3).betas({0.9, 0.999}).weight_decay(0.0), 7);
    for (int step = 0; step < 1000; ++step) {
        w.mutable_grad() = torch::full({4096}, step == 0 ? 1.0 : 0.0, torch::kBFloat16);
        optimizer.step();
    }
    double v = -1.0;
    for (auto& entry : optimizer.state()) {
        v = static_cast<torch::optim::AdamWParamState&>(*entry.second).exp_avg_sq().to(torch::kFloat).mean().item<double>();
    }
    const double expected = 0.001 * std::pow(0.999, 999);
    QVERIFY2(std::abs(v / expected - 1.0) < 0.05, qPrintable(QString("v %1, fp32 AdamW %2").arg(v).arg(expected)));
}

void TestEquivalence::fp16OverflowSkipsTheStepAndHalvesTheScale()
{
    // The real Trainer and optimizer with dynamic loss scaling; an inf gradient
    // injected at step 3 must leave every weight as it was after step 2.
    auto config = smallTextConfig();
    config.train.steps = 4;
    TrainerOptions options;
    options.forceLossScaling = true;
    options.injectNonFiniteGradientAtStep = 3;
    Trainer trainer(config, options);
    std::map<int, std::vector<std::pair<std::string, std::vector<float>>>> weights;
    std::map<int, StepMetrics> steps;
    TrainerCallbacks callbacks;
    callbacks.onStep = [&](const StepMetrics& s) {
        steps[s.step] = s;
        weights[s.step] = trainer.parameterValues();
    };
    QCOMPARE(trainer.run(callbacks).status, TrainResult::Status::Finished);
    QVERIFY(!steps[2].skipped);
    QVERIFY(steps[3].skipped);
    QVERIFY(!steps[4].skipped);
    QCOMPARE(steps[3].lossScale, steps[2].lossScale / 2);
    QVERIFY(weights[3] == weights[2]);
    QVERIFY(weights[4] != weights[3]);
    QVERIFY(weights[2] != weights[1]);
}

// Checkpoints move between LibTorch versions both ways: tests/data/checkpoints
// holds one written by Debian 12's LibTorch 1.13 and one by Debian 13's 2.6
// (trainbench-cli train --config tiny.json, step 2 of the same run). Each tree
// resumes both: the weights are the file's, and training goes on.
void TestEquivalence::checkpointsOfEitherLibTorchResume_data()
{
    QTest::addColumn<QString>("file");
    QTest::newRow("written by 1.13") << "torch-1.13.pt";
    QTest::newRow("written by 2.6") << "torch-2.6.pt";
}

void TestEquivalence::checkpointsOfEitherLibTorchResume()
{
    QFETCH(QString, file);
    const std::string dir = tb::test::sourcePath("tests/data/checkpoints/");
    const std::string path = dir + file.toStdString();
    auto config = loadConfigFile(dir + "tiny.json");
    config.train.steps = 4;
    TrainerOptions options;
    options.resumeFrom = path;
    Trainer trainer(config, options);
    QCOMPARE(trainer.startStep(), 2);
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    for (const auto& [name, values] : trainer.parameterValues()) {
        torch::Tensor saved;
        archive.read("model." + name, saved);
        const auto flat = saved.to(torch::kFloat).contiguous();
        QVERIFY2(std::equal(values.begin(), values.end(), flat.data_ptr<float>()), name.c_str());
    }
    const auto result = trainer.run({});
    QVERIFY2(result.status == TrainResult::Status::Finished, result.message.c_str());
    QCOMPARE(result.stepsDone, 4);
    QVERIFY(std::isfinite(result.finalLoss));
}

void TestEquivalence::fusedAttentionMatchesEagerOrIsRefused_data()
{
    QTest::addColumn<QString>("type");
    QTest::addColumn<QString>("positions");
    QTest::addColumn<double>("dropout");
    QTest::newRow("gpt learned") << "gpt" << "learned" << 0.0;
    QTest::newRow("gpt rope") << "gpt" << "rope" << 0.0;
    QTest::newRow("llama gqa") << "llama" << "rope" << 0.0;
    QTest::newRow("gpt dropout") << "gpt" << "learned" << 0.1;
}

// On LibTorch 2.x, model.attention "sdpa" (scaled_dot_product_attention with
// is_causal) gives the eager attention's logits and gradients; with dropout
// the two draw different masks, so a run only has to train. 1.13 refuses it.
void TestEquivalence::fusedAttentionMatchesEagerOrIsRefused()
{
    QFETCH(QString, type);
    QFETCH(QString, positions);
    QFETCH(double, dropout);
    auto config = smallTextConfig();
    config.model.type = type.toStdString();
    config.model.positionalEncoding = positions.toStdString();
    config.model.nKvHead = type == "llama" ? 2 : 0;
    config.model.dropout = dropout;
    config.model.attention = "sdpa";
    config.train.steps = 3;
    if (!fusedAttentionAvailable()) {
        // LibTorch 1.13: refused before anything is built, with the reason.
        try {
            Trainer trainer(config, {});
            QFAIL("sdpa was accepted on a LibTorch without it");
        } catch (const InputError& e) {
            QVERIFY2(QString(e.what()).contains("LibTorch 2.0"), e.what());
        }
        return;
    }
    {
        Trainer trainer(config, {});
        const auto result = trainer.run({});
        QCOMPARE(result.status, TrainResult::Status::Finished);
        QVERIFY(std::isfinite(result.finalLoss));
    }
    if (dropout > 0) return;
    const auto data = makeDataset(config);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    const Batch batch = data->trainBatch(4, gen);
    torch::Tensor logits[2];
    std::map<std::string, torch::Tensor> grads[2];
    for (const char* attention : {"eager", "sdpa"}) {
        const int i = std::string(attention) == "sdpa";
        config.model.attention = attention;
        torch::manual_seed(4);
        auto model = makeModel(modelOptionsFor(config, *data));
        openResidualBranches(*model);
        logits[i] = model->forward(batch.inputs);
        maskedLossSum(logits[i], batch, maskedTokenCount({batch})).backward();
        for (const auto& p : model->named_parameters()) grads[i][p.key()] = p.value().grad().clone();
    }
    QVERIFY(torch::allclose(logits[0], logits[1], 1e-5, 1e-5));
    QVERIFY2(maxDifference(grads[0], grads[1]) < 1e-5, qPrintable(QString::number(maxDifference(grads[0], grads[1]))));
}

void TestEquivalence::unwritableCheckpointFolderIsRefusedBeforeStepOne()
{
    QTemporaryDir dir;
    QFile file(dir.filePath("a-file"));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.close();
    auto c = smallTextConfig();
    c.train.steps = 2;
    TrainerOptions o;
    o.checkpointDir = dir.filePath("a-file/runs/1").toStdString(); // under a file: never creatable, even by root
    try {
        Trainer trainer(c, o);
        QFAIL("a run whose weights cannot be saved was allowed to start");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).startsWith("cannot write checkpoints to "), e.what());
    }
}

void TestEquivalence::oldCheckpointsArePrunedAndStalePartialRemoved()
{
    QTemporaryDir dir;
    QVERIFY(QDir(dir.path()).mkpath("run"));
    const QString folder = dir.filePath("run");
    QFile stale(folder + "/step-0000009.pt.partial"); // from a write killed midway
    QVERIFY(stale.open(QIODevice::WriteOnly));
    stale.close();
    auto c = smallTextConfig();
    c.train.steps = 6;
    c.train.checkpointEvery = 1;
    c.train.keepCheckpoints = 2;
    TrainerOptions o;
    o.checkpointDir = folder.toStdString();
    Trainer trainer(c, o);
    QVERIFY(!stale.exists());
    QCOMPARE(trainer.run({}).status, TrainResult::Status::Finished);
    QCOMPARE(QDir(folder).entryList(QDir::Files), (QStringList{"step-0000005.pt", "step-0000006.pt"}));
}

void TestEquivalence::fullDiskKeepsTheLastGoodCheckpoint()
{
    QTemporaryDir dir;
    auto c = smallTextConfig();
    c.train.steps = 4;
    c.train.checkpointEvery = 2;
    TrainerOptions o;
    o.checkpointDir = dir.filePath("run").toStdString();
    Trainer trainer(c, o);
    // After the first checkpoint, files may grow to 4 KiB only: the next
    // checkpoint's write fails as on a full disk (EFBIG instead of SIGXFSZ).
    struct rlimit old {};
    QVERIFY(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    TrainerCallbacks callbacks;
    callbacks.onCheckpoint = [&](int, const std::string&, std::int64_t) {
        struct rlimit small = old;
        small.rlim_cur = 4096;
        ::setrlimit(RLIMIT_FSIZE, &small);
    };
    const auto result = trainer.run(callbacks);
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, oldHandler);
    QCOMPARE(result.status, TrainResult::Status::Failed);
    QVERIFY2(QString::fromStdString(result.message).contains("could not write the checkpoint for step 4"),
             result.message.c_str());
    QVERIFY2(QString::fromStdString(result.message).contains("the last good checkpoint is"), result.message.c_str());
    // The good one is intact and loads; no partial file is left behind.
    QCOMPARE(QDir(dir.filePath("run")).entryList(QDir::Files), QStringList{"step-0000002.pt"});
    auto resumed = c;
    TrainerOptions r = o;
    r.resumeFrom = dir.filePath("run/step-0000002.pt").toStdString();
    Trainer again(resumed, r);
    QCOMPARE(again.run({}).status, TrainResult::Status::Finished);
}

QTEST_GUILESS_MAIN(TestEquivalence)
#include "tst_equivalence.moc"
