// The memory planner panel: the estimate term by term against the target
// GPU, a fit heat map with the current point, the largest batch and sequence,
// sliders that update everything, and "Apply to experiment". Every number
// shown must be core's estimate for the same inputs.
#include <QtTest>

#include "TestPaths.h"
#include "ScriptFixtures.h"
#include "HfFolderFixtures.h"
#include "TinyTokenizerFolder.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>

#include <QCheckBox>
#include <QComboBox>
#include <QScrollArea>
#include <QJsonArray>
#include <QLabel>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabWidget>
#include <QDoubleSpinBox>
#include <QSignalSpy>
#include <QTableWidget>
#include <QPlainTextEdit>
#include <QProgressBar>

#include "ChatPanel.h"
#include "ConfigDocument.h"
#include "DiagnosticsPanel.h"
#include "ExportModelDialog.h"
#include "HistoryPanel.h"
#include "RunPanel.h"
#include "SampleBox.h"
#include "ExperimentPanel.h"
#include "HardwarePanel.h"
#include "MainWindow.h"
#include "MemoryPlannerPanel.h"
#include "TuneDialog.h"
#include "QCustomPlotInclude.h"
#include "Units.h"
#include "diagnose/Preflight.h"
#include "diagnose/TargetPlan.h"
#include "memory/Architectures.h"
#include "memory/DerivedStep.h"
#include "memory/Estimator.h"
#include "train/DerivedPlan.h"

using namespace tb;
using namespace tb::ui;

// The peak `trainbench-cli estimate --config FILE --gpu T4 --json` plans (-1: no answer).
static std::int64_t cliPeakOnT4(const QString& config)
{
    QProcess cli;
    cli.start(TB_CLI_PATH, {"estimate", "--config", config, "--gpu", "T4", "--json"});
    if (!cli.waitForFinished(120000)) return -1;
    const auto json = QJsonDocument::fromJson(cli.readAllStandardOutput()).object();
    return json.contains("peak_bytes") ? static_cast<std::int64_t>(json["peak_bytes"].toDouble()) : -1;
}

// `trainbench-cli estimate ARGS --json` (null on failure); with
// derived_step, the plan the Memory planner reads from it.
static QJsonObject cliEstimate(const QStringList& args)
{
    QProcess cli;
    cli.start(TB_CLI_PATH, QStringList{"estimate"} + args + QStringList{"--json"});
    if (!cli.waitForFinished(120000) || cli.exitCode() != 0) return {};
    return QJsonDocument::fromJson(cli.readAllStandardOutput()).object();
}

// The derived plan in such an answer.
static MemoryPlan derivedPlanIn(const QJsonObject& answer)
{
    const auto step = QJsonDocument(answer["derived_step"].toObject()).toJson(QJsonDocument::Compact).toStdString();
    return MemoryPlan(std::make_shared<const DerivedStep>(derivedStepFromJson(step)), ArchitectureSpec{});
}

class TestPlannerPanel : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QStandardPaths::setTestModeEnabled(true);
        qputenv("TRAINBENCH_CLI", TB_CLI_PATH); // LoRA and other steps are traced by it
    }
    void init();
    void cleanup() { m_window.reset(); }
    void presetOnT4MatchesTheEstimate();
    void sliderUpdatesEverythingButTheMap();
    void heatMapAndFrontierComeFromTheEstimate();
    void applyCopiesIntoTheExperiment();
    void invalidExperimentSaysWhy();
    void importedConfigJsonAndBadFile();
    void importedConfigJsonPlannedFromItsStep();
    void experimentPanelShowsTheEstimateForTheTarget();
    void formPlannerPreflightAndCliAgree();
    void bf16OnT4DoesNotRun();
    void mapRangeFollowsTheModelAndClicksSnap();
    void presetsSortedByFamilyAndSize();
    void torchScriptExperimentIsDerived();
    void folderWithItsOwnHeadSizeIsDerived();
    void quantizedBaseChosenInTheFormFitsAT4();
    void qloraFromTheFormTrainsSamplesAndExports();
    void chatPlaygroundTalksStopsAndCompares();
    void mistralPastItsWindowIsPlannedEager();
    void tuneDialogPlansMeasuresAndApplies();

private:
    MemoryPlannerPanel* planner() const { return m_window->plannerPanel(); }
    void screenshot(const QString& name)
    {
        QCoreApplication::processEvents(); // pending layout requests
        QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/" + name));
    }
    // Start in the Run tab, as a user does, and wait for it to finish.
    void trainInRunTab(SessionOutcome& outcome)
    {
        auto* run = m_window->runPanel();
        m_window->tabs()->setCurrentWidget(run);
        QTRY_VERIFY(run->startButton()->isEnabled());
        QSignalSpy finished(run, &RunPanel::runFinished);
        QTest::mouseClick(run->startButton(), Qt::LeftButton);
        QVERIFY(finished.wait(240000));
        outcome = finished.first().first().value<SessionOutcome>();
        QCOMPARE(outcome.status, RunStatus::Finished);
    }
    std::unique_ptr<QTemporaryDir> m_dir;
    std::unique_ptr<MainWindow> m_window;
};

void TestPlannerPanel::init()
{
    m_dir = std::make_unique<QTemporaryDir>();
    m_window = std::make_unique<MainWindow>(m_dir->filePath("exp.db"));
    m_window->setAskBeforeClosing(false);
    m_window->openExample(":/examples/default.json");
    QVERIFY(m_window->hardwarePanel()->selectTarget("T4"));
    m_window->tabs()->setCurrentWidget(planner());
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
}

// The Pythia example of docs/benchmarks.md, set up in the panel: LoRA is
// planned from its own step, traced in the background; the same bytes and
// verdict as `estimate`'s for the same inputs, and the answers of the fit
// solver on that plan.
void TestPlannerPanel::presetOnT4MatchesTheEstimate()
{
    auto* p = planner();
    QVERIFY(p->selectSource("pythia-2.8b"));
    p->precisionBox()->setCurrentIndex(p->precisionBox()->findData("fp16"));
    p->loraRankBox()->setValue(16);
    p->checkpointingBox()->setChecked(true);
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    p->setBatch(2); // (the axes follow the plan: set once it is there)
    p->setSeqLen(2048);
    QCOMPARE(p->seqLen(), 2048);

    const auto answer = cliEstimate({"--preset", "pythia-2.8b", "--gpu", "T4", "--precision", "fp16", "--lora-rank", "16",
                                     "--checkpointing", "--batch", "2", "--seq", "2048"});
    QVERIFY(answer.contains("derived_step"));
    const auto expectedPeak = static_cast<std::int64_t>(answer["peak_bytes"].toDouble());
    QCOMPARE(p->estimate()->peakBytes, expectedPeak);
    QCOMPARE(p->budgetBytes(), GpuCatalogue::bundled().resolve("T4").gpu.memoryBytes);
    // A GPT-NeoX LoRA step with its base in fp16 is a lower bound on the GPU
    // (autocast's fp32 layer_norm of a 16-bit tensor has no rule yet): said so.
    const auto lowerBound = p->estimate()->lowerBound;
    QCOMPARE(lowerBound, true);
    QVERIFY2(p->verdictText().startsWith("Fits (") && p->verdictText().contains(": at least "), qPrintable(p->verdictText()));
    const auto plan = derivedPlanIn(answer);
    QVERIFY(p->plannedSetup().has_value());
    const TrainingSetup s = *p->plannedSetup();
    QCOMPARE(plan.at(2, 2048, s).peakBytes, expectedPeak);
    QCOMPARE(p->largestBatchHere(), plan.largestBatch(2048, s, p->budgetBytes(), 65536));
    const auto longest = std::min<std::int64_t>(plan.largestSequence(2, s, p->budgetBytes()), findArchitecture("pythia-2.8b").arch.maxPositions);
    QCOMPARE(p->largestSeqHere(), longest);
    QVERIFY(p->answersText().contains(QString("Largest batch at sequence 2048: %1").arg(p->largestBatchHere())));

    // The bar's terms are the estimate's; hovering the first shows its formula.
    const auto expected = *p->estimate();
    QCOMPARE(p->termPlot()->plottableCount(), static_cast<int>(expected.terms.size()));
    auto* plot = p->termPlot();
    const QPoint inFirst(static_cast<int>(plot->xAxis->coordToPixel(0.5 * expected.terms[0].bytes / 1073741824.0)),
                         static_cast<int>(plot->yAxis->coordToPixel(1.0)));
    QVERIFY2(p->termTipAt(inFirst).startsWith(QString::fromStdString(expected.terms[0].name).replace('_', ' ') + ": "),
             qPrintable(p->termTipAt(inFirst)));
    screenshot("planner-pythia-t4.png");
}

void TestPlannerPanel::sliderUpdatesEverythingButTheMap()
{
    auto* p = planner();
    QVERIFY(p->selectSource("gpt2"));
    // (Its own step's plan, traced first: fp32, no LoRA.)
    p->precisionBox()->setCurrentIndex(p->precisionBox()->findData("fp32"));
    p->loraRankBox()->setValue(0);
    p->setSeqLen(1024);
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    const auto mapBefore = p->fitMap().peakBytes;
    QVERIFY(!mapBefore.empty());
    QSignalSpy spy(p, &MemoryPlannerPanel::updated);
    const auto before = p->estimate()->peakBytes;
    // The batch axis runs to twice the largest batch that fits.
    const int end = p->batchSlider()->maximum();
    QVERIFY(end >= 2 * p->largestBatchHere());
    p->batchSlider()->setValue(end); // as a drag does
    QCOMPARE(spy.count(), 1);
    QCOMPARE(p->batch(), end);
    QCOMPARE(p->batchBox()->value(), end);
    QVERIFY(p->estimate()->peakBytes > before);
    QVERIFY2(p->verdictText().startsWith("Does not fit"), qPrintable(p->verdictText()));
    QCOMPARE(p->fitMap().peakBytes, mapBefore); // only the marker moved
    auto* marker = p->mapPlot()->graph(1);
    QCOMPARE(marker->dataCount(), 1);
    QCOMPARE(marker->data()->at(0)->key, static_cast<double>(end));
    QCOMPARE(marker->data()->at(0)->value, 1024.0);
    // The marker (14 px) is drawn whole inside the map, at its far end and at
    // batch 1 (it sat half outside, on the edge).
    for (const int b : {end, 1}) {
        p->batchSlider()->setValue(b);
        p->mapPlot()->replot();
        const QRect area = p->mapPlot()->axisRect()->rect();
        const double x = p->mapPlot()->xAxis->coordToPixel(b);
        QVERIFY2(x - area.left() >= 6 && area.right() - x >= 6,
                 qPrintable(QString("batch %1 at x %2 in %3..%4").arg(b).arg(x).arg(area.left()).arg(area.right())));
    }
    p->batchSlider()->setValue(end);
    // A batch past the slider widens the map.
    p->batchBox()->setValue(1000);
    QCOMPARE(p->batchSlider()->maximum(), 1024);
    QCOMPARE(p->fitMap().batches.back(), 1024);
    QCOMPARE(p->batch(), 1000);
    screenshot("planner-gpt2-over.png");
}

void TestPlannerPanel::heatMapAndFrontierComeFromTheEstimate()
{
    auto* p = planner();
    QVERIFY(p->selectSource("llama-2-7b"));
    p->precisionBox()->setCurrentIndex(p->precisionBox()->findData("fp16"));
    p->loraRankBox()->setValue(8);
    p->checkpointingBox()->setChecked(true);
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    const auto& map = p->fitMap();
    QCOMPARE(p->batch(), 1); // a published model starts at batch 1, 512 tokens
    QCOMPARE(p->seqLen(), 512);
    QCOMPARE(map.batches.front(), std::int64_t{1});
    QCOMPARE(map.batches.back(), std::int64_t{p->batchSlider()->maximum()});
    QCOMPARE(static_cast<int>(map.seqLens.size()), 128);
    QCOMPARE(map.seqLens.back(), std::int64_t{4096}); // the model's context
    QVERIFY(map.compiled);
    // Spot checks against `estimate`'s plan (LoRA: its own step's) at three
    // cells: within 20% (a GPU cell away from the budget is placed, not
    // replayed), and the same verdict where the estimate is 10% or more
    // from the budget.
    const auto answer = cliEstimate({"--preset", "llama-2-7b", "--gpu", "T4", "--precision", "fp16", "--lora-rank", "8",
                                     "--checkpointing"});
    QVERIFY(answer.contains("derived_step"));
    QCOMPARE(p->estimate()->peakBytes, static_cast<std::int64_t>(answer["peak_bytes"].toDouble()));
    QVERIFY(!p->estimate()->lowerBound);
    const auto plan = derivedPlanIn(answer);
    QVERIFY(p->plannedSetup().has_value());
    const TrainingSetup s = *p->plannedSetup();
    const auto last = map.batches.size() - 1;
    for (auto [row, col] : {std::pair<std::size_t, std::size_t>{0, 0}, {64, last / 2}, {127, last}}) {
        const auto exact = plan.at(map.batches[col], map.seqLens[row], s).peakBytes;
        // Away from the budget a cell is placed with the caching allocator's
        // reserve at the cell nearest the budget (core's fit map).
        if (std::abs(static_cast<double>(exact - p->budgetBytes())) >= 0.1 * static_cast<double>(p->budgetBytes())) {
            QCOMPARE(map.at(row, col) <= p->budgetBytes(), exact <= p->budgetBytes());
        }
        QVERIFY(std::abs(static_cast<double>(map.at(row, col) - exact)) <= 0.2 * static_cast<double>(exact));
    }
    // The frontier: for each batch where anything fits, the longest fitting sequence.
    auto* frontier = p->mapPlot()->graph(0);
    QVERIFY(frontier->dataCount() > 0);
    const auto first = frontier->data()->at(0);
    QVERIFY(plan.at(static_cast<std::int64_t>(first->key), static_cast<std::int64_t>(first->value), s).peakBytes <= p->budgetBytes());
    screenshot("planner-llama7b-lora-t4.png");
}

void TestPlannerPanel::applyCopiesIntoTheExperiment()
{
    auto* p = planner();
    QCOMPARE(p->source(), QString("experiment"));
    QCOMPARE(p->batch(), 32); // the example's
    QCOMPARE(p->seqLen(), 64);
    QVERIFY(p->applyButton()->isEnabled());
    p->setBatch(12);
    p->setSeqLen(200);
    p->checkpointingBox()->setChecked(true);
    p->precisionBox()->setCurrentIndex(p->precisionBox()->findData("fp32"));
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    const auto planned = p->estimate()->peakBytes;
    p->applyToExperiment();
    auto* doc = m_window->document();
    QCOMPARE(doc->value("train.batch_size").toInt(), 12);
    QCOMPARE(doc->value("data.seq_len").toInt(), 200);
    QCOMPARE(doc->value("train.activation_checkpointing").toBool(), true);
    QCOMPARE(doc->value("train.precision").toString(), QString("fp32")); // auto would be fp16 on a T4
    QVERIFY(doc->isValid());
    // The planner reloads from the experiment and plans the same thing.
    QCOMPARE(p->batch(), 12);
    QCOMPARE(p->estimate()->peakBytes, planned);
    // Everything else the config can express goes too, and the status bar says what changed.
    p->loraRankBox()->setValue(4);
    auto* targets = p->findChild<QComboBox*>("plannerLoraTargets");
    QVERIFY(targets);
    targets->setCurrentIndex(targets->findData("mlp"));
    p->findChild<QSpinBox*>("plannerGradAccum")->setValue(3);
    auto* optimizer = p->findChild<QComboBox*>("plannerOptimizer");
    optimizer->setCurrentIndex(optimizer->findData("sgd-plain"));
    auto* attention = p->findChild<QComboBox*>("plannerAttention");
    attention->setCurrentIndex(attention->findData("fused"));
    const QString message = p->applyToExperiment();
    QCOMPARE(doc->value("lora.rank").toInt(), 4);
    QCOMPARE(doc->value("lora.targets").toArray(), QJsonArray({"mlp"}));
    QCOMPARE(doc->value("train.grad_accum").toInt(), 3);
    QCOMPARE(doc->value("optim.optimizer").toString(), QString("sgd"));
    QCOMPARE(doc->value("optim.momentum").toDouble(), 0.0);
    QCOMPARE(doc->value("model.attention").toString(), QString("sdpa"));
    QVERIFY(doc->isValid());
    for (const char* part : {"LoRA rank 0 → 4", "LoRA targets", "gradient accumulation 1 → 3", "optimizer adamw → sgd-plain",
                             "attention eager → sdpa"}) {
        QVERIFY2(message.contains(QString::fromUtf8(part)), qPrintable(message));
    }
    QCOMPARE(m_window->statusBar()->currentMessage(), message);
    // The planner reloads the applied config and shows the same plan.
    QCOMPARE(p->loraRankBox()->value(), 4);
    QCOMPARE(optimizer->currentData().toString(), QString("sgd-plain"));
    QCOMPARE(p->applyToExperiment(), QString("The experiment already has this plan; nothing changed."));
    // Presets cannot be applied to the experiment, and the panel says why.
    QVERIFY(p->applyNote().isEmpty());
    QVERIFY(p->selectSource("gpt2"));
    QVERIFY(!p->applyButton()->isEnabled());
    QVERIFY2(p->applyNote().contains("published"), qPrintable(p->applyNote()));
    screenshot("planner-apply-preset.png");
}

void TestPlannerPanel::invalidExperimentSaysWhy()
{
    auto* p = planner();
    m_window->document()->setValue("train.batch_size", -3);
    QVERIFY(!p->estimate().has_value());
    auto* verdict = p->findChild<QLabel*>("plannerVerdict");
    QVERIFY2(verdict->text().contains("not valid") && verdict->text().contains("train.batch_size"),
             qPrintable(verdict->text()));
    QVERIFY(!p->applyButton()->isEnabled());
    QCOMPARE(p->termPlot()->plottableCount(), 0);
    m_window->document()->setValue("train.batch_size", 4);
    // (fp16 on the T4: its own step's plan, traced once.)
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    QCOMPARE(p->batch(), 4);
}

void TestPlannerPanel::importedConfigJsonAndBadFile()
{
    auto* p = planner();
    const QString good = m_dir->filePath("config.json");
    QFile f(good);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
               "num_key_value_heads": 2, "intermediate_size": 1408, "vocab_size": 32000,
               "max_position_embeddings": 2048, "tie_word_embeddings": false})");
    f.close();
    QString error;
    QVERIFY2(p->importHfConfig(good, &error), qPrintable(error));
    QCOMPARE(p->source(), QString("imported"));
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    QCOMPARE(p->fitMap().seqLens.back(), std::int64_t{2048});

    const QString bad = m_dir->filePath("broken.json");
    QFile b(bad);
    QVERIFY(b.open(QIODevice::WriteOnly));
    // (A llama config with only some sizes takes LlamaConfig's defaults for
    // the rest, as the trainer reads a folder's; a size that is not a
    // positive integer is wrong.)
    b.write(R"({"model_type": "llama", "hidden_size": "512"})");
    b.close();
    QVERIFY(!p->importHfConfig(bad, &error));
    QVERIFY2(error.contains("broken.json") && error.contains("hidden_size"), qPrintable(error));
    QCOMPARE(p->source(), QString("imported")); // the earlier import stays
}

// A config.json of Qwen3's layout (its norms and its own head size) was once
// refused by Import config.json ("a folder with this config.json is planned
// from its own step", with no folder to give): it is planned from its own
// step, traced as it is imported, as the command line plans it.
void TestPlannerPanel::importedConfigJsonPlannedFromItsStep()
{
    qputenv("TRAINBENCH_CLI", TB_CLI_PATH);
    auto* p = planner();
    QTRY_VERIFY_WITH_TIMEOUT(!p->deriving(), 120000); // (what the tests before asked for)
    const QString path = m_dir->filePath("qwen3/config.json");
    QVERIFY(QDir(m_dir->path()).mkpath("qwen3"));
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"model_type": "qwen3", "vocab_size": 3000, "hidden_size": 256, "intermediate_size": 640,
               "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 96,
               "max_position_embeddings": 4096, "tie_word_embeddings": true})");
    f.close();
    QString error;
    QVERIFY2(p->importHfConfig(path, &error), qPrintable(error));
    QCOMPARE(p->source(), QString("imported"));
    // Traced at once, in the background, saying so.
    QVERIFY(!p->estimate());
    QVERIFY2(p->verdictText().contains("Tracing the model's training step on this computer's CPU (the plan is recorded from it)"),
             qPrintable(p->verdictText()));
    QVERIFY(p->deriving());
    auto* derive = p->deriveButton();
    QVERIFY(derive->isVisible() && derive->isEnabled());
    QCOMPARE(derive->text(), QString("Cancel &deriving"));
    p->setBatch(4);
    p->setSeqLen(256);
    QTRY_VERIFY_WITH_TIMEOUT(!p->deriving(), 120000);
    QVERIFY2(p->estimate().has_value(), qPrintable(p->verdictText()));
    QCOMPARE(derive->text(), QString("&Derive plan again"));
    QVERIFY(!p->mapPlot()->isHidden());
    // The sequence axis reaches the model's context (4096), not a default's.
    QVERIFY2(p->seqSlider()->maximum() > 256, qPrintable(QString::number(p->seqSlider()->maximum())));
    // One answer: the command line's plan of the config.json alone on the T4.
    QProcess cli;
    cli.start(TB_CLI_PATH, {"estimate", "--hf-config", path, "--gpu", "T4", "--batch", "4", "--seq", "256", "--precision",
                            p->precisionBox()->currentData().toString(), "--json"});
    QVERIFY(cli.waitForFinished(120000));
    const auto json = QJsonDocument::fromJson(cli.readAllStandardOutput()).object();
    QVERIFY2(json.contains("peak_bytes"), cli.readAllStandardError().constData());
    QCOMPARE(p->estimate()->peakBytes, static_cast<std::int64_t>(json["peak_bytes"].toDouble()));
    screenshot("planner-imported-qwen3.png");
}

void TestPlannerPanel::experimentPanelShowsTheEstimateForTheTarget()
{
    auto* e = m_window->experimentPanel();
    // ("auto" is mixed precision on a GPU: its own step's plan, traced once.)
    QTRY_VERIFY2_WITH_TIMEOUT(e->estimateText().contains("on Tesla T4"), qPrintable(e->estimateText()), 60000);
    const QString before = e->estimateText();
    m_window->document()->setValue("train.batch_size", 256);
    QVERIFY(e->estimateText() != before);
    QVERIFY(m_window->hardwarePanel()->selectTarget("A100 80GB"));
    QTRY_VERIFY2_WITH_TIMEOUT(e->estimateText().contains("A100"), qPrintable(e->estimateText()), 60000);
    QCOMPARE(planner()->budgetBytes(), GpuCatalogue::bundled().resolve("A100 80GB").gpu.memoryBytes);
    m_window->document()->setValue("device", "cpu");
    QVERIFY(!e->estimateText().contains("A100"));
}

// One config, one target: the Experiment form, the planner, preflight and
// `estimate` resolve it through planOnTarget, with "auto" precision decided
// on the target (fp16 on a T4), and show the same peak.
void TestPlannerPanel::formPlannerPreflightAndCliAgree()
{
    const auto config = *m_window->document()->config();
    const auto t4 = GpuCatalogue::bundled().resolve("T4");
    const auto plan = planOnTarget(config, std::optional<GpuTarget>(t4));
    QCOMPARE(plan.setup.precision, std::string("fp16"));
    const auto memory = memoryPlanOf(config, plan.arch, plan.setup.precision);
    const auto peak = memory.at(plan.setup.batch, plan.setup.seqLen, plan.setup).peakBytes;
    // The planner.
    QCOMPARE(planner()->precisionBox()->currentData().toString(), QString("fp16"));
    QTRY_VERIFY2_WITH_TIMEOUT(planner()->estimate().has_value(), qPrintable(planner()->verdictText()), 60000);
    QCOMPARE(planner()->estimate()->peakBytes, peak);
    // The form.
    QTRY_VERIFY2_WITH_TIMEOUT(m_window->experimentPanel()->estimateText().contains("in fp16"),
                              qPrintable(m_window->experimentPanel()->estimateText()), 60000);
    const QString form = m_window->experimentPanel()->estimateText();
    QVERIFY2(form.contains(bytesText(peak)), qPrintable(form));
    // Preflight, on a card just too small for it (its own step derived, as
    // trainbench-cli preflight derives it).
    auto small = t4;
    small.gpu.memoryBytes = peak - 1;
    PreflightTarget target;
    target.gpu = small;
    target.derivePlan = [](const RunConfig& traced) { return std::make_shared<const DerivedStep>(deriveStep(traced)); };
    bool found = false;
    for (const auto& f : runPreflight(config, target)) {
        if (f.kind != "memory_over_budget") continue;
        found = true;
        QCOMPARE(f.numbers.at("estimated_peak_bytes"), static_cast<double>(peak));
    }
    QVERIFY(found);
}

// bf16 on a T4 (compute capability 7.5): the planner gives preflight's verdict,
// not "Fits", and so does the Experiment form.
void TestPlannerPanel::bf16OnT4DoesNotRun()
{
    auto* p = planner();
    m_window->document()->setValue("train.precision", "bf16");
    QCOMPARE(p->precisionBox()->currentData().toString(), QString("bf16"));
    // (bf16 mixed precision: its own step's plan, traced once.)
    QTRY_VERIFY2_WITH_TIMEOUT(p->verdictText().startsWith("Does not run") && p->verdictText().contains("7.5"),
                              qPrintable(p->verdictText()), 60000);
    QTRY_VERIFY2_WITH_TIMEOUT(m_window->experimentPanel()->estimateText().contains("bf16 does not run"),
                              qPrintable(m_window->experimentPanel()->estimateText()), 60000);
    screenshot("planner-bf16-t4.png");
    p->precisionBox()->setCurrentIndex(p->precisionBox()->findData("fp16"));
    QTRY_VERIFY2_WITH_TIMEOUT(p->verdictText().startsWith("Fits"), qPrintable(p->verdictText()), 60000);
    QVERIFY(m_window->hardwarePanel()->selectTarget("A100 80GB"));
    m_window->document()->setValue("train.batch_size", 16); // reloads the planner from the config
    QTRY_VERIFY2_WITH_TIMEOUT(p->verdictText().startsWith("Fits"), qPrintable(p->verdictText()), 60000);
}

// A 7B model on a T4 and a toy both get a map whose frontier crosses it: a
// fair share of cells fits and a fair share does not (the 7B map was almost
// all red, the frontier in a corner). A click lands on round values. (The 7B
// share moves with the plan: 0.12 since a checkpointed block's first forward
// is planned without grad, which changes the allocator model's segments.)
void TestPlannerPanel::mapRangeFollowsTheModelAndClicksSnap()
{
    auto* p = planner();
    const auto fitShare = [&] {
        const auto& map = p->fitMap();
        int fits = 0;
        for (auto peak : map.peakBytes) fits += peak <= map.budgetBytes ? 1 : 0;
        return static_cast<double>(fits) / static_cast<double>(map.peakBytes.size());
    };
    QVERIFY(p->selectSource("llama-2-7b"));
    p->precisionBox()->setCurrentIndex(p->precisionBox()->findData("fp16"));
    p->loraRankBox()->setValue(16);
    p->checkpointingBox()->setChecked(true);
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    const double big = fitShare();
    QVERIFY2(big >= 0.10 && big <= 0.85, qPrintable(QString("7B on a T4: %1 of the map fits").arg(big)));
    screenshot("planner-7b-map.png");
    QVERIFY(p->selectSource("experiment"));
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    const double toy = fitShare();
    QVERIFY2(toy >= 0.15 && toy <= 0.95, qPrintable(QString("the default experiment: %1 of the map fits").arg(toy)));
    // Click at batch 37, sequence 700: the point moves to batch 40, sequence 640.
    QVERIFY(p->selectSource("gpt2"));
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    auto* plot = p->mapPlot();
    plot->replot();
    const int maxBatch = p->findChild<QSlider*>("batchSlider")->maximum();
    const int maxSeq = p->findChild<QSlider*>("seqSlider")->maximum();
    const double bx = std::min(37.0, maxBatch * 0.6), sy = std::min(700.0, maxSeq * 0.7);
    const QPoint at(static_cast<int>(plot->xAxis->coordToPixel(bx)), static_cast<int>(plot->yAxis->coordToPixel(sy)));
    QTest::mouseClick(plot, Qt::LeftButton, {}, at);
    const auto round = [](int v) {
        if (v <= 8) return true;
        int step = 1;
        while (step * 8 <= v) step *= 2;
        return v % step == 0;
    };
    QVERIFY2(round(p->batch()) && round(p->seqLen()), qPrintable(QString("%1 x %2").arg(p->batch()).arg(p->seqLen())));
    QVERIFY2(std::abs(p->batch() - bx) <= bx / 4 + 1, qPrintable(QString::number(p->batch())));
}

// Presets by family, then size; the names carry the size once.
void TestPlannerPanel::presetsSortedByFamilyAndSize()
{
    auto* box = planner()->findChild<QComboBox*>("plannerSource");
    QStringList names;
    for (int i = 0; i < box->count(); ++i) {
        if (!box->itemData(i).toString().isEmpty() && box->itemData(i).toString() != "experiment") names << box->itemText(i);
    }
    QVERIFY(names.size() >= 10);
    const int pythia160 = names.indexOf("Pythia 160M"), pythia410 = names.indexOf("Pythia 410M"),
              pythia14 = names.indexOf("Pythia 1.4B"), pythia69 = names.indexOf("Pythia 6.9B");
    QVERIFY2(pythia160 >= 0 && pythia160 < pythia410 && pythia410 < pythia14 && pythia14 < pythia69, qPrintable(names.join(" | ")));
    QVERIFY2(names.indexOf("Qwen2.5 0.5B") + 1 == names.indexOf("Qwen2.5 1.5B"), qPrintable(names.join(" | ")));
    for (const QString& n : names) QVERIFY2(!n.contains("parameters"), qPrintable(n));
}

// Tune…: planned for the target card (fp16 on a T4, not bf16), measured on
// this computer within a budget, Apply writes the winner and says what
// changed, and Stop ends a tune at once.
void TestPlannerPanel::tuneDialogPlansMeasuresAndApplies()
{
    qputenv("TRAINBENCH_CLI", TB_CLI_PATH);
    auto* p = planner();
    QVERIFY(p->tuneButton()->isEnabled());
    QTest::keyClick(p, Qt::Key_T, Qt::ControlModifier | Qt::ShiftModifier);
    TuneDialog* dialog = p->openTuneDialog();
    QVERIFY(dialog->isVisible());
    QVERIFY(dialog->targetBox()->currentText().contains("Tesla T4"));
    QSignalSpy finished(dialog, &TuneDialog::finished);
    dialog->tuneButton()->click();
    QVERIFY(dialog->running());
    QVERIFY(finished.wait(120000));
    QVERIFY2(dialog->resultText().contains("Winner: "), qPrintable(dialog->statusText() + dialog->resultText()));
    QVERIFY(dialog->table()->rowCount() > 0);
    for (int row = 0; row < dialog->table()->rowCount(); ++row) {
        QVERIFY(!dialog->table()->item(row, 0)->text().contains("bf16")); // does not run on a T4: not listed
        QCOMPARE(dialog->table()->item(row, 5)->text(), QString::fromUtf8("–")); // a card is not measured
    }

    // This computer, measured within a budget.
    auto* doc = m_window->document();
    dialog->targetBox()->setCurrentIndex(dialog->targetBox()->findData("local"));
    QVERIFY(dialog->budgetBox()->isEnabled());
    dialog->budgetBox()->setValue(0.05);
    dialog->measureStepsBox()->setValue(1);
    dialog->findChild<QSpinBox*>("tuneMeasureTop")->setValue(2);
    dialog->tuneButton()->click();
    QVERIFY(finished.wait(180000));
    int measured = 0, winners = 0;
    for (int row = 0; row < dialog->table()->rowCount(); ++row) {
        if (dialog->table()->item(row, 5)->text() != QString::fromUtf8("–")) ++measured;
        if (dialog->table()->item(row, 0)->font().bold()) ++winners;
    }
    QCOMPARE(measured, 2);
    QCOMPARE(winners, 1);
    QVERIFY2(dialog->resultText().contains("the fastest measured"), qPrintable(dialog->resultText()));
    QCoreApplication::processEvents(); // pending layout requests
    QVERIFY(dialog->grab().save(QCoreApplication::applicationDirPath() + "/tune-dialog.png"));
    QVERIFY(dialog->applyButton()->isEnabled());
    const QString message = dialog->applyWinner();
    QVERIFY2(message.startsWith("Applied the tuned configuration to the experiment: batch 32 → "), qPrintable(message));
    QCOMPARE(m_window->statusBar()->currentMessage(), message);
    QVERIFY(doc->isValid());
    QVERIFY(doc->value("train.batch_size").toInt() != 32);
    // The planner reloads the experiment: its plan of the winner is within the budget.
    QVERIFY(p->estimate()->peakBytes > 0);

    // Stop ends it at once and applies nothing.
    const QString before = doc->text();
    dialog->measureStepsBox()->setValue(50);
    dialog->tuneButton()->click();
    QVERIFY(dialog->running());
    dialog->tuneButton()->click();
    QVERIFY(finished.wait(10000));
    QVERIFY2(dialog->statusText().startsWith("Stopped"), qPrintable(dialog->statusText()));
    QCOMPARE(doc->text(), before);
    dialog->close();
}

QTEST_MAIN(TestPlannerPanel)
#include "tst_planner_panel.moc"

// A TorchScript experiment: the plan is derived from the model's own step by
// trainbench-cli (a process of its own), then every slider, the map and the
// answers come from it without tracing again; other inputs ask for a new
// derivation. The CLI gives the same figure for the same config.
void TestPlannerPanel::torchScriptExperimentIsDerived()
{
    qputenv("TRAINBENCH_CLI", TB_CLI_PATH);
    QTRY_VERIFY_WITH_TIMEOUT(!planner()->deriving(), 120000); // (what the tests before asked for)
    const QString model = m_dir->filePath("lm.pt");
    tb::fixtures::scriptedLm(tb::fixtures::ScriptVariant::Clean, 256, 32, 2).save(model.toStdString());
    auto* doc = m_window->document();
    doc->setValues({{"model.type", "torchscript"}, {"model.path", model}, {"train.batch_size", 8}});
    QVERIFY(doc->isValid());
    QVERIFY(!planner()->estimate());
    QVERIFY2(planner()->verdictText().contains("Derive plan traces its training step"), qPrintable(planner()->verdictText()));
    QVERIFY(planner()->mapPlot()->isHidden() && planner()->termPlot()->isHidden());
    auto* derive = planner()->deriveButton();
    QVERIFY(derive->isVisible() && derive->isEnabled());
    screenshot("planner-torchscript-underived.png");
    // Weights loaded in bf16 are a setup to plan: the trainer would trace fp32
    // ones, so the step is not derived (it was, and planned as bf16 weights).
    doc->setValue("train.weights_dtype", QString("bf16"));
    QVERIFY2(planner()->verdictText().contains("train.weights_dtype \"bf16\" is a setup it only plans"),
             qPrintable(planner()->verdictText()));
    QVERIFY(!derive->isEnabled());
    screenshot("planner-torchscript-planning-fields.png");
    doc->setValue("train.weights_dtype", QString("fp32"));
    QVERIFY(derive->isEnabled());
    QTest::mouseClick(derive, Qt::LeftButton);
    QVERIFY(planner()->deriving());
    QCOMPARE(derive->text(), QString("Cancel &deriving"));
    QTRY_VERIFY_WITH_TIMEOUT(!planner()->deriving(), 120000);
    QVERIFY2(planner()->estimate().has_value(), qPrintable(planner()->verdictText()));
    const auto e = *planner()->estimate();
    QVERIFY(e.notes.front().find("a lower bound on the GPU") == 0);
    QCOMPARE(derive->text(), QString("&Derive plan again"));
    QVERIFY2(planner()->verdictText().startsWith("Fits") && planner()->verdictText().contains("at least"),
             qPrintable(planner()->verdictText()));
    QVERIFY(!planner()->mapPlot()->isHidden() && !planner()->termPlot()->isHidden());
    // A map cell is the derived step's plan at its batch and sequence, as the point's.
    const auto map = planner()->fitMap();
    const std::size_t row = map.seqLens.size() / 2, column = map.batches.size() / 3;
    planner()->setBatch(static_cast<int>(map.batches[column]));
    planner()->setSeqLen(static_cast<int>(map.seqLens[row]));
    QCOMPARE(planner()->estimate()->peakBytes, map.at(row, column));
    planner()->setBatch(8);
    planner()->setSeqLen(64);

    // The same config through the CLI: one answer.
    QString error;
    const QString saved = m_dir->filePath("ts.json");
    QVERIFY2(doc->saveAs(saved, &error), qPrintable(error));
    QCOMPARE(cliPeakOnT4(saved), e.peakBytes);

    // The batch moves the plan with no new trace.
    planner()->setBatch(16);
    QVERIFY(!planner()->deriving());
    QVERIFY(planner()->estimate()->peakBytes > e.peakBytes);
    screenshot("planner-torchscript.png");
    // What does not change the step keeps its plan: the name, the learning
    // rate, how long it trains (they asked for a new trace before).
    doc->setValues({{"name", "renamed"}, {"optim.lr", 0.01}, {"train.steps", 50}, {"train.seed", 7}});
    QVERIFY2(planner()->estimate().has_value(), qPrintable(planner()->verdictText()));
    QCOMPARE(derive->text(), QString("&Derive plan again"));
    // Another precision is another step: derived again on request; back to
    // the traced one, its plan is there again.
    const int traced = planner()->precisionBox()->currentIndex();
    planner()->precisionBox()->setCurrentIndex(planner()->precisionBox()->findData("bf16"));
    QVERIFY(!planner()->estimate());
    QCOMPARE(derive->text(), QString("&Derive plan from the model"));
    planner()->precisionBox()->setCurrentIndex(traced);
    QVERIFY2(planner()->estimate().has_value(), qPrintable(planner()->verdictText()));
    // The model file saved again (another model, the same path) is another
    // step, seen at the next change of the plan (it was not seen at all).
    QTest::qWait(20); // a modification time after the first save's
    tb::fixtures::scriptedLm(tb::fixtures::ScriptVariant::Clean, 256, 32, 3).save(model.toStdString());
    planner()->setBatch(9);
    QVERIFY2(!planner()->estimate(), qPrintable(planner()->verdictText()));
    QCOMPARE(derive->text(), QString("&Derive plan from the model"));
}

// Mistral 7B's sliding window is 4096 positions: past it the trainer runs
// eager attention, fused asked for or not, and the panel says so in its notes.

// The Chat tab as a user takes it: a run trained on chat data, sent there
// from History, answers a multi-turn conversation through the folder's chat
// template with a system prompt (the first reply is what `trainbench-cli
// sample RUN --chat` answers); Stop ends a reply at once and the next message
// is answered; side by side, the base folder answers the same message; New
// chat clears both. Screenshotted at 1600x1000 and 1280x720.
void TestPlannerPanel::chatPlaygroundTalksStopsAndCompares()
{
    QTemporaryDir dir;
    const QString folder = dir.filePath("tiny-chat");
    const char* configJson = R"({"model_type": "llama", "vocab_size": 16, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 256})";
    QVERIFY(QDir().mkpath(folder));
    writeHfFolder(folder.toStdString(), configJson, 16);
    writeTinyTokenizerFolder(folder, R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template":
        "{% for m in messages %}{% if m.role == 'system' %}{{ m.content + '\\n' }}{% elif m.role == 'user' %}{{ m.content }}{% else %}{{ ' ' + m.content + eos_token }}{% endif %}{% endfor %}"})");
    {
        QFile data(dir.filePath("chat.jsonl"));
        QVERIFY(data.open(QIODevice::WriteOnly));
        for (int i = 0; i < 40; ++i)
            data.write(R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]})" "\n");
    }
    auto* doc = m_window->document();
    doc->setText(QString(R"({"name": "chat-tiny", "device": "cpu", "model": {"type": "hf", "path": "%1"},
        "data": {"source": "chat", "path": "%2", "seq_len": 16},
        "train": {"batch_size": 8, "steps": 60, "log_every": 10}, "optim": {"lr": 0.01}})")
                     .arg(folder, dir.filePath("chat.jsonl")));
    QVERIFY2(doc->isValid(), doc->issues().empty() ? "" : doc->issues().front().text().c_str());
    SessionOutcome outcome;
    trainInRunTab(outcome);
    if (QTest::currentTestFailed()) return;

    // From History's Chat button.
    auto* history = m_window->historyPanel();
    m_window->tabs()->setCurrentWidget(history);
    history->refresh();
    history->selectRuns({outcome.runId});
    QVERIFY2(history->chatButton()->isEnabled(), qPrintable(history->chatButton()->toolTip()));
    QTest::mouseClick(history->chatButton(), Qt::LeftButton);
    auto* chat = m_window->chatPanel();
    QCOMPARE(m_window->tabs()->currentWidget(), static_cast<QWidget*>(chat));
    chat->setConfirmNewChat(false);
    QTRY_VERIFY_WITH_TIMEOUT(!chat->loading(0), 60000);
    QVERIFY2(chat->status(0).contains("chat template"), qPrintable(chat->status(0)));
    QVERIFY(chat->sendButton()->isEnabled() && !chat->stopButton()->isEnabled());

    // A greedy first reply, as the command line answers it.
    chat->temperatureBox()->setValue(0.0);
    chat->maxTokensBox()->setValue(8);
    QSignalSpy replied(chat, &ChatPanel::replied);
    QTest::keyClicks(chat->messageEdit(), "hello");
    QTest::keyClick(chat->messageEdit(), Qt::Key_Return);
    QVERIFY(chat->messageEdit()->toPlainText().isEmpty());
    QVERIFY(replied.wait(60000));
    QProcess cli;
    cli.start(TB_CLI_PATH, {"sample", QString::number(outcome.runId), "--db", m_dir->filePath("exp.db"), "--chat", "--prompt",
                            "hello", "--temperature", "0", "--max-tokens", "8"});
    QVERIFY(cli.waitForFinished(60000));
    const QString fromCli = QString::fromUtf8(cli.readAllStandardOutput()).trimmed();
    QVERIFY2(cli.exitCode() == 0, qPrintable(cli.readAllStandardError()));
    // (The trained model may end its turn at once: then both replies are empty.)
    QCOMPARE(chat->lastReply(0).trimmed(), fromCli);
    QVERIFY2(chat->transcript(0).startsWith("You: hello\nModel: ") && chat->transcript(0).contains(" tokens in "),
             qPrintable(chat->transcript(0)));

    // A second turn with a system prompt: the whole conversation is read.
    chat->systemEdit()->setPlainText("hello.");
    chat->messageEdit()->setPlainText("hello hello");
    QTest::mouseClick(chat->sendButton(), Qt::LeftButton);
    QVERIFY(replied.wait(60000));
    QCOMPARE(chat->transcript(0).count("You: "), 2);
    QVERIFY2(chat->transcript(0).contains("tokens/s"), qPrintable(chat->transcript(0)));

    // Stop: at once, the text so far kept; the next message is answered.
    chat->temperatureBox()->setValue(1.0);
    chat->maxTokensBox()->setValue(100000);
    chat->messageEdit()->setPlainText("hello");
    QTest::mouseClick(chat->sendButton(), Qt::LeftButton);
    QVERIFY(chat->busy() && chat->stopButton()->isEnabled() && !chat->sendButton()->isEnabled());
    QTest::keyClick(chat->messageEdit(), Qt::Key_Escape);
    QVERIFY(!chat->busy());
    QVERIFY(chat->sendButton()->isEnabled());
    QVERIFY2(chat->transcript(0).trimmed().endsWith("[stopped]"), qPrintable(chat->transcript(0)));
    chat->maxTokensBox()->setValue(8);
    chat->messageEdit()->setPlainText("hello");
    const int before = replied.count();
    QTest::mouseClick(chat->sendButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(replied.count() > before && !chat->busy(), 60000);
    QCOMPARE(chat->transcript(0).count("You: "), 4);

    // Side by side: the base folder answers the same message.
    ChatSource base;
    base.folder = folder;
    base.label = "Folder " + folder;
    chat->setSource(1, base);
    QVERIFY(chat->comparing());
    QTRY_VERIFY_WITH_TIMEOUT(!chat->loading(1), 60000);
    QVERIFY2(chat->status(1).contains("chat template"), qPrintable(chat->status(1)));
    chat->messageEdit()->setPlainText("hello");
    replied.clear();
    QTest::mouseClick(chat->sendButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(replied.count() == 2 && !chat->busy(), 60000);
    QCOMPARE(chat->transcript(1).count("You: "), 1);
    m_window->resize(1600, 1000);
    screenshot("chat-side-by-side-1600.png");
    m_window->resize(1280, 720);
    QTest::qWait(50);
    screenshot("chat-side-by-side-1280.png");
    QVERIFY(chat->sendButton()->isVisible() && chat->sendButton()->height() > 0);

    // A folder that cannot be read says why.
    ChatSource broken;
    broken.folder = dir.filePath("nothing-here");
    broken.label = "Folder " + broken.folder;
    chat->setSource(1, broken);
    QTRY_VERIFY_WITH_TIMEOUT(!chat->loading(1), 60000);
    QVERIFY2(chat->status(1).startsWith("Cannot load Folder " + broken.folder), qPrintable(chat->status(1)));
    QVERIFY(!chat->sendButton()->isEnabled());
    chat->setCompare(false);
    QVERIFY(chat->sendButton()->isEnabled());

    // New chat clears the conversation, keeping the model.
    chat->newChat();
    QVERIFY(chat->transcript(0).isEmpty());
    QVERIFY(chat->sendButton()->isEnabled());
}

void TestPlannerPanel::mistralPastItsWindowIsPlannedEager()
{
    QVERIFY(m_window->hardwarePanel()->selectTarget("a100-80gb")); // 8192 positions on the map
    auto* p = planner();
    QVERIFY(p->selectSource("mistral-7b"));
    p->precisionBox()->setCurrentIndex(p->precisionBox()->findData("bf16"));
    p->loraRankBox()->setValue(16);
    p->checkpointingBox()->setChecked(true);
    auto* attention = p->findChild<QComboBox*>("plannerAttention");
    // LoRA is planned from its own step, traced here: fused attention
    // (scaled_dot_product_attention) only where this build's LibTorch has it.
    const bool fused = builtTorchMajor() >= 2;
    attention->setCurrentIndex(attention->findData("fused"));
    if (!fused) {
        QTRY_VERIFY2_WITH_TIMEOUT(p->verdictText().contains("needs LibTorch 2.0 or newer"), qPrintable(p->verdictText()), 60000);
        attention->setCurrentIndex(attention->findData("eager"));
    }
    QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    p->setBatch(1);
    auto* notes = p->findChild<QLabel*>("plannerNotes");
    p->setSeqLen(4096);
    QCOMPARE(p->seqLen(), 4096);
    QVERIFY(p->estimate().has_value());
    const auto within = p->estimate()->peakBytes;
    p->setSeqLen(8192);
    QCOMPARE(p->seqLen(), 8192);
    QVERIFY(p->estimate().has_value());
    const auto past = p->estimate()->peakBytes;
    if (fused) {
        // Past the window fused attention is the eager path: one plan.
        attention->setCurrentIndex(attention->findData("eager"));
        QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
        QCOMPARE(p->estimate()->peakBytes, past);
        attention->setCurrentIndex(attention->findData("fused"));
        QTRY_VERIFY2_WITH_TIMEOUT(p->estimate().has_value(), qPrintable(p->verdictText()), 60000);
    }
    // Past the window the step's maps are the window's masked ones (both sides recorded).
    // Past the window the maps are the whole sequence's (masked): eager
    // has maps on both sides, fused none within the window.
    QVERIFY2(fused ? past > 2 * within : past > within,
             qPrintable(QString("%1 at 8192, %2 at 4096 (%3)").arg(past).arg(within).arg(notes->text())));
    screenshot("planner-mistral-window.png");
}

// A Llama folder whose head size is not hidden / heads (Qwen3's, Gemma's
// layout): the planner derives its plan from its own step (recorded at
// small widths), as the CLI does, and both give one figure.
// The QLoRA flow in the window: a Llama 2 7B folder with LoRA does not fit
// a T4; NF4 chosen in the form, the planner derives the quantized step's
// plan, which fits, as `estimate` plans it.
void TestPlannerPanel::quantizedBaseChosenInTheFormFitsAT4()
{
    qputenv("TRAINBENCH_CLI", TB_CLI_PATH);
    QTemporaryDir folder;
    {
        QFile config(folder.filePath("config.json"));
        QVERIFY(config.open(QIODevice::WriteOnly));
        config.write(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
            "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 32, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu",
            "tie_word_embeddings": false, "torch_dtype": "bfloat16"})");
        QFile tokens(folder.filePath("train.bin"));
        QVERIFY(tokens.open(QIODevice::WriteOnly));
        tokens.write(QByteArray(20000, '\x05'));
    }
    auto* doc = m_window->document();
    doc->setText(QString(R"({"name": "llama2-7b-qlora", "device": "cuda", "model": {"type": "hf", "path": "%1"},
        "data": {"source": "tokens", "path": "%2", "seq_len": 512},
        "train": {"batch_size": 2, "steps": 100, "activation_checkpointing": true}, "lora": {"rank": 8, "alpha": 16}})")
                     .arg(folder.path(), folder.filePath("train.bin")));
    QVERIFY2(doc->isValid(), doc->issues().empty() ? "" : doc->issues().front().text().c_str());
    auto* quantize = qobject_cast<QComboBox*>(m_window->experimentPanel()->fieldEditor("model.quantize"));
    QVERIFY(quantize && quantize->isEnabled());
    QCOMPARE(quantize->currentText(), QString("none"));
    QTRY_VERIFY2_WITH_TIMEOUT(planner()->estimate() && planner()->verdictText().contains("Does not fit"),
                              qPrintable(planner()->verdictText()), 60000);
    const auto lora = *planner()->estimate();
    QVERIFY2(planner()->answersText().contains("Compare with NF4"), qPrintable(planner()->answersText()));
    screenshot("planner-7b-lora-t4.png");

    // Preflight (the Diagnostics panel) derives the NF4 alternative in the
    // background and offers it as the fix, with its plan; the planner, on the
    // same deriver, shows it beside the LoRA plan without tracing again.
    auto* diagnostics = m_window->diagnosticsPanel();
    diagnostics->waitForDerivedPreflight();
    const auto& planned = diagnostics->plannedFindings();
    const auto over = std::find_if(planned.begin(), planned.end(), [](const Finding& f) { return f.kind == "memory_over_budget"; });
    QVERIFY(over != planned.end());
    QCOMPARE(over->autoFix.size(), std::size_t(1));
    QCOMPARE(over->autoFix[0].path, std::string("model.quantize"));
    QVERIFY(!planner()->deriving());
    QVERIFY(!planner()->compareNf4Button()->isVisible());
    const QString answers = planner()->answersText();
    QVERIFY2(answers.contains("Base stored in NF4 (QLoRA): ") && answers.contains("fits (43%)"), qPrintable(answers));
    // One figure: the fix's, the planner's NF4 line's (and below, the plan once NF4 is chosen).
    const QString nf4Figure = answers.section("Base stored in NF4 (QLoRA): ", 1).section(',', 0, 0);
    QVERIFY2(QString::fromStdString(over->fix).contains("peaks at " + nf4Figure), over->fix.c_str());
    m_window->tabs()->setCurrentWidget(diagnostics);
    QVERIFY(diagnostics->selectKind("memory_over_budget"));
    screenshot("diagnostics-nf4-fix.png");
    QTest::mouseClick(diagnostics->applyFixButton(), Qt::LeftButton);
    QCOMPARE(quantize->currentText(), QString("nf4"));
    diagnostics->waitForDerivedPreflight();
    for (const auto& f : diagnostics->plannedFindings()) QVERIFY2(f.kind.rfind("memory", 0) != 0, f.title.c_str());
    m_window->tabs()->setCurrentWidget(planner());
    // Applied, its own plan is the one already derived (shown at once; the
    // form may still trace its CPU figure), and the LoRA plan beside it.
    QVERIFY2(planner()->estimate() && planner()->verdictText().startsWith("Fits (43%): " + nf4Figure),
             qPrintable(planner()->verdictText()));
    QVERIFY2(planner()->answersText().contains("Unquantized base (as LoRA): " + bytesText(lora.peakBytes) + ", does not fit"),
             qPrintable(planner()->answersText()));
    screenshot("planner-7b-nf4-beside-lora.png");
    quantize->setCurrentText("none");
    QVERIFY(planner()->compareNf4Button()->isHidden()); // its NF4 plan is known

    quantize->setCurrentText("nf4");
    QVERIFY2(doc->text().contains("\"quantize\": \"nf4\""), qPrintable(doc->text()));
    QVERIFY(m_window->experimentPanel()->fieldEditor("model.double_quant")->isEnabled());
    // The form's figure is the planner's (one plan, traced once through the window's deriver).
    QTRY_VERIFY2_WITH_TIMEOUT(m_window->experimentPanel()->estimateText().contains(" of tensors at the peak"),
                              qPrintable(m_window->experimentPanel()->estimateText()), 120000);
    {
        const QRegularExpression gib("([0-9.]+ GiB) of ([0-9.]+ GiB)");
        const auto inForm = gib.match(m_window->experimentPanel()->estimateText()), inPlanner = gib.match(planner()->verdictText());
        QVERIFY2(inForm.hasMatch() && inPlanner.hasMatch() && inForm.captured(0) == inPlanner.captured(0),
                 qPrintable(m_window->experimentPanel()->estimateText() + " | " + planner()->verdictText()));
    }
    auto* derive = planner()->deriveButton();
    QVERIFY(derive->isVisible() && derive->isEnabled());
    QCOMPARE(derive->text(), QString("&Derive plan again"));
    QVERIFY2(planner()->estimate().has_value(), qPrintable(planner()->verdictText()));
    const auto e = *planner()->estimate();
    QVERIFY(!e.lowerBound && e.allocatedPeakBytes > 0);
    QVERIFY2(planner()->verdictText().startsWith("Fits"), qPrintable(planner()->verdictText()));
    QVERIFY(e.peakBytes < GpuCatalogue::bundled().resolve("T4").gpu.memoryBytes * 9 / 10);
    screenshot("planner-7b-nf4-t4.png");
    // The form scrolled to its quantized base.
    auto* field = m_window->experimentPanel()->fieldEditor("model.quantize");
    for (QWidget* w = field; w; w = w->parentWidget()) {
        if (auto* scroll = qobject_cast<QScrollArea*>(w)) {
            scroll->ensureWidgetVisible(field);
            break;
        }
    }
    screenshot("experiment-nf4.png");
    QString error;
    const QString saved = m_dir->filePath("qlora.json");
    QVERIFY2(doc->saveAs(saved, &error), qPrintable(error));
    QCOMPARE(cliPeakOnT4(saved), e.peakBytes);
}

// The QLoRA flow in the window, as a user takes it: a model folder, NF4
// chosen in the form, its plan derived on the target, trained in the Run tab,
// sampled, and exported from History as a PEFT adapter and as a bitsandbytes
// folder (the folders named when done). Screenshotted at each step.
void TestPlannerPanel::qloraFromTheFormTrainsSamplesAndExports()
{
    qputenv("TRAINBENCH_CLI", TB_CLI_PATH);
    QTemporaryDir folder;
    writeHfFolder(folder.path().toStdString(),
                  R"({"model_type": "llama", "vocab_size": 200, "hidden_size": 64, "intermediate_size": 128,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                      "max_position_embeddings": 256, "hidden_act": "silu", "tie_word_embeddings": false})",
                  200);
    auto* doc = m_window->document();
    doc->setText(QString(R"({"name": "qlora-tiny", "device": "cpu", "model": {"type": "hf", "path": "%1"},
        "data": {"source": "tokens", "path": "%2", "seq_len": 32},
        "train": {"batch_size": 4, "steps": 40, "log_every": 5}, "optim": {"lr": 0.003},
        "lora": {"rank": 8, "alpha": 16}})")
                     .arg(folder.path(), folder.filePath("train.bin")));
    QVERIFY2(doc->isValid(), doc->issues().empty() ? "" : doc->issues().front().text().c_str());
    auto* quantize = qobject_cast<QComboBox*>(m_window->experimentPanel()->fieldEditor("model.quantize"));
    QVERIFY(quantize);
    quantize->setCurrentText("nf4");
    QCOMPARE(doc->config()->model.quantize, std::string("nf4"));

    // The plan on the T4, derived from its own step as soon as it is asked
    // for, then the unquantized LoRA step's beside it.
    QTRY_VERIFY2_WITH_TIMEOUT(planner()->estimate().has_value(), qPrintable(planner()->verdictText()), 120000);
    QVERIFY2(planner()->verdictText().startsWith("Fits"), qPrintable(planner()->verdictText()));
    QTRY_VERIFY2_WITH_TIMEOUT(planner()->answersText().contains("Unquantized base (as LoRA): "),
                              qPrintable(planner()->answersText()), 120000);
    QTRY_VERIFY_WITH_TIMEOUT(!planner()->deriving(), 120000);
    screenshot("qlora-flow-plan.png");
    // The adapters' dropout, as the form offers it (the PEFT export names it).
    QVERIFY(m_window->experimentPanel()->fieldEditor("lora.dropout"));
    doc->setValue("lora.dropout", 0.05);
    QCOMPARE(doc->config()->lora.dropout, 0.05);

    // Trained in the Run tab.
    auto* run = m_window->runPanel();
    SessionOutcome outcome;
    trainInRunTab(outcome);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(outcome.stepsDone, 40);
    QTRY_VERIFY(run->sampleBox()->generateButton()->isEnabled());
    run->sampleBox()->promptEdit()->setText("5 12 19");
    QSignalSpy generated(run->sampleBox(), &SampleBox::generated);
    QTest::mouseClick(run->sampleBox()->generateButton(), Qt::LeftButton);
    QVERIFY(generated.wait(60000));
    QVERIFY2(!run->sampleBox()->resultView()->toPlainText().trimmed().isEmpty(), "no sample");
    screenshot("qlora-flow-run.png");

    // Exported from History: the adapter, then the bitsandbytes folder.
    auto* history = m_window->historyPanel();
    m_window->tabs()->setCurrentWidget(history);
    history->refresh();
    history->selectRuns({outcome.runId});
    QVERIFY(history->exportModelButton()->isEnabled());
    auto* dialog = history->openExportModel();
    QVERIFY(dialog);
    using Kind = ExportModelDialog::Kind;
    QCOMPARE(dialog->kinds(), (std::vector<Kind>{Kind::Adapter, Kind::Merged, Kind::Quantized, Kind::Bundle}));
    QCOMPARE(dialog->kind(), Kind::Adapter);
    QVERIFY2(dialog->folder().contains("/exports/qlora-tiny") && dialog->folder().endsWith(QString("-run%1-adapter").arg(outcome.runId)), qPrintable(dialog->folder()));
    QSignalSpy exported(history, &HistoryPanel::exported);
    QTest::mouseClick(dialog->exportButton(), Qt::LeftButton);
    QVERIFY(dialog->running());
    QTRY_VERIFY_WITH_TIMEOUT(!dialog->running(), 120000);
    QVERIFY2(dialog->succeeded(), qPrintable(dialog->statusText()));
    QVERIFY(QFileInfo::exists(dialog->folder() + "/adapter_config.json"));
    {
        QFile adapter(dialog->folder() + "/adapter_config.json");
        QVERIFY(adapter.open(QIODevice::ReadOnly));
        QCOMPARE(QJsonDocument::fromJson(adapter.readAll()).object()["lora_dropout"].toDouble(), 0.05);
    }
    QVERIFY(QFileInfo::exists(dialog->folder() + "/adapter_model.safetensors"));
    QVERIFY2(dialog->statusText().contains(dialog->folder()) && dialog->statusText().contains("adapter_config.json"),
             qPrintable(dialog->statusText()));
    QCOMPARE(exported.count(), 1);
    QVERIFY(dialog->grab().save(QCoreApplication::applicationDirPath() + "/qlora-flow-export.png"));
    QVERIFY(dialog->selectKind(Kind::Quantized));
    QVERIFY2(dialog->folder().endsWith("-bnb-nf4"), qPrintable(dialog->folder()));
    QCOMPARE(dialog->exportArguments().last(), QString("--quantized"));
    QTest::mouseClick(dialog->exportButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!dialog->running(), 120000);
    QVERIFY2(dialog->succeeded(), qPrintable(dialog->statusText()));
    QFile config(dialog->folder() + "/config.json");
    QVERIFY(config.open(QIODevice::ReadOnly));
    QVERIFY(QJsonDocument::fromJson(config.readAll()).object()["quantization_config"].toObject()["load_in_4bit"].toBool());
    // Again into the same folder: the user is asked before its files are replaced; a test says yes.
    dialog->setConfirmReplace(false);
    QTest::mouseClick(dialog->exportButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!dialog->running(), 120000);
    QVERIFY(dialog->succeeded());
    // The run bundle: one JSON file import-run reads, its checkpoint beside it.
    QVERIFY(dialog->selectKind(Kind::Bundle));
    QVERIFY2(dialog->folder().endsWith("-bundle.json"), qPrintable(dialog->folder()));
    QTest::mouseClick(dialog->exportButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!dialog->running(), 120000);
    QVERIFY2(dialog->succeeded(), qPrintable(dialog->statusText()));
    QFile bundle(dialog->folder());
    QVERIFY(bundle.open(QIODevice::ReadOnly));
    QVERIFY(QJsonDocument::fromJson(bundle.readAll()).isObject());
    QVERIFY(QFileInfo::exists(dialog->folder() + ".checkpoint.pt"));
    QVERIFY(dialog->selectKind(Kind::Quantized));
    // A folder it cannot write: the reason, in one sentence, and nothing claimed.
    dialog->setFolder("/proc/trainbench-cannot-write-here");
    QTest::mouseClick(dialog->exportButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!dialog->running(), 120000);
    QVERIFY(!dialog->succeeded());
    QVERIFY2(dialog->statusText().startsWith("Not exported: "), qPrintable(dialog->statusText()));
    QCOMPARE(exported.count(), 4);
    screenshot("qlora-flow-history.png");
    dialog->close();
}

void TestPlannerPanel::folderWithItsOwnHeadSizeIsDerived()
{
    qputenv("TRAINBENCH_CLI", TB_CLI_PATH);
    QTRY_VERIFY_WITH_TIMEOUT(!planner()->deriving(), 120000); // (what the tests before asked for)
    QTemporaryDir folder;
    writeHfFolder(folder.path().toStdString(),
                  R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 64, "intermediate_size": 96,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
                      "max_position_embeddings": 128, "hidden_act": "silu", "tie_word_embeddings": false})",
                  64);
    auto* doc = m_window->document();
    doc->setText(QString(R"({"name": "own-head-size", "device": "cpu", "model": {"type": "hf", "path": "%1"},
        "data": {"source": "tokens", "path": "%2", "seq_len": 64}, "train": {"batch_size": 4, "steps": 2, "precision": "fp32"}})")
                     .arg(folder.path(), folder.filePath("train.bin")));
    QVERIFY2(doc->isValid(), doc->issues().empty() ? "" : doc->issues().front().text().c_str());
    // Traced at once, in the background, for the planner and the form alike.
    QVERIFY(!planner()->estimate());
    QVERIFY2(planner()->verdictText().contains("Tracing the model's training step"), qPrintable(planner()->verdictText()));
    QVERIFY(planner()->deriving());
    auto* derive = planner()->deriveButton();
    QTRY_VERIFY_WITH_TIMEOUT(!planner()->deriving(), 120000);
    QTRY_VERIFY2(m_window->experimentPanel()->estimateText().contains(" of tensors at the peak"),
                 qPrintable(m_window->experimentPanel()->estimateText()));
    QVERIFY2(planner()->estimate().has_value(), qPrintable(planner()->verdictText()));
    const auto e = *planner()->estimate();
    bool recorded = false;
    for (const auto& n : e.notes) recorded = recorded || n.find("recorded at small widths") != std::string::npos;
    QVERIFY(recorded);
    // On the T4 the step's programs by CUDA's rules on the allocator's model:
    // a plan, not a lower bound (it was the CPU's tensors plus the context).
    QVERIFY(!e.lowerBound && e.allocatedPeakBytes > 0);
    QVERIFY2(!planner()->verdictText().contains("at least"), qPrintable(planner()->verdictText()));
    screenshot("planner-head-size-derived.png");
    // Preflight says its quick check is only a lower bound for this folder.
    m_window->tabs()->setCurrentWidget(m_window->diagnosticsPanel());
    screenshot("diagnostics-head-size.png");
    m_window->tabs()->setCurrentWidget(planner());
    QString error;
    const QString saved = m_dir->filePath("own-head-size.json");
    QVERIFY2(doc->saveAs(saved, &error), qPrintable(error));
    QCOMPARE(cliPeakOnT4(saved), e.peakBytes);
    // fit on the card takes it too (it was refused: a lower bound overstates what fits).
    QProcess fit;
    fit.start(TB_CLI_PATH, {"fit", "--config", saved, "--gpu", "T4", "--seq", "64", "--json"});
    QVERIFY(fit.waitForFinished(120000));
    QVERIFY2(fit.exitCode() == 0, fit.readAllStandardError().constData());
    QVERIFY(QJsonDocument::fromJson(fit.readAllStandardOutput()).object()["max_batch"].toInt() > 4);
    // config.json edited in place (the folder's own time does not move) is
    // another model: traced again, not planned from the old step (here the
    // trace says that the config's sizes, read before, are not the folder's).
    QTest::qWait(20);
    {
        QFile config(folder.filePath("config.json"));
        QVERIFY(config.open(QIODevice::ReadWrite));
        auto text = config.readAll();
        text.replace("\"intermediate_size\": 96", "\"intermediate_size\": 128");
        config.resize(0);
        config.write(text);
    }
    planner()->setBatch(5);
    QVERIFY2(!planner()->estimate(), qPrintable(planner()->verdictText()));
    QVERIFY2(planner()->verdictText().contains("Tracing the model's training step"), qPrintable(planner()->verdictText()));
    QTRY_VERIFY_WITH_TIMEOUT(!planner()->deriving(), 120000);
    QVERIFY2(!planner()->estimate() && planner()->verdictText().contains("differs from intermediate_size 128"),
             qPrintable(planner()->verdictText()));
    QCOMPARE(derive->text(), QString("&Derive plan from the model"));
}
