// Diagnostics: the error explainer against a corpus of real-world messages,
// its robustness to surroundings and to arbitrary bytes, and every preflight
// rule firing on its trigger and staying quiet on a clean config.
#include <QtTest>
#include <QTemporaryDir>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "TestPaths.h"
#include "diagnose/ErrorExplainer.h"
#include "diagnose/Preflight.h"
#include "diagnose/TargetPlan.h"
#include "memory/DerivedStep.h"
#include "memory/Estimator.h"
#include "memory/MemoryPlan.h"
#include "train/DerivedPlan.h"

using namespace tb;

namespace {

nlohmann::json corpus()
{
    std::ifstream in(tb::test::sourcePath("tests/data/explain_corpus.json"));
    return nlohmann::json::parse(in);
}

RunConfig defaultConfig()
{
    return loadConfigFile(tb::test::sourcePath("resources/examples/default.json"));
}

// A config's own step, derived as trainbench-cli preflight derives it, once
// per step traced.
std::shared_ptr<const DerivedStep> derivedOnce(const RunConfig& traced)
{
    static std::map<std::string, std::shared_ptr<const DerivedStep>> steps;
    auto& step = steps[derivedStepKey(traced)];
    if (!step) step = std::make_shared<const DerivedStep>(deriveStep(traced));
    return step;
}

// The plan preflight checks a config against, in `precision`: its own
// step's (derived once).
MemoryPlan plannedIn(const RunConfig& c, const std::string& precision)
{
    auto traced = c;
    traced.train.precision = precision;
    return MemoryPlan(derivedOnce(traced), architectureFor(c));
}

PreflightTarget gpu(const std::string& name)
{
    PreflightTarget t;
    t.gpu = GpuCatalogue::bundled().resolve(name);
    t.derivePlan = derivedOnce;
    return t;
}

const Finding* find(const std::vector<Finding>& findings, const std::string& kind)
{
    for (const auto& f : findings) {
        if (f.kind == kind) return &f;
    }
    return nullptr;
}

std::string kinds(const std::vector<Finding>& findings)
{
    std::string out;
    for (const auto& f : findings) out += f.kind + "(" + severityName(f.severity) + ") ";
    return out;
}

// No finding above info severity.
bool quiet(const std::vector<Finding>& findings)
{
    for (const auto& f : findings) {
        if (f.severity != Severity::Info) return false;
    }
    return true;
}

// Whether the primary finding has the expected kind and details; why not, otherwise.
std::string mismatch(const nlohmann::json& entry)
{
    const auto findings = ErrorExplainer::bundled().explain(entry.at("text").get<std::string>());
    const auto& primary = findings.front();
    if (primary.kind != entry.at("kind").get<std::string>()) return "kind " + primary.kind;
    for (const auto& [key, expected] : entry.at("details").items()) {
        if (expected.is_number()) {
            const auto it = primary.numbers.find(key);
            if (it == primary.numbers.end()) return key + " missing";
            const double want = expected.get<double>();
            // The message rounds to 0.01 of its unit.
            if (std::abs(it->second - want) > std::max(1.0, 0.001 * std::abs(want))) {
                return key + " " + std::to_string(it->second) + " != " + std::to_string(want);
            }
        } else {
            const auto it = primary.text.find(key);
            if (it == primary.text.end()) return key + " missing";
            if (it->second != expected.get<std::string>()) return key + " \"" + it->second + "\"";
        }
    }
    return {};
}

} // namespace

class TestDiagnose final : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void corpusIsExplained();
    void everyKindIsInTheCatalogue();
    void surroundingsDoNotMatter_data();
    void surroundingsDoNotMatter();
    void byteSizes_data();
    void byteSizes();
    void oomVerdictUsesThePlannersBatch();
    void findingsRoundTripAsJson();
    void tenThousandMutatedTexts();

    void cleanConfigIsQuiet();
    void bf16OnTuringWithAutoFix();
    void lossScalingWithHalfWeights();
    void memoryOverAndNearBudget();
    void folderWithItsOwnHeadSizeIsPlannedFromItsStep();
    void fusedAttentionBelowAmpere();
    void offloadWithCheckpointing();
    void datasetProblems();
    void learningRateAndWarmup();
    void localDeviceChecks();
    void sequenceLongerThanThePositions();
    void autoFixesCreateNoNewFinding();
    void titlesNameTheMachine();
    void preflightPlansWhatTheTargetRuns();
};

void TestDiagnose::corpusIsExplained()
{
    const auto entries = corpus();
    QVERIFY(entries.size() >= 60);
    int right = 0;
    QStringList wrong;
    for (const auto& e : entries) {
        const auto why = mismatch(e);
        if (why.empty()) ++right;
        else wrong << QString::fromStdString(e.at("kind").get<std::string>() + ": " + why + " <- "
                                             + e.at("text").get<std::string>().substr(0, 90));
    }
    const double score = static_cast<double>(right) / static_cast<double>(entries.size());
    qInfo("explainer corpus: %d of %d right (%.1f%%)", right, static_cast<int>(entries.size()), 100.0 * score);
    for (const auto& w : wrong) qInfo("  wrong: %s", qPrintable(w));
    QVERIFY2(score >= 0.95, qPrintable(wrong.join("\n")));
}

void TestDiagnose::everyKindIsInTheCatalogue()
{
    // The kinds the explainer may answer with, as the design fixes them.
    const std::vector<std::string> required{
        "device_mismatch", "invalid_device_ordinal", "bf16_unsupported", "amp_scaler_dtype", "tf32_unsupported",
        "flash_attention_unsupported", "fp8_unsupported", "meta_tensor", "cuda_oom", "batch_size_search_exhausted",
        "device_side_assert", "no_kernel_image", "driver_too_old", "cudnn_not_supported", "cuda_fork",
        "cuda_unavailable", "no_grad", "checkpoint_use_cache", "nan_in_backward", "fp16_overflow"};
    const auto& explainer = ErrorExplainer::bundled();
    std::set<std::string> covered;
    for (const auto& e : corpus()) covered.insert(e.at("kind").get<std::string>());
    for (const auto& k : required) {
        const auto* kind = explainer.kind(k);
        QVERIFY2(kind, k.c_str());
        QVERIFY2(!kind->meaning.empty() && !kind->cause.empty() && !kind->fix.empty(), k.c_str());
        QVERIFY2(covered.count(k), ("no corpus message for " + k).c_str());
    }
    QCOMPARE(explainer.explain("").front().kind, std::string("unknown"));
    QCOMPARE(explainer.explain("everything went fine\n").front().kind, std::string("unknown"));
}

void TestDiagnose::surroundingsDoNotMatter_data()
{
    QTest::addColumn<QString>("prefix");
    QTest::addColumn<QString>("suffix");
    QTest::addColumn<bool>("crlf");
    QTest::newRow("plain") << "" << "" << false;
    QTest::newRow("ansi colours") << "\x1b[1;31m" << "\x1b[0m" << false;
    QTest::newRow("timestamp") << "2025-03-01T10:22:01.123Z [worker-3] ERROR " << "" << false;
    QTest::newRow("crlf") << "" << "" << true;
    QTest::newRow("progress bar") << " 45%|####5     | 90/200 [01:02<01:15,  1.45it/s]\r" << "\r\n" << false;
    QTest::newRow("log tail") << "INFO loading shards\nINFO step 1 loss 2.31\n" << "\nwandb: Waiting for W&B process to finish"
                              << false;
}

void TestDiagnose::surroundingsDoNotMatter()
{
    QFETCH(QString, prefix);
    QFETCH(QString, suffix);
    QFETCH(bool, crlf);
    int tried = 0;
    for (const auto& e : corpus()) {
        std::string text = e.at("text").get<std::string>();
        if (crlf) {
            std::string converted;
            for (char c : text) converted += c == '\n' ? std::string("\r\n") : std::string(1, c);
            text = converted;
        }
        auto copy = e;
        copy["text"] = prefix.toStdString() + text + suffix.toStdString();
        const auto why = mismatch(copy);
        const auto plain = mismatch(e);
        // Whatever is right without surroundings stays right with them.
        if (plain.empty()) QVERIFY2(why.empty(), qPrintable(QString::fromStdString(why + " <- " + text.substr(0, 80))));
        ++tried;
    }
    QVERIFY(tried >= 60);
}

void TestDiagnose::byteSizes_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<qint64>("bytes");
    QTest::newRow("MiB") << "32.00 MiB" << qint64(33554432);
    QTest::newRow("GiB") << "1.5 GiB" << qint64(1610612736);
    QTest::newRow("KiB") << "832.00 KiB" << qint64(851968);
    QTest::newRow("bytes") << "0 bytes" << qint64(0);
    QTest::newRow("decimal GB") << "2 GB" << qint64(2000000000);
    QTest::newRow("not a size") << "lots" << qint64(-1);
    QTest::newRow("overflow") << "99999999999 PiB" << qint64(-1);
}

void TestDiagnose::byteSizes()
{
    QFETCH(QString, text);
    QFETCH(qint64, bytes);
    QCOMPARE(parseByteSize(text.toStdString()).value_or(-1), static_cast<std::int64_t>(bytes));
}

void TestDiagnose::oomVerdictUsesThePlannersBatch()
{
    const std::string story5 = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a "
                               "total capacity of 14.74 GiB of which 4.19 MiB is free. Process has 14.73 GiB memory "
                               "in use.";
    ExplainContext context;
    context.largestFittingBatch = 4;
    context.configuredBatch = 32;
    const auto f = ErrorExplainer::bundled().explain(story5, context).front();
    QCOMPARE(f.kind, std::string("cuda_oom"));
    QCOMPARE(f.text.at("verdict"), std::string("over_budget"));
    QCOMPARE(f.numbers.at("fitting_batch"), 4.0);
    // The concrete answer leads the fix; the likely cause leads the cause.
    QVERIFY2(f.fix.rfind("With the config (batch 32), the memory planner says batch 4 fits in the 14.74 GiB", 0) == 0,
             f.fix.c_str());
    QVERIFY2(f.cause.find("The step needs more memory than the GPU has") != std::string::npos, f.cause.c_str());
}

void TestDiagnose::findingsRoundTripAsJson()
{
    auto findings = ErrorExplainer::bundled().explain(corpus()[0].at("text").get<std::string>());
    findings.front().autoFix = {{"train.batch_size", "4"}};
    findings.front().autoFixLabel = "Use batch 4";
    const auto json = findingsToJson(findings);
    const auto doc = nlohmann::json::parse(json);
    QCOMPARE(doc["findings"][0]["kind"].get<std::string>(), std::string("cuda_oom"));
    QVERIFY(doc["findings"][0]["details"]["requested_bytes"].is_number_integer());
    QCOMPARE(doc["findings"][0]["auto_fix"]["changes"]["train.batch_size"].get<int>(), 4);
    const auto back = findingsFromJson(json);
    QCOMPARE(back.size(), findings.size());
    QCOMPARE(back.front().numbers, findings.front().numbers);
    QCOMPARE(back.front().autoFix.front().valueJson, std::string("4"));
    QVERIFY_THROWS_EXCEPTION(InputError, findingsFromJson("{\"findings\": 3"));
}

void TestDiagnose::tenThousandMutatedTexts()
{
    // Random bytes and mutated real messages: every answer is a finding, nothing crashes.
    const auto entries = corpus();
    std::mt19937 rng(7);
    const auto& explainer = ErrorExplainer::bundled();
    for (int i = 0; i < 10000; ++i) {
        std::string text;
        if (i % 4 == 0) {
            text.resize(rng() % 3000);
            for (auto& c : text) c = static_cast<char>(rng() % 256);
        } else {
            text = entries[rng() % entries.size()].at("text").get<std::string>();
            const int edits = 1 + static_cast<int>(rng() % 8);
            for (int k = 0; k < edits && !text.empty(); ++k) {
                const std::size_t at = rng() % text.size();
                switch (rng() % 5) {
                case 0: text[at] = static_cast<char>(rng() % 256); break;
                case 1: text.erase(at, rng() % 20); break;
                case 2: text.insert(at, std::string(rng() % 3000, "0123456789.: GiBx\n\x1b"[rng() % 20])); break;
                case 3: text = text.substr(0, at); break;
                default: text.insert(at, text.substr(0, std::min<std::size_t>(text.size(), 200))); break;
                }
            }
        }
        const auto findings = explainer.explain(text);
        QVERIFY(!findings.empty());
        (void)findingsToJson(findings); // invalid UTF-8 is replaced, not thrown
    }
}

void TestDiagnose::cleanConfigIsQuiet()
{
    for (const char* target : {"A100", "T4", "RTX 4090"}) {
        const auto findings = runPreflight(defaultConfig(), gpu(target));
        QVERIFY2(quiet(findings), qPrintable(QString(target) + ": " + QString::fromStdString(kinds(findings))));
    }
    PreflightTarget cpu;
    cpu.local = LocalMachine{false, 0, {}, 8LL << 30};
    QVERIFY(quiet(runPreflight(defaultConfig(), cpu)));
}

void TestDiagnose::bf16OnTuringWithAutoFix()
{
    auto c = defaultConfig();
    c.train.precision = "bf16";
    const auto findings = runPreflight(c, gpu("T4"));
    const auto* f = find(findings, "bf16_unsupported");
    QVERIFY2(f, kinds(findings).c_str());
    QCOMPARE(f->severity, Severity::Error);
    QVERIFY(f->cause.find("7.5") != std::string::npos);
    QVERIFY(!f->autoFix.empty());
    const auto fixed = applyAutoFix(c, f->autoFix);
    // "auto" (fp16 with loss scaling on this GPU), not "fp16", which a launch
    // on a machine without CUDA refuses.
    QCOMPARE(fixed.train.precision, std::string("auto"));
    QVERIFY(quiet(runPreflight(fixed, gpu("T4"))));
    // On Ampere it is fine.
    QVERIFY(quiet(runPreflight(c, gpu("A100"))));
    // Weights loaded in bf16 on Turing (story 4), trained with "auto" -> fp16 with loss scaling.
    c.train.precision = "auto";
    c.train.weightsDtype = "bf16";
    const auto story4 = runPreflight(c, gpu("TITAN RTX"));
    QVERIFY2(find(story4, "bf16_unsupported") && find(story4, "amp_scaler_dtype"), kinds(story4).c_str());
}

void TestDiagnose::lossScalingWithHalfWeights()
{
    auto c = defaultConfig();
    c.train.precision = "fp16";
    c.train.weightsDtype = "fp16";
    const auto findings = runPreflight(c, gpu("A100"));
    const auto* f = find(findings, "amp_scaler_dtype");
    QVERIFY2(f, kinds(findings).c_str());
    QCOMPARE(f->severity, Severity::Error);
    QVERIFY(!find(runPreflight(applyAutoFix(c, f->autoFix), gpu("A100")), "amp_scaler_dtype"));
    // LoRA adapters stay fp32 over a half-precision base: no scaler problem,
    // and it trains (not a planning field).
    c.lora.rank = 8;
    auto lora = runPreflight(c, gpu("A100"));
    QVERIFY2(!find(lora, "amp_scaler_dtype") && !find(lora, "planning_only") && !find(lora, "half_base_precision"),
             kinds(lora).c_str());
    // A half-precision base's products need autocast: fp32 is an error, fixed
    // by loading the base in fp32. (The trainer refuses it, with the same words.)
    c.train.precision = "fp32";
    lora = runPreflight(c, gpu("A100"));
    const auto* half = find(lora, "half_base_precision");
    QVERIFY2(half && half->severity == Severity::Error, kinds(lora).c_str());
    QCOMPARE(half->cause, halfBaseProblem(c, "fp32") + ".");
    QVERIFY(!find(runPreflight(applyAutoFix(c, half->autoFix), gpu("A100")), "half_base_precision"));
}

void TestDiagnose::memoryOverAndNearBudget()
{
    // A model far too big for a T4 at batch 32: the estimate, the terms, the batch that fits.
    auto c = defaultConfig();
    c.model.nLayer = 12;
    c.model.dModel = 1024;
    c.model.nHead = 16;
    c.data.seqLen = 512;
    c.train.precision = "fp16";
    auto findings = runPreflight(c, gpu("T4"));
    const auto* f = find(findings, "memory_over_budget");
    QVERIFY2(f, kinds(findings).c_str());
    QCOMPARE(f->severity, Severity::Error);
    QVERIFY(f->numbers.at("estimated_peak_bytes") > f->numbers.at("usable_bytes"));
    QVERIFY(!f->text.at("dominant_terms").empty());
    // Either a smaller batch or checkpointing makes it fit; the fix says which, and works.
    QVERIFY2(!f->autoFix.empty(), f->fix.c_str());
    const auto fixed = applyAutoFix(c, f->autoFix);
    QCOMPARE(fixed.train.batchSize * fixed.train.gradAccum >= c.train.batchSize * c.train.gradAccum, true);
    findings = runPreflight(fixed, gpu("T4"));
    QVERIFY2(!find(findings, "memory_over_budget"), kinds(findings).c_str());

    // Between 90% and 100% of the usable memory: a warning.
    const auto target = GpuCatalogue::bundled().resolve("T4");
    auto near = c;
    near.train.activationCheckpointing = true;
    const auto nearPlan = plannedIn(near, "fp16");
    bool found = false;
    for (int batch = 1; batch <= 256 && !found; ++batch) {
        near.train.batchSize = batch;
        auto setup = setupFor(near);
        setup.precision = "fp16";
        setup.gpu = true;
        const double use = static_cast<double>(nearPlan.at(batch, setup.seqLen, setup).peakBytes)
            / static_cast<double>(target.gpu.memoryBytes);
        if (use > 0.9 && use <= 1.0) {
            findings = runPreflight(near, gpu("T4"));
            QVERIFY2(find(findings, "memory_near_budget"), kinds(findings).c_str());
            QCOMPARE(find(findings, "memory_near_budget")->severity, Severity::Warning);
            found = true;
        }
        if (use > 1.0) break;
    }
    QVERIFY2(found, "no batch lands between 90% and 100% of a T4");
}

// A Llama folder whose head size is not hidden / heads (once planned by
// the quick check as hidden / heads, under its own step, so a run that did
// not fit passed). The quick check, which derives nothing, says the memory is
// not checked and how to derive its plan; preflight with its own step
// derived decides from that plan.
void TestDiagnose::folderWithItsOwnHeadSizeIsPlannedFromItsStep()
{
    QTemporaryDir dir;
    const auto folder = dir.path().toStdString();
    const auto write = [&](int layers) {
        std::ofstream(folder + "/config.json") << R"({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1024,
            "intermediate_size": 3072, "num_hidden_layers": )" << layers << R"(, "num_attention_heads": 16,
            "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
            "hidden_act": "silu", "tie_word_embeddings": true})";
    };
    write(28);
    auto c = defaultConfig();
    c.model.type = "hf";
    c.model.path = folder;
    c.data.source = "tokens";
    c.data.path = folder + "/train.bin";
    c.data.tokenDtype = "uint32";
    {
        std::ofstream ids(c.data.path, std::ios::binary);
        const std::vector<std::uint32_t> tokens(20000, 7);
        ids.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 4));
    }
    c.data.seqLen = 512;
    c.train.batchSize = 1;
    c.train.precision = "fp32";
    // The quick check, as the window runs it before a plan is derived.
    PreflightTarget quick;
    quick.gpu = GpuCatalogue::bundled().resolve("T4");
    c.train.batchSize = 64;
    c.data.seqLen = 4096;
    auto findings = runPreflight(c, quick);
    if (const auto* invalid = find(findings, "config_invalid")) QFAIL(invalid->cause.c_str());
    QVERIFY2(!find(findings, "memory_over_budget") && !find(findings, "memory_near_budget"), kinds(findings).c_str());
    const auto* f = find(findings, "memory_not_planned");
    QVERIFY2(f, kinds(findings).c_str());
    QCOMPARE(f->severity, Severity::Info);
    QVERIFY2(f->fix.find("Derive its plan") != std::string::npos, f->fix.c_str());
    // In fp16, as a T4 runs it, with its own step derived (as preflight in
    // the command line and the window derive it): the error is the plan's,
    // no bound.
    c.train.precision = "fp16";
    c.device = "cuda";
    findings = runPreflight(c, gpu("T4"));
    const auto* over = find(findings, "memory_over_budget");
    QVERIFY2(over && over->severity == Severity::Error, kinds(findings).c_str());
    QVERIFY2(over->cause.find(" or more during") == std::string::npos, over->cause.c_str());
    // The figure is this folder's own step's (its head size of 128, not
    // hidden / heads = 64).
    const auto t4 = planOnTarget(c, std::optional<GpuTarget>(GpuCatalogue::bundled().resolve("T4")));
    const auto own = plannedIn(c, t4.setup.precision).at(t4.setup.batch, t4.setup.seqLen, t4.setup).peakBytes;
    QCOMPARE(over->numbers.at("estimated_peak_bytes"), static_cast<double>(own));
    // A step that cannot be derived is said, with why, not passed as "not
    // derived by this quick check".
    PreflightTarget failing = gpu("T4");
    failing.derivePlan = [](const RunConfig&) -> std::shared_ptr<const DerivedStep> {
        throw InputError("the probe's step failed (a test's own failure)");
    };
    findings = runPreflight(c, failing);
    const auto* failed = find(findings, "memory_not_planned");
    QVERIFY2(failed && failed->title == "The memory plan could not be derived"
                 && failed->cause.find("a test's own failure") != std::string::npos,
             kinds(findings).c_str());
}

void TestDiagnose::fusedAttentionBelowAmpere()
{
    auto c = defaultConfig();
    c.model.attention = "sdpa";
    const auto findings = runPreflight(c, gpu("V100"));
    const auto* f = find(findings, "flash_attention_unsupported");
    QVERIFY2(f, kinds(findings).c_str());
    QCOMPARE(f->severity, Severity::Warning);
    QVERIFY(!find(runPreflight(c, gpu("A100")), "flash_attention_unsupported"));
}

void TestDiagnose::offloadWithCheckpointing()
{
    // Story 3: offload and checkpointing together.
    auto c = defaultConfig();
    c.train.offload = "cpu";
    c.train.activationCheckpointing = true;
    auto findings = runPreflight(c, gpu("RTX 4090"));
    const auto* f = find(findings, "offload_with_checkpointing");
    QVERIFY2(f && f->severity == Severity::Error, kinds(findings).c_str());
    QVERIFY(!find(runPreflight(applyAutoFix(c, f->autoFix), gpu("RTX 4090")), "offload_with_checkpointing"));
    c.train.activationCheckpointing = false;
    findings = runPreflight(c, gpu("RTX 4090"));
    QVERIFY(!find(findings, "offload_with_checkpointing"));
    QVERIFY(find(findings, "planning_only"));
    QVERIFY(quiet(findings));
    // And its message, when it happens anyway.
    QCOMPARE(ErrorExplainer::bundled()
                 .explain("RuntimeError: Function MmBackward0 returned an invalid gradient at index 1 - expected "
                          "device meta but got cuda:0")
                 .front()
                 .kind,
             std::string("meta_tensor"));
}

void TestDiagnose::datasetProblems()
{
    QTemporaryDir dir;
    const std::string folder = dir.path().toStdString();
    auto c = defaultConfig();
    c.data.path = folder + "/missing.txt";
    QVERIFY(find(runPreflight(c, gpu("A100")), "dataset_missing"));
    {
        std::ofstream(folder + "/empty.txt");
    }
    c.data.path = folder + "/empty.txt";
    QVERIFY(find(runPreflight(c, gpu("A100")), "dataset_empty"));
    {
        std::ofstream(folder + "/tiny.txt") << std::string(100, 'a');
    }
    c.data.path = folder + "/tiny.txt";
    auto findings = runPreflight(c, gpu("A100"));
    QVERIFY2(find(findings, "dataset_too_small") && find(findings, "dataset_too_small")->severity == Severity::Error,
             kinds(findings).c_str());
    {
        std::ofstream(folder + "/small.txt") << std::string(2000, 'a');
    }
    c.data.path = folder + "/small.txt"; // 1,900 training tokens < 32 x 65
    findings = runPreflight(c, gpu("A100"));
    QVERIFY2(find(findings, "dataset_too_small") && find(findings, "dataset_too_small")->severity == Severity::Warning,
             kinds(findings).c_str());
    c.train.batchSize = 8;
    QVERIFY(quiet(runPreflight(c, gpu("A100"))));
}

void TestDiagnose::learningRateAndWarmup()
{
    auto c = defaultConfig();
    c.optim.lr = 0;
    auto findings = runPreflight(c, gpu("A100"));
    QVERIFY2(find(findings, "learning_rate") && hasErrors(findings), kinds(findings).c_str());
    c.optim.lr = -1e-3;
    QVERIFY(find(runPreflight(c, gpu("A100")), "learning_rate"));
    c = defaultConfig();
    c.optim.warmupSteps = c.train.steps;
    findings = runPreflight(c, gpu("A100"));
    const auto* f = find(findings, "warmup_steps");
    QVERIFY2(f && f->severity == Severity::Warning, kinds(findings).c_str());
    QVERIFY(quiet(runPreflight(applyAutoFix(c, f->autoFix), gpu("A100"))));
}

void TestDiagnose::localDeviceChecks()
{
    auto c = defaultConfig();
    c.device = "cuda";
    PreflightTarget cpuOnly;
    cpuOnly.local = LocalMachine{false, 0, {}, 8LL << 30};
    auto findings = runPreflight(c, cpuOnly);
    QVERIFY2(find(findings, "cuda_unavailable"), kinds(findings).c_str());
    QVERIFY(find(findings, "cuda_unavailable")->cause.find("built without CUDA") != std::string::npos);

    PreflightTarget oneGpu;
    DeviceInfo t4;
    t4.index = 0;
    t4.name = "Tesla T4";
    t4.cc = {7, 5};
    t4.totalBytes = 15828320256;
    oneGpu.local = LocalMachine{true, 1, {t4}, 8LL << 30};
    oneGpu.derivePlan = derivedOnce;
    c.device = "cuda:3";
    findings = runPreflight(c, oneGpu);
    QVERIFY2(find(findings, "invalid_device_ordinal"), kinds(findings).c_str());
    // The local device's capability counts like a catalogue GPU's.
    c.device = "cuda:0";
    c.train.precision = "bf16";
    QVERIFY(find(runPreflight(c, oneGpu), "bf16_unsupported"));
    // A target GPU named for planning is checked without any local GPU.
    QVERIFY(!find(runPreflight(c, gpu("A100")), "cuda_unavailable"));

    // A launch here gets the memory that is free now, not the card's total.
    c = defaultConfig();
    c.device = "cuda:0";
    const auto local = planOnTarget(c, std::optional<GpuTarget>(GpuCatalogue::bundled().resolve("T4"))).setup;
    const auto peak = plannedIn(c, local.precision).at(local.batch, local.seqLen, local).peakBytes;
    QVERIFY(!find(runPreflight(c, oneGpu), "memory_over_budget"));
    DeviceUsage busy;
    busy.freeBytes = peak / 2;
    busy.usedBytes = t4.totalBytes - peak / 2;
    oneGpu.local->devices[0].usage = busy;
    findings = runPreflight(c, oneGpu);
    const auto* f = find(findings, "memory_over_budget");
    QVERIFY2(f, kinds(findings).c_str());
    QVERIFY2(f->title.find("already in use") != std::string::npos, f->title.c_str());
    QCOMPARE(f->numbers.at("usable_bytes"), static_cast<double>(peak / 2));
}

void TestDiagnose::sequenceLongerThanThePositions()
{
    QTemporaryDir dir;
    {
        std::ofstream(dir.path().toStdString() + "/config.json") << R"({"n_positions": 32})";
    }
    auto c = defaultConfig();
    c.train.initFrom = dir.path().toStdString();
    const auto findings = runPreflight(c, gpu("A100"));
    const auto* f = find(findings, "sequence_too_long");
    QVERIFY2(f, kinds(findings).c_str());
    QCOMPARE(applyAutoFix(c, f->autoFix).data.seqLen, 32);
    // Rotary positions have no table to run off: a Llama fine-tune may go longer.
    c.model.type = "llama";
    c.model.positionalEncoding = "rope";
    c.model.tieEmbeddings = false;
    const auto rope = runPreflight(c, gpu("A100"));
    QVERIFY2(!find(rope, "sequence_too_long"), kinds(rope).c_str());
}

// Every automatic fix, applied, removes its finding and creates none, on the
// planned GPUs and on a launch from this machine (no CUDA): the Diagnostics tab
// shows both, and a fix that satisfies one and breaks the other is no fix.
void TestDiagnose::autoFixesCreateNoNewFinding()
{
    PreflightTarget here;
    here.local = LocalMachine{false, 0, {}, 64LL << 30};
    here.derivePlan = derivedOnce; // (as a launch checks it: its own step derived)
    const std::vector<std::pair<std::string, PreflightTarget>> targets{
        {"T4", gpu("T4")}, {"A100", gpu("A100")}, {"this machine", here}};
    const auto problems = [&](const RunConfig& c) {
        std::set<std::string> out;
        for (const auto& [name, t] : targets) {
            for (const auto& f : runPreflight(c, t)) {
                if (f.severity != Severity::Info) out.insert(name + ": " + f.kind);
            }
        }
        return out;
    };
    const std::vector<std::pair<const char*, std::function<void(RunConfig&)>>> cases{
        {"bf16", [](RunConfig& c) { c.train.precision = "bf16"; }},
        {"fp16", [](RunConfig& c) { c.train.precision = "fp16"; c.device = "auto"; }},
        {"bf16 weights", [](RunConfig& c) { c.train.weightsDtype = "bf16"; }},
        {"bf16 weights, LoRA", [](RunConfig& c) { c.train.weightsDtype = "bf16"; c.lora.rank = 4; c.lora.targets = {"attn"}; }},
        {"fp16 weights", [](RunConfig& c) { c.train.precision = "fp16"; c.device = "auto"; c.train.weightsDtype = "fp16"; }},
        {"sdpa", [](RunConfig& c) { c.model.attention = "sdpa"; }},
        {"offload", [](RunConfig& c) { c.train.offload = "cpu"; c.train.activationCheckpointing = true; }},
        {"warmup", [](RunConfig& c) { c.optim.warmupSteps = c.train.steps; }},
        {"cuda", [](RunConfig& c) { c.device = "cuda"; }},
        {"huge batch", [](RunConfig& c) { c.train.batchSize = 65536; }},
        {"long sequence", [](RunConfig& c) { c.data.seqLen = 16384; c.train.batchSize = 64; }},
    };
    int fixes = 0;
    for (const auto& [label, mutate] : cases) {
        auto c = defaultConfig();
        mutate(c);
        const auto before = problems(c);
        for (const auto& [name, t] : targets) {
            for (const auto& f : runPreflight(c, t)) {
                if (f.autoFix.empty()) continue;
                ++fixes;
                const auto after = problems(applyAutoFix(c, f.autoFix));
                const std::string where = std::string(label) + ", " + name + ", fix of " + f.kind + ": ";
                QVERIFY2(!after.count(name + ": " + f.kind), (where + "the finding stays").c_str());
                for (const auto& p : after) {
                    QVERIFY2(before.count(p), (where + "creates \"" + p + "\"").c_str());
                }
            }
        }
    }
    QVERIFY2(fixes >= 10, std::to_string(fixes).c_str());
}

// A finding says which machine it is about: the planned GPU or this machine.
void TestDiagnose::titlesNameTheMachine()
{
    auto c = defaultConfig();
    c.train.precision = "bf16";
    const auto t4 = GpuCatalogue::bundled().resolve("T4").label();
    auto findings = runPreflight(c, gpu("T4"));
    QVERIFY2(find(findings, "bf16_unsupported"), kinds(findings).c_str());
    QVERIFY2(find(findings, "bf16_unsupported")->title.find(t4) != std::string::npos,
             find(findings, "bf16_unsupported")->title.c_str());
    c.train.precision = "fp16";
    c.device = "auto";
    PreflightTarget here;
    here.local = LocalMachine{false, 0, {}, 8LL << 30};
    findings = runPreflight(c, here);
    const auto* f = find(findings, "precision_unsupported");
    QVERIFY2(f, kinds(findings).c_str());
    QVERIFY2(f->title.find("this machine") != std::string::npos, f->title.c_str());
    c = defaultConfig();
    c.model.attention = "sdpa";
    f = find(findings = runPreflight(c, gpu("T4")), "flash_attention_unsupported");
    QVERIFY2(f && f->title.find(t4) != std::string::npos, kinds(findings).c_str());
}

// Preflight's memory verdict plans what the trainer runs on the target: "auto"
// precision resolved there (fp16 on a T4, bf16 on an A100), as planOnTarget
// resolves it for the form, the planner and `estimate`.
void TestDiagnose::preflightPlansWhatTheTargetRuns()
{
    const auto c = defaultConfig();
    QCOMPARE(c.train.precision, std::string("auto"));
    for (const char* name : {"T4", "A100"}) {
        auto target = GpuCatalogue::bundled().resolve(name);
        const auto plan = planOnTarget(c, std::optional<GpuTarget>(target));
        QCOMPARE(plan.setup.precision, std::string(std::string(name) == "T4" ? "fp16" : "bf16"));
        QVERIFY(plan.setup.gpu);
        const auto peak = plannedIn(c, plan.setup.precision).at(plan.setup.batch, plan.setup.seqLen, plan.setup).peakBytes;
        // A card just too small for the plan: preflight reports the same peak.
        target.gpu.memoryBytes = peak - 1;
        PreflightTarget t;
        t.gpu = target;
        t.derivePlan = derivedOnce;
        const auto findings = runPreflight(c, t);
        const auto* f = find(findings, "memory_over_budget");
        QVERIFY2(f, kinds(findings).c_str());
        QCOMPARE(f->numbers.at("estimated_peak_bytes"), static_cast<double>(peak));
    }
    // Weights loaded in bf16 and trained in "auto" on an A100 are pure bf16,
    // as an explicit "bf16" is (once planned as mixed precision, and not
    // planned at all).
    auto bf16Weights = c;
    bf16Weights.train.weightsDtype = "bf16";
    const auto a100 = std::optional<GpuTarget>(GpuCatalogue::bundled().resolve("A100"));
    QCOMPARE(planOnTarget(bf16Weights, a100).setup.precision, std::string("bf16-pure"));
    for (const auto& f : runPreflight(bf16Weights, gpu("A100"))) {
        QVERIFY2(f.kind != "memory_not_planned", f.cause.c_str());
    }
    // The CPU plans fp32; a bf16 request on a T4 plans bf16 and says it cannot run.
    QCOMPARE(planOnTarget(c, std::nullopt).setup.precision, std::string("fp32"));
    QVERIFY(!planOnTarget(c, std::nullopt).setup.gpu);
    auto bf16 = c;
    bf16.train.precision = "bf16";
    const auto t4 = planOnTarget(bf16, std::optional<GpuTarget>(GpuCatalogue::bundled().resolve("T4")));
    QCOMPARE(t4.setup.precision, std::string("bf16"));
    QVERIFY(!t4.precision.error.empty());
    QVERIFY(!precisionError("bf16-pure", ComputeCapability{7, 5}).empty());
    QVERIFY(precisionError("fp16", ComputeCapability{7, 5}).empty());
}

QTEST_GUILESS_MAIN(TestDiagnose)
#include "tst_diagnose.moc"
