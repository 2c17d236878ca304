// trainbench-cli sweep: a grid or random search over config fields, kept as a
// queue in the store. Each trial is planned and preflighted first (one that
// would not fit or not run is skipped with the reason, never launched to
// crash), then trained by a `train` process of its own (one at a time on a
// GPU, N at a time on CPU cores). Early termination stops a trial worse than
// the median of the others at the same step. Killed or interrupted, the sweep
// resumes with --resume: finished trials are kept, interrupted runs continue
// from their checkpoints, nothing finished runs twice.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "Remote.h"
#include "StoreAccess.h"
#include "common/ByteSize.h"
#include "common/Errors.h"
#include "config/RunConfig.h"
#include "config/ByteSizes.h"
#include "diagnose/Preflight.h"
#include "diagnose/TargetPlan.h"
#include "remote/Ssh.h"
#include "memory/Verdict.h"
#include "run/RunSession.h"
#include "store/RunStore.h"
#include "train/DerivedPlan.h"
#include "tune/Sweep.h"

extern char** environ;

namespace tb::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
volatile std::sig_atomic_t g_signal = 0;
void onInterrupt(int signal)
{
    g_interrupted = 1;
    g_signal = signal;
}

std::string selfProgram()
{
    char self[4096] = {0};
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) throw RunError("cannot find this program's path (/proc/self/exe) to start the trials");
    return std::string(self, static_cast<std::size_t>(n));
}

// Starts argv[0] with output appended to `log`, input from /dev/null, in a
// process group (setsid: a session) of its own; RunError when it cannot.
pid_t spawnLogged(std::vector<std::string> argv, const std::string& log, bool session)
{
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    if (session) {
        posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID);
    } else {
        posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(&attributes, 0);
    }
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, &attributes, raw.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (rc != 0) throw RunError("cannot start " + argv[0] + ": " + std::strerror(rc));
    return pid;
}

// Where memory is checked: a catalogue card, a budget on this machine, or
// this machine as preflight sees it.
struct SweepTarget {
    std::optional<GpuTarget> gpu;
    std::int64_t budget = 0;
    LocalMachine local;
};

// Why a trial is not launched; empty when it may be.
std::string skipReason(const RunConfig& c, const SweepTarget& t)
{
    const std::int64_t budget = t.budget > 0 ? t.budget : t.gpu ? t.gpu->gpu.memoryBytes : 0;
    if (plannableModel(c)) {
        const TargetPlan plan = planOnTarget(c, t.gpu);
        if (!plan.precision.error.empty()) return "does not run: " + plan.precision.error;
        // The plan every command gives (LoRA and a quantized base: their
        // own step's, derived in seconds; a lower bound over the budget does
        // not fit either). Where it cannot be derived the run decides.
        if (budget > 0) {
            std::optional<MemoryEstimate> e;
            try {
                e = memoryPlanOf(c, plan.arch, plan.setup.precision).at(plan.setup.batch, plan.setup.seqLen, plan.setup);
            } catch (const std::exception&) {
            }
            if (e && memoryVerdict(e->peakBytes, budget) == MemoryVerdict::DoesNotFit) {
                return "does not fit: planned " + std::string(e->lowerBound ? "at least " : "") + byteSizeText(e->peakBytes)
                    + " of " + byteSizeText(budget);
            }
        }
    }
    PreflightTarget target;
    target.gpu = t.gpu;
    if (!t.gpu) target.local = t.local;
    for (const auto& f : runPreflight(c, target, true)) {
        if (f.severity != Severity::Error) continue;
        if (budget > 0 && f.kind == "memory_over_budget") continue; // decided against the budget above
        return "preflight: " + f.title + (f.cause.empty() ? "" : " (" + f.cause + ")");
    }
    return {};
}

struct Running {
    pid_t pid = -1;  // -1: a run started by an earlier sweep process, watched through the store
    int trial = 0;
    std::string runIdFile;
    std::string stopReason; // set when early termination stopped it
    int checkedStep = -1;   // the metric's last step compared
    bool signalled = false; // a second signal would abort it without its checkpoint
};

class SweepRunner {
public:
    // onlyTrial >= 0: run that trial alone (a Slurm array task), beside
    // other such runners of the same sweep.
    SweepRunner(RunStore& store, std::string db, std::int64_t sweepId, int parallel, bool json, int onlyTrial = -1)
        : m_store(store), m_db(std::move(db)), m_id(sweepId), m_parallel(parallel), m_json(json), m_only(onlyTrial)
    {
        m_record = *m_store.sweep(sweepId);
        m_spec = parseSweep(m_record.specJson, "sweep " + std::to_string(sweepId));
        m_base = parseConfig(m_record.configJson, "sweep " + std::to_string(sweepId) + "'s config", m_record.baseDir);
        if (!m_record.gpu.empty()) m_target.gpu = GpuCatalogue::bundled().resolve(m_record.gpu);
        m_target.budget = m_record.budgetBytes;
        m_target.local = localMachine();
        m_folder = m_store.path() + "-runs/sweep-" + std::to_string(sweepId);
        std::filesystem::create_directories(m_folder);
        m_program = selfProgram();
        // One process runs a sweep: a second (a --resume while the first
        // still runs) would start its trials again. Runners of one trial each
        // (Slurm array tasks) share the sweep's lock and hold their trial's.
        // The locks go with the process, however it ends.
        const auto lock = m_folder + "/lock";
        m_lock = takeLock(lock, m_only >= 0 ? LOCK_SH : LOCK_EX);
        if (m_lock < 0) {
            throw InputError("sweep " + std::to_string(sweepId) + " is being run by another trainbench-cli process; wait "
                             "for it to end, or stop it (Ctrl-C there) and then continue with --resume "
                             + std::to_string(sweepId));
        }
        if (m_only >= 0) {
            if (m_only >= static_cast<int>(m_record.trials.size())) {
                throw InputError("--trial " + std::to_string(m_only + 1) + ": sweep " + std::to_string(sweepId) + " has "
                                 + std::to_string(m_record.trials.size()) + " trials");
            }
            m_trialLock = takeLock(trialFile(m_only, ".lock"), LOCK_EX);
            if (m_trialLock < 0) {
                throw InputError("trial " + std::to_string(m_only + 1) + " of sweep " + std::to_string(sweepId)
                                 + " is being run by another trainbench-cli process");
            }
        } else {
            // Its pid and host, for the window's Stop.
            char host[256] = {0};
            gethostname(host, sizeof host - 1);
            const std::string pid = std::to_string(getpid()) + " " + host + "\n";
            if (ftruncate(m_lock, 0) != 0 || write(m_lock, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
                throw RunError("cannot write " + lock + ": " + std::strerror(errno));
            }
        }
    }
    // An open file locked as asked (flock), or -1 when another process holds it.
    static int takeLock(const std::string& path, int how)
    {
        const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) throw RunError("cannot open " + path + ": " + std::strerror(errno));
        if (flock(fd, how | LOCK_NB) != 0) {
            close(fd);
            return -1;
        }
        return fd;
    }
    ~SweepRunner()
    {
        if (m_trialLock >= 0) close(m_trialLock);
        if (m_lock >= 0) close(m_lock);
    }
    SweepRunner(const SweepRunner&) = delete;
    SweepRunner& operator=(const SweepRunner&) = delete;

    int run()
    {
        m_store.setSweepStatus(m_id, "running");
        adoptEarlierRuns();
        while (!g_interrupted) {
            while (!g_interrupted && static_cast<int>(m_running.size()) < m_parallel) {
                if (!startNext()) break;
            }
            if (m_running.empty()) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
            poll();
        }
        if (g_interrupted) {
            say("interrupted: waiting for the running trials to checkpoint and stop");
            // A Ctrl-C reaches only this process (the trials have process
            // groups of their own): each trial gets one SIGINT. A SIGTERM
            // (Slurm's time limit, scancel) reaches the trials too, and a
            // second signal would abort them without their checkpoint.
            if (g_signal == SIGINT) {
                for (auto& r : m_running) stopTrial(r, SIGINT);
            }
            while (!m_running.empty()) {
                std::this_thread::sleep_for(std::chrono::milliseconds(250));
                poll();
            }
            m_store.setSweepStatus(m_id, "stopped");
            say("stopped; continue with: trainbench-cli sweep --resume " + std::to_string(m_id) + " --db " + m_db);
            return kExitCancelled;
        }
        // Done when every trial is (a runner of one trial may finish last).
        const auto now = *m_store.sweep(m_id);
        const bool open = std::any_of(now.trials.begin(), now.trials.end(), [](const SweepTrialRecord& t) {
            return t.status == "pending" || t.status == "running" || t.status == "stopping";
        });
        if (!open) m_store.setSweepStatus(m_id, "finished");
        return kExitOk;
    }

private:
    SweepTrialRecord& trial(int index) { return m_record.trials.at(static_cast<std::size_t>(index)); }
    void save(const SweepTrialRecord& t) { m_store.updateSweepTrial(t); }
    void say(const std::string& line)
    {
        if (!m_json) std::printf("%s\n", line.c_str()), std::fflush(stdout);
    }
    std::string label(const SweepTrialRecord& t) const
    {
        return "trial " + std::to_string(t.trial + 1) + "/" + std::to_string(m_record.trials.size()) + " ("
            + valuesText(t.valuesJson) + ")";
    }
public:
    static std::string valuesText(const std::string& valuesJson)
    {
        const auto values = nlohmann::ordered_json::parse(valuesJson);
        std::string out;
        for (const auto& [k, v] : values.items()) out += (out.empty() ? "" : " ") + k + "=" + v.dump();
        return out;
    }
private:
    std::string trialFile(int index, const char* suffix) const
    {
        return m_folder + "/trial-" + std::to_string(index + 1) + suffix;
    }

    // One signal to a trial's run: its process when this runner started it,
    // else the run's owner as the store records it (an earlier runner's).
    void stopTrial(Running& r, int signal)
    {
        if (r.signalled) return;
        r.signalled = true;
        if (r.pid > 0) {
            kill(r.pid, signal);
            return;
        }
        const auto& t = trial(r.trial);
        if (!t.runId) return;
        try {
            m_store.signalOwner(*t.runId, signal);
        } catch (const std::exception&) {
            // It ended meanwhile, or runs elsewhere: nothing to stop from here.
        }
    }

    // After a crash or Ctrl-C: runs of this sweep still going are watched,
    // interrupted ones go back to the queue (they resume from their checkpoint).
    void adoptEarlierRuns()
    {
        m_store.reconcileInterrupted();
        for (auto& t : m_record.trials) {
            if ((t.status != "running" && t.status != "stopping") || (m_only >= 0 && t.trial != m_only)) continue;
            if (!t.runId) {
                // Started, but the id was not read back before the sweep stopped.
                std::ifstream in(trialFile(t.trial, ".runid"));
                std::int64_t id = 0;
                if (in >> id && id > 0) t.runId = id;
            }
            const auto run = t.runId ? m_store.run(*t.runId) : std::nullopt;
            if (run && (run->status == RunStatus::Running || run->status == RunStatus::Created)) {
                Running r;
                r.trial = t.trial;
                m_running.push_back(r);
                say(label(t) + ": run " + std::to_string(*t.runId) + " is still training; watching it");
            } else if (run) {
                finish(t, *run, {});
            } else {
                t.status = "pending"; // never got a run
                save(t);
            }
        }
    }

    bool startNext()
    {
        for (auto& t : m_record.trials) {
            if (t.status != "pending" || (m_only >= 0 && t.trial != m_only)) continue;
            // A trial whose run was stopped by Ctrl-C or a crash continues it.
            if (t.runId) {
                const auto run = m_store.run(*t.runId);
                if (run && run->status == RunStatus::Finished) {
                    finish(t, *run, {});
                    continue;
                }
                if (run && (run->status == RunStatus::Cancelled || run->status == RunStatus::Interrupted)) {
                    launch(t, {"resume", std::to_string(*t.runId), "--db", m_db, "--quiet"}, "resumed run " + std::to_string(*t.runId));
                    return true;
                }
                if (run && (run->status == RunStatus::Running || run->status == RunStatus::Created)) {
                    // Still training (its process outlived a runner): watched, never started twice.
                    t.status = "running";
                    save(t);
                    Running r;
                    r.trial = t.trial;
                    m_running.push_back(r);
                    say(label(t) + ": run " + std::to_string(*t.runId) + " is still training; watching it");
                    return true;
                }
                t.runId.reset();
            }
            RunConfig config;
            try {
                config = trialConfig(m_base, SweepTrial{t.trial, valuesOf(t.valuesJson)});
            } catch (const std::exception& e) {
                skip(t, std::string("not a valid config: ") + e.what());
                continue;
            }
            if (const auto why = skipReason(config, m_target); !why.empty()) {
                skip(t, why);
                continue;
            }
            config.name = m_record.name + ", trial " + std::to_string(t.trial + 1);
            // The trial's file lives in the sweep's folder: the config's
            // relative paths (its own folder's) are made absolute.
            if (!config.data.path.empty()) config.data.path = resolvedDataPath(config);
            if (!config.model.path.empty()) config.model.path = resolvedModelPath(config);
            if (!config.train.initFrom.empty() && !config.baseDir.empty()) {
                const std::filesystem::path from(config.train.initFrom);
                const bool runReference = config.train.initFrom.rfind("run:", 0) == 0
                    || config.train.initFrom.find_first_not_of("0123456789") == std::string::npos;
                if (!runReference && from.is_relative()) {
                    config.train.initFrom = (std::filesystem::path(config.baseDir) / from).lexically_normal().string();
                }
            }
            if (m_parallel > 1 && config.train.threads == 0) {
                config.train.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / m_parallel);
            }
            const auto file = trialFile(t.trial, ".json");
            {
                std::ofstream out(file, std::ios::binary | std::ios::trunc);
                out << configToJson(config) << "\n";
                if (!out) throw RunError("cannot write " + file);
            }
            launch(t, {"train", "--config", file, "--db", m_db, "--quiet", "--name", config.name}, "started");
            return true;
        }
        return false;
    }

    static std::vector<std::pair<std::string, std::string>> valuesOf(const std::string& valuesJson)
    {
        const auto values = nlohmann::ordered_json::parse(valuesJson);
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& [k, v] : values.items()) out.emplace_back(k, v.dump());
        return out;
    }

    void skip(SweepTrialRecord& t, const std::string& why)
    {
        t.status = "skipped";
        t.reason = why;
        save(t);
        say(label(t) + ": skipped, " + why);
    }

    void launch(SweepTrialRecord& t, std::vector<std::string> args, const std::string& verb)
    {
        Running r;
        r.trial = t.trial;
        r.runIdFile = trialFile(t.trial, ".runid");
        std::error_code ec;
        std::filesystem::remove(r.runIdFile, ec);
        args.insert(args.end(), {"--run-id-file", r.runIdFile});
        std::vector<std::string> argv{m_program};
        argv.insert(argv.end(), args.begin(), args.end());
        // A process group of its own: a Ctrl-C at the terminal reaches the
        // sweep, which passes one SIGINT on (a second would abort the run
        // without its checkpoint); a sweep killed outright leaves its trials
        // training, and --resume watches them.
        const pid_t pid = spawnLogged(std::move(argv), trialFile(t.trial, ".log"), false);
        r.pid = pid;
        t.status = "running";
        t.reason.clear();
        save(t);
        m_running.push_back(r);
        say(label(t) + ": " + verb);
    }

    // The sweep's metric of a run, step by step (cached; new points read incrementally).
    std::map<int, double>& series(std::int64_t runId)
    {
        auto& s = m_series[runId];
        const int from = s.empty() ? 0 : s.rbegin()->first + 1;
        for (const auto& p : m_store.metricsFrom(runId, m_spec.metric, from)) s[p.step] = p.value;
        return s;
    }

    void poll()
    {
        for (auto it = m_running.begin(); it != m_running.end();) {
            auto& t = trial(it->trial);
            if (!t.runId && !it->runIdFile.empty()) {
                std::ifstream in(it->runIdFile);
                std::int64_t id = 0;
                if (in >> id && id > 0) {
                    t.runId = id;
                    save(t);
                    say(label(t) + ": run " + std::to_string(id));
                }
            }
            bool ended = false;
            int exitCode = 0;
            if (it->pid > 0) {
                int status = 0;
                if (waitpid(it->pid, &status, WNOHANG) == it->pid) {
                    ended = true;
                    exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                }
            } else if (t.runId) {
                const auto run = m_store.run(*t.runId);
                ended = !run || (run->status != RunStatus::Running && run->status != RunStatus::Created);
                if (run && !ended) ended = m_store.reconcileInterrupted() > 0 && m_store.run(*t.runId)->status == RunStatus::Interrupted;
            } else {
                ended = true;
            }
            if (!ended && m_spec.earlyTerminate && t.runId && !g_interrupted && !it->signalled) earlyTerminate(*it, t);
            if (!ended) {
                ++it;
                continue;
            }
            // The run id of a process that ended before the next poll.
            if (!t.runId && !it->runIdFile.empty()) {
                std::ifstream in(it->runIdFile);
                std::int64_t id = 0;
                if (in >> id && id > 0) t.runId = id;
            }
            const auto run = t.runId ? m_store.run(*t.runId) : std::nullopt;
            if (run) {
                finish(t, *run, it->stopReason);
            } else {
                t.status = "failed";
                t.reason = "the trial's process ended (exit status " + std::to_string(exitCode) + ") before a run started; "
                           "its output is in " + trialFile(t.trial, ".log");
                save(t);
                say(label(t) + ": failed, " + t.reason);
            }
            it = m_running.erase(it);
        }
    }

    void earlyTerminate(Running& r, SweepTrialRecord& t)
    {
        const auto& mine = series(*t.runId);
        for (auto p = mine.upper_bound(r.checkedStep); p != mine.end() && r.stopReason.empty(); ++p) {
            if (p->first < m_spec.minStep) {
                r.checkedStep = p->first;
                continue;
            }
            // The others as the store has them now (runners of single trials run beside this one).
            const auto fresh = m_store.sweep(m_id);
            std::vector<double> others;
            bool othersStillComing = false;
            for (const auto& o : fresh ? fresh->trials : m_record.trials) {
                if (o.trial == t.trial || o.status == "skipped") continue;
                const bool open = o.status == "pending" || o.status == "running" || o.status == "stopping";
                if (!o.runId) {
                    othersStillComing = othersStillComing || open;
                    continue;
                }
                const auto& theirs = series(*o.runId);
                if (const auto at = theirs.find(p->first); at != theirs.end()) others.push_back(at->second);
                else othersStillComing = othersStillComing || open;
            }
            // Trials running beside this one may reach the step later: the
            // step is judged once two others have it, or none can come.
            if (others.size() < 2 && othersStillComing) return;
            r.checkedStep = p->first;
            if (!worseThanMedian(p->second, others, m_spec.maximize)) continue;
            std::sort(others.begin(), others.end());
            const std::size_t n = others.size();
            const double median = n % 2 ? others[n / 2] : 0.5 * (others[n / 2 - 1] + others[n / 2]);
            char text[200];
            std::snprintf(text, sizeof text, "at step %d its %s %.4g was worse than the median %.4g of %zu other trials",
                          p->first, m_spec.metric.c_str(), p->second, median, n);
            r.stopReason = text;
            // Stored before the signal: a runner killed now leaves the trial
            // "stopping", which ends as stopped, not cancelled.
            t.status = "stopping";
            t.reason = r.stopReason;
            save(t);
            stopTrial(r, SIGTERM);
            say(label(t) + ": stopping early, " + r.stopReason);
        }
    }

    void finish(SweepTrialRecord& t, const RunRecord& run, const std::string& stopReason)
    {
        const auto& s = series(run.id);
        if (!s.empty()) t.metric = s.rbegin()->second;
        std::string metricText;
        if (t.metric) {
            char text[64];
            std::snprintf(text, sizeof text, ", %s %.4g", m_spec.metric.c_str(), *t.metric);
            metricText = text;
        }
        if (run.status == RunStatus::Finished) {
            t.status = "finished";
            t.reason.clear();
        } else if (run.status == RunStatus::Failed) {
            t.status = "failed";
            t.reason = run.message;
        } else if (!stopReason.empty() || t.status == "stopping") {
            t.status = "stopped";
            if (!stopReason.empty()) t.reason = stopReason;
        } else if (g_interrupted || run.status == RunStatus::Interrupted) {
            t.status = "pending"; // resumes from its checkpoint next time
            t.reason = "interrupted at step " + std::to_string(run.stepsDone);
        } else {
            t.status = "cancelled";
            t.reason = "run " + std::to_string(run.id) + " was stopped outside the sweep";
        }
        save(t);
        say(label(t) + ": " + t.status + " (run " + std::to_string(run.id) + metricText + ")"
            + (t.reason.empty() ? "" : ": " + t.reason));
    }

    RunStore& m_store;
    std::string m_db;
    std::int64_t m_id;
    int m_parallel;
    bool m_json;
    SweepRecord m_record;
    SweepSpec m_spec;
    RunConfig m_base;
    SweepTarget m_target;
    std::string m_folder, m_program;
    int m_lock = -1, m_trialLock = -1;
    int m_only = -1;
    std::vector<Running> m_running;
    std::map<std::int64_t, std::map<int, double>> m_series;
};

void printSweep(const SweepRecord& r, const SweepSpec& spec, bool json)
{
    // The best finished trial for the metric's goal.
    int best = -1;
    for (const auto& t : r.trials) {
        if (t.status != "finished" || !t.metric) continue;
        const auto& b = best < 0 ? t : r.trials[static_cast<std::size_t>(best)];
        if (best < 0 || (spec.maximize ? *t.metric > *b.metric : *t.metric < *b.metric)) best = t.trial;
    }
    if (json) {
        nlohmann::json trials = nlohmann::json::array();
        for (const auto& t : r.trials) {
            nlohmann::json j = {{"trial", t.trial + 1}, {"values", nlohmann::json::parse(t.valuesJson)}, {"status", t.status}};
            if (t.runId) j["run_id"] = *t.runId;
            if (t.metric) j["metric"] = *t.metric;
            if (!t.reason.empty()) j["reason"] = t.reason;
            trials.push_back(std::move(j));
        }
        nlohmann::json out = {{"sweep_id", r.id}, {"name", r.name},      {"status", r.status}, {"metric", spec.metric},
                              {"goal", spec.maximize ? "maximize" : "minimize"}, {"trials", trials}};
        if (best >= 0) out["best_trial"] = best + 1;
        std::cout << out.dump(2) << "\n";
        return;
    }
    std::printf("sweep %lld \"%s\" (%s), %zu trials, %s %s:\n", static_cast<long long>(r.id), r.name.c_str(), r.status.c_str(),
                r.trials.size(), spec.maximize ? "maximize" : "minimize", spec.metric.c_str());
    std::printf("  %5s  %-40s %-9s %6s %12s  %s\n", "trial", "values", "status", "run", spec.metric.c_str(), "why");
    for (const auto& t : r.trials) {
        const std::string values = SweepRunner::valuesText(t.valuesJson);
        char metric[32] = "-";
        if (t.metric) std::snprintf(metric, sizeof metric, "%.4g", *t.metric);
        std::printf("%s %5d  %-40s %-9s %6s %12s  %s\n", t.trial == best ? "*" : " ", t.trial + 1, values.c_str(), t.status.c_str(),
                    t.runId ? std::to_string(*t.runId).c_str() : "-", metric, t.reason.c_str());
    }
    if (best >= 0) std::printf("best: trial %d\n", best + 1);
}

std::string readText(const std::string& path, const char* what)
{
    std::stringstream text;
    if (path == "-") {
        text << std::cin.rdbuf();
        return text.str();
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(std::string(what) + " not found: " + path);
    text << in.rdbuf();
    return text.str();
}

// --host: the same command on the host's trainbench-cli, over ssh. A new
// sweep sends its config on stdin and its file's text as --sweep-text; it
// runs there in the background (--detach), and --status shows it.
int sweepRemote(const Args& args)
{
    if (args.value("--db")) throw InputError("--db names a local store; with --host use --remote-db");
    const auto host = hostOf(args);
    std::vector<std::string> remoteArgs{"sweep"};
    std::string input;
    if (auto id = args.value("--status")) {
        remoteArgs.insert(remoteArgs.end(), {"--status", *id});
        if (args.flag("--json")) remoteArgs.push_back("--json");
    } else {
        remote::checkRemoteVersion(host);
        if (auto id = args.value("--resume")) {
            remoteArgs.insert(remoteArgs.end(), {"--resume", *id});
        } else {
            input = readText(*args.value("--config"), "config file");
            remoteArgs.insert(remoteArgs.end(), {"--config", "-", "--sweep-text", readText(*args.value("--sweep"), "sweep file")});
            for (const char* option : {"--gpu", "--budget"}) {
                if (auto v = args.value(option)) remoteArgs.insert(remoteArgs.end(), {option, *v});
            }
        }
        if (auto v = args.value("--parallel")) remoteArgs.insert(remoteArgs.end(), {"--parallel", *v});
        remoteArgs.push_back("--detach");
    }
    const auto r = remote::runCli(host, remoteArgs, input);
    std::cout << r.out;
    if (r.exitCode != 0) {
        std::cerr << remote::sshMessages(r.err);
        return r.exitCode;
    }
    std::smatch m;
    if (std::regex_search(r.out, m, std::regex("sweep ([0-9]+) started"))) {
        std::cout << "it runs on " << host.label() << "; see it with: trainbench-cli sweep --status " << m[1] << " --host "
                  << host.label() << "\n";
    }
    return kExitOk;
}

// --detach: the runner in a session of its own (no terminal, output to the
// sweep's folder), so it outlives this process, a closed terminal or ssh link.
int detachRunner(const std::string& db, std::int64_t id, int parallel)
{
    const std::string folder = db + "-runs/sweep-" + std::to_string(id);
    std::filesystem::create_directories(folder);
    std::vector<std::string> argv{selfProgram(), "sweep", "--resume", std::to_string(id), "--db", db};
    if (parallel > 1) argv.insert(argv.end(), {"--parallel", std::to_string(parallel)});
    const std::string log = folder + "/runner.log";
    const auto logStart = std::filesystem::exists(log) ? std::filesystem::file_size(log) : 0;
    const pid_t pid = spawnLogged(std::move(argv), log, true);
    // The answer waits until the runner holds the sweep's lock (it writes its
    // pid there once it does), or has ended: whoever looks at the lock after
    // this answer (the window's Sweeps dialog) sees the sweep running, never
    // a runner still loading.
    const std::string lock = folder + "/lock", holder = std::to_string(pid) + " ";
    const auto holds = [&] {
        std::ifstream in(lock);
        std::string text;
        std::getline(in, text);
        return text.rfind(holder, 0) == 0;
    };
    for (const auto start = std::chrono::steady_clock::now();;) {
        int status = 0;
        const pid_t done = waitpid(pid, &status, WNOHANG);
        if (holds()) break; // it runs (or ran: a sweep with nothing left ends at once)
        if (done == pid || (done < 0 && errno == ECHILD)) {
            if (done == pid && WIFEXITED(status) && WEXITSTATUS(status) == kExitOk) break;
            // Its own error: the first line main() printed in the part of the
            // log it wrote (a runner already running appends its trials' lines there too).
            std::ifstream in(log);
            in.seekg(static_cast<std::streamoff>(logStart));
            std::string line, why;
            while (why.empty() && std::getline(in, line)) {
                for (const std::string prefix : {"trainbench-cli: error: ", "trainbench-cli: failed: "}) {
                    if (line.rfind(prefix, 0) == 0) why = line.substr(prefix.size());
                }
            }
            if (why.empty()) why = "the sweep's runner ended at once; its output: " + log;
            if (done == pid && WIFEXITED(status) && WEXITSTATUS(status) == kExitBadInput) throw InputError(why);
            throw RunError(why);
        }
        // A runner that has not taken the lock in two minutes (a store
        // locked by another program): it goes on; the answer says so.
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(120)) {
            std::cout << "the sweep's runner has not started its first trial yet; ";
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::cout << "sweep " << id << " started in the background (pid " << pid << "); its output: " << log
              << "\nsee it with: trainbench-cli sweep --status " << id << " --db " << db << "\n";
    return kExitOk;
}

// Trials on a GPU run one at a time: they would share its memory.
void refuseParallelOnGpu(const RunConfig& base, int parallel)
{
    if (parallel <= 1 || base.device == "cpu") return;
    if (localMachine().torchCudaDevices > 0) {
        throw InputError("--parallel " + std::to_string(parallel) + " would share this machine's GPU between trials; "
                         "trials on a GPU run one at a time (leave out --parallel, or set \"device\": \"cpu\")");
    }
}

int sweep(const Args& args)
{
    if (!args.positionals().empty()) {
        throw InputError("'sweep' takes no positional arguments, got \"" + args.positionals()[0] + "\"");
    }
    const auto statusId = args.integer("--status", 1, 1LL << 62);
    const auto resumeId = args.integer("--resume", 1, 1LL << 62);
    const auto configPath = args.value("--config");
    const auto sweepPath = args.value("--sweep");
    const auto sweepText = args.value("--sweep-text");
    if (statusId && (resumeId || configPath || sweepPath || sweepText)) {
        throw InputError("--status shows a stored sweep; leave out --resume, --config and --sweep");
    }
    if (sweepPath && sweepText) throw InputError("give --sweep FILE or --sweep-text TEXT, not both");
    if (resumeId && (configPath || sweepPath || sweepText)) {
        throw InputError("--resume continues a stored sweep with its own config and sweep file; leave out --config and --sweep");
    }
    const auto trial = args.integer("--trial", 1, 1000000);
    if (trial && !resumeId) throw InputError("--trial runs one trial of a stored sweep: give --resume SWEEP_ID too");
    if (!statusId && !resumeId && (!configPath || !(sweepPath || sweepText))) {
        throw InputError("'sweep' needs --config FILE and --sweep FILE (or --resume SWEEP_ID to continue one, --status SWEEP_ID to show one)");
    }
    const auto gpuName = args.value("--gpu");
    const auto budgetText = args.value("--budget");
    if (gpuName && budgetText) throw InputError("'sweep' takes --gpu NAME or --budget BYTES, not both");
    if (trial && args.flag("--detach")) throw InputError("--trial runs one trial here (a Slurm array task); leave out --detach");
    const int parallel = static_cast<int>(args.integer("--parallel", 1, 256).value_or(1));
    if (args.value("--host")) {
        if (trial) throw InputError("--trial runs one trial here; it does not go with --host");
        if (sweepText) throw InputError("--sweep-text is what --host sends; give --sweep FILE");
        return sweepRemote(args);
    }
    if (args.value("--remote-cli") || args.value("--remote-db")) throw InputError("--remote-cli and --remote-db need --host");
    // An inherited SIG_IGN would let the kernel reap the runner and the
    // trials, and waitpid lose how they ended (as Ranks.cpp guards the ranks).
    signal(SIGCHLD, SIG_DFL);
    const std::string db = args.value("--db").value_or(RunStore::defaultPath());

    if (statusId) {
        if (!std::filesystem::exists(db)) throw InputError("no experiment database at " + db);
        RunStore store(db, RunStore::Mode::ReadOnly);
        const auto record = store.sweep(*statusId);
        if (!record) throw InputError("sweep " + std::to_string(*statusId) + " does not exist in " + db);
        printSweep(*record, parseSweep(record->specJson, "sweep"), args.flag("--json"));
        return kExitOk;
    }

    RunStore store(db);
    std::int64_t id = 0;
    if (resumeId) {
        const auto existing = store.sweep(*resumeId);
        if (!existing) throw InputError("sweep " + std::to_string(*resumeId) + " does not exist in " + db);
        if (gpuName || budgetText) throw InputError("--resume keeps the sweep's own target; leave out --gpu and --budget");
        id = *resumeId;
    } else {
        const std::string specText = sweepText ? *sweepText : readText(*sweepPath, "sweep file");
        const SweepSpec spec = parseSweep(specText, sweepText ? "the sweep sent" : *sweepPath);
        const RunConfig base = *configPath == "-"
            ? parseConfig(readText("-", "config"), "the config read from stdin", std::filesystem::current_path().string())
            : loadConfigFile(*configPath);
        refuseParallelOnGpu(base, parallel);
        SweepRecord r = newSweepRecord(specText, spec, base);
        if (gpuName) r.gpu = GpuCatalogue::bundled().resolve(*gpuName).gpu.id;
        if (budgetText) r.budgetBytes = budgetBytes(*budgetText);
        id = store.createSweep(r);
        if (!args.flag("--json")) {
            std::printf("sweep %lld: %zu trials of \"%s\"; stop with Ctrl-C, continue with --resume %lld\n",
                        static_cast<long long>(id), r.trials.size(), r.name.c_str(), static_cast<long long>(id));
            std::fflush(stdout);
        }
    }
    if (resumeId) {
        const auto record = *store.sweep(id);
        refuseParallelOnGpu(parseConfig(record.configJson, "the sweep's config", record.baseDir), parallel);
    }
    if (args.flag("--detach")) return detachRunner(db, id, parallel);
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    SweepRunner runner(store, db, id, parallel, args.flag("--json"), trial ? static_cast<int>(*trial) - 1 : -1);
    const int code = runner.run();
    const auto record = *store.sweep(id);
    printSweep(record, parseSweep(record.specJson, "sweep"), args.flag("--json"));
    return code;
}

std::vector<OptionSpec> sweepOptions()
{
    std::vector<OptionSpec> o{
        {"--config", true, "the base experiment config (JSON); '-' reads it from stdin", "FILE"},
        {"--sweep", true, "the sweep file: method, metric, parameters, run_cap, seed, early_terminate (docs/sweeps.md)", "FILE"},
        {"--sweep-text", true, "the sweep file's text itself (what --host sends)", "TEXT"},
        {"--gpu", true, "plan each trial for this catalogue card: one that does not fit or does not run there is skipped", "NAME"},
        {"--budget", true, "skip trials whose plan does not fit this memory (bytes or \"4 GiB\")", "BYTES"},
        {"--parallel", true, "trials at a time on CPU cores (default 1; each gets its share of the threads)", "N"},
        {"--resume", true, "continue a stored sweep: finished trials are kept, interrupted ones continue", "SWEEP_ID"},
        {"--trial", true, "with --resume: run only trial N (1-based) of the sweep, beside other such runners (a Slurm array task)", "N"},
        {"--detach", false, "run the sweep in the background (it outlives this terminal) and return"},
        {"--status", true, "show a stored sweep: every trial's values, status, run, metric and reason", "SWEEP_ID"},
        {"--db", true, "experiment database (default: $TRAINBENCH_DB, else ~/.local/share/trainbench/experiments.db)", "FILE"},
        {"--json", false, "print the sweep and its trials as JSON at the end"}};
    for (auto& h : hostOptions()) o.push_back(h);
    return o;
}

const CommandRegistration sweepRegistration{Command{
    "sweep",
    "Run a grid or random search over config fields: each trial planned first, queued in the store, resumable.",
    "--config FILE --sweep FILE [--gpu NAME | --budget BYTES] [--parallel N] [--detach] [--db FILE | --host H] [--json] | "
    "--resume SWEEP_ID [--trial N] [--parallel N] | --status SWEEP_ID",
    sweepOptions(), &sweep}};

} // namespace
} // namespace tb::cli
