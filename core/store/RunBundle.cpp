#include "store/RunBundle.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "store/RunLiveness.h"
#include "store/Sqlite.h"

namespace tb {
namespace {

using nlohmann::json;
constexpr const char* kFormat = "trainbench-run";
constexpr int kVersion = 1;

json number(const std::optional<double>& v) { return v && std::isfinite(*v) ? json(*v) : json(nullptr); }
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
std::optional<double> optionalNumber(const json& j, const char* key)
{
    if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
    return j[key].get<double>();
}
double value(const json& v) { return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN(); }

} // namespace

RunBundle bundleOf(RunStore& store, std::int64_t runId)
{
    auto run = store.run(runId);
    if (!run) {
        throw InputError("run " + std::to_string(runId) + " does not exist in " + store.path()
                         + "; 'trainbench-cli runs' lists the runs");
    }
    RunBundle b;
    b.run = *run;
    if (run->origin.runId != 0) {
        b.origin = run->origin;
    } else {
        std::error_code ec;
        b.origin.host = store_detail::hostName();
        b.origin.store = std::filesystem::absolute(store.path(), ec).lexically_normal().string();
        b.origin.runId = runId;
    }
    b.metrics = store.metrics(runId);
    b.events = store.events(runId);
    b.findings = store.findings(runId);
    b.checkpoint = store.latestCheckpoint(runId);
    return b;
}

std::string bundleToJson(const RunBundle& b)
{
    const RunRecord& r = b.run;
    json run = {{"name", r.name},
                {"status", runStatusName(r.status)},
                {"created_at", r.createdAt},
                {"started_at", number(r.startedAt)},
                {"ended_at", number(r.endedAt)},
                {"config", r.configJson},
                {"device", r.device},
                {"precision", r.precision},
                {"app_version", r.appVersion},
                {"torch_version", r.torchVersion},
                {"steps_total", r.stepsTotal},
                {"steps_done", r.stepsDone},
                {"final_loss", number(r.finalLoss)},
                {"final_val_loss", number(r.finalValLoss)},
                {"final_val_accuracy", number(r.finalValAccuracy)},
                {"message", r.message},
                {"estimate_json", r.estimateJson},
                {"note", r.note},
                {"tags", r.tags}};
    if (r.estimatedPeakBytes) run["estimated_peak_bytes"] = *r.estimatedPeakBytes;
    if (r.measuredPeakBytes) run["measured_peak_bytes"] = *r.measuredPeakBytes;
    json metrics = json::object();
    for (const auto& p : b.metrics) metrics[p.key].push_back(json::array({p.step, number(p.value), p.wallTime}));
    json events = json::array();
    for (const auto& e : b.events) events.push_back(json::array({e.time, e.severity, e.kind, e.message}));
    json findings = json::array();
    for (const auto& f : b.findings) findings.push_back(json::array({f.source, f.time, f.overridden, f.findingsJson}));
    json j = {{"format", kFormat},
              {"version", kVersion},
              {"origin", {{"host", b.origin.host}, {"store", b.origin.store}, {"run_id", b.origin.runId}}},
              {"run", run},
              {"metrics", metrics},
              {"events", events},
              {"findings", findings}};
    if (b.checkpoint) {
        j["checkpoint"] = {{"step", b.checkpoint->step}, {"path", b.checkpoint->path}, {"bytes", b.checkpoint->bytes}};
    }
    return j.dump() + "\n";
}

RunBundle bundleFromJson(const std::string& text, const std::string& sourceName)
{
    const auto bad = [&](const std::string& what) {
        return InputError(sourceName + " is not a Trainbench run bundle (" + what
                          + "); make one with 'trainbench-cli export-run RUN_ID --output FILE'");
    };
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw bad("not JSON");
    if (j.value("format", "") != kFormat) throw bad("no \"format\": \"trainbench-run\"");
    if (!j["version"].is_number_integer() || j["version"].get<int>() > kVersion) {
        throw InputError(sourceName + " is a run bundle of a newer Trainbench (version " + j["version"].dump()
                         + "); update Trainbench to import it");
    }
    RunBundle b;
    try {
        const auto& o = j.at("origin");
        b.origin.host = o.at("host").get<std::string>();
        b.origin.store = o.at("store").get<std::string>();
        b.origin.runId = o.at("run_id").get<std::int64_t>();
        const auto& r = j.at("run");
        RunRecord& run = b.run;
        run.name = r.at("name").get<std::string>();
        run.status = runStatusFromString(r.at("status").get<std::string>());
        run.createdAt = r.at("created_at").get<double>();
        run.startedAt = optionalNumber(r, "started_at");
        run.endedAt = optionalNumber(r, "ended_at");
        run.configJson = r.at("config").get<std::string>();
        run.device = r.value("device", "");
        run.precision = r.value("precision", "");
        run.appVersion = r.value("app_version", "");
        run.torchVersion = r.value("torch_version", "");
        run.stepsTotal = r.value("steps_total", 0);
        run.stepsDone = r.value("steps_done", 0);
        run.finalLoss = optionalNumber(r, "final_loss");
        run.finalValLoss = optionalNumber(r, "final_val_loss");
        run.finalValAccuracy = optionalNumber(r, "final_val_accuracy");
        run.message = r.value("message", "");
        run.estimateJson = r.value("estimate_json", "");
        run.note = r.value("note", "");
        if (r.contains("tags")) run.tags = r["tags"].get<std::vector<std::string>>();
        if (r.contains("estimated_peak_bytes")) run.estimatedPeakBytes = r["estimated_peak_bytes"].get<std::int64_t>();
        if (r.contains("measured_peak_bytes")) run.measuredPeakBytes = r["measured_peak_bytes"].get<std::int64_t>();
        for (const auto& [key, points] : j.at("metrics").items()) {
            for (const auto& p : points) b.metrics.push_back({0, p.at(0).get<int>(), key, value(p.at(1)), p.at(2).get<double>()});
        }
        for (const auto& e : j.at("events")) {
            b.events.push_back({0, e.at(0).get<double>(), e.at(1).get<std::string>(), e.at(2).get<std::string>(),
                                e.at(3).get<std::string>()});
        }
        for (const auto& f : j.at("findings")) {
            b.findings.push_back({0, f.at(0).get<std::string>(), f.at(1).get<double>(), f.at(2).get<bool>(),
                                  f.at(3).get<std::string>()});
        }
        if (j.contains("checkpoint")) {
            const auto& c = j["checkpoint"];
            b.checkpoint = ArtifactRecord{0, "checkpoint", c.at("step").get<int>(), c.at("path").get<std::string>(),
                                          c.value("bytes", std::int64_t{0}), 0};
        }
    } catch (const json::exception& e) {
        throw bad(std::string("a field is missing or of the wrong type: ") + e.what());
    } catch (const std::invalid_argument& e) {
        throw bad(e.what());
    }
    if (b.origin.runId <= 0 || b.origin.host.empty()) throw bad("its origin names no run");
    return b;
}

} // namespace tb

namespace tb {

ImportResult RunStore::importRun(const RunBundle& b, const std::string& label, const std::string& checkpointFile)
{
    std::error_code ec;
    const auto here = std::filesystem::absolute(m_path, ec).lexically_normal().string();
    if (b.origin.host == store_detail::hostName() && b.origin.store == here) {
        throw InputError("that is run " + std::to_string(b.origin.runId) + " of this very store (" + m_path
                         + "); there is nothing to copy");
    }
    RunRecord r = b.run;
    if (r.status == RunStatus::Running || r.status == RunStatus::Created) {
        r.message = "running on " + label + " when copied (step " + std::to_string(r.stepsDone) + " of "
            + std::to_string(r.stepsTotal) + "); fetching it again updates this copy";
    }
    Transaction tx(*m_db);
    std::optional<std::int64_t> existing;
    {
        Statement q(*m_db, "SELECT id, status, steps_done, (SELECT count(*) FROM metrics m WHERE m.run_id = runs.id), "
                           "(SELECT count(*) FROM events e WHERE e.run_id = runs.id), message FROM runs "
                           "WHERE origin_host=? AND origin_store=? AND origin_run_id=?");
        q.bind(1, b.origin.host).bind(2, b.origin.store).bind(3, b.origin.runId);
        if (q.step()) {
            existing = q.columnInt(0);
            if (q.columnText(1) == runStatusName(r.status) && q.columnInt(2) == r.stepsDone
                && q.columnInt(3) == static_cast<std::int64_t>(b.metrics.size())
                && q.columnInt(4) == static_cast<std::int64_t>(b.events.size()) && q.columnText(5) == r.message
                && (checkpointFile.empty() || latestCheckpoint(*existing))) {
                return {*existing, ImportOutcome::Unchanged};
            }
        }
    }
    // The record's own columns, 1 to 19, in the order both statements below name them.
    const auto bindRecord = [&r](Statement& s) {
        s.bind(1, r.name).bind(2, runStatusName(r.status)).bind(3, r.createdAt).bind(4, r.startedAt).bind(5, r.endedAt);
        s.bind(6, r.configJson).bind(7, r.device).bind(8, r.precision).bind(9, r.appVersion).bind(10, r.torchVersion);
        s.bind(11, r.stepsTotal).bind(12, r.stepsDone).bind(13, r.finalLoss).bind(14, r.finalValLoss);
        s.bind(15, r.finalValAccuracy).bind(16, r.message).bind(17, r.estimatedPeakBytes).bind(18, r.estimateJson);
        s.bind(19, r.measuredPeakBytes);
    };
    std::int64_t id = 0;
    if (existing) {
        id = *existing;
        // A newer state of the same run: its rows are replaced; local tags and the note stay.
        for (const char* sql : {"DELETE FROM metrics WHERE run_id=?", "DELETE FROM metric_blocks WHERE run_id=?",
                                "DELETE FROM latest_metrics WHERE run_id=?", "DELETE FROM events WHERE run_id=?",
                                "DELETE FROM run_findings WHERE run_id=?"}) {
            Statement d(*m_db, sql);
            d.bind(1, id);
            d.run();
        }
        Statement u(*m_db, "UPDATE runs SET name=?, status=?, created_at=?, started_at=?, ended_at=?, config_json=?, "
                           "device=?, precision=?, app_version=?, torch_version=?, steps_total=?, steps_done=?, "
                           "final_loss=?, final_val_loss=?, final_val_accuracy=?, message=?, estimated_peak_bytes=?, "
                           "estimate_json=?, measured_peak_bytes=?, origin_label=? WHERE id=?");
        bindRecord(u);
        u.bind(20, label).bind(21, id);
        u.run();
    } else {
        Statement i(*m_db, "INSERT INTO runs(name, status, created_at, started_at, ended_at, config_json, device, "
                           "precision, app_version, torch_version, steps_total, steps_done, final_loss, final_val_loss, "
                           "final_val_accuracy, message, estimated_peak_bytes, estimate_json, measured_peak_bytes, note, "
                           "origin_host, origin_store, origin_run_id, origin_label) "
                           "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        bindRecord(i);
        i.bind(20, r.note).bind(21, b.origin.host).bind(22, b.origin.store);
        i.bind(23, b.origin.runId).bind(24, label);
        i.run();
        id = m_db->lastInsertId();
        Statement t(*m_db, "INSERT OR IGNORE INTO run_tags(run_id, tag) VALUES(?, ?)");
        for (const auto& tag : r.tags) {
            t.bind(1, id).bind(2, tag);
            t.run();
        }
    }
    std::vector<MetricPoint> points = b.metrics;
    for (auto& p : points) p.runId = id;
    insertMetrics(points);
    for (auto e : b.events) {
        e.runId = id;
        addEvent(e);
    }
    for (auto f : b.findings) {
        f.runId = id;
        addFindings(f);
    }
    if (!checkpointFile.empty() && b.checkpoint) {
        const auto folder = runFolder(id);
        std::filesystem::create_directories(folder);
        const auto target = folder + "/" + std::filesystem::path(b.checkpoint->path).filename().string();
        std::filesystem::rename(checkpointFile, target, ec);
        if (ec) {
            std::filesystem::copy_file(checkpointFile, target, std::filesystem::copy_options::overwrite_existing);
            std::filesystem::remove(checkpointFile, ec);
        }
        addArtifact({id, "checkpoint", b.checkpoint->step, target,
                     static_cast<std::int64_t>(std::filesystem::file_size(target)), wallClockNow()});
    }
    tx.commit();
    return {id, existing ? ImportOutcome::Updated : ImportOutcome::Added};
}

} // namespace tb
