#include "Ranks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "Command.h"
#include "common/Errors.h"
#include "train/Trainer.h"

namespace tb::cli {
namespace {

std::atomic<int> g_rankSignals{0};
std::atomic<Trainer*> g_trainer{nullptr};

extern "C" void countSignal(int) { g_rankSignals.fetch_add(1); }

std::atomic<bool> g_rankRequeue{false};

extern "C" void cancelRank(int signal)
{
    // SIGUSR1 under Slurm: checkpoint for a requeue; a SIGTERM after it must
    // not end the rank before the checkpoint (rank 0 writes it, all must reach it).
    if (signal == SIGUSR1) g_rankRequeue.store(true);
    else if (signal == SIGTERM && g_rankRequeue.load()) return;
    // A second signal ends the rank at once; rank 0 sees it gone.
    else if (g_rankSignals.fetch_add(1) >= 1) _exit(kExitCancelled);
    if (Trainer* t = g_trainer.load()) t->requestCancel(); // an atomic store
}

int freeLoopbackPort()
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw std::runtime_error("cannot open a socket to find a free port");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t length = sizeof a;
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0
        && getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) == 0;
    close(fd);
    if (!ok) throw std::runtime_error("cannot find a free port on 127.0.0.1 for the ranks to meet on");
    return ntohs(a.sin_port);
}

std::string describeExit(int status)
{
    if (WIFSIGNALED(status)) {
        const int s = WTERMSIG(status);
        return "was killed by signal " + std::to_string(s) + " (" + strsignal(s) + ")";
    }
    return "exited with status " + std::to_string(WEXITSTATUS(status));
}

} // namespace

InjectHook injectHookFromEnvironment()
{
    InjectHook hook;
    const char* v = std::getenv("TRAINBENCH_TEST_INJECT_INF");
    if (!v || !*v) return hook;
    int step = 0, rank = -1;
    if (std::sscanf(v, "%d:%d", &step, &rank) < 1 || step < 1) {
        throw InputError(std::string("TRAINBENCH_TEST_INJECT_INF is \"") + v + "\": give STEP or STEP:RANK (a test hook)");
    }
    hook.active = true;
    hook.step = step;
    hook.rank = rank;
    return hook;
}

int launchRanks(const RankLaunch& launch)
{
    const char* portText = std::getenv("MASTER_PORT");
    const int port = portText && *portText ? std::atoi(portText) : freeLoopbackPort();
    if (port <= 0 || port > 65535) throw InputError(std::string("MASTER_PORT is \"") + portText + "\": give a port from 1 to 65535");
    char exe[4096] = {0};
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) throw std::runtime_error("cannot find this program's path to start the ranks");

    std::vector<std::string> base{exe};
    base.insert(base.end(), launch.args.begin(), launch.args.end());
    // Each rank runs in a process group of its own: a Ctrl-C or SIGTERM
    // reaches this process alone, which passes it on exactly once per
    // signal, and a rank dies with this process (PR_SET_PDEATHSIG).
    struct sigaction action {};
    action.sa_handler = countSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    signal(SIGCHLD, SIG_DFL); // an inherited SIG_IGN would make waitpid lose the ranks' statuses

    // Everything a child needs is built before fork: after it, only exec.
    std::vector<std::vector<std::string>> envs(static_cast<std::size_t>(launch.processes));
    const std::vector<std::string> ours{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                        "TRAINBENCH_NPROC"};
    for (int r = 0; r < launch.processes; ++r) {
        auto& env = envs[static_cast<std::size_t>(r)];
        for (char** e = environ; *e; ++e) {
            const std::string entry = *e;
            const auto name = entry.substr(0, entry.find('='));
            if (std::find(ours.begin(), ours.end(), name) == ours.end()) env.push_back(entry);
        }
        env.push_back("RANK=" + std::to_string(r));
        env.push_back("LOCAL_RANK=" + std::to_string(r));
        env.push_back("WORLD_SIZE=" + std::to_string(launch.processes));
        env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(launch.processes));
        env.push_back("MASTER_ADDR=127.0.0.1");
        env.push_back("MASTER_PORT=" + std::to_string(port));
        env.push_back("TRAINBENCH_NPROC=1");
    }
    std::vector<char*> argv;
    for (auto& a : base) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int devNull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    const pid_t launcher = getpid();

    std::cout.flush();
    std::cerr.flush();
    std::vector<pid_t> pids(static_cast<std::size_t>(launch.processes), -1);
    for (int r = 0; r < launch.processes; ++r) {
        std::vector<char*> envp;
        for (auto& e : envs[static_cast<std::size_t>(r)]) envp.push_back(e.data());
        envp.push_back(nullptr);
        const pid_t pid = fork();
        if (pid < 0) {
            for (pid_t p : pids) {
                if (p > 0) {
                    kill(p, SIGKILL);
                    waitpid(p, nullptr, 0);
                }
            }
            throw std::runtime_error("cannot start rank " + std::to_string(r) + " (fork failed)");
        }
        if (pid == 0) {
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != launcher) _exit(kExitFailed);
            struct sigaction plain {};
            plain.sa_handler = SIG_DFL;
            sigaction(SIGINT, &plain, nullptr);
            sigaction(SIGTERM, &plain, nullptr);
            // Rank 0 reports progress; the others write to rank-K.log beside the run.
            if (r > 0 && devNull >= 0) dup2(devNull, 1);
            execve(exe, argv.data(), envp.data());
            const char message[] = "trainbench-cli: cannot start a rank (exec failed)\n";
            (void)!write(2, message, sizeof message - 1);
            _exit(127);
        }
        pids[static_cast<std::size_t>(r)] = pid;
    }
    if (devNull >= 0) close(devNull);

    using Clock = std::chrono::steady_clock;
    // Until a rank's status is known it counts as a failure.
    std::vector<int> statuses(pids.size(), W_EXITCODE(kExitFailed, 0));
    int forwarded = 0;
    std::size_t running = pids.size();
    std::optional<Clock::time_point> killAt;
    std::vector<std::string> reports;
    std::vector<bool> killed(pids.size(), false);
    while (running > 0) {
        // Pass each signal on once: the ranks stop together after their step
        // (a second one aborts them, as a second Ctrl-C does one process).
        for (const int seen = g_rankSignals.load(); forwarded < seen; ++forwarded) {
            for (pid_t p : pids) {
                if (p > 0) kill(p, SIGINT);
            }
        }
        int status = 0;
        const pid_t done = waitpid(-1, &status, WNOHANG);
        if (done < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (done == 0) {
            if (!killAt) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            } else if (Clock::now() >= *killAt) {
                for (std::size_t r = 0; r < pids.size(); ++r) {
                    if (pids[r] > 0) {
                        kill(pids[r], SIGKILL);
                        killed[r] = true;
                        reports.push_back("rank " + std::to_string(r) + " (pid " + std::to_string(pids[r])
                                          + ") was still running after another rank ended the run, and was killed");
                    }
                }
                killAt = Clock::now() + std::chrono::hours(1); // reap them; no more kills
            } else {
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            continue;
        }
        for (std::size_t r = 0; r < pids.size(); ++r) {
            if (pids[r] != done) continue;
            statuses[r] = status;
            pids[r] = -1;
            --running;
            // A stop (130) is a normal end: the others stop on the same step.
            const bool bad = WIFSIGNALED(status)
                || (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != kExitCancelled);
            if (bad && g_rankSignals.load() == 0 && !killed[r]) {
                reports.push_back("rank " + std::to_string(r) + " (pid " + std::to_string(done) + ") " + describeExit(status));
            }
            // The others see a dead peer at their next collective and end on
            // their own; a stopped or hung one does not, and is killed.
            if (bad && !killAt) killAt = Clock::now() + std::chrono::seconds(std::min(launch.timeoutSeconds, 10) + 5);
            // Rank 0 holds the run: once it has ended, the others have nothing to train for.
            if (r == 0 && pids.size() > 1) killAt = std::min(killAt.value_or(Clock::time_point::max()), Clock::now() + std::chrono::seconds(3));
        }
    }
    for (const auto& line : reports) std::cerr << "trainbench-cli: " << line << "\n";
    const int first = statuses.front();
    if (WIFEXITED(first)) return WEXITSTATUS(first);
    return g_rankSignals.load() > 0 ? kExitCancelled : kExitFailed;
}

int trainAsRank(RunConfig config, const DistLaunch& launchIn, const RankOptions& options)
{
    DistLaunch launch = launchIn;
    launch.timeoutSeconds = config.train.distTimeoutS;
    if (config.train.worldSize != 1 && config.train.worldSize != launch.worldSize) {
        throw InputError("train.world_size is " + std::to_string(config.train.worldSize) + " but WORLD_SIZE is "
                         + std::to_string(launch.worldSize) + ": start as many processes as the config says, or change train.world_size");
    }
    config.train.worldSize = launch.worldSize;
    // As RunSession does for rank 0: paths against the config's folder.
    if (!config.data.path.empty()) config.data.path = resolvedDataPath(config);
    // Rank 0 resolves train.init_from (a run of its store, a path against the
    // config's folder); its weights reach this rank by the broadcast at start.
    config.train.initFrom.clear();
    config.baseDir.clear();
    if (options.bare) config.train.logEvery = config.train.steps;
    TrainerOptions to;
    to.dist = launch;
    to.measureMemory = options.measureMemory && !options.bare;
    to.distOverlap = options.overlap;
    to.resumeFrom = options.resumeFrom;
    const auto hook = injectHookFromEnvironment();
    if (hook.active) {
        to.forceLossScaling = true;
        to.injectNonFiniteGradientAtStep = hook.step;
        to.injectRank = hook.rank;
    }
    const std::string self = "rank " + std::to_string(launch.rank);
    to.onRunFolder = [&](const std::string& folder) {
        if (folder.empty()) return;
        std::error_code ec;
        std::filesystem::create_directories(folder, ec);
        const auto path = (std::filesystem::path(folder) / ("rank-" + std::to_string(launch.rank) + ".log")).string();
        const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            std::cerr.flush();
            dup2(fd, 2);
            close(fd);
        }
        std::cerr << self << " of " << launch.worldSize << ": joined (pid " << getpid() << ")" << std::endl;
    };

    struct sigaction action {};
    action.sa_handler = cancelRank;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job) sigaction(SIGUSR1, &action, nullptr);

    Trainer trainer(config, to);
    g_trainer.store(&trainer);
    if (g_rankSignals.load() > 0 || g_rankRequeue.load()) trainer.requestCancel(); // a signal while it was being built
    TrainerCallbacks callbacks;
    callbacks.onEvent = [&](const TrainerEvent& e) {
        std::cerr << self << ": " << e.severity << ": " << e.kind << ": " << e.message << std::endl;
    };
    int lastLogged = 0;
    callbacks.onStep = [&](const StepMetrics& s) {
        if (s.step - lastLogged >= 50 || s.step == s.totalSteps) {
            lastLogged = s.step;
            std::cerr << self << ": step " << s.step << " of " << s.totalSteps << std::endl;
        }
    };
    const auto result = trainer.run(callbacks);
    g_trainer.store(nullptr);
    std::cerr << self << ": " << result.message << std::endl;
    switch (result.status) {
    case TrainResult::Status::Finished: return kExitOk;
    case TrainResult::Status::Cancelled: return kExitCancelled;
    default: return kExitFailed;
    }
}

} // namespace tb::cli
