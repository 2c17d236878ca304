#include "config/ModelSpec.h"

#include <algorithm>
#include <cmath>

namespace tb {

ModelSpec modelSpecFromHf(const HfArchitecture& a, const std::string& folder, int maxLen)
{
    ModelSpec o;
    o.type = a.llamaFamily() ? "llama" : a.modelType; // llama | gpt2 | gpt_neox
    o.hfFamily = a.modelType;
    o.scriptPath = folder;
    o.vocabSize = static_cast<int>(a.vocabSize);
    o.maxLen = maxLen;
    o.nLayer = static_cast<int>(a.layers);
    o.dModel = static_cast<int>(a.hiddenSize);
    o.nHead = static_cast<int>(a.heads);
    o.nKvHead = static_cast<int>(a.kvHeads);
    o.dFf = static_cast<int>(a.intermediateSize);
    o.headDimOverride = a.headDim * a.heads == a.hiddenSize ? 0 : static_cast<int>(a.headDim);
    o.positionalEncoding = a.learnedPositions ? "learned" : "rope";
    if (a.learnedPositions) o.maxLen = static_cast<int>(a.maxPositions); // the wpe table is the file's
    o.layerNormEps = a.layerNormEps;
    o.geluTanh = a.geluTanh;
    o.rotaryDims = static_cast<int>(a.rotaryDims);
    o.parallelResidual = a.parallelResidual;
    o.ropeTheta = a.ropeTheta;
    o.rmsNormEps = a.rmsNormEps;
    o.tieEmbeddings = a.tieEmbeddings;
    o.qkvBias = a.qkvBias;
    o.outputBias = a.outputBias;
    o.mlpBias = a.mlpBias;
    o.qkNorm = a.qkNorm;
    o.fusedProjections = a.fusedProjections;
    if (a.gemma) {
        o.gemmaNorms = true;
        o.geluTanh = true;
        o.embedScale = std::sqrt(static_cast<double>(a.hiddenSize));
        o.queryScale = 1.0 / std::sqrt(a.queryPreAttnScalar);
        o.slidingLayers = a.slidingLayers;
        o.localRopeTheta = a.localRopeTheta;
    }
    o.slidingWindow = static_cast<int>(std::min<std::int64_t>(a.slidingWindow, 1 << 30));
    if (a.ropeScalingType == "llama3") {
        o.ropeFactor = a.ropeFactor;
        o.ropeLowFreqFactor = a.ropeLowFreqFactor;
        o.ropeHighFreqFactor = a.ropeHighFreqFactor;
        o.ropeOriginalMaxPositions = static_cast<int>(a.ropeOriginalMaxPositions);
    }
    return o;
}

namespace {

// What the run sets on either kind of model (a folder's or a built-in one):
// dropout, the attention path, checkpointing and LoRA.
void applyRunSwitches(ModelSpec& o, const RunConfig& config)
{
    o.dropout = config.model.dropout;
    o.attention = config.model.attention;
    o.activationCheckpointing = config.train.activationCheckpointing;
    o.loraRank = config.lora.rank;
    o.loraAlpha = config.lora.alpha;
    o.loraDropout = config.lora.rank > 0 ? config.lora.dropout : 0.0;
    // "attn" and "mlp" name groups of projections; a llama config may also name one.
    const auto projections = loraProjections(config.model.type, config.lora.targets);
    o.loraTargets = {projections.begin(), projections.end()};
}

} // namespace

ModelSpec modelSpecFor(const RunConfig& config, int vocabSize, int seqLen)
{
    const auto& m = config.model;
    ModelSpec o;
    if (m.type == "hf") {
        const auto folder = resolvedModelPath(config);
        o = modelSpecFromHf(readHfArchitecture(folder), folder, seqLen);
        applyRunSwitches(o, config);
        return o;
    }
    o.type = m.type;
    o.scriptPath = resolvedModelPath(config);
    o.vocabSize = vocabSize;
    o.maxLen = seqLen;
    o.nLayer = m.nLayer;
    o.dModel = m.dModel;
    o.nHead = m.nHead;
    o.nKvHead = m.nKvHead;
    o.dFf = m.feedForwardWidth();
    o.positionalEncoding = m.type == "llama" ? "rope" : m.positionalEncoding;
    o.ropeTheta = m.ropeTheta;
    o.rmsNormEps = m.rmsNormEps;
    o.tieEmbeddings = m.tieEmbeddings;
    applyRunSwitches(o, config);
    return o;
}

} // namespace tb
