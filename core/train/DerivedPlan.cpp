#include "train/DerivedPlan.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "common/Errors.h"
#include "memory/MemoryProbe.h"
#include "train/Trainer.h"

namespace tb {
namespace {

// The step being traced. One at a time in a process: the counting
// allocator's trace hook is process-wide. An allocation freed before the next
// one is made is a kernel's scratch buffer: its bytes go to the transient of
// the entry before it, so that steps whose kernels take scratch at some
// shapes and not others still line up entry by entry.
struct Recorder {
    bool on = false;
    std::uint8_t phase = 0;
    StepTrace trace;
    // The allocation not yet known to be scratch or kept.
    const void* pending = nullptr;
    std::int64_t pendingBytes = 0, pendingLive = 0;
    std::uint8_t pendingPhase = 0;

    void keepPending()
    {
        if (!pending) return;
        trace.live.push_back(pendingLive);
        trace.transient.push_back(pendingLive);
        trace.phase.push_back(pendingPhase);
        pending = nullptr;
    }
};
Recorder* g_recorder = nullptr;
std::mutex g_traceMutex;

void record(std::int64_t delta, std::int64_t live, const void* ptr)
{
    auto* rec = g_recorder;
    if (!rec || !rec->on || delta == 0) return;
    if (delta > 0) {
        rec->keepPending();
        rec->pending = ptr;
        rec->pendingBytes = delta;
        rec->pendingLive = live;
        rec->pendingPhase = rec->phase;
        return;
    }
    // (A scratch allocated in a phase after the previous entry's is kept as
    // an entry of its own: its bytes belong to the phase it came in.)
    if (rec->pending == ptr && rec->pendingBytes == -delta && !rec->trace.live.empty()
        && rec->trace.phase.back() == rec->pendingPhase) {
        auto& transient = rec->trace.transient.back();
        transient = std::max(transient, rec->pendingLive);
        rec->pending = nullptr;
        return;
    }
    rec->keepPending();
}

// The steps whose sequence length cannot change: the addition task's
// examples have one length, and a built-in GPT started from saved weights
// has the learned position table they were saved with.
bool fixedSequence(const RunConfig& c)
{
    return c.data.source == "addition"
        || (c.model.type == "gpt" && c.model.positionalEncoding == "learned" && !c.train.initFrom.empty());
}

struct Traced {
    StepTrace trace;
    std::int64_t parameters = 0, trainable = 0, trainableBytes = 0;
};

// Trains two steps at (B, T) on the CPU, one thread, and records the second
// (the steady state: the optimizer state exists from its start, and on
// LibTorch 1.13 the gradients too).
Traced traceStep(const RunConfig& base, std::int64_t B, std::int64_t T)
{
    RunConfig c = base;
    c.device = "cpu";
    c.train.batchSize = static_cast<int>(B);
    if (!fixedSequence(c)) c.data.seqLen = static_cast<int>(T);
    c.train.steps = 2;
    c.optim.warmupSteps = std::min(c.optim.warmupSteps, 2);
    c.train.evalEvery = 2; // validation only after the traced step
    c.train.checkpointEvery = 0;
    c.train.logEvery = 1;
    c.train.threads = 1; // the recorder is single-threaded
    c.train.worldSize = 1;

    Recorder rec;
    TrainerOptions options;
    options.measureMemory = true;
    // fp16 autocast is CUDA's: on the CPU the step is bf16 (the same element
    // sizes) with the fp16 run's dynamic loss scaling.
    if (c.train.precision == "fp16") {
        c.train.precision = "bf16";
        options.forceLossScaling = true;
    }
    options.onPhaseBegin = [&rec](int step, int phase) {
        rec.phase = static_cast<std::uint8_t>(phase);
        if (step == 2 && !rec.on && rec.trace.live.empty()) {
            // The first entry: what is live as the step starts.
            const auto now = MemoryProbe::snapshot("cpu").currentBytes;
            rec.trace.live.push_back(now);
            rec.trace.transient.push_back(now);
            rec.trace.phase.push_back(0);
            rec.on = true;
        }
    };
    TrainerCallbacks callbacks;
    callbacks.onStep = [&rec](const StepMetrics& s) {
        if (s.step != 2) return;
        rec.keepPending();
        rec.on = false;
    };
    Traced out;
    const std::string shape = "batch " + std::to_string(B) + ", sequence " + std::to_string(T);
    std::lock_guard<std::mutex> lock(g_traceMutex);
    {
        Trainer trainer(c, options);
        out.parameters = trainer.parameterCount();
        out.trainable = trainer.trainableParameterCount();
        out.trainableBytes = trainer.trainableParameterBytes();
        g_recorder = &rec;
        MemoryProbe::setCpuTrace(&record);
        TrainResult result;
        try {
            result = trainer.run(callbacks);
        } catch (...) {
            MemoryProbe::setCpuTrace(nullptr);
            g_recorder = nullptr;
            throw;
        }
        MemoryProbe::setCpuTrace(nullptr);
        g_recorder = nullptr;
        if (result.status != TrainResult::Status::Finished || rec.trace.live.size() < 2) {
            throw InputError("deriving the memory plan: the step at " + shape + " did not train: "
                             + (result.message.empty() ? std::string("it stopped before its second step") : result.message));
        }
    }
    out.trace = std::move(rec.trace);
    return out;
}

} // namespace

DerivedStep deriveStep(const RunConfig& config, const DerivedPlanProgress& progress)
{
    // Data parallel: one rank's step is traced alone (traceStep runs one
    // process); DerivedStep adds the reducer's buckets and the global batch's
    // rows for train.world_size ranks.
    DerivedStep step;
    const bool fixed = fixedSequence(config);
    if (fixed) step.fixedSeqLen = effectiveSeqLen(config);
    // Sampled from sequence 8: small enough to trace a step in a fraction of
    // a second, long enough that most sizes have their form. Where the
    // allocations change with the shape between the samples and the checks,
    // sampled again further out, up to sequence 128.
    int traced = 0;
    std::int64_t largest = 0;
    // A fixed sequence traces each batch once (every T is the same step).
    std::map<std::int64_t, StepTrace> byBatch;
    const auto tracer = [&](std::int64_t B, std::int64_t T) {
        if (fixed) {
            if (auto it = byBatch.find(B); it != byBatch.end()) return it->second;
        }
        if (progress.cancel && progress.cancel->load()) throw InputError("deriving the memory plan was cancelled");
        auto t = traceStep(config, B, T);
        if (fixed) byBatch[B] = t.trace;
        step.parameters = t.parameters;
        step.trainableParameters = t.trainable;
        step.trainableBytes = t.trainableBytes; // in their own dtypes (bf16 in pure bf16)
        largest = std::max(largest, T);
        ++traced;
        if (progress.onTrace) progress.onTrace(traced, B, T);
        return std::move(t.trace);
    };
    std::optional<CompiledSegment> segment;
    std::int64_t t0 = fixed ? step.fixedSeqLen : 8;
    for (;;) {
        // Checked at shapes no sample had, up to four times the longest sample.
        const std::vector<std::pair<std::int64_t, std::int64_t>> checks =
            fixed ? std::vector<std::pair<std::int64_t, std::int64_t>>{{5, t0}, {1, t0}}
                  : std::vector<std::pair<std::int64_t, std::int64_t>>{
                        {5, t0 + 6}, {1, t0 + 5}, {4, 2 * t0 + 5}, {2, 4 * t0 + 3}};
        // Batches 1 and 2 have polynomials of their own: at B = 1 matmul
        // skips copies; B = 2 is kept apart as a margin against a data path
        // or kernel that changes at the smallest batches (the addition task's
        // draws did, before they went into one buffer): three more steps.
        segment = compileSegment(tracer, t0, t0 + 2, 5, checks, 3);
        if (segment || fixed || t0 >= 128) break;
        t0 *= 4;
    }
    if (!segment) {
        throw InputError("deriving the memory plan: this model's step allocates differently at batch 1 to 5 and "
                         "sequence " + std::to_string(fixed ? step.fixedSeqLen : 8) + " to " + std::to_string(largest)
                         + " than a polynomial in batch and sequence allows (a kernel that changes with the shape); "
                           "measure it instead: trainbench-cli measure --config FILE");
    }
    step.segment = std::move(*segment);
    step.segment.traces = traced; // steps actually run (a fixed sequence reuses them)
    step.largestTracedSeqLen = largest;
    step.tracedOn = "LibTorch " + torchVersion() + " on this machine's CPU";
    if (config.train.precision == "fp16") {
        step.tracedOn += " (fp16 as bf16 with loss scaling: the same element sizes; CUDA's autocast lists differ a little)";
    }
    return step;
}

} // namespace tb
