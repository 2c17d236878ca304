#pragma once
// A training step as a program in named dimensions: what the trainer's own
// step allocates and releases, in order, with every size a formula in the
// batch, the sequence and the model's widths (hidden size, heads, key/value
// heads, head size, MLP width, vocabulary, LoRA rank). The trainer records
// the step at small probe widths (train/DerivedPlan.cpp), where a step takes
// milliseconds, with two layers, and repeats them to the model's number
// (memory/LayerRepeat.h); evaluating the program at the model's real widths
// gives the step a 7B model would take, allocation by allocation, without
// running it. No LibTorch here.
//
// Each size is taken to be a product of one polynomial per dimension (a
// weight H x NH*HD, a score map B x NH x T x T, a batch's B x (T + 1) ids):
// recorded at a base probe and along each dimension on its own, and checked
// at probes where every dimension moved at once. A size that is not such a
// product, or a step whose order of allocations changes with a width, fails
// the checks, and the caller traces the real step instead.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "memory/CudaAllocatorModel.h"
#include "memory/StepPolynomials.h"

namespace tb {

enum class StepDim : int { Batch, Seq, Hidden, Heads, KvHeads, HeadDim, Intermediate, Vocab, Rank };
constexpr int kStepDims = 9;
using StepDims = std::array<std::int64_t, kStepDims>;
const char* stepDimName(StepDim d);
inline std::int64_t& dimOf(StepDims& d, StepDim which) { return d[static_cast<std::size_t>(which)]; }
inline std::int64_t dimOf(const StepDims& d, StepDim which) { return d[static_cast<std::size_t>(which)]; }

// What a block of the step holds, as the planner names its terms. Told by
// the dimensions its size follows in the program (StepProgram::kinds), not
// by a list of operators. A block live as the step starts is the batch's
// data where it follows the batch (or, in the programs of batch 1 and 2,
// the sequence and no width of the model), else the model's state
// (weights, the gradients kept between steps, the optimizer's state). A
// block the step makes is an attention map where it follows the square of
// the sequence (and a T x T mask); logits where it follows the batch or
// sequence and the vocabulary (a built-in model's, whose vocabulary the
// probes do not move: no width of the model, a vocabulary's bytes a token);
// an activation (or its gradient) where it follows the batch or sequence;
// else a cast of a weight (forward, or under autocast), a parameter's
// gradient (backward) or the optimizer's temporary. A block released by the
// next event is a kernel's workspace. A program that follows neither batch
// nor sequence (a fixed sequence at batch 1 or 2) has no kinds.
enum class BlockKind : std::uint8_t {
    None,
    ModelState,
    Data,
    Activations,
    AttentionMaps,
    Logits,
    WeightCopies,
    Gradients,
    OptimizerStep,
    Workspace
};
constexpr int kBlockKinds = 10;
const char* blockKindName(BlockKind k);        // the term's name: "model_state", "attention_maps", ...
const char* blockKindDescription(BlockKind k); // what it holds, in words

// One step as recorded at one set of dimensions.
struct RecordedStep {
    struct Event {
        std::int64_t bytes = 0;  // > 0: an allocation; < 0: a release
        std::int32_t block = -1; // a release: the block (residents first, then the step's allocations in order); -1: made before recording
        std::uint8_t phase = 0;  // 0 forward, 1 backward, 2 optimizer
        GemmCall gemm;           // an allocation made inside a bf16 matrix product (m = 0: none)
        // An allocation: the outermost operator it was made in (an index in
        // ops; -1: none), that operator's first tensor argument's bytes per
        // element, whether it is the first allocation of that call,
        // whether the call named its output's dtype, and whether it ran
        // under autocast. The
        // device rules (memory/DeviceRules.h) read them.
        std::int16_t op = -1;
        std::uint8_t elementBytes = 0;
        bool firstInOp = false;
        bool opDtype = false;  // the operator was called with a dtype (its last argument: softmax(x, dim, float))
        bool autocast = false; // the operator ran under autocast (mixed precision's forward, and a checkpoint's recompute)
        bool opDropout = false; // scaled_dot_product_attention was asked for dropout (on the CPU: its math path)
        // The first allocation of a scaled_dot_product_attention call (or its
        // backward's): its query's sizes [batch, heads, sequence, head size],
        // which a device rule reads to choose the GPU's kernel.
        bool hasShape = false;
        std::array<std::int64_t, 4> shape{};
        // An allocation: what its block holds (filled by StepProgram::at).
        BlockKind kind = BlockKind::None;
        // Sized by a rule, not a formula (its bytes are no number of the
        // program): 1 the CPU flash kernel's blocks in a forward call, 2 in a
        // backward call (foldCpuAttentionScratch; FusedAttention.h's
        // cpuFlashScratchBytes of the query's shape, which it carries).
        std::uint8_t rule = 0;
    };
    std::vector<std::int64_t> resident; // the bytes of each block live as the step starts, in the order they were made
    std::vector<BlockKind> residentKind; // what each holds (filled by StepProgram::at; empty: not known)
    std::vector<Event> events;
    std::vector<std::string> ops; // operator names (aten::dropout, trainbench::generator_state, ...)
    const std::string& opName(const Event& e) const;
    // Per parameter: its elements, and its bytes when it trains (0: frozen).
    std::vector<std::int64_t> parameterElements, trainableBytes;

    std::int64_t parameters() const;
    std::int64_t trainableParameters() const;
    std::int64_t trainableParameterBytes() const;
};

// Every number of a record, in one order: the residents' bytes, each
// event's bytes (unless a rule sizes it) and, inside a product, the
// product's batch, m, k and n, and its query's sizes where it has them, then
// each parameter's elements and trainable bytes. A program holds a formula
// for each, in this order.
std::vector<std::int64_t> stepNumbers(const RecordedStep& s);

// Releases made together (no allocation between them) come in an order
// that can follow addresses: autocast's cache of weight casts is a hash map
// keyed by tensor, emptied as the forward ends. This puts each such run in
// phase and block order, the block made just before it first (replayStep
// then reads it as a kernel's scratch, where the direct recorder keeps it as
// an entry unless it was freed first: the peaks are the same), so that steps
// recorded at other widths line up. The live bytes after each allocation are
// the same in any order.
void orderReleases(RecordedStep& step);

// The CPU flash kernel's own blocks (scaled_dot_product_attention on the
// CPU, LibTorch 2.x) follow no product of the widths: its split sizes are
// capped by the length. Each call whose blocks, with any bf16 products it
// runs, peak at what cpuFlashScratchBytes says (one thread: the recorder's)
// has them folded into one allocation and its release, sized by that rule;
// a call where they do not is left as recorded (its program then fails its
// checks, and the step is traced at the model's own widths). On a GPU the
// device rules drop them, as they did the blocks.
void foldCpuAttentionScratch(RecordedStep& step);

// The step's live bytes after each allocation it keeps, as the direct
// recorder (train/DerivedPlan.cpp) writes them: the first entry is what is
// live as the step starts; an allocation released before the next one is
// made, in the same phase, is a kernel's scratch and raises the transient of
// the entry before it (with the product it came in).
StepTrace replayStep(const RecordedStep& step);

// The step on a GPU's caching allocator (memory/CudaAllocatorModel.h):
// `first` (blocks the run makes before the model: data parallel's buckets),
// the blocks live as the step starts, allocated in the order they were made,
// `afterResidents` (blocks made on the first step and kept: LibTorch 2.x's
// cuBLAS workspaces), then the step's allocations and releases in order. A
// bf16 product's marker takes nothing (on a GPU cuBLAS works in its
// workspace).
struct AllocatorReplay {
    std::int64_t startAllocated = 0, peakAllocated = 0, peakReserved = 0, segments = 0;
    std::array<std::int64_t, kStepPhases> phasePeakAllocated{};
};
// The bytes of each kind live at the step's peak (the first moment its
// live bytes are highest), which they add up to; a block released before
// the next is made counts as workspace. A block of no known kind counts as
// model state (a resident) or activations.
struct LiveKinds {
    std::array<std::int64_t, kBlockKinds> bytes{};
    std::int64_t peak = 0;
};
LiveKinds liveKindsAtPeak(const RecordedStep& step);

AllocatorReplay replayOnCudaAllocator(const RecordedStep& step, const CudaAllocatorSettings& settings = {},
                                      const std::vector<std::int64_t>& first = {},
                                      const std::vector<std::int64_t>& afterResidents = {});

// One number of the step as a function of the dimensions: its value at the
// base probe times, for each dimension it moved with, the polynomial through
// the values recorded along that dimension divided by the base value.
struct DimFormula {
    std::int64_t base = 0;
    struct Axis {
        int dim = 0;
        std::vector<std::int64_t> xs, values; // the base's first
    };
    std::vector<Axis> axes; // only the dimensions the number moves with
    std::int64_t at(const StepDims& dims) const;
};

struct StepProgram {
    StepDims base{};
    RecordedStep shape;              // the base probe's record: its structure
    std::vector<DimFormula> numbers; // every number in it, in the order flattenNumbers lists them
    // Which distinct formula each number is, and one number of each (a
    // model's layers repeat their formulas: each of Llama 2 7B's programs has
    // about 27,500 numbers and 125 formulas). at() then evaluates each formula once. Filled by
    // indexFormulas (the fitting and reading functions below call it).
    std::vector<std::uint32_t> formulaOf, distinct;
    // Which of shape's blocks a rule sizes, and whether any is (structure,
    // so at() need not find them again; also filled by indexFormulas).
    std::vector<bool> ruled;
    bool anyRuled = false;
    // What each block holds (residents, then the allocations), from the
    // dimensions its formula follows (BlockKind; also filled by indexFormulas).
    std::vector<BlockKind> kinds;
    void indexFormulas();
    RecordedStep at(const StepDims& dims) const;
    std::size_t size() const { return shape.events.size(); }
};

// A model's step as programs (recorded by train/DerivedPlan.h
// recordStepPrograms): for batch 1, batch 2 and from batch 3 on (matmul
// skips copies at batch 1), each from sequence t0. at() is the step at the
// model's own widths, allocation by allocation.
struct StepPrograms {
    std::array<StepProgram, 3> programs;
    StepDims real{}; // the model's widths
    std::int64_t t0 = 8;
    int borrowed = 0; // programs whose formulas came from the model with two layers
    int repeated = 0; // programs whose layers are the model's with two repeated (memory/LayerRepeat.h)
    int shipped = 0;  // programs that are (or borrowed from) the build's (train/DerivedPlan.h)
    // Blocks live as the step starts that the probes leave out, in bytes at
    // the model's own widths: a quantized base's stored tensors, whose sizes
    // round to whole blocks of 64 and 256 weights (no polynomial), given by
    // the format. at() puts them before the recorded residents, with
    // `fixedParameters` frozen parameters (the quantized weights).
    std::vector<std::int64_t> fixedResidents;
    std::int64_t fixedParameters = 0;
    RecordedStep at(std::int64_t batch, std::int64_t seqLen) const;
};

// As JSON (the derived plan's data, memory/DerivedStep.h), and back;
// fromJson throws InputError naming what is inconsistent.
std::string stepProgramsToJson(const StepPrograms& programs);
StepPrograms stepProgramsFromJson(const std::string& json);

// A dimension the probes move, and the values besides the base's (one more
// value than the degree it may have: T takes two, for the score maps' T^2).
struct ProbeAxis {
    StepDim dim;
    std::vector<std::int64_t> values;
};
using StepRecorder = std::function<RecordedStep(const StepDims&)>;

struct ProgramFit {
    std::optional<StepProgram> program;
    std::string failure; // why not, naming the number and the dimensions
    int recorded = 0;    // steps recorded
};

// Records the step at `base`, then at base with each axis's dimension set to
// each of its values, fits every number, and checks the program against the
// step recorded at each of `checks` (every number equal).
ProgramFit fitStepProgram(const StepRecorder& record, const StepDims& base, const std::vector<ProbeAxis>& axes,
                          const std::vector<StepDims>& checks);

// Empty when the step recorded at `dims` is the program's there (structure
// and every number); else the first difference, named.
std::string programDifference(const StepProgram& program, const RecordedStep& rec, const StepDims& dims);

// The program of a step recorded at two points (base, and check with every
// dimension moved) whose numbers are each one of `known`'s at both points:
// the step's own structure with `known`'s formulas. A model's step with all
// its layers takes its formulas from the program of the same model with two
// layers, recorded along every dimension in a fraction of the time (the
// caller checks the result at a third point). A number equal at both points
// that is none of known's (a count of the layers' parameters, say) is taken
// as it is. nullopt (why says which number) where another is none of known's.
// `elsewhere`: points (the model's own widths, say) where two of known's
// formulas with the same values at base and check must agree to be borrowed.
std::optional<StepProgram> borrowFormulas(const StepProgram& known, const RecordedStep& atBase, const StepDims& base,
                                          const RecordedStep& atCheck, const StepDims& check,
                                          const std::vector<StepDims>& elsewhere, std::string& why);

} // namespace tb
