// Runs launched from the window: they finish, stop, fail visibly, land in the
// store, and never freeze the GUI thread.
#include <QtTest>
#include <QStandardItemModel>

#include <QComboBox>

#include <QDockWidget>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QStatusBar>

#include "ConfigDocument.h"
#include "LossPlot.h"
#include "MetricPlot.h"
#include "ExperimentPanel.h"
#include "MainWindow.h"
#include "RunPanel.h"
#include "SampleBox.h"
#include "StepAssembler.h"
#include "TrainingWorker.h"
#include "run/SystemSampler.h"
#include "store/RunStore.h"
#include "TestPrinters.h"
#include "store/RunStore.h"

using namespace tb;
using namespace tb::ui;

class TestRunPanel : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }
    void init();
    void cleanup() { m_window.reset(); }
    void defaultExampleRunsToFinishedWithoutFreezingTheGui();
    void stopMidRunCancelsWithCheckpoint();
    void vanishedDataFileFailsVisibly();
    void closingDuringARunStopsItCleanly();
    void lateStopNeverCancelsTheNextRun();
    void runNamesAreShownAsPlainText();
    void lossPlotStaysBoundedAndKeepsSpikes();
    void plotsReadRight();
    void followedStepsReachThePlotOnce();
    void longAnswerKeepsTheWindowAndASqueezedLayoutIsRepaired();
    void runTabIsUsableAt1280x720();
    void systemSamplerSamplesEveryInterval();

private:
    void setSteps(int steps)
    {
        auto* edit = qobject_cast<QLineEdit*>(m_window->experimentPanel()->fieldEditor("train.steps"));
        edit->setFocus();
        edit->selectAll();
        QTest::keyClick(edit, Qt::Key_Delete);
        QTest::keyClicks(edit, QString::number(steps));
    }
    SessionOutcome waitForEnd(QSignalSpy& finished, int timeoutMs = 240000)
    {
        if (finished.isEmpty()) finished.wait(timeoutMs);
        return finished.isEmpty() ? SessionOutcome{} : finished.first().first().value<SessionOutcome>();
    }
    QString dbPath() const { return m_dir->filePath("exp.db"); }
    std::unique_ptr<QTemporaryDir> m_dir;
    std::unique_ptr<MainWindow> m_window;
};

void TestRunPanel::init()
{
    m_dir = std::make_unique<QTemporaryDir>();
    m_window = std::make_unique<MainWindow>(dbPath());
    m_window->setAskBeforeClosing(false);
    m_window->openExample(":/examples/default.json");
    m_window->resize(1400, 900);
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
}

void TestRunPanel::defaultExampleRunsToFinishedWithoutFreezingTheGui()
{
    setSteps(60);
    RunPanel* panel = m_window->runPanel();
    QSignalSpy finished(panel, &RunPanel::runFinished);
    QSignalSpy progress(panel, &RunPanel::progressShown);

    // Probe the event loop every 10 ms; the worst gap is how long the GUI froze.
    QElapsedTimer sinceLast;
    qint64 worstGapMs = 0;
    QTimer probe;
    probe.setInterval(10);
    connect(&probe, &QTimer::timeout, this, [&] {
        worstGapMs = std::max(worstGapMs, sinceLast.restart());
    });
    bool shotTaken = false;
    connect(panel, &RunPanel::progressShown, this, [&](int step, int) {
        if (shotTaken || step < 30) return;
        shotTaken = true;
        // The editor's preflight is not shown beside a run in progress.
        QVERIFY(!panel->preflightLabel()->isVisible());
        // A picture of the real window mid-run, kept in the build tree.
        const QString path = QCoreApplication::applicationDirPath() + "/main-window-mid-run.png";
        QVERIFY(m_window->grab().save(path));
        qInfo("screenshot: %s", qPrintable(path));
        sinceLast.restart(); // the test's own grab and PNG encoding are not the app's work
    });

    // The plots keep their size when "Cannot start" appears and goes.
    QTest::qWait(20);
    const int plotHeight = panel->lossPlot()->height();
    m_window->document()->setValue("optim.lr", 0);
    QTRY_VERIFY(!panel->startButton()->isEnabled());
    QTest::qWait(20);
    QCOMPARE(panel->lossPlot()->height(), plotHeight);
    m_window->document()->setValue("optim.lr", 0.003);
    QTRY_VERIFY(panel->startButton()->isEnabled());

    QTest::mouseClick(panel->startButton(), Qt::LeftButton);
    QVERIFY(panel->isRunning());
    sinceLast.start();
    probe.start();
    const auto outcome = waitForEnd(finished);
    probe.stop();

    QCOMPARE(outcome.status, RunStatus::Finished);
    QCOMPARE(outcome.stepsDone, 60);
    QVERIFY(progress.count() >= 2);
    // ... and when the end-of-run summary (two lines) appears.
    QTest::qWait(20);
    QCOMPARE(panel->lossPlot()->height(), plotHeight);
    QVERIFY(shotTaken);
    QVERIFY(panel->preflightLabel()->isVisible()); // back for the next Start
    qInfo("worst event-loop gap during the run: %lld ms (%lld probes)", worstGapMs, qint64(progress.count()));
    QVERIFY2(worstGapMs <= 100, qPrintable(QString("GUI froze for %1 ms").arg(worstGapMs)));
    QVERIFY(panel->startButton()->isEnabled());

    // The planner's estimate beside the measured memory, and the error at the end.
    QVERIFY(panel->memoryPlot()->estimateCurve()->pointCount() > 0);
    // The lower plot shows any of the run's other scalars instead: every step's
    // learning rate (rising through the warmup), gradient norm, tokens/s, step time.
    auto* below = panel->lowerPlotBox();
    below->setCurrentIndex(below->findText("learning rate"));
    QVERIFY(panel->scalarPlot()->isVisible() && !panel->memoryPlot()->isVisible());
    const auto* lr = panel->scalarPlot()->curve(ScalarPlot::LearningRate);
    QCOMPARE(lr->pointCount(), std::int64_t(60));
    QVERIFY(lr->minValue() < lr->maxValue());
    QCOMPARE(panel->scalarPlot()->yAxis->label(), QString("learning rate"));
    QCOMPARE(panel->scalarPlot()->curve(ScalarPlot::TokensPerSecond)->pointCount(), std::int64_t(60));
    QVERIFY(panel->scalarPlot()->curve(ScalarPlot::GradNorm)->maxValue() > 0);
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/run-learning-rate.png"));
    // The system's samples (every 2 s, the first at the first step): stored
    // with the run, plotted here and offered in History's metric list.
    QVERIFY(panel->scalarPlot()->curve(ScalarPlot::CpuPercent)->pointCount() >= 2);
    QVERIFY(panel->scalarPlot()->curve(ScalarPlot::HostMemory)->minValue() > 10); // MiB
    below->setCurrentIndex(below->findText("CPU use (% of one core)"));
    QCOMPARE(panel->scalarPlot()->yAxis->label(), QString("CPU use (% of one core)"));
    {
        RunStore store(dbPath().toStdString(), RunStore::Mode::ReadOnly);
        const auto cpu = store.metrics(outcome.runId, SystemSampler::kCpuPercent);
        QCOMPARE(static_cast<std::int64_t>(cpu.size()), panel->scalarPlot()->curve(ScalarPlot::CpuPercent)->pointCount());
        QVERIFY(cpu.front().value > 0);
        QVERIFY(store.metrics(outcome.runId, SystemSampler::kHostRssBytes).front().value > 10e6);
    }
    // No GPU here: its metrics are listed, greyed out, with the reason (they offered an empty plot).
    {
        auto* items = qobject_cast<QStandardItemModel*>(below->model());
        QVERIFY(items);
        for (const char* gpu : {"GPU utilisation (%)", "GPU memory in use (MiB)", "GPU power (W)"}) {
            const int row = below->findText(gpu);
            QVERIFY2(row > 0, gpu);
            QVERIFY2(!items->item(row)->isEnabled(), gpu);
            QVERIFY(items->item(row)->toolTip().contains("no GPU samples"));
        }
        QVERIFY(items->item(below->findText("CPU use (% of one core)"))->isEnabled());
    }
    below->setCurrentIndex(0);
    QVERIFY(panel->memoryPlot()->isVisible() && !panel->scalarPlot()->isVisible());
    // The event log shows eight lines at least (it was four).
    const auto* log = panel->findChild<QPlainTextEdit*>("eventLog");
    QVERIFY(log);
    QVERIFY2(log->viewport()->height() >= 8 * log->fontMetrics().lineSpacing(),
             qPrintable(QString("event log %1 px, a line %2 px").arg(log->viewport()->height()).arg(log->fontMetrics().lineSpacing())));
    QVERIFY2(panel->statusLabel()->text().contains("Memory: peak"), qPrintable(panel->statusLabel()->text()));
    QVERIFY(outcome.estimatedPeakBytes > 0);

    RunStore store(dbPath().toStdString()); // the same store the CLI uses
    QCOMPARE(store.run(outcome.runId)->status, RunStatus::Finished);
    QCOMPARE(store.run(outcome.runId)->estimatedPeakBytes, std::optional<std::int64_t>(outcome.estimatedPeakBytes));
    QCOMPARE(store.metrics(outcome.runId, "loss").size(), std::size_t(60));

    // The Sample box generates from the finished run, off the GUI thread.
    SampleBox* sample = panel->sampleBox();
    QVERIFY(sample->isEnabled());
    sample->promptEdit()->setText("The ");
    QSignalSpy generated(sample, &SampleBox::generated);
    QTest::mouseClick(sample->generateButton(), Qt::LeftButton);
    QVERIFY(!sample->generateButton()->isEnabled()); // busy while the thread works
    QVERIFY(generated.wait(60000));
    const QString text = generated.first().first().toString();
    QVERIFY2(text.startsWith("The ") && text.size() > 4, qPrintable(text));
    QCOMPARE(sample->resultView()->toPlainText(), text);
    QVERIFY(sample->generateButton()->isEnabled());
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/main-window-sample.png"));
    // Another run's model: the box no longer shows this run's sample under the new heading.
    sample->setModel(outcome.config, QString::fromStdString(outcome.checkpoint), outcome.runId + 1);
    QVERIFY(sample->title().contains(QString::number(outcome.runId + 1)));
    QVERIFY2(sample->resultView()->toPlainText().isEmpty(), qPrintable(sample->resultView()->toPlainText()));
}

void TestRunPanel::stopMidRunCancelsWithCheckpoint()
{
    setSteps(2000);
    RunPanel* panel = m_window->runPanel();
    QSignalSpy finished(panel, &RunPanel::runFinished);
    QTest::mouseClick(panel->startButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(panel->currentRunId() > 0 && panel->statusLabel()->text().contains("Run"), 60000);
    QSignalSpy progress(panel, &RunPanel::progressShown);
    QVERIFY(progress.wait(60000));
    QElapsedTimer stopping;
    stopping.start();
    QTest::mouseClick(panel->stopButton(), Qt::LeftButton);
    const auto outcome = waitForEnd(finished, 60000);
    qInfo("stop took %lld ms", stopping.elapsed());
    QCOMPARE(outcome.status, RunStatus::Cancelled);
    QVERIFY(outcome.stepsDone > 0 && outcome.stepsDone < 2000);

    RunStore store(dbPath().toStdString());
    QCOMPARE(store.run(outcome.runId)->status, RunStatus::Cancelled);
    const auto checkpoint = store.latestCheckpoint(outcome.runId);
    QVERIFY(checkpoint.has_value());
    QCOMPARE(checkpoint->step, outcome.stepsDone);
    QVERIFY(panel->statusLabel()->text().contains("cancelled"));

    // After a restart, the Run tab names the stopped run and how to resume it.
    m_window.reset();
    m_window = std::make_unique<MainWindow>(dbPath());
    m_window->setAskBeforeClosing(false);
    m_window->openExample(":/examples/default.json");
    panel = m_window->runPanel();
    const QString hint = panel->statusLabel()->text();
    QVERIFY2(hint.contains(QString("Run %1 ").arg(outcome.runId)) && hint.contains("Resume"), qPrintable(hint));
    m_window->resize(1400, 900);
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/run-resume-hint.png"));

    // Resumed, it plots its whole history, not only the steps from the checkpoint on.
    QSignalSpy resumedEnd(panel, &RunPanel::runFinished);
    QSignalSpy resumedProgress(panel, &RunPanel::progressShown);
    panel->resume(outcome.runId);
    QVERIFY(resumedProgress.wait(60000));
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/run-resumed-history.png"));
    QCOMPARE(panel->lossPlot()->firstStep(), 1.0);
    QVERIFY2(panel->lossPlot()->trainingPointCount() > outcome.stepsDone,
             qPrintable(QString::number(panel->lossPlot()->trainingPointCount())));
    panel->stop();
    QCOMPARE(waitForEnd(resumedEnd, 60000).status, RunStatus::Cancelled);
    // Each step once: the history and the new steps do not overlap.
    const auto stored = RunStore(dbPath().toStdString(), RunStore::Mode::ReadOnly).metrics(outcome.runId, "loss");
    QVERIFY2(panel->lossPlot()->trainingPointCount() <= static_cast<std::int64_t>(stored.size()),
             qPrintable(QString("%1 points plotted, %2 stored").arg(panel->lossPlot()->trainingPointCount()).arg(stored.size())));
}

void TestRunPanel::vanishedDataFileFailsVisibly()
{
    const QString corpus = m_dir->filePath("corpus.txt");
    {
        QFile f(corpus);
        QVERIFY(f.open(QIODevice::WriteOnly));
        for (int i = 0; i < 200; ++i) f.write("the quick brown fox jumps over the lazy dog. ");
    }
    m_window->document()->loadText(QString(R"({"name": "vanishing", "device": "cpu",
        "data": {"source": "text", "path": "%1", "seq_len": 32},
        "train": {"batch_size": 8, "steps": 20}})").arg(corpus), "vanishing.json");
    QVERIFY(m_window->document()->isValid());
    QVERIFY(m_window->runPanel()->startButton()->isEnabled());
    QVERIFY(QFile::remove(corpus));

    RunPanel* panel = m_window->runPanel();
    QSignalSpy finished(panel, &RunPanel::runFinished);
    QTest::mouseClick(panel->startButton(), Qt::LeftButton);
    const auto outcome = waitForEnd(finished, 60000);
    QCOMPARE(outcome.status, RunStatus::Failed);
    QVERIFY(panel->statusLabel()->text().contains("cannot read " + corpus));
    QVERIFY(panel->logView()->toPlainText().contains("cannot read"));
    RunStore store(dbPath().toStdString());
    QCOMPARE(store.run(outcome.runId)->status, RunStatus::Failed);
    // The app stays usable: Start works again.
    QVERIFY(panel->startButton()->isEnabled());
}

void TestRunPanel::closingDuringARunStopsItCleanly()
{
    setSteps(2000);
    RunPanel* panel = m_window->runPanel();
    QSignalSpy progress(panel, &RunPanel::progressShown);
    QTest::mouseClick(panel->startButton(), Qt::LeftButton);
    QVERIFY(progress.wait(60000));
    const qint64 runId = panel->currentRunId();
    // The question is skipped here (setAskBeforeClosing(false)); the stop is not.
    QVERIFY(m_window->close());
    QVERIFY(!panel->isRunning());
    RunStore store(dbPath().toStdString());
    QCOMPARE(store.run(runId)->status, RunStatus::Cancelled);
    QVERIFY(store.latestCheckpoint(runId).has_value());
}

void TestRunPanel::lateStopNeverCancelsTheNextRun()
{
    RunConfig c;
    c.device = "cpu";
    c.model.nLayer = 1;
    c.model.dModel = 32;
    c.model.nHead = 2;
    c.data.seqLen = 16;
    c.train.batchSize = 4;
    c.train.steps = 3;
    c.train.threads = 1;
    c.data.source = "text";
    TrainingWorker worker;
    SessionOutcome outcome;
    connect(&worker, &TrainingWorker::finished, this, [&](const SessionOutcome& o) { outcome = o; });
    // A Stop with no run expected (one that arrived as the last run ended).
    worker.requestStop();
    worker.startNew(c, dbPath()); // runs here, on this thread
    QVERIFY2(outcome.status == RunStatus::Finished, outcome.message.c_str());
    QCOMPARE(outcome.stepsDone, 3);
    // A Stop for a run that is queued but not started yet still applies.
    worker.expectRun();
    worker.requestStop();
    worker.startNew(c, dbPath());
    QCOMPARE(outcome.status, RunStatus::Cancelled);
}

void TestRunPanel::runNamesAreShownAsPlainText()
{
    QString json = m_window->document()->text();
    json.replace(QRegularExpression("\"name\"\\s*:\\s*\"[^\"]*\""), "\"name\": \"<b>bold</b>\"");
    m_window->document()->setText(json);
    QVERIFY(m_window->runPanel()->startButton()->isEnabled());
    RunPanel* panel = m_window->runPanel();
    QSignalSpy finished(panel, &RunPanel::runFinished);
    QTest::mouseClick(panel->startButton(), Qt::LeftButton);
    int shown = 0;
    for (auto* label : m_window->findChildren<QLabel*>()) {
        if (!label->text().contains("<b>bold</b>")) continue;
        ++shown;
        QVERIFY2(label->textFormat() == Qt::PlainText, qPrintable(label->text()));
    }
    QVERIFY2(shown > 0, qPrintable(panel->statusLabel()->text()));
    // For a person to look at: the name must read literally, tags and all.
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/plain-text-name.png"));
    panel->stop();
    QVERIFY(waitForEnd(finished).status != RunStatus::Failed);
}

void TestRunPanel::lossPlotStaysBoundedAndKeepsSpikes()
{
    LossPlot plot;
    plot.resize(800, 400);
    // 200,000 steps of a flat loss with one spike: what is drawn stays
    // bounded, and the spike is still drawn at its full height.
    for (int start = 0; start < 200000; start += 1000) {
        QVector<double> steps(1000), losses(1000, 1.0);
        for (int i = 0; i < 1000; ++i) {
            steps[i] = start + i + 1;
            if (start + i + 1 == 123457) losses[i] = 50.0;
        }
        plot.appendTraining(steps, losses);
    }
    QCOMPARE(plot.trainingPointCount(), std::int64_t(200000));
    QVERIFY2(plot.drawnPointCount() <= 2 * 2 * BucketedCurve::kMaxBuckets,
             qPrintable(QString::number(plot.drawnPointCount())));
    double highest = 0;
    for (auto it = plot.graph(0)->data()->constBegin(); it != plot.graph(0)->data()->constEnd(); ++it) {
        highest = std::max(highest, it->value);
    }
    QCOMPARE(highest, 50.0);
    plot.fitToData();
    QVERIFY(plot.yAxis->range().upper >= 50.0);
    // The last step is on the axis, with room for a dot drawn there.
    QVERIFY(plot.xAxis->range().upper > 200000.0 && plot.xAxis->range().upper <= 202000.0);
}

// Smoothing that fits the run, whole-number step ticks, validation dots drawn
// whole at the ends, and one step axis for the loss and memory plots.
void TestRunPanel::plotsReadRight()
{
    LossPlot loss;
    MemoryPlot memory;
    loss.resize(800, 300);
    memory.resize(800, 200);
    loss.shareKeyRangeWith(&memory);
    // A 60-step run whose loss falls fast, as the default example's does.
    QVector<double> steps, losses, mib;
    for (int i = 1; i <= 60; ++i) {
        steps << i;
        losses << 1.0 + 4.0 * std::exp(-i / 12.0);
        mib << 30.0;
    }
    loss.setRunLength(60);
    loss.appendTraining(steps, losses);
    loss.appendValidation({0.0, 60.0}, {5.0, losses.back()});
    memory.append(steps, mib, mib);
    const double lag = loss.lastSmoothed() - losses.back();
    QVERIFY2(lag >= 0 && lag < 0.05, qPrintable(QString("the smoothed loss lags by %1 nat").arg(lag)));
    // A long run keeps the chosen factor.
    loss.setRunLength(100000);
    QCOMPARE(loss.effectiveSmoothing(), 0.9);
    loss.setRunLength(60);
    loss.fitToData();
    memory.fitToData();
    // Validation at steps 0 and 60: both dots inside the axis, not on its edge.
    QVERIFY(loss.xAxis->range().lower < 0.0 && loss.xAxis->range().upper > 60.0);
    // The memory plot (steps 1-60) spans the same steps as the loss plot (0-60).
    QCOMPARE(memory.xAxis->range().lower, loss.xAxis->range().lower);
    QCOMPARE(memory.xAxis->range().upper, loss.xAxis->range().upper);
    // A flat memory curve (30 MiB every step) is drawn below the top frame,
    // not on it: the zero-based axis has its margin above the curve.
    QVERIFY2(memory.yAxis->range().lower == 0.0 && memory.yAxis->range().upper >= 31.0,
             qPrintable(QString("%1..%2").arg(memory.yAxis->range().lower).arg(memory.yAxis->range().upper)));
    // Cleared for a new run, neither plot keeps this run's steps on its axes.
    {
        LossPlot next;
        MemoryPlot nextMemory;
        next.setRunLength(60);
        next.appendTraining(steps, losses);
        nextMemory.append(steps, mib, mib);
        next.fitToData();
        nextMemory.fitToData();
        QVERIFY(next.xAxis->range().upper > 60.0 && nextMemory.xAxis->range().upper > 60.0);
        next.clear();
        nextMemory.clear();
        QVERIFY2(next.xAxis->range().upper <= 1.0, qPrintable(QString::number(next.xAxis->range().upper)));
        QVERIFY(nextMemory.xAxis->range().upper <= 1.0 && nextMemory.yAxis->range().upper <= 1.0);
    }
    // Zoomed in to three steps, and over spans where QCustomPlot's readable
    // step is 2.5 x 10^k (the tour saw "3" at step 2.5), the ticks stay on
    // whole steps.
    for (QCPAxis* axis : {loss.xAxis, memory.xAxis}) {
        for (const auto& [lower, upper] : {std::pair{0.2, 3.1}, {0.0, 20.0}, {-1.0, 21.0}, {0.0, 12.0}, {0.0, 60.0},
                                           {0.0, 130.0}, {0.0, 2500.0}, {5.0, 9.0}}) {
            axis->setRange(lower, upper);
            QVector<double> ticks;
            axis->ticker()->generate(axis->range(), QLocale(), 'f', 0, ticks, nullptr, nullptr);
            QVERIFY(!ticks.isEmpty());
            for (double t : ticks)
                QVERIFY2(t == std::round(t), qPrintable(QString("tick %1 on %2..%3").arg(t).arg(lower).arg(upper)));
        }
    }
}

// A remote view assembles steps from the follow's (step, key) records. A step
// split across two reads of the store (a store written before a step's values
// were committed together: loss .. tokens_per_s in one, step_ms and memory in
// the next) once became two points of one step; tst_remote_gui saw 3013
// points for 3000 steps.
void TestRunPanel::followedStepsReachThePlotOnce()
{
    StepAssembler a;
    std::vector<StepMetrics> out;
    const auto feed = [&](int step, const char* key, double value) {
        for (const auto& s : a.add(step, key, value)) out.push_back(s);
    };
    for (const char* key : {"grad_norm", "loss", "lr", "tokens_per_s"}) feed(1, key, 1.0);
    QCOMPARE(out.size(), std::size_t(1)); // handed over at its last key, without waiting for step 2
    for (const char* key : {"mem_current_bytes", "mem_peak_bytes", "step_ms"}) feed(1, key, 2.0);
    for (const char* key : {"grad_norm", "loss", "lr", "mem_current_bytes", "mem_peak_bytes", "step_ms", "tokens_per_s"}) feed(2, key, 3.0);
    feed(3, "loss", 4.0); // the stream ends mid-step
    if (auto last = a.finish()) out.push_back(*last);
    std::vector<int> steps;
    for (const auto& s : out) steps.push_back(s.step);
    QCOMPARE(steps, (std::vector<int>{1, 2, 3}));
    QCOMPARE(out[1].memPeakBytes, std::int64_t(3));
    QCOMPARE(out[2].loss, 4.0);
    QVERIFY(!a.finish());
}

// The tour's high finding: sampling a model without a tokenizer answers in
// ids, one unbroken line; its label widened the window to 4264 px and
// squeezed the Experiment dock to about 130 px, and the squeeze was saved and
// came back at every start.
void TestRunPanel::longAnswerKeepsTheWindowAndASqueezedLayoutIsRepaired()
{
    auto* sample = m_window->findChild<SampleBox*>();
    auto* dock = m_window->findChild<QDockWidget*>("ExperimentDock");
    QVERIFY(sample && dock);
    QCoreApplication::processEvents();
    const int width = m_window->width();
    QStringList ids;
    for (int i = 0; i < 1500; ++i) ids << QString::number(10000 + i);
    sample->showResult(ids.join(','), false);
    QTest::qWait(100);
    QCOMPARE(m_window->width(), width);
    QVERIFY2(dock->width() >= 300, qPrintable(QString::number(dock->width())));
    QVERIFY(sample->resultView()->toPlainText().endsWith("11499"));
    // A layout saved with the dock squeezed is repaired at the next start.
    m_window->resizeDocks({dock}, {120}, Qt::Horizontal);
    QTRY_VERIFY2(dock->width() < 300, qPrintable(QString::number(dock->width())));
    QVERIFY(m_window->close()); // saves the layout
    m_window = std::make_unique<MainWindow>(dbPath());
    m_window->setAskBeforeClosing(false);
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
    auto* restored = m_window->findChild<QDockWidget*>("ExperimentDock");
    QTRY_VERIFY2(restored->width() >= 300, qPrintable(QString::number(restored->width())));
    QVERIFY(m_window->statusBar()->currentMessage().contains("Experiment"));
    QVERIFY(m_window->close()); // a repaired layout is what the next start finds
}

// At 1280x720 the Run tab's plots were about 100 px each, their legends
// covered the curves and the memory axis title was cut off.
void TestRunPanel::runTabIsUsableAt1280x720()
{
    m_window->resize(1280, 720);
    QTest::qWait(100);
    QVERIFY2(m_window->minimumSizeHint().height() <= 720 && m_window->height() <= 720,
             qPrintable(QString("window %1 px tall, at least %2").arg(m_window->height()).arg(m_window->minimumSizeHint().height())));
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/main-window-1280x720.png"));
    RunPanel* panel = m_window->runPanel();
    for (MetricPlot* plot : std::initializer_list<MetricPlot*>{panel->lossPlot(), panel->memoryPlot()}) {
        plot->replot();
        QVERIFY2(plot->height() >= 160, qPrintable(QString("%1: %2 px").arg(plot->yAxis->label()).arg(plot->height())));
        QVERIFY2(!plot->legend->outerRect().intersects(plot->axisRect()->rect()), qPrintable(plot->yAxis->label()));
        // The axis title fits beside the axis.
        QVERIFY2(QFontMetrics(plot->yAxis->labelFont()).horizontalAdvance(plot->yAxis->label()) <= plot->axisRect()->height(),
                 qPrintable(QString("%1: %2 px beside an axis of %3 px (plot %4 px)")
                                .arg(plot->yAxis->label())
                                .arg(QFontMetrics(plot->yAxis->labelFont()).horizontalAdvance(plot->yAxis->label()))
                                .arg(plot->axisRect()->height())
                                .arg(plot->height())));
    }
}

// CPU use and resident memory at once, then not again until the interval
// has passed (a run's steps ask at every step).
void TestRunPanel::systemSamplerSamplesEveryInterval()
{
    SystemSampler sampler(-1, std::chrono::milliseconds(200));
    const auto first = sampler.sampleIfDue();
    QCOMPARE(first.size(), std::size_t(2));
    QCOMPARE(first[0].first, std::string(SystemSampler::kCpuPercent));
    QCOMPARE(first[1].first, std::string(SystemSampler::kHostRssBytes));
    QVERIFY(first[1].second > 10e6);
    QVERIFY(sampler.sampleIfDue().empty());
    // Busy for 250 ms: one core's worth of CPU time, about 100%.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
    volatile double x = 0;
    while (std::chrono::steady_clock::now() < until) x = x + 1.0;
    const auto next = sampler.sampleIfDue();
    QCOMPARE(next.size(), std::size_t(2));
    QVERIFY2(next[0].second > 50 && next[0].second < 400, qPrintable(QString::number(next[0].second)));
}

QTEST_MAIN(TestRunPanel)
#include "tst_run_panel.moc"
