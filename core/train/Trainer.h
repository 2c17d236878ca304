#pragma once
// The training loop behind both front ends. No LibTorch types in this header:
// the GUI and the CLI include it without pulling in torch/torch.h.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "train/DataPreparation.h"
#include "train/DeviceAudit.h"
#include "gpu/Discovery.h"

namespace tb {

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
    double lossScale = 0;          // fp16 only
    bool skipped = false;          // fp16: gradients overflowed, step skipped
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
    // Tokenizing a corpus before the first step: its progress, summary and cancellation.
    DataPreparation data;
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
    // A failure by a device mismatch: where the devices met (re-run with per-module checks).
    std::optional<DeviceMeeting> deviceMeeting;
};

// "auto" -> "cuda" where LibTorch sees a GPU, else "cpu". Throws InputError
// for a device that does not exist here, naming what does.
std::string resolveDevice(const std::string& requested);
// The precision a run will use: auto -> bf16 where native on CUDA, fp16 with
// loss scaling on older CUDA GPUs, fp32 on the CPU.
std::string resolvePrecision(const std::string& requested, const std::string& device);
// "1.13.1" etc.
std::string torchVersion();
// Whether LibTorch here can run on a CUDA device.
bool cudaUsable();
// What this LibTorch can do with CUDA, for GPU discovery reports.
TorchCudaInfo torchCudaInfo();

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
    std::int64_t parameterCount() const;
    std::int64_t trainableParameterCount() const;
    int startStep() const; // > 0 after a resume
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
