#include "train/DerivedPlan.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "config/HfArchitecture.h"
#include "memory/CpuGemmScratch.h"
#include "memory/DeviceRules.h"
#include "memory/Estimator.h"
#include "memory/LayerRepeat.h"
#include "train/Threads.h"
#include "memory/MemoryProbe.h"
#include "memory/StepProgram.h"
#include "train/Datasets.h"
#include "train/Layers.h"
#include "train/TrainStep.h"
#include "train/TorchCompat.h"
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
    // The CPU counter's bytes before the traced trainer was built: tensors of
    // the process that are not the step's (a run's own trainer, planning its
    // launch estimate) are not the step's residents.
    std::int64_t baseline = 0;

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
std::shared_mutex g_traceMutex;

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
        rec->pendingLive = live - rec->baseline;
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

// The config a traced or recorded step trains: two steps at (B, T) on the
// CPU, one thread, one rank, validation only after the second step. fp16
// autocast is CUDA's: on the CPU the step is bf16 (the same element sizes)
// with the fp16 run's dynamic loss scaling (options.forceLossScaling).
RunConfig stepConfig(const RunConfig& base, std::int64_t B, std::int64_t T, TrainerOptions& options)
{
    RunConfig c = base;
    c.device = "cpu";
    c.train.batchSize = static_cast<int>(B);
    if (!fixedSequence(c)) c.data.seqLen = static_cast<int>(T);
    c.train.steps = 2;
    c.optim.warmupSteps = std::min(c.optim.warmupSteps, 2);
    c.train.evalEvery = 2;
    c.train.checkpointEvery = 0;
    c.train.logEvery = 1;
    c.train.threads = 1; // the recorder is single-threaded
    c.train.worldSize = 1;
    options.measureMemory = true;
    options.skipEvaluation = true; // (the validation set is loaded, its passes are not the step)
    if (c.train.precision == "fp16") {
        c.train.precision = "bf16";
        options.forceLossScaling = true;
        // A half-precision LoRA base: autocast's casts of it are no-ops
        // where its dtype is the autocast dtype, copies where it is the
        // other one; the bf16 step keeps that by swapping the two.
        if (c.train.weightsDtype != "fp32") c.train.weightsDtype = c.train.weightsDtype == "fp16" ? "bf16" : "fp16";
    }
    return c;
}

// Trains two steps at (B, T) on the CPU, one thread, and records the second
// (the steady state: the optimizer state exists from its start, and on
// LibTorch 1.13 the gradients too). slidingWindow > 0: the model's window
// taken as that many positions.
Traced traceStep(const RunConfig& base, std::int64_t B, std::int64_t T, int slidingWindow)
{
    TrainerOptions options;
    const RunConfig c = stepConfig(base, B, T, options);

    Recorder rec;
    options.slidingWindow = slidingWindow;
    options.onPhaseBegin = [&rec](int step, int phase) {
        rec.phase = static_cast<std::uint8_t>(phase);
        if (step == 2 && !rec.on && rec.trace.live.empty()) {
            // The first entry: what is live as the step starts.
            rec.pendingPhase = 0;
            rec.push(MemoryProbe::snapshot("cpu").currentBytes - rec.baseline);
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
    std::unique_lock<std::shared_mutex> lock(g_traceMutex);
    MemoryProbe::installCpuCounter();
    rec.baseline = MemoryProbe::snapshot("cpu").currentBytes;
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

// The step as a program's record (memory/StepProgram.h): every block from
// the trainer's construction on is followed, so that the blocks live as the
// traced step starts are known one by one, and each release in the step
// names the block it frees. Reached only from the thread it records
// (t_blocks, the allocator's per-thread hook, thread-local callbacks).
struct BlockRecorder {
    struct Block {
        std::int64_t birth = 0, bytes = 0;
        std::int32_t index = -1; // in the record: residents first, then the step's allocations
    };
    std::unordered_map<const void*, Block> live;
    // Blocks left out of the residents: a quantized base's (StepPrograms::fixedResidents).
    std::set<const void*> leftOut;
    std::int64_t births = 0;
    bool on = false;
    std::uint8_t phase = 0;
    RecordedStep step;
    std::int32_t nextIndex = 0;
    // The operators running on the recording thread, outermost first: a
    // product's shape (as Recorder's), and for a root (an operator the
    // trainer's code called: outermost, or the first inside an autograd
    // node's evaluation, where checkpointing recomputes a block) its name
    // (an index in step.ops), its first tensor's bytes per element and
    // whether it has allocated yet (the device rules read them).
    struct Frame {
        GemmCall gemm;
        std::int16_t name = -1;
        std::uint8_t elementBytes = 0;
        bool root = false, node = false, allocated = false, dtype = false, autocast = false, dropout = false;
        bool hasShape = false;
        std::array<std::int64_t, 4> shape{};
    };
    std::vector<Frame> ops;
    Frame* root()
    {
        for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
            if (it->root) return &*it;
        }
        return nullptr;
    }

    void begin()
    {
        std::vector<Block*> blocks;
        for (auto& [ptr, b] : live) {
            if (!leftOut.count(ptr)) blocks.push_back(&b);
        }
        std::sort(blocks.begin(), blocks.end(), [](const Block* x, const Block* y) { return x->birth < y->birth; });
        for (auto* b : blocks) {
            b->index = nextIndex++;
            step.resident.push_back(b->bytes);
        }
        on = true;
    }
};
// The probe being recorded on this thread (probes record on several at once).
thread_local BlockRecorder* t_blocks = nullptr;

void recordBlock(std::int64_t delta, std::int64_t, const void* ptr)
{
    auto* rec = t_blocks;
    if (!rec || delta == 0) return;
    if (delta > 0) {
        BlockRecorder::Block b{rec->births++, delta, -1};
        if (rec->on) {
            b.index = rec->nextIndex++;
            RecordedStep::Event e;
            e.bytes = delta;
            e.phase = rec->phase;
            if (!rec->ops.empty()) {
                e.gemm = rec->ops.back().gemm;
                if (auto* root = rec->root()) {
                    e.op = root->name;
                    e.elementBytes = root->elementBytes;
                    e.opDtype = root->dtype;
                    e.autocast = root->autocast;
                    e.opDropout = root->dropout;
                    e.hasShape = root->hasShape && !root->allocated;
                    if (e.hasShape) e.shape = root->shape;
                    e.firstInOp = !root->allocated;
                    root->allocated = true;
                }
            }
            rec->step.events.push_back(e);
        }
        rec->live[ptr] = b;
        return;
    }
    std::int32_t index = -1;
    if (auto it = rec->live.find(ptr); it != rec->live.end()) {
        index = it->second.index;
        rec->live.erase(it);
    }
    if (rec->on && index >= 0 && index == rec->nextIndex - 1 && !rec->step.events.empty()) {
        // A bf16 product's scratch (oneDNN's): its size follows no formula,
        // and at small widths a product may take none. It leaves the record;
        // the product's marker (leaveBlockOp) has oneDNN say it at any width.
        const auto& last = rec->step.events.back();
        if (last.bytes == -delta && last.gemm.m != 0 && last.phase == rec->phase) {
            if (last.firstInOp) {
                if (auto* root = rec->root()) root->allocated = false;
            }
            rec->step.events.pop_back();
            --rec->nextIndex;
            return;
        }
    }
    if (rec->on) {
        RecordedStep::Event e;
        e.bytes = delta;
        e.block = index;
        e.phase = rec->phase;
        rec->step.events.push_back(e);
    }
}

std::unique_ptr<at::ObserverContext> enterBlockOp(const at::RecordFunction& fn)
{
    auto* rec = t_blocks;
    if (!rec) return nullptr;
    BlockRecorder::Frame frame;
    if (rec->on) {
        frame.gemm = gemmOf(fn);
        const std::string name = fn.name();
        frame.node = name.rfind("autograd::engine::evaluate_function", 0) == 0;
        frame.root = rec->ops.empty() || rec->ops.back().node;
        if (frame.root) {
            const auto inputs = fn.inputs();
            for (const auto& input : inputs) {
                if (!input.isTensor() || !input.toTensor().defined()) continue;
                frame.elementBytes = static_cast<std::uint8_t>(input.toTensor().element_size());
                break;
            }
            // softmax(x, dim, dtype), sum(x, dim, keepdim, dtype), ...: a dtype given last.
            frame.dtype = inputs.size() > 1 && inputs.back().isInt();
            frame.autocast = compat::autocastEnabled(c10::DeviceType::CPU);
            if (name.find("scaled_dot_product") != std::string::npos) {
                // The query's sizes, and (the forward's fifth argument) dropout.
                for (const auto& input : inputs) {
                    if (!input.isTensor() || !input.toTensor().defined()) continue;
                    const auto& t = input.toTensor();
                    if (t.dim() == 4) {
                        frame.hasShape = true;
                        for (int d = 0; d < 4; ++d) frame.shape[static_cast<std::size_t>(d)] = t.size(d);
                    }
                    break;
                }
                frame.dropout = inputs.size() > 4 && inputs[4].isDouble() && inputs[4].toDouble() > 0.0;
            }
            auto& ops = rec->step.ops;
            const auto it = std::find(ops.begin(), ops.end(), name);
            frame.name = static_cast<std::int16_t>(it - ops.begin());
            if (it == ops.end()) ops.push_back(name);
        }
    }
    rec->ops.push_back(frame);
    return nullptr;
}

void leaveBlockOp(const at::RecordFunction&, at::ObserverContext*)
{
    auto* rec = t_blocks;
    if (!rec || rec->ops.empty()) return;
    if (rec->on && rec->ops.back().gemm.m != 0) {
        // A bf16 product ran: the marker where its scratch, if any, goes.
        RecordedStep::Event e;
        e.phase = rec->phase;
        e.gemm = rec->ops.back().gemm;
        rec->step.events.push_back(e);
    }
    rec->ops.pop_back();
}

// How the probes are laid out for one config: the model as the trainer
// builds it (its real widths), and the data the probes draw.
struct ProbeSetup {
    RunConfig config;
    ModelOptions model;
    int idBytes = 0; // 2 or 4: random ids of that width; 0: the config's own data (its vocabulary fixed)
    bool mask = false;
    bool tiedKv() const { return model.kvHeads() == model.nHead; }
    // The key/value heads as a share of the heads where a tensor's size sums
    // the two (a fused q/k/v projection: (heads + 2 x key/value heads) x head
    // size rows, no product of one polynomial per dimension): the probes keep
    // the model's share, and the heads move both. 1: tied (no grouped-query
    // attention); 0: the key/value heads a dimension of their own (one stays
    // one: heads + 2 is a polynomial in the heads).
    int kvGroup() const
    {
        if (tiedKv()) return 1;
        const int kv = model.kvHeads();
        return model.fusedProjections && kv > 1 && model.nHead % kv == 0 ? model.nHead / kv : 0;
    }
    // The GPT family (built-in, GPT-2, GPT-NeoX): the hidden size is heads x
    // head size, so the probes move those two and the hidden size follows.
    bool gptLike() const { return model.type != "llama"; }
    // A folder's table of learned positions (GPT-2's wpe) has the file's
    // rows at every sequence; elsewhere the tables follow the sequence.
    bool fixedPositions() const { return config.model.type == "hf" && model.positionalEncoding == "learned"; }
};

// Whether the step can be recorded as a program: a model whose every width
// the trainer takes from ModelOptions: the Llama family and the GPT family
// (built-in or a folder's). The addition task's sequence is the dataset's at
// every probe too (its programs are constant in the sequence), except where
// bf16 products go to oneDNN: there a product of that short sequence at the
// probes' widths (16 rows of heads, say) stays under the size LibTorch hands
// to oneDNN where the model's does not, so its step is traced at its own
// widths. (A GPT started from saved weights with learned positions keeps the
// table they were saved with: traced at its own widths as well.)
bool programmable(const RunConfig& c)
{
    if (fixedSequence(c)) {
        if (c.data.source != "addition") return false;
        if (c.model.type == "gpt" && c.model.positionalEncoding == "learned" && !c.train.initFrom.empty()) return false;
        if (c.train.precision != "fp32" && cpuBf16ProductsUseOneDnn()) return false;
    }
    if (c.model.type == "llama" || c.model.type == "gpt") return true;
    if (c.model.type != "hf") return false;
    const auto arch = readHfArchitecture(resolvedModelPath(c));
    return arch.llamaFamily() || arch.modelType == "gpt2" || arch.modelType == "gpt_neox";
}

// The head sizes the GPT family's probes take (probePlan), multiples of 8:
// GPT-NeoX rotates a fraction of each head (a quarter in Pythia), which must
// come out whole, and even (RoPE turns pairs), at every one of them.
constexpr std::array<std::int64_t, 4> kGptProbeHeadDims{16, 24, 32, 40};

StepDims realDims(const ModelOptions& o)
{
    StepDims d{};
    dimOf(d, StepDim::Batch) = 1;
    dimOf(d, StepDim::Seq) = o.maxLen;
    dimOf(d, StepDim::Hidden) = o.dModel;
    dimOf(d, StepDim::Heads) = o.nHead;
    dimOf(d, StepDim::KvHeads) = o.kvHeads();
    dimOf(d, StepDim::HeadDim) = o.headDim();
    dimOf(d, StepDim::Intermediate) = o.dFf;
    dimOf(d, StepDim::Vocab) = o.vocabSize;
    dimOf(d, StepDim::Rank) = o.loraRank;
    return d;
}

// Trains two steps of the probe model at `dims` on the CPU, one thread, and
// records the second, as traceStep does.
RecordedStep recordProbe(const ProbeSetup& setup, const StepDims& dims, int slidingWindow)
{
    TrainerOptions options;
    const RunConfig c = stepConfig(setup.config, dimOf(dims, StepDim::Batch), dimOf(dims, StepDim::Seq), options);
    auto model = std::make_shared<ModelOptions>(setup.model);
    if (!setup.fixedPositions() && !fixedSequence(c)) model->maxLen = c.data.seqLen;
    model->dModel = static_cast<int>(dimOf(dims, StepDim::Hidden));
    model->nHead = static_cast<int>(dimOf(dims, StepDim::Heads));
    // Without grouped-query attention the key/value heads are the heads (a
    // step with fewer would repeat them: another program).
    const int group = setup.kvGroup();
    model->nKvHead = group > 0 ? model->nHead / group : static_cast<int>(dimOf(dims, StepDim::KvHeads));
    model->headDimOverride = static_cast<int>(dimOf(dims, StepDim::HeadDim));
    if (setup.gptLike()) {
        // The GPT family's heads split the hidden size; GPT-NeoX rotates the
        // same fraction of each head as the model (whole at every probe head
        // size: programsFor checks).
        const auto hd = dimOf(dims, StepDim::HeadDim);
        model->dModel = static_cast<int>(dimOf(dims, StepDim::Heads) * hd);
        model->headDimOverride = 0;
        model->nKvHead = 0;
        model->rotaryDims = static_cast<int>(setup.model.rotaryDims * hd / setup.model.headDim());
    }
    model->dFf = static_cast<int>(dimOf(dims, StepDim::Intermediate));
    model->vocabSize = static_cast<int>(dimOf(dims, StepDim::Vocab));
    model->loraRank = static_cast<int>(dimOf(dims, StepDim::Rank));

    BlockRecorder rec;
    options.slidingWindow = slidingWindow;
    options.probeModel = model;
    options.probeIdBytes = setup.idBytes;
    options.probeMask = setup.mask;
    // The products' shapes, on this thread, while the step is recorded (the
    // callbacks cost every operator some time).
    std::optional<at::CallbackHandle> ops;
    const auto removeOps = [&ops] {
        if (ops) at::removeCallback(*ops);
        ops.reset();
    };
    options.onPhaseBegin = [&](int step, int phase) {
        rec.phase = static_cast<std::uint8_t>(phase);
        if (step == 2 && !rec.on && rec.step.events.empty()) {
            ops = at::addThreadLocalCallback(at::RecordFunctionCallback(&enterBlockOp, &leaveBlockOp)
                                                 .needsInputs(true)
                                                 .scopes({at::RecordScope::FUNCTION}));
            rec.begin();
        }
    };
    TrainerCallbacks callbacks;
    callbacks.onStep = [&](const StepMetrics& s) {
        if (s.step != 2) return;
        rec.on = false;
        removeOps();
    };
    // (A whole-step trace, traceStep, reads the process's counter: not while probes record.)
    std::shared_lock<std::shared_mutex> lock(g_traceMutex);
    MemoryProbe::installCpuCounter();
    t_blocks = &rec;
    MemoryProbe::setThreadCpuTrace(&recordBlock);
    const auto stop = [&] {
        removeOps();
        MemoryProbe::setThreadCpuTrace(nullptr);
        t_blocks = nullptr;
    };
    TrainResult result;
    try {
        Trainer trainer(c, options);
        for (const auto& [elements, bytes] : trainer.parameterSizes()) {
            rec.step.parameterElements.push_back(elements);
            rec.step.trainableBytes.push_back(bytes);
        }
        for (const auto* block : trainer.quantizedBaseBlocks()) rec.leftOut.insert(block);
        result = trainer.run(callbacks);
        stop();
    } catch (...) {
        stop();
        throw;
    }
    if (result.status != TrainResult::Status::Finished || rec.step.events.empty()) {
        throw InputError("deriving the memory plan: the probe step did not train: "
                         + (result.message.empty() ? std::string("it stopped before its second step") : result.message));
    }
    orderReleases(rec.step);
    foldCpuAttentionScratch(rec.step);
    return std::move(rec.step);
}

ProbeSetup probeSetup(const RunConfig& config)
{
    ProbeSetup s;
    s.config = config;
    const int seqLen = effectiveSeqLen(config);
    if (config.model.type == "hf") {
        // Random ids in the corpus's layout: a token file's width, or the
        // token cache's (uint16 up to a vocabulary of 65,536).
        s.model = modelSpecFor(config, 0, seqLen);
        const auto& d = config.data;
        s.idBytes = d.source == "tokens" ? (d.tokenDtype == "uint32" ? 4 : 2) : (s.model.vocabSize <= 65536 ? 2 : 4);
        s.mask = d.source == "chat";
    } else {
        s.model = modelSpecFor(config, datasetVocabSize(config), seqLen);
    }
    return s;
}

struct ProbePlan {
    StepDims base{};
    std::vector<ProbeAxis> axes;
    std::vector<StepDims> checks;
};

// The probes of one batch regime (batch 1, batch 2, or 0: from batch 3 on,
// where the batch is a dimension too) with the sequence from t0. Widths small
// and unlike each other, keeping what changes the step's operators: grouped-
// query attention or not, LoRA or not. The checks move every dimension at
// once, one of them to a sequence four times as long. No two dimensions
// are equal at the base or a check (key/value heads tied to the heads
// aside): a model's formulas are told apart by their values there
// (borrowedFrom). From sequence 32 on,
// every bf16 product is one LibTorch hands to oneDNN (more than 16^3
// multiply-adds: at 32 rows, a LoRA rank of 8 by 32 or more), as at a real
// model's widths, where the operands it copies first differ from the
// smaller products' path.
ProbePlan probePlan(const ProbeSetup& s, std::int64_t batch, std::int64_t t0)
{
    const int group = s.kvGroup(); // (gqa: grouped-query attention, with its key/value heads a dimension or a share)
    const bool gqa = !s.tiedKv(), lora = s.model.loraRank > 0, vocab = s.idBytes > 0;
    // A width of 1 is a step of its own: one key/value head repeated is a
    // view, not a copy; a LoRA rank of 1 takes other products. It stays 1.
    const bool oneKv = gqa && s.model.kvHeads() == 1, rankOne = s.model.loraRank == 1;
    // So is one head: its products take q, k and v's views as they are
    // (SDPA's math path saves q and k scaled, and v itself).
    const bool oneHead = s.model.nHead == 1;
    // A quantized base dequantizes whole blocks of 64 weights: every probe's
    // linear (hidden, a multiple of 8, by a multiple of 8) holds whole blocks,
    // as a real model's do, so what the step allocates is a polynomial.
    const bool quantized = s.config.model.quantize != "none";
    // The dataset's sequence (the addition task): every probe's, whatever its T.
    const bool fixedT = fixedSequence(s.config);
    const auto dims = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t nh, std::int64_t kv, std::int64_t hd,
                          std::int64_t i, std::int64_t v, std::int64_t r) {
        return StepDims{batch > 0 ? batch : b, t, h, oneHead ? 1 : nh, oneHead ? 1 : group > 0 ? nh / group : oneKv ? 1 : kv, hd, i,
                        vocab ? v : s.model.vocabSize, !lora ? 0 : rankOne ? 1 : r};
    };
    // Key/value heads a share 1 / group of the heads: heads of group x m,
    // m the first from `m` at which they equal no other width of the probe
    // (nor `other`, the base's heads where the probe must move them).
    const auto shared = [&](StepDims d, std::int64_t m, std::int64_t other) {
        const auto clashes = [&](std::int64_t heads) {
            for (std::size_t k = 0; k < d.size(); ++k) {
                if (k != static_cast<std::size_t>(StepDim::Heads) && k != static_cast<std::size_t>(StepDim::KvHeads) && d[k] == heads) return true;
            }
            return heads == other;
        };
        while (clashes(group * m)) ++m;
        dimOf(d, StepDim::Heads) = group * m;
        dimOf(d, StepDim::KvHeads) = m;
        return d;
    };
    ProbePlan p;
    if (s.gptLike()) {
        // Hidden = heads x head size: a weight of hidden x hidden is of
        // degree 2 in each, so each takes two values besides the base's.
        const auto g = [&](std::int64_t b, std::int64_t t, std::int64_t nh, std::int64_t hd, std::int64_t i, std::int64_t v,
                           std::int64_t r) { return dims(b, t, (oneHead ? 1 : nh) * hd, nh, nh, hd, i, v, r); };
        const auto& hd = kGptProbeHeadDims;
        p.base = g(3, t0, 4, hd[0], 88, 50, 7);
        if (!fixedT) p.axes.push_back({StepDim::Seq, {t0 + 1, t0 + 2}});
        if (batch == 0) p.axes.push_back({StepDim::Batch, {4}});
        if (!oneHead) p.axes.push_back({StepDim::Heads, {6, 7}});
        p.axes.push_back({StepDim::HeadDim, {hd[1], hd[2]}});
        p.axes.push_back({StepDim::Intermediate, {104}});
        if (vocab) p.axes.push_back({StepDim::Vocab, {58}});
        if (lora && !rankOne) p.axes.push_back({StepDim::Rank, {10}});
        p.checks.push_back(g(6, t0 + 6, 5, hd[3], 80, 66, 11));
        p.checks.push_back(g(4, 4 * t0 + 3, 3, hd[1], quantized ? 56 : 52, 42, 9));
        // (Along the heads or the head size recordProbe moves the hidden size with them.)
        return p;
    }
    p.base = dims(3, t0, 48, gqa ? 10 : 4, 5, 16, 64, 50, 7);
    if (group > 1) p.base = shared(p.base, 5, 0);
    const auto baseHeads = dimOf(p.base, StepDim::Heads);
    if (!fixedT) p.axes.push_back({StepDim::Seq, {t0 + 1, t0 + 2}});
    if (batch == 0) p.axes.push_back({StepDim::Batch, {4}});
    p.axes.push_back({StepDim::Hidden, {56}});
    if (!oneHead) {
        p.axes.push_back({StepDim::Heads, {group > 1 ? dimOf(shared(p.base, baseHeads / group + 1, baseHeads), StepDim::Heads)
                                           : gqa     ? 15
                                                     : 6}});
    }
    if (group == 0 && !oneKv) p.axes.push_back({StepDim::KvHeads, {2}});
    p.axes.push_back({StepDim::HeadDim, {20}});
    p.axes.push_back({StepDim::Intermediate, {72}});
    if (vocab) p.axes.push_back({StepDim::Vocab, {58}});
    if (lora && !rankOne) p.axes.push_back({StepDim::Rank, {10}});
    p.checks.push_back(dims(6, t0 + 6, 64, gqa ? 9 : 5, 3, 12, 80, 66, 11));
    if (quantized) {
        p.checks.push_back(dims(4, 4 * t0 + 3, 40, gqa ? 12 : 3, 6, 24, 56, 42, 9));
    } else {
        p.checks.push_back(dims(4, 4 * t0 + 3, 40, gqa ? 12 : 3, 3, 14, 52, 42, 9));
    }
    if (group > 1) {
        p.checks[0] = shared(p.checks[0], 3, baseHeads);
        p.checks[1] = shared(p.checks[1], 2, baseHeads);
    }
    return p;
}

using ProbeRecorder = std::function<RecordedStep(const ProbeSetup&, const StepDims&)>;

// The program of `setup`'s step from `known`, the program of a step like it
// (the same model with two layers, or its step from batch 3 on, where the
// batch is a dimension): recorded at the base and at the first check, where
// each number takes the formula of `known` with its values at both, and at
// the second check, which it must equal. nullopt where that fails.
std::optional<StepProgram> borrowedFrom(const ProbeSetup& setup, const ProbePlan& plan, const StepProgram& known,
                                        const ProbeRecorder& record)
{
    std::string why;
    // Formulas alike at the base and the check must be alike at the model's
    // own widths too (and at a 7B model's) to be told apart by value.
    auto own = realDims(setup.model);
    dimOf(own, StepDim::Batch) = dimOf(plan.base, StepDim::Batch) <= 2 ? dimOf(plan.base, StepDim::Batch) : 7;
    dimOf(own, StepDim::Seq) = 1000;
    const StepDims sevenB{dimOf(own, StepDim::Batch), 1000, 4096, 32, 8, 128, 11008, 32000, 16};
    auto program = borrowFormulas(known, record(setup, plan.base), plan.base, record(setup, plan.checks[0]),
                                  plan.checks[0], {own, sevenB}, why);
    if (!program || !programDifference(*program, record(setup, plan.checks[1]), plan.checks[1]).empty()) return std::nullopt;
    return program;
}

// The program of a model with more than two layers from `known`, the same
// model's with two: its layers repeated (memory/LayerRepeat.h) as the step
// recorded with three layers at the base shows, checked against the steps
// recorded with three layers at the first check and with four at the
// second. The model's own layers are never run, so the time does not grow
// with them. nullopt where that fails.
std::optional<StepProgram> repeatLayers(const ProbeSetup& setup, const ProbePlan& plan, const StepProgram& known,
                                        const ProbeRecorder& record)
{
    if (setup.model.nLayer <= 2) return std::nullopt;
    auto three = setup, four = setup;
    three.model.nLayer = 3;
    four.model.nLayer = 4;
    std::string why;
    const auto repeat = LayerRepeat::find(known.at(known.base), record(three, plan.base), why);
    if (!repeat) return std::nullopt;
    for (const auto& [s, check] : {std::pair{&three, plan.checks[0]}, std::pair{&four, plan.checks[1]}}) {
        const auto program = repeat->expand(known, s->model.nLayer, why);
        if (!program || !programDifference(*program, record(*s, check), check).empty()) return std::nullopt;
    }
    return repeat->expand(known, setup.model.nLayer, why);
}

// The program of one batch regime of `s`'s step: at batch 1 and 2, with
// the formulas of its program from batch 3 on (`fromBatch3`) where the step
// allows (three probes instead of about eleven); else fitted along every
// dimension.
ProgramFit fitRegime(const ProbeSetup& s, const ProbePlan& plan, const StepProgram* fromBatch3, const ProbeRecorder& record)
{
    if (fromBatch3) {
        if (auto program = borrowedFrom(s, plan, *fromBatch3, record)) return {std::move(program), {}, 0};
    }
    return fitStepProgram([&](const StepDims& d) { return record(s, d); }, plan.base, plan.axes, plan.checks);
}

// The programs this build ships (DerivedPlan.h): each file's programs of one
// model kind with two layers, by batch regime, sequence t0 and window.
struct ShippedProgram {
    std::size_t regime = 0;
    std::int64_t t0 = 0;
    int window = 0;
    StepProgram program;
};

std::vector<ShippedProgram> readShippedPrograms()
{
    std::vector<ShippedProgram> out;
    std::error_code ec;
    const auto folder = shippedProgramsFolder();
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
        if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
        // A file this build cannot read is left out (the programs are then
        // recorded); the drift test (tst_derived_plan) names it.
        try {
            std::ifstream in(file);
            const auto j = nlohmann::json::parse(in);
            for (const auto& [window, side] : j.at("sides").items()) {
                const auto programs = stepProgramsFromJson(side.dump());
                for (std::size_t r = 0; r < programs.programs.size(); ++r) {
                    out.push_back({r, programs.t0, std::stoi(window), programs.programs[r]});
                }
            }
        } catch (const std::exception&) {
        }
    }
    return out;
}

const std::vector<ShippedProgram>& shippedPrograms()
{
    static const std::vector<ShippedProgram> programs = readShippedPrograms();
    return programs;
}

// The shipped programs of one batch regime that start where `plan` does.
std::vector<const StepProgram*> shippedCandidates(const ProbePlan& plan, std::size_t regime, std::int64_t t0, int window)
{
    std::vector<const StepProgram*> candidates;
    for (const auto& s : shippedPrograms()) {
        if (s.regime == regime && s.t0 == t0 && s.window == window && s.program.base == plan.base) candidates.push_back(&s.program);
    }
    return candidates;
}

// The config's program of one batch regime from a shipped one: with two
// layers, the shipped program its step equals at both checks; with more, one
// whose layers repeat to the model's (repeatLayers), else one whose formulas
// it borrows (borrowedFrom). Each probe is recorded once (record
// keeps them), so a miss costs the fit that follows nothing.
std::optional<StepProgram> fromShipped(const ProbeSetup& setup, const ProbePlan& plan, std::size_t regime, std::int64_t t0,
                                       int window, const ProbeRecorder& record, bool& repeated)
{
    const auto candidates = shippedCandidates(plan, regime, t0, window);
    if (candidates.empty() || setup.model.nLayer < 2) return std::nullopt;
    if (setup.model.nLayer > 2) {
        for (const auto* known : candidates) {
            if (auto program = repeatLayers(setup, plan, *known, record)) {
                repeated = true;
                return program;
            }
        }
        // Layers that do not repeat: the formulas of the program the model's
        // step with two layers equals at the first check (a probe the fit
        // records anyway), checked with all the layers.
        auto two = setup;
        two.model.nLayer = 2;
        const auto atCheck = record(two, plan.checks[0]);
        for (const auto* known : candidates) {
            if (!programDifference(*known, atCheck, plan.checks[0]).empty()) continue;
            if (auto program = borrowedFrom(setup, plan, *known, record)) return program;
        }
        return std::nullopt;
    }
    const auto first = record(setup, plan.checks[0]), second = record(setup, plan.checks[1]);
    for (const auto* known : candidates) {
        if (programDifference(*known, first, plan.checks[0]).empty() && programDifference(*known, second, plan.checks[1]).empty()) {
            return *known;
        }
    }
    return std::nullopt;
}

// A quantized base's stored tensors at the model's own widths, in bytes, in
// the order its layers hold them, and its weights: the model is built
// without values, and each of its quantized layers' shapes read.
std::pair<std::vector<std::int64_t>, std::int64_t> quantizedResidents(const ProbeSetup& setup)
{
    const auto& m = setup.config.model;
    if (m.quantize == "none") return {};
    const QuantizeSpec spec{quantFormatOf(m.quantize), m.doubleQuant};
    std::shared_ptr<CausalLmImpl> model;
    {
        // No values (the base's empty tensors are never touched); the
        // adapters' draws leave the process's random state as it was (a run
        // derives its launch estimate between its own seeding and its steps).
        auto generator = compat::defaultGenerator(torch::Device(torch::kCPU));
        const auto state = compat::generatorState(generator);
        const WeightsFromFile noValues(torch::kBFloat16);
        model = makeModel(setup.model);
        compat::setGeneratorState(generator, state);
    }
    std::vector<std::int64_t> blocks;
    std::int64_t weights = 0;
    for (const auto& [name, linear] : quantizableLinears(*model)) {
        const auto rows = linear->outFeatures(), cols = linear->inFeatures();
        for (const auto b : quantizedBlockBytes(rows, cols, spec)) blocks.push_back(b);
        weights += rows * cols;
    }
    return {blocks, weights};
}

// Probes recorded on the cores the process has: the ones programsFor is
// expected to ask for are queued (ahead), one worker thread a core past the
// first takes them in order, and the caller (get) records what it asks for
// itself when no worker has started it, else one still queued while it
// waits. Each probe runs on one thread with its own recorder, so a record
// does not depend on which thread took it. A probe asked for and not queued
// is recorded by the caller.
//
// LibTorch 1.13 only. Under LibTorch 2.6, with two probes at once, a probe
// now and then started its step with two more blocks live than the same
// probe recorded alone (two of 720 bytes at batch 4 x 35, after the data),
// so a program's probes disagreed and it failed to fit; there the caller
// records every probe itself, one after another.
class ProbePool {
public:
    using Key = std::pair<int, StepDims>; // layers, widths

    ProbePool(int window, const std::atomic<bool>* cancel) : m_window(window), m_cancel(cancel)
    {
        const auto cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        const int threads = builtTorchMajor() < 2 ? std::min(cores, 4) : 1;
        for (int w = 1; w < threads; ++w) m_workers.emplace_back([this] { work(); });
    }
    ~ProbePool()
    {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_stop = true;
            m_queue.clear();
        }
        m_changed.notify_all();
        for (auto& w : m_workers) w.join();
    }
    ProbePool(const ProbePool&) = delete;
    ProbePool& operator=(const ProbePool&) = delete;

    void ahead(const ProbeSetup& setup, const StepDims& dims)
    {
        if (m_workers.empty()) return;
        const Key key{setup.model.nLayer, dims};
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            if (m_slots.count(key)) return;
            m_slots[key];
            m_queue.push_back({key, setup});
        }
        m_changed.notify_one();
    }

    // The probe at `dims`, and whether this is the first time it was asked for.
    std::pair<RecordedStep, bool> get(const ProbeSetup& setup, const StepDims& dims)
    {
        const Key key{setup.model.nLayer, dims};
        std::unique_lock<std::mutex> lock(m_mutex);
        for (;;) {
            auto& slot = m_slots[key];
            if (slot.done) {
                if (slot.failure) std::rethrow_exception(slot.failure);
                const bool first = !slot.asked;
                slot.asked = true;
                return {slot.step, first};
            }
            if (!slot.running) {
                // Not started: recorded here, now (queued or not).
                const auto it = std::find_if(m_queue.begin(), m_queue.end(), [&](const Job& j) { return j.key == key; });
                Job job = it == m_queue.end() ? Job{key, setup} : std::move(*it);
                if (it != m_queue.end()) m_queue.erase(it);
                m_queue.push_front(std::move(job));
            } else if (m_queue.empty()) {
                m_changed.wait(lock);
                continue;
            }
            // Its own probe, or (while a worker records that) the next one queued.
            runFront(lock);
        }
    }

private:
    struct Slot {
        bool running = false, done = false, asked = false;
        RecordedStep step;
        std::exception_ptr failure;
    };
    struct Job {
        Key key;
        ProbeSetup setup;
    };

    // Records the queue's first job, the lock released meanwhile.
    void runFront(std::unique_lock<std::mutex>& lock)
    {
        auto job = std::move(m_queue.front());
        m_queue.pop_front();
        m_slots[job.key].running = true;
        lock.unlock();
        RecordedStep step;
        std::exception_ptr failure;
        try {
            if (m_cancel && m_cancel->load()) throw InputError("deriving the memory plan was cancelled");
            step = recordProbe(job.setup, job.key.second, m_window);
        } catch (...) {
            failure = std::current_exception();
        }
        lock.lock();
        auto& slot = m_slots[job.key];
        slot.step = std::move(step);
        slot.failure = failure;
        slot.running = false;
        slot.done = true;
        m_changed.notify_all();
    }

    void work()
    {
        std::unique_lock<std::mutex> lock(m_mutex);
        for (;;) {
            m_changed.wait(lock, [this] { return m_stop || !m_queue.empty(); });
            if (m_stop) return;
            runFront(lock);
        }
    }

    const int m_window;
    const std::atomic<bool>* m_cancel;
    std::mutex m_mutex;
    std::condition_variable m_changed;
    std::map<Key, Slot> m_slots;
    std::deque<Job> m_queue;
    bool m_stop = false;
    std::vector<std::thread> m_workers;
};

// Queues the probes programsFor takes for one batch regime where all goes
// as expected (the model's layers repeat, batch 1 and 2 borrow batch 3's
// formulas), in the order it takes them.
void expectProbes(ProbePool& pool, const ProbeSetup& setup, const ProbeSetup& two, std::size_t regime, std::int64_t t0,
                  int window, bool shipped)
{
    const auto plan = probePlan(setup, regime < 2 ? static_cast<std::int64_t>(regime) + 1 : 0, t0);
    auto three = setup, four = setup;
    three.model.nLayer = 3;
    four.model.nLayer = 4;
    const bool more = setup.model.nLayer > 2;
    const auto repeated = [&] {
        pool.ahead(three, plan.base);
        pool.ahead(three, plan.checks[0]);
        pool.ahead(four, plan.checks[1]);
    };
    if (shipped && setup.model.nLayer >= 2 && !shippedCandidates(plan, regime, t0, window).empty()) {
        if (more) return repeated();
        pool.ahead(setup, plan.checks[0]);
        pool.ahead(setup, plan.checks[1]);
        return;
    }
    pool.ahead(two, plan.base);
    if (regime == 2 || !shipped) {
        for (const auto& axis : plan.axes) {
            for (const auto x : axis.values) {
                auto dims = plan.base;
                dims[static_cast<std::size_t>(axis.dim)] = x;
                pool.ahead(two, dims);
            }
        }
    }
    for (const auto& check : plan.checks) pool.ahead(two, check);
    if (more) repeated();
}

// The programs of one side of a sliding window (window: as traceStep's),
// from sequence t0 (8; 32 where bf16 products go to oneDNN; 128 at most),
// with the sequence each begins at; nullopt (why set) where none fits.
// shipped: start from the build's programs where one is the config's (else:
// recording them, each regime fitted on its own).
std::optional<StepPrograms> programsFor(const ProbeSetup& setup, int window, const DerivedPlanProgress& progress,
                                        int& recorded, std::string& why, bool shipped = true)
{
    if (setup.gptLike() && setup.model.rotaryDims > 0) {
        for (const auto hd : kGptProbeHeadDims) {
            const auto rotary = setup.model.rotaryDims * hd;
            if (rotary % setup.model.headDim() != 0 || (rotary / setup.model.headDim()) % 2 != 0) {
                why = "RoPE rotates " + std::to_string(setup.model.rotaryDims) + " of each head's " + std::to_string(setup.model.headDim())
                    + " dimensions, a fraction the probes' head sizes cannot take as whole pairs";
                return std::nullopt;
            }
        }
    }
    // bf16 products on a CPU that hands them to oneDNN: from sequence 32 (probePlan).
    const bool products = setup.config.train.precision != "fp32" && cpuBf16ProductsUseOneDnn();
    if (products && setup.model.loraRank == 1) {
        why = "with a LoRA rank of 1 in bf16 the adapters' products at small widths stay below the size LibTorch hands "
              "to oneDNN, unlike the model's";
        return std::nullopt;
    }
    for (std::int64_t t0 = products ? 32 : 8;; t0 *= 4) {
        StepPrograms out;
        out.real = realDims(setup.model);
        out.t0 = t0;
        why.clear();
        // Each probe recorded once (a shipped program's checks are the fit's),
        // those expected queued for the pool's other threads.
        ProbePool pool(window, progress.cancel);
        const ProbeRecorder record = [&](const ProbeSetup& s, const StepDims& d) {
            if (progress.cancel && progress.cancel->load()) throw InputError("deriving the memory plan was cancelled");
            auto [step, first] = pool.get(s, d);
            if (first) {
                ++recorded;
                if (progress.onTrace) progress.onTrace(recorded, dimOf(d, StepDim::Batch), dimOf(d, StepDim::Seq));
            }
            return step;
        };
        // From batch 3 on first: batch 1 and 2 borrow its formulas. A model
        // with more than two layers is fitted with two, and its layers
        // repeated (else its formulas borrowed, else fitted with them all).
        const bool more = setup.model.nLayer > 2;
        auto two = setup;
        two.model.nLayer = std::min(setup.model.nLayer, 2);
        const std::array<std::size_t, 3> regimes{2, 0, 1};
        for (const auto regime : regimes) expectProbes(pool, setup, two, regime, t0, window, shipped);
        std::optional<StepProgram> fromBatch3;
        for (const auto regime : regimes) {
            if (!why.empty()) break;
            const auto plan = probePlan(setup, regime < 2 ? static_cast<std::int64_t>(regime) + 1 : 0, t0);
            bool repeated = false;
            if (shipped) {
                if (auto program = fromShipped(setup, plan, regime, t0, window, record, repeated)) {
                    out.programs[regime] = std::move(*program);
                    ++out.shipped;
                    out.repeated += repeated ? 1 : 0;
                    continue;
                }
            }
            // (The build's own programs are each fitted along every dimension.)
            auto fit = fitRegime(two, plan, shipped && regime < 2 && fromBatch3 ? &*fromBatch3 : nullptr, record);
            if (fit.program && regime == 2) fromBatch3 = fit.program;
            if (fit.program && more) {
                if (auto program = repeatLayers(setup, plan, *fit.program, record)) {
                    out.programs[regime] = std::move(*program);
                    ++out.repeated;
                    continue;
                }
                if (auto program = borrowedFrom(setup, plan, *fit.program, record)) {
                    out.programs[regime] = std::move(*program);
                    ++out.borrowed;
                    continue;
                }
            }
            if (more) fit = fitStepProgram([&](const StepDims& d) { return record(setup, d); }, plan.base, plan.axes, plan.checks);
            if (!fit.program) why = fit.failure;
            else out.programs[regime] = std::move(*fit.program);
        }
        if (why.empty()) {
            std::tie(out.fixedResidents, out.fixedParameters) = quantizedResidents(setup);
            return out;
        }
        // (The dataset's sequence is every probe's: a longer t0 records the same steps.)
        if (t0 >= 128 || fixedSequence(setup.config)) return std::nullopt;
    }
}

// The step compiled from the programs evaluated at the model's widths; on
// a GPU (gpu set where it compiles) the same by the device rules.
std::optional<CompiledSegment> compileFromPrograms(const StepPrograms& programs, DerivedStep& step, std::string& why,
                                                   std::optional<CompiledSegment>& gpu)
{
    const auto t0 = programs.t0;
    const auto tracer = [&](std::int64_t B, std::int64_t T) { return replayStep(programs.at(B, T)); };
    const std::vector<std::pair<std::int64_t, std::int64_t>> checks{{5, t0 + 6}, {1, t0 + 5}, {4, 2 * t0 + 5}, {2, 4 * t0 + 3}};
    auto segment = compileSegment(tracer, t0, t0 + 2, 5, checks, 3, true);
    if (!segment) {
        why = "the programs at the model's widths are not polynomials in batch and sequence";
        return std::nullopt;
    }
    // (Compiled for a card that runs the flash kernel, rows unrounded: the
    // fit map's cells; each card's own rules are the plan at a shape.)
    CudaTarget ampere;
    ampere.computeCapability = 80;
    const auto onGpu = cudaStepOf(programs.at(3, t0), ampere);
    if (step.unruled.empty()) step.unruled = onGpu.unruled;
    if (onGpu.unruled.empty()) {
        ampere.exact = false;
        gpu = compileSegment([&](std::int64_t B, std::int64_t T) {
            return replayStep(cudaStepOf(programs.at(B, T), ampere).step);
        },
                             t0, t0 + 2, 5, checks, 3, true);
    }
    // (The built-in GPT's learned positions follow the sequence: a count per token.)
    const auto at = programs.at(3, t0), next = programs.at(3, t0 + 1);
    step.parametersPerToken = next.parameters() - at.parameters();
    step.trainablePerToken = next.trainableParameters() - at.trainableParameters();
    step.parameters = at.parameters() - step.parametersPerToken * t0;
    step.trainableParameters = at.trainableParameters() - step.trainablePerToken * t0;
    step.trainableBytes = at.trainableParameterBytes();
    step.largestTracedSeqLen = std::max(step.largestTracedSeqLen, 4 * t0 + 3);
    return segment;
}

// A Llama- or GPT-family step from programs; nullopt (why set) where they do not fit.
std::optional<DerivedStep> deriveFromPrograms(const RunConfig& config, const DerivedPlanProgress& progress, std::string& why)
{
    const auto setup = probeSetup(config);
    DerivedStep step;
    int recorded = 0;
    const auto window = config.model.type == "hf" ? readHfArchitecture(resolvedModelPath(config)).slidingWindow : 0;
    auto within = programsFor(setup, window > 0 ? 1 << 30 : 0, progress, recorded, why);
    if (!within) return std::nullopt;
    auto segment = compileFromPrograms(*within, step, why, step.gpuSegment);
    if (!segment) return std::nullopt;
    if (fixedSequence(config)) step.fixedSeqLen = step.largestTracedSeqLen = effectiveSeqLen(config);
    step.segment = std::move(*segment);
    step.segment.traces = recorded;
    step.programs = std::make_shared<const StepPrograms>(std::move(*within));
    if (window > 0) {
        const int before = recorded;
        auto beyond = programsFor(setup, 1, progress, recorded, why);
        if (!beyond) return std::nullopt;
        auto past = compileFromPrograms(*beyond, step, why, step.pastWindowOnGpu);
        if (!past) return std::nullopt;
        step.pastWindow = std::move(*past);
        step.pastWindow->traces = recorded - before;
        step.slidingWindow = window;
        step.pastWindowPrograms = std::make_shared<const StepPrograms>(std::move(*beyond));
        // Both sides compile on the GPU, or neither is exact there.
        if (!step.pastWindowOnGpu) step.gpuSegment.reset();
    }
    const auto layers = std::to_string(setup.model.nLayer);
    const auto& p = *step.programs;
    const bool repeated = p.repeated == static_cast<int>(p.programs.size());
    step.tracedAccum = std::max(1, config.train.gradAccum);
    step.accum = step.tracedAccum;
    step.tracedOn = "LibTorch " + torchVersion() + " on this machine's CPU, recorded at small widths "
        + (p.shipped == static_cast<int>(p.programs.size()) && setup.model.nLayer == 2
               ? std::string("as this build's programs of the model (checked at two probes a batch regime)")
           : p.shipped > 0 && repeated
               ? "from this build's programs of the model with 2 layers, its layers repeated to its " + layers + " (checked with 3 and 4)"
           : p.shipped > 0 ? "from this build's programs of the model with 2 layers, checked with its " + layers
           : repeated ? "with 2 layers, the layers repeated to the model's " + layers + " (checked with 3 and 4)"
           : p.borrowed + p.repeated > 0 ? "with 2 layers and checked with the model's " + layers
                                        : "with the model's " + layers + " layers")
        + " and evaluated at its own";
    if (config.train.precision == "fp16") {
        step.tracedOn += " (fp16 as bf16 with loss scaling: the same element sizes; CUDA's autocast lists differ a little)";
    }
    return step;
}

} // namespace

std::optional<StepPrograms> recordStepPrograms(const RunConfig& config, std::string* why, const DerivedPlanProgress& progress)
{
    std::string failure = "the model is neither of the Llama nor of the GPT family (its widths are not all the trainer's options)";
    if (programmable(config)) {
        failure.clear();
        int recorded = 0;
        const auto window = config.model.type == "hf" ? readHfArchitecture(resolvedModelPath(config)).slidingWindow : 0;
        if (auto out = programsFor(probeSetup(config), window > 0 ? 1 << 30 : 0, progress, recorded, failure)) return out;
    }
    if (why) *why = failure;
    return std::nullopt;
}

MemoryPlan memoryPlanOf(const RunConfig& config, const ArchitectureSpec& arch, const std::string& precision,
                        const DerivedPlanProgress& progress)
{
    auto traced = config;
    traced.train.precision = precision;
    return MemoryPlan(std::make_shared<const DerivedStep>(deriveStep(traced, progress)), arch);
}

std::string shippedProgramsFolder()
{
    // Installed: share/trainbench/programs under the prefix of the program
    // (bin/trainbench, lib/trainbench/trainbench-cli-torch); else the source tree's.
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    const auto sub = "torch" + std::to_string(builtTorchMajor());
    if (!ec) {
        auto prefix = exe.parent_path();
        for (int up = 0; up < 3 && prefix.has_parent_path() && prefix != prefix.root_path(); ++up) {
            prefix = prefix.parent_path();
            const auto installed = prefix / "share" / "trainbench" / "programs" / sub;
            if (std::filesystem::is_directory(installed, ec)) return installed.string();
        }
    }
    return std::string(sourceProgramsFolder()) + "/" + sub;
}

std::string recordShippedPrograms(const RunConfig& config)
{
    if (!programmable(config)) {
        throw InputError("recording step programs: the model is neither of the Llama nor of the GPT family, or its "
                         "sequence length is fixed where its programs are not recorded (a learned position table from "
                         "init_from, the addition task's bf16 products on a CPU that hands them to oneDNN)");
    }
    auto setup = probeSetup(config);
    setup.model.nLayer = 2;
    const auto window = config.model.type == "hf" ? readHfArchitecture(resolvedModelPath(config)).slidingWindow : 0;
    nlohmann::json sides = nlohmann::json::object();
    for (const int side : window > 0 ? std::vector<int>{1 << 30, 1} : std::vector<int>{0}) {
        int recorded = 0;
        std::string why;
        const auto programs = programsFor(setup, side, {}, recorded, why, false);
        if (!programs) throw InputError("recording step programs: " + why);
        sides[std::to_string(side)] = nlohmann::json::parse(stepProgramsToJson(*programs));
    }
    return nlohmann::json{{"torch", torchVersion()}, {"cpu_bf16_onednn", cpuBf16ProductsUseOneDnn()}, {"sides", sides}}.dump();
}

std::string shippedProgramsDifference(const std::string& shipped, const std::string& recorded)
{
    const auto a = nlohmann::json::parse(shipped), b = nlohmann::json::parse(recorded);
    if (a.at("sides") == b.at("sides")) return {};
    for (const auto& [window, side] : b.at("sides").items()) {
        if (!a.at("sides").contains(window)) return "the step has programs for window " + window + ", the shipped ones have none";
        const auto was = stepProgramsFromJson(a.at("sides").at(window).dump());
        const auto now = stepProgramsFromJson(side.dump());
        if (was.t0 != now.t0) return "the programs start at sequence " + std::to_string(now.t0) + ", not " + std::to_string(was.t0);
        for (std::size_t r = 0; r < now.programs.size(); ++r) {
            const auto& p = now.programs[r];
            // At the base probe, then where every width is a 7B model's.
            auto sevenB = p.base;
            for (const auto& [dim, value] : {std::pair{StepDim::Seq, 1000}, {StepDim::Hidden, 4096}, {StepDim::Intermediate, 11008},
                                            {StepDim::Vocab, 32000}}) {
                dimOf(sevenB, dim) = value;
            }
            for (const auto& dims : {p.base, sevenB}) {
                if (auto diff = programDifference(was.programs[r], p.at(dims), dims); !diff.empty()) {
                    static const char* const regimes[] = {"at batch 1", "at batch 2", "from batch 3"};
                    return std::string("the program ") + regimes[r] + (window == "0" ? "" : " (window " + window + ")") + ": " + diff;
                }
            }
        }
    }
    return "the programs' formulas differ (with the same values at the probes compared)";
}

namespace {

// The step traced at the model's own widths (a program's failure, if any, in unfit).
DerivedStep deriveByTracing(const RunConfig& config, const DerivedPlanProgress& progress, const std::string& unfit)
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
    step.tracedAccum = std::max(1, config.train.gradAccum);
    step.accum = step.tracedAccum;
    step.tracedOn = "LibTorch " + torchVersion() + " on this machine's CPU";
    if (!unfit.empty()) step.tracedOn += " at the model's own widths (a program recorded at small widths did not fit: " + unfit + ")";
    if (config.train.precision == "fp16") {
        step.tracedOn += " (fp16 as bf16 with loss scaling: the same element sizes; CUDA's autocast lists differ a little)";
    }
    return step;
}

} // namespace

std::string derivedStepKey(const RunConfig& traced)
{
    auto keyed = traced;
    // (Paths as resolved: a relative one means another file in another config's folder.)
    if (!keyed.model.path.empty()) keyed.model.path = resolvedModelPath(traced);
    if (!keyed.data.path.empty()) keyed.data.path = resolvedDataPath(traced);
    const auto& init = traced.train.initFrom;
    const bool runId = init.rfind("run:", 0) == 0
        || (!init.empty() && std::all_of(init.begin(), init.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; }));
    if (!init.empty() && !runId && std::filesystem::path(init).is_relative() && !traced.baseDir.empty()) {
        keyed.train.initFrom = (std::filesystem::path(traced.baseDir) / init).lexically_normal().string();
    }
    keyed.name.clear();
    keyed.baseDir.clear();
    keyed.train.batchSize = 1;
    keyed.data.seqLen = 0;
    keyed.optim.lr = 0;
    keyed.optim.warmupSteps = 0;
    keyed.optim.schedule.clear();
    keyed.optim.minLrRatio = 0;
    keyed.train.steps = 0;
    keyed.train.seed = 0;
    keyed.train.evalEvery = 0;
    keyed.train.logEvery = 0;
    keyed.train.checkpointEvery = 0;
    keyed.train.keepCheckpoints = 0;
    keyed.train.threads = 0;
    keyed.train.worldSize = 1;
    keyed.train.distTimeoutS = 0;
    keyed.train.gradAccum = std::min(keyed.train.gradAccum, 2);
    std::string key = configToJson(keyed);
    if (traced.model.type == "hf" || traced.model.type == "torchscript") {
        std::error_code ec, sizeError;
        std::filesystem::path file = resolvedModelPath(traced);
        if (std::filesystem::is_directory(file, ec)) file /= "config.json";
        const auto size = std::filesystem::file_size(file, sizeError);
        const auto time = std::filesystem::last_write_time(file, ec);
        if (!ec && !sizeError) key += "\n" + std::to_string(size) + " " + std::to_string(time.time_since_epoch().count());
    }
    return key;
}

DerivedStep deriveStep(const RunConfig& asked, const DerivedPlanProgress& progress)
{
    // Each trace trains on one thread; a run that starts after it (a launch
    // derives its own step: run/RunSession.cpp) keeps the pools it had. (They
    // stayed at one thread: the BLAS pool of a LoRA run's steps after its
    // recorded estimate, and its losses differed from a resumed run's.)
    const KeepThreadCounts keep;
    // An accumulating step is traced with two micro-batches: more only draw
    // more data before the first forward (DerivedStep::extraDataBytes).
    auto config = asked;
    config.train.gradAccum = std::min(config.train.gradAccum, 2);
    // Fields of a setup Trainbench only plans (the trainer refuses them:
    // Trainer.cpp planningOnlyFieldsProblem) are traced as what the trainer
    // runs in their place: the weights on the device, fp32 master weights
    // under mixed precision, and weights loaded in bf16 and trained in bf16
    // as pure bf16 (setupFor's plan of them: the same tensors from the
    // first step on).
    if (plannableModel(config)) {
        if (config.lora.rank <= 0) {
            if (setupFor(config).precision == "bf16-pure") config.train.precision = "bf16-pure";
            config.train.weightsDtype = "fp32";
        }
        config.train.offload = "none";
    }
    // The Llama and GPT families: recorded at small widths, evaluated at the model's
    // (a 7B plan from steps of milliseconds). Elsewhere, or where the
    // programs do not fit, the step at the model's own widths is traced.
    std::string unfit;
    const auto withTheConfigs = [&](DerivedStep step) {
        step.accum = std::max(1, asked.train.gradAccum);
        step.dataset = setupFor(asked).dataset;
        return step;
    };
    if (programmable(config)) {
        if (auto step = deriveFromPrograms(config, progress, unfit)) return withTheConfigs(std::move(*step));
    }
    try {
        return withTheConfigs(deriveByTracing(config, progress, unfit));
    } catch (const InputError& e) {
        if (unfit.empty() || (progress.cancel && progress.cancel->load())) throw;
        // Why the model's own widths were needed (a folder without weights
        // cannot be traced there).
        throw InputError(std::string(e.what()) + " (it was traced at the model's own widths because its program, "
                         "recorded at small widths, did not fit: " + unfit + ")");
    }
}

} // namespace tb
