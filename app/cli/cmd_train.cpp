// trainbench-cli train: start a run from a config file, here (in the
// foreground or detached) or on a GPU server over ssh.
#include "Command.h"
#include "Follow.h"
#include "Progress.h"
#include "Ranks.h"
#include "Remote.h"
#include "common/Errors.h"
#include "config/RunConfig.h"
#include "remote/SendData.h"
#include "train/OpCounter.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <regex>
#include <sstream>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tb::cli {
namespace {

std::string readConfigText(const std::string& path)
{
    std::stringstream text;
    if (path == "-") {
        text << std::cin.rdbuf();
        return text.str();
    }
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
        throw InputError("config file not found: " + path + " (check the path; bundled examples are in resources/examples/)");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read config file " + path + " (check its permissions)");
    text << in.rdbuf();
    return text.str();
}

// --send-data: copies the config's data file (data.path, resolved here
// against the config's folder) into the host's store folder and returns the
// config text with data.path naming that copy. Only the data file is looked
// at here: a model folder or tokenizer named in the config is on the host.
std::string sendDataOf(const remote::Host& host, const std::string& path, const std::string& text)
{
    const auto json = nlohmann::json::parse(text, nullptr, false, true);
    const auto data = json.is_object() && json.contains("data") && json["data"].is_object() ? json["data"] : nlohmann::json::object();
    const std::string source = data.contains("source") && data["source"].is_string() ? data["source"].get<std::string>() : "addition";
    const std::string dataPath = data.contains("path") && data["path"].is_string() ? data["path"].get<std::string>() : "";
    if (json.is_discarded() || !json.is_object()) {
        throw InputError("--send-data: " + (path == "-" ? std::string("the config read from stdin") : path)
                         + " is not a JSON object ('trainbench-cli validate --config FILE' says what is wrong)");
    }
    if (source == "addition" || dataPath.empty()) {
        throw InputError("--send-data: this config names no data file (data.source \"" + source + "\""
                         + (source == "addition" ? "" : " with no data.path: the bundled sample text") + "); leave --send-data out");
    }
    namespace fs = std::filesystem;
    fs::path local(dataPath);
    if (local.is_relative()) local = (path == "-" ? fs::current_path() : fs::absolute(path).parent_path()) / local;
    const auto localPath = local.lexically_normal().string();
    const auto sent = remote::sendData(host, localPath, [](const std::string& line) { std::cout << line << std::endl; });
    std::cout << remote::describeSent(host, localPath, sent) << std::endl;
    return remote::withDataPath(text, sent.remotePath);
}

// The config as sent to a host: data and model paths in it name files there
// (with --send-data, the data file is copied there first).
int trainRemote(const Args& args, const std::string& path)
{
    if (args.value("--db")) throw InputError("--db names a local store; with --host use --remote-db");
    if (args.flag("--count-ops") || args.flag("--bare")) throw InputError("--count-ops and --bare are for local benchmarks");
    const auto host = hostOf(args);
    std::string text = readConfigText(path);
    remote::checkRemoteVersion(host);
    if (args.flag("--send-data")) text = sendDataOf(host, path, text);
    std::vector<std::string> remoteArgs{"train", "--config", "-", "--detach"};
    if (args.value("--nproc")) {
        throw InputError("--nproc with --host is not supported yet: start the data-parallel run on the host itself "
                         "(ssh there and run 'trainbench-cli train --nproc N'), then follow it with 'trainbench-cli follow RUN --host H'");
    }
    for (const char* option : {"--device", "--steps", "--name", "--threads"}) {
        if (auto v = args.value(option)) {
            remoteArgs.push_back(option);
            remoteArgs.push_back(*v);
        }
    }
    for (const char* flag : {"--force", "--no-metrics", "--no-memory-probe"}) {
        if (args.flag(flag)) remoteArgs.push_back(flag);
    }
    const auto r = remote::runCli(host, remoteArgs, text);
    std::smatch m;
    if (r.exitCode != 0 || !std::regex_search(r.out, m, std::regex("run ([0-9]+) started"))) {
        std::cerr << r.out << remote::sshMessages(r.err) << "\n";
        return r.exitCode != 0 ? r.exitCode : kExitFailed;
    }
    const std::int64_t runId = std::stoll(m[1]);
    std::cout << "run " << runId << " started on " << host.label() << " (remote run id " << runId << ")" << std::endl;
    if (args.flag("--detach")) {
        std::cout << "follow it with: trainbench-cli follow " << runId << " --host " << host.label()
                  << "\nstop it with:   trainbench-cli stop " << runId << " --host " << host.label() << "\n";
        return kExitOk;
    }
    FollowOptions follow;
    return followRemote(host, runId, follow);
}

// Starts the run in a child process of its own session (no terminal, stdin
// from /dev/null, output to a log file), waits until it trains and prints its
// id. It survives the end of this process, a closed terminal or ssh link.
template <typename Train>
int detach(const std::string& dbPath, Train&& trainHere)
{
    const std::string db = dbPath.empty() ? RunStore::defaultPath() : dbPath;
    const std::string logFolder = db + "-runs";
    std::error_code ec;
    std::filesystem::create_directories(logFolder, ec);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("cannot create a pipe to start the run");
    std::cout.flush();
    std::cerr.flush();
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("cannot start the run in the background (fork failed)");
    const std::string log = logFolder + "/detached-" + std::to_string(pid > 0 ? pid : getpid()) + ".log";
    if (pid == 0) {
        close(fds[0]);
        setsid();
        const int null = open("/dev/null", O_RDONLY);
        const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        if (null >= 0) dup2(null, 0);
        if (out >= 0) {
            dup2(out, 1);
            dup2(out, 2);
        }
        const int code = trainHere([&](std::int64_t runId) {
            // The log moves into the run's folder; the parent learns the id.
            std::string moved = log;
            std::error_code e;
            std::filesystem::create_directories(logFolder + "/" + std::to_string(runId), e);
            if (!e) {
                moved = logFolder + "/" + std::to_string(runId) + "/output.log";
                std::filesystem::rename(log, moved, e);
                if (e) moved = log;
            }
            const std::string line = "started " + std::to_string(runId) + " " + std::to_string(getpid()) + " " + moved + "\n";
            (void)!write(fds[1], line.data(), line.size());
            close(fds[1]);
        });
        std::cout.flush();
        std::cerr.flush();
        _exit(code);
    }
    close(fds[1]);
    std::string reply;
    char buffer[512];
    for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        reply.append(buffer, static_cast<std::size_t>(n));
    }
    close(fds[0]);
    std::istringstream in(reply);
    std::string word, where;
    long long runId = 0, childPid = 0;
    if (in >> word >> runId >> childPid >> where && word == "started") {
        std::cout << "run " << runId << " started in the background (pid " << childPid << "); output in " << where
                  << "\nfollow it with: trainbench-cli follow " << runId << (dbPath.empty() ? "" : " --db " + dbPath)
                  << "\nstop it with:   trainbench-cli stop " << runId << (dbPath.empty() ? "" : " --db " + dbPath) << "\n";
        return kExitOk;
    }
    // It ended before training: its output says why.
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::ifstream output(log);
    std::cerr << output.rdbuf();
    std::filesystem::remove(log, ec);
    return WIFEXITED(status) ? WEXITSTATUS(status) : kExitFailed;
}

int train(const Args& args)
{
    if (!args.positionals().empty()) {
        throw InputError("'train' takes no positional arguments, got \"" + args.positionals()[0]
                         + "\" (did you mean --config " + args.positionals()[0] + "?)");
    }
    const auto path = args.value("--config");
    if (!path) throw InputError("'train' needs --config FILE (examples are in resources/examples/)");
    if (args.value("--host")) return trainRemote(args, *path);
    if (args.value("--remote-cli") || args.value("--remote-db")) throw InputError("--remote-cli and --remote-db need --host");
    if (args.flag("--send-data")) throw InputError("--send-data copies the data file to a host: it needs --host");
    RunConfig config = *path == "-" ? parseConfig(readConfigText("-"), "the config read from stdin") : loadConfigFile(*path);
    if (auto device = args.value("--device")) config.device = *device;
    if (auto steps = args.integer("--steps", 1, 1000000000)) {
        config.train.steps = static_cast<int>(*steps);
        config.optim.warmupSteps = std::min(config.optim.warmupSteps, config.train.steps);
    }
    if (auto name = args.value("--name")) config.name = *name;
    if (auto threads = args.integer("--threads", 0, 256)) config.train.threads = static_cast<int>(*threads);
    const auto nproc = args.integer("--nproc", 1, 1024);
    const auto launched = distLaunchFromEnvironment();
    if (launched) {
        // Started as one rank of a data-parallel run (--nproc, torchrun, srun).
        if (nproc) {
            throw InputError("--nproc starts the ranks itself, but this process is already " + launched->describe()
                             + ": leave --nproc out under torchrun or srun");
        }
        if (args.flag("--detach")) throw InputError("--detach is for a run started here, not for one rank of " + launched->describe());
        if (launched->rank > 0) {
            RankOptions ro;
            ro.measureMemory = !args.flag("--no-memory-probe");
            ro.bare = args.flag("--bare");
            ro.overlap = !args.flag("--no-overlap");
            return trainAsRank(config, *launched, ro);
        }
    } else if (const int processes = nproc ? static_cast<int>(*nproc) : config.train.worldSize; processes > 1) {
        if (args.flag("--detach")) {
            throw InputError("--detach does not start data-parallel runs yet: run 'train --nproc " + std::to_string(processes)
                             + "' in the foreground (under nohup or tmux to outlive the terminal)");
        }
        if (args.flag("--count-ops")) throw InputError("--count-ops counts one process's operators: leave out --nproc");
        if (config.train.worldSize != 1 && config.train.worldSize != processes) {
            throw InputError("--nproc is " + std::to_string(processes) + " but the config's train.world_size is "
                             + std::to_string(config.train.worldSize) + ": give one of them");
        }
        if (*path == "-") {
            throw InputError("--nproc starts one process per rank and each reads the config: give --config FILE, not '-'");
        }
        RankLaunch launch;
        launch.processes = processes;
        launch.timeoutSeconds = config.train.distTimeoutS;
        launch.args = {"train", "--config", *path};
        for (const char* option : {"--db", "--device", "--steps", "--name", "--threads", "--run-id-file"}) {
            if (auto v = args.value(option)) {
                launch.args.push_back(option);
                launch.args.push_back(*v);
            }
        }
        for (const char* flag : {"--quiet", "--force", "--no-metrics", "--no-memory-probe", "--bare", "--no-overlap"}) {
            if (args.flag(flag)) launch.args.push_back(flag);
        }
        return launchRanks(launch);
    }
    SessionOptions options;
    if (launched) options.dist = *launched;
    options.distOverlap = !args.flag("--no-overlap");
    if (const auto hook = injectHookFromEnvironment(); hook.active) {
        options.forceLossScaling = true;
        options.injectNonFiniteGradientAtStep = hook.step;
        options.injectRank = hook.rank;
    }
    options.dbPath = args.value("--db").value_or("");
    options.recordMetrics = !args.flag("--no-metrics");
    options.measureMemory = !args.flag("--no-memory-probe");
    options.bare = args.flag("--bare");
    options.force = args.flag("--force");
    const auto trainHere = [&](const std::function<void(std::int64_t)>& onStarted) {
        std::unique_ptr<RunSession> session;
        try {
            session = std::make_unique<RunSession>(config, options);
        } catch (const PreflightError& e) {
            std::fprintf(stderr, "trainbench-cli: %s\n", e.what());
            return kExitFindings;
        }
        for (const auto& f : session->preflight()) {
            if (f.severity != Severity::Info && !args.flag("--quiet")) {
                std::fprintf(stderr, "preflight: %s: %s (%s)\n", severityName(f.severity), f.title.c_str(), f.kind.c_str());
            }
        }
        // Training runs on this thread, so the counter sees every operator of the run.
        auto counter = args.flag("--count-ops") ? std::make_unique<OpCounter>() : nullptr;
        const int code = runWithProgress(*session, args.flag("--quiet"), onStarted);
        if (counter) {
            std::printf("ops: %lld ATen operators dispatched on the training thread\n",
                        static_cast<long long>(counter->total()));
            for (const auto& [name, n] : counter->counts()) std::printf("op %s %lld\n", name.c_str(), static_cast<long long>(n));
        }
        return code;
    };
    if (auto file = args.value("--run-id-file")) return trainHere(runIdWriter(*file));
    if (args.flag("--detach")) {
        return detach(options.dbPath, [&](const std::function<void(std::int64_t)>& onStarted) {
            try {
                return trainHere(onStarted);
            } catch (const InputError& e) {
                std::cerr << "trainbench-cli: error: " << e.what() << "\n";
                return kExitBadInput;
            } catch (const std::exception& e) {
                std::cerr << "trainbench-cli: failed: " << e.what() << "\n";
                return kExitFailed;
            }
        });
    }
    return trainHere({});
}

std::vector<OptionSpec> trainOptions()
{
    std::vector<OptionSpec> o{
        {"--config", true, "the experiment config (JSON); '-' reads it from stdin", "FILE"},
        {"--db", true, "experiment database (default: $TRAINBENCH_DB, else ~/.local/share/trainbench/experiments.db)",
         "FILE"},
        {"--device", true, "override the config's device: auto, cpu, cuda, cuda:N", "D"},
        {"--steps", true, "override train.steps", "N"},
        {"--name", true, "override the run name", "S"},
        {"--threads", true, "override train.threads (0 = automatic)", "N"},
        {"--nproc", true, "data parallel: start N processes here, one per rank (train.batch_size is per rank; "
                          "the same binary also runs as a rank under torchrun or srun)", "N"},
        {"--detach", false, "start the run in the background, print its id and return (it outlives this terminal)"},
        {"--send-data", false, "with --host: copy the config's local data file into the host's store folder (checked by SHA-256; not sent again while it is there)"},
        {"--quiet", false, "print only the final summary"},
        {"--force", false, "launch even if preflight finds errors (recorded with the run)"},
        {"--no-metrics", false, "do not store per-step metrics (for overhead benchmarks)"},
        {"--no-memory-probe", false, "do not measure tensor memory (for overhead benchmarks)"},
        {"--bare", false, "benchmark baseline: no metrics writer, no per-step callback or loss read, no memory probe"},
        {"--run-id-file", true, "write the run's id to FILE when it starts (the Slurm script resumes that run when requeued)", "FILE"},
        {"--no-overlap", false, "data-parallel benchmark baseline: all-reduce the gradients after backward, not while it runs"},
        {"--count-ops", false, "benchmark: count the ATen operators the run dispatches and print them at the end"}};
    for (auto& h : hostOptions()) o.push_back(std::move(h));
    return o;
}

const CommandRegistration trainRegistration{Command{
    "train",
    "Train a model from a JSON config and store the run (here, or on a host over ssh).",
    "--config FILE [--db FILE | --host H [--send-data]] [--nproc N | --detach] [--device D] [--steps N] [--name S] [--force]",
    trainOptions(),
    &train}};

} // namespace
} // namespace tb::cli
