#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/RunConfig.h"
#include "store/RunStore.h"
#include "tune/Sweep.h"

namespace tb::cli {

// Opens the store named by --db (or the default) read-only for reading
// commands: a missing file is an error that says where it looked, not a new
// empty database, and nothing in the file changes.
std::unique_ptr<RunStore> openExistingStore(const std::string& dbOption);

// Opens the store named by --db (or the default) for a command that edits
// it; a missing file is an error, not a new database.
std::unique_ptr<RunStore> openExistingStoreForWriting(const std::string& dbOption);

// Refuses (InputError) an output file that is the database, its -wal, -shm or
// -journal, or anything in its checkpoint folder: no command writes over them.
void refuseStoreOutput(RunStore& store, const std::string& outputPath);

// A stored run's config and the checkpoint to use: `checkpointOption` when
// given, else the run's latest. Throws InputError for an unknown run or one
// without a checkpoint.
struct TrainedRun {
    RunConfig config;
    std::string checkpoint;
};
TrainedRun trainedRun(RunStore& store, std::int64_t runId, const std::string& checkpointOption);

// A new sweep as the store keeps it: the sweep file's text and spec, the
// base config, and every trial pending. Each trial's config is validated
// first: a value that makes no valid config is a ConfigError naming the
// trial, and nothing is stored (sweep and slurm --sweep both make it here).
SweepRecord newSweepRecord(const std::string& specText, const SweepSpec& spec, const RunConfig& base);

} // namespace tb::cli
