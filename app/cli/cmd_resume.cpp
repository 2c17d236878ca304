// trainbench-cli resume: continue a cancelled or interrupted run from its last checkpoint.
#include <filesystem>

#include "Command.h"
#include "Progress.h"
#include "Ranks.h"
#include "common/Errors.h"
#include "dist/DistLaunch.h"

namespace tb::cli {
namespace {

int resume(const Args& args)
{
    SessionOptions options;
    options.dbPath = args.value("--db").value_or("");
    const auto runId = args.runId();
    const std::string db = options.dbPath.empty() ? RunStore::defaultPath() : options.dbPath;
    const std::string label = "run " + std::to_string(runId);
    // A data-parallel run resumes with the world size it trained with: its
    // global batch (world size x train.batch_size) and data order stay as they were.
    int world = 1;
    bool known = false;
    RunConfig stored;
    std::string checkpoint;
    std::error_code ec;
    if (std::filesystem::exists(db, ec)) { // otherwise RunSession::resume says what is wrong
        RunStore store(db, RunStore::Mode::ReadOnly);
        if (const auto record = store.run(runId)) {
            known = true;
            stored = parseConfig(record->configJson, label + "'s stored config");
            world = stored.train.worldSize;
            if (const auto c = store.latestCheckpoint(runId)) checkpoint = c->path;
        }
    }
    const auto nproc = args.integer("--nproc", 1, 1024);
    if (!known) {
        // RunSession::resume says what is wrong (no such run, no store).
        auto session = RunSession::resume(runId, options);
        return runWithProgress(*session, args.flag("--quiet"), runIdWriter(args.value("--run-id-file").value_or("")));
    }
    if (nproc && *nproc != world) {
        throw InputError(label + " trained with " + std::to_string(world) + " process(es) (train.world_size " + std::to_string(world)
                         + "); it resumes with the same number, so that its global batch and data order stay as they were: "
                           "leave out --nproc or give --nproc " + std::to_string(world));
    }
    const auto launched = distLaunchFromEnvironment();
    if (launched) {
        if (launched->worldSize != world) {
            throw InputError(label + " trained with world size " + std::to_string(world) + " but WORLD_SIZE is "
                             + std::to_string(launched->worldSize) + ": resume it with " + std::to_string(world) + " process(es)");
        }
        if (launched->rank > 0) {
            // Rank 0 checks the run and claims it; the others load the same checkpoint.
            if (checkpoint.empty()) throw InputError(label + " has no checkpoint to resume from");
            RankOptions ro;
            ro.resumeFrom = checkpoint;
            return trainAsRank(stored, *launched, ro);
        }
        options.dist = *launched;
    } else if (world > 1) {
        RankLaunch launch;
        launch.processes = world;
        launch.timeoutSeconds = stored.train.distTimeoutS;
        launch.args = {"resume", std::to_string(runId), "--db", db};
        if (args.flag("--quiet")) launch.args.push_back("--quiet");
        if (auto file = args.value("--run-id-file")) {
            launch.args.push_back("--run-id-file");
            launch.args.push_back(*file);
        }
        return launchRanks(launch);
    }
    auto session = RunSession::resume(runId, options);
    return runWithProgress(*session, args.flag("--quiet"), runIdWriter(args.value("--run-id-file").value_or("")));
}

const CommandRegistration resumeRegistration{Command{
    "resume",
    "Continue a cancelled or interrupted run from its last checkpoint (a data-parallel run with as many processes as it had).",
    "RUN_ID [--db FILE] [--nproc N] [--run-id-file FILE]",
    {{"--db", true, "experiment database", "FILE"},
     {"--nproc", true, "the processes of a data-parallel run (it must be the number it trained with; started by default)", "N"},
     {"--quiet", false, "print only the final summary"},
     {"--run-id-file", true, "write the run's id to FILE once it trains again (for scripts and the window)", "FILE"}},
    &resume}};

} // namespace
} // namespace tb::cli
