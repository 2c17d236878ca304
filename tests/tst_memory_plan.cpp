// The memory planner against the counting allocator: the estimate of a step's
// peak tensor bytes must match what two real training steps measure, across
// model families, positional encodings, optimizers, accumulation,
// checkpointing, dropout, datasets, head tying and LoRA. Prints the table.
#include <QtTest>

#include <algorithm>
#include <cstdio>

#include "config/RunConfig.h"
#include "memory/Estimator.h"
#include "train/Trainer.h"

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

} // namespace

class TestMemoryPlan : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void parameterCountIsExact();
    void estimateMatchesMeasuredPeak();
    void fitSolverAgreesWithMeasurement();
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
        const auto s = setupFor(c);
        const auto est = estimateMemory(architectureFor(c), s);
        QCOMPARE(est.parameters, trainer.parameterCount());
        QCOMPARE(est.trainableParameters, trainer.trainableParameterCount());
    }
}

void TestMemoryPlan::estimateMatchesMeasuredPeak()
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
    c.data.source = "addition";
    c.data.digits = 2;
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

    std::vector<double> errors;
    std::printf("%-28s %12s %12s %8s\n", "configuration", "measured", "estimate", "error");
    for (const auto& [name, config] : grid) {
        const auto measured = measuredPeak(config);
        const auto estimate = estimateMemory(architectureFor(config), setupFor(config)).peakBytes;
        const double error = static_cast<double>(estimate - measured) / static_cast<double>(measured);
        std::printf("%-28s %12lld %12lld %+7.2f%%\n", name.c_str(), static_cast<long long>(measured),
                    static_cast<long long>(estimate), 100 * error);
        errors.push_back(std::abs(error));
        QVERIFY2(std::abs(error) <= 0.05, qPrintable(QString::fromStdString(name)));
    }
    std::sort(errors.begin(), errors.end());
    QVERIFY(errors[errors.size() / 2] <= 0.02);
}

void TestMemoryPlan::fitSolverAgreesWithMeasurement()
{
    auto c = small("gpt", 2, 64, 4, 1, 32);
    const std::int64_t budget = 6 << 20;
    const auto best = largestBatch(architectureFor(c), setupFor(c), budget);
    QVERIFY(best > 1);
    c.train.batchSize = static_cast<int>(best);
    QVERIFY(measuredPeak(c) <= budget);
    c.train.batchSize = static_cast<int>(best + 1);
    const auto over = measuredPeak(c);
    QVERIFY2(over > budget * 0.97, "one more than the answer should not fit by much");
}

QTEST_GUILESS_MAIN(TestMemoryPlan)
#include "tst_memory_plan.moc"
