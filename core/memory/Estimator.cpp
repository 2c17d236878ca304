#include "memory/Estimator.h"

#include "config/ModelSpec.h"
#include "memory/Concurrently.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <thread>

namespace tb {
namespace {

// Validation examples kept resident for the whole run.
std::int64_t validationExamples(const TrainingSetup& S, std::int64_t batch, int gpus)
{
    // Data parallel: rank 0 evaluates the global batch's worth (the planned rank).
    const auto wanted = S.evalBatches * batch * std::max(1, gpus);
    return S.validationCap > 0 ? std::min(wanted, S.validationCap) : wanted;
}

std::int64_t exampleBytes(std::int64_t seqLen, const std::string& dataset)
{
    return (seqLen + 1) * 8 + (datasetHasLossMask(dataset) ? seqLen * 4 : 0);
}

} // namespace

CudaContextFigure cudaContextFor(int cc)
{
    // nvidia-smi's figure for a process that has made its context and no
    // tensors, with lazy module loading (LibTorch's default since 1.13).
    if (cc == 86) {
        return {256LL << 20, "256 MiB on an RTX 3090 (compute capability 8.6), torch 2.7.1, nvidia-smi "
                             "(github.com/invoke-ai/InvokeAI/issues/9413)"};
    }
    if (cc == 89) {
        return {426LL << 20, "426 MiB on an RTX 6000 Ada (8.9), torch 2.10, nvidia-smi with nothing allocated "
                             "(github.com/unslothai/unsloth-zoo/pull/1053)"};
    }
    return {287047680, "287,047,680 bytes with lazy module loading, PyTorch PR #86509 (card not stated; no published "
                       "figure for compute capability " + (cc > 0 ? std::to_string(cc / 10) + "." + std::to_string(cc % 10) : std::string("unknown"))
                       + "; estimate --cuda-context takes a measured one)"};
}

std::int64_t cublasWorkspaceBytes(int torchMajor, int cc)
{
    // LibTorch 2.x: CUBLAS_WORKSPACE_CONFIG's default ":4096:2:16:8", or
    // 32 MiB on compute capability 9.0 (CublasHandlePool.cpp, PR #91564),
    // allocated through the caching allocator. 1.13 lets cuBLAS keep its
    // own, 4 MiB on cards before Hopper and 32 MiB on Hopper (the cuBLAS
    // reference, cublasSetWorkspace), outside the allocator.
    // Both: 32 MiB on compute capability 9.0 (Hopper) only, as PyTorch's check reads.
    if (torchMajor >= 2) return cc == 90 ? 32LL << 20 : 4096 * 1024 * 2 + 16 * 1024 * 8;
    return cc == 90 ? 32LL << 20 : 4LL << 20;
}

std::string architectureGap(const ModelSpec& m)
{
    const auto family = m.hfFamily.empty() ? m.type : m.hfFamily;
    if (m.type == "torchscript") return "a TorchScript model";
    if (m.gemmaNorms) return "Gemma 3's layout (its norms, GeGLU, sliding and full layers)";
    if (m.qkNorm) return "query and key norms (" + family + ")";
    if (m.fusedProjections) return "fused q/k/v and gate/up projections (" + family + ")";
    if (m.headDimOverride > 0) {
        return "a head size apart from hidden / heads (head_dim " + std::to_string(m.headDimOverride)
            + ", hidden_size / num_attention_heads " + std::to_string(m.dModel / m.nHead) + ")";
    }
    return {};
}

ArchitectureSpec architectureOf(const ModelSpec& m)
{
    if (const auto gap = architectureGap(m); !gap.empty()) throw InputError(gap + ": not described by ArchitectureSpec");
    ArchitectureSpec a;
    a.vocabSize = m.vocabSize;
    a.layers = m.nLayer;
    a.hidden = m.dModel;
    a.heads = m.nHead;
    a.kvHeads = m.kvHeads();
    a.intermediate = m.dFf;
    a.maxPositions = m.maxLen;
    a.tieEmbeddings = m.tieEmbeddings;
    // (GPT-2 and GPT-NeoX: the GPT family's layout.)
    a.family = m.type == "llama" ? "llama" : "gpt";
    return a;
}

ArchitectureSpec architectureFor(const RunConfig& c)
{
    if (!plannableModel(c)) {
        throw InputError("the memory planner models the built-in architectures (gpt, llama) and published ones; a "
                         "torchscript model's memory is measured while it trains (trainbench-cli measure)");
    }
    // The model the trainer builds (config/ModelSpec.h), the built-in one
    // with the vocabulary its data has.
    const int vocab = builtInVocabSize(c);
    try {
        auto a = architectureOf(modelSpecFor(c, vocab, effectiveSeqLen(c)));
        a.name = c.name;
        return a;
    } catch (const InputError&) {
        if (c.model.type != "hf") throw;
        // The folder is gone, or has what ArchitectureSpec does not describe
        // (e.g. a head_dim of its own): the sizes the run recorded from it.
        ArchitectureSpec a;
        a.name = c.name;
        a.family = "llama";
        a.vocabSize = c.model.vocabSize > 0 ? c.model.vocabSize : 256;
        a.layers = c.model.nLayer;
        a.hidden = c.model.dModel;
        a.heads = c.model.nHead;
        a.kvHeads = c.model.nKvHead > 0 ? c.model.nKvHead : c.model.nHead;
        a.intermediate = c.model.feedForwardWidth();
        a.maxPositions = effectiveSeqLen(c);
        a.tieEmbeddings = c.model.tieEmbeddings;
        return a;
    }
}

std::vector<std::string> plannedLoraTargets(const std::string& modelType, const std::vector<std::string>& targets)
{
    auto projections = loraProjections(modelType, targets);
    if (modelType != "hf") return projections;
    // GPT-2's and GPT-NeoX's projections under the names the planner's GPT
    // family uses (qkv, proj, fc, out); the Llama family's are its own.
    static const std::map<std::string, std::vector<std::string>> kPlannerNames{
        {"c_attn", {"qkv"}}, {"attn.c_attn", {"qkv"}}, {"query_key_value", {"qkv"}}, {"attn.query_key_value", {"qkv"}},
        {"attn.c_proj", {"proj"}}, {"dense", {"proj"}}, {"attn.dense", {"proj"}}, {"c_proj", {"proj", "out"}},
        {"c_fc", {"fc"}}, {"mlp.c_fc", {"fc"}}, {"dense_h_to_4h", {"fc"}}, {"mlp.dense_h_to_4h", {"fc"}},
        {"mlp.c_proj", {"out"}}, {"dense_4h_to_h", {"out"}}, {"mlp.dense_4h_to_h", {"out"}}};
    std::vector<std::string> names;
    for (const auto& t : projections) {
        const auto it = kPlannerNames.find(t);
        for (const auto& n : it == kPlannerNames.end() ? std::vector<std::string>{t} : it->second) {
            if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
        }
    }
    return names;
}

TrainingSetup setupFor(const RunConfig& c)
{
    TrainingSetup s;
    s.batch = c.train.batchSize;
    s.seqLen = effectiveSeqLen(c);
    s.gradAccum = c.train.gradAccum;
    s.gpus = c.train.worldSize; // data parallel: the plan is per rank
    // As the trainer sets LibTorch's pool (train/Threads.h's threadSetupFor):
    // train.threads N, else one thread, or with data parallel the cores
    // shared among the ranks (planned as all on this machine).
    s.cpuThreads = c.train.threads > 0 ? c.train.threads : 1;
    if (c.train.threads == 0 && c.train.worldSize > 1) {
        s.cpuThreads = std::max(1, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) / c.train.worldSize);
    }
    s.optimizer = c.optim.optimizer == "sgd" ? (c.optim.momentum > 0 ? "sgd" : "sgd-plain") : "adamw";
    s.precision = c.train.precision == "auto" ? "fp32" : c.train.precision;
    s.checkpointing = c.train.activationCheckpointing;
    // Weights loaded in half precision: full training of bf16 weights is
    // pure bf16 (a LoRA base kept in it is planned from its own step).
    if (c.train.weightsDtype == "bf16" && c.lora.rank == 0 && c.train.precision == "bf16") s.precision = "bf16-pure";
    s.attention = c.model.attention == "sdpa" ? "fused" : "eager";
    s.loraRank = c.lora.rank;
    s.loraTargets = plannedLoraTargets(c.model.type, c.lora.targets);
    s.dropout = c.model.dropout;
    s.dataset = c.data.source == "tokens" ? "text" : c.data.source; // both are windows of a mapped file
    s.evalBatches = c.train.evalBatches;
    if (c.data.source == "addition") {
        std::int64_t limit = 1;
        for (int i = 0; i < c.data.digits; ++i) limit *= 10;
        const auto total = limit * limit;
        if (total < 1000000) s.validationCap = static_cast<std::int64_t>(c.data.valFraction * total + 1);
    }
    return s;
}

std::int64_t dataBytes(const TrainingSetup& S, std::int64_t batch, std::int64_t seqLen, const std::string& dataset, int gpus,
                       int gradAccum)
{
    return (validationExamples(S, batch, gpus) + gradAccum * batch * std::max(1, gpus)) * exampleBytes(seqLen, dataset);
}

std::int64_t dataBytes(const TrainingSetup& S) { return dataBytes(S, S.batch, S.seqLen, S.dataset, S.gpus, S.gradAccum); }

void placeAllocatorReserve(FitMap& map, const std::vector<std::int64_t>& placedBase, std::size_t lightIndex,
                           const std::function<MemoryEstimate()>& lightest,
                           const std::function<MemoryEstimate(std::size_t)>& exact)
{
    // On a GPU the caching allocator reserves more than the tensors, and how
    // much more follows the shape, not only the tensors' total: a long
    // sequence's attention maps take segments of their own (near an A100's
    // budget, Qwen2.5 1.5B's reserve beyond its tensors is 18% of them at
    // 160 tokens and 40% at 3,600). Its model replays a whole step
    // (milliseconds), too slow for every cell. The map replays the lightest
    // cell (a segment's fixed part weighs most on small steps), the cell
    // whose tensors are nearest the budget, and the same in each of
    // kMoreRows more rows whose tensors come within 10% of the budget,
    // spread along the sequence, all at once. In each replayed row the
    // reserve is the line through the lightest cell's and the row's (a row
    // whose cell is hardly heavier than the lightest: in proportion to its
    // tensors); between replayed rows its intercept and slope are
    // interpolated along the sequence, beyond them the nearest row's. A
    // replayed cell takes the estimate's figure.
    constexpr std::size_t kMoreRows = 2;
    constexpr double kBand = 0.10; // a row taken: one of its cells' tensors within 10% of the budget
    const auto budget = map.budgetBytes;
    const auto& seqLens = map.seqLens;
    const std::size_t cols = map.batches.size();
    if (cols == 0) return;
    const auto base = map.peakBytes; // each cell's tensors and what lies outside the allocator
    const auto off = [&](std::size_t i) { return std::llabs(map.peakBytes[i] - budget); };
    const auto nearestInRow = [&](std::size_t row) {
        std::optional<std::size_t> best;
        for (std::size_t i = row * cols; i < (row + 1) * cols; ++i) {
            if (placedBase[i] >= 0 && (!best || off(i) < off(*best))) best = i;
        }
        return best;
    };
    std::optional<std::size_t> nearest;
    std::vector<std::size_t> crossed; // rows with a cell's tensors within kBand of the budget
    for (std::size_t row = 0; row < seqLens.size(); ++row) {
        const auto best = nearestInRow(row);
        if (!best) continue;
        if (!nearest || off(*best) < off(*nearest)) nearest = best;
        if (static_cast<double>(off(*best)) <= kBand * static_cast<double>(budget)) crossed.push_back(row);
    }
    if (!nearest) return;
    // The rows replayed: the nearest cell's, then each the farthest along the
    // sequence from those already taken.
    std::vector<std::size_t> cells{*nearest};
    std::vector<std::size_t> rows{*nearest / cols};
    while (cells.size() < 1 + kMoreRows) {
        std::optional<std::size_t> farthest;
        std::int64_t farthestBy = 0;
        for (const auto row : crossed) {
            auto by = std::numeric_limits<std::int64_t>::max();
            for (const auto taken : rows) by = std::min<std::int64_t>(by, std::llabs(seqLens[row] - seqLens[taken]));
            if (by > farthestBy) {
                farthestBy = by;
                farthest = row;
            }
        }
        if (!farthest) break;
        rows.push_back(*farthest);
        cells.push_back(*nearestInRow(*farthest));
    }
    std::vector<MemoryEstimate> replays(cells.size());
    forEachConcurrently(cells.size(), [&](std::size_t i) {
        if (cells[i] != lightIndex) replays[i] = exact(cells[i]);
    });
    const auto light = lightest(); // (its replay ran while the cells were placed)
    for (std::size_t k = 0; k < cells.size(); ++k) {
        if (cells[k] == lightIndex) replays[k] = light;
    }
    const auto tLight = static_cast<double>(light.tensorPeakBytes);
    const auto xLight = static_cast<double>(std::max<std::int64_t>(0, light.reservedPeakBytes - light.tensorPeakBytes));
    struct Line {
        double seq = 0, atZero = 0, perByte = 0; // the reserve: atZero + perByte x the tensors the allocator holds
    };
    std::vector<Line> lines;
    for (std::size_t k = 0; k < cells.size(); ++k) {
        const auto t = static_cast<double>(replays[k].tensorPeakBytes);
        const auto x = static_cast<double>(std::max<std::int64_t>(0, replays[k].reservedPeakBytes - replays[k].tensorPeakBytes));
        Line l;
        l.seq = static_cast<double>(seqLens[cells[k] / cols]);
        const bool apart = t - tLight > 0.05 * t; // (else the line through the two is ill-conditioned)
        l.perByte = apart ? (x - xLight) / (t - tLight) : (t > 0 ? x / t : 0.0);
        l.atZero = apart ? xLight - l.perByte * tLight : 0.0;
        lines.push_back(l);
    }
    for (std::size_t row = 0; row < seqLens.size(); ++row) {
        const auto t = static_cast<double>(seqLens[row]);
        const Line* below = nullptr;
        const Line* above = nullptr;
        for (const auto& l : lines) {
            if (l.seq <= t && (!below || l.seq > below->seq)) below = &l;
            if (l.seq >= t && (!above || l.seq < above->seq)) above = &l;
        }
        Line at = below ? *below : *above;
        if (below && above && above->seq > below->seq) {
            const double w = (t - below->seq) / (above->seq - below->seq);
            at.atZero = below->atZero + w * (above->atZero - below->atZero);
            at.perByte = below->perByte + w * (above->perByte - below->perByte);
        }
        for (std::size_t i = row * cols; i < (row + 1) * cols; ++i) {
            if (placedBase[i] < 0) continue;
            const auto reserve = std::clamp(at.atZero + at.perByte * static_cast<double>(placedBase[i]), 0.0, 1e18);
            map.peakBytes[i] = base[i] + static_cast<std::int64_t>(reserve);
        }
    }
    map.peakBytes[lightIndex] = light.peakBytes;
    for (std::size_t k = 0; k < cells.size(); ++k) map.peakBytes[cells[k]] = replays[k].peakBytes;
}

std::vector<std::int64_t> fitMapAxis(std::int64_t first, std::int64_t last, int count)
{
    std::vector<std::int64_t> axis;
    if (count < 1 || last < first) return axis;
    if (count == 1) return {first};
    for (int i = 0; i < count; ++i) {
        const auto v = first + static_cast<std::int64_t>(
                                   static_cast<double>(last - first) * i / (count - 1) + 0.5);
        if (axis.empty() || v > axis.back()) axis.push_back(v);
    }
    return axis;
}

} // namespace tb
