#pragma once
// The store's schema (internal to core/store): the migrations that bring a
// database to the latest version, and how a run's row becomes a RunRecord.

#include <cstdint>
#include <optional>
#include <string>

#include "store/RunStore.h"
#include "store/Sqlite.h"

namespace tb::store_detail {

// Steps summarised by one metric_blocks row.
constexpr std::int64_t kBlockSteps = 128;

// The schema version this Trainbench writes, and the SQL that takes a
// database from version `from` to from + 1.
int latestSchema();
const char* migrationSql(int from);

// A run's loss as every view shows and filters it: its final loss, or, for a
// run that ended without one (interrupted, or still running), its last
// stored loss. An SQL expression over the runs table.
constexpr const char* kShownLossSql =
    "coalesce(final_loss, (SELECT value FROM latest_metrics l WHERE l.run_id = runs.id AND l.key = 'loss'))";

// The columns readRun() expects. A database opened read-only keeps the
// schema it has (reading never migrates), so what a newer schema added is
// read as NULL or empty there.
std::string runColumns(int schema);
// A row selected with runColumns(). A run whose owner process is gone reads
// as interrupted, whether or not the store has written that down yet.
RunRecord readRun(const Statement& s);
std::optional<double> optionalDouble(const Statement& s, int i);

} // namespace tb::store_detail
