#pragma once
// Runs a RunSession in its own QThread (worker-object pattern). The training
// thread only appends to a pending batch under a mutex; one queued signal
// tells the GUI there is something to take, however fast steps arrive.

#include <QObject>
#include <QString>

#include <mutex>
#include <vector>

#include "run/RunSession.h"

namespace tb::ui {

struct PendingProgress {
    std::vector<StepMetrics> steps;
    std::vector<EvalMetrics> evals;
    std::vector<TrainerEvent> events;
    bool empty() const { return steps.empty() && evals.empty() && events.empty(); }
};

class TrainingWorker final : public QObject {
    Q_OBJECT

public:
    TrainingWorker() = default;
    // Thread-safe: everything reported since the last call.
    PendingProgress takePending();
    // Thread-safe: a run is about to be queued (startNew/resumeRun); a Stop
    // from now until it ends applies to it.
    void expectRun();
    // Thread-safe: the run stops after the step in progress and checkpoints.
    // Ignored when no run is expected or running, so a late Stop never
    // cancels the next run.
    void requestStop();

    // Run in the worker's thread (invoke through QMetaObject::invokeMethod).
    // force: launch past preflight errors (the user confirmed; recorded with the run).
    void startNew(const RunConfig& config, const QString& dbPath, bool force = false);
    void resumeRun(qint64 runId, const QString& dbPath);

Q_SIGNALS:
    // estimatedPeakBytes: the memory planner's peak tensor bytes for the run (0: none).
    void started(qint64 runId, const QString& description, qint64 estimatedPeakBytes);
    void progressAvailable();
    void finished(const tb::SessionOutcome& outcome);
    // Input problems found before a run record exists (bad database, device...).
    void refused(const QString& message);
    // Preflight found errors; the text lists them. Nothing was stored.
    void refusedByPreflight(const QString& findings);

private:
    void runSession(RunSession& session);
    void endExpectedRun();
    template <typename T>
    void push(std::vector<T> PendingProgress::*list, const T& item);

    std::mutex m_mutex;
    PendingProgress m_pending;
    RunSession* m_session = nullptr; // guarded by m_mutex
    bool m_stopRequested = false;    // guarded by m_mutex
    bool m_expectingRun = false;     // guarded by m_mutex
};

} // namespace tb::ui

Q_DECLARE_METATYPE(tb::SessionOutcome)
