#include "train/TrainStep.h"

#include <cmath>

#include "train/Gpt.h"
#include "train/HfGpt.h"
#include "train/HfModel.h"
#include "train/Llama.h"
#include "train/ScriptedModel.h"

namespace tb {

torch::Tensor maskedLossSum(const torch::Tensor& logits, const Batch& batch, double normalizer)
{
    const auto vocab = logits.size(-1);
    // Cross-entropy in fp32 whatever the autocast dtype, as torch.autocast does.
    const auto perToken = torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}).to(torch::kFloat), batch.targets.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    if (!batch.mask.defined()) return perToken.sum() / normalizer;
    return (perToken * batch.mask.reshape({-1}).to(perToken.scalar_type())).sum() / normalizer;
}

double maskedTokenCount(const std::vector<Batch>& microBatches)
{
    double count = 0;
    for (const auto& b : microBatches) count += b.maskedCount();
    return std::max(count, 1.0);
}

ModelOptions modelOptionsFor(const RunConfig& config, const Dataset& data)
{
    return modelSpecFor(config, data.vocabSize(), data.seqLen());
}

namespace {

std::shared_ptr<CausalLmImpl> buildModel(const ModelOptions& options)
{
    if (options.type == "llama") return std::make_shared<LlamaImpl>(options);
    if (options.type == "gpt2") return std::make_shared<Gpt2LmImpl>(options);
    if (options.type == "gpt_neox") return std::make_shared<GptNeoXLmImpl>(options);
    if (options.type == "torchscript") return std::make_shared<ScriptedLmImpl>(options);
    return std::make_shared<GptImpl>(options);
}

} // namespace

std::shared_ptr<CausalLmImpl> makeModel(const ModelOptions& options)
{
    auto model = buildModel(options);
    // Every family's adapters drop their input alike (PEFT's lora_dropout).
    if (options.loraDropout > 0) {
        for (auto& m : model->named_modules("", false)) {
            if (auto* layer = dynamic_cast<LoraLinearImpl*>(m.value().get()); layer && layer->hasAdapter()) {
                layer->setAdapterDropout(options.loraDropout);
            }
        }
    }
    return model;
}

torch::Tensor clipGradNorm(const std::vector<torch::Tensor>& parameters, double maxNorm)
{
    std::vector<torch::Tensor> norms;
    norms.reserve(parameters.size());
    for (const auto& p : parameters) {
        if (p.grad().defined()) norms.push_back(p.grad().detach().norm());
    }
    if (norms.empty()) return torch::zeros({});
    auto total = torch::stack(norms).norm();
    if (std::isfinite(maxNorm)) {
        // As torch.nn.utils.clip_grad_norm_: scale by min(1, max / (norm + 1e-6)).
        const auto coef = (maxNorm / (total + 1e-6)).clamp_max(1.0);
        for (const auto& p : parameters) {
            if (p.grad().defined()) p.grad().detach().mul_(coef);
        }
    }
    return total;
}

} // namespace tb
