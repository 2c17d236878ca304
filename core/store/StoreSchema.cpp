// The store's schema: its migrations, and the columns a RunRecord is read from.
#include "store/StoreSchema.h"

#include "store/RunLiveness.h"

namespace tb::store_detail {
namespace {

// Forward migrations: entry i takes the schema from version i to i + 1.
const char* const kMigrationSql[] = {
    R"sql(
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at REAL NOT NULL,
  started_at REAL,
  ended_at REAL,
  config_json TEXT NOT NULL,
  device TEXT NOT NULL DEFAULT '',
  precision TEXT NOT NULL DEFAULT '',
  app_version TEXT NOT NULL DEFAULT '',
  torch_version TEXT NOT NULL DEFAULT '',
  steps_total INTEGER NOT NULL DEFAULT 0,
  steps_done INTEGER NOT NULL DEFAULT 0,
  final_loss REAL,
  final_val_loss REAL,
  final_val_accuracy REAL,
  message TEXT NOT NULL DEFAULT '',
  owner_pid INTEGER,
  owner_start TEXT,
  owner_host TEXT,
  heartbeat_at REAL);
CREATE TABLE metrics(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  key TEXT NOT NULL,
  value REAL,
  wall_time REAL NOT NULL);
CREATE INDEX metrics_by_run_key_step ON metrics(run_id, key, step);
CREATE TABLE latest_metrics(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  step INTEGER NOT NULL,
  value REAL,
  wall_time REAL NOT NULL,
  PRIMARY KEY(run_id, key)) WITHOUT ROWID;
CREATE TABLE events(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  time REAL NOT NULL,
  severity TEXT NOT NULL,
  kind TEXT NOT NULL,
  message TEXT NOT NULL);
CREATE INDEX events_by_run ON events(run_id, time);
CREATE TABLE artifacts(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL,
  step INTEGER NOT NULL,
  path TEXT NOT NULL,
  bytes INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL);
CREATE INDEX artifacts_by_run ON artifacts(run_id, kind, step);
)sql",
    // 2: one row per (run, key, step), so a retried metric batch never
    // duplicates one (older duplicates: the last written wins); the owner's
    // PID namespace, so liveness is judged by pid only where pids compare.
    R"sql(
DELETE FROM metrics WHERE rowid NOT IN (SELECT max(rowid) FROM metrics GROUP BY run_id, key, step);
DROP INDEX metrics_by_run_key_step;
CREATE UNIQUE INDEX metrics_by_run_key_step ON metrics(run_id, key, step);
ALTER TABLE runs ADD COLUMN owner_pidns TEXT;
)sql",
    // 3: every run is its own check of the memory planner: the estimate made
    // at launch (peak tensor bytes and its terms as JSON) beside the largest
    // measured peak (kept up to date from the mem_peak_bytes metric).
    R"sql(
ALTER TABLE runs ADD COLUMN estimated_peak_bytes INTEGER;
ALTER TABLE runs ADD COLUMN estimate_json TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN measured_peak_bytes INTEGER;
UPDATE runs SET measured_peak_bytes =
  (SELECT max(value) FROM metrics WHERE metrics.run_id = runs.id AND metrics.key = 'mem_peak_bytes');
)sql",
    // 4: history: a note and tags per run.
    R"sql(
ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT '';
CREATE TABLE run_tags(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  tag TEXT NOT NULL,
  PRIMARY KEY(run_id, tag)) WITHOUT ROWID;
CREATE INDEX run_tags_by_tag ON run_tags(tag, run_id);
-- Ids of deleted runs are never given again (a config's "init_from": "run:7"
-- must not come to mean another run).
CREATE TABLE deleted_runs(id INTEGER PRIMARY KEY, deleted_at REAL NOT NULL);
)sql",
    // 5: metrics stored in (run, key, step) order (WITHOUT ROWID): a series
    // is one range of the table, read without a lookup per point.
    R"sql(
CREATE TABLE metrics_v5(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  step INTEGER NOT NULL,
  value REAL,
  wall_time REAL NOT NULL,
  PRIMARY KEY(run_id, key, step)) WITHOUT ROWID;
INSERT INTO metrics_v5(run_id, key, step, value, wall_time) SELECT run_id, key, step, value, wall_time FROM metrics;
DROP TABLE metrics;
ALTER TABLE metrics_v5 RENAME TO metrics;
-- Per 128 steps of each series: first, last, lowest and highest point, kept
-- with the metrics, so a long series is drawn from a few thousand rows.
CREATE TABLE metric_blocks(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  block INTEGER NOT NULL,
  first_step INTEGER NOT NULL, first_value REAL, first_wall REAL NOT NULL,
  last_step INTEGER NOT NULL, last_value REAL, last_wall REAL NOT NULL,
  min_step INTEGER NOT NULL, min_value REAL, min_wall REAL NOT NULL,
  max_step INTEGER NOT NULL, max_value REAL, max_wall REAL NOT NULL,
  PRIMARY KEY(run_id, key, block)) WITHOUT ROWID;
)sql",
    // 6: diagnostics kept with the run: the preflight findings at launch
    // (overridden = launched anyway) and the explanation of a failure.
    R"sql(
CREATE TABLE run_findings(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  source TEXT NOT NULL,
  time REAL NOT NULL,
  overridden INTEGER NOT NULL DEFAULT 0,
  findings_json TEXT NOT NULL);
CREATE INDEX run_findings_by_run ON run_findings(run_id, id);
)sql",
    // 7: runs copied from another store (fetch, import-run) keep their
    // origin: the machine, the store there and the run's id in it. A copy
    // fetched again replaces itself.
    R"sql(
ALTER TABLE runs ADD COLUMN origin_host TEXT;
ALTER TABLE runs ADD COLUMN origin_store TEXT;
ALTER TABLE runs ADD COLUMN origin_run_id INTEGER;
ALTER TABLE runs ADD COLUMN origin_label TEXT;
CREATE UNIQUE INDEX runs_by_origin ON runs(origin_host, origin_store, origin_run_id) WHERE origin_run_id IS NOT NULL;
)sql",
    // 8: sweeps: the sweep file, the base config and the target it was
    // planned for, and its trials as a queue (each trial's values, status,
    // run and why it was skipped or stopped), so a sweep survives the
    // process that ran it and resumes without running a finished trial twice.
    R"sql(
CREATE TABLE sweeps(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  created_at REAL NOT NULL,
  spec_json TEXT NOT NULL,
  config_json TEXT NOT NULL,
  base_dir TEXT NOT NULL DEFAULT '',
  gpu TEXT NOT NULL DEFAULT '',
  budget_bytes INTEGER NOT NULL DEFAULT 0,
  status TEXT NOT NULL DEFAULT 'running');
CREATE TABLE sweep_trials(
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  trial INTEGER NOT NULL,
  values_json TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending',
  run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  reason TEXT NOT NULL DEFAULT '',
  metric REAL,
  PRIMARY KEY(sweep_id, trial)) WITHOUT ROWID;
CREATE INDEX sweep_trials_by_run ON sweep_trials(run_id) WHERE run_id IS NOT NULL;
)sql",
};

} // namespace

int latestSchema() { return static_cast<int>(sizeof(kMigrationSql) / sizeof(kMigrationSql[0])); }

const char* migrationSql(int from) { return kMigrationSql[from]; }

// The columns readRun() expects. A database opened read-only keeps the
// schema it has (reading never migrates), so what a newer schema added is
// read as NULL or empty there.
std::string runColumns(int schema)
{
    std::string c = "id, name, status, created_at, started_at, ended_at, config_json, device, precision, app_version, "
                    "torch_version, steps_total, steps_done, ";
    c += kShownLossSql;
    c += ", final_val_loss, final_val_accuracy, message, "
                    "heartbeat_at, ";
    c += schema >= 3 ? "estimated_peak_bytes, estimate_json, measured_peak_bytes, "
                     : "NULL, '', (SELECT max(value) FROM metrics m WHERE m.run_id = runs.id AND m.key = 'mem_peak_bytes'), ";
    c += schema >= 4 ? "note, (SELECT group_concat(tag, char(31)) FROM (SELECT tag FROM run_tags WHERE run_id = runs.id "
                       "ORDER BY tag)), "
                     : "'', NULL, ";
    c += schema >= 5 ? "(SELECT min(min_value) FROM metric_blocks b WHERE b.run_id = runs.id AND b.key = 'val_loss'), "
                     : "(SELECT min(value) FROM metrics m WHERE m.run_id = runs.id AND m.key = 'val_loss'), ";
    c += "(SELECT value FROM latest_metrics l WHERE l.run_id = runs.id AND l.key = 'tokens_per_s'), "
         "CASE WHEN json_valid(config_json) THEN json_extract(config_json, '$.train.init_from') END, "
         "owner_pid, owner_start, owner_host, ";
    c += schema >= 2 ? "owner_pidns, " : "NULL, ";
    c += schema >= 7 ? "origin_host, origin_store, origin_run_id, origin_label" : "NULL, NULL, NULL, NULL";
    c += schema >= 8 ? ", (SELECT sweep_id FROM sweep_trials t WHERE t.run_id = runs.id), "
                       "(SELECT trial FROM sweep_trials t WHERE t.run_id = runs.id)"
                     : ", NULL, NULL";
    return c;
}

std::optional<double> optionalDouble(const Statement& s, int i)
{
    if (s.columnIsNull(i)) return std::nullopt;
    return s.columnDouble(i);
}

RunRecord readRun(const Statement& s)
{
    RunRecord r;
    r.id = s.columnInt(0);
    r.name = s.columnText(1);
    r.status = runStatusFromString(s.columnText(2));
    r.createdAt = s.columnDouble(3);
    r.startedAt = optionalDouble(s, 4);
    r.endedAt = optionalDouble(s, 5);
    r.configJson = s.columnText(6);
    r.device = s.columnText(7);
    r.precision = s.columnText(8);
    r.appVersion = s.columnText(9);
    r.torchVersion = s.columnText(10);
    r.stepsTotal = static_cast<int>(s.columnInt(11));
    r.stepsDone = static_cast<int>(s.columnInt(12));
    r.finalLoss = optionalDouble(s, 13);
    r.finalValLoss = optionalDouble(s, 14);
    r.finalValAccuracy = optionalDouble(s, 15);
    r.message = s.columnText(16);
    r.heartbeatAt = optionalDouble(s, 17);
    if (!s.columnIsNull(18)) r.estimatedPeakBytes = s.columnInt(18);
    r.estimateJson = s.columnText(19);
    if (!s.columnIsNull(20)) r.measuredPeakBytes = s.columnInt(20);
    r.note = s.columnText(21);
    r.bestValLoss = optionalDouble(s, 23);
    r.tokensPerSecond = optionalDouble(s, 24);
    if (!s.columnIsNull(25)) {
        // "run:12" or "12" names a run of this store; a path does not.
        std::string from = s.columnText(25);
        if (from.rfind("run:", 0) == 0) from = from.substr(4);
        if (!from.empty() && from.size() <= 18 && from.find_first_not_of("0123456789") == std::string::npos) {
            r.parentRunId = std::stoll(from);
        }
    }
    if (!s.columnIsNull(22)) {
        std::string tags = s.columnText(22);
        for (std::size_t start = 0; start <= tags.size();) {
            const auto end = std::min(tags.find('\x1f', start), tags.size());
            r.tags.push_back(tags.substr(start, end - start));
            start = end + 1;
        }
    }
    if (!s.columnIsNull(32)) {
        r.origin.host = s.columnText(30);
        r.origin.store = s.columnText(31);
        r.origin.runId = s.columnInt(32);
        r.origin.label = s.columnText(33);
    }
    if (!s.columnIsNull(34)) {
        r.sweepId = s.columnInt(34);
        r.sweepTrial = static_cast<int>(s.columnInt(35));
    }
    // What the row says is running may have lost its process: every reader
    // judges it (the same judgement reconciliation writes down).
    // A copy of a run that runs on another machine (fetch, a remote launch)
    // says what that machine said when it was copied; no process here owns it.
    if (r.origin.runId == 0 && (r.status == RunStatus::Running || (r.status == RunStatus::Created && !s.columnIsNull(26)))) {
        RunOwner owner;
        if (!s.columnIsNull(26)) owner.pid = s.columnInt(26);
        if (!s.columnIsNull(27)) owner.start = s.columnText(27);
        if (!s.columnIsNull(28)) owner.host = s.columnText(28);
        owner.pidns = s.columnText(29);
        owner.heartbeatAt = r.heartbeatAt;
        if (ownerGone(owner, wallClockNow())) {
            r.status = RunStatus::Interrupted;
            r.message = interruptedMessage(r.id, owner.pid);
        } else {
            r.ownerPid = owner.pid;
            r.ownerHost = owner.host.value_or("");
        }
    }
    return r;
}

} // namespace tb::store_detail
