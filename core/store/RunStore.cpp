#include "store/RunStore.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <cerrno>

#include <signal.h>
#include <sqlite3.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "store/RunFilter.h"
#include "config/RunConfig.h"
#include "store/RunLiveness.h"
#include "store/Sqlite.h"
#include "store/StoreSchema.h"

namespace tb {

using namespace store_detail;

double wallClockNow()
{
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

int RunRecord::worldSize() const
{
    const auto config = nlohmann::json::parse(configJson, nullptr, false);
    if (!config.is_object()) return 1;
    const auto train = config.find("train");
    if (train == config.end() || !train->is_object()) return 1;
    const auto world = train->find("world_size");
    return world != train->end() && world->is_number_integer() && world->get<int>() > 1 ? world->get<int>() : 1;
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

int RunStore::schemaVersion() { return latestSchema(); }

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
        if (found > latestSchema()) {
            throw StoreError("experiment database " + path + " was written by a newer Trainbench (schema "
                             + std::to_string(found) + ", this one reads up to " + std::to_string(latestSchema())
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
        m_schema = latestSchema();
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
    if (read() >= latestSchema()) return;
    // Read again inside the write transaction: of several processes opening
    // a new database at once, exactly one creates the schema.
    Transaction tx(*m_db);
    const int found = read();
    if (found >= latestSchema()) return;
    for (int current = found; current < latestSchema(); ++current) {
        m_db->exec(migrationSql(current));
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
    m_db->exec("PRAGMA user_version=" + std::to_string(latestSchema()));
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
    // A default name is written in the same write transaction as the row
    // (taken up front, so the busy timeout applies and no reader sees the run
    // without its name).
    std::optional<Transaction> tx;
    if (run.defaultName) tx.emplace(*m_db);
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
    const std::int64_t id = m_db->lastInsertId();
    if (run.defaultName) {
        // The previous run of this config name (by the config's own name: the
        // runs' names carry their ids). CASE keeps json_extract off configs
        // that are not JSON.
        std::string before;
        {
            // Finalised before the update (a statement left open keeps reading).
            Statement previous(*m_db, "SELECT config_json FROM runs WHERE id < ? AND CASE WHEN json_valid(config_json) "
                                      "THEN json_extract(config_json, '$.name') END = ? ORDER BY id DESC LIMIT 1");
            previous.bind(1, id).bind(2, run.name);
            if (previous.step()) before = previous.columnText(0);
        }
        Statement named(*m_db, "UPDATE runs SET name=? WHERE id=?");
        named.bind(1, defaultRunName(run.name, id, run.configJson, before)).bind(2, id);
        named.run();
        tx->commit();
    }
    return id;
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

std::vector<RunRecord> RunStore::listRuns(const std::string& filter)
{
    const auto terms = parseRunFilter(filter, m_schema);
    std::string sql = "SELECT " + runColumns(m_schema) + " FROM runs";
    for (std::size_t i = 0; i < terms.size(); ++i) sql += (i == 0 ? " WHERE " : " AND ") + terms[i].sql;
    sql += " ORDER BY id";
    Statement s(*m_db, sql.c_str());
    bindFilter(s, terms);
    std::vector<RunRecord> runs;
    while (s.step()) {
        auto run = readRun(s);
        if (statusMatches(terms, run.status)) runs.push_back(std::move(run));
    }
    return runs;
}

std::optional<RunRecord> RunStore::latestStoppedRun()
{
    std::optional<RunRecord> stopped;
    for (auto& r : listRuns()) {
        if (r.status == RunStatus::Cancelled || r.status == RunStatus::Interrupted) stopped = std::move(r);
    }
    return stopped;
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
    Statement q(*m_db, "SELECT status, owner_pid, origin_run_id FROM runs WHERE id=?");
    q.bind(1, runId);
    if (!q.step()) {
        throw InputError("run " + std::to_string(runId) + " does not exist in " + m_path
                         + "; 'trainbench-cli runs' lists the runs");
    }
    // A copy of a run on another machine can go; the run there is not touched.
    if (q.columnText(0) == "running" && q.columnIsNull(2)) {
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




std::vector<EventRecord> RunStore::events(std::int64_t runId) { return eventsAfter(runId, -1); }

std::vector<EventRecord> RunStore::eventsAfter(std::int64_t runId, std::int64_t afterId)
{
    Statement s(*m_db, "SELECT run_id, time, severity, kind, message, id FROM events WHERE run_id=? AND id>? ORDER BY time, id");
    s.bind(1, runId).bind(2, afterId);
    std::vector<EventRecord> out;
    while (s.step()) {
        out.push_back({s.columnInt(0), s.columnDouble(1), s.columnText(2), s.columnText(3), s.columnText(4), s.columnInt(5)});
    }
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
    const auto text = [](const Statement& st, int i) {
        return st.columnIsNull(i) ? std::nullopt : std::optional<std::string>(st.columnText(i));
    };
    // Judge without a lock, then update only a row that still has the owner
    // we judged, in one write transaction: a run claimed meanwhile is left alone.
    std::vector<std::pair<std::int64_t, RunOwner>> dead;
    {
        // Copies of runs on other machines (origin_run_id set) have no owner here.
        Statement s(*m_db, m_schema >= 7
                               ? "SELECT id, owner_pid, owner_start, owner_host, owner_pidns, heartbeat_at FROM runs "
                                 "WHERE (status='running' OR (status='created' AND owner_pid IS NOT NULL)) "
                                 "AND origin_run_id IS NULL"
                               : "SELECT id, owner_pid, owner_start, owner_host, owner_pidns, heartbeat_at FROM runs "
                                 "WHERE status='running' OR (status='created' AND owner_pid IS NOT NULL)");
        const double now = wallClockNow();
        while (s.step()) {
            RunOwner o;
            if (!s.columnIsNull(1)) o.pid = s.columnInt(1);
            o.start = text(s, 2);
            o.host = text(s, 3);
            o.pidns = s.columnText(4);
            if (!s.columnIsNull(5)) o.heartbeatAt = s.columnDouble(5);
            if (ownerGone(o, now)) dead.emplace_back(s.columnInt(0), std::move(o));
        }
    }
    if (dead.empty()) return 0;
    int changed = 0;
    const double now = wallClockNow();
    Transaction tx(*m_db);
    for (const auto& [id, o] : dead) {
        Statement u(*m_db, "UPDATE runs SET status='interrupted', owner_pid=NULL, message=? WHERE id=? AND "
                           "status IN ('running', 'created') AND owner_pid IS ? AND owner_start IS ? AND owner_host IS ?");
        u.bind(1, interruptedMessage(id, o.pid));
        u.bind(2, id).bind(3, o.pid).bind(4, o.start).bind(5, o.host);
        u.run();
        if (m_db->changes() != 1) continue;
        ++changed;
        const std::string pidText = o.pid ? std::to_string(*o.pid) : std::string("unknown");
        addEvent({id, now, "warning", "interrupted", "run found interrupted: its process (pid " + pidText + ") is gone"});
    }
    tx.commit();
    return changed;
}

long RunStore::signalOwner(std::int64_t runId, int signal)
{
    const std::string label = "run " + std::to_string(runId);
    const auto record = run(runId);
    if (!record) throw InputError(label + " does not exist in " + m_path + "; 'trainbench-cli runs' lists the runs");
    if (record->origin.runId != 0) {
        throw InputError(label + " is a copy of run " + std::to_string(record->origin.runId) + " on " + record->origin.label
                         + ": stop that one with 'trainbench-cli stop " + std::to_string(record->origin.runId)
                         + " --host " + record->origin.label + "'");
    }
    Statement q(*m_db, "SELECT status, owner_pid, owner_start, owner_host, owner_pidns FROM runs WHERE id=?");
    q.bind(1, runId);
    if (!q.step()) throw InputError(label + " does not exist in " + m_path + "; 'trainbench-cli runs' lists the runs");
    const auto status = q.columnText(0);
    if ((status != "running" && status != "created") || q.columnIsNull(1)) {
        throw InputError(label + " is not running (it is " + status + "); there is nothing to stop");
    }
    const long pid = static_cast<long>(q.columnInt(1));
    const std::string host = q.columnText(3);
    if (host != hostName()) {
        throw InputError(label + " runs on " + host + " (pid " + std::to_string(pid)
                         + "): stop it there, or with 'trainbench-cli stop " + std::to_string(runId) + " --host HOST'");
    }
    switch (processLiveness(pid, q.columnText(2), q.columnText(4))) {
    case Liveness::Dead: throw InputError(label + " is not running: its process (pid " + std::to_string(pid) + ") is gone");
    case Liveness::Unknown:
        throw InputError(label + " was started in another PID namespace (a container?) or /proc is hidden: its pid "
                         + std::to_string(pid) + " cannot be checked from here; stop it where it runs");
    case Liveness::Alive: break;
    }
    if (::kill(static_cast<pid_t>(pid), signal) != 0) {
        throw InputError("cannot signal the process of " + label + " (pid " + std::to_string(pid) + "): "
                         + std::strerror(errno));
    }
    return pid;
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
