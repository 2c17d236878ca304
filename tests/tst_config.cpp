// Config parsing and validation: what a user sees when a config is wrong.
#include <QtTest>
#include <QTemporaryDir>

#include <filesystem>

#include "TestPaths.h"
#include "common/Errors.h"
#include "config/HfArchitecture.h"
#include "config/ModelSpec.h"
#include "config/LearningRate.h"
#include "config/RunConfig.h"

using namespace tb;

class TestConfig : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void bundledExamplesParse_data();
    void bundledExamplesParse();
    void defaultsAreValid();
    void learningRateFollowsTheSchedule();
    void roundTripThroughJson();
    void invalidConfigsNameFieldAndReason_data();
    void invalidConfigsNameFieldAndReason();
    void everyProblemIsReported();
    void relativeDataPathResolvesAgainstConfigFolder();
    void missingFileIsOneClearError();
    void hfParameterCountsMatchPublished_data();
    void hfParameterCountsMatchPublished();
    void hfParameterCountsMatchPublishedGpt_data();
    void hfParameterCountsMatchPublishedGpt();
    void qwen3ReadsItsNormsAndHeadSize();
    void hfConfigRefusesWhatIsNotImplemented_data();
    void hfConfigRefusesWhatIsNotImplemented();
};

void TestConfig::bundledExamplesParse_data()
{
    QTest::addColumn<QString>("file");
    for (const auto& entry : std::filesystem::directory_iterator(tb::test::sourcePath("resources/examples"))) {
        const auto name = entry.path().filename().string();
        QTest::newRow(name.c_str()) << QString::fromStdString(entry.path().string());
    }
}

void TestConfig::bundledExamplesParse()
{
    QFETCH(QString, file);
    try {
        const RunConfig c = loadConfigFile(file.toStdString());
        QVERIFY(!c.name.empty());
        QVERIFY(validateConfig(c).empty());
    } catch (const std::exception& e) {
        QFAIL(e.what());
    }
}

void TestConfig::learningRateFollowsTheSchedule()
{
    // lr 0.01 over 6 steps, 2 of them warmup: the decay spans steps 3 to 6
    // (progress 1/4 to 1) and ends at min_lr_ratio x lr.
    OptimConfig o;
    o.lr = 0.01;
    o.warmupSteps = 2;
    o.minLrRatio = 0.5;
    const auto at = [&](const char* schedule, int step) {
        o.schedule = schedule;
        return learningRateAt(o, step, 6);
    };
    for (const char* s : {"constant", "linear", "cosine"}) {
        QCOMPARE(at(s, 1), 0.005);
        QCOMPARE(at(s, 2), 0.01);
    }
    QCOMPARE(at("constant", 3), 0.01);
    QCOMPARE(at("constant", 6), 0.01);
    QCOMPARE(at("linear", 3), 0.00875);
    QCOMPARE(at("linear", 4), 0.0075);
    QCOMPARE(at("linear", 6), 0.005);
    QCOMPARE(at("cosine", 4), 0.0075); // halfway down the half cosine
    QCOMPARE(at("cosine", 6), 0.005);
    QVERIFY(at("cosine", 3) > at("linear", 3)); // a cosine leaves the peak slower
    // The default: a cosine to 10% of lr.
    const OptimConfig d;
    QCOMPARE(learningRateAt(d, 200, 200), 0.1 * d.lr);
}

void TestConfig::defaultsAreValid()
{
    const RunConfig c = parseConfig("{}");
    QCOMPARE(c.device, std::string("auto"));
    QCOMPARE(c.model.positionalEncoding, std::string("learned"));
    QCOMPARE(c.train.gradAccum, 1);
    QCOMPARE(c.lora.rank, 0);
    QCOMPARE(c.data.valFraction, 0.05);
    QCOMPARE(effectiveSeqLen(c), additionSequenceLength(3));
}

void TestConfig::roundTripThroughJson()
{
    RunConfig c = parseConfig(R"({"name": "rt", "model": {"positional_encoding": "rope", "d_model": 64},
        "data": {"source": "text", "seq_len": 32}, "optim": {"optimizer": "sgd", "betas": [0.8, 0.9]},
        "train": {"batch_size": 8, "grad_accum": 2, "seed": 12345678901}, "lora": {"rank": 4, "targets": ["attn"]}})");
    const RunConfig again = parseConfig(configToJson(c));
    QCOMPARE(configToJson(again), configToJson(c));
    QCOMPARE(again.train.seed, std::uint64_t(12345678901ULL));
    QCOMPARE(again.lora.targets.size(), std::size_t(1));
    QCOMPARE(again.optim.betas[0], 0.8);

    // jsonl's field and skip_bad_lines survive the trip.
    QTemporaryDir dir;
    QFile config(dir.filePath("config.json"));
    QVERIFY(config.open(QIODevice::WriteOnly));
    config.write(R"({"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128})");
    config.close();
    for (const char* name : {"tokenizer.json", "d.jsonl"}) { // validation looks for them
        QFile f(dir.filePath(name));
        QVERIFY(f.open(QIODevice::WriteOnly));
    }
    const RunConfig j = parseConfig(R"({"model": {"type": "hf", "path": ")" + dir.path().toStdString() + R"("},
        "data": {"source": "jsonl", "path": ")" + dir.filePath("d.jsonl").toStdString() + R"(", "field": "body", "skip_bad_lines": true}})");
    const RunConfig jAgain = parseConfig(configToJson(j));
    QCOMPARE(jAgain.data.field, std::string("body"));
    QVERIFY(jAgain.data.skipBadLines);
    QCOMPARE(configToJson(jAgain), configToJson(j));
}

void TestConfig::invalidConfigsNameFieldAndReason_data()
{
    QTest::addColumn<QString>("json");
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("reason");
    auto row = [](const char* name, const char* json, const char* path, const char* reason) {
        QTest::newRow(name) << QString(json) << QString(path) << QString(reason);
    };
    row("negative batch", R"({"train": {"batch_size": -4}})", "train.batch_size", "must be a positive integer up to 65536, got -4");
    row("zero batch", R"({"train": {"batch_size": 0}})", "train.batch_size", "got 0");
    row("absurd batch", R"({"train": {"batch_size": 100000000}})", "train.batch_size", "up to 65536");
    row("fractional batch", R"({"train": {"batch_size": 4.5}})", "train.batch_size", "must be an integer, got 4.5");
    row("string batch", R"({"train": {"batch_size": "32"}})", "train.batch_size", "must be an integer, got the string \"32\"");
    row("unknown key typo", R"({"train": {"batchsize": 4}})", "train.batchsize", "did you mean \"batch_size\"");
    row("unknown top key", R"({"optimiser": {}})", "optimiser", "did you mean \"optim\"");
    row("unknown key far", R"({"model": {"zzzzzzzzzz": 1}})", "model.zzzzzzzzzz", "known keys here are");
    row("zero steps", R"({"train": {"steps": 0}})", "train.steps", "must be a positive integer");
    row("huge lr", R"({"optim": {"lr": 1e9}})", "optim.lr", "(0, 10]");
    row("zero lr", R"({"optim": {"lr": 0}})", "optim.lr", "got 0");
    row("overflowing lr", R"({"optim": {"lr": 1e400}})", "", "number overflow parsing '1e400'");
    row("negative weight decay", R"({"optim": {"weight_decay": -0.1}})", "optim.weight_decay", "[0, 1]");
    row("beta is one", R"({"optim": {"betas": [0.9, 1.0]}})", "optim.betas[1]", "[0, 1)");
    row("betas wrong shape", R"({"optim": {"betas": [0.9]}})", "optim.betas", "array of two numbers");
    row("optimizer unknown", R"({"optim": {"optimizer": "adamm"}})", "optim.optimizer", "did you mean \"adamw\"");
    row("schedule unknown", R"({"optim": {"schedule": "linearly"}})", "optim.schedule", "did you mean \"linear\"");
    row("min lr above peak", R"({"optim": {"min_lr_ratio": 1.5}})", "optim.min_lr_ratio", "[0, 1]");
    row("warmup beyond steps", R"({"train": {"steps": 10}, "optim": {"warmup_steps": 20}})", "optim.warmup_steps", "at most train.steps");
    row("negative clip", R"({"optim": {"grad_clip": -1}})", "optim.grad_clip", "got -1");
    row("heads do not divide", R"({"model": {"d_model": 100, "n_head": 3}})", "model.n_head", "must divide model.d_model (100)");
    row("zero layers", R"({"model": {"n_layer": 0}})", "model.n_layer", "must be a positive integer up to 256, got 0");
    row("tiny d_model", R"({"model": {"d_model": 4, "n_head": 1}})", "model.d_model", "from 8 to 16384");
    row("encoding unknown", R"({"model": {"positional_encoding": "alibi"}})", "model.positional_encoding", "\"learned\", \"sinusoidal\", \"rope\"");
    row("rope odd head", R"({"model": {"d_model": 12, "n_head": 4, "positional_encoding": "rope"}})", "model.positional_encoding", "even head size");
    row("dropout one", R"({"model": {"dropout": 1.0}})", "model.dropout", "[0, 1)");
    row("tie not bool", R"({"model": {"tie_embeddings": "yes"}})", "model.tie_embeddings", "must be true or false");
    row("model type", R"({"model": {"type": "lstm"}})", "model.type", "must be one of \"gpt\"");
    row("source unknown", R"({"data": {"source": "images"}})", "data.source", "\"addition\", \"text\"");
    row("digits too many", R"({"data": {"digits": 40}})", "data.digits", "up to 18, got 40");
    row("addition seq_len", R"({"data": {"digits": 3, "seq_len": 50}})", "data.seq_len", "uses sequences of 12 tokens");
    row("seq_len zero", R"({"data": {"source": "text", "seq_len": 0}})", "data.seq_len", "got 0");
    row("val fraction zero", R"({"data": {"val_fraction": 0}})", "data.val_fraction", "(0, 0.5]");
    row("missing data file", R"({"data": {"source": "text", "path": "/nonexistent/corpus.txt"}})", "data.path", "file not found: /nonexistent/corpus.txt");
    row("jsonl needs an hf model", R"({"data": {"source": "jsonl", "path": "x.jsonl"}})", "data.source",
        "tokenized with a model folder's tokenizer");
    row("jsonl needs a file", R"({"model": {"type": "hf", "path": "m"}, "data": {"source": "jsonl"}})", "data.path",
        "needs the file of JSON records");
    row("field without jsonl", R"({"data": {"source": "text", "field": "body"}})", "data.field", "only used with data.source \"jsonl\"");
    row("field empty", R"({"model": {"type": "hf", "path": "m"}, "data": {"source": "jsonl", "path": "x", "field": ""}})",
        "data.field", "must name the JSON field");
    row("skip bad lines with addition", R"({"data": {"skip_bad_lines": true}})", "data.skip_bad_lines", "only used with");
    row("skip bad lines not bool", R"({"data": {"source": "text", "skip_bad_lines": "yes"}})", "data.skip_bad_lines",
        "must be true or false");
    row("hf with addition", R"({"model": {"type": "hf", "path": "m"}, "data": {"source": "addition"}})", "data.source",
        "its own tokenizer's ids");
    row("path with addition", R"({"data": {"source": "addition", "path": "x.txt"}})", "data.path", "only used with data.source \"text\"");
    row("precision unknown", R"({"train": {"precision": "fp8"}})", "train.precision", "\"auto\", \"fp32\", \"fp16\", \"bf16\"");
    row("fp16 on cpu", R"({"device": "cpu", "train": {"precision": "fp16"}})", "train.precision", "fp16 needs a CUDA device");
    row("sgd in pure bf16", R"({"train": {"precision": "bf16-pure"}, "optim": {"optimizer": "sgd"}})", "optim.optimizer",
        "loses the small ones");
    row("device unknown", R"({"device": "tpu"})", "device", "\"cuda:N\"");
    row("device malformed", R"({"device": "cuda:x"})", "device", "got \"cuda:x\"");
    row("grad accum zero", R"({"train": {"grad_accum": 0}})", "train.grad_accum", "up to 4096");
    row("log every zero", R"({"train": {"log_every": 0}})", "train.log_every", "positive integer");
    row("threads absurd", R"({"train": {"threads": 1000}})", "train.threads", "from 0 to 256");
    row("negative seed", R"({"train": {"seed": -1}})", "train.seed", "non-negative integer");
    row("checkpointing not bool", R"({"train": {"activation_checkpointing": 1}})", "train.activation_checkpointing", "true or false");
    row("lora rank too big", R"({"lora": {"rank": 512}})", "lora.rank", "smaller than model.d_model (128)");
    row("lora target unknown", R"({"lora": {"rank": 4, "targets": ["ffn"]}})", "lora.targets[0]", "\"attn\", \"mlp\"");
    row("lora targets empty", R"({"lora": {"rank": 4, "targets": []}})", "lora.targets", "at least one");
    row("lora alpha zero", R"({"lora": {"alpha": 0}})", "lora.alpha", "(0, 1e+06]");
    row("section not object", R"({"train": 5})", "train", "must be an object");
    row("name empty", R"({"name": ""})", "name", "1 to 200 characters");
    row("top level array", R"([1, 2])", "", "must be a JSON object");
    row("malformed json", "{\"train\": {\"steps\": 10,}}", "", "not valid JSON at line 1");
    row("nan literal", R"({"optim": {"lr": NaN}})", "", "not valid JSON");
}

void TestConfig::invalidConfigsNameFieldAndReason()
{
    QFETCH(QString, json);
    QFETCH(QString, path);
    QFETCH(QString, reason);
    try {
        parseConfig(json.toStdString(), "test.json");
        QFAIL("the config was accepted");
    } catch (const ConfigError& e) {
        bool found = false;
        for (const auto& issue : e.issues()) {
            if (issue.path == path.toStdString()
                && QString::fromStdString(issue.message).contains(reason)) {
                found = true;
            }
        }
        if (!found) QFAIL(qPrintable("expected '" + path + ": ..." + reason + "' in:\n" + QString(e.what())));
        // The message names the source file, so a user knows which file to open.
        QVERIFY(QString(e.what()).startsWith("test.json: "));
    }
}

void TestConfig::everyProblemIsReported()
{
    try {
        parseConfig(R"({"train": {"batch_size": -1, "steps": 0}, "optim": {"lr": -1}, "model": {"n_layer": 0}})");
        QFAIL("accepted");
    } catch (const ConfigError& e) {
        QCOMPARE(e.issues().size(), std::size_t(4));
    }
}

void TestConfig::relativeDataPathResolvesAgainstConfigFolder()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QFile text(dir.filePath("corpus.txt"));
    QVERIFY(text.open(QIODevice::WriteOnly));
    text.write(QByteArray(4096, 'a'));
    text.close();
    QFile config(dir.filePath("c.json"));
    QVERIFY(config.open(QIODevice::WriteOnly));
    config.write(R"({"data": {"source": "text", "path": "corpus.txt"}})");
    config.close();
    const RunConfig c = loadConfigFile(dir.filePath("c.json").toStdString());
    QCOMPARE(QString::fromStdString(resolvedDataPath(c)), dir.filePath("corpus.txt"));
}

void TestConfig::missingFileIsOneClearError()
{
    try {
        loadConfigFile("/nonexistent/config.json");
        QFAIL("accepted");
    } catch (const InputError& e) {
        QVERIFY(QString(e.what()).contains("config file not found: /nonexistent/config.json"));
    }
}

// config.json values as published on the Hub; counts from the model cards
// (and transformers' num_parameters()).
void TestConfig::hfParameterCountsMatchPublished_data()
{
    QTest::addColumn<QString>("json");
    QTest::addColumn<qint64>("published");
    QTest::newRow("TinyLlama-1.1B") << R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048,
        "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "hidden_act": "silu"})"
                                    << qint64(1100048384);
    QTest::newRow("Qwen2.5-0.5B") << R"({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
        "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": false,
        "max_window_layers": 21, "tie_word_embeddings": true, "hidden_act": "silu", "rms_norm_eps": 1e-06})"
                                  << qint64(494032768);
    QTest::newRow("Mistral-7B-v0.1") << R"({"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 32768, "sliding_window": 4096, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": false})" << qint64(7241732096);
    QTest::newRow("Llama-3.2-1B") << R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": true,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "attention_bias": false, "mlp_bias": false, "hidden_act": "silu"})" << qint64(1235814400);
    QTest::newRow("gemma-3-1b-it") << R"({"model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 1152,
        "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 256, "max_position_embeddings": 32768, "query_pre_attn_scalar": 256, "rope_theta": 1000000,
        "rope_local_base_freq": 10000, "sliding_window": 512, "sliding_window_pattern": 6, "rms_norm_eps": 1e-06,
        "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": null, "attn_logit_softcapping": null,
        "rope_scaling": null, "attention_bias": false})" << qint64(999885952);
    // Its safetensors index: total_size 7,642,159,104 bytes of bf16.
    QTest::newRow("Phi-3-mini-4k-instruct") << R"({"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
        "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 4096, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": null, "sliding_window": 2047, "rms_norm_eps": 1e-05, "tie_word_embeddings": false,
        "hidden_act": "silu", "attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0})" << qint64(3821079552);
}

void TestConfig::hfParameterCountsMatchPublishedGpt_data()
{
    QTest::addColumn<QString>("json");
    QTest::addColumn<qint64>("published");
    QTest::newRow("GPT-2 124M") << R"({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
        "n_head": 12, "n_positions": 1024, "n_ctx": 1024, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-05})" << qint64(124439808);
    QTest::newRow("Pythia-160M") << R"({"model_type": "gpt_neox", "vocab_size": 50304, "hidden_size": 768,
        "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 2048,
        "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": true, "hidden_act": "gelu",
        "tie_word_embeddings": false, "layer_norm_eps": 1e-05})" << qint64(162322944);
}

void TestConfig::hfParameterCountsMatchPublishedGpt() { hfParameterCountsMatchPublished(); }

void TestConfig::hfParameterCountsMatchPublished()
{
    QFETCH(QString, json);
    QFETCH(qint64, published);
    const auto arch = tb::hfArchitectureFromJson(json.toStdString(), "config.json");
    QCOMPARE(qint64(tb::parameterCount(tb::modelSpecFromHf(arch, "", static_cast<int>(arch.maxPositions)))), published);
}

// Qwen3-0.6B's config.json: the model card gives 0.6B parameters, 0.44B of
// them outside the embedding (rounded); the count has the per-head query and
// key norms (28 layers x 2 x 128). Qwen3Config's head_dim is 128 when absent.
void TestConfig::qwen3ReadsItsNormsAndHeadSize()
{
    const char* json = R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 40960, "rope_theta": 1000000, "rms_norm_eps": 1e-06, "tie_word_embeddings": true,
        "attention_bias": false, "use_sliding_window": false, "sliding_window": null, "hidden_act": "silu"})";
    const auto arch = tb::hfArchitectureFromJson(json, "config.json");
    QVERIFY(arch.qkNorm && arch.llamaFamily());
    QCOMPARE(arch.headDim, std::int64_t(128));
    const auto count = tb::parameterCount(tb::modelSpecFromHf(arch, "", 40960));
    QCOMPARE(qint64(count), qint64(596049920));
    QCOMPARE(qRound64((count - arch.vocabSize * arch.hiddenSize) / 1e7), qint64(44)); // 0.44B
    QVERIFY2(QString::fromStdString(arch.summary()).contains("q/k norms"), arch.summary().c_str());
    auto withoutHeadDim = QString(json).remove(R"("head_dim": 128,)").toStdString();
    QCOMPARE(tb::hfArchitectureFromJson(withoutHeadDim, "config.json").headDim, std::int64_t(128));
    QVERIFY_THROWS_EXCEPTION(tb::InputError, tb::hfArchitectureFromJson(
        QString(json).replace(R"("use_sliding_window": false)", R"("use_sliding_window": true)").toStdString(), "config.json"));
}

void TestConfig::hfConfigRefusesWhatIsNotImplemented_data()
{
    QTest::addColumn<QString>("json");
    QTest::addColumn<QString>("named");
    QTest::newRow("unknown family") << R"({"model_type": "falcon"})" << "\"falcon\" is not a family";
    QTest::newRow("gpt2 layer-scaled attention") << R"({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": true})"
                                                 << "scale_attn_by_inverse_layer_idx";
    QTest::newRow("neox rope scaling") << R"({"model_type": "gpt_neox", "rope_scaling": {"type": "linear", "factor": 2}})"
                                       << "rope_scaling";
    QTest::newRow("gpt2 activation") << R"({"model_type": "gpt2", "activation_function": "relu"})"
                                     << "activation_function \"relu\"";
    QTest::newRow("mixture of experts") << R"({"model_type": "mistral", "num_local_experts": 8})" << "num_local_experts";
    QTest::newRow("transformers 5 rope_parameters")
        << R"({"model_type": "llama", "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}})"
        << "\"rope_parameters\"";
    QTest::newRow("llama partial rotary") << R"({"model_type": "llama", "partial_rotary_factor": 0.5})"
                                          << "\"partial_rotary_factor\"";
    QTest::newRow("other activation") << R"({"model_type": "llama", "hidden_act": "gelu"})" << "hidden_act \"gelu\"";
    QTest::newRow("phi-3 long rope") << R"({"model_type": "phi3", "rope_scaling": {"type": "longrope", "short_factor": [1.0],
        "long_factor": [1.0]}})" << "rope_scaling";
    QTest::newRow("phi-4-mini partial rotary") << R"({"model_type": "phi3", "partial_rotary_factor": 0.75})"
                                               << "partial_rotary_factor";
    QTest::newRow("yarn scaling") << R"({"model_type": "qwen2", "rope_scaling": {"type": "yarn", "factor": 4}})"
                                  << "rope_scaling type \"yarn\"";
    QTest::newRow("qwen2 window") << R"({"model_type": "qwen2", "use_sliding_window": true})" << "use_sliding_window";
    QTest::newRow("bad size") << R"({"model_type": "llama", "hidden_size": -4})" << "\"hidden_size\" must be a positive";
    QTest::newRow("kv heads") << R"({"model_type": "llama", "num_attention_heads": 6, "num_key_value_heads": 4})"
                              << "does not divide";
}

void TestConfig::hfConfigRefusesWhatIsNotImplemented()
{
    QFETCH(QString, json);
    QFETCH(QString, named);
    try {
        tb::hfArchitectureFromJson(json.toStdString(), "config.json");
        QFAIL("accepted");
    } catch (const tb::InputError& e) {
        QVERIFY2(QString::fromStdString(e.what()).contains(named), e.what());
    }
}

QTEST_GUILESS_MAIN(TestConfig)
#include "tst_config.moc"
