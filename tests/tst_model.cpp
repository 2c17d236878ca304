// The GPT model: shapes, causality, and that every tensor moves with the module.
#include <QtTest>

#include <ATen/record_function.h>

#include <dlfcn.h>
#include <strings.h>

#include <cstdlib>
#include <fstream>

#include "ModelFixtures.h"
#include "config/RunConfig.h"
#include "train/Datasets.h"
#include "train/Gpt.h"
#include "train/Threads.h"
#include "train/Trainer.h"
#include "train/TrainStep.h"

using namespace tb;

namespace {

GptOptions smallOptions(const std::string& encoding)
{
    GptOptions o;
    o.vocabSize = 17;
    o.maxLen = 12;
    o.nLayer = 2;
    o.dModel = 16;
    o.nHead = 2;
    o.dFf = 32;
    o.positionalEncoding = encoding;
    return o;
}

// Counts operator calls that receive a float32 tensor, through LibTorch's
// RecordFunction observers (they see every dispatched op and its inputs).
thread_local int g_float32Inputs = 0;
thread_local std::string g_firstOffender;

std::unique_ptr<at::ObserverContext> onOpStart(const at::RecordFunction& fn)
{
    for (const auto& input : fn.inputs()) {
        if (input.isTensor() && input.toTensor().defined() && input.toTensor().scalar_type() == at::kFloat) {
            if (g_float32Inputs++ == 0) g_firstOffender = fn.name();
        }
    }
    return nullptr;
}

// Runs fn and returns how many ops saw a float32 tensor.
template <typename Fn>
int float32OpsDuring(Fn fn)
{
    g_float32Inputs = 0;
    g_firstOffender.clear();
    const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&onOpStart).needsInputs(true));
    fn();
    at::removeCallback(handle);
    return g_float32Inputs;
}

// Tensors left on the wrong device (docs/known-failures.md): a learned scale
// kept as a plain member.
struct LeakyModuleImpl : torch::nn::Module {
    LeakyModuleImpl() { linear = register_module("linear", torch::nn::Linear(4, 4)); }
    torch::Tensor forward(const torch::Tensor& x) { return linear(x) * scale; }
    torch::nn::Linear linear{nullptr};
    torch::Tensor scale = torch::ones({4}); // not registered
};
TORCH_MODULE(LeakyModule);

} // namespace

class TestModel : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void openBlasFallbackKernelsAreReplaced();
    void outputShape_data();
    void outputShape();
    void causal_data();
    void causal();
    void nothingLeftBehindOnConversion_data();
    void nothingLeftBehindOnConversion();
    void tripwireCatchesUnregisteredTensor();
    void tiedEmbeddingsShareWeights();
    void loraStartsAsIdentityAndFreezesBase();
    void loraDropoutDropsTheAdapterInputWhileTraining();
    void checkpointedForwardMatches();
    void heldOutSplitIgnoresOperandOrder();
    void additionPromptsAndAnswers_data();
    void additionPromptsAndAnswers();
    void textFileIsMappedNotCopied();
    void tokenizingProgressSaysTheSizeInItsUnit();
};

void TestModel::outputShape_data()
{
    QTest::addColumn<QString>("encoding");
    QTest::newRow("learned") << "learned";
    QTest::newRow("sinusoidal") << "sinusoidal";
    QTest::newRow("rope") << "rope";
}

void TestModel::outputShape()
{
    QFETCH(QString, encoding);
    torch::manual_seed(0);
    Gpt model(smallOptions(encoding.toStdString()));
    const auto tokens = torch::randint(0, 17, {3, 12}, torch::kLong);
    const auto logits = model->forward(tokens);
    QCOMPARE(logits.sizes().vec(), (std::vector<std::int64_t>{3, 12, 17}));
    QCOMPARE(model->forward(tokens.narrow(1, 0, 5)).size(1), std::int64_t(5));
    QVERIFY(torch::isfinite(logits).all().item<bool>());
}

void TestModel::causal_data() { outputShape_data(); }

void TestModel::causal()
{
    QFETCH(QString, encoding);
    torch::manual_seed(1);
    Gpt model(smallOptions(encoding.toStdString()));
    openResidualBranches(*model); // closed, every block passes its input through untouched
    model->eval();
    torch::NoGradGuard noGrad;
    const auto tokens = torch::randint(0, 17, {2, 12}, torch::kLong);
    for (int k : {0, 5, 11}) {
        auto changed = tokens.clone();
        changed.index_put_({torch::indexing::Slice(), k}, (tokens.index({torch::indexing::Slice(), k}) + 1) % 17);
        const auto a = model->forward(tokens), b = model->forward(changed);
        // Positions before k must not see the change; position k itself must.
        if (k > 0) QVERIFY(torch::equal(a.narrow(1, 0, k), b.narrow(1, 0, k)));
        QVERIFY(!torch::allclose(a.narrow(1, k, 1), b.narrow(1, k, 1)));
    }
}

void TestModel::nothingLeftBehindOnConversion_data()
{
    QTest::addColumn<QString>("encoding");
    QTest::addColumn<int>("loraRank");
    QTest::addColumn<bool>("tied");
    QTest::newRow("learned") << "learned" << 0 << true;
    QTest::newRow("sinusoidal") << "sinusoidal" << 0 << true;
    QTest::newRow("rope") << "rope" << 0 << true;
    QTest::newRow("rope+lora") << "rope" << 4 << true;
    QTest::newRow("learned untied") << "learned" << 0 << false;
}

void TestModel::nothingLeftBehindOnConversion()
{
    QFETCH(QString, encoding);
    QFETCH(int, loraRank);
    QFETCH(bool, tied);
    auto o = smallOptions(encoding.toStdString());
    o.loraRank = loraRank;
    o.tieEmbeddings = tied;
    Gpt model(o);
    // A dtype conversion goes through the same registration path as a device move.
    model->to(torch::kDouble);
    for (const auto& p : model->named_parameters()) QCOMPARE(p.value().scalar_type(), torch::kDouble);
    for (const auto& b : model->named_buffers()) {
        if (b.value().is_floating_point()) QCOMPARE(b.value().scalar_type(), torch::kDouble);
    }
    torch::Tensor logits;
    const auto tokens = torch::randint(0, 17, {2, 12}, torch::kLong);
    const int offenders = float32OpsDuring([&] { logits = model->forward(tokens); });
    QVERIFY2(offenders == 0, ("a float32 tensor was left behind, first seen by " + g_firstOffender).c_str());
    QCOMPARE(logits.scalar_type(), torch::kDouble);
}

void TestModel::tripwireCatchesUnregisteredTensor()
{
    LeakyModule leaky;
    leaky->to(torch::kDouble);
    const int offenders = float32OpsDuring([&] { leaky->forward(torch::ones({2, 4}, torch::kDouble)); });
    QVERIFY(offenders > 0);
}

void TestModel::tiedEmbeddingsShareWeights()
{
    Gpt tied(smallOptions("learned"));
    auto o = smallOptions("learned");
    o.tieEmbeddings = false;
    Gpt untied(o);
    const auto count = [](Gpt& m) {
        std::int64_t n = 0;
        for (const auto& p : m->parameters()) n += p.numel();
        return n;
    };
    QCOMPARE(count(untied) - count(tied), std::int64_t(17 * 16));
}

void TestModel::loraStartsAsIdentityAndFreezesBase()
{
    torch::manual_seed(3);
    Gpt base(smallOptions("rope"));
    openResidualBranches(*base);
    torch::manual_seed(3);
    auto o = smallOptions("rope");
    o.loraRank = 4;
    Gpt lora(o);
    lora->freezeBaseForLora();
    // Copy base weights so only the adapters differ.
    torch::NoGradGuard noGrad;
    for (const auto& p : base->named_parameters()) lora->named_parameters()[p.key()].copy_(p.value());
    const auto tokens = torch::randint(0, 17, {2, 12}, torch::kLong);
    QVERIFY(torch::allclose(base->forward(tokens), lora->forward(tokens), 1e-6, 1e-6));
    for (const auto& p : lora->named_parameters()) {
        const bool adapter = p.key().find("lora_") != std::string::npos;
        QCOMPARE(p.value().requires_grad(), adapter);
    }
}

// lora.dropout drops each adapter's input while training (PEFT's
// lora_dropout: base(x) + scale * B(A(dropout(x)))), only the adapter's;
// in evaluation the layer is the undropped one.
void TestModel::loraDropoutDropsTheAdapterInputWhileTraining()
{
    auto o = smallOptions("rope");
    o.loraRank = 4;
    torch::manual_seed(5);
    Gpt plain(o);
    o.loraDropout = 0.5;
    torch::manual_seed(5);
    auto dropped = makeModel(o);
    torch::NoGradGuard noGrad;
    for (const auto& p : plain->named_parameters()) {
        // Adapters that act: B starts at zero.
        auto target = dropped->named_parameters()[p.key()];
        target.copy_(p.key().find("lora_B") != std::string::npos ? torch::full_like(p.value(), 0.05) : p.value());
        p.value().copy_(target);
    }
    const auto tokens = torch::randint(0, 17, {2, 12}, torch::kLong);
    plain->eval();
    dropped->eval();
    QVERIFY(torch::equal(plain->forward(tokens), dropped->forward(tokens)));
    dropped->train();
    plain->train();
    // Only dropout differs: the model's own (0 here) and the adapters'.
    QCOMPARE(o.dropout, 0.0);
    QVERIFY(torch::equal(plain->forward(tokens), plain->forward(tokens)));
    QVERIFY(!torch::equal(dropped->forward(tokens), dropped->forward(tokens)));
    QVERIFY(!torch::allclose(dropped->forward(tokens), plain->forward(tokens)));
}

void TestModel::checkpointedForwardMatches()
{
    torch::manual_seed(4);
    auto o = smallOptions("rope");
    Gpt plain(o);
    openResidualBranches(*plain);
    o.activationCheckpointing = true;
    torch::manual_seed(4);
    Gpt checkpointed(o);
    openResidualBranches(*checkpointed);
    const auto tokens = torch::randint(0, 17, {2, 12}, torch::kLong);
    QVERIFY(torch::allclose(plain->forward(tokens), checkpointed->forward(tokens), 1e-6, 1e-6));
}

void TestModel::heldOutSplitIgnoresOperandOrder()
{
    // a+b and b+a are one pair: if one is held out, training never sees the other.
    AdditionDataset data(2, 0.05);
    int heldOut = 0;
    for (std::uint64_t a = 0; a < 100; ++a) {
        for (std::uint64_t b = 0; b < 100; ++b) {
            QCOMPARE(data.isHeldOut(a, b), data.isHeldOut(b, a));
            heldOut += data.isHeldOut(a, b);
        }
    }
    QVERIFY(heldOut > 300 && heldOut < 700); // about 5% of 10,000
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const auto batch = data.trainBatch(512, gen);
    for (std::int64_t i = 0; i < 512; ++i) {
        const auto row = batch.inputs[i];
        const auto a = row[0].item<std::int64_t>() * 10 + row[1].item<std::int64_t>();
        const auto b = row[3].item<std::int64_t>() * 10 + row[4].item<std::int64_t>();
        QVERIFY(!data.isHeldOut(b, a));
    }
}

void TestModel::additionPromptsAndAnswers_data()
{
    QTest::addColumn<QString>("prompt");
    QTest::addColumn<QString>("encoded");
    QTest::newRow("full width") << "12+34=" << "1,2,10,3,4,11";
    QTest::newRow("padded, spaces") << "7 + 5 =" << "0,7,10,0,5,11";
    QTest::newRow("no equals sign") << "99+1" << "9,9,10,0,1,11";
    QTest::newRow("too many digits") << "123+4=" << "";
    QTest::newRow("letters") << "ab+1=" << "";
    QTest::newRow("empty") << "" << "";
}

void TestModel::additionPromptsAndAnswers()
{
    QFETCH(QString, prompt);
    QFETCH(QString, encoded);
    AdditionDataset data(2, 0.05);
    if (encoded.isEmpty()) {
        QVERIFY_THROWS_EXCEPTION(InputError, data.encodePrompt(prompt.toStdString()));
        return;
    }
    QStringList ids;
    for (const auto id : data.encodePrompt(prompt.toStdString())) ids << QString::number(id);
    QCOMPARE(ids.join(','), encoded);
    // The model writes sums least significant digit first; the answer reads the usual way.
    QCOMPARE(QString::fromStdString(data.decodeCompletion({6, 4, 0, AdditionDataset::End})), QString("46"));
    QCOMPARE(QString::fromStdString(data.decodeCompletion({0, 0, 1, AdditionDataset::End})), QString("100"));
    QCOMPARE(QString::fromStdString(data.decodeCompletion({0, 0, 0})), QString("0"));
}

namespace {
// Resident memory of one kind from /proc/self/status ("RssAnon" or "RssFile").
// A copy of the data shows as anonymous memory; pages of the mapping the
// batches touched show as file-backed (page cache, reclaimable).
std::int64_t residentBytes(const char* kind)
{
    std::ifstream status("/proc/self/status");
    std::string key;
    std::int64_t kib = 0;
    while (status >> key) {
        if (key == std::string(kind) + ":") {
            status >> kib;
            return kib * 1024;
        }
    }
    return -1;
}
} // namespace

// A small file's progress said "100% (0.0 of 0.0 MB)".
void TestModel::tokenizingProgressSaysTheSizeInItsUnit()
{
    QCOMPARE(tb::tokenizingProgressText("notes.txt", 900, 900), std::string("tokenizing notes.txt: 100% (900 bytes of 900 bytes)"));
    QCOMPARE(tb::tokenizingProgressText("corpus.jsonl", 3u << 20, 12u << 20),
             std::string("tokenizing corpus.jsonl: 25% (3.00 MiB of 12.00 MiB)"));
    QCOMPARE(tb::tokenizingProgressText("empty.txt", 0, 0), std::string("tokenizing empty.txt: 100% (0 bytes of 0 bytes)"));
}

void TestModel::textFileIsMappedNotCopied()
{
    // A 200 MB text file: the dataset must not hold it (8 bytes a byte once did)
    // nor read it whole before the first batch.
    QTemporaryDir dir;
    const auto path = dir.filePath("big.txt").toStdString();
    {
        std::ofstream out(path, std::ios::binary);
        std::string line = "the quick brown fox jumps over the lazy dog 0123456789\n";
        for (std::int64_t written = 0; written < 200'000'000; written += static_cast<std::int64_t>(line.size())) {
            out << line;
        }
    }
    // Drop the file from this process's view of the page cache accounting: RSS
    // counts only pages this process maps and touches.
    RunConfig config;
    config.data.source = "text";
    config.data.path = path;
    config.data.seqLen = 64;
    const auto anonBefore = residentBytes("RssAnon"), fileBefore = residentBytes("RssFile");
    QVERIFY(anonBefore >= 0);
    QElapsedTimer timer;
    timer.start();
    const auto data = makeDataset(config);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    for (int i = 0; i < 20; ++i) data->trainBatch(32, gen);
    const auto validation = data->validationBatches(32, 8);
    const auto elapsedMs = timer.elapsed();
    const auto anon = residentBytes("RssAnon") - anonBefore, file = residentBytes("RssFile") - fileBefore;
    qInfo("200 MB text file: dataset and 20 batches in %lld ms; resident memory +%.1f MiB anonymous, +%.1f MiB "
          "file-backed (mapped pages the batches touched)",
          elapsedMs, anon / 1048576.0, file / 1048576.0);
    QCOMPARE(validation.size(), std::size_t(8));
    QVERIFY2(anon < 20'000'000, qPrintable(QString("anonymous memory grew by %1 bytes").arg(anon)));
    QVERIFY2(elapsedMs < 5000, qPrintable(QString("took %1 ms").arg(elapsedMs)));
}

// OpenBLAS falls back to its Prescott (SSE3) kernels on a CPU model it does
// not know (Debian 12's 0.3.21 on Intel's Emerald Rapids, family 6 model 207),
// and matrix products ran at half speed there. The program replaces the
// fallback when it loads; here the fallback is also made on purpose, as an
// unknown CPU makes it, and the choice must replace it again.
void TestModel::openBlasFallbackKernelsAreReplaced()
{
    using CoreName = char* (*)();
    using Hook = void (*)();
    const auto coreName = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    const auto quit = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
    const auto init = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
    if (!coreName || !quit || !init) QSKIP("the system BLAS is not OpenBLAS with run-time kernel selection");
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) QSKIP("this CPU has no AVX2 and FMA: Prescott's kernels may be its best");
    if (std::getenv("OPENBLAS_CORETYPE")) QSKIP("OPENBLAS_CORETYPE is set: the user's choice stands");
    // At load (on a CPU OpenBLAS knows, its own choice stands).
    const auto atLoad = selectBlasKernels();
    qInfo("at load: %s", atLoad.describe().c_str());
    QCOMPARE(QString::fromStdString(atLoad.core), QString(coreName()));
    QVERIFY2(QString(coreName()).toLower() != "prescott", coreName());

    // A training run says so where the choice replaced OpenBLAS's.
    if (!atLoad.replaced.empty()) {
        RunConfig c;
        c.device = "cpu";
        c.model.nLayer = 1;
        c.model.dModel = 32;
        c.model.nHead = 2;
        c.data.source = "addition";
        c.data.digits = 1;
        c.train.batchSize = 4;
        c.train.steps = 1;
        c.train.evalEvery = 1;
        c.train.checkpointEvery = 0;
        std::string start;
        TrainerCallbacks callbacks;
        callbacks.onEvent = [&](const TrainerEvent& e) {
            if (e.kind == "start") start = e.message;
        };
        Trainer trainer(c, TrainerOptions{});
        QCOMPARE(trainer.run(callbacks).status, TrainResult::Status::Finished);
        QVERIFY2(start.find(atLoad.describe()) != std::string::npos, start.c_str());
    }

    // The fallback, made on purpose.
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    quit();
    init();
    unsetenv("OPENBLAS_CORETYPE");
    QCOMPARE(QString(coreName()).toLower(), QString("prescott"));
    const auto again = chooseBlasKernels();
    qInfo("after the fallback: %s", again.describe().c_str());
    QVERIFY2(QString(coreName()).toLower() != "prescott", coreName());
    QCOMPARE(QString::fromStdString(again.core), QString(coreName()));
    QCOMPARE(QString::fromStdString(again.replaced).toLower(), QString("prescott"));
}

QTEST_GUILESS_MAIN(TestModel)
#include "tst_model.moc"
