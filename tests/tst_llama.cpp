// The Llama-family model and model files: Hugging Face names and arithmetic,
// published parameter counts, LoRA merge, safetensors in and out, init_from.
#include <QtTest>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "TestPrinters.h"

#include "train/Llama.h"
#include "train/ModelIo.h"
#include "train/ModelTools.h"
#include "train/Safetensors.h"
#include "train/TrainStep.h"
#include "train/Trainer.h"

using namespace tb;

namespace {

ModelOptions smallLlama(int kvHeads, bool tied = false, int loraRank = 0)
{
    ModelOptions o;
    o.type = "llama";
    o.vocabSize = 19;
    o.maxLen = 12;
    o.nLayer = 2;
    o.dModel = 32;
    o.nHead = 4;
    o.nKvHead = kvHeads;
    o.dFf = 48;
    o.ropeTheta = 500.0;
    o.rmsNormEps = 1e-6;
    o.tieEmbeddings = tied;
    o.loraRank = loraRank;
    return o;
}

// The Hugging Face LlamaForCausalLM forward written out independently from the
// model's named weights: repeat_kv, rotate_half with cos/sin = cat(freqs, freqs),
// RMSNorm in float32, softmax in float32, down(silu(gate) * up).
torch::Tensor referenceForward(const std::map<std::string, torch::Tensor>& w, const ModelOptions& o,
                               const torch::Tensor& ids)
{
    const auto B = ids.size(0), T = ids.size(1);
    const int D = o.dModel / o.nHead, H = o.nHead, KV = o.kvHeads();
    const auto rms = [&](const torch::Tensor& x, const torch::Tensor& g) {
        return g * (x * torch::rsqrt(x.pow(2).mean(-1, true) + o.rmsNormEps));
    };
    const auto invFreq = 1.0 / torch::pow(o.ropeTheta, torch::arange(0, D, 2, torch::kDouble) / D);
    const auto freqs = torch::outer(torch::arange(T, torch::kDouble), invFreq);
    const auto emb = torch::cat({freqs, freqs}, -1);
    const auto cos = emb.cos().to(torch::kFloat), sin = emb.sin().to(torch::kFloat);
    const auto rotateHalf = [&](const torch::Tensor& x) {
        return torch::cat({-x.narrow(-1, D / 2, D / 2), x.narrow(-1, 0, D / 2)}, -1);
    };
    const auto repeatKv = [&](const torch::Tensor& x) { return x.repeat_interleave(H / KV, 1); };
    auto h = w.at("model.embed_tokens.weight").index({ids});
    const auto mask = torch::full({T, T}, -std::numeric_limits<float>::infinity()).triu(1);
    for (int l = 0; l < o.nLayer; ++l) {
        const auto p = "model.layers." + std::to_string(l) + ".";
        const auto x = rms(h, w.at(p + "input_layernorm.weight"));
        auto q = torch::matmul(x, w.at(p + "self_attn.q_proj.weight").t()).view({B, T, H, D}).transpose(1, 2);
        auto k = torch::matmul(x, w.at(p + "self_attn.k_proj.weight").t()).view({B, T, KV, D}).transpose(1, 2);
        auto v = torch::matmul(x, w.at(p + "self_attn.v_proj.weight").t()).view({B, T, KV, D}).transpose(1, 2);
        q = q * cos + rotateHalf(q) * sin;
        k = k * cos + rotateHalf(k) * sin;
        k = repeatKv(k);
        v = repeatKv(v);
        const auto scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(D)) + mask;
        const auto attn = torch::matmul(torch::softmax(scores, -1, torch::kFloat), v);
        h = h + torch::matmul(attn.transpose(1, 2).reshape({B, T, H * D}), w.at(p + "self_attn.o_proj.weight").t());
        const auto y = rms(h, w.at(p + "post_attention_layernorm.weight"));
        const auto gate = torch::matmul(y, w.at(p + "mlp.gate_proj.weight").t());
        const auto up = torch::matmul(y, w.at(p + "mlp.up_proj.weight").t());
        h = h + torch::matmul(torch::silu(gate) * up, w.at(p + "mlp.down_proj.weight").t());
    }
    h = rms(h, w.at("model.norm.weight"));
    const auto head = w.count("lm_head.weight") ? w.at("lm_head.weight") : w.at("model.embed_tokens.weight");
    return torch::matmul(h, head.t());
}

std::int64_t countParameters(torch::nn::Module& m)
{
    std::int64_t n = 0;
    for (const auto& p : m.parameters()) n += p.numel();
    return n;
}

} // namespace

class TestLlama : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { torch::set_num_threads(1); }
    void huggingFaceNames();
    void matchesReferenceArithmetic_data();
    void matchesReferenceArithmetic();
    void causal();
    void publishedParameterCounts_data();
    void publishedParameterCounts();
    void countMatchesBuiltModel_data();
    void countMatchesBuiltModel();
    void oneCountForEveryFamily();
    void mergedLoraGivesSameLogits();
    void safetensorsRoundTrip();
    void damagedSafetensorsAreRefused_data();
    void damagedSafetensorsAreRefused();
    void mismatchNamesTensorAndShapes();
    void exportThenInitFromRoundTrip();
};

void TestLlama::huggingFaceNames()
{
    Llama model(smallLlama(2));
    const auto params = model->named_parameters();
    for (const char* name : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                             "model.layers.1.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
                             "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
                             "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
                             "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
                             "model.norm.weight", "lm_head.weight"}) {
        QVERIFY2(params.contains(name), name);
    }
    QCOMPARE(params["model.layers.0.self_attn.k_proj.weight"].sizes().vec(), (std::vector<std::int64_t>{16, 32}));
    for (const auto& p : params) QVERIFY2(p.key().find("bias") == std::string::npos, p.key().c_str()); // no biases
    Llama tied(smallLlama(2, true));
    QVERIFY(!tied->named_parameters().contains("lm_head.weight"));
}

void TestLlama::matchesReferenceArithmetic_data()
{
    QTest::addColumn<int>("kvHeads");
    QTest::addColumn<bool>("tied");
    QTest::newRow("multi-head") << 4 << false;
    QTest::newRow("grouped-query, 2 kv heads") << 2 << false;
    QTest::newRow("multi-query, tied") << 1 << true;
}

void TestLlama::matchesReferenceArithmetic()
{
    QFETCH(int, kvHeads);
    QFETCH(bool, tied);
    torch::manual_seed(7);
    const auto o = smallLlama(kvHeads, tied);
    Llama model(o);
    model->eval();
    torch::NoGradGuard noGrad;
    // Non-trivial norm gains, so a wrong RMSNorm placement shows.
    for (auto& p : model->named_parameters()) {
        if (p.key().find("norm") != std::string::npos) p.value().uniform_(0.5, 1.5);
    }
    std::map<std::string, torch::Tensor> weights;
    for (const auto& p : model->named_parameters()) weights[p.key()] = p.value();
    const auto ids = torch::randint(0, 19, {3, 12}, torch::kLong);
    const auto diff = (model->forward(ids) - referenceForward(weights, o, ids)).abs().max().item<double>();
    QVERIFY2(diff < 1e-5, qPrintable(QString("max logit difference %1").arg(diff)));
}

void TestLlama::causal()
{
    torch::manual_seed(1);
    Llama model(smallLlama(2));
    model->eval();
    torch::NoGradGuard noGrad;
    const auto tokens = torch::randint(0, 19, {2, 12}, torch::kLong);
    for (int k : {0, 6, 11}) {
        auto changed = tokens.clone();
        changed.index_put_({torch::indexing::Slice(), k}, (tokens.index({torch::indexing::Slice(), k}) + 1) % 19);
        const auto a = model->forward(tokens), b = model->forward(changed);
        if (k > 0) QVERIFY(torch::equal(a.narrow(1, 0, k), b.narrow(1, 0, k)));
        QVERIFY(!torch::allclose(a.narrow(1, k, 1), b.narrow(1, k, 1)));
    }
}

void TestLlama::publishedParameterCounts_data()
{
    // Shapes from each model's published config.json; counts as published.
    QTest::addColumn<int>("vocab");
    QTest::addColumn<int>("hidden");
    QTest::addColumn<int>("intermediate");
    QTest::addColumn<int>("layers");
    QTest::addColumn<int>("heads");
    QTest::addColumn<int>("kvHeads");
    QTest::addColumn<bool>("tied");
    QTest::addColumn<qint64>("expected");
    QTest::newRow("TinyLlama-1.1B") << 32000 << 2048 << 5632 << 22 << 32 << 4 << false << qint64(1100048384);
    QTest::newRow("Llama-2-7B") << 32000 << 4096 << 11008 << 32 << 32 << 32 << false << qint64(6738415616);
    QTest::newRow("Mistral-7B-v0.1") << 32000 << 4096 << 14336 << 32 << 32 << 8 << false << qint64(7241732096);
    QTest::newRow("SmolLM-135M") << 49152 << 576 << 1536 << 30 << 9 << 3 << true << qint64(134515008);
}

void TestLlama::publishedParameterCounts()
{
    QFETCH(int, vocab);
    QFETCH(int, hidden);
    QFETCH(int, intermediate);
    QFETCH(int, layers);
    QFETCH(int, heads);
    QFETCH(int, kvHeads);
    QFETCH(bool, tied);
    QFETCH(qint64, expected);
    ModelOptions o;
    o.type = "llama";
    o.vocabSize = vocab;
    o.dModel = hidden;
    o.dFf = intermediate;
    o.nLayer = layers;
    o.nHead = heads;
    o.nKvHead = kvHeads;
    o.tieEmbeddings = tied;
    QCOMPARE(parameterCount(o), std::int64_t(expected));
}

void TestLlama::countMatchesBuiltModel_data()
{
    QTest::addColumn<int>("kvHeads");
    QTest::addColumn<bool>("tied");
    QTest::addColumn<int>("loraRank");
    QTest::newRow("gqa untied") << 2 << false << 0;
    QTest::newRow("mqa tied") << 1 << true << 0;
    QTest::newRow("lora 4") << 2 << false << 4;
}

void TestLlama::countMatchesBuiltModel()
{
    // The analytic count that checks published figures must equal the module's own.
    QFETCH(int, kvHeads);
    QFETCH(bool, tied);
    QFETCH(int, loraRank);
    const auto o = smallLlama(kvHeads, tied, loraRank);
    Llama model(o);
    QCOMPARE(countParameters(*model), parameterCount(o));
}

// config/ModelSpec.h's parameterCount is the one count (the window, the
// presets and the planner read it): it equals the built model's for each
// family and switch that changes the parameters.
void TestLlama::oneCountForEveryFamily()
{
    std::vector<std::pair<std::string, ModelOptions>> cases;
    const auto add = [&](const std::string& name, const std::function<void(ModelOptions&)>& edit, ModelOptions o) {
        edit(o);
        cases.emplace_back(name, o);
    };
    const auto none = [](ModelOptions&) {};
    ModelOptions gpt;
    gpt.vocabSize = 23;
    gpt.maxLen = 16;
    gpt.dModel = 32;
    gpt.nHead = 4;
    gpt.dFf = 40;
    for (const char* pos : {"learned", "sinusoidal", "rope"}) {
        add(std::string("gpt ") + pos, [&](ModelOptions& o) { o.positionalEncoding = pos; }, gpt);
    }
    add("gpt untied, lora qkv+out", [](ModelOptions& o) { o.tieEmbeddings = false; o.loraRank = 3; o.loraTargets = {"qkv", "out"}; }, gpt);
    ModelOptions gpt2 = gpt;
    gpt2.type = "gpt2";
    gpt2.hfFamily = "gpt2";
    add("gpt2", none, gpt2);
    add("gpt2 untied, lora attn.c_proj + c_fc", [](ModelOptions& o) { o.tieEmbeddings = false; o.loraRank = 2; o.loraTargets = {"attn.c_proj", "c_fc"}; }, gpt2);
    ModelOptions neox = gpt;
    neox.type = "gpt_neox";
    neox.hfFamily = "gpt_neox";
    neox.positionalEncoding = "rope";
    neox.rotaryDims = 4;
    neox.tieEmbeddings = false;
    neox.qkvBias = neox.outputBias = true;
    add("gpt_neox", none, neox);
    add("gpt_neox without attention biases, lora mlp", [](ModelOptions& o) { o.qkvBias = o.outputBias = false; o.loraRank = 2; o.loraTargets = {"dense_h_to_4h", "mlp.dense_4h_to_h"}; }, neox);
    const auto llama = smallLlama(2);
    add("llama biases", [](ModelOptions& o) { o.qkvBias = o.outputBias = o.mlpBias = true; }, llama);
    add("llama head size 12, q/k norms, lora", [](ModelOptions& o) { o.headDimOverride = 12; o.qkNorm = true; o.loraRank = 2; }, llama);
    add("phi3 fused, lora qkv_proj + down_proj", [](ModelOptions& o) { o.hfFamily = "phi3"; o.fusedProjections = true; o.loraRank = 2; o.loraTargets = {"qkv_proj", "down_proj"}; }, llama);
    add("gemma norms, tied", [](ModelOptions& o) { o.hfFamily = "gemma3_text"; o.gemmaNorms = true; o.qkNorm = true; o.geluTanh = true; o.embedScale = 5.0; o.tieEmbeddings = true; }, llama);
    for (const auto& [name, o] : cases) {
        const auto model = makeModel(o);
        QVERIFY2(countParameters(*model) == parameterCount(o),
                 qPrintable(QString("%1: built %2, counted %3").arg(QString::fromStdString(name)).arg(countParameters(*model)).arg(parameterCount(o))));
    }
}

void TestLlama::mergedLoraGivesSameLogits()
{
    torch::manual_seed(3);
    auto withLora = smallLlama(2, false, 4);
    Llama lora(withLora);
    {
        torch::NoGradGuard noGrad;
        for (auto& p : lora->named_parameters()) {
            if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.05); // a trained adapter
        }
    }
    lora->freezeBaseForLora();
    for (const auto& p : lora->named_parameters()) {
        QCOMPARE(p.value().requires_grad(), p.key().find("lora_") != std::string::npos);
    }
    Llama plain(smallLlama(2));
    loadModelWeights(*plain, modelTensors(*lora, true), "merged");
    lora->eval();
    plain->eval();
    torch::NoGradGuard noGrad;
    const auto ids = torch::randint(0, 19, {2, 12}, torch::kLong);
    const auto diff = (lora->forward(ids) - plain->forward(ids)).abs().max().item<double>();
    QVERIFY2(diff < 1e-5, qPrintable(QString("max logit difference %1").arg(diff)));
    // Unmerged adapters do not load into a model without them.
    QVERIFY_THROWS_EXCEPTION(InputError, loadModelWeights(*plain, modelTensors(*lora, false), "unmerged"));
}

void TestLlama::safetensorsRoundTrip()
{
    QTemporaryDir dir;
    const auto path = dir.filePath("t.safetensors").toStdString();
    std::map<std::string, torch::Tensor> tensors{{"a", torch::randn({3, 5})},
                                                 {"b.c", torch::arange(7, torch::kLong)},
                                                 {"half", torch::randn({4}).to(torch::kBFloat16)},
                                                 {"empty", torch::zeros({0, 3})}};
    writeSafetensors(path, tensors, {{"format", "pt"}});
    QVERIFY(!QFile::exists(QString::fromStdString(path + ".partial")));
    const auto back = readSafetensors(path);
    QCOMPARE(back.size(), tensors.size());
    for (const auto& [name, t] : tensors) {
        QCOMPARE(back.at(name).scalar_type(), t.scalar_type());
        QVERIFY2(torch::equal(back.at(name), t), name.c_str());
    }
    // Copied out of the mapped file: read straight into a tensor of the stored
    // dtype (with and without dropping the pages read from the cache),
    // converted into another dtype, or into a non-contiguous tensor.
    {
        const MappedSafetensors mapped(path);
        for (const bool dropBehind : {false, true}) {
            for (const auto& [name, t] : tensors) {
                auto same = torch::full_like(t, 3);
                mapped.copyInto(mapped.tensors().at(name), same, dropBehind);
                QVERIFY2(torch::equal(same, t), name.c_str());
            }
        }
        auto wider = torch::zeros({3, 5}, torch::kDouble);
        mapped.copyInto(mapped.tensors().at("a"), wider);
        QVERIFY(torch::allclose(wider, tensors.at("a").to(torch::kDouble)));
        auto strided = torch::zeros({5, 3}).t();
        mapped.copyInto(mapped.tensors().at("a"), strided);
        QVERIFY(torch::equal(strided, tensors.at("a")));
    }
    // A tensor read through the mapping for the last time (as a quantized
    // load reads each weight) leaves the page cache: its whole pages are no
    // longer resident, and reading it again still gives its values.
    {
        const auto bigPath = dir.filePath("big.safetensors").toStdString();
        const auto big = torch::randn({1024, 1024});
        writeSafetensors(bigPath, {{"w", big}}, {});
        const int fd = ::open(bigPath.c_str(), O_RDONLY);
        QVERIFY(fd >= 0);
        ::fsync(fd); // written pages are dirty until written back, and the cache keeps dirty pages
        ::close(fd);
        const MappedSafetensors mapped(bigPath);
        const auto& view = mapped.tensors().at("w");
        const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
        const auto begin = (reinterpret_cast<std::uintptr_t>(view.data_ptr()) + page - 1) / page * page;
        const auto end = (reinterpret_cast<std::uintptr_t>(view.data_ptr()) + 4u * 1024 * 1024) / page * page;
        const auto resident = [&] {
            std::vector<unsigned char> flags((end - begin) / page);
            if (::mincore(reinterpret_cast<void*>(begin), end - begin, flags.data()) != 0) return -1;
            return static_cast<int>(std::count_if(flags.begin(), flags.end(), [](unsigned char f) { return f & 1; }));
        };
        QVERIFY(torch::equal(view, big)); // read through the mapping
        QVERIFY2(resident() > 0, qPrintable(QString::number(resident())));
        mapped.dropPages(view);
        QCOMPARE(resident(), 0);
        QVERIFY(torch::equal(view, big));
    }
    // The layout other readers expect: little-endian header length, JSON, data 8-byte aligned.
    QFile f(QString::fromStdString(path));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto bytes = f.readAll();
    quint64 n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<quint8>(bytes[i]);
    QCOMPARE(n % 8, quint64(0));
    QVERIFY(bytes.mid(8, static_cast<int>(n)).contains("\"a\":{\"data_offsets\":[0,60],\"dtype\":\"F32\",\"shape\":[3,5]}"));
}

void TestLlama::damagedSafetensorsAreRefused_data()
{
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<QString>("expected");
    const auto withHeader = [](const QByteArray& json, int dataBytes) {
        QByteArray out(8, '\0');
        for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
        return out + json + QByteArray(dataBytes, '\0');
    };
    QTest::newRow("empty file") << QByteArray() << "too short";
    QTest::newRow("huge header length") << QByteArray("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10) << "header length";
    QTest::newRow("not json") << withHeader("{nope", 0) << "damaged header";
    QTest::newRow("deep nesting") << withHeader(QByteArray(5000, '[') + QByteArray(5000, ']'), 0) << "damaged header";
    QTest::newRow("offsets past the end")
        << withHeader(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8) << "data_offsets";
    QTest::newRow("shape and offsets disagree")
        << withHeader(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16) << "data_offsets";
    QTest::newRow("overflowing shape")
        << withHeader(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", 16)
        << "larger than the file";
    QTest::newRow("unknown dtype") << withHeader(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1)
                                   << "dtype";
}

void TestLlama::damagedSafetensorsAreRefused()
{
    QFETCH(QByteArray, content);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    const auto path = dir.filePath("bad.safetensors");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(content);
    f.close();
    try {
        readSafetensors(path.toStdString());
        QFAIL("a damaged file was read");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains(expected), e.what());
        QVERIFY(std::string(e.what()).size() < 400);
    }
}

void TestLlama::mismatchNamesTensorAndShapes()
{
    Llama small(smallLlama(2));
    auto wider = smallLlama(2);
    wider.dFf = 64;
    Llama other(wider);
    try {
        loadModelWeights(*small, modelTensors(*other, false), "other.safetensors");
        QFAIL("mismatching weights were loaded");
    } catch (const InputError& e) {
        const QString text = e.what();
        // The first parameter that differs, with both shapes.
        QVERIFY2(text.contains("model.layers.0.mlp.gate_proj.weight") && text.contains("[64, 32]")
                     && text.contains("[48, 32]"),
                 e.what());
    }
}

void TestLlama::exportThenInitFromRoundTrip()
{
    QTemporaryDir dir;
    RunConfig c;
    c.device = "cpu";
    c.model.type = "llama";
    c.model.nLayer = 1;
    c.model.dModel = 32;
    c.model.nHead = 4;
    c.model.nKvHead = 2;
    c.model.positionalEncoding = "rope";
    c.model.tieEmbeddings = false;
    c.data.digits = 2;
    c.train.steps = 2;
    c.train.batchSize = 4;
    c.train.precision = "fp32";
    c.lora.rank = 2;
    std::string checkpoint;
    std::vector<std::pair<std::string, std::vector<float>>> trained;
    {
        TrainerOptions options;
        options.checkpointDir = dir.filePath("ckpt").toStdString();
        Trainer trainer(c, options);
        checkpoint = trainer.run({}).lastCheckpoint;
        trained = trainer.parameterValues();
    }
    const auto out = dir.filePath("export").toStdString();
    const auto exported = exportModel(c, checkpoint, out, true);
    QVERIFY(QFile::exists(QString::fromStdString(exported.configPath)));
    QVERIFY(exported.mergedLora);
    // The merged export starts a plain (no LoRA) run with the same function.
    RunConfig plain = c;
    plain.lora.rank = 0;
    plain.train.initFrom = out;
    Trainer fromExport(plain, {});
    const auto weights = readModelWeights(out);
    for (const auto& [name, values] : fromExport.parameterValues()) {
        const auto t = weights.at(name).contiguous();
        QVERIFY2(std::equal(values.begin(), values.end(), t.data_ptr<float>()), name.c_str());
    }
    // The unmerged base weights equal the trained base weights.
    for (const auto& [name, values] : trained) {
        if (name.find("lora_") != std::string::npos || name.find("proj") != std::string::npos) continue;
        const auto t = weights.at(name).contiguous();
        QVERIFY2(std::equal(values.begin(), values.end(), t.data_ptr<float>()), name.c_str());
    }
    // The config.json describes the model for LlamaForCausalLM.
    QFile f(QString::fromStdString(exported.configPath));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto text = f.readAll();
    for (const char* key : {"\"LlamaForCausalLM\"", "\"num_key_value_heads\": 2", "\"hidden_size\": 32",
                            "\"tie_word_embeddings\": false", "\"vocab_size\": 13"}) {
        QVERIFY2(text.contains(key), key);
    }
}

QTEST_GUILESS_MAIN(TestLlama)
#include "tst_llama.moc"
