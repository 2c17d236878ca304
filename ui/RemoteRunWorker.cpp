#include "RemoteRunWorker.h"

#include <QFile>

#include <cerrno>
#include <chrono>
#include <regex>
#include <thread>

#include <csignal>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/Errors.h"
#include "config/RunConfig.h"
#include "remote/RemoteFollow.h"
#include "remote/StoreFollow.h"
#include "remote/SendData.h"
#include "remote/Ssh.h"
#include "store/RunBundle.h"
#include "store/RunStore.h"

namespace tb::ui {

PendingProgress RemoteRunWorker::takePending()
{
    std::lock_guard<std::mutex> lock(m_mutex);
    PendingProgress taken = std::move(m_pending);
    m_pending = {};
    return taken;
}

QString RemoteRunWorker::hostLabel() const
{
    auto* self = const_cast<RemoteRunWorker*>(this);
    std::lock_guard<std::mutex> lock(self->m_mutex);
    return QString::fromStdString(m_localLabel.empty() ? m_host.label() : m_localLabel);
}

void RemoteRunWorker::requestStop()
{
    if (const int launcher = m_launcherFd.load(); launcher >= 0) {
        // The launcher passes one SIGINT to every rank: they stop together
        // after the step in progress, and rank 0 writes the checkpoint.
        m_stopAsked = true;
        if (::syscall(SYS_pidfd_send_signal, launcher, SIGINT, nullptr, 0) != 0) {
            pushEvent("warning", "stop", "the processes' launcher has already ended");
        }
        return;
    }
    tb::remote::Host host;
    qint64 id = 0;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        host = m_host;
        id = m_remoteRunId;
    }
    if (id == 0) {
        // Not started there yet: launch stops before it starts the run,
        // and an upload in progress ends now.
        cancelLaunch();
        return;
    }
    // Off both the GUI thread and the following worker: one ssh round trip.
    std::thread([this, host, id] {
        try {
            const auto r = tb::remote::runCli(host, {"stop", std::to_string(id), "--wait", "0"});
            if (r.exitCode != 0) pushEvent("warning", "stop", "stop on " + host.label() + ": " + tb::remote::sshMessages(r.err));
        } catch (const std::exception& e) {
            pushEvent("warning", "stop", std::string("could not ask ") + host.label() + " to stop the run: " + e.what());
        }
    }).detach();
}

void RemoteRunWorker::cancelLaunch()
{
    m_cancelLaunch = true;
    if (const int pid = m_uploadPid.load(); pid > 0) ::kill(pid, SIGTERM);
}

void RemoteRunWorker::detach()
{
    m_detached = true;
    m_stopWatching = true;
    cancelLaunch();
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_follower) m_follower->cancel();
}

void RemoteRunWorker::pushEvent(const std::string& severity, const std::string& kind, const std::string& message)
{
    bool wasEmpty;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        wasEmpty = m_pending.empty();
        m_pending.events.push_back({severity, kind, message});
    }
    if (wasEmpty) Q_EMIT progressAvailable();
}

void RemoteRunWorker::pushEval(const EvalMetrics& eval)
{
    bool wasEmpty;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        wasEmpty = m_pending.empty();
        m_pending.evals.push_back(eval);
    }
    // One signal whenever the batch was empty, or the GUI never hears of this one.
    if (wasEmpty) Q_EMIT progressAvailable();
}

void RemoteRunWorker::pushStep(StepMetrics step)
{
    step.totalSteps = m_totalSteps;
    bool wasEmpty;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        wasEmpty = m_pending.empty();
        m_pending.steps.push_back(step);
    }
    if (wasEmpty) Q_EMIT progressAvailable();
}

void RemoteRunWorker::launch(const tb::remote::Host& host, const QString& configJson, const QString& dbPath, const QString& sendData)
{
    releaseLauncher();
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_localLabel.clear();
    }
    m_detached = false;
    m_cancelLaunch = false;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_host = host;
        m_remoteRunId = 0;
    }
    Q_EMIT linkChanged("connecting", 0, {});
    qint64 remoteId = 0;
    const std::string stopped = "stopped before the run started: nothing was started on " + host.label();
    try {
        tb::remote::checkRemoteVersion(host);
        std::string config = configJson.toStdString();
        if (!sendData.isEmpty()) {
            const auto local = sendData.toStdString();
            tb::remote::SentData sent;
            try {
                sent = tb::remote::sendData(
                    host, local, [this](const std::string& line) { pushEvent("info", "data", line); },
                    [this](int pid) {
                        m_uploadPid = pid;
                        if (m_cancelLaunch) ::kill(pid, SIGTERM); // stopped before the upload began
                    });
            } catch (const std::exception&) {
                m_uploadPid = 0;
                if (m_cancelLaunch) throw InputError(stopped + " (the data was not sent)");
                throw;
            }
            m_uploadPid = 0;
            pushEvent("info", "data", tb::remote::describeSent(host, local, sent));
            config = tb::remote::withDataPath(config, sent.remotePath);
        }
        if (m_cancelLaunch) throw InputError(stopped);
        const auto r = tb::remote::runCli(host, {"train", "--config", "-", "--detach"}, config);
        std::smatch m;
        if (r.exitCode != 0 || !std::regex_search(r.out, m, std::regex("run ([0-9]+) started"))) {
            const auto said = tb::remote::sshMessages(r.err);
            throw InputError("on " + host.label() + ": " + (said.empty() ? r.out : said));
        }
        remoteId = std::stoll(m[1]);
    } catch (const std::exception& e) {
        Q_EMIT linkChanged("", 0, {});
        Q_EMIT refused(QString::fromStdString(e.what()));
        return;
    }
    follow(host, remoteId, dbPath);
}

void RemoteRunWorker::attach(const tb::remote::Host& host, qint64 remoteRunId, const QString& dbPath)
{
    m_detached = false;
    releaseLauncher();
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_host = host;
        m_localLabel.clear();
    }
    Q_EMIT linkChanged("connecting", 0, {});
    follow(host, remoteRunId, dbPath);
}

qint64 RemoteRunWorker::storeCopy(const tb::remote::Host& host, qint64 remoteRunId, const QString& dbPath,
                                  SessionOutcome* outcome)
{
    try {
        const auto r = tb::remote::runCli(host, {"export-run", std::to_string(remoteRunId)});
        if (r.exitCode != 0) throw InputError(tb::remote::sshMessages(r.err));
        const auto bundle = bundleFromJson(r.out, "what " + host.label() + " sent");
        RunStore store(dbPath.isEmpty() ? RunStore::defaultPath() : dbPath.toStdString());
        const auto result = store.importRun(bundle, host.label());
        if (outcome) {
            outcome->status = bundle.run.status;
            outcome->stepsDone = bundle.run.stepsDone;
            outcome->totalSteps = bundle.run.stepsTotal;
            outcome->finalLoss = bundle.run.finalLoss.value_or(0);
            outcome->finalValLoss = bundle.run.finalValLoss.value_or(-1);
            outcome->finalValAccuracy = bundle.run.finalValAccuracy.value_or(-1);
            outcome->message = bundle.run.message;
            outcome->estimatedPeakBytes = bundle.run.estimatedPeakBytes.value_or(0);
            outcome->measuredPeakBytes = bundle.run.measuredPeakBytes.value_or(0);
            outcome->dbPath = store.path();
        }
        return result.runId;
    } catch (const std::exception& e) {
        pushEvent("warning", "copy", "the run could not be copied into the local store: " + std::string(e.what()));
        return 0;
    }
}

void RemoteRunWorker::handleRecord(const tb::remote::FollowRecord& r)
{
    using Type = tb::remote::FollowRecord::Type;
    switch (r.type) {
    case Type::Metric:
        // Validation points belong to the evaluation at that step, not to a training step.
        if (r.key == "val_accuracy") {
            m_eval.valAccuracy = r.value;
            break;
        }
        if (r.key == "val_loss") {
            m_eval.step = r.step;
            m_eval.valLoss = r.value;
            pushEval(m_eval);
            m_eval = {};
            break;
        }
        for (const auto& step : m_steps.add(r.step, r.key, r.value)) pushStep(step);
        break;
    case Type::Event: pushEvent(r.severity, r.kind, r.message); break;
    case Type::Status: m_totalSteps = r.stepsTotal; break;
    case Type::End:
        if (auto last = m_steps.finish()) pushStep(*last);
        break;
    }
}

void RemoteRunWorker::follow(const tb::remote::Host& host, qint64 remoteRunId, const QString& dbPath)
{
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_remoteRunId = remoteRunId;
    }
    m_steps = {};
    m_eval = {};
    m_totalSteps = 0;
    SessionOutcome start;
    const qint64 localId = storeCopy(host, remoteRunId, dbPath, &start);
    m_totalSteps = start.totalSteps;
    Q_EMIT started(localId, remoteRunId,
                   QString::fromStdString("on " + host.label() + " (run " + std::to_string(remoteRunId) + " there)"),
                   start.estimatedPeakBytes);
    tb::remote::RemoteFollower follower(host, remoteRunId);
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_follower = &follower;
    }
    if (m_detached) follower.cancel();
    std::string end;
    std::string error;
    try {
        end = follower.run(
            [&](const tb::remote::FollowRecord& r) { handleRecord(r); },
            [&](tb::remote::LinkState state, int down, const std::string& said) {
                Q_EMIT linkChanged(QString::fromStdString(tb::remote::linkStateName(state)), down, QString::fromStdString(said));
            });
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (auto last = m_steps.finish()) pushStep(*last);
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_follower = nullptr;
    }
    SessionOutcome outcome;
    outcome.runId = localId;
    if (end.empty()) {
        // Detached, lost or refused: the run goes on there as far as we know.
        Q_EMIT linkChanged(m_detached ? QString() : QString("lost"), 0, {});
        outcome.status = RunStatus::Running;
        outcome.message = error.empty() ? "stopped watching; the run goes on on " + host.label() + " (History > Attach)"
                                        : error;
        outcome.totalSteps = m_totalSteps;
        Q_EMIT finished(outcome);
        return;
    }
    outcome.runId = storeCopy(host, remoteRunId, dbPath, &outcome);
    if (outcome.runId == 0) outcome.runId = localId;
    outcome.status = runStatusFromString(end);
    Q_EMIT linkChanged("", 0, {});
    Q_EMIT finished(outcome);
}

namespace {

// The last lines of a file, for a launch that ended before its run started.
std::string tailOf(const QString& path, int lines)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) return {};
    const QByteArray all = file.readAll();
    QList<QByteArray> parts = all.trimmed().split('\n');
    while (parts.size() > lines) parts.removeFirst();
    return parts.join('\n').toStdString();
}

// Whether the process of a pidfd is still running. A pidfd becomes readable
// when its process exits, also while it is a zombie that nobody reaps (a
// detached launcher's parent may be an init that does not).
bool processRuns(int pidfd)
{
    if (pidfd < 0) return false;
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
}

// The run id in the file --run-id-file writes; 0 while there is none.
qint64 readRunId(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) return 0;
    bool ok = false;
    const qint64 id = file.readAll().trimmed().toLongLong(&ok);
    return ok && id > 0 ? id : 0;
}

SessionOutcome outcomeOf(const RunRecord& run, RunStore& store)
{
    SessionOutcome outcome;
    outcome.runId = run.id;
    outcome.status = run.status;
    outcome.stepsDone = run.stepsDone;
    outcome.totalSteps = run.stepsTotal;
    outcome.finalLoss = run.finalLoss.value_or(0);
    outcome.finalValLoss = run.finalValLoss.value_or(-1);
    outcome.finalValAccuracy = run.finalValAccuracy.value_or(-1);
    outcome.message = run.message;
    outcome.estimatedPeakBytes = run.estimatedPeakBytes.value_or(0);
    outcome.measuredPeakBytes = run.measuredPeakBytes.value_or(0);
    outcome.dbPath = store.path();
    // For the sample box: the checkpoint rank 0 wrote, and what it trained.
    try {
        if (const auto checkpoint = store.latestCheckpoint(run.id)) {
            outcome.checkpoint = checkpoint->path;
            outcome.config = parseConfig(run.configJson, "run " + std::to_string(run.id) + "'s stored config");
        }
    } catch (const std::exception&) {
        outcome.checkpoint.clear();
    }
    return outcome;
}

} // namespace

void RemoteRunWorker::releaseLauncher()
{
    if (const int fd = m_launcherFd.exchange(-1); fd >= 0) ::close(fd);
}

void RemoteRunWorker::prepareProcesses(qint64 launcherPid, int processes)
{
    releaseLauncher();
    // Opened at once, while the launcher surely runs (it waits for its ranks).
    // Debian 12's <sys/pidfd.h> declares these without C linkage: the system calls.
    m_launcherFd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(launcherPid), 0));
    m_stopAsked = false;
    m_stopWatching = false;
    m_detached = false;
    std::lock_guard<std::mutex> lock(m_mutex);
    m_host = {};
    m_localLabel = std::to_string(processes) + " processes here";
    m_remoteRunId = 0;
}

void RemoteRunWorker::watchProcesses(const QString& runIdFile, const QString& log, int processes, const QString& dbPath)
{
    const std::string label = std::to_string(processes) + " processes here";
    m_steps = {};
    m_eval = {};
    m_totalSteps = 0;
    const auto ended = [&](SessionOutcome outcome) {
        releaseLauncher();
        Q_EMIT finished(outcome);
    };
    // The run exists once the ranks have met: its id appears in the file.
    qint64 runId = 0;
    while ((runId = readRunId(runIdFile)) == 0) {
        if (!processRuns(m_launcherFd.load())) {
            runId = readRunId(runIdFile); // written just before the launcher ended
            if (runId > 0) break;
            const auto said = tailOf(log, 4);
            const std::string what = m_stopAsked ? "stopped before the run started" : "the " + std::to_string(processes)
                    + " processes ended before the run started";
            releaseLauncher();
            Q_EMIT refused(QString::fromStdString(
                what + (said.empty() ? std::string(" (their output is in ") + log.toStdString() + ")" : ":\n" + said)));
            return;
        }
        if (m_stopWatching) {
            SessionOutcome outcome;
            outcome.status = RunStatus::Running;
            outcome.message = "stopped watching before the run started; the processes go on, their output is in "
                + log.toStdString();
            ended(outcome);
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::string end;
    SessionOutcome outcome;
    try {
        RunStore store(dbPath.isEmpty() ? RunStore::defaultPath() : dbPath.toStdString());
        const auto run = store.run(runId);
        if (!run) throw InputError("run " + std::to_string(runId) + " is not in " + store.path());
        m_totalSteps = run->stepsTotal;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_remoteRunId = runId;
        }
        Q_EMIT started(runId, runId, QString::fromStdString("on " + label), run->estimatedPeakBytes.value_or(0));
        // A rank 0 that dies without ending its run: the store reads the run
        // as interrupted once its owner is gone, which ends the follow.
        remote::StoreFollowOptions options;
        end = remote::followStore(
            store, runId, options, [&](const remote::FollowRecord& r) { handleRecord(r); }, {}, &m_stopWatching);
        if (auto last = m_steps.finish()) pushStep(*last);
        if (!end.empty()) {
            if (const auto finalRun = store.run(runId)) outcome = outcomeOf(*finalRun, store);
        }
    } catch (const std::exception& e) {
        outcome.message = e.what();
    }
    if (end.empty()) {
        // Stopped watching (the window closes) or the store could not be read: the processes go on.
        outcome.runId = runId;
        outcome.status = RunStatus::Running;
        if (outcome.message.empty()) outcome.message = "stopped watching; the processes go on (History lists the run)";
        outcome.totalSteps = m_totalSteps;
    }
    ended(outcome);
}

} // namespace tb::ui
