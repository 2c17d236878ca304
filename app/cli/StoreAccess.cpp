#include "StoreAccess.h"

#include <filesystem>

#include "common/Errors.h"

namespace tb::cli {

std::unique_ptr<RunStore> openExistingStore(const std::string& dbOption)
{
    const std::string path = dbOption.empty() ? RunStore::defaultPath() : dbOption;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        throw InputError("no experiment database at " + path + " yet; train a run first or point --db at one");
    }
    return std::make_unique<RunStore>(path, RunStore::Mode::ReadOnly);
}

std::unique_ptr<RunStore> openExistingStoreForWriting(const std::string& dbOption)
{
    const std::string path = dbOption.empty() ? RunStore::defaultPath() : dbOption;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        throw InputError("no experiment database at " + path + " yet; train a run first or point --db at one");
    }
    return std::make_unique<RunStore>(path);
}

void refuseStoreOutput(RunStore& store, const std::string& outputPath)
{
    namespace fs = std::filesystem;
    const auto resolved = [](const fs::path& p) {
        std::error_code e;
        auto r = fs::weakly_canonical(fs::absolute(p, e), e);
        return e ? fs::absolute(p, e).lexically_normal() : r;
    };
    const auto out = resolved(outputPath);
    const auto refuse = [&](const std::string& what) {
        throw InputError("--output " + outputPath + " would overwrite " + what + "; choose another file");
    };
    const auto db = resolved(store.path());
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
        if (out == resolved(db.string() + suffix)) refuse("the experiment database " + db.string() + suffix);
    }
    const auto inside = [&](const fs::path& folder) {
        const auto rel = out.lexically_relative(folder);
        return !rel.empty() && *rel.begin() != ".." && rel != ".";
    };
    // Every checkpoint of this database lives in that folder (schema 2 moved the old ones in).
    if (inside(resolved(fs::path(store.runFolder(0)).parent_path()))) refuse("the database's checkpoint folder");
}

TrainedRun trainedRun(RunStore& store, std::int64_t runId, const std::string& checkpointOption)
{
    const auto record = store.run(runId);
    const std::string label = "run " + std::to_string(runId);
    if (!record) throw InputError(label + " does not exist in " + store.path() + "; 'trainbench-cli runs' lists the runs");
    TrainedRun out{parseConfig(record->configJson, label + "'s stored config"), checkpointOption};
    if (out.checkpoint.empty()) {
        const auto latest = store.latestCheckpoint(runId);
        if (!latest) throw InputError(label + " has no checkpoint yet (it saves one when it ends or is stopped)");
        out.checkpoint = latest->path;
    }
    std::error_code ec;
    if (!std::filesystem::exists(out.checkpoint, ec)) {
        throw InputError("checkpoint " + out.checkpoint + " of " + label + " is missing (moved or deleted?)");
    }
    return out;
}

SweepRecord newSweepRecord(const std::string& specText, const SweepSpec& spec, const RunConfig& base)
{
    const auto trials = sweepTrials(spec);
    SweepRecord r;
    r.name = spec.name.empty() ? base.name + " sweep" : spec.name;
    r.specJson = specText;
    r.configJson = configToJson(base);
    r.baseDir = base.baseDir;
    for (const auto& t : trials) {
        (void)trialConfig(base, t);
        SweepTrialRecord tr;
        tr.trial = t.index;
        tr.valuesJson = t.toJson();
        r.trials.push_back(std::move(tr));
    }
    return r;
}

} // namespace tb::cli
