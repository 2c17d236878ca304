// Sweeps in the store: the sweep, and its trials as a queue that outlives the
// process running it.
#include "common/Errors.h"
#include "store/RunStore.h"
#include "store/Sqlite.h"

namespace tb {
namespace {

SweepTrialRecord readTrial(Statement& s)
{
    SweepTrialRecord t;
    t.sweepId = s.columnInt(0);
    t.trial = static_cast<int>(s.columnInt(1));
    t.valuesJson = s.columnText(2);
    t.status = s.columnText(3);
    if (!s.columnIsNull(4)) t.runId = s.columnInt(4);
    t.reason = s.columnText(5);
    if (!s.columnIsNull(6)) t.metric = s.columnDouble(6);
    return t;
}

constexpr const char* kTrialColumns = "sweep_id, trial, values_json, status, run_id, reason, metric";

} // namespace

std::int64_t RunStore::createSweep(const SweepRecord& sweep)
{
    if (sweep.name.size() > 200) throw InputError("a sweep name is at most 200 bytes");
    Transaction tx(*m_db);
    Statement insert(*m_db, "INSERT INTO sweeps(name, created_at, spec_json, config_json, base_dir, gpu, budget_bytes, status) "
                            "VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, sweep.name).bind(2, wallClockNow()).bind(3, sweep.specJson).bind(4, sweep.configJson)
        .bind(5, sweep.baseDir).bind(6, sweep.gpu).bind(7, sweep.budgetBytes).bind(8, sweep.status);
    insert.run();
    Statement last(*m_db, "SELECT last_insert_rowid()");
    last.step();
    const std::int64_t id = last.columnInt(0);
    Statement trial(*m_db, "INSERT INTO sweep_trials(sweep_id, trial, values_json, status, reason) VALUES(?, ?, ?, ?, ?)");
    for (const auto& t : sweep.trials) {
        trial.bind(1, id).bind(2, t.trial).bind(3, t.valuesJson).bind(4, t.status).bind(5, t.reason);
        trial.run();
    }
    tx.commit();
    return id;
}

std::optional<SweepRecord> RunStore::sweep(std::int64_t sweepId)
{
    if (m_schema < 8) return std::nullopt; // a read-only store of an older schema has no sweeps
    Statement s(*m_db, "SELECT id, name, created_at, spec_json, config_json, base_dir, gpu, budget_bytes, status FROM sweeps "
                       "WHERE id=?");
    s.bind(1, sweepId);
    if (!s.step()) return std::nullopt;
    SweepRecord r;
    r.id = s.columnInt(0);
    r.name = s.columnText(1);
    r.createdAt = s.columnDouble(2);
    r.specJson = s.columnText(3);
    r.configJson = s.columnText(4);
    r.baseDir = s.columnText(5);
    r.gpu = s.columnText(6);
    r.budgetBytes = s.columnInt(7);
    r.status = s.columnText(8);
    Statement trials(*m_db, (std::string("SELECT ") + kTrialColumns + " FROM sweep_trials WHERE sweep_id=? ORDER BY trial").c_str());
    trials.bind(1, sweepId);
    while (trials.step()) r.trials.push_back(readTrial(trials));
    return r;
}

std::vector<SweepRecord> RunStore::listSweeps()
{
    if (m_schema < 8) return {};
    std::vector<std::int64_t> ids;
    {
        Statement s(*m_db, "SELECT id FROM sweeps ORDER BY id DESC");
        while (s.step()) ids.push_back(s.columnInt(0));
    }
    std::vector<SweepRecord> out;
    for (const auto id : ids) {
        if (auto r = sweep(id)) out.push_back(std::move(*r));
    }
    return out;
}

void RunStore::updateSweepTrial(const SweepTrialRecord& t)
{
    Statement s(*m_db, "UPDATE sweep_trials SET status=?, run_id=?, reason=?, metric=? WHERE sweep_id=? AND trial=?");
    s.bind(1, t.status).bind(2, t.runId).bind(3, t.reason).bind(4, t.metric).bind(5, t.sweepId).bind(6, t.trial);
    s.run();
}

void RunStore::setSweepStatus(std::int64_t sweepId, const std::string& status)
{
    Statement s(*m_db, "UPDATE sweeps SET status=? WHERE id=?");
    s.bind(1, status).bind(2, sweepId);
    s.run();
}

std::optional<SweepTrialRecord> RunStore::sweepTrialOfRun(std::int64_t runId)
{
    if (m_schema < 8) return std::nullopt; // a read-only store of an older schema has no sweeps
    Statement s(*m_db, (std::string("SELECT ") + kTrialColumns + " FROM sweep_trials WHERE run_id=?").c_str());
    s.bind(1, runId);
    if (!s.step()) return std::nullopt;
    return readTrial(s);
}

} // namespace tb
