#pragma once
// The training loop behind both front ends. No LibTorch types in this header:
// the GUI and the CLI include it without pulling in torch/torch.h.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/RunConfig.h"
#include "dist/DistLaunch.h"
#include "train/DataPreparation.h"
#include "train/DeviceAudit.h"
#include "gpu/Discovery.h"

namespace tb {

struct ModelSpec; // config/ModelSpec.h
using ModelOptions = ModelSpec;

struct StepMetrics {
    int step = 0; // 1-based, the step just finished
    int totalSteps = 0;
    double loss = 0;
    double lr = 0;
    double gradNorm = 0;
    double tokensPerSecond = 0;
    double stepMs = 0;
    std::int64_t memCurrentBytes = 0;
    std::int64_t memPeakBytes = 0; // peak within this step
    const char* memPeakPhase = "";  // the phase it came in: forward | backward | optimizer
    // Data parallel: the rank whose peak memPeakBytes is (-1 in one process),
    // every rank's peak, and the time this rank waited on the gradient all-reduce.
    int memPeakRank = -1;
    std::vector<std::int64_t> rankPeakBytes;
    double commWaitMs = 0;
    double lossScale = 0;          // fp16 only
    bool skipped = false;          // fp16: gradients overflowed, step skipped
    // System metrics sampled as this step ended (a run session's
    // SystemSampler, every few seconds; empty between samples): key, value.
    std::vector<std::pair<std::string, double>> system;
};

struct EvalMetrics {
    int step = 0;
    double valLoss = 0;
    double valAccuracy = -1; // exact match in [0, 1]; -1 when the task has none
};

struct TrainerEvent {
    std::string severity; // info | warning | error
    std::string kind;     // e.g. checkpoint, precision, diverged
    std::string message;
};

struct TrainerCallbacks {
    std::function<void(const StepMetrics&)> onStep;
    std::function<void(const EvalMetrics&)> onEval;
    std::function<void(const TrainerEvent&)> onEvent;
    std::function<void(int step, const std::string& path, std::int64_t bytes)> onCheckpoint;
};

// Tensor bytes around one phase of one step: live at its start, the most live
// during it, live at its end. Phases: "forward" (batch, forward and loss of
// every micro-batch), "backward", "optimizer" (unscale, clip and step).
struct PhaseMemory {
    int step = 0;
    std::string phase;
    std::int64_t startBytes = 0;
    std::int64_t peakBytes = 0;
    std::int64_t endBytes = 0;
};

struct TrainerOptions {
    std::string checkpointDir; // empty: no checkpoints
    std::string resumeFrom;    // a checkpoint file to continue from
    // Model weights to start from (a checkpoint, .safetensors or a folder);
    // empty: config.train.init_from when it names a file, else random init.
    std::string initFrom;
    bool measureMemory = true; // counting allocator on CPU, caching-allocator stats on CUDA
    bool recordPhaseMemory = false; // TrainResult::phaseMemory, for trainbench-cli measure
    // For tests of the fp16 path on machines without a GPU: dynamic loss
    // scaling in any precision, and a non-finite gradient injected at a step.
    bool forceLossScaling = false;
    int injectNonFiniteGradientAtStep = 0;
    int injectRank = -1; // data parallel: inject on this rank only (-1: every rank)
    // Data parallel: this process's place in the run (world size 1: alone).
    // Rank 0 trains as usual; the others keep no checkpoints and report
    // nothing but their own failures. Batches are the global batch of
    // world size x train.batch_size, drawn from one seeded order and split
    // by rank, so N ranks see what one process at N times the batch sees.
    DistLaunch dist;
    bool distOverlap = true; // off: gradients are all-reduced after backward (bench/ baseline)
    // Ranks other than 0 learn rank 0's run folder here (their log goes beside the run).
    std::function<void(const std::string& folder)> onRunFolder;
    // Called as each phase of a step begins (phase 0 forward, 1 backward, 2
    // optimizer; the forward again before each further micro-batch): the
    // derived memory plan tags the allocations it traces with it.
    std::function<void(int step, int phase)> onPhaseBegin;
    // Tokenizing a corpus before the first step: its progress, summary and cancellation.
    DataPreparation data;
    // > 0: the model's sliding window taken as this many positions (the
    // derived memory plan traces the step past a window at short sequences).
    int slidingWindow = 0;
    // The derived memory plan's probes (train/DerivedPlan.cpp): build this
    // model instead of the config's (random weights: no folder or
    // init_from) and, with probeIdBytes 2 or 4, draw random ids of its
    // vocabulary laid out as the config's corpus would be (ids of that
    // width; a chat corpus's loss mask when probeMask).
    std::shared_ptr<const ModelOptions> probeModel;
    int probeIdBytes = 0; // 0: the config's own data
    bool probeMask = false;
    // The derived plan's whole-step traces: no validation passes (the set is
    // still loaded). They are not part of the step recorded, and at a
    // model's own widths in bf16 on a CPU without native bf16 they took
    // minutes (the addition task's held-out answers).
    bool skipEvaluation = false;
};

struct TrainResult {
    enum class Status { Finished, Cancelled, Failed };
    Status status = Status::Failed;
    int stepsDone = 0;
    double finalLoss = 0;
    double finalValLoss = -1;
    double finalValAccuracy = -1;
    std::string message;
    std::string lastCheckpoint;
    // Tokens a second from the end of the 10th step of this session to the end
    // of the last one (0 when fewer than 12 steps ran): the figure benchmarks report.
    double steadyTokensPerSecond = 0;
    std::vector<PhaseMemory> phaseMemory; // with TrainerOptions::recordPhaseMemory
    // Data parallel: seconds this rank waited on the gradient all-reduce, and
    // the whole training time, over the steps after the 10th (as steadyTokensPerSecond).
    double steadyCommWaitSeconds = 0;
    double steadySeconds = 0;
    // A failure by a device mismatch: where the devices met (re-run with per-module checks).
    std::optional<DeviceMeeting> deviceMeeting;
};

// "auto" -> "cuda" where LibTorch sees a GPU, else "cpu". Throws InputError
// for a device that does not exist here, naming what does.
std::string resolveDevice(const std::string& requested);
// A resolved device's compute capability: nullopt for "cpu"; for "cuda:N"
// the driver's answer (unknown when the driver gives none).
std::optional<ComputeCapability> deviceCapability(const std::string& device);
// The precision a run will use on a device of capability cc (nullopt: the
// CPU): auto -> bf16 where native on CUDA, fp16 with loss scaling on older
// CUDA GPUs, fp32 on the CPU. Throws InputError where it cannot run.
std::string resolvePrecision(const std::string& requested, std::optional<ComputeCapability> cc);
// "1.13.1" etc.
std::string torchVersion();
// Whether LibTorch here can run on a CUDA device.
bool cudaUsable();
// What this LibTorch can do with CUDA, for GPU discovery reports.
TorchCudaInfo torchCudaInfo();

// train.offload, and train.weights_dtype without LoRA, describe a setup to
// plan, not one Trainbench runs: what a run, measure or a derived plan of
// such a config would say (one message naming the fields set), else
// halfBaseProblem's answer for the precision asked for, or "".
std::string planningOnlyFieldsProblem(const RunConfig& config);
// (halfBaseProblem is config/RunConfig.h's.)

class Trainer final {
public:
    // Builds dataset, model and optimizer. Throws InputError for bad input.
    Trainer(const RunConfig& config, const TrainerOptions& options);
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;

    TrainResult run(const TrainerCallbacks& callbacks);
    // Thread-safe; the loop stops after the step in progress and checkpoints.
    void requestCancel() { m_cancel.store(true); }

    const std::string& device() const;
    const std::string& precision() const;
    // The device's compute capability (deviceCapability): what the run's
    // launch estimate is planned for, as the planner plans a target.
    std::optional<ComputeCapability> computeCapability() const;
    // Every weight of the model, a quantized base's included.
    std::int64_t parameterCount() const;
    // The storage of a quantized base's tensors (model.quantize), each one block.
    std::vector<const void*> quantizedBaseBlocks() const;
    // Per parameter, in the model's order: its elements, and its bytes when
    // it trains (0: frozen).
    std::vector<std::pair<std::int64_t, std::int64_t>> parameterSizes() const;
    std::int64_t trainableParameterCount() const;
    // Their bytes in the dtypes they train in (what data parallel's gradient buckets hold).
    std::int64_t trainableParameterBytes() const;
    int startStep() const; // > 0 after a resume
    int worldSize() const; // 1 unless data parallel
    int rank() const;
    std::string datasetDescription() const;
    // The device audit of the model as it sits on its device before step 1:
    // the entries that are not where they should be.
    const std::vector<AuditEntry>& auditFindings() const;
    // Named parameters' values after training, for tests (CPU copies).
    std::vector<std::pair<std::string, std::vector<float>>> parameterValues() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m;
    std::atomic<bool> m_cancel{false};
};

} // namespace tb
