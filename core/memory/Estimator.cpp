#include "memory/Estimator.h"

#include "config/ModelSpec.h"
#include "memory/Concurrently.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
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
                           const MemoryEstimate& lightest, const std::function<MemoryEstimate(std::size_t)>& exact)
{
    // On a GPU the caching allocator reserves more than the tensors. Its
    // model replays a whole step (milliseconds for a 7B model), too slow for
    // every cell: the map places each cell with the fraction the model
    // reserves beyond the tensors at the cell nearest the budget, and
    // replays the kReplays cells whose placed figure is nearest the budget
    // (within kBand of it): those cells' figures and verdicts are the
    // estimate's. Elsewhere the figure is the placed one, and a cell near
    // the budget but not among the replayed can take the other verdict.
    constexpr double kBand = 0.10;
    constexpr std::size_t kReplays = 6;
    const auto budgetBytes = map.budgetBytes;
    const auto& seqLens = map.seqLens;
    const auto& batches = map.batches;
    const std::size_t cols = batches.size();
    double reservedPerTensorByte = 0;
    struct Cell {
        std::size_t index;
        std::int64_t t, b;
    };
    std::vector<std::pair<double, Cell>> nearBudget;
    std::vector<std::int64_t> reservedBase; // per placed cell: the tensors the allocator holds
    for (std::size_t index = 0; index < placedBase.size(); ++index) {
        if (placedBase[index] < 0) continue;
        nearBudget.push_back({static_cast<double>(map.peakBytes[index] - budgetBytes),
                              {index, seqLens[index / cols], batches[index % cols]}});
        reservedBase.push_back(placedBase[index]);
    }
    if (!nearBudget.empty()) {
        // What the allocator reserves beyond the tensors, replayed at the
        // cell whose lower bound is nearest the budget and at the lightest
        // cell (the smallest batch and sequence), and placed on the line
        // through the two (a segment's fixed part weighs most on small
        // steps). A replayed cell takes the estimate's peak.
        const auto figures = [&](const MemoryEstimate& e, std::size_t index) {
            map.peakBytes[index] = e.peakBytes;
            return std::pair{static_cast<double>(e.tensorPeakBytes),
                             static_cast<double>(std::max<std::int64_t>(0, e.reservedPeakBytes - e.tensorPeakBytes))};
        };
        std::size_t nearestIndex = 0;
        for (std::size_t i = 1; i < nearBudget.size(); ++i) {
            if (std::abs(nearBudget[i].first) < std::abs(nearBudget[nearestIndex].first)) nearestIndex = i;
        }
        const auto& near = nearBudget[nearestIndex].second;
        const auto [tNear, xNear] = figures(exact(near.index), near.index);
        nearBudget[nearestIndex].first = std::numeric_limits<double>::infinity(); // placed by its own replay
        const auto [tLight, xLight] = figures(lightest, lightIndex);
        for (auto& cell : nearBudget) {
            if (cell.second.index == lightIndex) cell.first = std::numeric_limits<double>::infinity();
        }
        reservedPerTensorByte = tNear > tLight ? (xNear - xLight) / (tNear - tLight) : (tNear > 0 ? xNear / tNear : 0.0);
        const double reservedAtZero = tNear > tLight ? xLight - reservedPerTensorByte * tLight : 0.0;
        for (std::size_t i = 0; i < nearBudget.size(); ++i) {
            auto& cell = nearBudget[i];
            if (std::isinf(cell.first)) continue;
            const auto placed = static_cast<std::int64_t>(
                std::max(0.0, reservedAtZero + reservedPerTensorByte * static_cast<double>(reservedBase[i])));
            map.peakBytes[cell.second.index] += placed;
            cell.first = static_cast<double>(map.peakBytes[cell.second.index] - budgetBytes);
        }
        const auto nearest = std::min(kReplays, nearBudget.size());
        std::partial_sort(nearBudget.begin(), nearBudget.begin() + static_cast<std::ptrdiff_t>(nearest), nearBudget.end(),
                          [](const auto& x, const auto& y) { return std::abs(x.first) < std::abs(y.first); });
        std::size_t within = 0;
        while (within < nearest && std::abs(nearBudget[within].first) <= kBand * static_cast<double>(budgetBytes)) ++within;
        forEachConcurrently(within, [&](std::size_t i) {
            const auto index = nearBudget[i].second.index;
            map.peakBytes[index] = exact(index).peakBytes;
        });
    }
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
