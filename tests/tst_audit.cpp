// The device audit, model.type "torchscript", the run-time locator and the
// vocabulary rule, on TorchScript models built in C++ (ScriptFixtures.h).
// Everything runs without a GPU: the audit is judged for a cuda:0 this machine
// lacks, and meta tensors stand in for tensors on another device.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "TestPaths.h"
#include "ScriptFixtures.h"
#include "diagnose/ErrorExplainer.h"
#include "diagnose/Preflight.h"
#include "run/RunSession.h"
#include "store/RunStore.h"
#include "train/DeviceAudit.h"
#include "train/ScriptedModel.h"
#include "train/Trainer.h"

using namespace tb;
using fixtures::ScriptVariant;

class TestAudit : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    std::string save(ScriptVariant variant, const QString& name, int vocab = 256)
    {
        const auto path = m_dir.filePath(name).toStdString();
        fixtures::scriptedLm(variant, vocab).save(path);
        return path;
    }

    RunConfig scripted(const std::string& path)
    {
        RunConfig c;
        c.name = "scripted";
        c.device = "cpu";
        c.model.type = "torchscript";
        c.model.path = path;
        c.data.source = "text"; // the bundled sample
        c.data.seqLen = 32;
        c.train.batchSize = 8;
        c.train.steps = 4;
        c.train.evalBatches = 1;
        c.train.precision = "fp32";
        c.optim.lr = 3e-3;
        return c;
    }

    static const AuditEntry* entry(const DeviceAuditReport& report, const std::string& path)
    {
        for (const auto& e : report.tensors) {
            if (e.path == path) return &e;
        }
        return nullptr;
    }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    // A user's scripted model trains: its own weights are the ones updated,
    // the loss falls, and a checkpoint resumes.
    void scriptedModelTrains()
    {
        auto c = scripted(save(ScriptVariant::Clean, "clean.pt"));
        c.train.steps = 40;
        c.train.logEvery = 1;
        Trainer trainer(c, {});
        QVERIFY(trainer.auditFindings().empty());
        QCOMPARE(trainer.parameterCount(), std::int64_t{256 * 16 * 2 + 2 * (16 + 16 + 16 * 16 + 16)});
        std::vector<double> losses;
        TrainerCallbacks cb;
        cb.onStep = [&](const StepMetrics& s) { losses.push_back(s.loss); };
        const auto result = trainer.run(cb);
        QVERIFY2(result.status == TrainResult::Status::Finished, result.message.c_str());
        QCOMPARE(losses.size(), std::size_t{40});
        QVERIFY2(losses.back() < losses.front() - 0.5, qPrintable(QString("%1 -> %2").arg(losses.front()).arg(losses.back())));
        const auto values = trainer.parameterValues();
        QCOMPARE(values.front().first, std::string("embed.weight"));
    }

    // Story 1: learned scales kept as plain tensor attributes. On a laptop the
    // audit for the GPU the run will rent flags them; parameters follow the move.
    void auditFlagsPlainTensorsBeforeThereIsAGpu()
    {
        if (cudaUsable()) QSKIP("this check judges a cuda:0 the machine lacks");
        const auto c = scripted(save(ScriptVariant::PlainTensor, "story1.pt"));
        const auto report = auditDevices(c, "cuda:0");
        QCOMPARE(report.target, std::string("cuda:0"));
        QVERIFY(!report.moved);
        QCOMPARE(report.flagged(), 4);
        const auto* scale = entry(report, "blocks.1.pe.position_scaling");
        QVERIFY(scale);
        QCOMPARE(scale->kind, std::string("attribute"));
        QCOMPARE(scale->device, std::string("cpu"));
        QCOMPARE(scale->expectedDevice, std::string("cuda:0"));
        QVERIFY(!scale->ok);
        QVERIFY2(scale->cause.find("neither parameter nor buffer") != std::string::npos, scale->cause.c_str());
        const auto* weight = entry(report, "blocks.1.proj.weight");
        QVERIFY(weight && weight->ok && weight->kind == "parameter" && weight->device == "cuda:0");
        const auto* state = entry(report, "blocks.1.proj.weight.exp_avg");
        QVERIFY(state && state->ok && state->kind == "optimizer_state");

        // The same model audited for the CPU it sits on is still flagged:
        // the attributes will not follow it anywhere.
        const auto local = auditDevices(c, "cpu");
        QVERIFY(local.moved);
        QCOMPARE(local.flagged(), 4);
        // And the trainer warns before step 1.
        Trainer trainer(c, {});
        QCOMPARE(trainer.auditFindings().size(), std::size_t{4});

        // The JSON shape of audit --json.
        const auto j = nlohmann::json::parse(report.toJson());
        QCOMPARE(j["flagged"].get<int>(), 4);
        for (const char* key : {"path", "kind", "dtype", "device", "expected_device", "ok", "cause"}) {
            QVERIFY2(j["tensors"][0].contains(key), key);
        }
    }

    // A clean model and a built-in one have nothing to flag, on any target.
    void auditPassesCleanModels()
    {
        const auto c = scripted(save(ScriptVariant::Clean, "clean2.pt"));
        QCOMPARE(auditDevices(c, "cuda:0").flagged(), 0);
        QCOMPARE(auditDevices(c, "cpu").flagged(), 0);
        RunConfig gpt;
        gpt.device = "cpu";
        const auto report = auditDevices(gpt);
        QCOMPARE(report.flagged(), 0);
        QVERIFY(entry(report, "wte.weight"));
        QVERIFY(entry(report, "wte.weight.exp_avg_sq"));
        QVERIFY_THROWS_EXCEPTION(InputError, auditDevices(gpt, "gpu0"));
    }

    // Stray tensors created on the meta device hold no data and move nowhere.
    void auditFlagsMetaTensors()
    {
        const auto c = scripted(save(ScriptVariant::MetaTensor, "meta.pt"));
        const auto report = auditDevices(c, "cpu");
        QVERIFY(report.moved);
        const auto* scale = entry(report, "blocks.1.pe.position_scaling");
        QVERIFY(scale && !scale->ok && scale->device == "meta");
        QVERIFY2(scale->cause.find("meta device") != std::string::npos, scale->cause.c_str());

        // A meta parameter: the move leaves it, the audit says why, and its
        // optimizer state is flagged with it.
        torch::jit::Module module("Meta");
        module.register_parameter("w", torch::ones({4}, torch::Device("meta")).requires_grad_(), false);
        module.define("def forward(self, tokens):\n    return self.w.expand(tokens.size(0), tokens.size(1), 4)\n");
        ScriptedLmImpl model(ModelOptions{}, module);
        const auto failed = moveModel(model, torch::Device(torch::kCPU));
        QCOMPARE(failed.size(), std::size_t{1});
        QVERIFY2(failed[0].second.find("meta") != std::string::npos, failed[0].second.c_str());
        const auto entries = auditModel(model, "cpu", true, "adamw");
        QCOMPARE(entries.size(), std::size_t{3});
        QVERIFY(!entries[0].ok && entries[0].cause.find("meta tensor holds no data") != std::string::npos);
        QVERIFY(!entries[1].ok && entries[1].kind == "optimizer_state");
    }

    // Story 2: state carried across steps in a dict, created without a device.
    void auditFindsCarriedState()
    {
        if (cudaUsable()) QSKIP("this check judges a cuda:0 the machine lacks");
        auto c = scripted(save(ScriptVariant::MemoryState, "story2.pt"));
        const auto report = auditDevices(c, "cuda:0");
        const auto* state = entry(report, "memory.bank[state]");
        QVERIFY(state && !state->ok && state->device == "cpu" && state->kind == "attribute");
        QCOMPARE(report.flagged(), 1);
        // On the CPU it trains, carrying the state from step to step.
        Trainer trainer(c, {});
        QVERIFY2(trainer.run({}).status == TrainResult::Status::Finished, "story 2 model on the CPU");
    }

    // The run-time locator: a forward that mixes a meta tensor into an
    // elementwise op raises the real error; the run is explained with the
    // first module where the devices meet, and stored that way.
    void locatorNamesTheModule()
    {
        const auto c = scripted(save(ScriptVariant::MetaTensor, "meta2.pt"));
        SessionOptions options;
        options.dbPath = m_dir.filePath("runs.db").toStdString();
        RunSession session(c, options);
        const auto outcome = session.run({});
        QCOMPARE(outcome.status, RunStatus::Failed);
        QVERIFY2(outcome.message.find("Expected all tensors to be on the same device, but found at least two devices, "
                                      "meta and cpu!") != std::string::npos,
                 outcome.message.c_str());
        QVERIFY(!outcome.failureFindings.empty());
        const auto& primary = outcome.failureFindings.front();
        QCOMPARE(primary.kind, std::string("meta_tensor")); // the device mismatch with a meta tensor in it
        QCOMPARE(primary.text.at("module"), std::string("blocks.1.pe"));
        QCOMPARE(primary.text.at("tensor"), std::string("blocks.1.pe.position_scaling"));
        QVERIFY2(primary.cause.find("module blocks.1.pe") != std::string::npos, primary.cause.c_str());
        RunStore store(options.dbPath, RunStore::Mode::ReadOnly);
        bool stored = false;
        for (const auto& set : store.findings(outcome.runId)) {
            stored = stored || (set.source == "failure" && set.findingsJson.find("blocks.1.pe") != std::string::npos);
        }
        QVERIFY(stored);
        bool warned = false;
        for (const auto& e : store.events(outcome.runId)) warned = warned || e.kind == "device_audit";
        QVERIFY(warned);
    }

    // The interpreter's whole traceback explains the same way as its last line.
    void interpreterTracebackIsExplained()
    {
        torch::jit::Module module("Mix");
        module.register_attribute("scale", c10::TensorType::get(), torch::ones({4}, torch::Device("meta")), false);
        module.define("def forward(self, x):\n    return x * self.scale\n");
        std::string text;
        try {
            module.forward({torch::ones({2, 4})});
        } catch (const std::exception& e) {
            text = e.what();
        }
        QVERIFY(text.find("TorchScript interpreter") != std::string::npos);
        QVERIFY(isDeviceMismatchText(text));
        QCOMPARE(errorSummary(text),
                 std::string("RuntimeError: Expected all tensors to be on the same device, but found at least two "
                             "devices, meta and cpu!"));
        const auto findings = ErrorExplainer::bundled().explain(text);
        QCOMPARE(findings.front().kind, std::string("meta_tensor"));
        QCOMPARE(findings.front().text.at("devices"), std::string("meta, cpu"));
    }

    // Token ids >= the vocabulary: caught before launch from the model itself.
    void vocabularyRule()
    {
        auto small = scripted(save(ScriptVariant::Clean, "vocab64.pt", 64));
        const auto facts = inspectModelFile(small);
        QVERIFY(facts && facts->loadError.empty());
        QVERIFY(facts->maxTokenId >= 64);
        QVERIFY(facts->lookupOutOfRange);
        PreflightTarget target;
        target.model = facts;
        const auto findings = runPreflight(small, target);
        QCOMPARE(findings.front().kind, std::string("token_id_out_of_vocab"));
        QCOMPARE(findings.front().severity, Severity::Error);

        auto fits = scripted(save(ScriptVariant::Clean, "vocab256.pt"));
        target.model = inspectModelFile(fits);
        QCOMPARE(target.model->vocabSize, std::int64_t{256});
        for (const auto& f : runPreflight(fits, target)) QVERIFY2(f.severity != Severity::Error, f.kind.c_str());

        // Addition needs 13 ids: the 64-row model fits it.
        small.data.source = "addition";
        small.data.seqLen = 0;
        target.model = inspectModelFile(small);
        QCOMPARE(target.model->maxTokenId, std::int64_t{12});
        QVERIFY(!target.model->lookupOutOfRange);

        // Not a TorchScript file: one finding that says what to do.
        const auto bogus = m_dir.filePath("not-a-model.pt").toStdString();
        { std::ofstream(bogus) << "hello"; }
        auto bad = scripted(bogus);
        target.model = inspectModelFile(bad);
        const auto refused = runPreflight(bad, target);
        QCOMPARE(refused.front().kind, std::string("model_unusable"));
        QVERIFY(refused.front().cause.find("torch.jit.save") != std::string::npos);
        QVERIFY_THROWS_EXCEPTION(InputError, Trainer(bad, {}));

        // A forward that wants more than the token ids, and one that returns a
        // [batch, vocab] tensor: unusable, each with the reason.
        const auto saveForward = [&](const char* name, const std::string& forward) {
            torch::jit::Module module(name);
            module.register_parameter("w", torch::ones({256}), false);
            module.define(forward);
            const auto path = m_dir.filePath(QString(name) + ".pt").toStdString();
            module.save(path);
            return path;
        };
        const auto twoPath = saveForward("TwoArgs", "def forward(self, tokens, mask):\n    return self.w.expand(tokens.size(0), tokens.size(1), 256)\n");
        target.model = inspectModelFile(scripted(twoPath));
        QVERIFY2(target.model->loadError.find("does not take one tensor") != std::string::npos, target.model->loadError.c_str());
        const auto flatPath = saveForward("Flat", "def forward(self, tokens):\n    return self.w.expand(tokens.size(0), 256)\n");
        target.model = inspectModelFile(scripted(flatPath));
        QVERIFY2(target.model->loadError.find("logits [batch, seq, vocab]") != std::string::npos, target.model->loadError.c_str());
        QCOMPARE(runPreflight(scripted(flatPath), target).front().kind, std::string("model_unusable"));
    }

    // Damaged model files (truncated, bytes flipped, random bytes): one clear
    // error or a working model, never anything else.
    void damagedModelFiles()
    {
        const auto good = save(ScriptVariant::Clean, "good.pt");
        std::string bytes;
        {
            std::ifstream in(good, std::ios::binary);
            bytes.assign(std::istreambuf_iterator<char>(in), {});
        }
        std::mt19937 random(11);
        int refused = 0;
        for (int i = 0; i < 24; ++i) {
            std::string damaged = bytes;
            if (i % 3 == 0) damaged.resize(random() % bytes.size());
            else if (i % 3 == 1) {
                for (int k = 0; k < 16; ++k) damaged[random() % damaged.size()] = static_cast<char>(random());
            } else {
                damaged.resize(random() % 4096);
                for (auto& c : damaged) c = static_cast<char>(random());
            }
            const auto path = m_dir.filePath(QString("damaged%1.pt").arg(i)).toStdString();
            { std::ofstream(path, std::ios::binary) << damaged; }
            try {
                auditDevices(scripted(path), "cpu");
            } catch (const InputError& e) {
                ++refused;
                QVERIFY2(std::string(e.what()).find("model.path: " + path) == 0, e.what());
                QVERIFY2(std::string(e.what()).find("()") == std::string::npos, e.what());
            }
        }
        QVERIFY(refused >= 12);
    }

    // The command line: exit 3 and the JSON the issue names when anything is flagged.
    void auditCommand()
    {
        const auto write = [&](const QString& name, const std::string& model) {
            QFile f(m_dir.filePath(name));
            f.open(QIODevice::WriteOnly);
            f.write(QString(R"({"device": "cpu", "model": {"type": "torchscript", "path": "%1"}, "data": {"source": "text"}})")
                        .arg(QString::fromStdString(model))
                        .toUtf8());
            return f.fileName();
        };
        const auto story1 = write("story1.json", save(ScriptVariant::PlainTensor, "cli1.pt"));
        QProcess cli;
        cli.start(TB_CLI_PATH, {"audit", "--config", story1, "--device", "cuda:0", "--json"});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 3);
        const auto j = nlohmann::json::parse(cli.readAllStandardOutput().toStdString());
        QCOMPARE(j["flagged"].get<int>(), 4);
        const auto clean = write("clean.json", save(ScriptVariant::Clean, "cli2.pt"));
        cli.start(TB_CLI_PATH, {"audit", "--config", clean});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 0);
        QVERIFY(cli.readAllStandardOutput().contains("Every tensor is on cpu"));
        cli.start(TB_CLI_PATH, {"audit", "--config", clean, "--device", "tpu"});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 2);
    }
};

QTEST_GUILESS_MAIN(TestAudit)
#include "tst_audit.moc"
