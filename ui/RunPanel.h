#pragma once
// The live view of a run: Start/Stop, progress with ETA, current loss and
// throughput, loss and memory plots, and the run's event log. Owns the
// training thread; the GUI thread never runs a step or a database write.

#include <QElapsedTimer>
#include <QTimer>
#include <QWidget>

#include <functional>
#include <optional>

#include "RemoteRunWorker.h"
#include "run/RunPace.h"
#include "TrainingWorker.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSlider;
class QThread;
class QVBoxLayout;

namespace tb::ui {

class LossPlot;
class MemoryPlot;
class ScalarPlot;
class SampleBox;

class RunPanel final : public QWidget {
    Q_OBJECT

public:
    explicit RunPanel(QWidget* parent = nullptr);
    ~RunPanel() override; // stops a run in progress and joins the thread

    // The config to start (empty while invalid, with the reason to show).
    void setConfig(const std::optional<RunConfig>& config, const QString& blockedReason);
    // The store runs go to. While idle, the status line names the newest
    // cancelled or interrupted run there, which Run > Resume continues.
    void setDatabasePath(const QString& path);
    QString databasePath() const { return m_dbPath; }

    bool isRunning() const { return m_running; }
    void start();
    // Starts past preflight errors (after the user confirmed).
    void startForced();
    // Preflight's verdict for a launch here, shown beside Start (level 0 ok, 1 warnings, 2 errors).
    void setPreflightVerdict(const QString& text, int level);
    QLabel* preflightLabel() const { return m_preflight; }
    // Asks whether to launch past preflight errors; a message box unless replaced (tests).
    void setOverrideQuestion(std::function<bool(const QString&)> ask) { m_askOverride = std::move(ask); }
    void stop();
    void resume(qint64 runId);
    // Watches a run on a saved host (or destination) again: its live view
    // from its first step. `localRunId` is its copy in the store, if any.
    void attach(const QString& host, qint64 remoteRunId);
    // The saved hosts offered beside Start (re-read from the host list).
    void reloadHosts();
    // Where Start launches: "" for this computer, else a saved host's name.
    QString selectedHost() const;
    void selectHost(const QString& name);
    // Whether the run shown runs on a host (closing the window leaves it running).
    bool isRemoteRun() const { return m_running && m_remoteActive; }
    // Stops watching a remote run (it goes on there).
    void detachRemote();
    // Starts 'trainbench-cli ARGS' in the background, one process per rank
    // (train --nproc N, or the resume of a data-parallel run), and shows its
    // run here as it trains: Stop stops every rank after its step. Closing
    // the window leaves the processes running. Returns the file their output
    // goes to ("" when they could not start; the status line says why).
    QString startProcesses(const QStringList& args, int processes, const QString& what);
    // Whether the run shown is one that startProcesses started.
    bool isProcessRun() const { return m_running && m_remoteActive && m_processRun; }
    QComboBox* hostBox() const { return m_hostBox; }
    // "send data": with a host selected, Start copies the config's local data
    // file there first (as train --send-data).
    QCheckBox* sendDataBox() const { return m_sendData; }
    // The link to the host of the run shown: "" (none), or e.g. "gpu: connected".
    QString linkText() const { return m_linkText; }
    // Blocks (processing events) until the run in progress has ended.
    void stopAndWait();

    QPushButton* startButton() const { return m_start; }
    QPushButton* stopButton() const { return m_stop; }
    QPlainTextEdit* logView() const { return m_log; }
    LossPlot* lossPlot() const { return m_lossPlot; }
    MemoryPlot* memoryPlot() const { return m_memoryPlot; }
    // The lower plot: tensor memory, or one of the run's other scalars (learning rate, gradient norm, ...).
    ScalarPlot* scalarPlot() const { return m_scalarPlot; }
    QComboBox* lowerPlotBox() const { return m_lowerPlot; }
    QLabel* statusLabel() const { return m_status; }
    SampleBox* sampleBox() const { return m_sample; }
    qint64 currentRunId() const { return m_runId; }

Q_SIGNALS:
    void runningChanged(bool running);
    void runStarted(qint64 runId);
    void runFinished(const tb::SessionOutcome& outcome);
    void progressShown(int step, int totalSteps);
    // The status-bar text of the link to a remote run's host ("" when none).
    void linkChanged(const QString& text);

private:
    // The widgets and worker threads (RunPanelLayout.cpp).
    void buildControls(QVBoxLayout* layout);
    QWidget* buildPlots();
    void startWorkers();
    void beginRun(const QString& what);
    void updateLowerPlotChoices(bool runEnded); // GPU metrics offered where the run sampled them
    void drainProgress();
    void onStarted(qint64 runId, const QString& description, qint64 estimatedPeakBytes);
    void onRemoteStarted(qint64 runId, qint64 remoteRunId, const QString& description, qint64 estimatedPeakBytes);
    void onLink(const QString& state, int downSeconds, const QString& said);
    void showLink();
    void onFinished(const tb::SessionOutcome& outcome);
    void onRefused(const QString& message);
    void onRefusedByPreflight(const QString& findings);
    void appendLog(const QString& severity, const QString& message);
    void setRunning(bool running);
    void updateStartButton();
    void showResumeHint();
    void setStatus(const QString& text);
    // A resumed run's stored history (up to its checkpoint), plotted before its new steps.
    void plotHistory(qint64 runId);

    QThread* m_thread = nullptr;
    TrainingWorker* m_worker = nullptr;
    QThread* m_remoteThread = nullptr;
    RemoteRunWorker* m_remote = nullptr;
    bool m_remoteActive = false; // the run shown is m_remote's
    bool m_processRun = false;   // ... and it trains here, in processes startProcesses started
    qint64 m_remoteRunId = 0;
    QString m_linkState;         // connecting | connected | reconnecting | lost | ""
    QString m_linkSaid;
    QElapsedTimer m_linkDown;
    QTimer m_linkTimer;          // counts "reconnecting for N s"
    QString m_linkText;
    QTimer m_drainTimer;
    QElapsedTimer m_elapsed;
    std::optional<RunConfig> m_config;
    QString m_blockedReason;
    QString m_dbPath;
    bool m_running = false;
    qint64 m_runId = 0;
    tb::RunPace m_pace;
    bool m_resuming = false;
    int m_historyUntil = -1; // steps up to this one came from the store, not the worker

    QPushButton* m_start;
    QPushButton* m_stop;
    QComboBox* m_hostBox;
    QCheckBox* m_sendData;
    QLabel* m_reason;
    QLabel* m_preflight;
    std::function<bool(const QString&)> m_askOverride;
    QProgressBar* m_progress;
    QLabel* m_loss;
    QLabel* m_rate;
    QLabel* m_time;
    QLabel* m_status;
    QSlider* m_smoothing;
    QCheckBox* m_logScale;
    LossPlot* m_lossPlot;
    MemoryPlot* m_memoryPlot;
    ScalarPlot* m_scalarPlot;
    QComboBox* m_lowerPlot;
    QPlainTextEdit* m_log;
    SampleBox* m_sample;
};

} // namespace tb::ui
