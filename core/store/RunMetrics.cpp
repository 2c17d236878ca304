// The metrics of runs: inserted in batches, summarised per block of steps
// (metric_blocks), read as whole series or thinned for display.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "store/RunStore.h"
#include "store/Sqlite.h"
#include "store/StoreSchema.h"

namespace tb {

using store_detail::kBlockSteps;

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

std::vector<MetricPoint> RunStore::metricsFrom(std::int64_t runId, const std::string& key, int firstStep)
{
    Statement s(*m_db, "SELECT run_id, step, key, value, wall_time FROM metrics WHERE run_id=? AND key=? AND step>=? "
                       "ORDER BY step");
    s.bind(1, runId).bind(2, key).bind(3, static_cast<std::int64_t>(firstStep));
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

} // namespace tb
