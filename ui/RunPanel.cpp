#include "common/Percent.h"
#include "PlainText.h"
#include "RunPanel.h"

#include <QStandardItemModel>
#include "CliProgram.h"

#include <QMessageBox>

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QDateTime>
#include <QEventLoop>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QTextDocument>
#include <QProgressBar>
#include <QPushButton>
#include <QSlider>
#include <QSplitter>
#include <QThread>
#include <QVBoxLayout>

#include <filesystem>

#include "LossPlot.h"
#include "SampleBox.h"
#include "Units.h"
#include "config/RunConfig.h"
#include "remote/HostBook.h"
#include "store/RunStore.h"

#include <algorithm>

namespace tb::ui {
namespace {

QString clock(double seconds)
{
    if (!(seconds >= 0) || seconds > 1e7) return QStringLiteral("–");
    const qint64 s = qRound64(seconds);
    return s >= 3600 ? QString("%1:%2:%3").arg(s / 3600).arg((s / 60) % 60, 2, 10, QChar('0')).arg(s % 60, 2, 10, QChar('0'))
                     : QString("%1:%2").arg(s / 60).arg(s % 60, 2, 10, QChar('0'));
}

} // namespace

RunPanel::RunPanel(QWidget* parent) : QWidget(parent)
{
    qRegisterMetaType<tb::SessionOutcome>();
    auto* layout = new QVBoxLayout(this);
    buildControls(layout);
    layout->addWidget(buildPlots(), 1);
    connect(m_start, &QPushButton::clicked, this, &RunPanel::start);
    connect(m_stop, &QPushButton::clicked, this, &RunPanel::stop);
    connect(m_smoothing, &QSlider::valueChanged, this, [this](int v) { m_lossPlot->setSmoothing(v / 100.0); });
    connect(m_logScale, &QCheckBox::toggled, m_lossPlot, &MetricPlot::setLogScale);

    startWorkers();
    m_linkTimer.setInterval(1000);
    connect(&m_linkTimer, &QTimer::timeout, this, &RunPanel::showLink);
    reloadHosts();
    updateStartButton();
}

RunPanel::~RunPanel()
{
    m_worker->requestStop();
    m_remote->detach(); // a run on a host goes on there
    m_thread->quit();
    m_remoteThread->quit();
    m_thread->wait();
    m_remoteThread->wait();
}

void RunPanel::reloadHosts()
{
    const QString current = selectedHost();
    m_hostBox->clear();
    m_hostBox->addItem(tr("This computer"), QString());
    try {
        const remote::HostBook book;
        for (const auto& h : book.hosts()) {
            m_hostBox->addItem(QString::fromStdString(h.name + "  (" + h.destination + ")"), QString::fromStdString(h.name));
        }
    } catch (const std::exception& e) {
        m_hostBox->setToolTip(QString::fromUtf8(e.what()));
    }
    selectHost(current);
}

QString RunPanel::selectedHost() const { return m_hostBox->currentData().toString(); }

void RunPanel::selectHost(const QString& name)
{
    const int at = m_hostBox->findData(name);
    m_hostBox->setCurrentIndex(at >= 0 ? at : 0);
}

void RunPanel::onLink(const QString& state, int downSeconds, const QString& said)
{
    if (state == "reconnecting" && m_linkState != "reconnecting") {
        m_linkDown.start();
        appendLog("warning", tr("Link to %1 lost%2; reconnecting").arg(m_remote->hostLabel(),
                                                                       said.isEmpty() ? QString() : " (" + said + ")"));
    }
    if (state == "connected" && m_linkState == "reconnecting") {
        appendLog("info", tr("Link to %1 back after %2 s").arg(m_remote->hostLabel()).arg(m_linkDown.elapsed() / 1000));
    }
    if (state == "lost") appendLog("error", tr("Link to %1 lost for %2 s; stopped watching (the run goes on there)")
                                                .arg(m_remote->hostLabel()).arg(downSeconds));
    m_linkState = state;
    m_linkSaid = said;
    if (state == "reconnecting") m_linkTimer.start();
    else m_linkTimer.stop();
    showLink();
}

void RunPanel::showLink()
{
    const QString host = m_remote->hostLabel();
    QString text;
    if (m_linkState == "connecting") text = tr("%1: connecting…").arg(host);
    else if (m_linkState == "connected") text = tr("%1: connected").arg(host);
    else if (m_linkState == "reconnecting") text = tr("%1: reconnecting for %2 s").arg(host).arg(m_linkDown.elapsed() / 1000);
    else if (m_linkState == "lost") text = tr("%1: link lost").arg(host);
    if (text == m_linkText) return;
    m_linkText = text;
    Q_EMIT linkChanged(text);
}

void RunPanel::detachRemote()
{
    if (isRemoteRun()) m_remote->detach();
}

void RunPanel::attach(const QString& host, qint64 remoteRunId)
{
    if (m_running) return;
    remote::Host target;
    try {
        target = remote::resolveHost(host.toStdString(), "", "", remote::HostBook());
    } catch (const std::exception& e) {
        setStatus(tr("Cannot attach: %1").arg(QString::fromUtf8(e.what())));
        return;
    }
    beginRun(tr("Attaching to run %1 on %2…").arg(remoteRunId).arg(host));
    m_remoteActive = true;
    const QString db = m_dbPath;
    QMetaObject::invokeMethod(m_remote, [worker = m_remote, target, remoteRunId, db] { worker->attach(target, remoteRunId, db); });
}

void RunPanel::setConfig(const std::optional<RunConfig>& config, const QString& blockedReason)
{
    m_config = config;
    m_blockedReason = blockedReason;
    updateStartButton();
}

void RunPanel::updateStartButton()
{
    m_start->setEnabled(!m_running && m_config.has_value());
    m_stop->setEnabled(m_running);
    if (!m_running) {
        m_stop->setText(tr("Stop"));
        m_stop->setToolTip(tr("Stop after the current step and save a checkpoint (Ctrl+.)"));
    }
    m_hostBox->setEnabled(!m_running);
    // Offered for a host and a config with a data file of its own.
    m_sendData->setVisible(!selectedHost().isEmpty());
    const bool hasData = m_config && m_config->data.source != "addition" && !resolvedDataPath(*m_config).empty();
    m_sendData->setEnabled(!m_running && hasData);
    if (!hasData) m_sendData->setChecked(false);
    const bool blocked = !m_running && !m_config.has_value();
    m_reason->setVisible(blocked);
    m_reason->setText(blocked ? tr("Cannot start: %1").arg(m_blockedReason) : QString());
    m_reason->setToolTip(m_reason->text());
}

void RunPanel::beginRun(const QString& what)
{
    m_lossPlot->clear();
    m_memoryPlot->clear();
    m_scalarPlot->clear();
    updateLowerPlotChoices(false);
    m_log->clear();
    m_pace.reset();
    m_resuming = false;
    m_historyUntil = -1;
    m_runId = 0;
    m_remoteActive = false;
    m_processRun = false;
    m_remoteRunId = 0;
    m_progress->setValue(0);
    m_progress->setFormat(tr("starting…"));
    setStatus(what);
    m_elapsed.start();
    setRunning(true);
    m_worker->expectRun();
}

void RunPanel::start()
{
    if (m_running || !m_config) return;
    if (const QString host = selectedHost(); !host.isEmpty()) {
        remote::Host target;
        try {
            target = remote::resolveHost(host.toStdString(), "", "", remote::HostBook());
        } catch (const std::exception& e) {
            setStatus(tr("Not started: %1").arg(QString::fromUtf8(e.what())));
            return;
        }
        QString data; // read before beginRun disables the box
        if (m_sendData->isEnabled() && m_sendData->isChecked()) {
            data = QString::fromStdString(std::filesystem::absolute(resolvedDataPath(*m_config)).lexically_normal().string());
        }
        beginRun(tr("Starting %1 on %2…").arg(QString::fromStdString(m_config->name), host));
        m_remoteActive = true;
        const QString json = QString::fromStdString(configToJson(*m_config));
        const QString db = m_dbPath;
        QMetaObject::invokeMethod(m_remote, [worker = m_remote, target, json, db, data] { worker->launch(target, json, db, data); });
        return;
    }
    beginRun(tr("Starting %1…").arg(QString::fromStdString(m_config->name)));
    const RunConfig config = *m_config;
    const QString db = m_dbPath;
    QMetaObject::invokeMethod(m_worker, [worker = m_worker, config, db] { worker->startNew(config, db); });
}

void RunPanel::startForced()
{
    if (m_running || !m_config) return;
    beginRun(tr("Starting %1 past preflight errors…").arg(QString::fromStdString(m_config->name)));
    const RunConfig config = *m_config;
    const QString db = m_dbPath;
    QMetaObject::invokeMethod(m_worker, [worker = m_worker, config, db] { worker->startNew(config, db, true); });
}

void RunPanel::setPreflightVerdict(const QString& text, int level)
{
    // Elided to leave the progress bar its room; the whole verdict is in the tooltip.
    m_preflight->setText(m_preflight->fontMetrics().elidedText(text, Qt::ElideRight, 420));
    m_preflight->setToolTip(text + tr("\nThe Diagnostics tab (Ctrl+4) lists every finding."));
    m_preflight->setStyleSheet(level >= 2 ? "color: #c0392b" : level == 1 ? "color: #b9770e" : "color: #1e8449");
}

void RunPanel::onRefusedByPreflight(const QString& findings)
{
    setRunning(false);
    m_progress->setFormat(tr("not started"));
    appendLog("warning", tr("Preflight found errors:\n%1").arg(findings));
    if (m_askOverride && m_askOverride(findings)) {
        startForced();
        return;
    }
    setStatus(tr("Not started: preflight found errors (see the Diagnostics tab)."));
}

QString RunPanel::startProcesses(const QStringList& args, int processes, const QString& what)
{
    if (m_running) return {};
    const QString cli = cliProgram();
    const QString folder = (m_dbPath.isEmpty() ? QString::fromStdString(RunStore::defaultPath()) : m_dbPath) + "-runs";
    QDir().mkpath(folder);
    const QString stem = folder + "/nproc-" + QDateTime::currentDateTime().toString("yyyyMMdd-hhmmss-zzz");
    const QString log = stem + ".log";
    const QString idFile = stem + ".id";
    QProcess launcher;
    launcher.setProgram(cli);
    launcher.setArguments(QStringList(args) << "--run-id-file" << idFile);
    launcher.setStandardOutputFile(log);
    launcher.setStandardErrorFile(log, QIODevice::Append);
    launcher.setStandardInputFile(QProcess::nullDevice());
    qint64 pid = 0;
    if (!launcher.startDetached(&pid)) {
        setStatus(tr("Not started: cannot start %1: %2").arg(cli, launcher.errorString()));
        return {};
    }
    beginRun(what);
    m_remoteActive = true;
    m_processRun = true;
    appendLog("info", tr("Started %1 processes (launcher pid %2); their output is in %3").arg(processes).arg(pid).arg(log));
    const QString db = m_dbPath;
    m_remote->prepareProcesses(pid, processes);
    QMetaObject::invokeMethod(m_remote, [worker = m_remote, idFile, log, processes, db] {
        worker->watchProcesses(idFile, log, processes, db);
    });
    return log;
}

void RunPanel::resume(qint64 runId)
{
    if (m_running) return;
    // A data-parallel run resumes in as many processes as it trained with.
    int world = 1;
    const QString store = m_dbPath.isEmpty() ? QString::fromStdString(RunStore::defaultPath()) : m_dbPath;
    try {
        if (const auto run = RunStore(store.toStdString(), RunStore::Mode::ReadOnly).run(runId)) world = run->worldSize();
    } catch (const std::exception&) {
        world = 1; // the session says what is wrong with the store
    }
    if (world > 1) {
        startProcesses({"resume", QString::number(runId), "--db", store}, world,
                       tr("Resuming run %1 on %2 processes…").arg(runId).arg(world));
        return;
    }
    beginRun(tr("Resuming run %1…").arg(runId));
    m_resuming = true;
    const QString db = m_dbPath;
    QMetaObject::invokeMethod(m_worker, [worker = m_worker, runId, db] { worker->resumeRun(runId, db); });
}

void RunPanel::setStatus(const QString& text)
{
    m_status->setText(text);
    m_status->setToolTip(text); // two lines shown; all of it here
}

void RunPanel::setDatabasePath(const QString& path)
{
    m_dbPath = path;
    showResumeHint();
}

void RunPanel::showResumeHint()
{
    if (m_running || m_dbPath.isEmpty()) return;
    std::optional<RunRecord> stopped;
    try {
        // Read-only: liveness is judged without writing, and nothing waits on a lock.
        stopped = RunStore(m_dbPath.toStdString(), RunStore::Mode::ReadOnly).latestStoppedRun();
    } catch (const std::exception&) {
        return; // a new or unreadable store: nothing to resume (opening it reports its own errors)
    }
    if (!stopped) return;
    setStatus(tr("Run %1 \"%2\" stopped (%3) at step %4 of %5; Run > Resume last stopped run continues it "
                 "from its last checkpoint.")
                  .arg(stopped->id)
                  .arg(QString::fromStdString(stopped->name), QString::fromStdString(runStatusName(stopped->status)))
                  .arg(stopped->stepsDone)
                  .arg(stopped->stepsTotal));
}

void RunPanel::plotHistory(qint64 runId)
{
    // Thinned as the History panel's overlays are (first and last point, each
    // bucket's low and high): bounded work on the GUI thread however long the
    // run, and the plots draw buckets of points anyway.
    constexpr int kBuckets = 2048;
    std::vector<MetricPoint> loss, val, current, peak;
    try {
        RunStore store(m_dbPath.toStdString(), RunStore::Mode::ReadOnly);
        loss = store.metricSeries(runId, "loss", kBuckets);
        val = store.metricSeries(runId, "val_loss", kBuckets);
        current = store.metricSeries(runId, "mem_current_bytes", kBuckets);
        peak = store.metricSeries(runId, "mem_peak_bytes", kBuckets);
    } catch (const std::exception& e) {
        appendLog("warning", tr("The run's earlier metrics could not be read: %1").arg(QString::fromUtf8(e.what())));
        return;
    }
    const auto series = [](const std::vector<MetricPoint>& points, double scale, QVector<double>& steps, QVector<double>& values) {
        for (const auto& p : points) {
            steps.push_back(p.step);
            values.push_back(p.value * scale);
        }
    };
    QVector<double> lossSteps, losses, valSteps, valLosses, currentSteps, currentMiB, peakSteps, peakMiB;
    series(loss, 1.0, lossSteps, losses);
    series(val, 1.0, valSteps, valLosses);
    series(current, 1.0 / 1048576.0, currentSteps, currentMiB);
    series(peak, 1.0 / 1048576.0, peakSteps, peakMiB);
    // The last stored step (kept by the thinning): later ones come from the worker.
    if (!loss.empty()) m_historyUntil = loss.back().step;
    m_lossPlot->appendTraining(lossSteps, losses);
    m_lossPlot->appendValidation(valSteps, valLosses);
    m_memoryPlot->appendThinned(currentSteps, currentMiB, peakSteps, peakMiB);
    for (int m = 0; m < ScalarPlot::kMetrics; ++m) {
        QVector<double> steps, values;
        try {
            RunStore store(m_dbPath.toStdString(), RunStore::Mode::ReadOnly);
            const auto metric = static_cast<ScalarPlot::Metric>(m);
            series(store.metricSeries(runId, ScalarPlot::key(metric), kBuckets), ScalarPlot::scale(metric), steps, values);
        } catch (const std::exception&) {
            continue; // the loss's read said what went wrong
        }
        m_scalarPlot->append(static_cast<ScalarPlot::Metric>(m), steps, values);
    }
    updateLowerPlotChoices(false);
    if (!loss.empty()) appendLog("info", tr("Plotted the run's first %1 steps from the store.").arg(m_historyUntil));
    m_lossPlot->followData();
    m_memoryPlot->followData();
    m_scalarPlot->followData();
}

void RunPanel::stop()
{
    if (!m_running) return;
    if (m_processRun) {
        // The launcher passes each SIGINT on once: the first stops every rank
        // after its step with a checkpoint, a second ends them at once (as a
        // second Ctrl-C does), for ranks that hang.
        const bool abort = m_stop->text() == tr("Abort");
        m_remote->requestStop();
        if (abort) {
            m_stop->setEnabled(false);
            setStatus(tr("Ending the %1 at once…").arg(m_remote->hostLabel()));
            return;
        }
        m_stop->setText(tr("Abort"));
        m_stop->setToolTip(tr("End the processes at once, without waiting for their step (no new checkpoint)"));
        setStatus(tr("Stopping the %1 after the current step… (Abort ends them at once)").arg(m_remote->hostLabel()));
        return;
    }
    if (m_remoteActive) {
        m_remote->requestStop();
        m_stop->setEnabled(false);
        setStatus(tr("Asking %1 to stop the run after its current step…").arg(m_remote->hostLabel()));
        return;
    }
    m_worker->requestStop(); // an atomic flag: the worker's busy loop never drains a queue
    m_stop->setEnabled(false);
    setStatus(tr("Stopping after the current step…"));
}

void RunPanel::stopAndWait()
{
    if (!m_running) return;
    QEventLoop loop;
    connect(this, &RunPanel::runningChanged, &loop, [&loop](bool running) {
        if (!running) loop.quit();
    });
    stop();
    loop.exec();
}

void RunPanel::onStarted(qint64 runId, const QString& description, qint64 estimatedPeakBytes)
{
    m_runId = runId;
    m_memoryPlot->setEstimate(static_cast<double>(estimatedPeakBytes) / 1048576.0);
    // The session has dropped the metrics past the checkpoint: what is left is
    // the history this resume continues.
    if (m_resuming) plotHistory(runId);
    setStatus(tr("Run %1: %2").arg(runId).arg(description));
    Q_EMIT runStarted(runId);
}

void RunPanel::onRemoteStarted(qint64 runId, qint64 remoteRunId, const QString& description, qint64 estimatedPeakBytes)
{
    m_runId = runId;
    m_remoteRunId = remoteRunId;
    m_memoryPlot->setEstimate(static_cast<double>(estimatedPeakBytes) / 1048576.0);
    if (m_processRun) {
        setStatus(tr("Run %1 %2.").arg(runId).arg(description));
        appendLog("info", tr("Following run %1 %2 (rank 0 reports; rank K's output is in rank-K.log beside the run)")
                              .arg(runId).arg(description));
        Q_EMIT runStarted(runId);
        return;
    }
    setStatus(runId > 0 ? tr("Run %1 %2; History lists it as run %3 here.").arg(remoteRunId).arg(description).arg(runId)
                        : tr("Run %1 %2.").arg(remoteRunId).arg(description));
    appendLog("info", tr("Following run %1 %2").arg(remoteRunId).arg(description));
    if (runId > 0) Q_EMIT runStarted(runId);
}

void RunPanel::drainProgress()
{
    PendingProgress batch = m_remoteActive ? m_remote->takePending() : m_worker->takePending();
    // Steps the history already plotted (the store may hold the first new ones).
    const auto plotted = [this](const auto& p) { return p.step <= m_historyUntil; };
    batch.steps.erase(std::remove_if(batch.steps.begin(), batch.steps.end(), plotted), batch.steps.end());
    batch.evals.erase(std::remove_if(batch.evals.begin(), batch.evals.end(), plotted), batch.evals.end());
    if (!batch.steps.empty()) {
        QVector<double> steps, losses, current, peak, lr, gradNorm, rate, stepMs;
        for (const auto& s : batch.steps) {
            steps.push_back(s.step);
            losses.push_back(s.loss);
            current.push_back(s.memCurrentBytes / 1048576.0);
            peak.push_back(s.memPeakBytes / 1048576.0);
            lr.push_back(s.lr);
            gradNorm.push_back(s.gradNorm);
            rate.push_back(s.tokensPerSecond);
            stepMs.push_back(s.stepMs);
        }
        m_lossPlot->setRunLength(batch.steps.back().totalSteps);
        m_lossPlot->appendTraining(steps, losses);
        m_memoryPlot->append(steps, current, peak);
        m_scalarPlot->append(ScalarPlot::LearningRate, steps, lr);
        m_scalarPlot->append(ScalarPlot::GradNorm, steps, gradNorm);
        m_scalarPlot->append(ScalarPlot::TokensPerSecond, steps, rate);
        m_scalarPlot->append(ScalarPlot::StepMs, steps, stepMs);
        // The system's samples, every few seconds.
        for (const auto& s : batch.steps) {
            for (const auto& [key, value] : s.system) {
                ScalarPlot::Metric metric;
                if (ScalarPlot::fromKey(key, metric)) m_scalarPlot->append(metric, {double(s.step)}, {value * ScalarPlot::scale(metric)});
            }
        }
        updateLowerPlotChoices(false);
        const StepMetrics& last = batch.steps.back();
        const double elapsed = m_elapsed.elapsed() / 1000.0;
        m_pace.observe(batch.steps.front().step, last.totalSteps, elapsed);
        m_pace.observe(last.step, last.totalSteps, elapsed);
        m_progress->setMaximum(last.totalSteps);
        m_progress->setValue(last.step);
        m_progress->setFormat(tr("step %1 / %2  (%p%)").arg(last.step).arg(last.totalSteps));
        m_loss->setText(tr("loss %1").arg(last.loss, 0, 'f', 4));
        m_rate->setText(tr("%1 tokens/s").arg(last.tokensPerSecond, 0, 'f', 0));
        m_time->setText(tr("elapsed %1 · ETA %2").arg(clock(elapsed), clock(m_pace.etaSeconds())));
        Q_EMIT progressShown(last.step, last.totalSteps);
    }
    if (!batch.evals.empty()) {
        QVector<double> steps, losses;
        for (const auto& e : batch.evals) {
            steps.push_back(e.step);
            losses.push_back(e.valLoss);
        }
        m_lossPlot->appendValidation(steps, losses);
    }
    for (const auto& e : batch.events) appendLog(QString::fromStdString(e.severity), QString::fromStdString(e.message));
    m_lossPlot->followData();
    m_memoryPlot->followData();
    m_scalarPlot->followData();
}

void RunPanel::onFinished(const tb::SessionOutcome& outcome)
{
    drainProgress();
    if (m_remoteActive && outcome.status == RunStatus::Running) {
        // Stopped watching (window closing, link lost, or refused): the run
        // goes on on the host, or in the processes started here.
        const QString message = QString::fromStdString(outcome.message);
        const QString host = m_remote->hostLabel();
        const QString text = !m_processRun ? tr("Stopped watching run %1 on %2: %3").arg(m_remoteRunId).arg(host, message)
            : outcome.runId > 0            ? tr("Stopped watching run %1: %2").arg(outcome.runId).arg(message)
                                           : tr("Stopped watching: %1").arg(message);
        setStatus(text);
        appendLog("warning", text);
        m_progress->setFormat(m_processRun ? tr("running (%1)").arg(host) : tr("running on %1").arg(host));
        setRunning(false);
        Q_EMIT runFinished(outcome);
        return;
    }
    const QString status = QString::fromStdString(runStatusName(outcome.status));
    QString text = m_processRun
        ? tr("Run %1 on %2 %3 after %4 of %5 steps").arg(outcome.runId).arg(m_remote->hostLabel(), status)
              .arg(outcome.stepsDone).arg(outcome.totalSteps)
        : m_remoteActive
        ? tr("Run %1 on %2 (run %3 here) %4 after %5 of %6 steps").arg(m_remoteRunId).arg(m_remote->hostLabel())
              .arg(outcome.runId).arg(status).arg(outcome.stepsDone).arg(outcome.totalSteps)
        : tr("Run %1 %2 after %3 of %4 steps").arg(outcome.runId).arg(status).arg(outcome.stepsDone).arg(outcome.totalSteps);
    if (outcome.stepsDone > 0) text += tr(", loss %1").arg(outcome.finalLoss, 0, 'f', 4);
    if (outcome.finalValLoss >= 0) text += tr(", validation loss %1").arg(outcome.finalValLoss, 0, 'f', 4);
    if (const auto error = outcome.estimateError()) {
        const QString during = outcome.measuredPeakPhase.empty()
            ? QString()
            : tr(" (during %1)").arg(QString::fromStdString(outcome.measuredPeakPhase));
        text += tr(".\nMemory: peak %1 measured%2, estimate %3 (%4)")
                    .arg(bytesText(outcome.measuredPeakBytes), during, bytesText(outcome.estimatedPeakBytes),
                         QString::fromStdString(signedPercentText(*error)));
    }
    if (outcome.status == RunStatus::Failed) {
        text += tr(".\nError: %1").arg(QString::fromStdString(outcome.message));
        // The explanation, primary finding first (also in the Diagnostics tab).
        if (!outcome.failureFindings.empty() && outcome.failureFindings.front().kind != "unknown") {
            const auto& f = outcome.failureFindings.front();
            text += tr("\nCause: %1\nFix: %2").arg(QString::fromStdString(f.cause), QString::fromStdString(f.fix));
        }
    }
    else if (outcome.status == RunStatus::Cancelled && m_remoteActive && !m_processRun) text += tr(". Checkpoint saved on the host.");
    else if (outcome.status == RunStatus::Cancelled) text += tr(". Checkpoint saved; Run ▸ Resume continues it.");
    setStatus(text);
    m_progress->setFormat(status);
    appendLog(outcome.status == RunStatus::Failed ? "error" : "info", text);
    if (!outcome.checkpoint.empty()) {
        m_sample->setModel(outcome.config, QString::fromStdString(outcome.checkpoint), outcome.runId);
    }
    setRunning(false);
    Q_EMIT runFinished(outcome);
}

void RunPanel::onRefused(const QString& message)
{
    setStatus(tr("Not started: %1").arg(message));
    m_progress->setFormat(tr("not started"));
    appendLog("error", message);
    setRunning(false);
    SessionOutcome outcome;
    outcome.status = RunStatus::Failed;
    outcome.message = message.toStdString();
    Q_EMIT runFinished(outcome);
}

void RunPanel::appendLog(const QString& severity, const QString& message)
{
    const QString time = QDateTime::currentDateTime().toString("HH:mm:ss");
    m_log->appendPlainText(QString("%1  %2  %3").arg(time, severity.leftJustified(7), message));
}

void RunPanel::updateLowerPlotChoices(bool runEnded)
{
    // The GPU's metrics are offered once the run has a sample of them: a run
    // on the CPU has none (its plot would be empty).
    auto* items = qobject_cast<QStandardItemModel*>(m_lowerPlot->model());
    if (!items) return;
    for (const auto metric : {ScalarPlot::GpuUtil, ScalarPlot::GpuMemory, ScalarPlot::GpuPower}) {
        const int row = m_lowerPlot->findData(static_cast<int>(metric));
        if (row < 0) continue;
        const bool sampled = !m_scalarPlot->curve(metric)->empty();
        auto* item = items->item(row);
        item->setEnabled(sampled);
        item->setToolTip(sampled ? QString() : tr("This run has no GPU samples: it runs on the CPU, or the driver reports none"));
        if (!sampled && runEnded && m_lowerPlot->currentIndex() == row) m_lowerPlot->setCurrentIndex(0);
    }
}

void RunPanel::setRunning(bool running)
{
    m_running = running;
    if (!running) updateLowerPlotChoices(true);
    updateStartButton();
    // Preflight judges the editor's config for the next Start; beside a run
    // in progress (a resume of another config, or an edited one) it would
    // read as a verdict on the run shown.
    m_preflight->setVisible(!running);
    Q_EMIT runningChanged(running);
}

} // namespace tb::ui
