// Quantized base weights (QLoRA): NF4 and int8 storage against an
// independent numpy reference (tests/reference/bnb_reference.py), a quantized
// layer's forward and backward against the same layer with the dequantized
// weight, a quantized Llama's logits against the dequantized model's, the
// config's checks, and a QLoRA run that resumes exactly.
#include <QtTest>

#include <filesystem>
#include <fstream>

#include "TestPaths.h"
#include "TestPrinters.h"
#include "HfFolderFixtures.h"

#include "config/LearningRate.h"
#include "config/RunConfig.h"
#include "diagnose/Preflight.h"
#include "memory/DerivedStep.h"
#include "train/DerivedPlan.h"
#include "train/Datasets.h"
#include "train/Llama.h"
#include "train/ModelIo.h"
#include "train/ModelTools.h"
#include "train/Quantize.h"
#include "train/Safetensors.h"
#include "train/TrainStep.h"
#include "train/TorchCompat.h"
#include "train/Trainer.h"

using namespace tb;

namespace {

// Bitwise equality of two float or bfloat16 tensors (-0 and +0 differ, NaNs compare by bits).
bool sameBits(const torch::Tensor& a, const torch::Tensor& b)
{
    if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
    const auto view = a.element_size() == 4 ? torch::kInt : torch::kShort;
    return torch::equal(a.contiguous().view(view), b.contiguous().view(view));
}

QuantizedWeight fromReference(const std::map<std::string, torch::Tensor>& t, const std::string& p)
{
    QuantizedWeight q;
    const auto source = t.at(p + "source");
    q.rows = source.size(0);
    q.cols = source.size(1);
    q.format = t.at(p + "format")[0].item<int>() == 4 ? QuantFormat::Nf4 : QuantFormat::Int8;
    q.data = t.at(p + "weight");
    if (q.format == QuantFormat::Int8) {
        q.absmax = t.at(p + "SCB");
        return q;
    }
    q.absmax = t.at(p + "absmax");
    q.quantMap = t.at(p + "quant_map");
    if (t.count(p + "nested_absmax")) {
        q.nested = true;
        q.nestedAbsmax = t.at(p + "nested_absmax");
        q.nestedQuantMap = t.at(p + "nested_quant_map");
        q.nestedOffset = t.at(p + "nested_offset")[0].item<float>();
    }
    return q;
}

ModelOptions smallLlama(int loraRank)
{
    ModelOptions o;
    o.type = "llama";
    o.vocabSize = 23;
    o.maxLen = 16;
    o.nLayer = 2;
    o.dModel = 48;
    o.nHead = 4;
    o.nKvHead = 2;
    o.dFf = 72; // 48 x 72: blocks of 64 that do not tile every row
    o.tieEmbeddings = false;
    o.loraRank = loraRank;
    return o;
}

// Runs the trainer, each step's loss appended; cancelled after step cancelAt (-1: never).
TrainResult lossesOf(Trainer& trainer, std::vector<double>& losses, int cancelAt)
{
    TrainerCallbacks callbacks;
    callbacks.onStep = [&](const StepMetrics& s) {
        losses.push_back(s.loss);
        if (s.step == cancelAt) trainer.requestCancel();
    };
    return trainer.run(callbacks);
}

RunConfig qloraConfig(const std::string& format)
{
    RunConfig c;
    c.model.type = "llama";
    c.model.nLayer = 2;
    c.model.dModel = 48;
    c.model.nHead = 4;
    c.model.positionalEncoding = "rope";
    c.model.tieEmbeddings = false;
    c.model.quantize = format;
    c.model.dropout = 0.1; // the random state is restored on resume too
    c.data.source = "addition";
    c.data.digits = 2;
    c.lora.rank = 4;
    c.train.batchSize = 8;
    c.train.steps = 10;
    c.train.evalEvery = 100;
    c.optim.warmupSteps = 2;
    return c;
}

} // namespace

class TestQuantize : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void referenceStorageDequantizesBitForBit();
    void quantizerWritesWhatTheReferenceWrites();
    void nf4WithDoubleQuantStaysUnderTheBudget();
    void quantizedLayerIsTheDequantizedLayer_data();
    void quantizedLayerIsTheDequantizedLayer();
    void quantizedLlamaGivesTheDequantizedModelsLogits();
    void configNamesWhatIsWrong_data();
    void configNamesWhatIsWrong();
    void qloraRunResumesExactly();
    void halfBaseLoraTrainsResumesAndHoldsLess();
    void resumedFolderRunTakesItsBaseFromTheCheckpoint();
    void qloraRunExportsItsModel();
    void preflightOffersNf4WhereLoraDoesNotFit();
};

namespace {
// The reference's cases, written once per test run.
std::map<std::string, torch::Tensor> referenceCases()
{
    static std::map<std::string, torch::Tensor> cases;
    if (!cases.empty()) return cases;
    if (QProcess::execute("/usr/bin/python3", {"-c", "import numpy"}) != 0) return {};
    QTemporaryDir dir;
    const auto path = dir.filePath("cases.safetensors");
    QProcess p;
    p.start("/usr/bin/python3", {QString(tb::test::sourceDir()) + "/tests/reference/bnb_reference.py", "cases", path});
    if (!p.waitForFinished(60000) || p.exitCode() != 0) {
        qWarning("%s", p.readAllStandardError().constData());
        return {};
    }
    cases = readSafetensors(path.toStdString());
    return cases;
}
int caseCount(const std::map<std::string, torch::Tensor>& t)
{
    int n = 0;
    while (t.count(std::string("c") + std::to_string(n) + ".source")) ++n;
    return n;
}
} // namespace

void TestQuantize::referenceStorageDequantizesBitForBit()
{
    const auto t = referenceCases();
    if (t.empty()) QSKIP("numpy (Debian's python3-numpy) is not installed: the reference cannot run");
    const int n = caseCount(t);
    QVERIFY(n >= 8);
    for (int i = 0; i < n; ++i) {
        const auto p = std::string("c") + std::to_string(i) + ".";
        const auto q = fromReference(t, p);
        QVERIFY2(sameBits(q.dequantize(torch::kFloat), t.at(p + "expected_f32")), p.c_str());
        QVERIFY2(sameBits(q.dequantize(torch::kBFloat16), t.at(p + "expected_bf16")), p.c_str());
    }
}

void TestQuantize::quantizerWritesWhatTheReferenceWrites()
{
    const auto t = referenceCases();
    if (t.empty()) QSKIP("numpy (Debian's python3-numpy) is not installed: the reference cannot run");
    for (int i = 0; i < caseCount(t); ++i) {
        const auto p = std::string("c") + std::to_string(i) + ".";
        const auto ref = fromReference(t, p);
        const auto ours = quantizeWeight(t.at(p + "source"), {ref.format, ref.nested});
        QVERIFY2(torch::equal(ours.data, ref.data), p.c_str());
        if (!ref.nested) {
            QVERIFY2(sameBits(ours.absmax, ref.absmax), p.c_str());
            QVERIFY2(ref.format == QuantFormat::Int8 || sameBits(ours.quantMap, ref.quantMap), p.c_str());
            continue;
        }
        // The dynamic map is built with linspace on each side (its float bits
        // may differ by one, as between torch builds): close, not bitwise. The
        // mean is summed in double on both: the same float32, and so the same
        // 8-bit codes of the block scales and their absmax.
        QVERIFY2(torch::allclose(ours.nestedQuantMap, ref.nestedQuantMap, 1e-6, 0), p.c_str());
        QCOMPARE(ours.nestedOffset, ref.nestedOffset);
        QVERIFY2(torch::equal(ours.absmax, ref.absmax), p.c_str());
        QVERIFY2(sameBits(ours.nestedAbsmax, ref.nestedAbsmax), p.c_str());
        const auto exact = quantizeWeight(t.at(p + "source"), {QuantFormat::Nf4, false}).absmax;
        const double worst = (ours.blockAbsmax() - exact).abs().max().item<double>();
        QVERIFY2(worst <= 0.02 * exact.max().item<double>(), qPrintable(QString("%1 %2").arg(p.c_str()).arg(worst)));
    }
}

void TestQuantize::nf4WithDoubleQuantStaysUnderTheBudget()
{
    // A bf16 or fp16 weight quantizes as its exact float32 values do (a folder's weights are read as stored).
    torch::manual_seed(4);
    for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
        const auto w = (torch::randn({77, 130}) * 0.05).to(dtype);
        for (const QuantizeSpec spec : {QuantizeSpec{QuantFormat::Nf4, true}, QuantizeSpec{QuantFormat::Int8, false}}) {
            const auto a = quantizeWeight(w, spec), b = quantizeWeight(w.to(torch::kFloat), spec);
            QVERIFY(torch::equal(a.data, b.data) && torch::equal(a.absmax, b.absmax));
        }
    }
    // Llama 2 7B's linears: NF4 with double quantization at most 0.52 bytes a weight.
    const std::int64_t d = 4096, ff = 11008;
    const std::int64_t weights = 4 * d * d + 3 * d * ff;
    const auto bytes = 4 * quantizedBytes(d, d, {QuantFormat::Nf4, true}) + 3 * quantizedBytes(d, ff, {QuantFormat::Nf4, true});
    QVERIFY2(static_cast<double>(bytes) / weights <= 0.52, qPrintable(QString::number(static_cast<double>(bytes) / weights)));
    QVERIFY(static_cast<double>(4 * quantizedBytes(d, d, {QuantFormat::Nf4, false})) / (4 * d * d) > 0.56);
    // What the formula says is what is stored.
    torch::manual_seed(3);
    for (const QuantizeSpec spec : {QuantizeSpec{QuantFormat::Nf4, true}, QuantizeSpec{QuantFormat::Nf4, false},
                                    QuantizeSpec{QuantFormat::Int8, false}}) {
        const auto q = quantizeWeight(torch::randn({130, 333}), spec);
        QCOMPARE(q.storedBytes(), quantizedBytes(130, 333, spec));
        // Block by block, in the order a quantized layer registers its buffers.
        LoraLinear layer(333, 130, 2, 4.0, false);
        layer->quantizeBase(spec);
        std::vector<std::int64_t> held;
        for (const auto& b : layer->named_buffers()) held.push_back(b.value().numel() * static_cast<std::int64_t>(b.value().element_size()));
        QCOMPARE(held, quantizedBlockBytes(130, 333, spec));
    }
}

void TestQuantize::quantizedLayerIsTheDequantizedLayer_data()
{
    QTest::addColumn<QString>("format");
    QTest::addColumn<bool>("bias");
    QTest::addColumn<bool>("conv1d");
    QTest::addColumn<int>("in");
    QTest::addColumn<int>("out");
    QTest::addColumn<bool>("autocast");
    QTest::newRow("nf4") << "nf4" << false << false << 40 << 24 << false;
    QTest::newRow("nf4 with bias") << "nf4" << true << false << 40 << 24 << false;
    QTest::newRow("nf4, GPT-2's Conv1D") << "nf4" << true << true << 40 << 24 << false;
    QTest::newRow("int8") << "int8" << false << false << 40 << 24 << false;
    QTest::newRow("nf4, 37 x 23 (a partial block, an odd count)") << "nf4" << true << false << 37 << 23 << false;
    QTest::newRow("nf4 under bf16 autocast") << "nf4" << true << false << 40 << 24 << true;
    QTest::newRow("int8 under bf16 autocast") << "int8" << false << false << 37 << 23 << true;
}

void TestQuantize::quantizedLayerIsTheDequantizedLayer()
{
    QFETCH(QString, format);
    QFETCH(bool, bias);
    QFETCH(bool, conv1d);
    QFETCH(int, in);
    QFETCH(int, out);
    QFETCH(bool, autocast);
    torch::manual_seed(5);
    const int rank = 4;
    auto q = conv1d ? LoraLinear(LoraLinearImpl::conv1d(in, out, rank, 8.0)) : LoraLinear(in, out, rank, 8.0, bias);
    {
        torch::NoGradGuard noGrad;
        q->loraB.normal_(0, 0.1); // a trained adapter, so its gradient depends on the input
        if (q->bias.defined()) q->bias.normal_(0, 0.1);
    }
    auto plain = LoraLinear(in, out, rank, 8.0, bias || conv1d);
    const auto spec = QuantizeSpec{quantFormatOf(format.toStdString()), true};
    q->quantizeBase(spec);
    QVERIFY(q->quantized());
    QVERIFY(!q->named_parameters().contains("weight"));
    {
        torch::NoGradGuard noGrad;
        plain->weight.copy_(q->quantizedBase().dequantize(torch::kFloat));
        QVERIFY(torch::equal(q->baseWeight(torch::kFloat), conv1d ? plain->weight.t() : plain->weight));
        if (plain->bias.defined()) plain->bias.copy_(q->bias);
        plain->loraA.copy_(q->loraA);
        plain->loraB.copy_(q->loraB);
    }
    for (auto* l : {&q, &plain}) {
        for (auto& p : (*l)->named_parameters()) p.value().set_requires_grad(isAdapterName(p.key()));
    }
    const auto x = torch::randn({3, 5, in}, torch::requires_grad());
    const auto xPlain = x.detach().clone().requires_grad_(true);
    // Under autocast the dequantized weight comes in bf16, as autocast casts the plain layer's fp32 weight.
    // (The input is a leaf that requires grad: autocast caches its cast, which the adapter must not lose.)
    torch::Tensor y, yPlain;
    {
        const compat::AutocastScope scope(c10::DeviceType::CPU, autocast, at::kBFloat16);
        y = q(x);
        yPlain = plain(xPlain);
    }
    QCOMPARE(y.scalar_type(), autocast ? torch::kBFloat16 : torch::kFloat);
    QVERIFY(torch::equal(y, yPlain));
    const auto g = torch::randn_like(y);
    y.backward(g);
    yPlain.backward(g);
    QVERIFY2(torch::allclose(x.grad(), xPlain.grad(), autocast ? 1e-2 : 1e-6, autocast ? 1e-2 : 1e-6),
             qPrintable(QString("largest difference %1 of %2").arg((x.grad() - xPlain.grad()).abs().max().item<double>())
                            .arg(xPlain.grad().abs().max().item<double>())));
    QVERIFY(torch::equal(q->loraA.grad(), plain->loraA.grad()));
    QVERIFY(torch::equal(q->loraB.grad(), plain->loraB.grad()));
}

void TestQuantize::quantizedLlamaGivesTheDequantizedModelsLogits()
{
    torch::manual_seed(7);
    Llama quantized(smallLlama(4));
    Llama plain(smallLlama(4));
    quantizeModelBase(*quantized, {QuantFormat::Nf4, true});
    QCOMPARE(quantizableLinears(*quantized).size(), std::size_t(14)); // 7 a block; lm_head stays
    {
        torch::NoGradGuard noGrad;
        auto target = plain->named_parameters();
        const auto linears = quantizableLinears(*quantized);
        for (const auto& [name, layer] : linears) target[name + ".weight"].copy_(layer->baseWeight(torch::kFloat));
        for (const auto& p : quantized->named_parameters()) target[p.key()].copy_(p.value());
        QCOMPARE(target.size(), quantized->named_parameters().size() + linears.size());
    }
    const auto ids = torch::randint(23, {2, 16});
    quantized->eval();
    plain->eval();
    torch::NoGradGuard noGrad;
    const auto a = quantized->forward(ids), b = plain->forward(ids);
    QVERIFY2(torch::allclose(a, b, 1e-5, 1e-5), qPrintable(QString::number((a - b).abs().max().item<double>())));
    // A model moved to bf16 keeps its quantized weights exact (their scales are not rounded).
    const auto before = quantizableLinears(*quantized).front().second->baseWeight(torch::kFloat);
    quantized->to(torch::kBFloat16);
    QVERIFY(sameBits(quantizableLinears(*quantized).front().second->baseWeight(torch::kFloat), before));
}

void TestQuantize::configNamesWhatIsWrong_data()
{
    QTest::addColumn<QString>("json");
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("says");
    const QString llama = R"({"model": {"type": "llama", %1}, "lora": {"rank": %2}})";
    QTest::newRow("unknown format") << llama.arg(R"("quantize": "nf3")", "8") << "model.quantize" << "\"nf4\"";
    QTest::newRow("without LoRA") << llama.arg(R"("quantize": "nf4")", "0") << "model.quantize" << "set lora.rank";
    QTest::newRow("double_quant for int8") << llama.arg(R"("quantize": "int8", "double_quant": false)", "8")
                                           << "model.double_quant" << "only used with model.quantize \"nf4\"";
    QTest::newRow("a GPT") << R"({"model": {"type": "gpt", "quantize": "nf4"}, "lora": {"rank": 8}})" << "model.quantize"
                           << "\"llama\" and Hugging Face folders";
}

void TestQuantize::configNamesWhatIsWrong()
{
    QFETCH(QString, json);
    QFETCH(QString, path);
    QFETCH(QString, says);
    try {
        parseConfig(json.toStdString());
        QFAIL("accepted");
    } catch (const ConfigError& e) {
        QString all;
        for (const auto& issue : e.issues()) all += QString::fromStdString(issue.text()) + "\n";
        QVERIFY2(all.contains(path + ": ") && all.contains(says), qPrintable(all));
    }
    // And a good one round-trips through the config's JSON.
    const auto c = parseConfig(R"({"model": {"type": "llama", "quantize": "nf4", "double_quant": false}, "lora": {"rank": 8}})");
    QCOMPARE(c.model.quantize, std::string("nf4"));
    QCOMPARE(c.model.doubleQuant, false);
    QCOMPARE(parseConfig(configToJson(c)).model.doubleQuant, false);
}

void TestQuantize::qloraRunResumesExactly()
{
    for (const std::string format : {"nf4", "int8"}) {
        QTemporaryDir dir;
        const auto config = qloraConfig(format);
        std::vector<double> uninterrupted, resumed;
        {
            Trainer trainer(config, {});
            QCOMPARE(lossesOf(trainer, uninterrupted, -1).status, TrainResult::Status::Finished);
            QVERIFY(trainer.trainableParameterCount() < trainer.parameterCount());
        }
        std::string checkpoint;
        {
            TrainerOptions options;
            options.checkpointDir = dir.filePath("ckpt").toStdString();
            Trainer trainer(config, options);
            const auto result = lossesOf(trainer, resumed, 4);
            QCOMPARE(result.status, TrainResult::Status::Cancelled);
            checkpoint = result.lastCheckpoint;
        }
        {
            TrainerOptions options;
            options.resumeFrom = checkpoint;
            Trainer trainer(config, options);
            QCOMPARE(trainer.startStep(), 4);
            QCOMPARE(lossesOf(trainer, resumed, -1).status, TrainResult::Status::Finished);
        }
        QCOMPARE(resumed.size(), uninterrupted.size());
        for (std::size_t i = 0; i < resumed.size(); ++i) QCOMPARE(resumed[i], uninterrupted[i]);
        QVERIFY(uninterrupted.back() < uninterrupted.front());
    }
}

// LoRA over a base kept in half precision (train.weights_dtype, as PEFT
// loads a published model): the frozen parameters are stored in it and the
// adapters train in fp32 under autocast. The run learns, resumes exactly,
// its checkpoint holds the base as trained and export writes it in its dtype, and its step's peak is below
// the fp32 base's (no fp32 weights, no casts of them kept for backward).
// fp32 products over a half base are refused naming both fields. (The
// trainer refused train.weights_dtype: a setup it only planned.)
void TestQuantize::halfBaseLoraTrainsResumesAndHoldsLess()
{
    auto config = qloraConfig("none");
    config.model.quantize = "none";
    config.train.precision = "bf16";
    const auto peakOf = [](const RunConfig& c) {
        TrainerOptions options;
        options.measureMemory = true;
        Trainer trainer(c, options);
        std::int64_t peak = 0;
        TrainerCallbacks callbacks;
        callbacks.onStep = [&](const StepMetrics& s) { peak = std::max(peak, s.memPeakBytes); };
        if (trainer.run(callbacks).status != TrainResult::Status::Finished) return std::int64_t{-1};
        return peak;
    };
    auto fp32Base = config;
    fp32Base.train.steps = 2;
    const auto fp32Peak = peakOf(fp32Base);
    for (const std::string dtype : {"bf16", "fp16"}) {
        config.train.weightsDtype = dtype;
        QTemporaryDir dir;
        std::vector<double> uninterrupted, resumed;
        {
            Trainer trainer(config, {});
            QCOMPARE(lossesOf(trainer, uninterrupted, -1).status, TrainResult::Status::Finished);
        }
        std::string checkpoint;
        {
            TrainerOptions options;
            options.checkpointDir = dir.filePath("ckpt").toStdString();
            Trainer trainer(config, options);
            const auto result = lossesOf(trainer, resumed, 4);
            QCOMPARE(result.status, TrainResult::Status::Cancelled);
            checkpoint = result.lastCheckpoint;
        }
        const auto half = dtype == "bf16" ? torch::kBFloat16 : torch::kHalf;
        int frozen = 0, adapters = 0;
        for (const auto& [name, t] : readModelWeights(checkpoint)) {
            if (!t.is_floating_point()) continue;
            const bool adapter = isAdapterName(name);
            QVERIFY2(t.scalar_type() == (adapter ? torch::kFloat : half), (name + " is " + std::string(c10::toString(t.scalar_type()))).c_str());
            ++(adapter ? adapters : frozen);
        }
        QVERIFY(frozen > 10 && adapters > 0);
        // Exported, the base leaves in its dtype: with the adapters apart (fp32), or merged into it.
        const auto apart = dir.filePath("apart").toStdString(), merged = dir.filePath("merged").toStdString();
        exportModel(config, checkpoint, apart, false);
        exportModel(config, checkpoint, merged, true);
        for (const auto& [name, t] : readSafetensors(apart + "/model.safetensors")) {
            QVERIFY2(t.scalar_type() == (isAdapterName(name) ? torch::kFloat : half), name.c_str());
        }
        for (const auto& [name, t] : readSafetensors(merged + "/model.safetensors")) {
            QVERIFY2(t.scalar_type() == half && !isAdapterName(name), name.c_str());
        }
        std::ifstream configJson(merged + "/config.json");
        const std::string exported((std::istreambuf_iterator<char>(configJson)), std::istreambuf_iterator<char>());
        QVERIFY2(exported.find(dtype == "bf16" ? "\"bfloat16\"" : "\"float16\"") != std::string::npos, exported.c_str());
        {
            TrainerOptions options;
            options.resumeFrom = checkpoint;
            Trainer trainer(config, options);
            QCOMPARE(trainer.startStep(), 4);
            QCOMPARE(lossesOf(trainer, resumed, -1).status, TrainResult::Status::Finished);
        }
        QCOMPARE(resumed.size(), uninterrupted.size());
        for (std::size_t i = 0; i < resumed.size(); ++i) QCOMPARE(resumed[i], uninterrupted[i]);
        QVERIFY(uninterrupted.back() < uninterrupted.front());
        auto two = config;
        two.train.steps = 2;
        const auto peak = peakOf(two);
        QVERIFY2(peak > 0 && peak < fp32Peak, (dtype + ": " + std::to_string(peak) + " against " + std::to_string(fp32Peak)).c_str());
    }
    auto fp32 = config;
    fp32.train.precision = "fp32";
    try {
        Trainer trainer(fp32, {});
        QFAIL("fp32 products over an fp16 base were accepted");
    } catch (const InputError& e) {
        const std::string what = e.what();
        QVERIFY2(what.find("train.weights_dtype \"fp16\"") != std::string::npos && what.find("train.precision") != std::string::npos,
                 e.what());
    }
}

// A resumed QLoRA run of a folder reads its quantized base from its
// checkpoint: the folder is not quantized again (a 7B took about 40 s), so
// the run resumes even with the folder's weights gone, and continues
// exactly. (It quantized the folder again, and failed without its weights.)
void TestQuantize::resumedFolderRunTakesItsBaseFromTheCheckpoint()
{
    QTemporaryDir dir;
    const std::string folder = dir.filePath("model").toStdString();
    std::filesystem::create_directories(folder);
    writeHfFolder(folder,
                  R"({"model_type": "llama", "vocab_size": 120, "hidden_size": 64, "intermediate_size": 96,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                      "max_position_embeddings": 128, "hidden_act": "silu", "tie_word_embeddings": false})",
                  120);
    const auto config = parseConfig(R"({"model": {"type": "hf", "path": ")" + folder + R"(", "quantize": "nf4"},
        "data": {"source": "tokens", "path": ")" + folder + R"(/train.bin", "seq_len": 16},
        "train": {"batch_size": 4, "steps": 8, "eval_every": 100}, "lora": {"rank": 4}})");
    std::vector<double> uninterrupted, resumed;
    {
        Trainer trainer(config, {});
        QCOMPARE(lossesOf(trainer, uninterrupted, -1).status, TrainResult::Status::Finished);
    }
    std::string checkpoint;
    {
        TrainerOptions options;
        options.checkpointDir = dir.filePath("ckpt").toStdString();
        Trainer trainer(config, options);
        const auto result = lossesOf(trainer, resumed, 3);
        QCOMPARE(result.status, TrainResult::Status::Cancelled);
        checkpoint = result.lastCheckpoint;
    }
    std::filesystem::remove(folder + "/model.safetensors");
    TrainerOptions options;
    options.resumeFrom = checkpoint;
    Trainer trainer(config, options);
    QCOMPARE(trainer.startStep(), 3);
    QCOMPARE(lossesOf(trainer, resumed, -1).status, TrainResult::Status::Finished);
    QCOMPARE(resumed.size(), uninterrupted.size());
    for (std::size_t i = 0; i < resumed.size(); ++i) QCOMPARE(resumed[i], uninterrupted[i]);
}

// A QLoRA run's checkpoint holds its quantized base as trained: the export
// writes that base dequantized with the adapters apart, or merged.
void TestQuantize::qloraRunExportsItsModel()
{
    QTemporaryDir dir;
    auto config = qloraConfig("nf4");
    config.train.steps = 3;
    TrainerOptions options;
    options.checkpointDir = dir.filePath("ckpt").toStdString();
    std::string checkpoint;
    {
        Trainer trainer(config, options);
        const auto result = trainer.run({});
        QCOMPARE(result.status, TrainResult::Status::Finished);
        checkpoint = result.lastCheckpoint;
    }
    const auto apart = dir.filePath("apart").toStdString(), merged = dir.filePath("merged").toStdString();
    exportModel(config, checkpoint, apart, false);
    exportModel(config, checkpoint, merged, true);
    const auto a = readSafetensors(apart + "/model.safetensors"), m = readSafetensors(merged + "/model.safetensors");
    const std::string q = "model.layers.0.self_attn.q_proj"; // quantizableLinears(...)[0]
    QVERIFY(a.count(q + ".weight") && a.count(q + ".lora_A") && !m.count(q + ".lora_A"));
    for (const auto& [name, t] : a) QVERIFY2(!isQuantizedBaseName(name), name.c_str());
    // The weight exported is the dequantized base the run trained on.
    const auto weights = readModelWeights(checkpoint);
    Llama fresh(modelOptionsFor(config, *makeDataset(config)));
    QCOMPARE(loadQuantizedBase(*fresh, weights), 14);
    // A damaged one (codes cut short) is refused by name, not dequantized out of bounds.
    auto damaged = weights;
    damaged.at(q + ".weight_data") = damaged.at(q + ".weight_data").narrow(0, 0, 10);
    Llama another(modelOptionsFor(config, *makeDataset(config)));
    try {
        loadModelWeights(*another, damaged, "damaged.pt");
        QFAIL("a damaged quantized base was loaded");
    } catch (const InputError& e) {
        QVERIFY2(std::string(e.what()).find("4-bit codes") != std::string::npos, e.what());
    }
    QVERIFY(torch::equal(a.at(q + ".weight"), quantizableLinears(*fresh)[0].second->baseWeight(torch::kFloat)));
    const auto delta = torch::matmul(a.at(q + ".lora_B"), a.at(q + ".lora_A")) * (config.lora.alpha / config.lora.rank);
    QVERIFY(delta.abs().max().item<double>() > 0);
    // Merged, a QLoRA run's model is written in bf16 (its base had 4 bits).
    QCOMPARE(m.at(q + ".weight").scalar_type(), torch::kBFloat16);
    QVERIFY(torch::equal(m.at(q + ".weight"), (a.at(q + ".weight") + delta).to(torch::kBFloat16)));
}

// A LoRA run whose fp32 base does not fit the card but fits stored in NF4:
// preflight's fix offers NF4 with its own step's plan, and applying it leaves
// no memory finding. Without a derived plan a quantized config is judged by
// its unquantized plan, an upper bound: it never fails on that.
void TestQuantize::preflightOffersNf4WhereLoraDoesNotFit()
{
    QTemporaryDir dir;
    const std::string folder = dir.path().toStdString();
    std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "vocab_size": 1000, "hidden_size": 1024,
        "intermediate_size": 2816, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
        "max_position_embeddings": 256, "hidden_act": "silu", "tie_word_embeddings": false})";
    std::vector<std::uint16_t> ids(4000);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>(3 + (i * 7) % 997);
    std::ofstream(folder + "/train.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 2));
    // (Parsed: the folder's sizes filled in.)
    const auto c = parseConfig(R"({"model": {"type": "hf", "path": ")" + folder + R"("}, "data": {"source": "tokens", "path": ")"
                               + folder + R"(/train.bin", "seq_len": 64}, "train": {"batch_size": 2}, "lora": {"rank": 8}})");
    // A 7.5 card of 600 MiB: the fp32 base (about 210 MB), fp16 copies and the CUDA context (648 MiB) do not fit; NF4 (388 MiB) does.
    GpuTarget card = GpuCatalogue::bundled().resolve("T4");
    card.gpu.memoryBytes = 600LL << 20;
    PreflightTarget target;
    target.gpu = card;
    int derived = 0;
    std::string traced;
    target.derivePlan = [&derived, &traced](const RunConfig& config) {
        ++derived;
        traced = config.train.precision;
        return std::make_shared<const DerivedStep>(deriveStep(config));
    };
    const auto findings = runPreflight(c, target);
    const auto over = std::find_if(findings.begin(), findings.end(), [](const Finding& f) { return f.kind == "memory_over_budget"; });
    QVERIFY2(over != findings.end(), findingsToJson(findings).c_str());
    QVERIFY2(over->fix.find("NF4") != std::string::npos, over->fix.c_str());
    QCOMPARE(over->autoFix.size(), std::size_t(1));
    QCOMPARE(over->autoFix[0].path, std::string("model.quantize"));
    QCOMPARE(derived, 2); // its own LoRA step, and NF4's
    // The step traced is the one the T4 runs ("auto": fp16), as estimate
    // --gpu T4 traces it; it was the CPU's "auto", 0.11 GiB under estimate's
    // plan for a 7B.
    QCOMPARE(traced, std::string("fp16"));
    const auto fixed = applyAutoFix(c, over->autoFix);
    QCOMPARE(fixed.model.quantize, std::string("nf4"));
    for (const auto& f : runPreflight(fixed, target)) {
        QVERIFY2(f.kind.rfind("memory", 0) != 0, findingText(f).c_str());
    }
    // Without the derived plan: the unquantized plan, an upper bound, is only a notice.
    target.derivePlan = nullptr;
    bool notice = false;
    for (const auto& f : runPreflight(fixed, target)) {
        QVERIFY2(f.severity != Severity::Error, findingText(f).c_str());
        notice = notice || f.kind == "memory_not_planned";
    }
    QVERIFY(notice);
}

QTEST_GUILESS_MAIN(TestQuantize)
#include "tst_quantize.moc"
