#pragma once
// Trainer's private state, shared by Trainer.cpp (construction, the step loop,
// evaluation) and TrainerCheckpoint.cpp (saving, pruning and loading
// checkpoints). Not for use outside core/train.

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
// The first line of an exception's text (LibTorch appends its C++ backtrace).
std::string firstLine(const std::string& text);
} // namespace detail

struct Trainer::Impl {
    RunConfig config;
    TrainerOptions options;
    std::string device;
    std::string precision;
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

    // Checkpoints (TrainerCheckpoint.cpp).
    void prepareCheckpointDir() const;
    void pruneCheckpoints() const;
    std::string saveCheckpoint(int step, const TrainerCallbacks& callbacks);
    void loadCheckpoint(const std::string& path);
};

} // namespace tb
