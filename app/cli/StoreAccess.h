#pragma once

#include <memory>
#include <string>

#include "config/RunConfig.h"
#include "store/RunStore.h"

namespace tb::cli {

// Opens the store named by --db (or the default) for reading commands; a
// missing file is an error that says where it looked, not a new empty database.
std::unique_ptr<RunStore> openExistingStore(const std::string& dbOption);

// A stored run's config and the checkpoint to use: `checkpointOption` when
// given, else the run's latest. Throws InputError for an unknown run or one
// without a checkpoint.
struct TrainedRun {
    RunConfig config;
    std::string checkpoint;
};
TrainedRun trainedRun(RunStore& store, std::int64_t runId, const std::string& checkpointOption);

} // namespace tb::cli
