#include "config/ModelSpec.h"

#include <algorithm>
#include <cmath>

namespace tb {

ModelSpec modelSpecFromHf(const HfArchitecture& a, const std::string& folder, int maxLen)
{
    ModelSpec o;
    o.type = a.llamaFamily() ? "llama" : a.modelType; // llama | gpt2 | gpt_neox
    if (a.geluMlp) {
        // Planned only: a Llama-named config with a plain GELU MLP is the
        // built-in GPT's block with RoPE.
        o.type = "gpt";
        o.positionalEncoding = "rope";
    }
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

std::int64_t parameterCount(const ModelSpec& m)
{
    const std::int64_t d = m.dModel, ff = m.dFf, vocab = m.vocabSize;
    // A projection of `in` to `out` features: its weight, its bias, and the
    // adapter's two matrices where it has one (GPT-2 and GPT-NeoX name an
    // adapter by its leaf or by "attn."/"mlp." and the leaf).
    const auto linear = [&](const char* parent, const char* leaf, std::int64_t in, std::int64_t out, bool bias) {
        const int rank = std::max(m.adapterRank(leaf), *parent ? m.adapterRank(std::string(parent) + "." + leaf) : 0);
        return in * out + (bias ? out : 0) + static_cast<std::int64_t>(rank) * (in + out);
    };
    const std::int64_t head = m.tieEmbeddings ? 0 : vocab * d;
    if (m.type == "llama") {
        const std::int64_t hd = m.headDim(), q = m.nHead * hd, kv = m.kvHeads() * hd;
        std::int64_t attention = 0, mlp = 0;
        if (m.fusedProjections) {
            attention = linear("", "qkv_proj", d, q + 2 * kv, m.qkvBias);
            mlp = linear("", "gate_up_proj", d, 2 * ff, m.mlpBias);
        } else {
            attention = linear("", "q_proj", d, q, m.qkvBias) + linear("", "k_proj", d, kv, m.qkvBias)
                + linear("", "v_proj", d, kv, m.qkvBias);
            mlp = linear("", "gate_proj", d, ff, m.mlpBias) + linear("", "up_proj", d, ff, m.mlpBias);
        }
        attention += linear("", "o_proj", q, d, m.outputBias);
        mlp += linear("", "down_proj", ff, d, m.mlpBias);
        const std::int64_t norms = (m.gemmaNorms ? 4 : 2) * d + (m.qkNorm ? 2 * hd : 0);
        return vocab * d + m.nLayer * (attention + mlp + norms) + d + head;
    }
    // The GPT family: LayerNorms with biases around a fused q/k/v projection
    // and a GELU MLP. The built-in GPT biases every projection.
    const bool gpt2 = m.type == "gpt2", neox = m.type == "gpt_neox";
    const bool qkvBias = neox ? m.qkvBias : true, outputBias = neox ? m.outputBias : true;
    std::int64_t block = 4 * d; // two LayerNorms
    if (gpt2) {
        block += linear("attn", "c_attn", d, 3 * d, true) + linear("attn", "c_proj", d, d, true)
            + linear("mlp", "c_fc", d, ff, true) + linear("mlp", "c_proj", ff, d, true);
    } else if (neox) {
        block += linear("attn", "query_key_value", d, 3 * d, qkvBias) + linear("attn", "dense", d, d, outputBias)
            + linear("mlp", "dense_h_to_4h", d, ff, true) + linear("mlp", "dense_4h_to_h", ff, d, true);
    } else {
        block += linear("", "qkv", d, 3 * d, true) + linear("", "proj", d, d, true) + linear("", "fc", d, ff, true)
            + linear("", "out", ff, d, true);
    }
    const bool learned = gpt2 || (m.type == "gpt" && m.positionalEncoding == "learned");
    return vocab * d + (learned ? static_cast<std::int64_t>(m.maxLen) * d : 0) + m.nLayer * block + 2 * d + head;
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

int builtInVocabSize(const RunConfig& config) { return config.data.source == "addition" ? 13 : 256; }

std::int64_t parameterCount(const RunConfig& config)
{
    return parameterCount(modelSpecFor(config, builtInVocabSize(config), effectiveSeqLen(config)));
}

} // namespace tb
