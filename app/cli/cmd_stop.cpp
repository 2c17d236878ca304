// trainbench-cli stop: stop a running run cleanly, as Ctrl-C does.
#include <chrono>
#include <csignal>
#include <iostream>
#include <thread>

#include "Command.h"
#include "Remote.h"
#include "StoreAccess.h"
#include "common/Errors.h"

namespace tb::cli {
namespace {

int stop(const Args& args)
{
    const auto runId = args.runId();
    const int waitS = static_cast<int>(args.integer("--wait", 0, 86400).value_or(120));
    if (args.value("--host")) {
        if (args.value("--db")) throw InputError("--db names a local store; with --host use --remote-db");
        const auto host = hostOf(args);
        const auto r = remote::runCli(host, {"stop", std::to_string(runId), "--wait", std::to_string(waitS)});
        std::cout << r.out;
        std::cerr << remote::sshMessages(r.err) << (r.err.empty() ? "" : "\n");
        return r.exitCode;
    }
    auto store = openExistingStore(args.value("--db").value_or(""));
    const long pid = store->signalOwner(runId, SIGINT);
    std::cout << "asked run " << runId << " (pid " << pid << ") to stop after its current step" << std::endl;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(waitS);
    while (true) {
        const auto run = store->run(runId);
        if (run && run->status != RunStatus::Running && run->status != RunStatus::Created) {
            std::cout << "run " << runId << " " << runStatusName(run->status) << " at step " << run->stepsDone << "/"
                      << run->stepsTotal;
            if (run->status == RunStatus::Cancelled) std::cout << "; resume it with 'trainbench-cli resume " << runId << "'";
            std::cout << "\n";
            return kExitOk;
        }
        if (std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (waitS == 0) return kExitOk;
    std::cerr << "trainbench-cli: run " << runId << " is still finishing its step after " << waitS
              << " s; it stops at the next step boundary ('trainbench-cli follow " << runId << "' shows when)\n";
    return kExitFailed;
}

std::vector<OptionSpec> stopOptions()
{
    std::vector<OptionSpec> o{
        {"--db", true, "experiment database (default: $TRAINBENCH_DB, else ~/.local/share/trainbench/experiments.db)", "FILE"},
        {"--wait", true, "seconds to wait for the run to stop (default 120; 0: do not wait)", "S"}};
    for (auto& h : hostOptions()) o.push_back(std::move(h));
    return o;
}

const CommandRegistration stopRegistration{Command{
    "stop",
    "Stop a running run after its current step, with a checkpoint (here or on a host).",
    "RUN_ID [--db FILE | --host H] [--wait S]",
    stopOptions(),
    &stop}};

} // namespace
} // namespace tb::cli
