// trainbench-cli train: start a run from a config file.
#include "Command.h"
#include "Progress.h"
#include "common/Errors.h"
#include "config/RunConfig.h"
#include "train/OpCounter.h"

#include <cstdio>
#include <memory>

namespace tb::cli {
namespace {

int train(const Args& args)
{
    if (!args.positionals().empty()) {
        throw InputError("'train' takes no positional arguments, got \"" + args.positionals()[0]
                         + "\" (did you mean --config " + args.positionals()[0] + "?)");
    }
    const auto path = args.value("--config");
    if (!path) throw InputError("'train' needs --config FILE (examples are in resources/examples/)");
    RunConfig config = loadConfigFile(*path);
    if (auto device = args.value("--device")) config.device = *device;
    if (auto steps = args.integer("--steps", 1, 1000000000)) {
        config.train.steps = static_cast<int>(*steps);
        config.optim.warmupSteps = std::min(config.optim.warmupSteps, config.train.steps);
    }
    if (auto name = args.value("--name")) config.name = *name;
    if (auto threads = args.integer("--threads", 0, 256)) config.train.threads = static_cast<int>(*threads);
    SessionOptions options;
    options.dbPath = args.value("--db").value_or("");
    options.recordMetrics = !args.flag("--no-metrics");
    options.measureMemory = !args.flag("--no-memory-probe");
    options.bare = args.flag("--bare");
    options.force = args.flag("--force");
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
    const int code = runWithProgress(*session, args.flag("--quiet"));
    if (counter) {
        std::printf("ops: %lld ATen operators dispatched on the training thread\n",
                    static_cast<long long>(counter->total()));
        for (const auto& [name, n] : counter->counts()) std::printf("op %s %lld\n", name.c_str(), static_cast<long long>(n));
    }
    return code;
}

const CommandRegistration registration{Command{
    "train",
    "Train a model from a JSON config and store the run.",
    "--config FILE [--db FILE] [--device D] [--steps N] [--name S] [--force]",
    {{"--config", true, "the experiment config (JSON)", "FILE"},
     {"--db", true, "experiment database (default: $TRAINBENCH_DB, else ~/.local/share/trainbench/experiments.db)",
      "FILE"},
     {"--device", true, "override the config's device: auto, cpu, cuda, cuda:N", "D"},
     {"--steps", true, "override train.steps", "N"},
     {"--name", true, "override the run name", "S"},
     {"--threads", true, "override train.threads (0 = automatic)", "N"},
     {"--quiet", false, "print only the final summary"},
     {"--force", false, "launch even if preflight finds errors (recorded with the run)"},
     {"--no-metrics", false, "do not store per-step metrics (for overhead benchmarks)"},
     {"--no-memory-probe", false, "do not measure tensor memory (for overhead benchmarks)"},
     {"--bare", false, "benchmark baseline: no metrics writer, no per-step callback or loss read, no memory probe"},
     {"--count-ops", false, "benchmark: count the ATen operators the run dispatches and print them at the end"}},
    &train}};

} // namespace
} // namespace tb::cli
