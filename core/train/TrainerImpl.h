#pragma once
// Trainer's private state, shared by Trainer.cpp (construction, the step loop,
// evaluation), TrainerStep.cpp (the parts of one step) and
// TrainerCheckpoint.cpp (saving, pruning and loading checkpoints). Not for
// use outside core/train.

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "config/RunConfig.h"
#include "train/DeviceAudit.h"
#ifdef TB_HAVE_C10D
#include "dist/GradReducer.h"
#include "dist/ProcessGroup.h"
#endif
#include "train/Datasets.h"
#include "train/LossScaler.h"
#include "train/ModelIo.h"
#include "train/TorchCompat.h"
#include "train/TrainStep.h"
#include "train/Trainer.h"

namespace tb {
namespace detail {
// `v` with `digits` decimals, as messages print figures.
std::string fixed(double v, int digits);
} // namespace detail

// One step's tensor bytes per phase (forward, backward, optimizer): the
// step's peak and the phase it came in (all of them for trainbench-cli
// measure). A phase that runs once per micro-batch keeps its largest peak.
// Measures nothing when `device` is empty; the options' onPhaseBegin hook is
// called either way.
class StepPhases final {
public:
    StepPhases(const TrainerOptions& options, std::string device, int step);
    void begin(int i);
    void end(int i, const char* name);
    bool measured() const { return !m_device.empty(); }
    const std::array<PhaseMemory, 3>& phases() const { return m_phase; }
    std::int64_t largestPeak() const;

private:
    const TrainerOptions& m_options;
    std::string m_device;
    int m_step;
    std::array<PhaseMemory, 3> m_phase;
};

using TrainerEmit = std::function<void(const char* severity, const char* kind, const std::string& message)>;

struct Trainer::Impl {
    RunConfig config;
    TrainerOptions options;
    std::string device;
    std::string precision;
    std::optional<ComputeCapability> capability; // nullopt on the CPU
    torch::Device torchDevice{torch::kCPU};
    std::unique_ptr<Dataset> data;
    std::shared_ptr<CausalLmImpl> model;
    std::vector<torch::Tensor> trainable;
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    at::Generator dataGen;
    std::vector<Batch> validation;
    DynamicLossScaler scaler;
    int startStep = 0;
    std::string lastCheckpoint;
    std::vector<AuditEntry> flagged; // the device audit before step 1
    // The latest forward's token ids as the data gave them (on the CPU, so
    // holding them costs no device memory), for the device-mismatch locator.
    torch::Tensor lastInputs;
#ifdef TB_HAVE_C10D
    // Data parallel (declared last: the reducer's hooks go before the model).
    std::unique_ptr<DistGroup> group;
    std::unique_ptr<GradReducer> reducer;
#endif
    int rank = 0;
    int world = 1;

    bool autocast() const { return precision == "bf16" || precision == "fp16"; }
    // Data parallel (Trainer.cpp): joins the group, starts every rank from
    // rank 0's weights and hooks the gradient reducer.
    void connect();
    // Whether every rank's gradients are finite.
    bool allFinite(bool mine)
    {
#ifdef TB_HAVE_C10D
        auto flag = torch::tensor({mine ? 1.0 : 0.0}, torch::kDouble);
        group->allreduce(flag, Reduce::Min);
        return flag.item<double>() > 0.5;
#else
        return mine;
#endif
    }
    struct SharedStep {
        double loss = 0;
        bool cancel = false;
        std::vector<std::int64_t> peaks; // per rank
    };
    SharedStep shareStep(const torch::Tensor& loss, bool cancel, std::int64_t peakBytes)
    {
        SharedStep out;
#ifdef TB_HAVE_C10D
        auto v = torch::zeros({2 + world}, torch::kDouble);
        auto a = v.accessor<double, 1>();
        a[0] = loss.defined() ? loss.item<double>() : 0.0;
        a[1] = cancel ? 1.0 : 0.0;
        a[2 + rank] = static_cast<double>(peakBytes);
        group->allreduce(v, Reduce::Sum);
        a = v.accessor<double, 1>();
        out.loss = a[0];
        out.cancel = a[1] > 0.5;
        for (int r = 0; r < world; ++r) out.peaks.push_back(static_cast<std::int64_t>(a[2 + r]));
#endif
        return out;
    }
    at::ScalarType autocastDtype() const { return precision == "bf16" ? torch::kBFloat16 : torch::kHalf; }
    bool useScaler() const { return precision == "fp16" || options.forceLossScaling; }

    void setLearningRate(double lr)
    {
        for (auto& group : optimizer->param_groups()) {
            if (config.optim.optimizer == "sgd") {
                static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
            } else {
                static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
            }
        }
    }

    EvalMetrics evaluate(int step)
    {
        torch::NoGradGuard noGrad;
        model->eval();
        double lossSum = 0, tokens = 0, exact = 0, examples = 0;
        for (const auto& cpuBatch : validation) {
            lastInputs = cpuBatch.inputs;
            const auto batch = cpuBatch.to(torchDevice);
            torch::Tensor logits;
            {
                compat::AutocastScope scope(torchDevice.type(), autocast(), autocastDtype());
                logits = model->forward(batch.inputs);
            }
            lossSum += maskedLossSum(logits, batch, 1.0).item<double>();
            tokens += batch.maskedCount();
            if (data->hasExactMatch()) {
                const auto correct = (logits.argmax(-1) == batch.targets).to(torch::kFloat);
                // An example is right when every masked position is right.
                const auto wrong = ((1.0 - correct) * batch.mask).sum(1);
                exact += (wrong == 0).sum().item<double>();
                examples += static_cast<double>(batch.inputs.size(0));
            }
        }
        model->train();
        lastInputs = torch::Tensor();
        EvalMetrics m;
        m.step = step;
        m.valLoss = tokens > 0 ? lossSum / tokens : 0.0;
        m.valAccuracy = examples > 0 ? exact / examples : -1.0;
        return m;
    }

    // One step's parts (TrainerStep.cpp). The "start" event (and the device
    // audit's warning) that opens a run.
    void announce(const TrainerEmit& emit, std::int64_t parameters, std::int64_t trainableParameters) const;
    // Draws the step's micro-batches, runs forward and backward on each
    // (the gradients reduced across ranks on the last), and returns the
    // summed loss; `commWait` gets the seconds spent waiting on the reduce.
    torch::Tensor forwardBackward(StepPhases& phases, double& commWait);
    // Unscales (fp16), clips and steps; false when an overflow skipped the
    // step. `gradNorm` gets the norm before clipping when it stepped.
    bool optimizerStep(int step, torch::Tensor& gradNorm, const TrainerEmit& emit);
    struct StepFigures {
        int step = 0;
        int totalSteps = 0;
        double loss = 0;
        double lr = 0;
        double stepMs = 0;
        double commWaitSeconds = 0;
        double tokensPerStep = 0;
        bool skipped = false;
    };
    StepMetrics stepMetrics(const StepFigures& f, const torch::Tensor& gradNorm, const StepPhases& phases,
                            const std::vector<std::int64_t>& rankPeaks) const;
    // A failed run's message made as useful as it can be: which rank is
    // gone, and where a device mismatch met.
    void explainFailure(TrainResult& result);

    // Checkpoints (TrainerCheckpoint.cpp).
    void prepareCheckpointDir() const;
    void pruneCheckpoints() const;
    std::string saveCheckpoint(int step, const TrainerCallbacks& callbacks);
    // Reads the checkpoint a run resumes from (once: openCheckpoint keeps
    // it for loadCheckpoint); its quantized base, where it has one, goes
    // into the model (true), so the folder is not quantized again.
    void openCheckpoint(const std::string& path);
    bool loadCheckpointQuantizedBase();
    void loadCheckpoint(const std::string& path);
    std::unique_ptr<torch::serialize::InputArchive> resumeArchive;
};

} // namespace tb
