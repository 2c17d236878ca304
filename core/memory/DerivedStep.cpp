#include "memory/DerivedStep.h"

#include <algorithm>
#include <future>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "memory/Concurrently.h"
#include "memory/DeviceRules.h"
#include "memory/LargestFitting.h"

namespace tb {
namespace {

std::int64_t gpuFixedBytes(const TrainingSetup& setup)
{
    if (!setup.gpu) return 0;
    const auto context = setup.cudaContextBytes > 0 ? setup.cudaContextBytes : cudaContextFor(setup.computeCapability).bytes;
    return context + 2 * cublasWorkspaceBytes(setup.torchMajor, setup.computeCapability);
}

// The card a setup plans for, as the device rules take it.
CudaTarget cudaTargetOf(const TrainingSetup& setup)
{
    CudaTarget t;
    t.computeCapability = setup.computeCapability;
    t.fp16 = setup.precision == "fp16";
    return t;
}

// A shape's step on a GPU from the programs: the tensors' phase peaks (the
// device rules' step, data parallel's and LibTorch 2.x's cuBLAS blocks
// included) and the caching allocator's replay of it.
struct GpuStep {
    std::string unruled; // non-empty: an operator with no rule on this card (the figures below are not a plan)
    std::array<std::int64_t, kStepPhases> phaseTensors{};
    std::int64_t start = 0; // the tensors live as the step starts
    std::int64_t peakTensors() const { return *std::max_element(phaseTensors.begin(), phaseTensors.end()); }
    // What the card holds at the peak: the tensors, what the allocator
    // reserves beyond them, and `outside` (the context, 1.13's workspaces).
    std::int64_t peakOnCard(std::int64_t outside) const { return std::max(peakTensors(), allocator.peakReserved) + outside; }
    AllocatorReplay allocator;
    RecordedStep step; // the step by the rules
};

GpuStep gpuStep(const DerivedStep& d, std::int64_t batch, std::int64_t planned, const TrainingSetup& setup)
{
    const auto& programs = d.pastWindowPrograms && planned > d.slidingWindow ? *d.pastWindowPrograms : *d.programs;
    auto cuda = cudaStepOf(programs.at(batch, planned), cudaTargetOf(setup));
    GpuStep out;
    out.unruled = std::move(cuda.unruled);
    if (!out.unruled.empty()) return out;
    const auto& step = cuda.step;
    std::vector<std::int64_t> first, after;
    // The reducer's buckets from the start of the run; the other ranks' rows
    // and the micro-batches the trace did not draw, with the data.
    if (const auto buckets = d.bucketBytes(setup); buckets > 0) first.push_back(buckets);
    if (const auto rows = d.extraDataBytes(batch, planned, setup); rows > 0) first.push_back(rows);
    if (setup.torchMajor >= 2) {
        // LibTorch 2.x makes the two cuBLAS workspaces through the allocator on the first step's products.
        const auto ws = cublasWorkspaceBytes(setup.torchMajor, setup.computeCapability);
        after = {ws, ws};
    }
    std::int64_t live = 0;
    for (const auto b : first) live += b;
    for (const auto b : step.resident) live += b;
    for (const auto b : after) live += b;
    out.start = live;
    out.phaseTensors.fill(live);
    for (const auto& e : step.events) {
        if (e.bytes > 0) {
            live += e.bytes;
            auto& peak = out.phaseTensors[std::min<std::size_t>(e.phase, kStepPhases - 1)];
            peak = std::max(peak, live);
        } else if (e.bytes < 0 && e.block >= 0) {
            live += e.bytes;
        }
    }
    CudaAllocatorSettings settings;
    if (setup.maxSplitSize > 0) settings.maxSplitSize = setup.maxSplitSize;
    settings.expandableSegments = setup.expandableSegments;
    out.allocator = replayOnCudaAllocator(step, settings, first, after);
    out.step = std::move(cuda.step);
    return out;
}

// A term, or more bytes of one already there (a kind's data and the data the trace did not draw).
void addTerm(MemoryEstimate& e, const std::string& name, std::int64_t bytes, const std::string& formula)
{
    for (auto& t : e.terms) {
        if (t.name == name) {
            t.bytes += bytes;
            if (t.formula != formula) t.formula += "; and " + formula;
            return;
        }
    }
    e.terms.push_back({name, bytes, formula});
}

// The recorded step's blocks at its peak by what they hold (BlockKind),
// `tensors` in all: the rest (kernel scratch the step's record does not
// hold: oneDNN's for bf16 products) is workspace. Without the kinds (a step
// not from programs), or where they add up to more: what is live as the
// step starts and what the step adds.
void kindTerms(MemoryEstimate& e, const RecordedStep* step, std::int64_t tensors, std::int64_t resident)
{
    const auto live = step ? liveKindsAtPeak(*step) : LiveKinds{};
    const auto rest = tensors - live.peak;
    if (!step || step->residentKind.empty() || rest < 0) {
        e.terms.push_back({"resident", resident,
                           "live as a step starts: weights, gradients kept between steps, optimizer state, data"});
        e.terms.push_back({"step", tensors - resident, "what the step allocates and still holds at its peak"});
        return;
    }
    for (int k = 1; k < kBlockKinds; ++k) {
        const auto kind = static_cast<BlockKind>(k);
        const auto bytes = live.bytes[static_cast<std::size_t>(k)] + (kind == BlockKind::Workspace ? rest : 0);
        if (bytes > 0) addTerm(e, blockKindName(kind), bytes, blockKindDescription(kind));
    }
}

// The CUDA context, and (LibTorch 1.13) the cuBLAS workspaces outside the allocator.
std::int64_t gpuOutsideAllocator(const TrainingSetup& setup)
{
    const auto context = setup.cudaContextBytes > 0 ? setup.cudaContextBytes : cudaContextFor(setup.computeCapability).bytes;
    return context + (setup.torchMajor < 2 ? 2 * cublasWorkspaceBytes(setup.torchMajor, setup.computeCapability) : 0);
}

} // namespace

void to_json(nlohmann::json& j, const GemmSite& g)
{
    j = {{"base", g.base},
         {"dims", g.dims},
         {"src_transposed", g.srcTransposed},
         {"weights_transposed", g.weightsTransposed},
         {"accumulate", g.accumulate},
         {"phase", g.phase},
         {"traced", g.traced}};
}

void from_json(const nlohmann::json& j, GemmSite& g)
{
    g.base = j.at("base").get<StepPoly>();
    g.dims = j.at("dims").get<decltype(g.dims)>();
    g.srcTransposed = j.at("src_transposed").get<bool>();
    g.weightsTransposed = j.at("weights_transposed").get<bool>();
    g.accumulate = j.at("accumulate").get<bool>();
    g.phase = j.at("phase").get<int>();
    g.traced = j.at("traced").get<std::int64_t>();
    if (g.phase < 0 || g.phase >= kStepPhases) throw InputError("the derived plan's data is inconsistent: a product in phase " + std::to_string(g.phase));
}

MemoryEstimate DerivedStep::at(std::int64_t batch, std::int64_t seqLen) const
{
    TrainingSetup setup;
    setup.gradAccum = accum;
    return at(batch, seqLen, setup);
}

MemoryEstimate DerivedStep::at(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const
{
    const auto notExact = setup.gpu ? notExactOn(setup) : std::string();
    if (setup.gpu && notExact.empty()) return onGpu(batch, seqLen, setup);
    // The CPU's kernel scratch (oneDNN's, for bf16 products) is not a GPU's.
    const bool withScratch = !setup.gpu;
    const auto asked = seqLen;
    seqLen = plannedSeqLen(seqLen);
    const auto& S = segmentAt(seqLen);
    MemoryEstimate e;
    e.parameters = parameters + parametersPerToken * seqLen;
    e.trainableParameters = trainableParameters + trainablePerToken * seqLen;
    static const char* const kPhases[kStepPhases] = {"forward", "backward", "optimizer"};
    for (int i = 0; i < kStepPhases; ++i) {
        const auto bytes = S.phasePeak(i, batch, seqLen, withScratch, setup.cpuThreads);
        e.phases.push_back({kPhases[i], bytes});
        if (bytes > e.peakBytes) {
            e.peakBytes = bytes;
            e.peakPhase = kPhases[i];
        }
    }
    const auto resident = S.start(batch, seqLen);
    e.tensorPeakBytes = e.peakBytes;
    e.endOfStepBytes = resident;
    {
        const auto& p = pastWindowPrograms && seqLen > slidingWindow ? pastWindowPrograms : programs;
        const auto step = p ? std::optional<RecordedStep>(p->at(batch, seqLen)) : std::nullopt;
        kindTerms(e, step ? &*step : nullptr, e.peakBytes, resident);
    }
    e.notes.push_back("derived from " + std::to_string(S.traces) + " training steps traced with " + tracedOn
                      + " at batch 1 to 5 and "
                      + (fixedSeqLen > 0 ? "the dataset's sequence " + std::to_string(fixedSeqLen)
                                         : "sequence " + std::to_string(S.t0) + " to " + std::to_string(largestTracedSeqLen))
                      + "; tensors on the CPU (a GPU adds allocator blocks and workspaces)");
    if (S.hasProducts()) {
        if (!withScratch) {
            e.notes.push_back("the CPU's scratch for bf16 matrix products (oneDNN's) is left out: on a GPU, cuBLAS works "
                              "in its workspace");
        } else if (!cpuBf16ProductsUseOneDnn()) {
            e.notes.push_back("bf16 matrix products on this CPU do not go to oneDNN: the scratch they took while tracing "
                              "(elsewhere) is left out");
        } else if (!cpuGemmScratchKnown()) {
            e.notes.push_back("the scratch oneDNN takes for bf16 matrix products is the largest each took while tracing ("
                              + cpuGemmScratchUnknownReason() + "): longer rows can take more");
        } else {
            e.notes.push_back("the scratch oneDNN takes for each bf16 matrix product (its size follows oneDNN's blocking "
                              "for the shape on this CPU, not a formula) is oneDNN's own answer for the product's shape "
                              "at this batch and sequence, with " + std::to_string(setup.cpuThreads)
                              + (setup.cpuThreads == 1 ? " thread" : " threads"));
        }
    }
    if (S.irregularScratch > 0) {
        e.notes.push_back(withScratch
            ? "kernel scratch that does not follow the shapes (oneDNN's, for bf16 products on this CPU), up to "
                  + std::to_string(S.irregularScratch) + " bytes while tracing, is added as the largest seen; longer "
                  "rows can take more"
            : "the CPU's kernel scratch that does not follow the shapes (oneDNN's, up to "
                  + std::to_string(S.irregularScratch) + " bytes) is left out: on a GPU, cuBLAS works in its workspace");
    }
    shapeNotes(e, asked, seqLen);
    if (const auto dp = beyondTracedBytes(batch, seqLen, setup); dp > 0) {
        beyondTracedTerms(e, batch, seqLen, setup);
        e.peakBytes += dp;
        e.tensorPeakBytes += dp;
        e.endOfStepBytes += dp;
        for (auto& p : e.phases) p.bytes += dp;
        if (setup.gpus > 1) {
            e.notes.push_back("data parallel, " + std::to_string(setup.gpus)
                              + " ranks: one rank's step traced alone, plus the reducer's buckets and the global batch's rows");
        }
    }
    if (!setup.gpu) return e;
    // Two cuBLAS handles: the forward's thread and the autograd device thread.
    const auto fixed = gpuFixedBytes(setup);
    const auto workspaces = 2 * cublasWorkspaceBytes(setup.torchMajor, setup.computeCapability);
    const auto context = fixed - workspaces;
    e.terms.push_back({"cuda_context", context, "the CUDA context (nvidia-smi counts it; the allocator does not)"});
    e.terms.push_back({"cublas_workspace", workspaces, "two cuBLAS workspaces (the forward's and autograd's threads)"});
    e.peakBytes += context + workspaces;
    e.lowerBound = true;
    for (auto& p : e.phases) p.bytes += context + workspaces;
    e.notes.insert(e.notes.begin(),
                   "a lower bound on the GPU: the tensors traced on the CPU plus the CUDA context and cuBLAS "
                   "workspaces; the caching allocator's blocks come on top (" + notExact + ")");
    return e;
}

std::string DerivedStep::notExactOn(const TrainingSetup& setup) const
{
    if (!programs) return "the step was traced at the model's own widths, not recorded as a program";
    if (!unruled.empty()) return "no device rule for " + unruled;
    if (!gpuSegment) return "the device rules' step is not polynomial in batch and sequence";
    // The card's kernels (SDPA's) decide: within the sliding window and past
    // it. (Asked once per card: a 7B model's rules take about a millisecond.)
    const auto target = cudaTargetOf(setup);
    std::lock_guard<std::mutex> lock(cardAnswers->mutex);
    const auto [it, added] = cardAnswers->byCard.try_emplace({target.computeCapability, target.fp16});
    if (added) {
        for (const auto* p : {programs.get(), pastWindowPrograms.get()}) {
            if (!p) continue;
            if (const auto why = cudaStepOf(p->at(3, p->t0), target).unruled; !why.empty()) {
                it->second = "no device rule for " + why;
                break;
            }
        }
    }
    return it->second;
}

void DerivedStep::shapeNotes(MemoryEstimate& e, std::int64_t asked, std::int64_t seqLen, bool onGpu) const
{
    if (fixedSeqLen > 0 && asked != fixedSeqLen) {
        e.notes.push_back("the dataset fixes the sequence at " + std::to_string(fixedSeqLen) + ": planned at it, not at "
                          + std::to_string(asked));
    }
    if (pastWindow) {
        e.notes.push_back(seqLen > slidingWindow
            ? "the sequence is longer than the model's sliding window (" + std::to_string(slidingWindow)
                  + "): the step masks the window and runs eager attention (SDPA asked for or not), traced apart"
            : "within the model's sliding window (" + std::to_string(slidingWindow) + "); past it the step "
                  "masks the window and runs eager attention, traced apart");
    }
    if (asked < seqLen && fixedSeqLen == 0) {
        e.notes.push_back("sequence " + std::to_string(asked) + " is shorter than the shortest traced ("
                          + std::to_string(seqLen) + "), where the polynomials start: planned as "
                          + std::to_string(seqLen) + " (the peak grows with the sequence, so this is on the safe side)");
    }
    if (fixedSeqLen == 0 && seqLen > 4 * largestTracedSeqLen && !onGpu) {
        e.notes.push_back("sequence " + std::to_string(seqLen) + " is far beyond the longest traced ("
                          + std::to_string(largestTracedSeqLen) + "): a kernel that changes with the shape would not show");
    }
}

MemoryEstimate DerivedStep::onGpu(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const
{
    const auto asked = seqLen;
    seqLen = plannedSeqLen(seqLen);
    const auto g = gpuStep(*this, batch, seqLen, setup);
    MemoryEstimate e;
    e.parameters = parameters + parametersPerToken * seqLen;
    e.trainableParameters = trainableParameters + trainablePerToken * seqLen;
    static const char* const kPhases[kStepPhases] = {"forward", "backward", "optimizer"};
    for (int i = 0; i < kStepPhases; ++i) {
        const auto bytes = g.phaseTensors[static_cast<std::size_t>(i)];
        e.phases.push_back({kPhases[i], bytes});
        if (bytes > e.peakBytes) {
            e.peakBytes = bytes;
            e.peakPhase = kPhases[i];
        }
    }
    e.tensorPeakBytes = e.peakBytes;
    e.endOfStepBytes = g.start;
    e.allocatedPeakBytes = g.allocator.peakAllocated;
    e.reservedPeakBytes = g.allocator.peakReserved;
    const auto ws = cublasWorkspaceBytes(setup.torchMajor, setup.computeCapability);
    const auto dp = beyondTracedBytes(batch, seqLen, setup);
    const auto inAllocator = setup.torchMajor >= 2 ? 2 * ws : 0;
    kindTerms(e, &g.step, e.tensorPeakBytes - dp - inAllocator, g.start - dp - inAllocator);
    beyondTracedTerms(e, batch, seqLen, setup);
    if (inAllocator > 0) {
        e.terms.push_back({"cublas_workspace", inAllocator, "two cuBLAS workspaces through the caching allocator (the "
                                                            "forward's and autograd's threads), " + std::to_string(ws) + " bytes each"});
    }
    const auto reservedExtra = std::max<std::int64_t>(0, g.allocator.peakReserved - e.tensorPeakBytes);
    e.terms.push_back({"allocator_reserved", reservedExtra,
                       "caching allocator: reserved beyond the tensors at the peak (segment rounding, cached and unsplit "
                       "blocks; modelled, " + std::to_string(g.allocator.segments) + " segments)"});
    const auto context = gpuOutsideAllocator(setup) - (setup.torchMajor < 2 ? 2 * ws : 0);
    e.terms.push_back({"cuda_context", context, "the CUDA context (nvidia-smi counts it; the allocator does not)"});
    if (setup.torchMajor < 2) {
        e.terms.push_back({"cublas_workspace", 2 * ws, "cuBLAS's own workspaces (LibTorch 1.13: outside the caching "
                                                       "allocator), the forward's and the autograd thread's handle"});
    }
    e.peakBytes = g.peakOnCard(gpuOutsideAllocator(setup));
    e.notes.push_back("derived from " + std::to_string(segmentAt(seqLen).traces) + " training steps recorded with " + tracedOn
                      + "; on the GPU the recorded step by CUDA's rules (a one-byte dropout mask, the generator's state "
                        "in host memory, no CPU scratch for bf16 products, SDPA by the card's kernel), on the caching "
                        "allocator's model");
    shapeNotes(e, asked, seqLen, true);
    if (setup.gpus > 1) {
        e.notes.push_back("data parallel, " + std::to_string(setup.gpus)
                          + " ranks: one rank's step recorded alone, plus the reducer's buckets and the global batch's rows");
    }
    return e;
}

MemoryEstimate DerivedStep::peaksOnGpu(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const
{
    const auto g = gpuStep(*this, batch, plannedSeqLen(seqLen), setup);
    MemoryEstimate e;
    e.tensorPeakBytes = g.peakTensors();
    e.allocatedPeakBytes = g.allocator.peakAllocated;
    e.reservedPeakBytes = g.allocator.peakReserved;
    e.peakBytes = g.peakOnCard(gpuOutsideAllocator(setup));
    return e;
}

std::int64_t DerivedStep::extraDataBytes(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const
{
    // (The parts apart, not a copy of the setup: the fit map asks it for every cell.)
    const auto T = plannedSeqLen(seqLen);
    const auto& source = dataset.empty() ? setup.dataset : dataset;
    const auto asked = dataBytes(setup, batch, T, source, setup.gpus, setup.gradAccum);
    const auto traced = dataBytes(setup, batch, T, source, 1, tracedAccum);
    // (Fewer micro-batches than traced: the traced ones, on the safe side.)
    return std::max<std::int64_t>(0, asked - traced);
}

void DerivedStep::beyondTracedTerms(MemoryEstimate& e, std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const
{
    if (const auto buckets = bucketBytes(setup); buckets > 0) {
        e.terms.push_back({"ddp_buckets", buckets, "data parallel: the reducer's gradient buckets, trainable parameters x their bytes"});
    }
    if (const auto rows = extraDataBytes(batch, seqLen, setup); rows > 0) {
        addTerm(e, "data", rows, setup.gpus > 1 ? "data parallel: the other ranks' rows of the global batch every rank "
                                                          "draws, and rank 0's validation of the global batch"
                                                        : "the micro-batches of gradient accumulation beyond the traced step's, "
                                                          "drawn before its first forward");
    }
}

std::int64_t DerivedStep::peakBytes(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup,
                                   bool exactProducts) const
{
    const auto planned = plannedSeqLen(seqLen);
    if (setup.gpu && programs && gpuSegment && unruled.empty()) {
        const auto g = gpuStep(*this, batch, planned, setup);
        if (g.unruled.empty()) return g.peakOnCard(gpuOutsideAllocator(setup));
    }
    std::int64_t most = 0;
    for (int i = 0; i < kStepPhases; ++i) {
        most = std::max(most, segmentAt(planned).phasePeak(i, batch, planned, !setup.gpu, setup.cpuThreads, exactProducts));
    }
    return most + beyondTracedBytes(batch, seqLen, setup) + gpuFixedBytes(setup);
}

FitMap DerivedStep::fitMap(const TrainingSetup& setup, std::int64_t budget, const std::vector<std::int64_t>& batches,
                           const std::vector<std::int64_t>& seqLens) const
{
    FitMap map{batches, seqLens, {}, budget};
    map.compiled = true;
    if (setup.gpu && !batches.empty() && !seqLens.empty() && notExactOn(setup).empty()) {
        // Each cell's tensors from the rules' compiled step (unrounded), the allocator's
        // reserve placed from replays (placeAllocatorReserve).
        const auto cols = batches.size();
        const auto outside = gpuOutsideAllocator(setup);
        const auto bFirst = std::min_element(batches.begin(), batches.end());
        const auto tFirst = std::min_element(seqLens.begin(), seqLens.end());
        // The lightest cell's replay runs while the cells are placed and the
        // others are replayed.
        auto lightest = std::async(std::launch::async, [&] { return peaksOnGpu(*bFirst, *tFirst, setup); });
        std::vector<std::int64_t> placed(batches.size() * seqLens.size());
        map.peakBytes.resize(placed.size());
        forEachConcurrently(seqLens.size(), [&](std::size_t row) {
            for (std::size_t col = 0; col < cols; ++col) {
                const auto tensors = placedOnGpu(batches[col], seqLens[row], setup);
                placed[row * cols + col] = tensors;
                map.peakBytes[row * cols + col] = tensors + outside;
            }
        });
        const auto lightIndex = static_cast<std::size_t>(tFirst - seqLens.begin()) * cols
                                + static_cast<std::size_t>(bFirst - batches.begin());
        placeAllocatorReserve(map, placed, lightIndex, [&] { return lightest.get(); }, [&](std::size_t index) {
            return peaksOnGpu(batches[index % cols], seqLens[index / cols], setup);
        });
        return map;
    }
    map.peakBytes.reserve(batches.size() * seqLens.size());
    for (auto t : seqLens) {
        for (auto b : batches) map.peakBytes.push_back(peakBytes(b, t, setup, false));
    }
    // The cells nearest the budget take oneDNN's scratch for their own
    // shapes: their figures and verdicts are the estimate's.
    if (setup.gpu || !(segment.hasProducts() || (pastWindow && pastWindow->hasProducts()))) return map;
    const auto cols = batches.size();
    for (const auto i : nearestToBudget(map.peakBytes, budget, kExactCells)) {
        map.peakBytes[i] = peakBytes(batches[i % cols], seqLens[i / cols], setup);
    }
    return map;
}

std::int64_t DerivedStep::placedOnGpu(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const
{
    const auto planned = plannedSeqLen(seqLen);
    const auto& S = pastWindowOnGpu && planned > slidingWindow ? *pastWindowOnGpu : *gpuSegment;
    std::int64_t tensors = 0;
    for (int i = 0; i < kStepPhases; ++i) tensors = std::max(tensors, S.phasePeak(i, batch, planned, false, 1, false));
    const auto ws = setup.torchMajor >= 2 ? 2 * cublasWorkspaceBytes(setup.torchMajor, setup.computeCapability) : 0;
    return tensors + beyondTracedBytes(batch, seqLen, setup) + ws;
}

namespace {

// The largest n in [1, limit] whose exact peak fits, where an exact peak
// replays the caching allocator's model (milliseconds for a 7B model) and a
// cheap one (the compiled tensors) is under it by the allocator's reserve.
// The largest n the cheap peaks fit is replayed first; the cheap peaks
// scaled by the reserve it showed place the next, and where that fits, its
// neighbour is replayed too; between the largest size that fits and the
// smallest that does not, largestBetween searches with the replayed peaks
// (1 to 11 replays an answer in bench_fit_map: the reserve beyond the
// tensors moves by up to 0.5% between neighbouring sequence lengths, and
// jumps where a request takes a segment of its own).
template <typename Exact, typename Cheap>
std::int64_t largestPlacedThenReplayed(Exact&& exact, Cheap&& cheap, std::int64_t budget, std::int64_t limit)
{
    if (limit < 1) return 0;
    // What the replays showed: the largest that fits and the smallest that does not, with their peaks.
    std::int64_t fits = 0, over = limit + 1, atFits = 0, atOver = 0;
    const auto replay = [&](std::int64_t n) {
        const auto at = exact(n);
        if (at <= budget && n > fits) fits = n, atFits = at;
        if (at > budget && n < over) over = n, atOver = at;
        return at;
    };
    const auto placeWith = [&](double ratio) {
        return largestUnderBudget([&](std::int64_t n) {
            return static_cast<std::int64_t>(static_cast<double>(cheap(n)) * ratio);
        }, budget, limit);
    };
    auto n = std::max<std::int64_t>(1, largestUnderBudget(cheap, budget, limit));
    const auto first = replay(n);
    if (over > fits + 1) {
        const double ratio = static_cast<double>(first) / static_cast<double>(std::max<std::int64_t>(1, cheap(n)));
        n = std::clamp<std::int64_t>(placeWith(ratio), fits + 1, over - 1);
        if (replay(n) <= budget && n + 1 < over) replay(n + 1);
    }
    if (fits == 0 && over > 1) replay(1); // nothing replayed fitted: the smallest
    if (fits == 0 || over == fits + 1) return fits;
    if (over <= limit) return largestBetween(exact, budget, fits, atFits, over, atOver);
    const auto from = fits; // (nothing replayed was over the budget)
    return from + largestUnderBudget([&](std::int64_t k) { return exact(from + k); }, budget, limit - from);
}

} // namespace

std::int64_t DerivedStep::largestBatch(std::int64_t seqLen, const TrainingSetup& setup, std::int64_t budget,
                                      std::int64_t limit) const
{
    const auto exact = [&](std::int64_t b) { return peakBytes(b, seqLen, setup); };
    if (setup.gpu && notExactOn(setup).empty()) {
        const auto outside = gpuOutsideAllocator(setup);
        return largestPlacedThenReplayed(exact, [&](std::int64_t b) { return placedOnGpu(b, seqLen, setup) + outside; },
                                         budget, limit);
    }
    return largestUnderBudget(exact, budget, limit);
}

std::int64_t DerivedStep::largestSeqLen(std::int64_t batch, const TrainingSetup& setup, std::int64_t budget) const
{
    if (fixedSeqLen > 0) return peakBytes(batch, fixedSeqLen, setup) <= budget ? fixedSeqLen : 0;
    const auto exact = [&](std::int64_t t) { return peakBytes(batch, t, setup); };
    if (setup.gpu && notExactOn(setup).empty()) {
        const auto outside = gpuOutsideAllocator(setup);
        return largestPlacedThenReplayed(exact, [&](std::int64_t t) { return placedOnGpu(batch, t, setup) + outside; },
                                         budget, 1 << 20);
    }
    return largestUnderBudget(exact, budget, 1 << 20);
}

namespace {

nlohmann::json segmentToJson(const CompiledSegment& S)
{
    return {{"t0", S.t0},
            {"t_last", S.tLast},
            {"traces", S.traces},
            {"general_from", S.generalFrom},
            {"peaks", S.peaks},
            {"peaks_small", S.peaksSmall},
            {"first", S.first},
            {"first_small", S.firstSmall},
            {"scratch_bases", S.scratchBases},
            {"scratch_bases_small", S.scratchBasesSmall},
            {"irregular_scratch", S.irregularScratch},
            {"gemm_sites", S.gemmSites},
            {"gemm_sites_small", S.gemmSitesSmall}};
}

CompiledSegment segmentFromJson(const nlohmann::json& j)
{
    CompiledSegment S;
    S.t0 = j.at("t0").get<std::int64_t>();
    S.tLast = j.at("t_last").get<std::int64_t>();
    S.traces = j.at("traces").get<int>();
    S.generalFrom = j.at("general_from").get<std::int64_t>();
    S.peaks = j.at("peaks").get<decltype(S.peaks)>();
    S.peaksSmall = j.at("peaks_small").get<decltype(S.peaksSmall)>();
    S.first = j.at("first").get<StepPoly>();
    S.firstSmall = j.at("first_small").get<std::vector<StepPoly>>();
    if (S.generalFrom < 2 || S.peaksSmall.size() != static_cast<std::size_t>(S.generalFrom - 1)
        || S.firstSmall.size() != S.peaksSmall.size()) {
        throw InputError("the derived plan's data is inconsistent: general_from " + std::to_string(S.generalFrom)
                         + " with " + std::to_string(S.peaksSmall.size()) + " small-batch regimes");
    }
    S.scratchBases = j.at("scratch_bases").get<decltype(S.scratchBases)>();
    S.scratchBasesSmall = j.at("scratch_bases_small").get<decltype(S.scratchBasesSmall)>();
    S.irregularScratch = j.at("irregular_scratch").get<std::int64_t>();
    // (Steps saved before products were recorded have none.)
    if (j.contains("gemm_sites")) S.gemmSites = j.at("gemm_sites").get<std::vector<GemmSite>>();
    if (j.contains("gemm_sites_small")) {
        S.gemmSitesSmall = j.at("gemm_sites_small").get<std::vector<std::vector<GemmSite>>>();
    }
    if (!S.gemmSitesSmall.empty() && S.gemmSitesSmall.size() != S.peaksSmall.size()) {
        throw InputError("the derived plan's data is inconsistent: " + std::to_string(S.gemmSitesSmall.size())
                         + " small-batch product regimes for " + std::to_string(S.peaksSmall.size()));
    }
    if (S.scratchBasesSmall.size() != S.peaksSmall.size()) {
        throw InputError("the derived plan's data is inconsistent: " + std::to_string(S.scratchBasesSmall.size())
                         + " small-batch scratch regimes for " + std::to_string(S.peaksSmall.size()));
    }
    return S;
}

} // namespace

std::string derivedStepToJson(const DerivedStep& step)
{
    // The segment's fields at the top level, as steps were saved before a
    // window could make a second.
    auto out = segmentToJson(step.segment);
    out["parameters"] = step.parameters;
    out["trainable_parameters"] = step.trainableParameters;
    out["parameters_per_token"] = step.parametersPerToken;
    out["trainable_parameters_per_token"] = step.trainablePerToken;
    out["trainable_bytes"] = step.trainableBytes;
    out["largest_traced_seq_len"] = step.largestTracedSeqLen;
    out["fixed_seq_len"] = step.fixedSeqLen;
    out["traced_grad_accum"] = step.tracedAccum;
    out["grad_accum"] = step.accum;
    out["dataset"] = step.dataset;
    out["traced_on"] = step.tracedOn;
    if (step.pastWindow) {
        out["sliding_window"] = step.slidingWindow;
        out["past_window"] = segmentToJson(*step.pastWindow);
    }
    // The programs, for a GPU's plan (a step traced at its own widths has none).
    if (step.programs) out["programs"] = nlohmann::json::parse(stepProgramsToJson(*step.programs));
    if (step.pastWindowPrograms) out["past_window_programs"] = nlohmann::json::parse(stepProgramsToJson(*step.pastWindowPrograms));
    if (step.gpuSegment) out["gpu_segment"] = segmentToJson(*step.gpuSegment);
    if (step.pastWindowOnGpu) out["past_window_on_gpu"] = segmentToJson(*step.pastWindowOnGpu);
    if (!step.unruled.empty()) out["unruled"] = step.unruled;
    return out.dump();
}

DerivedStep derivedStepFromJson(const std::string& text)
{
    try {
        const auto j = nlohmann::json::parse(text);
        DerivedStep step;
        step.segment = segmentFromJson(j);
        step.parameters = j.at("parameters").get<std::int64_t>();
        step.trainableParameters = j.at("trainable_parameters").get<std::int64_t>();
        step.parametersPerToken = j.value("parameters_per_token", std::int64_t{0});
        step.trainablePerToken = j.value("trainable_parameters_per_token", std::int64_t{0});
        // (Steps saved before it was recorded: fp32 parameters.)
        step.trainableBytes = j.value("trainable_bytes", step.trainableParameters * 4);
        step.largestTracedSeqLen = j.at("largest_traced_seq_len").get<std::int64_t>();
        step.fixedSeqLen = j.at("fixed_seq_len").get<std::int64_t>();
        step.tracedAccum = j.value("traced_grad_accum", 1);
        step.accum = j.value("grad_accum", step.tracedAccum);
        step.dataset = j.value("dataset", std::string());
        if (step.tracedAccum < 1 || step.accum < 1) {
            throw InputError("the derived plan's data is inconsistent: grad_accum " + std::to_string(step.accum)
                             + ", traced with " + std::to_string(step.tracedAccum));
        }
        step.tracedOn = j.at("traced_on").get<std::string>();
        if (j.contains("past_window")) {
            step.slidingWindow = j.at("sliding_window").get<std::int64_t>();
            if (step.slidingWindow <= 0) {
                throw InputError("the derived plan's data is inconsistent: sliding window "
                                 + std::to_string(step.slidingWindow));
            }
            step.pastWindow = segmentFromJson(j.at("past_window"));
        }
        if (j.contains("programs")) step.programs = std::make_shared<const StepPrograms>(stepProgramsFromJson(j.at("programs").dump()));
        if (j.contains("past_window_programs")) {
            step.pastWindowPrograms = std::make_shared<const StepPrograms>(stepProgramsFromJson(j.at("past_window_programs").dump()));
        }
        if (j.contains("gpu_segment")) step.gpuSegment = segmentFromJson(j.at("gpu_segment"));
        if (j.contains("past_window_on_gpu")) step.pastWindowOnGpu = segmentFromJson(j.at("past_window_on_gpu"));
        step.unruled = j.value("unruled", std::string());
        if (step.pastWindow && step.gpuSegment && !(step.pastWindowPrograms && step.pastWindowOnGpu)) {
            throw InputError("the derived plan's data is inconsistent: a GPU step within the sliding window and none past it");
        }
        return step;
    } catch (const nlohmann::json::exception& e) {
        throw InputError(std::string("the derived plan's data is not what trainbench-cli estimate --derived writes: ")
                         + e.what());
    }
}

} // namespace tb
