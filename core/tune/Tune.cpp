#include "tune/Tune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/ByteSize.h"
#include "common/Errors.h"
#include "diagnose/TargetPlan.h"
#include "train/DerivedPlan.h"

namespace tb {
namespace {

// Operators one micro-batch dispatches per layer (forward and backward of a
// decoder block, about 25 and 50), and around the layers (embedding, final
// norm, head, loss); checkpointing runs each block's forward again.
constexpr double kOpsPerLayer = 75, kOpsPerLayerRecomputed = 25, kOpsOutsideLayers = 30;
// Optimizer operators per parameter tensor (AdamW's moments, update, decay),
// and parameter tensors per layer (a block's weights and norms, biases).
constexpr double kOptimizerOpsPerTensor = 6, kTensorsPerLayer = 12;
// Elementwise traffic of a block per token, in elements of the hidden size
// (norms, activations, residuals, their gradients) and of the MLP width.
constexpr double kHiddenPassesPerLayer = 40, kIntermediatePassesPerLayer = 12;
// Eager attention writes and reads each score map about this many times
// (scores, mask, softmax, their gradients).
constexpr double kMapPasses = 8;

bool isHalf(const std::string& precision) { return precision != "fp32"; }

// Where the candidates are planned: a catalogue card, this machine's GPU or its CPU.
struct Where {
    bool gpu = false;
    std::optional<ComputeCapability> cc;
    int count = 1;
    std::string label;
};

Where whereFor(const RunConfig& base, const TuneOptions& o)
{
    Where w;
    if (o.gpu) {
        w.gpu = true;
        if (o.gpu->gpu.cc.known()) w.cc = o.gpu->gpu.cc;
        w.count = o.gpu->count;
        w.label = o.gpu->label();
        return w;
    }
    const bool wantsCpu = base.device == "cpu";
    if (!wantsCpu && o.local && o.local->torchCudaDevices > 0 && !o.local->devices.empty()) {
        const auto& d = o.local->devices.front();
        w.gpu = true;
        w.cc = d.cc.known() ? std::optional<ComputeCapability>(d.cc) : std::nullopt;
        w.label = "this machine's " + d.name;
        return w;
    }
    w.label = "this machine's CPU";
    return w;
}

std::int64_t budgetFor(const TuneOptions& o, const Where& w)
{
    if (o.budgetBytes > 0) return o.budgetBytes;
    if (o.gpu) return o.gpu->gpu.memoryBytes;
    if (w.gpu && o.local && !o.local->devices.empty()) return o.local->devices.front().totalBytes;
    throw InputError("tuning for this machine's CPU needs a memory budget: give --budget BYTES (the tensor memory a "
                     "step may use), or name a card with --gpu");
}

TargetPlan planAt(const RunConfig& config, const Where& w)
{
    return planOnTarget(config, w.gpu, w.cc, w.count);
}

PreflightTarget preflightTarget(const TuneOptions& o)
{
    PreflightTarget t;
    t.gpu = o.gpu;
    if (!o.gpu) t.local = o.local;
    return t;
}

} // namespace

ThroughputMachine throughputFromCatalogue(const CatalogueGpu& gpu)
{
    // An eager LibTorch step reaches about half the data sheet's dense rate
    // on large products and needs about 2048 rows to get there; a kernel
    // launch costs about 8 microseconds.
    ThroughputMachine m;
    m.source = "catalogue: " + gpu.name;
    m.fp32Flops = 0.5e12 * gpu.fp32Tflops;
    const double half = std::max(gpu.bf16Tflops, gpu.fp16Tflops);
    m.halfFlops = half > 0 ? 0.5e12 * half : m.fp32Flops;
    m.halfRowsFlops = 2048;
    m.bytesPerSecond = 0.7e9 * gpu.bandwidthGbs;
    m.opSeconds = 8e-6;
    return m;
}

double predictedTokensPerSecond(const ArchitectureSpec& a, const TrainingSetup& s, const ThroughputMachine& m,
                                std::int64_t trainableParameters)
{
    const double L = static_cast<double>(a.layers), h = static_cast<double>(a.hidden);
    const double headDim = h / static_cast<double>(std::max<std::int64_t>(a.heads, 1));
    const double kv = static_cast<double>(a.kvHeads) * headDim;
    const double ff = static_cast<double>(a.intermediate), vocab = static_cast<double>(a.vocabSize);
    const double t = static_cast<double>(s.seqLen), rows = static_cast<double>(s.batch) * t;
    const bool lora = s.loraRank > 0;
    // Forward multiply-adds per token: the projections, the MLP, the scores
    // and their weighted sum, and the head.
    const double projections = 2 * h * h + 2 * h * kv + (a.family == "llama" ? 3 : 2) * h * ff;
    const double attention = 2 * t * h;
    const double layerForward = 2 * (projections + attention);
    const double headForward = 2 * h * vocab;
    // Backward is twice the forward where weights train (input and weight
    // gradients), once where they are frozen (LoRA's base); checkpointing
    // runs the blocks' forward again.
    const double backward = lora ? 1 : 2;
    const double perToken = L * layerForward * (1 + backward + (s.checkpointing ? 1 : 0)) + headForward * (1 + backward);
    const bool half = isHalf(s.precision);
    const double large = half && m.halfFlops > 0 ? m.halfFlops : m.fp32Flops;
    const double efficiency = rows / (rows + std::max(m.halfRowsFlops, 0.0));
    const double computeS = rows * perToken / std::max(large * efficiency, 1.0);
    // Elementwise traffic, and eager attention's score maps.
    const double element = half ? 2 : 4;
    double bytes = rows * L * (kHiddenPassesPerLayer * h + kIntermediatePassesPerLayer * ff) * element;
    if (s.attention != "fused") {
        bytes += static_cast<double>(s.batch) * static_cast<double>(a.heads) * t * t * kMapPasses * L * element
            * (s.checkpointing ? 1.5 : 1.0);
    }
    // Mixed precision casts each weight to the half type in every forward.
    const double casts = s.precision == "bf16" || s.precision == "fp16" ? kTensorsPerLayer : 0;
    const double ops = L * (kOpsPerLayer + casts + (s.checkpointing ? kOpsPerLayerRecomputed + casts : 0)) + kOpsOutsideLayers;
    const double bw = std::max(m.bytesPerSecond, 1.0);
    const double microS = computeS + bytes / bw + ops * m.opSeconds;
    // The optimizer: its state's traffic and one pass of operators per tensor.
    const double trainable = static_cast<double>(trainableParameters);
    const double stateBytes = s.optimizer == "adamw" ? (s.precision == "bf16-pure" ? 14 : 28) : 12;
    const double tensors = (lora ? 2 * static_cast<double>(std::max<std::size_t>(s.loraTargets.size(), 1)) : kTensorsPerLayer) * L
        + (lora ? 0 : 4);
    const double optimizerS = std::max(trainable, 0.0) * stateBytes / bw + tensors * kOptimizerOpsPerTensor * m.opSeconds;
    const double stepS = s.gradAccum * microS + optimizerS;
    const double tokens = rows * s.gradAccum * std::max(s.gpus, 1);
    return tokens / stepS;
}

std::string TuneCandidate::describe() const
{
    std::string out = "batch " + std::to_string(batch);
    if (gradAccum > 1) out += " x accumulation " + std::to_string(gradAccum);
    out += checkpointing ? ", checkpointing" : "";
    out += ", " + precision + ", " + attention;
    return out;
}

TuneResult planTune(const RunConfig& base, const TuneOptions& options, const ThroughputMachine& machine)
{
    if (!plannableModel(base)) {
        throw InputError("tune proposes changes to a model's architecture, and a TorchScript model has none: "
                         "find its largest batch with 'trainbench-cli fit --config FILE --budget BYTES'");
    }
    if (auto issues = validateConfig(base, false); !issues.empty()) throw ConfigError("config", std::move(issues));
    const Where where = whereFor(base, options);
    TuneResult result;
    result.targetLabel = where.label;
    result.budgetBytes = budgetFor(options, where);
    result.machine = machine;
    const auto budget = result.budgetBytes;

    // Precisions: fp32 and the mixed precision the target runs (bf16 where
    // it can, else fp16 on a GPU); bf16-pure only when the config asks for
    // it, since it rounds every update to bf16 and changes what the run
    // learns, which tuning for speed must not do behind the user's back.
    std::vector<std::string> precisions{"fp32", "bf16"};
    if (where.gpu) precisions.push_back("fp16");
    if (base.train.precision == "bf16-pure") precisions = {"bf16-pure"};
    std::vector<std::string> attentions{"eager"};
    if (options.sdpaAvailable) attentions.push_back("sdpa");
    const int effective = base.train.batchSize * base.train.gradAccum;

    std::set<std::tuple<int, int, bool, std::string, std::string>> seen;
    const PreflightTarget preflight = preflightTarget(options);
    // Each candidate is planned from its own step, as estimate and a run's
    // recorded estimate plan it: one derivation per precision,
    // checkpointing, attention, layers, LoRA rank and accumulation,
    // evaluated at each batch and sequence. (Asked of each config: the
    // suggestions change LoRA and the layers.)
    std::map<std::tuple<std::string, bool, std::string, int, int, int>, MemoryPlan> derived;
    int derivations = 0;
    const auto planOf = [&](const RunConfig& c, const TargetPlan& plan) -> MemoryPlan {
        const std::tuple key{plan.setup.precision, c.train.activationCheckpointing, c.model.attention, c.model.nLayer, c.lora.rank,
                             std::min(c.train.gradAccum, 2)}; // (traced with at most two micro-batches)
        if (const auto it = derived.find(key); it != derived.end()) return it->second;
        try {
            ++derivations;
            return derived.emplace(key, memoryPlanOf(c, plan.arch, plan.setup.precision)).first->second;
        } catch (const std::exception& e) {
            throw InputError("tune plans each candidate from its own training step; the step in " + plan.setup.precision
                             + " could not be derived: " + e.what());
        }
    };
    const auto peakOf = [&](const RunConfig& c, const TargetPlan& plan) {
        return planOf(c, plan).at(c.train.batchSize, effectiveSeqLen(c), plan.setup);
    };
    auto add = [&](const std::string& precision, bool checkpointing, const std::string& attention, int batch, int accum) {
        if (batch < 1 || batch > options.maxBatch) return;
        RunConfig c = base;
        // A card's candidates train on it: a config kept on the CPU moves to CUDA.
        if (options.gpu && c.device == "cpu") c.device = "cuda";
        c.train.precision = precision;
        c.train.activationCheckpointing = checkpointing;
        c.model.attention = attention;
        c.train.batchSize = batch;
        c.train.gradAccum = accum;
        const TargetPlan plan = planAt(c, where);
        TuneCandidate k;
        k.batch = batch;
        k.gradAccum = accum;
        k.checkpointing = checkpointing;
        k.precision = plan.setup.precision;
        k.attention = attention;
        if (!seen.insert({batch, accum, checkpointing, k.precision, attention}).second) return;
        k.config = std::move(c);
        if (!plan.precision.error.empty()) {
            k.verdict = MemoryVerdict::DoesNotRun;
            k.rejected = "does not run: " + plan.precision.shortfall;
        } else {
            const auto e = peakOf(k.config, plan);
            k.peakBytes = e.peakBytes;
            k.verdict = memoryVerdict(e.peakBytes, budget);
            k.predictedTokensPerSecond = predictedTokensPerSecond(plan.arch, plan.setup, machine, e.trainableParameters);
            if (k.verdict == MemoryVerdict::DoesNotFit) {
                k.rejected = "does not fit: planned " + byteSizeText(e.peakBytes) + " of " + byteSizeText(budget);
            } else if (e.lowerBound) {
                // (A card's kernel no device rule sizes yet: the plan is a
                // bound under the step, which cannot say that it fits.)
                k.verdict = MemoryVerdict::DoesNotFit;
                k.rejected = "not planned exactly on this card: at least " + byteSizeText(e.peakBytes) + " of "
                    + byteSizeText(budget);
            } else {
                for (const auto& f : runPreflight(k.config, preflight, false)) {
                    // Memory is decided above, against the budget asked for.
                    if (f.severity != Severity::Error || f.kind == "memory_over_budget") continue;
                    k.verdict = MemoryVerdict::DoesNotRun;
                    k.rejected = "preflight: " + f.title + (f.cause.empty() ? "" : " (" + f.cause + ")");
                    break;
                }
            }
        }
        result.candidates.push_back(std::move(k));
    };

    for (const auto& precision : precisions) {
        for (const bool checkpointing : {false, true}) {
            for (const auto& attention : attentions) {
                if (options.keepEffectiveBatch) {
                    for (int b = 1; b <= effective; ++b) {
                        if (effective % b == 0) add(precision, checkpointing, attention, b, effective / b);
                    }
                    continue;
                }
                const int accum = base.train.gradAccum;
                for (std::int64_t b = 1; b <= options.maxBatch; b *= 2) add(precision, checkpointing, attention, static_cast<int>(b), accum);
                add(precision, checkpointing, attention, base.train.batchSize, accum);
                // The largest batch that fits, and the largest with room to spare.
                RunConfig c = base;
                c.train.precision = precision;
                c.train.activationCheckpointing = checkpointing;
                c.model.attention = attention;
                c.train.gradAccum = accum;
                const TargetPlan plan = planAt(c, where);
                if (!plan.precision.error.empty()) continue;
                const auto planned = planOf(c, plan);
                for (const auto limit : {budget, roomyPeakBytes(budget)}) {
                    const auto largest = planned.largestBatch(effectiveSeqLen(c), plan.setup, limit, options.maxBatch);
                    if (largest > 0) add(precision, checkpointing, attention, static_cast<int>(largest), accum);
                }
            }
        }
    }

    std::stable_sort(result.candidates.begin(), result.candidates.end(), [](const TuneCandidate& x, const TuneCandidate& y) {
        if (x.rejected.empty() != y.rejected.empty()) return x.rejected.empty();
        return x.predictedTokensPerSecond > y.predictedTokensPerSecond;
    });

    const bool anyFits = std::any_of(result.candidates.begin(), result.candidates.end(),
                                     [](const TuneCandidate& k) { return k.rejected.empty(); });
    // Refused for another reason than memory (preflight, the precision):
    // memory changes would not help, and the reason is what to say.
    const bool memoryDecided = std::any_of(result.candidates.begin(), result.candidates.end(), [](const TuneCandidate& k) {
        return k.rejected.rfind("does not fit", 0) == 0;
    });
    if (!anyFits && !memoryDecided && !result.candidates.empty()) {
        result.nothingFits.push_back("every candidate is refused before memory decides: "
                                     + result.candidates.front().rejected);
    } else if (!anyFits) {
        // The smallest changes that would fit: the leanest setup (batch 1,
        // checkpointing, the mixed precision it runs) with a shorter
        // sequence, fewer layers, or on a larger card.
        RunConfig lean = base;
        lean.train.batchSize = 1;
        lean.train.gradAccum = options.keepEffectiveBatch ? effective : base.train.gradAccum;
        lean.train.activationCheckpointing = true;
        if (lean.train.precision != "bf16-pure") {
            lean.train.precision = "bf16";
            if (!planAt(lean, where).precision.error.empty()) lean.train.precision = "fp16";
            if (!planAt(lean, where).precision.error.empty()) lean.train.precision = "fp32";
        }
        if (options.sdpaAvailable) lean.model.attention = "sdpa";
        const TargetPlan plan = planAt(lean, where);
        const std::string leanText = "at batch 1 with checkpointing and " + plan.setup.precision;
        if (base.data.source != "addition") {
            const auto seq = planOf(lean, plan).largestSequence(1, plan.setup, roomyPeakBytes(budget));
            if (seq > 0) {
                result.nothingFits.push_back("a shorter sequence: data.seq_len " + std::to_string(seq) + " fits " + leanText
                                             + " (now " + std::to_string(effectiveSeqLen(base)) + ")");
            }
        }
        if (base.model.type == "gpt" || base.model.type == "llama") {
            // The most layers that fit, by bisection (the peak grows with the
            // layers; a plan from its own step is derived per layer count).
            const auto fits = [&](int layers) {
                RunConfig smaller = lean;
                smaller.model.nLayer = layers;
                const auto p = planAt(smaller, where);
                return memoryVerdict(peakOf(smaller, p).peakBytes, budget) == MemoryVerdict::Fits;
            };
            int lo = 0, hi = base.model.nLayer; // lo fits (0: none known), hi does not
            while (hi - lo > 1) {
                const int mid = lo + (hi - lo) / 2;
                (fits(mid) ? lo : hi) = mid;
            }
            if (lo >= 1) {
                result.nothingFits.push_back("a smaller model: model.n_layer " + std::to_string(lo) + " fits " + leanText
                                             + " (now " + std::to_string(base.model.nLayer) + ")");
            }
        } else if (base.lora.rank == 0) {
            // (Planned from its own step: where that cannot be derived, no suggestion.)
            RunConfig adapters = lean;
            adapters.lora.rank = 8;
            try {
                const auto p = planAt(adapters, where);
                if (memoryVerdict(peakOf(adapters, p).peakBytes, budget) == MemoryVerdict::Fits) {
                    result.nothingFits.push_back("LoRA adapters instead of full fine-tuning: lora.rank 8 fits " + leanText);
                }
            } catch (const InputError&) {
            }
        }
        // The smallest card of the catalogue where the lean setup fits and runs.
        const CatalogueGpu* best = nullptr;
        for (const auto& gpu : GpuCatalogue::bundled().entries()) {
            if (best && gpu.memoryBytes >= best->memoryBytes) continue;
            const auto cc = gpu.cc.known() ? std::optional<ComputeCapability>(gpu.cc) : std::nullopt;
            RunConfig onCard = lean;
            const auto p = planOnTarget(onCard, true, cc, 1);
            if (!p.precision.error.empty()) continue;
            if (memoryVerdict(peakOf(onCard, p).peakBytes, gpu.memoryBytes) == MemoryVerdict::Fits) best = &gpu;
        }
        if (best) {
            result.nothingFits.push_back("a larger card: " + best->name + " (" + byteSizeText(best->memoryBytes)
                                         + ") fits it " + leanText);
        }
        if (result.nothingFits.empty()) result.nothingFits.push_back("no card in the catalogue fits it even " + leanText);
    }
    if (!options.gpu) {
        result.notes.push_back("predicted tokens per second come from " + machine.source
                               + "; they rank the candidates, the measured figures decide");
    } else {
        result.notes.push_back("predicted tokens per second come from " + machine.source
                               + " (not measured: the card is not this machine's)");
    }
    if (derivations > 0) {
        result.notes.push_back("each candidate is planned from its own training step, derived once per precision, "
                               "checkpointing and attention (" + std::to_string(derivations)
                               + (derivations == 1 ? " derivation)" : " derivations)"));
    }
    chooseWinner(result, base);
    return result;
}

void chooseWinner(TuneResult& result, const RunConfig& base)
{
    result.winner = -1;
    result.changes.clear();
    result.effectiveBatchNote.clear();
    int bestPredicted = -1, bestMeasured = -1;
    // A tight fit (under 10% to spare) wins only when nothing fits with room.
    const bool roomy = std::any_of(result.candidates.begin(), result.candidates.end(), [](const TuneCandidate& k) {
        return k.rejected.empty() && k.verdict == MemoryVerdict::Fits;
    });
    for (int i = 0; i < static_cast<int>(result.candidates.size()); ++i) {
        const auto& k = result.candidates[static_cast<std::size_t>(i)];
        if (!k.rejected.empty() || !k.measureError.empty() || (roomy && k.verdict != MemoryVerdict::Fits)) continue;
        if (bestPredicted < 0) bestPredicted = i;
        if (k.measuredTokensPerSecond > 0 && k.measuredPeakBytes <= result.budgetBytes
            && (bestMeasured < 0 || k.measuredTokensPerSecond
                                        > result.candidates[static_cast<std::size_t>(bestMeasured)].measuredTokensPerSecond)) {
            bestMeasured = i;
        }
    }
    result.winner = bestMeasured >= 0 ? bestMeasured : bestPredicted;
    if (result.winner < 0) return;
    const auto& w = result.candidates[static_cast<std::size_t>(result.winner)].config;
    const int before = base.train.batchSize * base.train.gradAccum, after = w.train.batchSize * w.train.gradAccum;
    result.effectiveBatchNote = before == after ? std::string()
        : "the effective batch (batch x accumulation) goes from " + std::to_string(before) + " to " + std::to_string(after)
            + ", which changes the run's optimisation (the learning rate may want to follow); "
              "--keep-effective-batch keeps it";
    for (const auto& d : configDifferences({configToJson(base), configToJson(w)})) {
        result.changes.push_back(d.path + ": " + (d.values[0].empty() ? "(default)" : d.values[0]) + " -> " + d.values[1]);
    }
}

void calibratePredictions(TuneResult& result)
{
    std::vector<double> ratios;
    for (const auto& k : result.candidates) {
        if (k.measuredTokensPerSecond > 0 && k.predictedTokensPerSecond > 0) {
            ratios.push_back(k.measuredTokensPerSecond / k.predictedTokensPerSecond);
        }
    }
    if (ratios.empty()) return;
    std::sort(ratios.begin(), ratios.end());
    const std::size_t n = ratios.size();
    const double median = n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
    for (auto& k : result.candidates) k.predictedTokensPerSecond *= median;
    result.calibration = (result.calibration > 0 ? result.calibration : 1.0) * median;
    char text[160];
    std::snprintf(text, sizeof text,
                  "predictions are scaled by %.2f, the median of measured over predicted on the %zu candidates measured",
                  result.calibration, n);
    result.notes.push_back(text);
}

std::vector<int> candidatesToMeasure(const TuneResult& result, int count)
{
    // Candidates with room to spare first; tight ones only when nothing else fits.
    const bool roomy = std::any_of(result.candidates.begin(), result.candidates.end(), [](const TuneCandidate& k) {
        return k.rejected.empty() && k.verdict == MemoryVerdict::Fits;
    });
    std::vector<int> eligible;
    for (int i = 0; i < static_cast<int>(result.candidates.size()); ++i) {
        const auto& k = result.candidates[static_cast<std::size_t>(i)];
        if (k.rejected.empty() && (!roomy || k.verdict == MemoryVerdict::Fits)) eligible.push_back(i);
    }
    // Among the best predicted, spread: the model cannot see caches, so a
    // batch half or twice another of the same setup is predicted alike and
    // measures apart. First candidates at least twice apart in batch (or of
    // another setup), then the rest in predicted order.
    std::vector<int> out;
    auto near = [&](int i) {
        const auto& k = result.candidates[static_cast<std::size_t>(i)];
        return std::any_of(out.begin(), out.end(), [&](int j) {
            const auto& o = result.candidates[static_cast<std::size_t>(j)];
            const int small = std::min(k.batch, o.batch), large = std::max(k.batch, o.batch);
            return o.precision == k.precision && o.checkpointing == k.checkpointing && o.attention == k.attention
                && large < 2 * small;
        });
    };
    for (const int i : eligible) {
        if (static_cast<int>(out.size()) >= count) break;
        if (!near(i)) out.push_back(i);
    }
    for (const int i : eligible) {
        if (static_cast<int>(out.size()) >= count) break;
        if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
    }
    return out;
}

std::string tuneResultToJson(const TuneResult& r)
{
    nlohmann::json candidates = nlohmann::json::array();
    for (const auto& k : r.candidates) {
        nlohmann::json c = {{"batch_size", k.batch},
                            {"grad_accum", k.gradAccum},
                            {"activation_checkpointing", k.checkpointing},
                            {"precision", k.precision},
                            {"attention", k.attention},
                            {"planned_peak_bytes", k.peakBytes},
                            {"budget_share", r.budgetBytes > 0 ? static_cast<double>(k.peakBytes) / static_cast<double>(r.budgetBytes) : 0.0},
                            {"verdict", verdictKey(k.verdict)},
                            {"predicted_tokens_per_second", k.predictedTokensPerSecond}};
        if (!k.rejected.empty()) c["rejected"] = k.rejected;
        if (k.measuredTokensPerSecond >= 0) c["measured_tokens_per_second"] = k.measuredTokensPerSecond;
        if (k.measuredPeakBytes >= 0) c["measured_peak_bytes"] = k.measuredPeakBytes;
        if (!k.measureError.empty()) c["measure_error"] = k.measureError;
        candidates.push_back(std::move(c));
    }
    nlohmann::json out = {{"target", r.targetLabel},
                          {"budget_bytes", r.budgetBytes},
                          {"throughput_model", r.machine.source},
                          {"machine", {{"fp32_flops", r.machine.fp32Flops},
                                       {"half_flops", r.machine.halfFlops},
                                       {"bytes_per_second", r.machine.bytesPerSecond},
                                       {"op_seconds", r.machine.opSeconds}}},
                          {"calibration", r.calibration},
                          {"candidates", candidates},
                          {"winner", r.winner},
                          {"changes", r.changes},
                          {"effective_batch_note", r.effectiveBatchNote},
                          {"notes", r.notes}};
    if (!r.nothingFits.empty()) out["nothing_fits"] = r.nothingFits;
    return out.dump(2);
}

} // namespace tb
