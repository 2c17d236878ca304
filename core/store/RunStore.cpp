#include "store/RunStore.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include <cerrno>

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include "store/Sqlite.h"

namespace tb {
namespace {

// Forward migrations: entry i takes the schema from version i to i + 1.
const char* const kMigrations[] = {
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
};
constexpr int kSchemaVersion = static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));
constexpr std::int64_t kBlockSteps = 128; // steps summarised by one metric_blocks row

// The columns readRun() expects. A database opened read-only keeps the
// schema it has (reading never migrates), so what a newer schema added is
// read as NULL or empty there.
std::string runColumns(int schema)
{
    std::string c = "id, name, status, created_at, started_at, ended_at, config_json, device, precision, app_version, "
                    "torch_version, steps_total, steps_done, final_loss, final_val_loss, final_val_accuracy, message, "
                    "heartbeat_at, ";
    c += schema >= 3 ? "estimated_peak_bytes, estimate_json, measured_peak_bytes, "
                     : "NULL, '', (SELECT max(value) FROM metrics m WHERE m.run_id = runs.id AND m.key = 'mem_peak_bytes'), ";
    c += schema >= 4 ? "note, (SELECT group_concat(tag, char(31)) FROM (SELECT tag FROM run_tags WHERE run_id = runs.id "
                       "ORDER BY tag)), "
                     : "'', NULL, ";
    c += schema >= 5 ? "(SELECT min(min_value) FROM metric_blocks b WHERE b.run_id = runs.id AND b.key = 'val_loss'), "
                     : "(SELECT min(value) FROM metrics m WHERE m.run_id = runs.id AND m.key = 'val_loss'), ";
    c += "(SELECT value FROM latest_metrics l WHERE l.run_id = runs.id AND l.key = 'tokens_per_s'), "
         "CASE WHEN json_valid(config_json) THEN json_extract(config_json, '$.train.init_from') END";
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
    return r;
}

// Start time of a process in clock ticks since boot (field 22 of
// /proc/PID/stat): with the pid it identifies a process across pid reuse.
// Empty when the process does not exist or is a zombie.
std::string processStartTime(long pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!in || !std::getline(in, line)) return {};
    const auto close = line.rfind(')');
    if (close == std::string::npos) return {};
    std::istringstream fields(line.substr(close + 2));
    std::string field, state;
    fields >> state;
    if (state == "Z" || state == "X") return {};
    // After the state come fields 4..; the start time is field 22.
    for (int i = 4; i <= 22 && (fields >> field); ++i) {
    }
    return field;
}

// The PID namespace of this process ("pid:[4026531836]"); empty when /proc
// is not readable. Pids of two processes compare only within one namespace.
std::string pidNamespace()
{
    std::error_code ec;
    const auto target = std::filesystem::read_symlink("/proc/self/ns/pid", ec);
    return ec ? std::string() : target.string();
}

enum class Liveness { Alive, Dead, Unknown };

// Whether the process `pid` that started at `start` (clock ticks since boot)
// still runs. Unknown when pids cannot be compared from here: /proc hidden
// (hidepid) or unreadable, or the owner in another PID namespace.
Liveness processLiveness(long pid, const std::string& start, const std::string& ownerNamespace)
{
    const std::string ours = pidNamespace();
    if (pid <= 0 || ours.empty() || ownerNamespace != ours) return Liveness::Unknown;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return Liveness::Dead;
    // The pid exists (or we may not signal it): compare its start time to
    // tell it from a later process that reused the pid.
    if (!std::ifstream("/proc/" + std::to_string(pid) + "/stat")) return Liveness::Unknown;
    const auto now = processStartTime(pid);
    if (now.empty()) return Liveness::Dead; // a zombie
    return now == start ? Liveness::Alive : Liveness::Dead;
}

std::string hostName()
{
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
    return name;
}

} // namespace

double wallClockNow()
{
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string runStatusName(RunStatus status)
{
    switch (status) {
    case RunStatus::Created: return "created";
    case RunStatus::Running: return "running";
    case RunStatus::Finished: return "finished";
    case RunStatus::Failed: return "failed";
    case RunStatus::Cancelled: return "cancelled";
    case RunStatus::Interrupted: return "interrupted";
    }
    return "created";
}

RunStatus runStatusFromString(const std::string& text)
{
    for (auto s : {RunStatus::Created, RunStatus::Running, RunStatus::Finished, RunStatus::Failed,
                   RunStatus::Cancelled, RunStatus::Interrupted}) {
        if (runStatusName(s) == text) return s;
    }
    return RunStatus::Failed;
}

int RunStore::schemaVersion() { return kSchemaVersion; }

std::string RunStore::defaultPath()
{
    if (const char* env = std::getenv("TRAINBENCH_DB"); env && *env) return env;
    std::filesystem::path base;
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) {
        base = xdg;
    } else if (const char* home = std::getenv("HOME"); home && *home) {
        base = std::filesystem::path(home) / ".local" / "share";
    } else {
        base = std::filesystem::temp_directory_path();
    }
    return (base / "trainbench" / "experiments.db").string();
}

RunStore::RunStore(const std::string& path, Mode mode) : m_path(path), m_readOnly(mode == Mode::ReadOnly)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        throw StoreError("experiment database " + path + " is a folder; give a file path with --db or TRAINBENCH_DB");
    }
    const bool existed = fs::exists(path, ec);
    if (m_readOnly && !existed) {
        throw StoreError("experiment database " + path + " does not exist yet; run an experiment first, or give --db");
    }
    if (!existed) {
        const auto parent = fs::absolute(path, ec).parent_path();
        fs::create_directories(parent, ec);
        if (ec) {
            throw StoreError("cannot create the folder " + parent.string() + " for the experiment database ("
                             + ec.message() + "); choose another location with --db or TRAINBENCH_DB");
        }
    }
    try {
        m_db = std::make_unique<Database>(path, m_readOnly ? Database::Mode::ReadOnly : Database::Mode::ReadWrite);
    } catch (const StoreError&) {
        throw StoreError("cannot open or create the experiment database " + path
                         + " (is its folder writable?); choose another location with --db or TRAINBENCH_DB");
    }
    if (!m_readOnly && sqlite3_db_readonly(m_db->handle(), "main") == 1) {
        throw StoreError("experiment database " + path
                         + " is read-only; make it writable (chmod u+w) or choose another file with --db");
    }
    if (m_readOnly) {
        // A WAL database in a folder we cannot write (no -shm to create) can
        // only be read as an immutable file.
        try {
            Statement probe(*m_db, "PRAGMA user_version");
            probe.step();
        } catch (const std::exception&) {
            const int code = sqlite3_errcode(m_db->handle()) & 0xff;
            if (code == SQLITE_CANTOPEN || code == SQLITE_READONLY) {
                m_db.reset();
                m_db = std::make_unique<Database>(path, Database::Mode::ReadOnlyImmutable);
            }
        }
    }
    try {
        Statement version(*m_db, "PRAGMA user_version");
        version.step();
        const int found = static_cast<int>(version.columnInt(0));
        m_schema = found;
        if (found > kSchemaVersion) {
            throw StoreError("experiment database " + path + " was written by a newer Trainbench (schema "
                             + std::to_string(found) + ", this one reads up to " + std::to_string(kSchemaVersion)
                             + "); update Trainbench or use another --db");
        }
    } catch (const StoreError& e) {
        const int code = sqlite3_errcode(m_db->handle()) & 0xff;
        if (code == SQLITE_NOTADB) {
            throw StoreError(path + " is not a Trainbench experiment database (not an SQLite file); it was left "
                                    "untouched. Choose another file with --db or TRAINBENCH_DB");
        }
        throw;
    }
    verifyOwnership();
    if (m_readOnly) {
        // Reading commands never write, not even a schema into an empty file.
        Statement tables(*m_db, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='runs'");
        tables.step();
        if (tables.columnInt(0) == 0) {
            throw StoreError(path + " holds no Trainbench runs yet (an empty database); it was left untouched. "
                                    "Train a run into it first, or choose another file with --db");
        }
    } else {
        // Several processes opening a new database at once can meet SQLite's
        // deadlock avoidance (busy without waiting) while one switches it to
        // WAL or creates the schema: retry those for a while.
        retryWhileBusy([&] {
            Statement mode(*m_db, "PRAGMA journal_mode");
            const bool wal = mode.step() && mode.columnText(0) == "wal";
            mode.reset();
            if (!wal) m_db->exec("PRAGMA journal_mode=WAL");
            m_db->exec("PRAGMA synchronous=NORMAL");
            migrate();
        }, std::chrono::seconds(30), std::chrono::milliseconds(10));
        m_schema = kSchemaVersion;
        try {
            reconcileInterrupted();
        } catch (const StoreBusyError&) {
            // Best effort: another process holds the write lock; the next open reconciles.
        }
    }
    m_db->exec("PRAGMA foreign_keys=ON");
}

RunStore::~RunStore() = default;

Database& RunStore::database() { return *m_db; }

void RunStore::verifyOwnership()
{
    // Someone else's SQLite file (tables but none of ours) is refused before
    // anything, even the journal mode, is written to it.
    Statement tables(*m_db, "SELECT count(*), sum(name='runs') FROM sqlite_master WHERE type='table'");
    tables.step();
    if (tables.columnInt(0) > 0 && tables.columnInt(1) == 0) {
        throw StoreError(m_path + " is an SQLite file of another program, not a Trainbench experiment "
                                  "database; it was left untouched. Choose another file with --db");
    }
}

void RunStore::migrate()
{
    Statement version(*m_db, "PRAGMA user_version");
    const auto read = [&] {
        version.step();
        const int v = static_cast<int>(version.columnInt(0));
        version.reset();
        return v;
    };
    // Up to date: no write lock needed (another process may hold it for long).
    if (read() >= kSchemaVersion) return;
    // Read again inside the write transaction: of several processes opening
    // a new database at once, exactly one creates the schema.
    Transaction tx(*m_db);
    const int found = read();
    if (found >= kSchemaVersion) return;
    for (int current = found; current < kSchemaVersion; ++current) {
        m_db->exec(kMigrations[current]);
        if (current + 1 == 2) relocateLegacyCheckpoints();
        if (current + 1 == 5) {
            // Summarise the series already stored, block by block.
            std::vector<std::tuple<std::int64_t, std::string, std::int64_t>> blocks;
            Statement s(*m_db, ("SELECT DISTINCT run_id, key, step / " + std::to_string(kBlockSteps) + " FROM metrics").c_str());
            while (s.step()) blocks.emplace_back(s.columnInt(0), s.columnText(1), s.columnInt(2));
            s.reset();
            for (const auto& [run, key, block] : blocks) rebuildBlock(run, key, block);
        }
    }
    m_db->exec("PRAGMA user_version=" + std::to_string(kSchemaVersion));
    tx.commit();
}

void RunStore::relocateLegacyCheckpoints()
{
    // Schema 1 kept checkpoints in <folder>/runs/<id>, shared by every
    // database in the folder. Each database now has <file>-runs/<id>. The
    // legacy file stays where it is (another database may point at it); this
    // one gets a hard link (or a copy) under its own folder.
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto legacy = (fs::absolute(m_path, ec).parent_path() / "runs").lexically_normal();
    std::vector<std::pair<std::int64_t, std::string>> moved; // artifact id, new path
    {
        Statement s(*m_db, "SELECT id, run_id, path FROM artifacts");
        while (s.step()) {
            const fs::path old = fs::path(s.columnText(2)).lexically_normal();
            const auto rel = old.lexically_relative(legacy);
            if (rel.empty() || *rel.begin() == ".." || !fs::exists(old, ec)) continue;
            const fs::path target = fs::path(runFolder(s.columnInt(1))) / old.filename();
            fs::create_directories(target.parent_path(), ec);
            if (!fs::exists(target, ec)) {
                fs::create_hard_link(old, target, ec);
                if (ec) fs::copy_file(old, target, ec);
            }
            if (!ec) moved.emplace_back(s.columnInt(0), target.string());
        }
    }
    Statement u(*m_db, "UPDATE artifacts SET path=? WHERE id=?");
    for (const auto& [id, path] : moved) {
        u.bind(1, path).bind(2, id);
        u.run();
    }
}

std::string RunStore::runFolder(std::int64_t runId) const
{
    // Next to the database and named after it, like SQLite's own -wal and
    // -shm: two databases in one folder never share a checkpoint folder.
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto file = fs::absolute(m_path, ec).lexically_normal();
    return (file.parent_path() / (file.filename().string() + "-runs") / std::to_string(runId)).string();
}

std::int64_t RunStore::createRun(const NewRun& run)
{
    // The owner is recorded from the start: a process killed while it builds
    // the trainer leaves a run that reconciliation can find, not one
    // "created" forever.
    const long pid = static_cast<long>(getpid());
    const double now = wallClockNow();
    // A fresh id: past every run there is and every one deleted (one
    // statement, so two processes creating runs never get the same id).
    Statement s(*m_db, "INSERT INTO runs(name, status, created_at, config_json, device, precision, app_version, "
                       "torch_version, steps_total, owner_pid, owner_start, owner_host, owner_pidns, heartbeat_at, id) "
                       "VALUES(?, 'created', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                       "1 + max(coalesce((SELECT max(id) FROM runs), 0), coalesce((SELECT max(id) FROM deleted_runs), 0)))");
    s.bind(1, run.name).bind(2, now).bind(3, run.configJson).bind(4, run.device).bind(5, run.precision);
    s.bind(6, run.appVersion).bind(7, run.torchVersion).bind(8, run.stepsTotal).bind(9, static_cast<std::int64_t>(pid));
    s.bind(10, processStartTime(pid)).bind(11, hostName()).bind(12, pidNamespace()).bind(13, now);
    s.run();
    return m_db->lastInsertId();
}

void RunStore::claimRun(std::int64_t runId)
{
    // One conditional UPDATE: of two processes resuming one run, exactly one
    // changes the row; the other is told who has it.
    const long pid = static_cast<long>(getpid());
    const double now = wallClockNow();
    Statement s(*m_db, "UPDATE runs SET status='running', ended_at=NULL, owner_pid=?, owner_start=?, owner_host=?, "
                       "owner_pidns=?, heartbeat_at=?, message='' WHERE id=? AND status NOT IN ('running', 'finished')");
    s.bind(1, static_cast<std::int64_t>(pid)).bind(2, processStartTime(pid)).bind(3, hostName());
    s.bind(4, pidNamespace()).bind(5, now).bind(6, runId);
    s.run();
    if (m_db->changes() == 1) return;
    Statement q(*m_db, "SELECT status, owner_pid, owner_host FROM runs WHERE id=?");
    q.bind(1, runId);
    const std::string label = "run " + std::to_string(runId);
    if (!q.step()) throw InputError(label + " does not exist in " + m_path + "; 'trainbench-cli runs' lists the runs");
    if (q.columnText(0) == "finished") throw InputError(label + " already finished; there is nothing to resume");
    std::string owner = q.columnIsNull(1) ? "another process" : "pid " + std::to_string(q.columnInt(1));
    if (!q.columnIsNull(1) && q.columnText(2) != hostName()) owner += " on " + q.columnText(2);
    throw InputError(label + " is already running (" + owner + ")");
}

void RunStore::markRunning(std::int64_t runId, int stepsTotal, const std::string& device, const std::string& precision)
{
    const long pid = static_cast<long>(getpid());
    Statement s(*m_db, "UPDATE runs SET status='running', started_at=coalesce(started_at, ?), ended_at=NULL, "
                       "steps_total=?, device=?, precision=?, owner_pid=?, owner_start=?, owner_host=?, "
                       "owner_pidns=?, heartbeat_at=?, message='' WHERE id=?");
    const double now = wallClockNow();
    s.bind(1, now).bind(2, stepsTotal).bind(3, device).bind(4, precision).bind(5, static_cast<std::int64_t>(pid));
    s.bind(6, processStartTime(pid)).bind(7, hostName()).bind(8, pidNamespace()).bind(9, now).bind(10, runId);
    s.run();
}

void RunStore::markEnded(std::int64_t runId, RunStatus status, const RunSummary& summary)
{
    Statement s(*m_db, "UPDATE runs SET status=?, ended_at=?, steps_done=max(steps_done, ?), "
                       "final_loss=coalesce(?, final_loss), final_val_loss=coalesce(?, final_val_loss), "
                       "final_val_accuracy=coalesce(?, final_val_accuracy), message=?, owner_pid=NULL WHERE id=?");
    s.bind(1, runStatusName(status)).bind(2, wallClockNow()).bind(3, summary.stepsDone).bind(4, summary.finalLoss);
    s.bind(5, summary.finalValLoss).bind(6, summary.finalValAccuracy).bind(7, summary.message).bind(8, runId);
    s.run();
}

void RunStore::setEstimate(std::int64_t runId, std::int64_t peakBytes, const std::string& estimateJson)
{
    Statement s(*m_db, "UPDATE runs SET estimated_peak_bytes=?, estimate_json=? WHERE id=?");
    s.bind(1, peakBytes).bind(2, estimateJson).bind(3, runId);
    s.run();
}

void RunStore::heartbeat(std::int64_t runId, int stepsDone)
{
    Statement s(*m_db, "UPDATE runs SET heartbeat_at=?, steps_done=max(steps_done, ?) WHERE id=?");
    s.bind(1, wallClockNow()).bind(2, stepsDone).bind(3, runId);
    s.run();
}

void RunStore::insertMetrics(const std::vector<MetricPoint>& points)
{
    if (points.empty()) return;
    // Upsert: a batch retried after a failure never duplicates a row.
    Statement insert(*m_db, "INSERT INTO metrics(run_id, step, key, value, wall_time) VALUES(?, ?, ?, ?, ?) "
                            "ON CONFLICT(run_id, key, step) DO UPDATE SET value=excluded.value, "
                            "wall_time=excluded.wall_time");
    std::map<std::pair<std::int64_t, std::string>, const MetricPoint*> latest;
    std::map<std::int64_t, double> peaks; // the largest mem_peak_bytes of each run in the batch
    std::set<std::tuple<std::int64_t, std::string, std::int64_t>> blocks; // touched (run, key, block)
    for (const auto& p : points) {
        insert.bind(1, p.runId).bind(2, p.step).bind(3, p.key).bind(4, p.value).bind(5, p.wallTime);
        insert.run();
        blocks.emplace(p.runId, p.key, p.step / kBlockSteps);
        auto& slot = latest[{p.runId, p.key}];
        if (!slot || slot->step <= p.step) slot = &p;
        if (p.key == "mem_peak_bytes") {
            auto [it, fresh] = peaks.emplace(p.runId, p.value);
            if (!fresh) it->second = std::max(it->second, p.value);
        }
    }
    for (const auto& [run, key, block] : blocks) rebuildBlock(run, key, block);
    Statement peak(*m_db, "UPDATE runs SET measured_peak_bytes = max(coalesce(measured_peak_bytes, 0), ?) WHERE id=?");
    for (const auto& [run, bytes] : peaks) {
        peak.bind(1, static_cast<std::int64_t>(bytes)).bind(2, run);
        peak.run();
    }
    Statement upsert(*m_db, "INSERT INTO latest_metrics(run_id, key, step, value, wall_time) VALUES(?, ?, ?, ?, ?) "
                            "ON CONFLICT(run_id, key) DO UPDATE SET step=excluded.step, value=excluded.value, "
                            "wall_time=excluded.wall_time WHERE excluded.step >= latest_metrics.step");
    for (const auto& [key, p] : latest) {
        upsert.bind(1, p->runId).bind(2, p->key).bind(3, p->step).bind(4, p->value).bind(5, p->wallTime);
        upsert.run();
    }
}

// Recomputes one metric_blocks row from the metrics it summarises (removes
// it when they are gone): exact whatever was inserted, replaced or deleted.
void RunStore::rebuildBlock(std::int64_t runId, const std::string& key, std::int64_t block)
{
    Statement rows(*m_db, "SELECT step, value, wall_time FROM metrics WHERE run_id=? AND key=? AND step>=? AND step<? "
                          "ORDER BY step");
    rows.bind(1, runId).bind(2, key).bind(3, block * kBlockSteps).bind(4, (block + 1) * kBlockSteps);
    struct P {
        std::int64_t step;
        double value, wall;
    };
    std::optional<P> first, last, lo, hi;
    while (rows.step()) {
        const P p{rows.columnInt(0), rows.columnDouble(1), rows.columnDouble(2)};
        if (!first) first = lo = hi = p;
        last = p;
        if (p.value < lo->value) lo = p;
        if (p.value > hi->value) hi = p;
    }
    rows.reset();
    if (!first) {
        Statement drop(*m_db, "DELETE FROM metric_blocks WHERE run_id=? AND key=? AND block=?");
        drop.bind(1, runId).bind(2, key).bind(3, block);
        drop.run();
        return;
    }
    Statement put(*m_db, "INSERT OR REPLACE INTO metric_blocks VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    put.bind(1, runId).bind(2, key).bind(3, block);
    int i = 4;
    for (const auto& p : {*first, *last, *lo, *hi}) {
        put.bind(i, p.step).bind(i + 1, p.value).bind(i + 2, p.wall);
        i += 3;
    }
    put.run();
}

void RunStore::appendMetrics(const std::vector<MetricPoint>& points)
{
    if (points.empty()) return;
    Transaction tx(*m_db);
    insertMetrics(points);
    tx.commit();
}

void RunStore::writeBatch(std::int64_t runId, const std::vector<MetricPoint>& points,
                          const std::vector<EventRecord>& events, int stepsDone)
{
    // All or nothing, so the caller can keep the batch and retry it whole.
    Transaction tx(*m_db);
    insertMetrics(points);
    for (const auto& e : events) addEvent(e);
    heartbeat(runId, stepsDone);
    tx.commit();
}

void RunStore::truncateMetricsAfter(std::int64_t runId, int step)
{
    Transaction tx(*m_db);
    Statement drop(*m_db, "DELETE FROM metrics WHERE run_id=? AND step>?");
    drop.bind(1, runId).bind(2, step);
    drop.run();
    Statement dropBlocks(*m_db, "DELETE FROM metric_blocks WHERE run_id=? AND block>?");
    dropBlocks.bind(1, runId).bind(2, step / kBlockSteps);
    dropBlocks.run();
    std::vector<std::string> keys;
    Statement partial(*m_db, "SELECT key FROM metric_blocks WHERE run_id=? AND block=?");
    partial.bind(1, runId).bind(2, step / kBlockSteps);
    while (partial.step()) keys.push_back(partial.columnText(0));
    partial.reset();
    for (const auto& k : keys) rebuildBlock(runId, k, step / kBlockSteps);
    Statement latest(*m_db, "DELETE FROM latest_metrics WHERE run_id=?");
    latest.bind(1, runId);
    latest.run();
    Statement rebuild(*m_db, "INSERT INTO latest_metrics(run_id, key, step, value, wall_time) "
                             "SELECT run_id, key, step, value, wall_time FROM metrics m WHERE run_id=? AND step = "
                             "(SELECT max(step) FROM metrics WHERE run_id=m.run_id AND key=m.key) GROUP BY key");
    rebuild.bind(1, runId);
    rebuild.run();
    tx.commit();
}

void RunStore::addEvent(const EventRecord& e)
{
    Statement s(*m_db, "INSERT INTO events(run_id, time, severity, kind, message) VALUES(?, ?, ?, ?, ?)");
    s.bind(1, e.runId).bind(2, e.time > 0 ? e.time : wallClockNow()).bind(3, e.severity).bind(4, e.kind);
    s.bind(5, e.message);
    s.run();
}

void RunStore::addArtifact(const ArtifactRecord& a)
{
    Statement s(*m_db, "INSERT INTO artifacts(run_id, kind, step, path, bytes, created_at) VALUES(?, ?, ?, ?, ?, ?)");
    s.bind(1, a.runId).bind(2, a.kind).bind(3, a.step).bind(4, a.path).bind(5, a.bytes);
    s.bind(6, a.createdAt > 0 ? a.createdAt : wallClockNow());
    s.run();
}

namespace {

// One condition of a run filter as SQL with its bound values. User text
// only ever reaches SQLite as a bound value, never as SQL.
struct FilterTerm {
    std::string sql;
    std::vector<std::string> texts; // bound in order; numbers are bound as numbers
    std::vector<bool> numeric;
};

bool readNumber(const std::string& text, double& out)
{
    if (text.empty()) return false;
    char* end = nullptr;
    out = std::strtod(text.c_str(), &end);
    return end == text.c_str() + text.size() && std::isfinite(out);
}

std::string shown(const std::string& text) { return text.size() > 60 ? text.substr(0, 57) + "..." : text; }

// Splits at spaces outside double quotes; quotes group, and are removed.
std::vector<std::string> filterWords(const std::string& filter)
{
    std::vector<std::string> words;
    std::string word;
    bool quoted = false, any = false;
    for (char c : filter) {
        if (c == '"') {
            quoted = !quoted;
            any = true;
        } else if (!quoted && std::isspace(static_cast<unsigned char>(c))) {
            if (any) words.push_back(word);
            word.clear();
            any = false;
        } else {
            word += c;
            any = true;
        }
    }
    if (quoted) throw InputError("filter: a double quote is not closed");
    if (any) words.push_back(word);
    return words;
}

FilterTerm filterTerm(const std::string& word, int schema)
{
    static const std::vector<std::pair<std::string, std::string>> kColumns{
        {"id", "id"},         {"name", "name"},           {"status", "status"},
        {"device", "device"}, {"precision", "precision"}, {"steps", "steps_done"},
        {"loss", "final_loss"}, {"val_loss", "final_val_loss"}, {"note", "note"}};
    if (word.rfind("tag:", 0) == 0) {
        if (word.size() == 4) throw InputError("filter: \"tag:\" needs a tag name, e.g. tag:baseline");
        if (schema < 4) return {"(? IS NULL)", {word.substr(4)}, {false}}; // no tags before schema 4
        return {"EXISTS (SELECT 1 FROM run_tags t WHERE t.run_id = runs.id AND t.tag = ?)", {word.substr(4)}, {false}};
    }
    // FIELD OP VALUE, the operator being the first of these found.
    static const char* const kOps[] = {">=", "<=", "!=", "=", "<", ">"};
    std::size_t at = std::string::npos, length = 0;
    std::string op;
    for (const char* candidate : kOps) {
        const auto pos = word.find(candidate);
        if (pos != std::string::npos && (pos < at || (pos == at && std::strlen(candidate) > length))) {
            at = pos;
            length = std::strlen(candidate);
            op = candidate;
        }
    }
    if (at == std::string::npos) {
        // Free text: in the name or the note.
        std::string like = "%";
        for (char c : word) {
            if (c == '%' || c == '_' || c == '\\') like += '\\';
            like += c;
        }
        like += '%';
        if (schema < 4) return {"(name LIKE ? ESCAPE '\\' OR '' LIKE ?)", {like, like}, {false, false}};
        return {"(name LIKE ? ESCAPE '\\' OR note LIKE ? ESCAPE '\\')", {like, like}, {false, false}};
    }
    const std::string field = word.substr(0, at), value = word.substr(at + length);
    if (field.empty()) throw InputError("filter: \"" + shown(word) + "\" has no field before " + op);
    double number = 0;
    const bool isNumber = readNumber(value, number);
    const std::string sqlOp = op == "!=" ? "IS NOT" : op == "=" ? "IS" : op;
    for (const auto& [name, column] : kColumns) {
        if (field != name) continue;
        const std::string sqlColumn = name == "note" && schema < 4 ? std::string("''") : column;
        return {sqlColumn + " " + sqlOp + " ?", {value}, {isNumber && name != "name" && name != "note"}};
    }
    // A config field by its dotted path, as in the config file.
    const bool pathOk = field.find('.') != std::string::npos
        && field.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") == std::string::npos
        && field.front() != '.' && field.back() != '.' && field.find("..") == std::string::npos;
    if (!pathOk) {
        throw InputError("filter: unknown field \"" + shown(field)
                         + "\"; use id, name, status, device, precision, steps, loss, val_loss, note, tag:NAME or a "
                           "config path such as train.batch_size");
    }
    // (A row whose stored config is not JSON matches nothing, and breaks nothing.)
    return {"(CASE WHEN json_valid(config_json) THEN json_extract(config_json, ?) END) " + sqlOp + " ?",
            {"$." + field, value}, {false, isNumber}};
}

} // namespace

std::vector<RunRecord> RunStore::listRuns(const std::string& filter)
{
    std::vector<FilterTerm> terms;
    for (const auto& word : filterWords(filter)) terms.push_back(filterTerm(word, m_schema));
    std::string sql = "SELECT " + runColumns(m_schema) + " FROM runs";
    for (std::size_t i = 0; i < terms.size(); ++i) sql += (i == 0 ? " WHERE " : " AND ") + terms[i].sql;
    sql += " ORDER BY id";
    Statement s(*m_db, sql.c_str());
    int index = 1;
    for (const auto& t : terms) {
        for (std::size_t i = 0; i < t.texts.size(); ++i) {
            double number = 0;
            if (t.numeric[i] && readNumber(t.texts[i], number)) s.bind(index++, number);
            else s.bind(index++, t.texts[i]);
        }
    }
    std::vector<RunRecord> runs;
    while (s.step()) runs.push_back(readRun(s));
    return runs;
}

namespace {

std::string checkedLabel(const std::string& text, const char* what, std::size_t limit)
{
    if (text.empty()) throw InputError(std::string(what) + " must not be empty");
    if (text.size() > limit) {
        throw InputError(std::string(what) + " is " + std::to_string(text.size()) + " bytes long; at most "
                         + std::to_string(limit));
    }
    for (unsigned char c : text) {
        if (c < 0x20 || c == 0x7f) throw InputError(std::string(what) + " must not contain control characters");
    }
    return text;
}

} // namespace

void RunStore::requireRun(std::int64_t runId)
{
    if (!run(runId)) {
        throw InputError("run " + std::to_string(runId) + " does not exist in " + m_path
                         + "; 'trainbench-cli runs' lists the runs");
    }
}

void RunStore::addTag(std::int64_t runId, const std::string& tag)
{
    checkedLabel(tag, "a tag", 64);
    if (tag.find_first_of(" \"") != std::string::npos) throw InputError("a tag must not contain spaces or quotes");
    requireRun(runId);
    Statement s(*m_db, "INSERT OR IGNORE INTO run_tags(run_id, tag) VALUES(?, ?)");
    s.bind(1, runId).bind(2, tag);
    s.run();
}

void RunStore::removeTag(std::int64_t runId, const std::string& tag)
{
    requireRun(runId);
    Statement s(*m_db, "DELETE FROM run_tags WHERE run_id=? AND tag=?");
    s.bind(1, runId).bind(2, tag);
    s.run();
}

void RunStore::setNote(std::int64_t runId, const std::string& note)
{
    if (note.size() > 65536) throw InputError("a note is at most 65,536 bytes");
    requireRun(runId);
    Statement s(*m_db, "UPDATE runs SET note=? WHERE id=?");
    s.bind(1, note).bind(2, runId);
    s.run();
}

void RunStore::rename(std::int64_t runId, const std::string& name)
{
    checkedLabel(name, "a run name", 200);
    requireRun(runId);
    Statement s(*m_db, "UPDATE runs SET name=? WHERE id=?");
    s.bind(1, name).bind(2, runId);
    s.run();
}

void RunStore::deleteRun(std::int64_t runId)
{
    Transaction tx(*m_db);
    Statement q(*m_db, "SELECT status, owner_pid FROM runs WHERE id=?");
    q.bind(1, runId);
    if (!q.step()) {
        throw InputError("run " + std::to_string(runId) + " does not exist in " + m_path
                         + "; 'trainbench-cli runs' lists the runs");
    }
    if (q.columnText(0) == "running") {
        throw InputError("run " + std::to_string(runId) + " is running"
                         + (q.columnIsNull(1) ? std::string() : " (pid " + std::to_string(q.columnInt(1)) + ")")
                         + "; stop it before deleting it");
    }
    q.reset();
    // Rows of the run's metrics, events, artifacts and tags go with it (foreign keys cascade).
    for (const char* sql : {"DELETE FROM metrics WHERE run_id=?", "DELETE FROM metric_blocks WHERE run_id=?",
                            "DELETE FROM latest_metrics WHERE run_id=?",
                            "DELETE FROM events WHERE run_id=?", "DELETE FROM artifacts WHERE run_id=?",
                            "DELETE FROM run_tags WHERE run_id=?", "DELETE FROM run_findings WHERE run_id=?",
                            "DELETE FROM runs WHERE id=?"}) {
        Statement d(*m_db, sql);
        d.bind(1, runId);
        d.run();
    }
    Statement tomb(*m_db, "INSERT OR REPLACE INTO deleted_runs(id, deleted_at) VALUES(?, ?)");
    tomb.bind(1, runId).bind(2, wallClockNow());
    tomb.run();
    tx.commit();
}

std::optional<RunRecord> RunStore::run(std::int64_t runId)
{
    Statement s(*m_db, ("SELECT " + runColumns(m_schema) + " FROM runs WHERE id=?").c_str());
    s.bind(1, runId);
    if (!s.step()) return std::nullopt;
    return readRun(s);
}

std::vector<MetricPoint> RunStore::metrics(std::int64_t runId, const std::string& key)
{
    Statement s(*m_db, key.empty() ? "SELECT run_id, step, key, value, wall_time FROM metrics WHERE run_id=? "
                                     "ORDER BY step, key"
                                   : "SELECT run_id, step, key, value, wall_time FROM metrics WHERE run_id=? "
                                     "AND key=? ORDER BY step");
    s.bind(1, runId);
    if (!key.empty()) s.bind(2, key);
    std::vector<MetricPoint> points;
    while (s.step()) {
        points.push_back({s.columnInt(0), static_cast<int>(s.columnInt(1)), s.columnText(2), s.columnDouble(3),
                          s.columnDouble(4)});
    }
    return points;
}

std::vector<MetricPoint> RunStore::metricSeries(std::int64_t runId, const std::string& key, int buckets)
{
    // The step range from the primary key; steps are unique per key, so a
    // short range is a short series.
    // (Two queries: SQLite answers a lone min() or max() from the key's end,
    // but scans the whole range for both in one.)
    Statement lowest(*m_db, "SELECT min(step) FROM metrics WHERE run_id=? AND key=?");
    lowest.bind(1, runId).bind(2, key);
    if (!lowest.step() || lowest.columnIsNull(0)) return {};
    const std::int64_t first = lowest.columnInt(0);
    Statement highest(*m_db, "SELECT max(step) FROM metrics WHERE run_id=? AND key=?");
    highest.bind(1, runId).bind(2, key);
    highest.step();
    const std::int64_t last = highest.columnInt(0);
    const std::int64_t span = last - first + 1;
    if (buckets < 1 || span <= 2 * static_cast<std::int64_t>(buckets) + 2) return metrics(runId, key);

    struct Point {
        std::int64_t step = 0;
        double value = 0, wall = 0;
    };
    struct Bucket {
        Point lo, hi;
        bool used = false;
        void add(const Point& p)
        {
            if (!used) lo = hi = p, used = true;
            else if (p.value < lo.value) lo = p;
            else if (p.value > hi.value) hi = p;
        }
    };
    std::vector<Bucket> slots(static_cast<std::size_t>(buckets));
    const double perStep = static_cast<double>(buckets) / static_cast<double>(span);
    const auto slot = [&](std::int64_t step) -> Bucket& {
        return slots[std::min(static_cast<std::size_t>(static_cast<double>(step - first) * perStep), slots.size() - 1)];
    };
    Point head, tail;
    if (span <= 64 * static_cast<std::int64_t>(buckets) || m_schema < 5) {
        // Up to 64 points a bucket: one pass over the points.
        Statement s(*m_db, "SELECT step, value, wall_time FROM metrics WHERE run_id=? AND key=? ORDER BY step");
        s.bind(1, runId).bind(2, key);
        bool any = false;
        while (s.step()) {
            const Point p{s.columnInt(0), s.columnDouble(1), s.columnDouble(2)};
            if (!any) head = p, any = true;
            tail = p;
            slot(p.step).add(p);
        }
    } else {
        // Longer: from the 128-step blocks (their lowest and highest points),
        // each bucket the blocks that start in it.
        Statement s(*m_db, "SELECT first_step, first_value, first_wall, last_step, last_value, last_wall, min_step, "
                           "min_value, min_wall, max_step, max_value, max_wall FROM metric_blocks "
                           "WHERE run_id=? AND key=? ORDER BY block");
        s.bind(1, runId).bind(2, key);
        bool any = false;
        while (s.step()) {
            const Point f{s.columnInt(0), s.columnDouble(1), s.columnDouble(2)};
            const Point l{s.columnInt(3), s.columnDouble(4), s.columnDouble(5)};
            const Point lo{s.columnInt(6), s.columnDouble(7), s.columnDouble(8)};
            const Point hi{s.columnInt(9), s.columnDouble(10), s.columnDouble(11)};
            if (!any) head = f, any = true;
            tail = l;
            auto& b = slot(f.step);
            b.add(lo);
            b.add(hi);
        }
    }
    std::vector<MetricPoint> out;
    out.reserve(2 * slots.size() + 2);
    const auto push = [&](const Point& p) {
        if (out.empty() || p.step > out.back().step) out.push_back({runId, static_cast<int>(p.step), key, p.value, p.wall});
    };
    push(head);
    for (const auto& b : slots) {
        if (!b.used) continue;
        push(b.lo.step <= b.hi.step ? b.lo : b.hi);
        push(b.lo.step <= b.hi.step ? b.hi : b.lo);
    }
    push(tail);
    return out;
}

std::map<std::string, MetricPoint> RunStore::latestMetrics(std::int64_t runId)
{
    Statement s(*m_db, "SELECT run_id, step, key, value, wall_time FROM latest_metrics WHERE run_id=?");
    s.bind(1, runId);
    std::map<std::string, MetricPoint> latest;
    while (s.step()) {
        MetricPoint p{s.columnInt(0), static_cast<int>(s.columnInt(1)), s.columnText(2), s.columnDouble(3),
                      s.columnDouble(4)};
        latest[p.key] = p;
    }
    return latest;
}

std::vector<EventRecord> RunStore::events(std::int64_t runId)
{
    Statement s(*m_db, "SELECT run_id, time, severity, kind, message FROM events WHERE run_id=? ORDER BY time, id");
    s.bind(1, runId);
    std::vector<EventRecord> out;
    while (s.step()) out.push_back({s.columnInt(0), s.columnDouble(1), s.columnText(2), s.columnText(3), s.columnText(4)});
    return out;
}

void RunStore::addFindings(const FindingSetRecord& f)
{
    Statement s(*m_db, "INSERT INTO run_findings(run_id, source, time, overridden, findings_json) VALUES(?, ?, ?, ?, ?)");
    s.bind(1, f.runId).bind(2, f.source).bind(3, f.time > 0 ? f.time : wallClockNow());
    s.bind(4, static_cast<std::int64_t>(f.overridden ? 1 : 0)).bind(5, f.findingsJson);
    s.run();
}

std::vector<FindingSetRecord> RunStore::findings(std::int64_t runId)
{
    if (m_schema < 6) return {}; // an older store opened read-only has none
    Statement s(*m_db, "SELECT run_id, source, time, overridden, findings_json FROM run_findings WHERE run_id=? ORDER BY id");
    s.bind(1, runId);
    std::vector<FindingSetRecord> out;
    while (s.step()) out.push_back({s.columnInt(0), s.columnText(1), s.columnDouble(2), s.columnInt(3) != 0, s.columnText(4)});
    return out;
}

std::vector<ArtifactRecord> RunStore::artifacts(std::int64_t runId)
{
    Statement s(*m_db, "SELECT run_id, kind, step, path, bytes, created_at FROM artifacts WHERE run_id=? ORDER BY step, id");
    s.bind(1, runId);
    std::vector<ArtifactRecord> out;
    while (s.step()) {
        out.push_back({s.columnInt(0), s.columnText(1), static_cast<int>(s.columnInt(2)), s.columnText(3),
                       s.columnInt(4), s.columnDouble(5)});
    }
    return out;
}

std::optional<ArtifactRecord> RunStore::latestCheckpoint(std::int64_t runId)
{
    std::optional<ArtifactRecord> best;
    for (auto& a : artifacts(runId)) {
        if (a.kind == "checkpoint" && std::filesystem::exists(a.path) && (!best || a.step >= best->step)) best = a;
    }
    return best;
}

int RunStore::reconcileInterrupted()
{
    if (m_readOnly) return 0;
    struct Owner {
        std::int64_t id;
        std::optional<std::int64_t> pid;
        std::optional<std::string> start, host;
        std::string pidns;
    };
    const auto text = [](const Statement& st, int i) {
        return st.columnIsNull(i) ? std::nullopt : std::optional<std::string>(st.columnText(i));
    };
    // Judge without a lock, then update only a row that still has the owner
    // we judged, in one write transaction: a run claimed meanwhile is left alone.
    std::vector<Owner> dead;
    {
        Statement s(*m_db, "SELECT id, owner_pid, owner_start, owner_host, owner_pidns, heartbeat_at FROM runs "
                           "WHERE status='running' OR (status='created' AND owner_pid IS NOT NULL)");
        const std::string host = hostName();
        const double now = wallClockNow();
        while (s.step()) {
            Owner o{s.columnInt(0), std::nullopt, text(s, 2), text(s, 3), s.columnText(4)};
            if (!s.columnIsNull(1)) o.pid = s.columnInt(1);
            Liveness live = Liveness::Unknown;
            if (o.pid && o.host == host) live = processLiveness(static_cast<long>(*o.pid), o.start.value_or(""), o.pidns);
            // In doubt (another machine, another PID namespace, /proc hidden):
            // the heartbeat's age decides.
            if (live == Liveness::Unknown) {
                live = !s.columnIsNull(5) && now - s.columnDouble(5) < kHeartbeatTimeoutSeconds ? Liveness::Alive
                                                                                                 : Liveness::Dead;
            }
            if (live == Liveness::Dead) dead.push_back(std::move(o));
        }
    }
    if (dead.empty()) return 0;
    int changed = 0;
    const double now = wallClockNow();
    Transaction tx(*m_db);
    for (const auto& o : dead) {
        const std::string pidText = o.pid ? std::to_string(*o.pid) : std::string("unknown");
        Statement u(*m_db, "UPDATE runs SET status='interrupted', owner_pid=NULL, message=? WHERE id=? AND "
                           "status IN ('running', 'created') AND owner_pid IS ? AND owner_start IS ? AND owner_host IS ?");
        u.bind(1, "the process running it (pid " + pidText + ") stopped without finishing; resume it with "
                  "'trainbench-cli resume " + std::to_string(o.id) + "'");
        u.bind(2, o.id).bind(3, o.pid).bind(4, o.start).bind(5, o.host);
        u.run();
        if (m_db->changes() != 1) continue;
        ++changed;
        addEvent({o.id, now, "warning", "interrupted", "run found interrupted: its process (pid " + pidText + ") is gone"});
    }
    tx.commit();
    return changed;
}

void RunStore::dropMissingArtifacts(std::int64_t runId)
{
    std::vector<std::int64_t> missing;
    {
        Statement s(*m_db, "SELECT id, path FROM artifacts WHERE run_id=?");
        s.bind(1, runId);
        std::error_code ec;
        while (s.step()) {
            if (!std::filesystem::exists(s.columnText(1), ec)) missing.push_back(s.columnInt(0));
        }
    }
    Statement d(*m_db, "DELETE FROM artifacts WHERE id=?");
    for (auto id : missing) {
        d.bind(1, id);
        d.run();
    }
}

} // namespace tb
