#include "common/Percent.h"
#include "Progress.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <fstream>
#include <iostream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>
#include "Command.h"
#include "run/RunPace.h"

namespace tb::cli {
namespace {

std::atomic<int> g_signals{0};
std::atomic<bool> g_requeue{false};

extern "C" void onSignal(int signal)
{
    // Checkpointing for a Slurm requeue: the SIGTERM that follows (the time
    // limit, the requeue itself) must not end the run before its checkpoint.
    if (signal == SIGTERM && g_requeue.load()) return;
    // A second signal aborts at once; the run is then reported "interrupted" later.
    if (g_signals.fetch_add(1) >= 1) _exit(kExitCancelled);
}

extern "C" void onRequeueSignal(int) { g_requeue.store(true); }

// Whether Slurm holds the job requeued: `scontrol show job -o JOB` says it
// is requeued or pending again, or has restarted.
bool slurmJobRequeued(const char* job)
{
    const std::string command = std::string("scontrol show job -o ") + job + " 2>/dev/null";
    FILE* out = popen(command.c_str(), "r");
    if (!out) return false;
    std::string text;
    char buffer[4096];
    while (const auto n = std::fread(buffer, 1, sizeof buffer, out)) text.append(buffer, n);
    pclose(out);
    const auto field = [&](const std::string& key) {
        const auto at = text.find(" " + key + "=");
        if (at == std::string::npos) return std::string();
        const auto from = at + key.size() + 2;
        return text.substr(from, text.find_first_of(" \n", from) - from);
    };
    const auto state = field("JobState"), restarts = field("Restarts");
    return state.rfind("REQUEUE", 0) == 0 || state == "PENDING" || (!restarts.empty() && restarts != "0");
}

// scontrol requeue JOB: the job goes back to the queue and, started again,
// resumes the run from the checkpoint just written.
void requeueSlurmJob(const char* job)
{
    const pid_t pid = fork();
    if (pid == 0) {
        execlp("scontrol", "scontrol", "requeue", job, static_cast<char*>(nullptr));
        _exit(127);
    }
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    // The requeue stops the job step, scontrol with it: it can end by a
    // signal, or fail, after Slurm took the requeue (tst_slurm saw "failed"
    // on a job that was requeued and resumed). Slurm is then asked.
    const bool done = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (done || (pid > 0 && slurmJobRequeued(job))) {
        std::cout << "requeued Slurm job " << job << ": it resumes this run from its last checkpoint" << std::endl;
    } else {
        std::cerr << "error: 'scontrol requeue " << job << "' failed; resume the run by hand" << std::endl;
    }
}
std::string duration(double seconds)
{
    if (!std::isfinite(seconds) || seconds < 0) return "?";
    const long s = std::lround(seconds);
    char text[32];
    if (s >= 3600) std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
    else std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
    return text;
}

std::string rate(double tokensPerSecond)
{
    char text[32];
    if (tokensPerSecond >= 1e6) std::snprintf(text, sizeof text, "%.2fM", tokensPerSecond / 1e6);
    else if (tokensPerSecond >= 1e3) std::snprintf(text, sizeof text, "%.1fk", tokensPerSecond / 1e3);
    else std::snprintf(text, sizeof text, "%.0f", tokensPerSecond);
    return text;
}

} // namespace

int runWithProgress(RunSession& session, bool quiet, const std::function<void(std::int64_t runId)>& onStarted)
{
    struct sigaction action {};
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    // Under Slurm, SIGUSR1 (sbatch --signal=USR1@120) means: checkpoint now, then requeue.
    const char* slurmJob = std::getenv("SLURM_JOB_ID");
    if (slurmJob && *slurmJob) {
        struct sigaction requeue {};
        requeue.sa_handler = onRequeueSignal;
        sigemptyset(&requeue.sa_mask);
        sigaction(SIGUSR1, &requeue, nullptr);
    }

    // requestCancel takes a lock, so the handler only counts; this thread forwards.
    std::atomic<bool> done{false};
    std::thread watcher([&] {
        bool told = false;
        while (!done.load()) {
            if (g_requeue.load() && !told) {
                told = true;
                std::cerr << "\nSIGUSR1: checkpointing after the current step; then the Slurm job is requeued\n";
                session.requestCancel();
            }
            if (g_signals.load() > 0 && !told) {
                told = true;
                std::cerr << "\nstopping after the current step and saving a checkpoint "
                             "(press Ctrl-C again to abort at once)\n";
                session.requestCancel();
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    });

    using Clock = std::chrono::steady_clock;
    const auto started = Clock::now();
    auto lastPrint = Clock::time_point{};
    RunPace pace;
    double lastVal = -1;
    SessionCallbacks callbacks;
    callbacks.onStarted = [&](std::int64_t runId, const std::string& description) {
        if (!quiet) std::cout << "run " << runId << " started: " << description << std::endl;
        if (onStarted) onStarted(runId);
    };
    callbacks.onEval = [&](const EvalMetrics& e) { lastVal = e.valLoss; };
    std::string printedError; // the failure's own event, so that the closing line does not repeat it
    callbacks.onEvent = [&](const TrainerEvent& e) {
        if (!quiet && e.severity != "info") std::cerr << e.severity << ": " << e.message << std::endl;
        if (!quiet && e.severity == "error") printedError = e.message;
    };
    callbacks.onStep = [&](const StepMetrics& s) {
        const auto now = Clock::now();
        const double elapsed = std::chrono::duration<double>(now - started).count();
        pace.observe(s.step, s.totalSteps, elapsed);
        if (quiet || (now - lastPrint < std::chrono::seconds(1) && s.step != s.totalSteps)) return;
        lastPrint = now;
        char line[256];
        std::snprintf(line, sizeof line, "step %d/%d  loss %.4f%s  %s tok/s  elapsed %s  ETA %s", s.step,
                      s.totalSteps, s.loss,
                      lastVal >= 0 ? ("  val " + std::to_string(lastVal).substr(0, 6)).c_str() : "",
                      rate(s.tokensPerSecond).c_str(), duration(elapsed).c_str(),
                      duration(pace.etaSeconds()).c_str());
        std::cout << line << std::endl;
    };

    SessionOutcome outcome;
    try {
        outcome = session.run(callbacks);
    } catch (...) {
        done = true;
        watcher.join();
        throw;
    }
    done = true;
    watcher.join();

    std::cout << "run " << outcome.runId << " " << runStatusName(outcome.status) << ": " << outcome.stepsDone << "/"
              << outcome.totalSteps << " steps";
    if (outcome.stepsDone > 0) std::cout << ", loss " << outcome.finalLoss;
    if (outcome.finalValLoss >= 0) std::cout << ", val loss " << outcome.finalValLoss;
    if (outcome.finalValAccuracy >= 0) std::cout << ", val accuracy " << 100.0 * outcome.finalValAccuracy << "%";
    std::cout << "\n";
    if (outcome.steadyTokensPerSecond > 0) {
        // Measured by the trainer from the end of the 10th step to the end of the
        // last, without validation and checkpoints; callbacks, store and probe included.
        char line[160];
        std::snprintf(line, sizeof line, "throughput: %.0f tokens/s in the steady state (after the first 10 steps)\n",
                      outcome.steadyTokensPerSecond);
        std::cout << line;
    }
    if (const auto error = outcome.estimateError()) {
        char line[200];
        std::snprintf(line, sizeof line, "memory: peak %.1f MiB of tensors measured (during %s), estimate %.1f MiB (%s)\n",
                      static_cast<double>(outcome.measuredPeakBytes) / 1048576.0, outcome.measuredPeakPhase.c_str(),
                      static_cast<double>(outcome.estimatedPeakBytes) / 1048576.0,
                      signedPercentText(*error).c_str());
        std::cout << line;
    }
    if (outcome.status == RunStatus::Failed) {
        if (outcome.message != printedError) std::cerr << "error: " << outcome.message << "\n";
        // The explanation, as 'trainbench-cli explain' gives it (kept with the run).
        if (!outcome.failureFindings.empty() && outcome.failureFindings.front().kind != "unknown") {
            std::cerr << findingText(outcome.failureFindings.front());
        }
    }
    if (outcome.lostValues > 0 && outcome.status != RunStatus::Failed) {
        std::cerr << "error: the run trained, but its record is incomplete: " << outcome.message << "\n";
    }
    std::cout << "stored in " << outcome.dbPath << " (run " << outcome.runId << ")";
    if (!outcome.checkpoint.empty()) std::cout << "; last checkpoint " << outcome.checkpoint;
    std::cout << std::endl;
    if (outcome.status == RunStatus::Cancelled && g_requeue.load() && !outcome.checkpoint.empty()) {
        requeueSlurmJob(slurmJob);
    } else if (outcome.status == RunStatus::Cancelled) {
        std::cout << "resume it with: trainbench-cli resume " << outcome.runId << " --db " << outcome.dbPath << "\n";
    }
    if (outcome.lostValues > 0) return kExitFailed;
    switch (outcome.status) {
    case RunStatus::Finished: return kExitOk;
    case RunStatus::Cancelled: return kExitCancelled;
    default: return kExitFailed;
    }
}

std::function<void(std::int64_t runId)> runIdWriter(const std::string& file)
{
    if (file.empty()) return {};
    return [file](std::int64_t runId) {
        // Written whole under another name, then renamed: a reader sees the id or nothing.
        std::ofstream out(file + ".tmp", std::ios::trunc);
        out << runId << "\n";
        out.close();
        std::error_code ec;
        if (!out) {
            std::filesystem::remove(file + ".tmp", ec);
            throw InputError("cannot write the run id to " + file + ".tmp (is the disk full, or the folder read-only?)");
        }
        std::filesystem::rename(file + ".tmp", file, ec);
        if (ec) throw InputError("cannot write the run id to " + file + ": " + ec.message());
    };
}

} // namespace tb::cli
