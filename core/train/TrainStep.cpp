#include "train/TrainStep.h"

#include <cmath>

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

double learningRateAt(int step, int totalSteps, int warmupSteps, double peak, bool cosine)
{
    if (warmupSteps > 0 && step <= warmupSteps) return peak * step / warmupSteps;
    if (!cosine) return peak;
    const double span = std::max(1, totalSteps - warmupSteps);
    const double progress = std::clamp((step - warmupSteps) / span, 0.0, 1.0);
    const double floor = 0.1 * peak;
    return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

GptOptions gptOptionsFor(const RunConfig& config, const Dataset& data)
{
    GptOptions o;
    const auto& m = config.model;
    o.vocabSize = data.vocabSize();
    o.maxLen = data.seqLen();
    o.nLayer = m.nLayer;
    o.dModel = m.dModel;
    o.nHead = m.nHead;
    o.dFf = m.feedForwardWidth();
    o.positionalEncoding = m.positionalEncoding;
    o.dropout = m.dropout;
    o.tieEmbeddings = m.tieEmbeddings;
    o.activationCheckpointing = config.train.activationCheckpointing;
    o.loraRank = config.lora.rank;
    o.loraAlpha = config.lora.alpha;
    const auto has = [&](const char* t) {
        return std::find(config.lora.targets.begin(), config.lora.targets.end(), t) != config.lora.targets.end();
    };
    o.loraAttn = has("attn");
    o.loraMlp = has("mlp");
    return o;
}

} // namespace tb
