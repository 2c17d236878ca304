#include "train/DerivedPlan.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <ATen/record_function.h>

#include "common/Errors.h"
#include "config/HfArchitecture.h"
#include "memory/MemoryProbe.h"
#include "train/Trainer.h"

namespace tb {
namespace {

// The step being traced. One at a time in a process: the counting
// allocator's trace hook is process-wide. An allocation freed before the next
// one is made is a kernel's scratch buffer: its bytes go to the transient of
// the entry before it, so that steps whose kernels take scratch at some
// shapes and not others still line up entry by entry. Where the scratch came
// in a bf16 matrix product, the product's shape goes with it (oneDNN's
// scratch follows no polynomial, but oneDNN can say it for any shape).
struct Recorder {
    bool on = false;
    std::uint8_t phase = 0;
    StepTrace trace;
    // The allocation not yet known to be scratch or kept.
    const void* pending = nullptr;
    std::int64_t pendingBytes = 0, pendingLive = 0;
    std::uint8_t pendingPhase = 0;
    GemmCall pendingGemm; // the product running when it was made (m = 0: none)
    // The operators running on the tracing thread (owner), innermost last: a
    // bf16 product's shape, or m = 0.
    std::vector<GemmCall> ops;
    std::thread::id owner = std::this_thread::get_id();

    void push(std::int64_t live)
    {
        trace.live.push_back(live);
        trace.transient.push_back(live);
        trace.phase.push_back(pendingPhase);
        trace.gemm.emplace_back();
    }
    void keepPending()
    {
        if (!pending) return;
        push(pendingLive);
        pending = nullptr;
    }
};
Recorder* g_recorder = nullptr;
std::mutex g_traceMutex;

// A bf16 product as oneDNN receives it from LibTorch: mm(a, b), addmm(c, a,
// b, beta, alpha), bmm(a, b), baddbmm(c, a, b, beta, alpha). An operand that
// is neither contiguous nor a transposed contiguous matrix is copied first.
GemmCall gemmOf(const at::RecordFunction& fn)
{
    const std::string_view name = fn.name();
    const bool add = name == "aten::addmm" || name == "aten::baddbmm";
    if (!add && name != "aten::mm" && name != "aten::bmm") return {};
    const auto inputs = fn.inputs();
    const std::size_t first = add ? 1 : 0;
    if (inputs.size() < first + 2 || !inputs[first].isTensor() || !inputs[first + 1].isTensor()) return {};
    const auto& a = inputs[first].toTensor();
    const auto& b = inputs[first + 1].toTensor();
    if (a.scalar_type() != at::kBFloat16 || b.scalar_type() != at::kBFloat16 || a.dim() != b.dim()
        || (a.dim() != 2 && a.dim() != 3)) {
        return {};
    }
    const auto transposed = [](const at::Tensor& t) {
        const auto d = t.dim();
        return !t.is_contiguous() && t.stride(d - 2) == 1 && t.stride(d - 1) == t.size(d - 2)
            && (d == 2 || t.stride(0) == t.size(1) * t.size(2));
    };
    GemmCall c;
    const auto d = a.dim();
    c.batch = d == 3 ? a.size(0) : 0;
    c.m = a.size(d - 2);
    c.k = a.size(d - 1);
    c.n = b.size(d - 1);
    c.srcTransposed = transposed(a);
    c.weightsTransposed = transposed(b);
    c.accumulate = add && inputs.size() > 3 && inputs[3].isScalar() && inputs[3].toScalar().toDouble() != 0.0;
    return c;
}

std::unique_ptr<at::ObserverContext> enterGemmOp(const at::RecordFunction& fn)
{
    if (auto* rec = g_recorder) rec->ops.push_back(rec->on ? gemmOf(fn) : GemmCall{});
    return nullptr;
}

void leaveGemmOp(const at::RecordFunction&, at::ObserverContext*)
{
    if (auto* rec = g_recorder; rec && !rec->ops.empty()) rec->ops.pop_back();
}

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
        // (The operator stack is the tracing thread's: its callbacks are thread-local.)
        rec->pendingGemm = std::this_thread::get_id() != rec->owner || rec->ops.empty() ? GemmCall{} : rec->ops.back();
        return;
    }
    // (A scratch allocated in a phase after the previous entry's is kept as
    // an entry of its own: its bytes belong to the phase it came in.)
    if (rec->pending == ptr && rec->pendingBytes == -delta && !rec->trace.live.empty()
        && rec->trace.phase.back() == rec->pendingPhase) {
        auto& transient = rec->trace.transient.back();
        if (rec->pendingLive > transient) {
            transient = rec->pendingLive;
            rec->trace.gemm.back() = rec->pendingGemm;
        }
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
// LibTorch 1.13 the gradients too). slidingWindow > 0: the model's window
// taken as that many positions.
Traced traceStep(const RunConfig& base, std::int64_t B, std::int64_t T, int slidingWindow)
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
    options.slidingWindow = slidingWindow;
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
            rec.pendingPhase = 0;
            rec.push(MemoryProbe::snapshot("cpu").currentBytes);
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
        // The products' shapes, on this thread (the traced step runs on it).
        const auto ops = at::addThreadLocalCallback(
            at::RecordFunctionCallback(&enterGemmOp, &leaveGemmOp).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
        TrainResult result;
        try {
            result = trainer.run(callbacks);
        } catch (...) {
            at::removeCallback(ops);
            MemoryProbe::setCpuTrace(nullptr);
            g_recorder = nullptr;
            throw;
        }
        at::removeCallback(ops);
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
    int windowTaken = 0; // > 0: the model's sliding window taken as this many positions while tracing
    // A fixed sequence traces each batch once (every T is the same step).
    std::map<std::int64_t, StepTrace> byBatch;
    const auto tracer = [&](std::int64_t B, std::int64_t T) {
        if (fixed) {
            if (auto it = byBatch.find(B); it != byBatch.end()) return it->second;
        }
        if (progress.cancel && progress.cancel->load()) throw InputError("deriving the memory plan was cancelled");
        auto t = traceStep(config, B, T, windowTaken);
        if (fixed) byBatch[B] = t.trace;
        step.parameters = t.parameters;
        step.trainableParameters = t.trainable;
        step.trainableBytes = t.trainableBytes; // in their own dtypes (bf16 in pure bf16)
        largest = std::max(largest, T);
        ++traced;
        if (progress.onTrace) progress.onTrace(traced, B, T);
        return std::move(t.trace);
    };
    const auto compile = [&] {
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
        return std::move(*segment);
    };
    // A sliding window (Mistral): past it the step masks the window and runs
    // eager attention, SDPA asked for or not. Neither step depends on the
    // window's length, so each is traced apart at the usual shapes: within
    // the window with none taken, past it with a window of one position.
    const auto window = config.model.type == "hf" && !fixed
        ? readHfArchitecture(resolvedModelPath(config)).slidingWindow : 0;
    if (window > 0) windowTaken = 1 << 30;
    step.segment = compile();
    step.segment.traces = traced; // steps actually run (a fixed sequence reuses them)
    if (window > 0) {
        const int before = traced;
        windowTaken = 1;
        step.pastWindow = compile();
        step.pastWindow->traces = traced - before;
        step.slidingWindow = window;
    }
    step.largestTracedSeqLen = largest;
    step.tracedOn = "LibTorch " + torchVersion() + " on this machine's CPU";
    if (config.train.precision == "fp16") {
        step.tracedOn += " (fp16 as bf16 with loss scaling: the same element sizes; CUDA's autocast lists differ a little)";
    }
    return step;
}

} // namespace tb
