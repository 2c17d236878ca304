#pragma once
// Drives a run on a saved host, from its own QThread: launches it there over
// ssh (or attaches to one already running), follows it, and hands the Run
// panel the same progress a local run gives. The run lives on the host: this
// worker only watches, so closing the window leaves it running. A copy of the
// run is kept in the local store (History lists it, running on that host)
// and updated when it ends.

#include <QObject>
#include <QString>

#include <atomic>
#include <memory>
#include <mutex>

#include "StepAssembler.h"
#include "TrainingWorker.h"
#include "remote/HostBook.h"

namespace tb::remote {
class RemoteFollower;
struct FollowRecord;
}

namespace tb::ui {

class RemoteRunWorker final : public QObject {
    Q_OBJECT

public:
    RemoteRunWorker() = default;
    // Thread-safe: everything received since the last call.
    PendingProgress takePending();
    // Thread-safe: asks the host to stop the run after its current step (as
    // Ctrl-C does there); the follow then ends with "cancelled".
    void requestStop();
    // Thread-safe: stops watching; the run goes on on the host.
    void detach();
    QString hostLabel() const;

    // Run in the worker's thread. `dbPath`: the local store the copy goes to.
    // `sendData`: a local data file copied to the host first (as `train
    // --send-data`); the config then names the copy.
    void launch(const tb::remote::Host& host, const QString& configJson, const QString& dbPath, const QString& sendData = {});
    void attach(const tb::remote::Host& host, qint64 remoteRunId, const QString& dbPath);
    // Thread-safe, called on the GUI thread before watchProcesses is queued,
    // so that a Stop or a close in between reaches these processes: the
    // launcher's pid and what the panel calls them.
    void prepareProcesses(qint64 launcherPid, int processes);
    // A run that 'trainbench-cli train --nproc N' (prepared above, output in
    // `log`) trains here in the background: waits for its id in `runIdFile`,
    // written once the ranks have met, then follows it in the local store.
    // Stop asks the launcher, which passes it to every rank; closing the
    // window leaves the processes running. A rank 0 killed mid-run ends the
    // follow as interrupted (the store judges a run whose owner is gone).
    void watchProcesses(const QString& runIdFile, const QString& log, int processes, const QString& dbPath);

Q_SIGNALS:
    // runId: the local copy's id (0 if it could not be stored); remoteRunId: the id there.
    void started(qint64 runId, qint64 remoteRunId, const QString& description, qint64 estimatedPeakBytes);
    void progressAvailable();
    void finished(const tb::SessionOutcome& outcome);
    void refused(const QString& message);
    // "connected", "reconnecting" (down for `downSeconds`), "lost", or "" once it is over.
    void linkChanged(const QString& state, int downSeconds, const QString& said);

private:
    void follow(const tb::remote::Host& host, qint64 remoteRunId, const QString& dbPath);
    // One record of a follow, turned into the progress the panel plots.
    void handleRecord(const tb::remote::FollowRecord& record);
    // Copies the run into the local store; its local id, or 0 (the reason goes to the log).
    qint64 storeCopy(const tb::remote::Host& host, qint64 remoteRunId, const QString& dbPath, SessionOutcome* outcome);
    void pushEvent(const std::string& severity, const std::string& kind, const std::string& message);
    void pushStep(StepMetrics step);
    void pushEval(const EvalMetrics& eval);

    std::mutex m_mutex;
    PendingProgress m_pending;            // guarded by m_mutex
    tb::remote::RemoteFollower* m_follower = nullptr; // guarded by m_mutex
    tb::remote::Host m_host;              // guarded by m_mutex
    qint64 m_remoteRunId = 0;             // guarded by m_mutex
    std::atomic<bool> m_detached{false};
    // Stop or detach before the run started there (during the data upload).
    std::atomic<bool> m_cancelLaunch{false};
    std::atomic<int> m_uploadPid{0}; // the ssh client sending the data file, while it runs
    // watchProcesses: the launcher of the local processes (a pidfd: never a
    // reused pid), whether Stop was asked, and what the panel calls them.
    std::atomic<int> m_launcherFd{-1};
    std::atomic<bool> m_stopAsked{false};
    std::string m_localLabel; // guarded by m_mutex
    std::atomic<bool> m_stopWatching{false};
    void releaseLauncher();
    void cancelLaunch();
    // Steps assembled from their metric records (worker thread only).
    StepAssembler m_steps;
    EvalMetrics m_eval;
    int m_totalSteps = 0;
};

} // namespace tb::ui
