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
    return std::make_unique<RunStore>(path);
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

} // namespace tb::cli
