#pragma once
// The experiment store: runs, metrics, events and artifacts in one SQLite
// file. Plain records only; no LibTorch.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/PeakError.h"

namespace tb {

class Database;
struct RunBundle;

enum class ImportOutcome { Added, Updated, Unchanged };
struct ImportResult {
    std::int64_t runId = 0; // the run's id in this store
    ImportOutcome outcome = ImportOutcome::Added;
};

enum class RunStatus { Created, Running, Finished, Failed, Cancelled, Interrupted };
std::string runStatusName(RunStatus status);
RunStatus runStatusFromString(const std::string& text);

// Where a run copied from another store (fetch, import-run) came from.
struct RunOrigin {
    std::string host;  // the machine's host name
    std::string store; // the store's path there
    std::int64_t runId = 0; // 0: the run was trained into this store
    std::string label; // how it was reached: the saved host, or "file"
};

struct RunRecord {
    std::int64_t id = 0;
    std::string name;
    RunStatus status = RunStatus::Created;
    double createdAt = 0;
    std::optional<double> startedAt, endedAt;
    std::string configJson;
    std::string device;
    std::string precision;
    std::string appVersion;
    std::string torchVersion;
    int stepsTotal = 0;
    int stepsDone = 0;
    std::optional<double> finalLoss, finalValLoss, finalValAccuracy;
    std::string message;
    std::optional<double> heartbeatAt;
    // The memory planner's estimate of the peak tensor bytes, made at launch
    // (with its terms as JSON), and the largest peak measured so far.
    std::optional<std::int64_t> estimatedPeakBytes;
    std::string estimateJson;
    std::optional<std::int64_t> measuredPeakBytes;
    std::string note;
    std::vector<std::string> tags; // sorted
    // For review: the lowest validation loss, the latest tokens/s, and the run
    // whose weights this one started from (train.init_from "run:N").
    std::optional<double> bestValLoss;
    std::optional<double> tokensPerSecond;
    std::optional<std::int64_t> parentRunId;
    // A sweep's trial (RunSweeps.cpp): the sweep and the trial (0-based).
    std::optional<std::int64_t> sweepId;
    int sweepTrial = -1;
    // The process training it, while it runs (as judged when read).
    std::optional<std::int64_t> ownerPid;
    std::string ownerHost;
    RunOrigin origin;
    // (estimated - measured) / measured peak, when both are known.
    std::optional<double> estimateError() const
    {
        if (!estimatedPeakBytes || !measuredPeakBytes) return std::nullopt;
        return peakEstimateError(*estimatedPeakBytes, *measuredPeakBytes);
    }
    // The processes (data-parallel ranks) that trained it: the stored
    // config's train.world_size, 1 when absent or unreadable.
    int worldSize() const;
};

struct NewRun {
    std::string name;
    std::string configJson;
    std::string device;
    std::string precision;
    std::string appVersion;
    std::string torchVersion;
    int stepsTotal = 0;
    // Name the run defaultRunName(name, its id, configJson, the previous
    // config of this name): "default-text #3 lr=0.001". Off: exactly `name`.
    bool defaultName = false;
};

struct MetricPoint {
    std::int64_t runId = 0;
    int step = 0;
    std::string key;
    double value = 0;
    double wallTime = 0;
};

// Diagnostics kept with a run: a set of findings as JSON (the diagnose
// module's format; the store keeps it as text).
struct FindingSetRecord {
    std::int64_t runId = 0;
    std::string source; // preflight | failure
    double time = 0;
    bool overridden = false; // preflight errors the user launched past
    std::string findingsJson;
};

struct EventRecord {
    std::int64_t runId = 0;
    double time = 0;
    std::string severity;
    std::string kind;
    std::string message;
    std::int64_t id = 0; // the row's id, in the order events were stored (0 for a new event)
};

struct ArtifactRecord {
    std::int64_t runId = 0;
    std::string kind; // checkpoint
    int step = 0;
    std::string path;
    std::int64_t bytes = 0;
    double createdAt = 0;
};

struct RunSummary {
    int stepsDone = 0;
    std::optional<double> finalLoss, finalValLoss, finalValAccuracy;
    std::string message;
};

// A sweep (core/tune/Sweep.h): its file, base config and target, and its
// trials as a queue. Trial status: pending | running | finished | failed |
// skipped (planned not to fit or not to run; reason says why) | stopping
// (early termination decided, its run not ended yet) | stopped (reason says
// why) | cancelled.
struct SweepTrialRecord {
    std::int64_t sweepId = 0;
    int trial = 0; // 0-based
    std::string valuesJson; // {"optim.lr": 0.003}
    std::string status = "pending";
    std::optional<std::int64_t> runId;
    std::string reason;
    std::optional<double> metric; // the sweep's metric at the trial's end
};

struct SweepRecord {
    std::int64_t id = 0;
    std::string name;
    double createdAt = 0;
    std::string specJson;
    std::string configJson;
    std::string baseDir;
    std::string gpu; // the catalogue card planned for; empty: this machine
    std::int64_t budgetBytes = 0;
    std::string status = "running"; // running | finished
    std::vector<SweepTrialRecord> trials;
};

// Seconds since the epoch, as stored.
double wallClockNow();

class RunStore final {
public:
    enum class Mode { ReadWrite, ReadOnly };
    // Opens (creating if needed) and migrates the schema. Throws StoreError with
    // one clear sentence for a file that is not SQLite, read-only, from a newer
    // Trainbench, or in a folder that cannot be written.
    explicit RunStore(const std::string& path, Mode mode = Mode::ReadWrite);
    ~RunStore();
    RunStore(const RunStore&) = delete;
    RunStore& operator=(const RunStore&) = delete;

    static int schemaVersion();
    // $TRAINBENCH_DB, else $XDG_DATA_HOME/trainbench/experiments.db, else ~/.local/share/...
    static std::string defaultPath();
    // Checkpoint folder of a run: <db file>-runs/<id>, next to the database.
    std::string runFolder(std::int64_t runId) const;
    const std::string& path() const { return m_path; }

    std::int64_t createRun(const NewRun& run);
    // Records this process as the owner (pid, its start time, host) of a running run.
    // Takes a stopped run for this process with one conditional UPDATE.
    // Throws InputError "run N is already running (pid P)" when another
    // process has it, or when it finished.
    void claimRun(std::int64_t runId);
    void markRunning(std::int64_t runId, int stepsTotal, const std::string& device, const std::string& precision);
    void markEnded(std::int64_t runId, RunStatus status, const RunSummary& summary);
    void heartbeat(std::int64_t runId, int stepsDone);
    // The estimate made at launch: peak tensor bytes and the terms as JSON.
    void setEstimate(std::int64_t runId, std::int64_t peakBytes, const std::string& estimateJson);

    void appendMetrics(const std::vector<MetricPoint>& points);
    // Metrics, events and a heartbeat in one transaction: all or nothing.
    // Throws StoreBusyError while the database is locked or the disk full.
    void writeBatch(std::int64_t runId, const std::vector<MetricPoint>& points, const std::vector<EventRecord>& events,
                    int stepsDone);
    // Drops metrics recorded after `step` (a resume re-runs those steps).
    void truncateMetricsAfter(std::int64_t runId, int step);
    void addEvent(const EventRecord& event);
    void addArtifact(const ArtifactRecord& artifact);
    void addFindings(const FindingSetRecord& findings);

    // All runs, or those matching a filter: space-separated conditions that
    // must all hold. "status=failed", "tag:baseline", "train.batch_size>=16"
    // (any config field by its dotted path), "loss<2.5"; other words match the
    // name or the note. Operators: = != < <= > >=; "double quotes" group
    // words. Throws InputError naming a term it cannot read.
    std::vector<RunRecord> listRuns(const std::string& filter = {});
    // The newest cancelled or interrupted run (liveness judged as listRuns
    // does): what Run > Resume last stopped run continues.
    std::optional<RunRecord> latestStoppedRun();
    // History edits. Throw InputError for an unknown run or a bad value.
    void addTag(std::int64_t runId, const std::string& tag);
    void removeTag(std::int64_t runId, const std::string& tag);
    void setNote(std::int64_t runId, const std::string& note);
    void rename(std::int64_t runId, const std::string& name);
    // Removes the run and its metrics, events, artifact rows and tags (not the
    // checkpoint files: runFolder() says where they are). Refuses a running run.
    void deleteRun(std::int64_t runId);
    std::optional<RunRecord> run(std::int64_t runId);
    std::vector<MetricPoint> metrics(std::int64_t runId, const std::string& key = {});
    // A series ready for display: at most about 2 x buckets points, keeping
    // the first and the last point and, for each of `buckets` equal step
    // ranges, its lowest and highest value (in step order), so spikes
    // survive. All points when there are fewer. metrics() gives the full series.
    std::vector<MetricPoint> metricSeries(std::int64_t runId, const std::string& key, int buckets);
    std::map<std::string, MetricPoint> latestMetrics(std::int64_t runId);
    std::vector<EventRecord> events(std::int64_t runId);
    // What a follower has not seen yet: the points of one series from
    // `firstStep` on, and the events stored after event row `afterId`.
    std::vector<MetricPoint> metricsFrom(std::int64_t runId, const std::string& key, int firstStep);
    std::vector<EventRecord> eventsAfter(std::int64_t runId, std::int64_t afterId);
    std::vector<FindingSetRecord> findings(std::int64_t runId);
    std::vector<ArtifactRecord> artifacts(std::int64_t runId);
    std::optional<ArtifactRecord> latestCheckpoint(std::int64_t runId);
    // Forgets artifact rows whose files are gone (pruned checkpoints).
    void dropMissingArtifacts(std::int64_t runId);

    // Runs left "running" by a process that no longer exists become
    // "interrupted". Called on open; returns how many were changed. Where the
    // owner's pid cannot be checked from here (another host or PID namespace,
    // /proc hidden), a heartbeat older than this many seconds decides.
    int reconcileInterrupted();
    // Sends `signal` to the process training run `runId` (SIGINT: stop after
    // the current step, as Ctrl-C does) and returns its pid. InputError, with
    // what to do, when the run is not running, or runs on another host or in
    // another PID namespace (its pid means nothing here).
    long signalOwner(std::int64_t runId, int signal);

    // Copies a run from another store in (RunBundle.h), keeping its origin;
    // the same origin again updates that copy, never a second one. A run
    // copied while it still runs there stays "running" (on `label`) until a
    // later copy says otherwise: no process here owns it.
    // `checkpointFile`, when set, is a local copy of the bundle's checkpoint:
    // it moves into the run's folder. `label` says how it was reached (a
    // host's name, "file"). InputError for a run of this very store.
    ImportResult importRun(const RunBundle& bundle, const std::string& label, const std::string& checkpointFile = {});
    // Sweeps (RunSweeps.cpp). createSweep stores the sweep and every trial
    // (pending) in one transaction and returns its id.
    std::int64_t createSweep(const SweepRecord& sweep);
    std::optional<SweepRecord> sweep(std::int64_t sweepId);
    std::vector<SweepRecord> listSweeps(); // newest first, trials included
    void updateSweepTrial(const SweepTrialRecord& trial);
    void setSweepStatus(std::int64_t sweepId, const std::string& status);
    // The sweep and trial a run belongs to, if any (History groups by it).
    std::optional<SweepTrialRecord> sweepTrialOfRun(std::int64_t runId);
    static constexpr double kHeartbeatTimeoutSeconds = 120.0;

    Database& database();

private:
    void requireRun(std::int64_t runId);
    void verifyOwnership();
    void migrate();
    void relocateLegacyCheckpoints();
    void insertMetrics(const std::vector<MetricPoint>& points);
    void rebuildBlock(std::int64_t runId, const std::string& key, std::int64_t block);
    std::unique_ptr<Database> m_db;
    std::string m_path;
    bool m_readOnly;
    int m_schema = 0; // the file's schema version (read-only opens do not migrate)
};

} // namespace tb
