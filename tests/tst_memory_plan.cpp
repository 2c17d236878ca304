// The memory planner against the counting allocator: the estimate of a step's
// peak tensor bytes must match what two real training steps measure, across
// model families, positional encodings, optimizers, accumulation,
// checkpointing, dropout, datasets, head tying and LoRA. Prints the table.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>
#include <cstdio>
#include <fstream>

#include "config/ModelSpec.h"
#include "config/RunConfig.h"
#include "diagnose/TargetPlan.h"
#include "gpu/Catalogue.h"
#include "common/Errors.h"
#include "memory/Architectures.h"
#include "memory/CpuGemmScratch.h"
#include "memory/Estimator.h"
#include "memory/FusedAttention.h"
#include "memory/LargestFitting.h"
#include "memory/Verdict.h"
#include "run/RunSession.h"
#include "train/DerivedPlan.h"
#include "train/Trainer.h"

#include "HfFolderFixtures.h"

using namespace tb;

namespace {

RunConfig small(const std::string& type, int layers, int d, int heads, int batch, int seq)
{
    RunConfig c;
    c.device = "cpu";
    c.model.type = type;
    c.model.nLayer = layers;
    c.model.dModel = d;
    c.model.nHead = heads;
    c.model.tieEmbeddings = type != "llama";
    if (type == "llama") c.model.positionalEncoding = "rope";
    c.data.source = "text";
    c.data.seqLen = seq;
    c.train.batchSize = batch;
    c.train.steps = 2;
    c.train.evalEvery = 2;
    c.train.evalBatches = 2;
    c.train.precision = "fp32";
    c.train.threads = 1;
    return c;
}

// The addition task (a vocabulary of a few tokens, so activations outweigh
// the logits), with answers of `digits` digits and its fixed sequence.
void onAddition(RunConfig& c, int digits)
{
    c.data.source = "addition";
    c.data.digits = digits;
}

std::int64_t measuredPeak(const RunConfig& c)
{
    TrainerOptions options;
    options.recordPhaseMemory = true;
    Trainer trainer(c, options);
    const auto result = trainer.run({});
    std::int64_t peak = 0;
    for (const auto& p : result.phaseMemory) peak = std::max(peak, p.peakBytes);
    return peak;
}

// The config's plan as every panel and command makes it (memoryPlanOf):
// its own step's.
MemoryPlan planOf(const RunConfig& c)
{
    return memoryPlanOf(c, architectureFor(c), setupFor(c).precision);
}
MemoryEstimate plannedEstimate(const RunConfig& c)
{
    const auto setup = setupFor(c);
    return planOf(c).at(setup.batch, setup.seqLen, setup);
}

// A bundled preset as an experiment (memory/Architectures.h
// publishedExperiment), as the Memory planner and estimate --preset plan it.
PublishedExperiment presetExperiment(const char* id)
{
    const auto& preset = findArchitecture(id);
    return publishedExperiment(preset.configJson, "resources/architectures/" + preset.id + ".json");
}

// Measures a configuration, plans it, prints the row and returns the
// planner's relative error (positive: planned above the measured peak).
double plannedError(const std::string& name, const RunConfig& c)
{
    const auto measured = measuredPeak(c);
    const auto estimate = plannedEstimate(c).peakBytes;
    const double error = static_cast<double>(estimate - measured) / static_cast<double>(measured);
    std::printf("%-28s %12lld %12lld %+7.2f%%\n", name.c_str(), static_cast<long long>(measured),
                static_cast<long long>(estimate), 100 * error);
    return error;
}

// `c` training the Hugging Face folder written in `dir` (HfFolderFixtures.h) on its tokens.
RunConfig onFolder(const QString& dir, RunConfig c)
{
    const std::string folder = dir.toStdString();
    c.model.type = "hf";
    c.model.path = folder;
    c.data.source = "tokens";
    c.data.path = folder + "/train.bin";
    return c;
}

// A Mistral folder in `dir` with a sliding window of `window`, and its tokens.
RunConfig mistralFolder(const QString& dir, int window, int seq)
{
    writeMistralFolder(dir.toStdString(), window);
    RunConfig c = small("hf", 2, 64, 4, 4, seq);
    c.model.tieEmbeddings = false;
    return onFolder(dir, c);
}

// A tied GPT-2 folder at batch 1, with few positions: the step peaks where
// the head's gradient and the embedding's are summed.
RunConfig tiedGpt2Folder(const QString& dir)
{
    writeHfFolder(dir.toStdString(),
                  R"({"model_type": "gpt2", "vocab_size": 300, "n_embd": 64, "n_layer": 2, "n_head": 2,
                      "n_inner": 64, "n_positions": 64, "tie_word_embeddings": true})",
                  300);
    return onFolder(dir, small("hf", 2, 64, 2, 1, 16));
}

using PlanRows = std::vector<std::pair<std::string, RunConfig>>;

// An empty list of (name, config) rows, with room reserved: growing the
// vector from one row draws a false -Warray-bounds from GCC 12.
PlanRows planRows()
{
    PlanRows rows;
    rows.reserve(8);
    return rows;
}

// Plans and measures every row, then fails naming those outside the bar
// (within 2%, at most 0.5% under): the step's peak, or with everyPhase the
// peak of each phase (forward, backward, optimizer).
void requireWithinBar(const PlanRows& rows, bool everyPhase = false)
{
    QStringList outside;
    const auto check = [&](const QString& what, double error) {
        if (error > 0.02 || error < -0.005) outside << QString("%1 (%2%)").arg(what).arg(100 * error);
    };
    for (const auto& [name, config] : rows) {
        const bool bf16 = config.train.precision == "bf16" || config.train.precision == "bf16-pure";
        if (bf16 && cpuBf16ProductsUseOneDnn() && !cpuGemmScratchKnown()) {
            // (A CPU bf16 step's peak can be a product's scratch, which this build cannot ask oneDNN for.)
            std::printf("%-28s skipped: %s\n", name.c_str(), cpuGemmScratchUnknownReason().c_str());
            continue;
        }
        if (!everyPhase) {
            check(QString::fromStdString(name), plannedError(name, config));
            continue;
        }
        TrainerOptions options;
        options.recordPhaseMemory = true;
        Trainer trainer(config, options);
        const auto result = trainer.run({});
        const auto est = plannedEstimate(config);
        for (const auto& planned : est.phases) {
            std::int64_t measured = 0;
            for (const auto& p : result.phaseMemory) {
                if (p.phase == planned.phase) measured = std::max(measured, p.peakBytes);
            }
            const double error = static_cast<double>(planned.bytes - measured) / static_cast<double>(measured);
            std::printf("%-28s %-9s %12lld %12lld %+7.2f%%\n", name.c_str(), planned.phase.c_str(),
                        static_cast<long long>(measured), static_cast<long long>(planned.bytes), 100 * error);
            check(QString::fromStdString(name + " " + planned.phase), error);
        }
    }
    QVERIFY2(outside.isEmpty(), qPrintable("outside the bar (within 2%, at most 0.5% under): " + outside.join(", ")));
}

} // namespace

class TestMemoryPlan : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void parameterCountIsExact();
    void estimateMatchesMeasuredPeak();
    void fitSolverAgreesWithMeasurement();
    void fitSearchFromPeaksAgreesWithBisection();
    void presetsMatchPublishedParameterCounts();
    void hfConfigImportNamesWhatIsWrong();
    void gpuTermsOfAPlan();
    void fitMapMatchesTheEstimate();
    void bf16ProductsTakeOneDnnScratch();
    void loraMlpDropoutNoiseGoesWithItsNode();
    void firstBlockWithAFrozenAttentionLetsItsGradientGo();
    void adapterGradientsAppearWithTheirBackward();
    void finalRmsNormBackwardHoldsPowsTemporaries();
    void checkpointStatesAndBlockBiasesFollowLibTorch();
    void firstBlockWithAFrozenInputLetsItsGradientGo();
    void groupedKeysAndValuesAreBothExpandedBeforeTheScores();
    void batchOneAndOneHeadAreNotUnderPlanned();
    void pureBf16LlamaFollowsItsFp32Islands();
    void loraDropoutAndOneKvHeadFollowTheModel();
    void fusedAttentionBuffersFollowTheKernels();
    void fusedAttentionOnTheCpuFollowsTheKernel();
    void gpuFusedAttentionKeepsNoMaps();
    void frozenAttentionKeepsNoMapsOrCopies();
    void mathFallbackSavesWhatEachGradientNeeds();
    void largestSequenceGrowsThePositionTable();
    void slidingWindowPlansTheMaskedEagerStep();
    void pureBf16BuffersLogitsAndUnsavedMasks();
    void checkpointedGptForwardKeepsStatementTemporaries();
    void conv1dProjectionsTransposeTheirProducts();
    void checkpointSavesTheGeneratorStateFirst();
    void gpt2FolderEmbedsTokensFirst();
    void checkpointStatesGoWithTheGraph();
    void adapterGradientsTakeOneDnnScratch();
    void narrowMlpLlamaWithLoraOnAttention();
    void unsavedValuesLiveUntilTheAttentionReturns();
    void tiedHeadGradientUnderAutocast();
    void runsRecordTheirEstimate();
    void launchChecksMixedPrecisionAgainstTheDevice();
    void runOfAFolderWithItsOwnHeadSizeRecordsItsDerivedPlan();
    void outOfMemoryOfAFolderWithItsOwnHeadSize();
    void runOfAQuantizedModelRecordsItsDerivedPlan();
    void noTermIsNegative();
    void oneVerdict();
};

void TestMemoryPlan::parameterCountIsExact()
{
    std::vector<RunConfig> configs;
    configs.push_back(small("gpt", 2, 64, 4, 4, 32));
    auto sin = small("gpt", 1, 96, 3, 4, 16);
    sin.model.positionalEncoding = "sinusoidal";
    sin.model.tieEmbeddings = false;
    configs.push_back(sin);
    auto llama = small("llama", 2, 64, 4, 4, 32);
    llama.model.nKvHead = 2;
    configs.push_back(llama);
    auto lora = small("llama", 1, 64, 4, 4, 32);
    lora.lora.rank = 4;
    lora.lora.targets = {"attn"};
    configs.push_back(lora);
    auto gptLora = small("gpt", 1, 64, 4, 4, 32);
    gptLora.lora.rank = 2;
    configs.push_back(gptLora);
    for (const auto& c : configs) {
        Trainer trainer(c, TrainerOptions{});
        // (The count LoRA's adapters included: the plan's and the panels'.)
        auto base = c;
        base.lora.rank = 0;
        const auto all = parameterCount(c); // (config/ModelSpec.h: the one count)
        QCOMPARE(all, trainer.parameterCount());
        QCOMPARE(c.lora.rank > 0 ? all - parameterCount(base) : all, trainer.trainableParameterCount());
        QCOMPARE(plannedEstimate(c).parameters, trainer.parameterCount());
        QCOMPARE(plannedEstimate(c).trainableParameters, trainer.trainableParameterCount());
    }
}

namespace {

std::vector<std::pair<std::string, RunConfig>> planGrid()
{
    std::vector<std::pair<std::string, RunConfig>> grid;
    grid.emplace_back("gpt L2 d64 learned b8 t32", small("gpt", 2, 64, 4, 8, 32));
    auto c = small("gpt", 2, 64, 2, 4, 64);
    c.model.positionalEncoding = "sinusoidal";
    c.optim.optimizer = "sgd";
    grid.emplace_back("gpt sinusoidal sgd", c);
    c = small("gpt", 3, 64, 4, 4, 48);
    c.model.positionalEncoding = "rope";
    c.train.gradAccum = 4;
    grid.emplace_back("gpt rope accum 4", c);
    c = small("gpt", 2, 64, 4, 8, 32);
    c.model.dropout = 0.1;
    c.train.activationCheckpointing = true;
    grid.emplace_back("gpt dropout checkpointing", c);
    c = small("gpt", 1, 128, 8, 2, 16);
    c.model.tieEmbeddings = false;
    grid.emplace_back("gpt untied", c);
    c = small("gpt", 2, 32, 2, 32, 0);
    onAddition(c, 2);
    grid.emplace_back("gpt addition", c);
    c = small("llama", 2, 64, 4, 8, 32);
    c.model.nKvHead = 2;
    grid.emplace_back("llama gqa", c);
    c = small("llama", 1, 64, 4, 4, 64);
    c.optim.optimizer = "sgd";
    c.train.activationCheckpointing = true;
    grid.emplace_back("llama sgd checkpointing", c);
    c = small("llama", 2, 32, 2, 16, 0);
    c.data.source = "addition";
    grid.emplace_back("llama addition", c);
    // LoRA: the frozen base keeps only what a gradient flows through.
    c = small("llama", 2, 64, 4, 8, 64);
    c.lora.rank = 4;
    c.lora.targets = {"attn"};
    grid.emplace_back("llama lora attn", c);
    c = small("llama", 2, 64, 4, 2, 128);
    c.model.dropout = 0.1;
    c.lora.rank = 4;
    c.lora.targets = {"q_proj", "v_proj"};
    grid.emplace_back("llama lora q,v dropout", c);
    c = small("gpt", 2, 64, 4, 8, 64);
    c.model.positionalEncoding = "rope";
    c.lora.rank = 4;
    c.lora.targets = {"mlp"};
    grid.emplace_back("gpt rope lora mlp", c);
    c = small("gpt", 2, 64, 4, 8, 32);
    c.train.activationCheckpointing = true;
    c.lora.rank = 8;
    grid.emplace_back("gpt lora checkpointing", c);
    // CPU bf16 autocast: weight copies, low-precision casts and maps, fp32
    // norms and loss (planned at fp32 these were 12% to 32% too high).
    c = small("gpt", 2, 64, 4, 8, 64);
    c.train.precision = "bf16";
    grid.emplace_back("gpt bf16", c);
    c = small("gpt", 2, 64, 4, 8, 48);
    c.model.positionalEncoding = "rope";
    c.model.dropout = 0.1;
    c.train.activationCheckpointing = true;
    c.train.precision = "bf16";
    grid.emplace_back("gpt bf16 rope dropout ckpt", c);
    c = small("llama", 2, 64, 4, 8, 64);
    c.model.nKvHead = 2;
    c.train.precision = "bf16";
    grid.emplace_back("llama bf16 gqa", c);
    c = small("llama", 2, 32, 2, 16, 0);
    c.data.source = "addition";
    c.optim.optimizer = "sgd";
    c.train.precision = "bf16";
    grid.emplace_back("llama bf16 addition sgd", c);
    // LoRA under autocast: frozen casts saved only where the input needs a gradient.
    c = small("llama", 2, 64, 4, 8, 64);
    c.lora.rank = 4;
    c.lora.targets = {"attn"};
    c.train.precision = "bf16";
    grid.emplace_back("llama lora attn bf16", c);
    c = small("gpt", 2, 64, 4, 8, 32);
    c.train.activationCheckpointing = true;
    c.lora.rank = 8;
    c.train.precision = "bf16";
    grid.emplace_back("gpt lora ckpt bf16", c);
    // Large attention maps with dropout: the dropped copy and the noise go as
    // their backward nodes run (held until softmax's backward, this was 21% over).
    c = small("llama", 1, 64, 8, 4, 256);
    c.model.nKvHead = 2;
    c.model.dropout = 0.1;
    grid.emplace_back("llama dropout large maps", c);
    return grid;
}

} // namespace

void TestMemoryPlan::estimateMatchesMeasuredPeak()
{
    const auto grid = planGrid();
    std::vector<double> errors;
    QStringList outside; // every row is printed before the test fails
    std::printf("%-28s %12s %12s %8s\n", "configuration", "measured", "estimate", "error");
    for (const auto& [name, config] : grid) {
        const double error = plannedError(name, config);
        errors.push_back(std::abs(error));
        if (std::abs(error) > 0.05) outside << QString::fromStdString(name);
    }
    QVERIFY2(outside.isEmpty(), qPrintable("more than 5% off: " + outside.join(", ")));
    std::sort(errors.begin(), errors.end());
    QVERIFY(errors[errors.size() / 2] <= 0.02);
}

void TestMemoryPlan::fitSolverAgreesWithMeasurement()
{
    auto c = small("gpt", 2, 64, 4, 1, 32);
    const std::int64_t budget = 6 << 20;
    const auto best = planOf(c).largestBatch(setupFor(c).seqLen, setupFor(c), budget);
    QVERIFY(best > 1);
    c.train.batchSize = static_cast<int>(best);
    QVERIFY(measuredPeak(c) <= budget);
    c.train.batchSize = static_cast<int>(best + 1);
    const auto over = measuredPeak(c);
    QVERIFY2(over > budget * 0.97, "one more than the answer should not fit by much");
}

// fit's answers search with the peaks (a parabola or a line through the last
// ones, kept in the bracket), not only with "fits or not": on a GPU each evaluation is a
// replay through the allocator's model. Same answers as doubling and
// bisection, in fewer evaluations.
void TestMemoryPlan::fitSearchFromPeaksAgreesWithBisection()
{
    // Peaks of a step's shape (linear in the batch, quadratic at most in the
    // sequence, with the allocator's rounding and segments), and two that are
    // not: a cubic, and a jump no interpolation helps with.
    struct Peak {
        const char* name;
        std::function<std::int64_t(std::int64_t)> at;
        bool stepShape;
    };
    const std::vector<Peak> peaks{
        {"linear", [](std::int64_t n) { return 1000 + 37 * n; }, true},
        {"quadratic", [](std::int64_t n) { return 5000 + 3 * n + n * n / 7; }, true},
        {"512-byte steps", [](std::int64_t n) { return 20 * ((n * 13 + 511) / 512) * 512; }, true},
        {"concave", [](std::int64_t n) { return static_cast<std::int64_t>(1000 * std::sqrt(static_cast<double>(n))); }, true},
        {"constant", [](std::int64_t) { return 50; }, true},
        {"cubic", [](std::int64_t n) { return n * n * n; }, false},
        {"linear with jumps", [](std::int64_t n) { return 1000000 + 4096 * n + (n / 37) * 20000000; }, true},
        {"flat, then a jump", [](std::int64_t n) { return n < 700 ? 100 : 100000; }, false},
    };
    for (const auto& [name, peak, stepShape] : peaks) {
        long bisected = 0, searched = 0;
        for (const std::int64_t limit : {1LL, 2LL, 3LL, 17LL, 256LL, 65536LL, 1LL << 20}) {
            for (std::int64_t budget = 0; budget < 2 * peak(std::min<std::int64_t>(limit, 5000)); budget += 1 + budget / 7) {
                long a = 0, b = 0;
                std::int64_t furthest = 0;
                const auto expected = largestFitting([&](std::int64_t n) { ++a; return peak(n) <= budget; }, limit);
                const auto got = largestUnderBudget(
                    [&](std::int64_t n) {
                        ++b;
                        if (n < 1 || n > limit) qFatal("%s: evaluated %lld outside [1, %lld]", name, static_cast<long long>(n), static_cast<long long>(limit));
                        furthest = std::max(furthest, n);
                        return peak(n);
                    },
                    budget, limit);
                const auto where = QString("%1, limit %2, budget %3").arg(name).arg(limit).arg(budget);
                QVERIFY2(got == expected, qPrintable(where + QString(": %1, bisection %2").arg(got).arg(expected)));
                // Not far past the answer (a peak asked for at the limit can
                // overflow: sizes grow with the square of the sequence).
                QVERIFY2(furthest <= kLargestGrowth * std::max<std::int64_t>(got, 1), qPrintable(where + QString(": asked for %1").arg(furthest)));
                bisected += a;
                searched += b;
                // From a bracket the planner's replays showed (a size that
                // fits and one that does not, with their peaks): the same
                // answer, asking only for sizes strictly between the two.
                if (expected >= 1 && expected < limit) {
                    const std::int64_t lo = (expected + 1) / 2, hi = std::min(limit, 2 * expected + 1);
                    const auto between = largestBetween(
                        [&](std::int64_t n) {
                            if (n <= lo || n >= hi) qFatal("%s: asked for %lld outside (%lld, %lld)", name, static_cast<long long>(n), static_cast<long long>(lo), static_cast<long long>(hi));
                            return peak(n);
                        },
                        budget, lo, peak(lo), hi, peak(hi));
                    QVERIFY2(between == expected, qPrintable(where + QString(": %1 from (%2, %3)").arg(between).arg(lo).arg(hi)));
                }
            }
        }
        qInfo("%s: %ld evaluations against bisection's %ld", name, searched, bisected);
        // Elsewhere, the fallback to bisection costs at most half again.
        QVERIFY2(stepShape ? searched <= bisected : 2 * searched <= 3 * bisected, name);
    }
    // The planner's own answers, on a GPU (the allocator's model in every
    // evaluation) and on the CPU: each fits and one more does not, in two
    // thirds of the evaluations bisection takes or fewer (10 against 22 for
    // the 7B below). Where the peak only grows
    // (the CPU) the answer is bisection's. On a GPU it need not be: where a
    // request reaches 10 MiB it takes a segment of its own instead of a
    // share of a 20 MiB one, and the peak can drop as the sequence grows
    // (Llama 2 7B LoRA on a T4 at batch 2: sequences to 665 fit, 666 to 689
    // did not, 690 to 709 fitted again). Either crossing is an answer that fits.
    auto qwen = presetExperiment("qwen2.5-0.5b");
    qwen.config.train.activationCheckpointing = true;
    qwen.config.train.batchSize = 2;
    qwen.config.data.seqLen = 1024;
    auto full = setupFor(qwen.config);
    full.gpu = true;
    full.computeCapability = 75;
    const auto c = small("gpt", 2, 64, 4, 8, 64);
    const std::int64_t t4 = 15655829504;
    for (const auto& [config, setup, budget] : {std::tuple{qwen.config, full, t4},
                                                std::tuple{c, setupFor(c), std::int64_t{64} << 20}}) {
        const auto plan = planOf(config);
        const auto peakAt = [&, &setup = setup](std::int64_t b, std::int64_t t) { return plan.at(b, t, setup).peakBytes; };
        long searched = 0, bisected = 0;
        const auto batch = plan.largestBatch(setup.seqLen, setup, budget);
        const auto seq = plan.largestSequence(setup.batch, setup, budget);
        (void)largestUnderBudget([&](std::int64_t b) { ++searched; return peakAt(b, setup.seqLen); }, budget, 1 << 16);
        (void)largestUnderBudget([&](std::int64_t t) { ++searched; return peakAt(setup.batch, t); }, budget, 1 << 20);
        const auto batchBisected = largestFitting([&](std::int64_t b) { ++bisected; return peakAt(b, setup.seqLen) <= budget; }, 1 << 16);
        const auto seqBisected = largestFitting([&](std::int64_t t) { ++bisected; return peakAt(setup.batch, t) <= budget; }, 1 << 20);
        qInfo("%s: batch %lld (bisection %lld), sequence %lld (bisection %lld); %ld estimates, bisection %ld",
              config.name.c_str(), static_cast<long long>(batch), static_cast<long long>(batchBisected),
              static_cast<long long>(seq), static_cast<long long>(seqBisected), searched, bisected);
        QVERIFY(batch > 0 && seq > 0);
        QVERIFY(peakAt(batch, setup.seqLen) <= budget && peakAt(batch + 1, setup.seqLen) > budget);
        QVERIFY(peakAt(setup.batch, seq) <= budget && peakAt(setup.batch, seq + 1) > budget);
        if (!setup.gpu) {
            QCOMPARE(batch, batchBisected);
            QCOMPARE(seq, seqBisected);
        }
        QVERIFY2(3 * searched <= 2 * bisected, qPrintable(QString("%1 against %2").arg(searched).arg(bisected)));
    }
}

// The built-in model's learned positions are sized to the sequence it trains
// on, so the largest sequence is not capped at the config's own length (it
// was: "largest sequence length: 64" with a quarter of the budget used).
void TestMemoryPlan::largestSequenceGrowsThePositionTable()
{
    auto c = small("gpt", 2, 64, 4, 8, 64);
    const auto setup = setupFor(c);
    const std::int64_t budget = 64 << 20;
    const auto longest = planOf(c).largestSequence(setup.batch, setup, budget);
    QVERIFY2(longest > 64, qPrintable(QString::number(longest)));
    c.data.seqLen = static_cast<int>(longest);
    QVERIFY(plannedEstimate(c).peakBytes <= budget);
    c.data.seqLen = static_cast<int>(longest + 1);
    QVERIFY(plannedEstimate(c).peakBytes > budget);
}

// Past a Mistral model's sliding window the trainer masks the band below it
// (two more T x T temporaries while the mask is built) and runs eager
// attention even where SDPA was asked for (train/Layers.cpp tablesFor). The
// planner had no window: it planned SDPA's step, without a single attention
// map, for a step that keeps every layer's.
void TestMemoryPlan::slidingWindowPlansTheMaskedEagerStep()
{
    QTemporaryDir dir;
    auto within = mistralFolder(dir.path(), 24, 24);
    auto past = within;
    past.data.seqLen = 48;
    QCOMPARE(modelSpecFor(past, builtInVocabSize(past), effectiveSeqLen(past)).slidingWindow, 24);
    QCOMPARE(findArchitecture("mistral-7b").model.slidingWindow, 4096); // its config.json's

    // (The plan on each side of the window, and its fit map, are
    // tst_derived_plan's slidingWindowTracedOnBothSides.)

    // Measured: the mask on both LibTorch versions; SDPA on 2.x, where past
    // the window the step used to be planned far under.
    auto rows = planRows();
    rows.emplace_back("mistral window eager", past);
    if (builtTorchMajor() >= 2) {
        const auto sdpa = [](RunConfig c) {
            c.model.attention = "sdpa";
            return c;
        };
        rows.emplace_back("mistral within window sdpa", sdpa(within));
        rows.emplace_back("mistral window sdpa", sdpa(past));
        auto c = sdpa(past);
        c.train.precision = "bf16";
        c.train.activationCheckpointing = true;
        rows.emplace_back("mistral window sdpa bf16 ckpt", c);
        c = sdpa(past);
        c.lora.rank = 4;
        c.lora.targets = {"q_proj", "v_proj"};
        rows.emplace_back("mistral window sdpa lora q,v", c);
        c = sdpa(past);
        c.train.precision = "bf16-pure";
        c.model.dropout = 0.1;
        rows.emplace_back("mistral window sdpa pure dropout", c);
    }
    requireWithinBar(rows);
}

// Two things a draw (1 layer, one head, 128 positions, pure bf16, LoRA on
// the MLP) found 2.05% over: pure bf16 casts the whole module, so RoPE's
// (and the sinusoidal) position tables are bf16, not fp32; and the causal
// mask is saved only where a block's masked scores need a gradient or a
// checkpoint holds it; else it goes with the statement that runs the blocks
// and the final norm, before the head and the loss. Each row's every phase is held to the bar, which
// found a third: a pure bf16 GPT's loss reads an fp32 copy of its bf16
// logits, as a Llama's does (its forward phase was 3.7% under).
void TestMemoryPlan::pureBf16BuffersLogitsAndUnsavedMasks()
{
    auto rows = planRows();
    auto c = small("llama", 1, 80, 1, 2, 128);
    c.model.nKvHead = 1;
    c.model.tieEmbeddings = true;
    c.train.precision = "bf16-pure";
    c.train.gradAccum = 3;
    c.lora.rank = 4;
    c.lora.targets = {"mlp"};
    rows.emplace_back("llama pure lora mlp (drawn)", c);
    // (The bundled sample text's held-out tenth, 916 bytes, holds 512 positions; its twentieth does not.)
    c = small("llama", 1, 64, 1, 1, 512);
    c.train.precision = "bf16-pure";
    c.data.valFraction = 0.1;
    rows.emplace_back("llama pure one head t512", c);
    c = small("gpt", 2, 64, 2, 1, 384);
    c.model.positionalEncoding = "sinusoidal";
    c.train.precision = "bf16-pure";
    c.data.valFraction = 0.1;
    rows.emplace_back("gpt sinusoidal pure t384", c);
    c = small("llama", 1, 64, 2, 1, 512);
    c.lora.rank = 4;
    c.lora.targets = {"mlp"};
    c.data.valFraction = 0.1;
    rows.emplace_back("llama lora mlp one layer", c);
    c.lora.targets = {"v_proj"}; // the probabilities are saved for v's gradient; the mask is not
    rows.emplace_back("llama lora v one layer", c);
    c = small("gpt", 1, 64, 2, 1, 512);
    c.model.positionalEncoding = "rope";
    c.train.precision = "bf16";
    c.lora.rank = 4;
    c.lora.targets = {"mlp"};
    c.data.valFraction = 0.1;
    rows.emplace_back("gpt rope bf16 lora mlp", c);
    requireWithinBar(rows, true);
}

// A checkpointed block's first pass runs without grad. The built-in GPT's
// fc and gelu outputs are temporaries of the statement that makes the
// residual sum, so they go after it; the plan released them with what the
// pass would have saved, before the sum (a 2.6 draw, seed 134: -1.00%, the
// peak in the forward). The norm's statistics and fc's input cast go at once.
void TestMemoryPlan::checkpointedGptForwardKeepsStatementTemporaries()
{
    auto rows = planRows();
    auto c = small("gpt", 4, 256, 4, 16, 32);
    c.model.tieEmbeddings = false;
    c.train.precision = "bf16";
    c.train.activationCheckpointing = true;
    rows.emplace_back("gpt ckpt bf16 b16 (drawn; accumulation 1 here)", c);
    c = small("gpt", 3, 128, 2, 16, 32);
    c.model.positionalEncoding = "rope";
    c.train.precision = "bf16";
    c.train.activationCheckpointing = true;
    c.train.gradAccum = 3;
    rows.emplace_back("gpt rope ckpt bf16 accum 3", c);
    requireWithinBar(rows, true);
}

// GPT-2's projections are Conv1D modules: the weight stored [in, out], the
// forward addmm(b, x, W), the weight's gradient x^T . grad. On a CPU whose
// bf16 products go to oneDNN, the transposes choose its blocking, so its
// scratch; the plan sized each as nn.Linear's (grad^T . x), and a
// checkpointed GPT-2 folder peaks at the MLP's output projection's weight
// gradient (-1.20% mixed, -2.01% pure bf16, before). The step's peak: pure
// bf16's checkpointed forward is planned keeping what a pass with grad keeps
// (+4.5% on that phase here, never its step's peak).
void TestMemoryPlan::conv1dProjectionsTransposeTheirProducts()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    writeHfFolder(dir.path().toStdString(),
                  R"({"model_type": "gpt2", "vocab_size": 256, "n_embd": 128, "n_layer": 3, "n_head": 4,
                      "n_inner": 256, "n_positions": 64, "tie_word_embeddings": false})",
                  256);
    auto c = small("hf", 3, 128, 4, 16, 32);
    c.model.tieEmbeddings = false;
    c = onFolder(dir.path(), c);
    c.train.activationCheckpointing = true;
    auto rows = planRows();
    for (const char* precision : {"bf16", "bf16-pure"}) {
        c.train.precision = precision;
        rows.emplace_back(std::string("gpt2 folder ckpt ") + precision, c);
    }
    requireWithinBar(rows);
}

// A checkpoint saves the CPU generator's state (5,056 bytes) before its
// block runs without grad; the plans added it once the block had run, so a
// forward whose peak is a block's own pass was planned short of it (a small
// GPT-2 folder with LoRA on c_fc, fp32: -1.25% on the forward, before; this
// row -0.93%).
void TestMemoryPlan::checkpointSavesTheGeneratorStateFirst()
{
    auto rows = planRows();
    auto c = small("gpt", 2, 48, 6, 1, 48);
    c.train.activationCheckpointing = true;
    c.lora.rank = 4;
    c.lora.targets = {"mlp"};
    rows.emplace_back("gpt lora mlp ckpt fp32 b1", c);
    requireWithinBar(rows, true);
}

// The trainer's GPT-2 made its embeddings as the operands of one +, whose
// order C++ leaves to the compiler (GCC: the positions' first), so autograd
// ran the tokens' gradient first, while the positions' part of the sum's
// gradient was still held; the plan follows transformers' order (and the
// built-in GPT's): tokens, then positions. Under the bar either way (-0.28%
// before), so held to 0.1%: the plan is exact to the tensor here.
void TestMemoryPlan::gpt2FolderEmbedsTokensFirst()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const auto error = plannedError("tied gpt2 folder b1", tiedGpt2Folder(dir.path()));
    QVERIFY2(std::abs(error) < 0.001, qPrintable(QString("planned %1% off").arg(100 * error)));
}

// Every checkpointed block's saved generator state goes with the graph,
// after the embedding's gradient, on LibTorch 1.13 too (the plan released
// each with its block's backward there): a tied GPT-2 folder peaks at the
// embedding's gradient with both states still held (-0.71% before).
void TestMemoryPlan::checkpointStatesGoWithTheGraph()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    auto c = tiedGpt2Folder(dir.path());
    c.train.activationCheckpointing = true;
    auto rows = planRows();
    rows.emplace_back("tied gpt2 folder ckpt b1", c);
    requireWithinBar(rows, true);
}

// A LoRA adapter's backward is four bf16 products (B's gradient, that of
// x A^T, A's, x's). Their outputs are small, but oneDNN's scratch need not
// be: for B's gradient over 189 rows here it asks for 48,512 bytes for a
// 240-byte output, and the step peaks there (-1.93% before; drawn with odd
// widths: d_ff 99, 63 positions, batch 3).
void TestMemoryPlan::adapterGradientsTakeOneDnnScratch()
{
    auto rows = planRows();
    auto c = small("gpt", 1, 60, 6, 3, 63);
    c.model.dFf = 99;
    c.model.positionalEncoding = "sinusoidal";
    c.model.dropout = 0.1;
    c.train.precision = "bf16-pure";
    c.train.activationCheckpointing = true;
    c.lora.rank = 2;
    c.lora.targets = {"mlp"};
    rows.emplace_back("gpt pure lora mlp d_ff 99", c);
    requireWithinBar(rows, true);
}

// A checkpointed Llama (2 layers, d_model 144, 6 heads) with LoRA on the
// attention and an MLP narrower than the model (d_ff 99).
RunConfig narrowMlpLoraLlama(int batch, int seq)
{
    auto c = small("llama", 2, 144, 6, batch, seq);
    c.model.dFf = 99;
    c.model.tieEmbeddings = false;
    c.train.activationCheckpointing = true;
    c.lora.rank = 4;
    c.lora.targets = {"attn"};
    return c;
}

// A Llama with LoRA on the attention and an MLP narrower than the model
// (d_ff 99 < d_model 144), checkpointed, peaks where the attention's and the
// norms' tensors are, which the MLP's usually outweigh:
// - in a block's pass without grad, the rotated q is a local of the
//   attention until it returns, after o_proj; the plan freed it once the
//   scores were made (the forward -2.60% on 1.13, before);
// - on 2.x an RMSNorm's backward holds two activations more at once than on
//   1.13, where mean's saved x^2 goes first (the step -3.02% in fp32, -1.71%
//   mixed on 2.6, before; the mixed row is now +0.68%: the gate and up input
//   gradients' scratch is counted on top of the norm's tensors).
void TestMemoryPlan::narrowMlpLlamaWithLoraOnAttention()
{
    auto rows = planRows();
    for (const char* precision : {"fp32", "bf16"}) {
        auto c = narrowMlpLoraLlama(9, 17);
        c.model.nKvHead = 1;
        c.train.precision = precision;
        rows.emplace_back(std::string("llama d_ff 99 lora attn ") + precision, c);
    }
    requireWithinBar(rows, true);
}

// At batch 1 without grouped heads the v projection goes to the product
// with the probabilities uncopied. Where the probabilities need no gradient
// (a checkpointed block's pass without grad) v is not saved, but it is a
// local of the attention until it returns, after o_proj; the plan freed it
// with the product (the forward -1.34%, before, on both versions).
void TestMemoryPlan::unsavedValuesLiveUntilTheAttentionReturns()
{
    auto rows = planRows();
    rows.emplace_back("llama b1 d_ff 99 lora attn", narrowMlpLoraLlama(1, 64));
    requireWithinBar(rows, true);
}

// A tied head's two gradients meet in the weight's input buffer. Under
// autocast on LibTorch 2.x the head's arrives as an fp32 cast of its own and
// the embedding's is added into it in place; the plan summed them into a
// third (a --families draw, GPT-NeoX at batch 1: +5.7%). In fp32 the head's
// is a transposed product's, and 2.x still sums anew, as 1.13 always does.
void TestMemoryPlan::tiedHeadGradientUnderAutocast()
{
    auto rows = planRows();
    for (const char* precision : {"bf16", "fp32"}) {
        auto c = small("gpt", 2, 64, 2, 1, 31);
        c.model.positionalEncoding = "rope";
        c.train.precision = precision;
        c.optim.optimizer = "sgd";
        c.optim.momentum = 0;
        rows.emplace_back(std::string("gpt tied b1 ") + precision, c);
        c.model.type = "llama";
        c.model.tieEmbeddings = true;
        rows.emplace_back(std::string("llama tied b1 ") + precision, c);
    }
    requireWithinBar(rows, true);
}

// Every run is its own check: the estimate is stored at launch beside the
// measured peak, and a peak more than 10% over it is reported with its phase.
void TestMemoryPlan::runsRecordTheirEstimate()
{
    QTemporaryDir dir;
    auto c = small("llama", 2, 64, 4, 8, 32);
    c.train.steps = 3;
    c.train.evalEvery = 3;
    SessionOptions options;
    options.dbPath = dir.filePath("runs.db").toStdString();
    RunSession session(c, options);
    const auto outcome = session.run({});
    QCOMPARE(outcome.status, RunStatus::Finished);
    const auto expected = plannedEstimate(c).tensorPeakBytes;
    QCOMPARE(outcome.estimatedPeakBytes, expected);
    QCOMPARE(outcome.measuredPeakPhase, std::string("backward"));
    RunStore store(options.dbPath, RunStore::Mode::ReadOnly);
    const auto run = store.run(outcome.runId);
    QCOMPARE(run->estimatedPeakBytes, std::optional<std::int64_t>(expected));
    QCOMPARE(run->measuredPeakBytes, std::optional<std::int64_t>(outcome.measuredPeakBytes));
    const double error = static_cast<double>(expected - outcome.measuredPeakBytes) / static_cast<double>(outcome.measuredPeakBytes);
    QVERIFY2(std::abs(error) < 0.01, qPrintable(QString::number(error)));
    QVERIFY(run->estimateJson.find("\"components\"") != std::string::npos);
    for (const auto& e : store.events(outcome.runId)) QVERIFY(e.kind != "memory_estimate");

    QCOMPARE(memoryEstimateWarning(1000, 1100, "backward", 3), std::string());
    const auto warning = memoryEstimateWarning(100 << 20, 120 << 20, "backward", 7);
    QVERIFY2(warning.find("step 7") != std::string::npos && warning.find("during backward") != std::string::npos
                 && warning.find("by 20%") != std::string::npos,
             warning.c_str());
    QCOMPARE(memoryEstimateWarning(0, 5000, "forward", 1), std::string());

    // On a GPU the run's estimate is the planner's for that card: "auto"
    // resolved there and its compute capability's cuBLAS workspaces and
    // context (it was planned as an unknown GPU, other figures on an H100).
    auto gpuConfig = c;
    gpuConfig.device = "auto";
    gpuConfig.train.precision = "auto";
    const auto h100 = GpuCatalogue::bundled().resolve("H100");
    const TargetPlan planned = planOnTarget(gpuConfig, std::optional<GpuTarget>(h100));
    QCOMPARE(planned.setup.precision, std::string("bf16"));
    const auto onH100 = memoryPlanOf(gpuConfig, planned.arch, planned.setup.precision);
    const auto expectedOnH100 = onH100.at(planned.setup.batch, planned.setup.seqLen, planned.setup);
    const auto recorded = launchEstimate(gpuConfig, "cuda:0", h100.gpu.cc);
    QCOMPARE(recorded.peakBytes, expectedOnH100.peakBytes);
    QCOMPARE(recorded.terms.size(), expectedOnH100.terms.size());
    for (std::size_t i = 0; i < recorded.terms.size(); ++i) {
        QCOMPARE(recorded.terms[i].name, expectedOnH100.terms[i].name);
        QCOMPARE(recorded.terms[i].bytes, expectedOnH100.terms[i].bytes);
    }
    // What was recorded before: the trainer's precision on a GPU of no capability.
    auto withoutCard = setupFor(gpuConfig);
    withoutCard.gpu = true;
    withoutCard.precision = "bf16";
    QVERIFY2(onH100.at(withoutCard.batch, withoutCard.seqLen, withoutCard).peakBytes != recorded.peakBytes,
             "an H100's workspaces and context differ from a card of unknown capability's");
    QCOMPARE(launchEstimate(c, "cpu", std::nullopt).tensorPeakBytes, expected);
}

// A launch on a GPU in mixed precision ("auto" there) is checked against the
// device's memory with its own step's plan, derived as the run starts (the
// check said only that it is planned from its own step, and a run far too
// big for the card started and ran out of memory).
void TestMemoryPlan::launchChecksMixedPrecisionAgainstTheDevice()
{
    auto c = small("llama", 2, 64, 4, 4096, 256);
    c.device = "cuda:0";
    c.train.precision = "auto";
    DeviceInfo t4;
    t4.index = 0;
    t4.name = "Tesla T4";
    t4.cc = {7, 5};
    t4.totalBytes = 1LL << 30;
    const LocalMachine local{true, 1, {t4}, 8LL << 30};
    auto findings = launchPreflight(c, local);
    const auto over = std::find_if(findings.begin(), findings.end(), [](const Finding& f) { return f.kind == "memory_over_budget"; });
    QVERIFY(over != findings.end());
    QCOMPARE(over->severity, Severity::Error);
    QVERIFY2(over->cause.find(" or more during") == std::string::npos, over->cause.c_str()); // its own step's plan, not a bound
    // What fits is passed.
    c.train.batchSize = 2;
    findings = launchPreflight(c, local);
    QVERIFY(std::none_of(findings.begin(), findings.end(), [](const Finding& f) {
        return f.kind == "memory_over_budget" || f.kind == "memory_not_planned";
    }));
}

// A run of a folder whose head size is not hidden / heads records the plan
// of its own step, as estimate and the Memory planner give it (a plan of
// hidden / heads as the head size was once recorded, under the measured
// peak by more than the 10% that warns, and the run warned).
void TestMemoryPlan::runOfAFolderWithItsOwnHeadSizeRecordsItsDerivedPlan()
{
    QTemporaryDir dir;
    writeHfFolder(dir.path().toStdString(),
                  R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 32,
                      "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64,
                      "max_position_embeddings": 128, "hidden_act": "silu", "tie_word_embeddings": false})",
                  64);
    auto c = onFolder(dir.path(), small("hf", 2, 32, 8, 4, 48));
    c.train.steps = 3;
    c.train.evalEvery = 3;
    SessionOptions options;
    options.dbPath = dir.filePath("runs.db").toStdString();
    RunSession session(c, options);
    const auto outcome = session.run({});
    QCOMPARE(outcome.status, RunStatus::Finished);
    const auto derived = deriveStep(c).at(4, 48).tensorPeakBytes;
    std::printf("own head size: measured %lld, derived %lld\n", static_cast<long long>(outcome.measuredPeakBytes),
                static_cast<long long>(derived));
    QCOMPARE(outcome.estimatedPeakBytes, derived);
    QCOMPARE(outcome.measuredPeakBytes, derived);
    RunStore store(options.dbPath, RunStore::Mode::ReadOnly);
    for (const auto& e : store.events(outcome.runId)) QVERIFY2(e.kind != "memory_estimate", e.message.c_str());
}

// A GPU's out-of-memory message explained with a folder's config whose
// head size is its own: the batch said to fit in the memory the message
// reports is its own step's answer (a plan with hidden / heads as the head
// size once named a batch that did not fit).
void TestMemoryPlan::outOfMemoryOfAFolderWithItsOwnHeadSize()
{
    QTemporaryDir dir;
    std::ofstream(dir.filePath("config.json").toStdString())
        << R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
              "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
              "max_position_embeddings": 2048, "hidden_act": "silu", "tie_word_embeddings": false})";
    // (The sizes a run records from the folder.)
    auto c = onFolder(dir.path(), small("hf", 22, 2048, 32, 64, 256));
    c.model.nKvHead = 4;
    c.model.vocabSize = 32000;
    c.model.dFf = 5632;
    c.train.precision = "bf16";
    c.lora.rank = 16;
    c.lora.targets = {"q_proj", "v_proj"};
    const std::string message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 200.00 MiB. GPU 0 has a total "
        "capacity of 14.74 GiB of which 4.19 MiB is free. Including non-PyTorch memory, this process has 14.73 GiB memory in "
        "use. Of the allocated memory 14.50 GiB is allocated by PyTorch, and 30.00 MiB is reserved by PyTorch but unallocated.";
    const auto findings = explainFailure(message, &c, "cuda:0");
    const auto& oom = findings.front();
    QCOMPARE(oom.kind, std::string("cuda_oom"));
    QVERIFY2(oom.numbers.count("fitting_batch"), oom.fix.c_str());
    const auto said = static_cast<std::int64_t>(oom.numbers.at("fitting_batch"));
    const auto setup = planOnTarget(c, true, std::nullopt).setup;
    const auto budget = static_cast<std::int64_t>(14.74 * 1024 * 1024 * 1024);
    auto traced = c;
    traced.train.precision = setup.precision;
    const auto step = deriveStep(traced);
    std::printf("own head size on 14.74 GiB: said %lld, its step %lld\n", static_cast<long long>(said),
                static_cast<long long>(step.largestBatch(256, setup, budget)));
    QCOMPARE(said, step.largestBatch(256, setup, budget));
    QVERIFY(step.at(said, 256, setup).peakBytes <= budget);
    QVERIFY(step.at(said + 1, 256, setup).peakBytes > budget);
}

// A QLoRA run of the built-in Llama on the addition task (its one sequence
// length: the step is traced at the model's widths in the run's own process)
// records the plan `estimate` gives and what it measures. The run's own
// model, alive while its launch estimate is traced, is not the traced step's:
// it counted as resident (+3% here) until the trace took the bytes live
// before its trainer as its baseline.
void TestMemoryPlan::runOfAQuantizedModelRecordsItsDerivedPlan()
{
    QTemporaryDir dir;
    auto c = small("llama", 2, 128, 4, 16, 0);
    c.data.source = "addition";
    c.data.digits = 2;
    c.data.seqLen = 0;
    c.model.quantize = "nf4";
    c.lora.rank = 8;
    c.train.steps = 3;
    c.train.evalEvery = 3;
    SessionOptions options;
    options.dbPath = dir.filePath("runs.db").toStdString();
    RunSession session(c, options);
    const auto outcome = session.run({});
    QCOMPARE(outcome.status, RunStatus::Finished);
    const auto derived = deriveStep(c).at(16, effectiveSeqLen(c)).tensorPeakBytes;
    std::printf("nf4 llama: measured %lld, derived %lld, run's estimate %lld\n", static_cast<long long>(outcome.measuredPeakBytes),
                static_cast<long long>(derived), static_cast<long long>(outcome.estimatedPeakBytes));
    QCOMPARE(outcome.estimatedPeakBytes, derived);
    QVERIFY(std::llabs(outcome.measuredPeakBytes - derived) <= 4096);
}

// On a GPU each allocation is rounded to the caching allocator's 512 bytes
// on its own; a sum the replay allocates as one and releases in parts rounds
// differently, and releasing the rounded parts took more than the category
// held: Llama 2 7B and 13B LoRA rows at odd lengths planned a workspace of
// -0.03 MiB (-512 bytes a layer; LoRA is planned from its own step since).
// Every term is live bytes, never negative, and the terms add up to the peak.
void TestMemoryPlan::noTermIsNegative()
{
    // On a GPU, at odd lengths (a Llama of two layers, eager and, on
    // LibTorch 2.x, fused), in each precision, with accumulation and data
    // parallel (the data the trace did not draw, the reducer's buckets:
    // terms of their own).
    auto c = small("llama", 2, 64, 4, 1, 129);
    c.train.gradAccum = 3;
    for (const char* precision : {"fp32", "bf16-pure", "bf16", "fp16"}) {
        for (const char* attention : {"eager", "sdpa"}) {
            if (std::string(attention) == "sdpa" && builtTorchMajor() < 2) continue;
            // (SDPA in fp32 runs the memory-efficient kernel on a GPU, which
            // no device rule sizes yet: a lower bound, derived-plan.md.)
            const bool ruled = !(std::string(attention) == "sdpa" && std::string(precision) == "fp32");
            c.train.precision = precision;
            c.model.attention = attention;
            c.device = std::string(precision) == "fp16" ? "cuda" : "cpu";
            auto s = setupFor(c);
            s.gpu = true;
            s.computeCapability = 90;
            s.gpus = 2;
            const auto plan = memoryPlanOf(c, architectureFor(c), precision);
            for (const std::int64_t seq : {129, 333, 777}) {
                const auto e = plan.at(seq == 333 ? 2 : 1, seq, s);
                QVERIFY2(e.lowerBound == !ruled, qPrintable(QString::fromStdString(plan.notExactOn(s))));
                QVERIFY(std::any_of(e.terms.begin(), e.terms.end(), [](const MemoryTerm& t) { return t.name == "ddp_buckets"; }));
                QVERIFY(std::any_of(e.terms.begin(), e.terms.end(), [](const MemoryTerm& t) { return t.name == "data"; }));
                std::int64_t sum = 0;
                for (const auto& t : e.terms) {
                    QVERIFY2(t.bytes >= 0, qPrintable(QString("%1: %2 bytes (%3 %4, seq %5)")
                                                          .arg(QString::fromStdString(t.name))
                                                          .arg(t.bytes)
                                                          .arg(precision, attention)
                                                          .arg(seq)));
                    sum += t.bytes;
                }
                QCOMPARE(sum, e.peakBytes);
            }
        }
    }
}

// The verdict every surface shows is decided in one function: over 90% of
// the budget is tight, over it does not fit, a precision the card lacks does
// not run whatever the memory; a fix aiming at roomyPeakBytes leaves no warning.
void TestMemoryPlan::oneVerdict()
{
    QCOMPARE(memoryVerdict(90, 100), MemoryVerdict::Fits);
    QCOMPARE(memoryVerdict(91, 100), MemoryVerdict::Tight);
    QCOMPARE(memoryVerdict(100, 100), MemoryVerdict::Tight);
    QCOMPARE(memoryVerdict(101, 100), MemoryVerdict::DoesNotFit);
    QCOMPARE(memoryVerdict(1, 100, "needs compute capability 8.0 or newer"), MemoryVerdict::DoesNotRun);
    QCOMPARE(std::string(verdictKey(MemoryVerdict::Tight)), std::string("tight"));
    for (const std::int64_t budget : {std::int64_t{1}, std::int64_t{9}, std::int64_t{10}, std::int64_t{15826954486},
                                      std::int64_t{84986665370}, std::numeric_limits<std::int64_t>::max()}) {
        const auto room = roomyPeakBytes(budget);
        QCOMPARE(memoryVerdict(room, budget), MemoryVerdict::Fits);
        QVERIFY(memoryVerdict(room + 1, budget) != MemoryVerdict::Fits);
        QVERIFY(static_cast<double>(room) <= 0.9 * static_cast<double>(budget) * (1 + 1e-12));
    }
}

QTEST_GUILESS_MAIN(TestMemoryPlan)


void TestMemoryPlan::presetsMatchPublishedParameterCounts()
{
    const auto& presets = bundledArchitectures();
    QVERIFY(presets.size() >= 12);
    for (const auto& p : presets) {
        QVERIFY2(p.arch.publishedParameters > 0, p.id.c_str());
        // The one count (config/ModelSpec.h) of the config.json as the trainer reads it.
        QVERIFY2(parameterCount(p.model) == p.arch.publishedParameters, p.id.c_str());
    }
    QCOMPARE(findArchitecture("TinyLlama-1.1B").arch.kvHeads, 4);
    QVERIFY_THROWS_EXCEPTION(InputError, findArchitecture("gpt-5"));
}

void TestMemoryPlan::hfConfigImportNamesWhatIsWrong()
{
    const auto a = architectureFromHfConfig(
        R"({"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "hidden_act": "silu"})",
        "q.json");
    QCOMPARE(a.family, std::string("llama"));
    QVERIFY(!a.tieEmbeddings);
    const auto model = modelFromHfConfig(
        R"({"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "hidden_act": "silu"})",
        "q.json");
    QVERIFY(model.qkvBias);
    // embeddings + head + 2 x (q, k, v with biases, o, three MLP matrices, two norms) + final norm
    QCOMPARE(parameterCount(model), 2 * 1000 * 64 + 2 * (64 * 64 + 64 + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64);
    const auto expectError = [](const char* json, const char* needle) {
        try {
            architectureFromHfConfig(json, "bad.json");
            QFAIL(json);
        } catch (const InputError& e) {
            const std::string what = e.what();
            QVERIFY2(what.find("bad.json") != std::string::npos && what.find(needle) != std::string::npos, e.what());
        }
    };
    expectError("{not json", "not valid JSON");
    expectError("[1, 2]", "one JSON object");
    // A family's absent sizes are its transformers defaults, as the trainer
    // reads a folder's config.json (LlamaConfig's: a 7B shape); a look-alike
    // of another model_type has no defaults to fall back on.
    const auto defaults = architectureFromHfConfig(R"({"model_type": "llama", "vocab_size": 10})", "d.json");
    QCOMPARE(defaults.hidden, std::int64_t(4096));
    QCOMPARE(defaults.intermediate, std::int64_t(11008));
    QCOMPARE(defaults.layers, std::int64_t(32));
    expectError(R"({"model_type": "x", "vocab_size": 10})", "hidden_size");
    // Mixture-of-experts is refused, not planned as one dense MLP.
    expectError(R"({"model_type": "mixtral", "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 1,
                    "num_attention_heads": 4, "intermediate_size": 8, "num_local_experts": 8})", "mixture-of-experts");
    expectError(R"({"model_type": "gpt2", "vocab_size": 10, "n_embd": -4, "n_layer": 1, "n_head": 1, "n_positions": 8})", "n_embd");
    expectError(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 1,
                    "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 8})", "num_key_value_heads");
    expectError(R"({"model_type": "x", "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 1,
                    "num_attention_heads": 4, "intermediate_size": 8, "hidden_act": "relu2"})", "hidden_act");
}

void TestMemoryPlan::gpuTermsOfAPlan()
{
    auto gpt2 = presetExperiment("gpt2");
    auto& c = gpt2.config;
    c.train.batchSize = 2;
    c.data.seqLen = 128;
    const auto plan = planOf(c);
    auto setup = setupFor(c);
    const auto cpu = plan.at(2, 128, setup);
    QCOMPARE(cpu.peakBytes, cpu.tensorPeakBytes);

    setup.gpu = true;
    const auto gpu = plan.at(2, 128, setup);
    std::int64_t sum = 0, context = 0;
    for (const auto& t : gpu.terms) {
        sum += t.bytes;
        if (t.name == "cuda_context") context = t.bytes;
    }
    QCOMPARE(sum, gpu.peakBytes); // every byte of the peak is a named term
    QCOMPARE(context, cudaContextFor(0).bytes);
    // The caching allocator model: it allocates at least the tensors and
    // reserves at least what it allocates, in whole segments (2 MiB or more).
    QVERIFY(gpu.allocatedPeakBytes >= gpu.tensorPeakBytes);
    QVERIFY(gpu.reservedPeakBytes >= gpu.allocatedPeakBytes);
    QCOMPARE(gpu.reservedPeakBytes % (2 << 20), 0);
    setup.cudaContextBytes = 123456789; // the user's figure
    QCOMPARE(plan.at(2, 128, setup).peakBytes - gpu.peakBytes, 123456789 - cudaContextFor(0).bytes);
}

// At batch 1 (or with one head) matmul hands bmm head-split views without
// copying them, and a view of GPT's fused qkv keeps all of it alive until the
// product's backward; the position tables are buffers, not parameters. The
// planner missed both: a GPT with RoPE at batch 1 (4 layers, d_model 128,
// seq 256) was planned 3.9% under its measured peak, one head at batch 2
// 4.5% under. An under-estimate can claim a false fit.
// A bf16 product on the CPU takes oneDNN's scratch while it runs, and in a
// small step a weight's gradient product (grad^T . x, whose transposed operand
// oneDNN copies in blocks) made the peak: the plan left it out and was 3.15%
// under for this GPT on the addition task, and 2.24% under with
// checkpointing. It asks oneDNN for each product's scratch now
// (CpuGemmScratch.h): the backward's in the order each projection's backward
// makes them (a biased one, addmm, its input's gradient first; a bias-free
// one, mm, its weight's), and with LoRA the forward's too.
void TestMemoryPlan::bf16ProductsTakeOneDnnScratch()
{
    if (!cpuGemmScratchKnown()) QSKIP(("oneDNN's scratch is not known in this build: " + cpuGemmScratchUnknownReason()).c_str());
    auto rows = planRows();
    auto c = small("gpt", 2, 64, 2, 64, 0);
    onAddition(c, 3);
    c.train.precision = "bf16";
    rows.emplace_back("gpt addition bf16 b64", c);
    c = small("gpt", 3, 128, 4, 16, 128);
    c.train.activationCheckpointing = true;
    c.train.precision = "bf16";
    rows.emplace_back("gpt checkpointing bf16", c);
    // Pure bf16 (-2.33%), and LoRA, where the forward's products (the frozen
    // x W^T, the adapter's x A^T and its product with B) made the peak (-5.23%).
    c = small("gpt", 3, 64, 2, 32, 0);
    c.model.tieEmbeddings = false;
    onAddition(c, 3);
    c.train.precision = "bf16-pure";
    rows.emplace_back("gpt pure bf16 addition", c);
    c = small("gpt", 1, 64, 4, 4, 0);
    onAddition(c, 2);
    c.optim.optimizer = "sgd";
    c.optim.momentum = 0;
    c.lora.rank = 2;
    c.lora.targets = {"mlp"};
    c.train.precision = "bf16";
    rows.emplace_back("gpt lora mlp bf16 addition", c);
    // ... and the gradient of a frozen projection's input, grad . W (-5.22%).
    c = small("gpt", 2, 80, 8, 32, 0);
    c.model.dropout = 0.1;
    onAddition(c, 2);
    c.train.gradAccum = 3;
    c.lora.rank = 4;
    c.lora.targets = {"mlp"};
    c.train.precision = "bf16";
    rows.emplace_back("gpt lora mlp dropout accum 3", c);
    // ... and, without LoRA, a projection's forward product: the MLP output
    // projection's x W^T + b made the peak of this one (-1.30%).
    c = small("gpt", 4, 64, 1, 2, 0);
    c.model.tieEmbeddings = false;
    c.model.dropout = 0.1;
    onAddition(c, 2);
    c.train.gradAccum = 3;
    c.train.activationCheckpointing = true;
    c.optim.optimizer = "sgd";
    c.optim.momentum = 0.9;
    c.train.precision = "bf16";
    rows.emplace_back("gpt forward product bf16", c);
    // ... and with LoRA in pure bf16, a frozen qkv's input gradient, grad . W (-0.64%).
    c = small("gpt", 3, 80, 1, 1, 0);
    c.model.positionalEncoding = "sinusoidal";
    onAddition(c, 2);
    c.train.gradAccum = 2;
    c.train.activationCheckpointing = true;
    c.train.precision = "bf16-pure";
    c.lora.rank = 4;
    c.lora.targets = {"attn", "mlp"};
    rows.emplace_back("gpt pure lora qkv input product", c);
    requireWithinBar(rows);
}

// With LoRA the built-in GPT's MLP dropout noise was released with the rest
// of what the block saved, after the MLP's backward; it goes when the
// dropout's node has run, before the output projection's backward, and the
// gradient through the dropout replaces the branch's. With checkpointing
// the peak is there: 2.48% over (fp32) and 2.22% over (pure bf16).
void TestMemoryPlan::loraMlpDropoutNoiseGoesWithItsNode()
{
    auto rows = planRows();
    auto c = small("gpt", 1, 112, 1, 4, 32);
    c.model.positionalEncoding = "sinusoidal";
    c.model.tieEmbeddings = false;
    c.model.dropout = 0.1;
    c.train.gradAccum = 3;
    c.train.activationCheckpointing = true;
    c.optim.optimizer = "sgd";
    c.optim.momentum = 0;
    c.lora.rank = 4;
    c.lora.targets = {"mlp"};
    rows.emplace_back("gpt lora mlp dropout ckpt", c);
    c = small("gpt", 4, 112, 8, 16, 64);
    c.model.dropout = 0.1;
    c.train.activationCheckpointing = true;
    c.train.precision = "bf16-pure";
    c.lora.rank = 4;
    c.lora.targets = {"mlp"};
    rows.emplace_back("gpt pure lora mlp dropout ckpt", c);
    requireWithinBar(rows);
}

namespace {

// A small one-head Llama on the addition task.
RunConfig additionLlama(int layers, const std::string& precision)
{
    auto c = small("llama", layers, 64, 1, 64, 0);
    onAddition(c, 3);
    c.train.precision = precision;
    return c;
}

} // namespace

// LoRA on the MLP only: in the first block nothing before the MLP requires
// grad (frozen embedding and attention), so the gradient of the block's
// output goes once the MLP's output projection has used it, and the norm's
// and attention's backward never run. (Planned 4.8% over on both LibTorch
// versions when the replay kept that gradient to the end.)
void TestMemoryPlan::firstBlockWithAFrozenAttentionLetsItsGradientGo()
{
    auto rows = planRows();
    auto c = additionLlama(1, "fp32");
    c.lora.rank = 4;
    c.lora.targets = {"mlp"};
    rows.emplace_back("llama L1 lora mlp", c);
    c.lora.targets = {"down_proj"};
    rows.emplace_back("llama L1 lora down", c);
    requireWithinBar(rows);
}

// From LibTorch 2.0 zero_grad frees the gradients, so a LoRA step starts
// backward without the adapters' gradients and each appears with its
// adapter's backward. A small model at rank 8 makes them several percent of
// the peak. (Planned 4.7% over on 2.x when all were counted from backward's
// start.)
void TestMemoryPlan::adapterGradientsAppearWithTheirBackward()
{
    auto rows = planRows();
    auto c = small("llama", 2, 48, 1, 4, 0);
    onAddition(c, 3);
    c.model.tieEmbeddings = true;
    c.optim.optimizer = "sgd";
    c.optim.momentum = 0.9;
    c.lora.rank = 8;
    c.lora.targets = {"mlp"};
    rows.emplace_back("llama L2 d48 lora r8 mlp", c);
    c.lora.targets = {"attn", "mlp"};
    rows.emplace_back("llama L2 d48 lora r8 all", c);
    requireWithinBar(rows);
}

// The final RMSNorm's backward: x^2's gradient (mean's, then pow's three
// temporaries) beside the gradient through x * rsqrt, which has no other
// gradient to be added to. LibTorch 1.13 first frees the x^2 mean saved;
// from 2.0 mean saves nothing, and that step is the step's peak under
// autocast when the logits are small. (Planned 4% under on 2.x.)
void TestMemoryPlan::finalRmsNormBackwardHoldsPowsTemporaries()
{
    auto rows = planRows();
    auto c = additionLlama(1, "bf16");
    rows.emplace_back("llama L1 addition bf16", c);
    c.lora.rank = 4;
    c.lora.targets = {"o_proj"};
    rows.emplace_back("llama L1 lora o bf16", c);
    requireWithinBar(rows);
}

// Under checkpointing each block's node keeps the generator's state, and all
// of them stay until the first block's backward is over (the graph frees
// them: checkpointStatesGoWithTheGraph). And where zero_grad freed the
// gradients, a block's norm and bias gradients appear with its backward, not
// at its end. (A 4-layer GPT in bf16 was planned 0.58% under on 2.x.)
void TestMemoryPlan::checkpointStatesAndBlockBiasesFollowLibTorch()
{
    auto rows = planRows();
    auto c = small("gpt", 4, 80, 2, 4, 0);
    c.model.positionalEncoding = "sinusoidal";
    c.model.tieEmbeddings = false;
    onAddition(c, 2);
    c.train.activationCheckpointing = true;
    c.train.precision = "bf16";
    rows.emplace_back("gpt L4 checkpointing bf16", c);
    c.train.precision = "fp32";
    rows.emplace_back("gpt L4 checkpointing fp32", c);
    requireWithinBar(rows);
}

// LoRA on the attention: the first block's input (the frozen embedding's
// output) needs no gradient, so the gradient of h goes once the attention's
// output projection has used it, and the input norm's backward and the
// residual sum never run. (Planned 2.7% over when the replay kept it.)
void TestMemoryPlan::firstBlockWithAFrozenInputLetsItsGradientGo()
{
    auto rows = planRows();
    auto c = small("gpt", 1, 96, 8, 16, 128);
    c.model.tieEmbeddings = false;
    c.optim.optimizer = "sgd";
    c.optim.momentum = 0;
    c.lora.rank = 2;
    c.lora.targets = {"attn"};
    rows.emplace_back("gpt L1 lora attn fp32", c);
    c.model.type = "llama";
    c.model.positionalEncoding = "rope";
    rows.emplace_back("llama L1 lora attn fp32", c);
    requireWithinBar(rows);
}

// Grouped-query attention expands the keys and the values to every head,
// both copies made before the scores (train/Layers.cpp), so both are live
// at the softmax. (Planned 1.3% under when the values' copy came after.)
void TestMemoryPlan::groupedKeysAndValuesAreBothExpandedBeforeTheScores()
{
    auto rows = planRows();
    auto c = small("llama", 1, 128, 8, 8, 48);
    c.model.nKvHead = 2;
    c.model.tieEmbeddings = true;
    c.train.gradAccum = 2;
    c.train.precision = "bf16";
    c.lora.rank = 4;
    c.lora.targets = {"down_proj"};
    rows.emplace_back("llama gqa lora down bf16", c);
    c.train.precision = "fp32";
    rows.emplace_back("llama gqa lora down fp32", c);
    requireWithinBar(rows);
}

void TestMemoryPlan::batchOneAndOneHeadAreNotUnderPlanned()
{
    std::vector<std::pair<std::string, RunConfig>> cases;
    auto rope = small("gpt", 4, 128, 4, 1, 256);
    rope.model.positionalEncoding = "rope";
    cases.emplace_back("gpt rope b1", rope);
    auto oneHead = small("gpt", 2, 128, 1, 2, 128);
    oneHead.model.positionalEncoding = "rope";
    cases.emplace_back("gpt rope 1 head b2", oneHead);
    auto mixed = rope;
    mixed.train.precision = "bf16";
    cases.emplace_back("gpt rope bf16 b1", mixed);
    auto lora = small("gpt", 2, 128, 4, 1, 128);
    lora.model.positionalEncoding = "rope";
    lora.lora.rank = 4;
    cases.emplace_back("gpt rope lora b1", lora);
    auto sinusoidal = small("gpt", 2, 128, 4, 1, 128);
    sinusoidal.model.positionalEncoding = "sinusoidal";
    cases.emplace_back("gpt sinusoidal b1", sinusoidal);
    auto llama = small("llama", 2, 128, 1, 1, 128);
    cases.emplace_back("llama 1 head b1", llama);
    for (const auto& [name, config] : cases) {
        const double error = plannedError(name, config);
        QVERIFY2(error >= -0.005 && error <= 0.02, qPrintable(QString::fromStdString(name)));
    }
}

// Pure bf16 on a Llama-family model was planned as the fp32 replay with
// 2-byte elements: 15-30% under the measured peak, since RMSNorm, the
// softmax and the loss compute in fp32 copies and the bf16 AdamW works in
// fp32. Measured against the plan with and without checkpointing,
// accumulation, grouped keys and values, and batch 1.
void TestMemoryPlan::pureBf16LlamaFollowsItsFp32Islands()
{
    std::vector<std::pair<std::string, RunConfig>> cases;
    auto base = small("llama", 2, 64, 4, 8, 32);
    base.train.precision = "bf16-pure";
    cases.emplace_back("llama pure b8 t32", base);
    auto longer = small("llama", 2, 64, 4, 4, 128);
    longer.train.precision = "bf16-pure";
    cases.emplace_back("llama pure b4 t128", longer);
    auto one = small("llama", 3, 48, 2, 1, 40);
    one.train.precision = "bf16-pure";
    one.train.activationCheckpointing = true;
    cases.emplace_back("llama pure b1 ckpt", one);
    auto grouped = small("llama", 2, 64, 4, 3, 48);
    grouped.model.nKvHead = 2;
    grouped.model.tieEmbeddings = true;
    grouped.train.precision = "bf16-pure";
    grouped.train.gradAccum = 3;
    cases.emplace_back("llama pure gqa tied accum3", grouped);
    for (const auto& [name, config] : cases) {
        const double error = plannedError(name, config);
        QVERIFY2(error >= -0.005 && error <= 0.02, qPrintable(QString::fromStdString(name)));
        const auto est = plannedEstimate(config);
        for (const auto& n : est.notes) QVERIFY2(n.find("pure bf16") == std::string::npos, n.c_str());
    }
}

// Pure bf16 with LoRA and with dropout (the fp32 islands with adapters, the
// fp32 softmax's dropout), adapters on single projections (only what the
// adapted side's gradient needs is saved), and one key/value head at batch 1
// (the expanded keys and values are views, not copies): they were 18% and
// 14% under, 4.7% and 1.3% over; now bf16 within 2% (never 0.5% under) and
// fp32 within 0.5%.
void TestMemoryPlan::loraDropoutAndOneKvHeadFollowTheModel()
{
    // A Llama of `batch` x `seq` in `precision`, with rank-4 adapters on `targets` (none: full fine-tuning).
    const auto llama = [](int d, int batch, int seq, const std::string& precision,
                          const std::vector<std::string>& targets) {
        auto c = small("llama", 2, d, 4, batch, seq);
        c.train.precision = precision;
        c.lora.rank = targets.empty() ? 0 : 4;
        c.lora.targets = targets;
        return c;
    };
    std::vector<std::pair<std::string, RunConfig>> cases;
    cases.reserve(8);
    cases.emplace_back("llama pure lora q,v", llama(64, 8, 32, "bf16-pure", {"q_proj", "v_proj"}));
    auto pureLoraK = llama(64, 1, 64, "bf16-pure", {"k_proj"});
    pureLoraK.train.activationCheckpointing = true;
    cases.emplace_back("llama pure lora k b1 ckpt", pureLoraK);
    auto pureDrop = llama(64, 4, 64, "bf16-pure", {});
    pureDrop.model.dropout = 0.1;
    cases.emplace_back("llama pure dropout", pureDrop);
    auto pureDropLora = llama(64, 4, 64, "bf16-pure", {"v_proj", "up_proj"});
    pureDropLora.model.dropout = 0.1;
    cases.emplace_back("llama pure dropout lora v,up", pureDropLora);
    cases.emplace_back("llama bf16 lora v", llama(64, 8, 32, "bf16", {"v_proj"}));
    auto oneKv = llama(32, 1, 45, "fp32", {});
    oneKv.model.nKvHead = 1;
    cases.emplace_back("llama one kv head b1", oneKv);
    auto oneKvLora = llama(32, 1, 45, "bf16", {"q_proj", "v_proj"});
    oneKvLora.model.nKvHead = 1;
    cases.emplace_back("llama one kv head b1 lora", oneKvLora);
    for (const auto& [name, config] : cases) {
        // bf16 within the accuracy bar (LibTorch 2.x plans these up to 0.7%
        // over); fp32 to a few bytes on 1.13 and 2.x alike.
        const double error = plannedError(name, config), over = config.train.precision == "fp32" ? 0.005 : 0.02;
        QVERIFY2(error >= -0.005 && error <= over, qPrintable(QString::fromStdString(name)));
        const auto est = plannedEstimate(config);
        for (const auto& n : est.notes) QVERIFY2(n.find("not yet exact") == std::string::npos, n.c_str());
    }
}

// What scaled_dot_product_attention's kernels allocate, worked by hand from
// LibTorch 2.6's source (FusedAttention.h); the CPU figures are those
// `measure --trace` shows for the same shapes.
void TestMemoryPlan::fusedAttentionBuffersFollowTheKernels()
{
    // The CPU flash kernel's blocks (a recorded step's rule), head dim 16,
    // 4 heads, one thread. fp32, 100 positions: blocks of 32 queries by 100 keys.
    QCOMPARE(cpuFlashScratchBytes(false, 1, 4, 100, 16, 4, 1), std::int64_t{(32 * 100 + 2 * 32 + 32 * 16) * 4}); // scores, max, sum, output block
    QCOMPARE(cpuFlashScratchBytes(true, 1, 4, 100, 16, 4, 1), std::int64_t{2 * 32 * 100 * 4 + 32 * 4}); // scores and their gradient, row sums
    // 800 positions: 256 queries by 512 keys.
    QCOMPARE(cpuFlashScratchBytes(false, 1, 4, 800, 16, 4, 1), std::int64_t{(256 * 512 + 2 * 256 + 256 * 16) * 4});
    QCOMPARE(cpuFlashScratchBytes(true, 1, 4, 800, 16, 4, 1), std::int64_t{2 * 256 * 512 * 4 + 256 * 4});
    // Two threads, 200 positions: two sets of 64 by 200 blocks.
    QCOMPARE(cpuFlashScratchBytes(false, 1, 4, 200, 16, 4, 2), std::int64_t{2 * (64 * 200 + 2 * 64 + 64 * 16) * 4});
    QCOMPARE(cpuFlashScratchBytes(true, 1, 4, 200, 16, 4, 2), std::int64_t{2 * (2 * 64 * 200 * 4 + 64 * 4)});

    // A GPU: the flash kernel on an A100 in bf16 (head dim 128), dropout and all.
    auto f = gpuFusedAttentionBytes(2, 32, 1000, 128, 2, 80, false, true);
    QVERIFY(f.fused);
    QVERIFY(f.mergeCopies); // its output takes q's layout
    QCOMPARE(f.out, std::int64_t{2 * 1000 * 32 * 128 * 2});
    QCOMPARE(f.lse, std::int64_t{2 * 32 * 1000 * 4});
    QCOMPARE(f.forwardScratch, std::int64_t{0});
    // softmax_d and the fp32 dq accumulator, T rounded up to 128.
    QCOMPARE(f.backwardTemps, std::int64_t{2 * 32 * 1024 * 4 + 2 * 1024 * 32 * 128 * 4});
    // Left unrounded for the fit map's compiled polynomials.
    QCOMPARE(gpuFusedAttentionBytes(2, 32, 1000, 128, 2, 80, false, true, false).backwardTemps,
             std::int64_t{2 * 32 * 1000 * 4 + 2 * 1000 * 32 * 128 * 4});
    // fp32 on an A100, fp16 on a T4, a head dim of 200 in bf16 on an RTX
    // 3090: the memory-efficient kernel, its output [B, T, H, D], its
    // log-sum-exp's T rounded up to 32, and in backward a delta and a
    // workspace of about an fp32 copy of q (blocks of 64 queries, the head
    // dim rounded up to 32).
    for (const auto& [D, e, cc, fp16] : {std::tuple{std::int64_t{128}, std::int64_t{4}, 80, false},
                                         std::tuple{std::int64_t{128}, std::int64_t{2}, 75, true},
                                         std::tuple{std::int64_t{200}, std::int64_t{2}, 86, false}}) {
        f = gpuFusedAttentionBytes(2, 32, 1000, D, e, cc, fp16, true);
        const std::int64_t roundedD = (D + 31) / 32 * 32;
        QVERIFY2(f.fused && !f.math, qPrintable(QString("sm%1 head dim %2").arg(cc).arg(D)));
        QVERIFY(!f.mergeCopies);
        QCOMPARE(f.lse, std::int64_t{2 * 32 * 1024 * 4});
        QCOMPARE(f.backwardTemps, std::int64_t{2 * 32 * 1024 * 4 + 2 * 32 * 1024 * roundedD * 4});
    }
    // bf16 below sm80, or a card newer than LibTorch 2.6 knows: the math fallback.
    for (const int cc : {75, 100}) {
        f = gpuFusedAttentionBytes(2, 32, 1000, 128, 2, cc, false, true);
        QVERIFY(!f.fused && f.math);
    }
}

// On the CPU, LibTorch 2.x: the plan of SDPA against the measured peak,
// for the flash kernel in each precision (fp32, mixed and pure bf16, LoRA,
// checkpointing, grouped and single key/value heads, one head at batch 1)
// and for the math fallback dropout sends it to (in bf16 it computes in
// fp32). The plan used to leave out the kernel's output, log-sum-exp and
// blocks: up to 6.1% under, and 27.8% under with dropout; the math fallback
// planned as eager was up to 14% under in bf16.
void TestMemoryPlan::fusedAttentionOnTheCpuFollowsTheKernel()
{
    if (builtTorchMajor() < 2) QSKIP("SDPA needs LibTorch 2.x (the torch2 tree runs this)");
    auto rows = planRows();
    const auto sdpa = [](RunConfig c) {
        c.model.attention = "sdpa";
        return c;
    };
    rows.emplace_back("gpt fp32", sdpa(small("gpt", 2, 64, 4, 8, 64)));
    auto c = sdpa(small("gpt", 2, 64, 4, 4, 100));
    c.model.positionalEncoding = "rope";
    c.train.precision = "bf16";
    rows.emplace_back("gpt rope bf16", c);
    c = sdpa(small("gpt", 2, 64, 4, 8, 64));
    c.train.precision = "bf16-pure";
    rows.emplace_back("gpt pure bf16", c);
    c = sdpa(small("gpt", 2, 64, 4, 8, 64));
    c.model.dropout = 0.1;
    rows.emplace_back("gpt dropout (math)", c);
    // The math fallback in bf16 computes in fp32.
    c.train.precision = "bf16";
    c.train.activationCheckpointing = true;
    rows.emplace_back("gpt dropout bf16 ckpt (math)", c);
    c = sdpa(small("llama", 2, 64, 4, 8, 64));
    c.model.nKvHead = 2;
    c.model.dropout = 0.1;
    c.train.precision = "bf16-pure";
    rows.emplace_back("llama dropout pure gqa (math)", c);
    // In fp32 at batch 1 or with one head bmm saves q and k scaled, and v itself.
    c = sdpa(small("gpt", 2, 128, 4, 1, 128));
    c.model.dropout = 0.1;
    rows.emplace_back("gpt dropout b1 (math)", c);
    c = sdpa(small("gpt", 2, 64, 1, 4, 128));
    c.model.dropout = 0.1;
    c.lora.rank = 4;
    rows.emplace_back("gpt dropout one head lora (math)", c);
    c = sdpa(small("llama", 2, 128, 4, 1, 128));
    c.model.nKvHead = 1;
    c.model.dropout = 0.1;
    rows.emplace_back("llama dropout kv1 b1 (math)", c);
    c = sdpa(small("llama", 2, 64, 4, 8, 64));
    c.model.dropout = 0.1;
    c.train.precision = "bf16";
    c.lora.rank = 4;
    c.lora.targets = {"v_proj"};
    rows.emplace_back("llama dropout lora v (math)", c);
    c = sdpa(small("llama", 2, 64, 4, 8, 64));
    c.model.nKvHead = 2;
    rows.emplace_back("llama gqa fp32", c);
    c = sdpa(small("llama", 2, 64, 4, 4, 128));
    c.model.nKvHead = 1;
    c.train.precision = "bf16";
    rows.emplace_back("llama kv1 bf16", c);
    rows.emplace_back("llama one head b1", sdpa(small("llama", 2, 64, 1, 1, 100)));
    c = sdpa(small("llama", 2, 64, 4, 8, 64));
    c.lora.rank = 4;
    c.lora.targets = {"attn"};
    rows.emplace_back("llama lora attn", c);
    c = sdpa(small("llama", 2, 64, 4, 8, 64));
    c.train.activationCheckpointing = true;
    rows.emplace_back("llama checkpointing", c);
    requireWithinBar(rows);
}

// On a GPU the fused kernels keep no T x T map, forward or backward: the
// backward pass's peak has no T^2 term (its second difference in T stays
// within a block's rounding), where eager attention's has several maps' worth.
// The plan used to count two maps in the fp32 and pure bf16 backward.
void TestMemoryPlan::gpuFusedAttentionKeepsNoMaps()
{
    if (builtTorchMajor() < 2) QSKIP("SDPA needs LibTorch 2.x (the torch2 tree runs this)");
    auto llama = presetExperiment("llama-2-7b");
    for (const char* precision : {"fp32", "bf16-pure", "bf16"}) {
        auto c = llama.config;
        c.train.precision = precision;
        const std::int64_t T = 4096;
        const auto secondDifference = [&](const char* attention) {
            c.model.attention = attention;
            const auto plan = planOf(c);
            auto s = setupFor(c);
            s.gpu = true;
            s.computeCapability = 80;
            const auto at = [&](std::int64_t t) {
                // The backward pass's tensors (the reserve moves with segment fits).
                const auto phases = plan.at(1, t, s).phases;
                const auto it = std::find_if(phases.begin(), phases.end(), [](const auto& p) { return p.phase == "backward"; });
                return it == phases.end() ? std::int64_t{0} : it->bytes;
            };
            return at(3 * T) - 2 * at(2 * T) + at(T);
        };
        // One layer's map at T (2 T^2 per map at 2T and 3T: the second difference).
        const std::int64_t map = 32 * T * T * (std::string(precision) == "fp32" ? 4 : 2);
        const auto fused = secondDifference("sdpa"), eager = secondDifference("eager");
        QVERIFY2(std::llabs(fused) < map / 4,
                 qPrintable(QString("%1: fused %2 MiB, a map %3 MiB").arg(precision).arg(fused >> 20).arg(map >> 20)));
        QVERIFY2(eager > map, qPrintable(QString("%1: eager %2 MiB").arg(precision).arg(eager >> 20)));
    }
}

// LoRA on the MLP only, with dropout: nothing needs the first block's
// attention maps or its copies of q and k. The copies go after their
// product, and the softmax and the noise once dropout returns; the plan
// held them through the probabilities' product (+4.4% for a GPT at 256
// positions, +14.4% for a bf16 Llama on 2.6).
void TestMemoryPlan::frozenAttentionKeepsNoMapsOrCopies()
{
    auto rows = planRows();
    for (const char* type : {"gpt", "llama"}) {
        for (const char* precision : {"fp32", "bf16"}) {
            auto c = small(type, 1, 80, 4, 4, 256);
            if (std::string(type) == "llama") c.model.nKvHead = 2;
            c.model.dropout = 0.1;
            c.train.precision = precision;
            c.lora.rank = 8;
            c.lora.targets = {"mlp"};
            rows.emplace_back(std::string(type) + " lora mlp dropout " + precision, c);
        }
    }
    requireWithinBar(rows);
}

// SDPA's math fallback with LoRA on k alone: bmm keeps q scaled for k's
// gradient, and not k^T scaled, which only q's gradient would need. The
// plan kept both: +1.97%, inside the bar but a whole activation over; held
// here to 0.5%.
void TestMemoryPlan::mathFallbackSavesWhatEachGradientNeeds()
{
    if (builtTorchMajor() < 2) QSKIP("SDPA needs LibTorch 2.x (the torch2 tree runs this)");
    for (const char* target : {"k_proj", "q_proj"}) {
        auto c = small("llama", 2, 48, 2, 8, 0);
        onAddition(c, 3);
        c.model.attention = "sdpa";
        c.model.dropout = 0.1;
        c.lora.rank = 4;
        c.lora.targets = {target};
        const double error = plannedError(std::string("llama math lora ") + target, c);
        QVERIFY2(std::abs(error) < 0.005, qPrintable(QString("%1: %2%").arg(target).arg(100 * error)));
    }
}

#include "tst_memory_plan.moc"

// The heat map evaluates the plan's compiled polynomials in every cell: on
// the CPU it must give the plan's bytes exactly (in bf16 but for a product's
// oneDNN scratch away from the budget); on a GPU, where the caching
// allocator's reserve is placed from the cell nearest the budget, bytes
// within 20% and the plan's verdict wherever that is 10% or more from the
// budget.
void TestMemoryPlan::fitMapMatchesTheEstimate()
{
    {
        // A model whose tensors, not the CUDA context, make the GPU plan.
        auto gpt2 = presetExperiment("gpt2");
        const auto plan = planOf(gpt2.config);
        auto s = setupFor(gpt2.config);
        s.gpu = true;
        const auto batches = fitMapAxis(1, 48, 9), seqs = fitMapAxis(64, 1024, 7);
        const auto budget = plan.at(12, 512, s).peakBytes;
        const auto map = plan.fitMap(s, budget, batches, seqs);
        int decided = 0, fits = 0;
        for (std::size_t row = 0; row < seqs.size(); ++row) {
            for (std::size_t col = 0; col < batches.size(); ++col) {
                const auto exact = plan.at(batches[col], seqs[row], s).peakBytes;
                const auto where = QString("gpt2 gpu batch %1 seq %2").arg(batches[col]).arg(seqs[row]);
                const double off = std::abs(static_cast<double>(map.at(row, col) - exact)) / static_cast<double>(exact);
                QVERIFY2(off <= 0.20, qPrintable(where + QString(": %1%").arg(100 * off)));
                if (std::abs(static_cast<double>(exact - budget)) >= 0.10 * static_cast<double>(budget)) {
                    QVERIFY2((map.at(row, col) <= budget) == (exact <= budget), qPrintable(where));
                    ++decided;
                    fits += exact <= budget;
                }
            }
        }
        QVERIFY2(fits > 5 && decided - fits > 5, qPrintable(QString("%1 of %2 fit").arg(fits).arg(decided)));
    }
    auto grid = planGrid();
    auto c = small("gpt", 2, 32, 2, 4, 0);
    c.data.source = "addition";
    c.data.digits = 1; // 100 sums: the validation split caps what the batch asks for
    c.train.evalBatches = 8;
    grid.emplace_back("gpt addition, capped validation", c);
    const auto batches = fitMapAxis(1, 40, 9), seqs = fitMapAxis(1, 30, 7);
    for (const auto& [name, config] : grid) {
        if (config.lora.rank > 0) continue; // (LoRA's maps: tst_derived_plan)
        const auto plan = planOf(config);
        auto setup = setupFor(config);
        // The CPU alone and with two data-parallel ranks (buckets, the global
        // batch's data on the planned rank), and two GPUs.
        for (const auto& [gpu, replicas] : {std::pair{false, 1}, std::pair{false, 2}, std::pair{true, 2}}) {
            setup.gpu = gpu;
            setup.gpus = replicas;
            const auto budget = plan.at(20, 15, setup).peakBytes; // the verdict changes inside the map
            const auto map = plan.fitMap(setup, budget, batches, seqs);
            const bool products = (setup.precision == "bf16" || setup.precision == "bf16-pure") && cpuGemmScratchKnown();
            QCOMPARE(map.peakBytes.size(), batches.size() * seqs.size());
            for (std::size_t row = 0; row < seqs.size(); ++row) {
                for (std::size_t col = 0; col < batches.size(); ++col) {
                    const auto exact = plan.at(batches[col], seqs[row], setup).peakBytes;
                    const auto where = QString("%1 %2 x%5 batch %3 seq %4").arg(QString::fromStdString(name), gpu ? "gpu" : "cpu")
                                           .arg(batches[col]).arg(seqs[row]).arg(replicas);
                    if (!gpu && products) {
                        // bf16 on the CPU: a product's oneDNN scratch for the
                        // cell's shape in the cells nearest the budget only;
                        // elsewhere the largest the product took while
                        // tracing (a few percent of these small steps), with
                        // the same verdict.
                        QVERIFY2(std::llabs(exact - map.at(row, col)) <= exact / 10, qPrintable(where));
                        QVERIFY2((map.at(row, col) <= budget) == (exact <= budget), qPrintable(where));
                        continue;
                    }
                    if (!gpu) {
                        QVERIFY2(map.at(row, col) == exact, qPrintable(where + QString(": map %1, plan %2").arg(map.at(row, col)).arg(exact)));
                        continue;
                    }
                    // On a GPU a cell is placed with the allocator's reserve
                    // replayed in its row or the rows around it: within 20%,
                    // and the same verdict wherever the plan is 10% or more
                    // from the budget.
                    const double off = std::abs(static_cast<double>(map.at(row, col) - exact)) / static_cast<double>(exact);
                    QVERIFY2(off <= 0.20, qPrintable(where + QString(": %1%").arg(100 * off)));
                    if (std::abs(static_cast<double>(exact - budget)) >= 0.10 * static_cast<double>(budget)) {
                        QVERIFY2((map.at(row, col) <= budget) == (exact <= budget), qPrintable(where));
                    }
                }
            }
        }
    }
    // A learned position table sized to the sequence: beyond 256 tokens it is
    // the largest parameter, and the optimizer's temporaries follow it.
    auto text = small("gpt", 1, 32, 2, 4, 64);
    const auto plan = planOf(text);
    const auto setup = setupFor(text);
    const auto longSeqs = fitMapAxis(1, 1024, 33), fewBatches = fitMapAxis(1, 64, 5);
    const auto map = plan.fitMap(setup, 1LL << 30, fewBatches, longSeqs);
    for (std::size_t row = 0; row < longSeqs.size(); ++row) {
        for (std::size_t col = 0; col < fewBatches.size(); ++col) {
            QCOMPARE(map.at(row, col), plan.at(fewBatches[col], longSeqs[row], setup).peakBytes);
        }
    }
    QCOMPARE(fitMapAxis(1, 4, 128), (std::vector<std::int64_t>{1, 2, 3, 4}));
    QCOMPARE(fitMapAxis(8, 64, 3), (std::vector<std::int64_t>{8, 36, 64}));
    QVERIFY(fitMapAxis(5, 4, 3).empty());
}
