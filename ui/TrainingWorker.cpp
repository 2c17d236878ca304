#include "TrainingWorker.h"

namespace tb::ui {

template <typename T>
void TrainingWorker::push(std::vector<T> PendingProgress::*list, const T& item)
{
    bool wasEmpty;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        wasEmpty = m_pending.empty();
        (m_pending.*list).push_back(item);
    }
    // One signal per batch: the GUI drains everything when it gets to it.
    if (wasEmpty) Q_EMIT progressAvailable();
}

PendingProgress TrainingWorker::takePending()
{
    std::lock_guard<std::mutex> lock(m_mutex);
    PendingProgress taken = std::move(m_pending);
    m_pending = {};
    return taken;
}

void TrainingWorker::expectRun()
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_expectingRun = true;
}

void TrainingWorker::requestStop()
{
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_expectingRun) return;
    m_stopRequested = true;
    if (m_session) m_session->requestCancel();
}

void TrainingWorker::endExpectedRun()
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_expectingRun = false;
    m_stopRequested = false;
}

void TrainingWorker::startNew(const RunConfig& config, const QString& dbPath, bool force)
{
    expectRun();
    SessionOptions options;
    options.dbPath = dbPath.toStdString();
    options.force = force;
    std::unique_ptr<RunSession> session;
    try {
        session = std::make_unique<RunSession>(config, options);
    } catch (const PreflightError& e) {
        endExpectedRun();
        std::string text;
        for (const auto& f : e.findings()) {
            if (f.severity == Severity::Error) text += findingText(f);
        }
        Q_EMIT refusedByPreflight(QString::fromStdString(text).trimmed());
        return;
    } catch (const std::exception& e) {
        endExpectedRun();
        Q_EMIT refused(QString::fromStdString(e.what()));
        return;
    }
    runSession(*session);
}

void TrainingWorker::resumeRun(qint64 runId, const QString& dbPath)
{
    expectRun();
    SessionOptions options;
    options.dbPath = dbPath.toStdString();
    std::unique_ptr<RunSession> session;
    try {
        session = RunSession::resume(runId, options);
    } catch (const std::exception& e) {
        endExpectedRun();
        Q_EMIT refused(QString::fromStdString(e.what()));
        return;
    }
    runSession(*session);
}

void TrainingWorker::runSession(RunSession& session)
{
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_session = &session;
        if (m_stopRequested) session.requestCancel();
        m_stopRequested = false;
    }
    SessionCallbacks callbacks;
    callbacks.onStarted = [this, &session](std::int64_t runId, const std::string& description) {
        const auto& estimate = session.estimate();
        Q_EMIT started(runId, QString::fromStdString(description), estimate ? estimate->probePeakBytes() : 0);
    };
    callbacks.onStep = [this](const StepMetrics& s) { push(&PendingProgress::steps, s); };
    callbacks.onEval = [this](const EvalMetrics& e) { push(&PendingProgress::evals, e); };
    callbacks.onEvent = [this](const TrainerEvent& e) { push(&PendingProgress::events, e); };
    SessionOutcome outcome;
    try {
        outcome = session.run(callbacks);
    } catch (const std::exception& e) {
        outcome.status = RunStatus::Failed;
        outcome.runId = session.runId();
        outcome.message = e.what();
    }
    {
        // A Stop that arrives as the session ends must not cancel the next run.
        std::lock_guard<std::mutex> lock(m_mutex);
        m_session = nullptr;
        m_stopRequested = false;
        m_expectingRun = false;
    }
    Q_EMIT finished(outcome);
}

} // namespace tb::ui
