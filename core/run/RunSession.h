#pragma once
// One run from start to end, as both front ends drive it: validate, open the
// store, build the trainer, stream metrics and events into the store, cancel,
// resume. The GUI's worker and trainbench-cli are thin shells over this.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "config/RunConfig.h"
#include "diagnose/Finding.h"
#include "diagnose/Preflight.h"
#include "memory/Estimator.h"
#include "store/RunStore.h"
#include "train/Trainer.h"

namespace tb {

class MetricWriter;

struct SessionOptions {
    std::string dbPath;         // empty: RunStore::defaultPath()
    bool measureMemory = true;  // the memory probe
    bool recordMetrics = true;  // per-step metrics into the store
    // Benchmark baseline: no metric writer thread, no per-step callback, no
    // per-step loss read (only the last step is logged), no memory probe.
    bool bare = false;
    // Launch even though preflight found errors (GUI: after a confirmation;
    // CLI: --force). The findings and the override are stored with the run.
    bool force = false;
    // Data parallel: this process's rank (trainbench-cli --nproc, torchrun,
    // srun). Rank 0 stores the run; RunSession is for rank 0 only.
    DistLaunch dist;
    bool distOverlap = true; // off: the non-overlapped all-reduce (benchmark baseline)
    // Tests of the fp16 path without a GPU (TrainerOptions says more).
    bool forceLossScaling = false;
    int injectNonFiniteGradientAtStep = 0;
    int injectRank = -1;
};
// Preflight at launch found errors and the launch was not forced.
class PreflightError : public InputError {
public:
    explicit PreflightError(std::vector<Finding> findings);
    const std::vector<Finding>& findings() const { return m_findings; }

private:
    std::vector<Finding> m_findings;
};

// This machine as a launch sees it: LibTorch's CUDA, the driver's devices, host memory.
LocalMachine localMachine();
// Preflight of a config about to be launched here (a missing data file is left
// to the run, which fails on it and is stored as failed).
std::vector<Finding> launchPreflight(const RunConfig& config);
// The same with this machine's facts already gathered (a panel re-checking on
// every edit). A config's memory is checked with its own step's plan, the
// step derivePlan gives (a panel's deriver, null while it traces); without
// one it is derived here (seconds), once for the check and the estimate the
// run records (launchEstimate).
std::vector<Finding> launchPreflight(const RunConfig& config, const LocalMachine& local,
                                     std::function<std::shared_ptr<const DerivedStep>(const RunConfig&)> derivePlan = {});
// A failure's text explained; with the config known, an out-of-memory finding
// gains the batch the memory planner says fits on the device it ran on.
std::vector<Finding> explainFailure(const std::string& message, const RunConfig* config, const std::string& device);

struct SessionCallbacks {
    std::function<void(std::int64_t runId, const std::string& description)> onStarted;
    std::function<void(const StepMetrics&)> onStep;
    std::function<void(const EvalMetrics&)> onEval;
    std::function<void(const TrainerEvent&)> onEvent;
};

struct SessionOutcome {
    RunStatus status = RunStatus::Failed;
    std::int64_t runId = 0;
    int stepsDone = 0;
    int totalSteps = 0;
    double finalLoss = 0;
    double finalValLoss = -1;
    double finalValAccuracy = -1;
    std::string message;
    std::string checkpoint;
    std::string dbPath;
    double steadyTokensPerSecond = 0; // see TrainResult
    RunConfig config;                 // what was trained (for sampling from it)
    // Metric values and events that could not be stored (the database stayed
    // locked or the disk full): the front ends say so and exit non-zero.
    std::int64_t lostValues = 0;
    // Peak tensor bytes: the planner's estimate at launch and the largest
    // measured in this session (0 when not measured), with its phase.
    std::int64_t estimatedPeakBytes = 0;
    std::int64_t measuredPeakBytes = 0;
    std::string measuredPeakPhase;
    // The planner's error on this run's peak (common/PeakError.h).
    std::optional<double> estimateError() const { return peakEstimateError(estimatedPeakBytes, measuredPeakBytes); }
    // A failed run's explanation, the primary finding first (empty otherwise).
    std::vector<Finding> failureFindings;
};

// The planner's estimate for what a run trains on its device ("cpu",
// "cuda:N") of capability cc: the config resolved through planOnTarget, as
// the Memory planner, the Experiment form, preflight and estimate resolve a
// target, so a run on an H100 records the figures (precision, cuBLAS
// workspaces, CUDA context) the planner shows for an H100: its own step's
// plan, as the planner shows it. The run stores its peak tensor
// bytes (what the memory probe measures) and terms.
MemoryEstimate launchEstimate(const RunConfig& config, const std::string& device, std::optional<ComputeCapability> cc);

// Every run checks the memory planner: the warning event's text when the
// measured peak tensor bytes exceed the launch estimate by more than 10%,
// naming the step and the phase; empty otherwise.
std::string memoryEstimateWarning(std::int64_t estimatedBytes, std::int64_t measuredBytes, const std::string& phase,
                                  int step);

// Why stored run `runId` cannot be resumed, in the words `resume` refuses it
// with (the command line and the window give this one answer); empty when it
// can be. A run whose status is running is refused when it is claimed, with
// the process that holds it.
std::string resumeRefusal(RunStore& store, std::int64_t runId);

class RunSession final {
public:
    // A new run. Throws InputError (config, device, database) before anything is stored.
    RunSession(RunConfig config, SessionOptions options);
    // Continues run `runId` from its last checkpoint. Throws InputError when
    // there is no such run, nothing to resume, or no checkpoint.
    static std::unique_ptr<RunSession> resume(std::int64_t runId, SessionOptions options);
    ~RunSession();

    // Blocks until the run ends; call it from the thread that should train.
    SessionOutcome run(const SessionCallbacks& callbacks);
    // Thread-safe and async-signal-friendly: sets a flag the loop polls between steps.
    void requestCancel();

    const RunConfig& config() const { return m_config; }
    std::int64_t runId() const { return m_runId; }
    const std::string& dbPath() const { return m_dbPath; }
    // The memory planner's estimate for this run, made at launch (empty before).
    const std::optional<MemoryEstimate>& estimate() const { return m_estimate; }
    // The findings of the preflight made at construction (a resume makes none).
    const std::vector<Finding>& preflight() const { return m_preflight; }

private:
    RunSession() = default;
    void resolveInitFrom();
    // The parts of run(): preflight's findings stored with a new run, the
    // trainer's options, and the callbacks that store each step's metrics,
    // evaluations, events and checkpoints through `writer` and pass them on.
    void recordPreflight(SessionOutcome& outcome);
    TrainerOptions trainerOptions(const SessionCallbacks& callbacks);
    TrainerCallbacks storingCallbacks(MetricWriter& writer, SessionOutcome& outcome, const SessionCallbacks& callbacks);
    RunConfig m_config;
    SessionOptions m_options;
    std::string m_dbPath;
    std::unique_ptr<RunStore> m_store;
    std::int64_t m_runId = 0;
    std::string m_resumeCheckpoint;
    std::string m_initFromPath; // resolved train.init_from
    std::string m_initFromLabel;
    int m_resumeStep = 0;
    std::optional<MemoryEstimate> m_estimate;
    std::vector<Finding> m_preflight;
    std::atomic<bool> m_cancel{false};
    std::mutex m_trainerMutex;
    Trainer* m_trainer = nullptr;
};

} // namespace tb
