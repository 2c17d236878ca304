// trainbench-cli measure: run a few real training steps and report the tensor
// bytes each phase needed, the figure the memory estimate is checked against.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "Ranks.h"
#include "common/Errors.h"
#include "config/RunConfig.h"
#include "dist/DistLaunch.h"
#include "memory/MemoryProbe.h"
#include "train/OpCounter.h"
#include "train/Trainer.h"

namespace tb::cli {
namespace {

// One line per allocation ("alloc #N +bytes live L in op") and per release
// ("free #N -bytes live L (op that allocated it)"), so the tensors live at any
// point can be told apart. Single-threaded: measure --trace runs one thread.
void printAllocation(std::int64_t delta, std::int64_t live, const void* payload)
{
    static std::unordered_map<const void*, std::pair<long long, std::string>> allocated;
    static long long serial = 0;
    if (delta >= 0) {
        auto op = OpTracker::current();
        std::printf("alloc #%lld %+lld live %lld in %s\n", ++serial, static_cast<long long>(delta),
                    static_cast<long long>(live), op.c_str());
        allocated[payload] = {serial, std::move(op)};
        return;
    }
    const auto it = allocated.find(payload);
    if (it == allocated.end()) {
        std::printf("free #? %+lld live %lld (allocated before tracing)\n", static_cast<long long>(delta),
                    static_cast<long long>(live));
        return;
    }
    std::printf("free #%lld %+lld live %lld (%s)\n", it->second.first, static_cast<long long>(delta),
                static_cast<long long>(live), it->second.second.c_str());
    allocated.erase(it);
}

int measure(const Args& args)
{
    if (!args.positionals().empty()) {
        throw InputError("'measure' takes no positional arguments, got \"" + args.positionals()[0] + "\"");
    }
    const auto path = args.value("--config");
    if (!path) throw InputError("'measure' needs --config FILE");
    RunConfig config = loadConfigFile(*path);
    if (auto device = args.value("--device")) config.device = *device;
    config.train.steps = static_cast<int>(args.integer("--steps", 1, 1000).value_or(3));
    config.optim.warmupSteps = std::min(config.optim.warmupSteps, config.train.steps);
    // Validation only at the end: it runs between steps and is not part of any phase.
    config.train.evalEvery = config.train.steps;
    config.train.checkpointEvery = 0;

    const bool trace = args.flag("--trace");
    if (trace) config.train.threads = 1; // the trace's bookkeeping is single-threaded

    // Refused once here, not once by each rank it would start.
    if (auto problem = planningOnlyFieldsProblem(config); !problem.empty()) throw InputError(problem);

    // Data parallel: --nproc N starts N ranks of this command; each measures
    // its own process, and rank 0 reports every rank's peak.
    const auto nproc = args.integer("--nproc", 1, 1024);
    const auto launched = distLaunchFromEnvironment();
    if (launched && nproc) {
        throw InputError("--nproc starts the ranks itself, but this process is already " + launched->describe()
                         + ": leave --nproc out under torchrun or srun");
    }
    // As train: --nproc, else the config's train.world_size.
    const int processes = nproc ? static_cast<int>(*nproc) : config.train.worldSize;
    if (!launched && nproc && config.train.worldSize != 1 && config.train.worldSize != *nproc) {
        throw InputError("--nproc is " + std::to_string(*nproc) + " but the config's train.world_size is "
                         + std::to_string(config.train.worldSize) + ": give one of them");
    }
    if (!launched && processes > 1) {
        if (trace) throw InputError("--trace follows one process's allocations: measure one process (no --nproc, train.world_size 1)");
        RankLaunch launch;
        launch.processes = processes;
        launch.timeoutSeconds = config.train.distTimeoutS;
        launch.args = {"measure", "--config", *path};
        for (const char* option : {"--device", "--steps"}) {
            if (auto v = args.value(option)) {
                launch.args.push_back(option);
                launch.args.push_back(*v);
            }
        }
        if (args.flag("--json")) launch.args.push_back("--json");
        return launchRanks(launch);
    }

    TrainerOptions options;
    options.measureMemory = true;
    options.recordPhaseMemory = true;
    if (launched) {
        if (trace) throw InputError("--trace follows one process's allocations: run it without torchrun or srun");
        if (config.train.worldSize != 1 && config.train.worldSize != launched->worldSize) {
            throw InputError("train.world_size is " + std::to_string(config.train.worldSize) + " but WORLD_SIZE is "
                             + std::to_string(launched->worldSize) + ": start as many processes as the config says");
        }
        config.train.worldSize = launched->worldSize;
        options.dist = *launched;
        options.dist.timeoutSeconds = config.train.distTimeoutS;
    }
    // Each rank's peak over the steps (data parallel; shared every step).
    std::vector<std::int64_t> rankPeaks;
    config.train.logEvery = 1;
    TrainerCallbacks callbacks;
    callbacks.onStep = [&](const StepMetrics& s) {
        rankPeaks.resize(std::max(rankPeaks.size(), s.rankPeakBytes.size()), 0);
        for (std::size_t r = 0; r < s.rankPeakBytes.size(); ++r) rankPeaks[r] = std::max(rankPeaks[r], s.rankPeakBytes[r]);
    };
    Trainer trainer(config, options);
    std::unique_ptr<OpTracker> tracker;
    if (trace) {
        tracker = std::make_unique<OpTracker>();
        MemoryProbe::setCpuTrace(&printAllocation);
    }
    const auto result = trainer.run(callbacks);
    MemoryProbe::setCpuTrace(nullptr);
    tracker.reset();
    if (result.status == TrainResult::Status::Failed) {
        std::cerr << "measure: the run failed: " << result.message << "\n";
        return kExitFailed;
    }
    std::int64_t peak = 0;
    for (const auto& p : result.phaseMemory) peak = std::max(peak, p.peakBytes);
    // Only rank 0 reports; the others measured for it.
    if (launched && launched->rank > 0) return kExitOk;
    int largestRank = 0;
    for (std::size_t r = 0; r < rankPeaks.size(); ++r) {
        if (rankPeaks[r] > rankPeaks[static_cast<std::size_t>(largestRank)]) largestRank = static_cast<int>(r);
    }
    // Data parallel: the figure the per-GPU plan is checked against is the largest rank's.
    if (!rankPeaks.empty()) peak = rankPeaks[static_cast<std::size_t>(largestRank)];

    if (args.flag("--json")) {
        nlohmann::json steps = nlohmann::json::array();
        nlohmann::json phasePeaks = nlohmann::json::object();
        for (const auto& p : result.phaseMemory) {
            if (steps.empty() || steps.back()["step"] != p.step) steps.push_back({{"step", p.step}, {"phases", nlohmann::json::object()}});
            steps.back()["phases"][p.phase] = {{"start_bytes", p.startBytes}, {"peak_bytes", p.peakBytes}, {"end_bytes", p.endBytes}};
            auto& best = phasePeaks[p.phase];
            best = std::max(best.is_number() ? best.get<std::int64_t>() : std::int64_t{0}, p.peakBytes);
        }
        nlohmann::json out = {{"device", trainer.device()},
                              {"precision", trainer.precision()},
                              {"parameters", trainer.parameterCount()},
                              {"trainable_parameters", trainer.trainableParameterCount()},
                              {"peak_bytes", peak},
                              {"world_size", std::max<std::size_t>(1, rankPeaks.size())},
                              {"phase_peak_bytes", phasePeaks},
                              {"steps", steps}};
        if (!rankPeaks.empty()) {
            out["rank_peak_bytes"] = rankPeaks;
            out["largest_rank"] = largestRank;
        }
        std::cout << out.dump(2) << "\n";
        return kExitOk;
    }
    std::printf("%s, precision %s, %lld parameters (%lld trainable)\n", trainer.device().c_str(),
                trainer.precision().c_str(), static_cast<long long>(trainer.parameterCount()),
                static_cast<long long>(trainer.trainableParameterCount()));
    if (!rankPeaks.empty()) std::printf("%zu processes; the phases below are rank 0's\n", rankPeaks.size());
    std::printf("%5s  %-9s  %12s  %12s  %12s\n", "step", "phase", "start MiB", "peak MiB", "end MiB");
    for (const auto& p : result.phaseMemory) {
        std::printf("%5d  %-9s  %12.3f  %12.3f  %12.3f\n", p.step, p.phase.c_str(), mib(p.startBytes), mib(p.peakBytes),
                    mib(p.endBytes));
    }
    for (std::size_t r = 0; r < rankPeaks.size(); ++r) {
        std::printf("rank %zu peak: %lld bytes (%.3f MiB)%s\n", r, static_cast<long long>(rankPeaks[r]), mib(rankPeaks[r]),
                    static_cast<int>(r) == largestRank ? ", the largest" : "");
    }
    std::printf("peak: %lld bytes (%.3f MiB) of tensors%s\n", static_cast<long long>(peak), mib(peak),
                rankPeaks.empty() ? "" : ", per process (the largest rank's)");
    return kExitOk;
}

const CommandRegistration measureRegistration{Command{
    "measure",
    "Run a few training steps and report the tensor memory of each phase (no run is stored).",
    "--config FILE [--steps N] [--device D] [--nproc N] [--json]",
    {{"--config", true, "the experiment config (JSON)", "FILE"},
     {"--steps", true, "training steps to run (default 3: the first step and steady state)", "N"},
     {"--device", true, "override the config's device: auto, cpu, cuda, cuda:N", "D"},
     {"--nproc", true, "data parallel: measure N processes, one per rank, and report each rank's peak", "N"},
     {"--trace", false, "print every CPU tensor allocation and release with the operator that made it"},
     {"--json", false, "print JSON: peak_bytes, phase_peak_bytes and every step's phases"}},
    &measure}};

} // namespace
} // namespace tb::cli
