#include "memory/StepProgram.h"

#include "memory/FusedAttention.h"

#include "memory/CpuGemmScratch.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/Errors.h"

namespace tb {
namespace {

// Which blocks (residents first, then the allocations in order) are sized by a rule.
std::vector<bool> ruledBlocks(const RecordedStep& s)
{
    std::vector<bool> ruled(s.resident.size(), false);
    for (const auto& e : s.events) {
        if (e.bytes > 0) ruled.push_back(e.rule != 0);
    }
    return ruled;
}

bool ruledEvent(const RecordedStep::Event& e, const std::vector<bool>& ruled)
{
    if (e.bytes > 0) return e.rule != 0;
    return e.bytes < 0 && e.block >= 0 && static_cast<std::size_t>(e.block) < ruled.size() && ruled[static_cast<std::size_t>(e.block)];
}

// The rule-sized allocations at their query's shape, and their releases
// (`ruled`: ruledBlocks(s)).
void sizeRuledEvents(RecordedStep& s, const std::vector<bool>& ruled)
{
    std::vector<std::int64_t> bytes(s.resident.begin(), s.resident.end());
    for (auto& e : s.events) {
        if (e.bytes > 0) {
            if (e.rule != 0) {
                const auto& q = e.shape;
                e.bytes = cpuFlashScratchBytes(e.rule == 2, q[0], q[1], q[2], q[3], e.elementBytes, 1);
            }
            bytes.push_back(e.bytes);
        }
    }
    for (auto& e : s.events) {
        if (e.bytes < 0 && ruledEvent(e, ruled)) e.bytes = -bytes[static_cast<std::size_t>(e.block)];
    }
}

// Every number of a record, in one order: the residents' bytes, each event's
// bytes and (inside a product) the product's batch, m, k and n, each
// parameter's elements and trainable bytes. `what` names a number for messages.
// A rule-sized event's bytes are no number (sizeRuledEvents sets them).
template <typename Visit>
void forEachNumber(const RecordedStep& s, Visit&& visit)
{
    const auto ruled = ruledBlocks(s);
    for (std::size_t i = 0; i < s.resident.size(); ++i) visit(s.resident[i], [i] { return "the bytes of resident block " + std::to_string(i); });
    for (std::size_t i = 0; i < s.events.size(); ++i) {
        const auto& e = s.events[i];
        if (!ruledEvent(e, ruled)) visit(e.bytes, [i, &e] {
            return std::string(e.bytes > 0 ? "the bytes of allocation " : "the bytes of release ") + "(event " + std::to_string(i)
                + ", phase " + std::to_string(e.phase) + ")";
        });
        if (e.gemm.m != 0) {
            const auto name = [i](const char* d) { return [i, d] { return std::string("the ") + d + " of the product at event " + std::to_string(i); }; };
            visit(e.gemm.batch, name("batch"));
            visit(e.gemm.m, name("m"));
            visit(e.gemm.k, name("k"));
            visit(e.gemm.n, name("n"));
        }
        if (e.hasShape) {
            for (std::size_t d = 0; d < e.shape.size(); ++d) {
                visit(e.shape[d], [i, d] { return "size " + std::to_string(d) + " of the query at event " + std::to_string(i); });
            }
        }
    }
    for (std::size_t i = 0; i < s.parameterElements.size(); ++i) {
        visit(s.parameterElements[i], [i] { return "the elements of parameter " + std::to_string(i); });
        visit(s.trainableBytes[i], [i] { return "the trainable bytes of parameter " + std::to_string(i); });
    }
}

std::string nameOfNumber(const RecordedStep& s, std::size_t index)
{
    std::size_t k = 0;
    std::string name;
    forEachNumber(s, [&](std::int64_t, auto&& what) {
        if (k++ == index) name = what();
    });
    return name;
}

// Empty when a and b are the same program with other numbers; else the first difference.
std::string structureDifference(const RecordedStep& a, const RecordedStep& b)
{
    if (a.resident.size() != b.resident.size()) {
        return std::to_string(b.resident.size()) + " blocks live as the step starts instead of " + std::to_string(a.resident.size());
    }
    if (a.parameterElements.size() != b.parameterElements.size()) {
        return std::to_string(b.parameterElements.size()) + " parameters instead of " + std::to_string(a.parameterElements.size());
    }
    const auto n = std::min(a.events.size(), b.events.size());
    for (std::size_t i = 0; i < n; ++i) {
        const auto &x = a.events[i], &y = b.events[i];
        const bool same = (x.bytes > 0) == (y.bytes > 0) && x.block == y.block && x.phase == y.phase
            && a.opName(x) == b.opName(y) && x.elementBytes == y.elementBytes && x.firstInOp == y.firstInOp
            && x.opDtype == y.opDtype && x.autocast == y.autocast && x.opDropout == y.opDropout && x.hasShape == y.hasShape
            && x.rule == y.rule
            && (x.gemm.m != 0) == (y.gemm.m != 0) && x.gemm.srcTransposed == y.gemm.srcTransposed
            && x.gemm.weightsTransposed == y.gemm.weightsTransposed && x.gemm.accumulate == y.gemm.accumulate
            && (x.gemm.batch != 0) == (y.gemm.batch != 0);
        if (!same) {
            const auto text = [](const RecordedStep& s, const RecordedStep::Event& e) {
                return std::string(e.bytes > 0 ? "allocation" : e.bytes < 0 ? "release of block " + std::to_string(e.block) : "product")
                    + (e.op >= 0 ? " in " + s.opName(e) : std::string()) + (e.rule != 0 ? " (sized by a rule)" : "")
                    + " in phase " + std::to_string(e.phase)
                    + (e.gemm.m != 0 ? " in a product " + std::to_string(e.gemm.batch) + "x" + std::to_string(e.gemm.m) + "x"
                                           + std::to_string(e.gemm.k) + "x" + std::to_string(e.gemm.n)
                                     : std::string());
            };
            const auto article = [](const RecordedStep::Event& e) { return e.bytes > 0 ? "an " : "a "; };
            return "event " + std::to_string(i) + " of " + std::to_string(a.events.size()) + " is " + article(y) + text(b, y)
                + ", not " + article(x) + text(a, x);
        }
    }
    if (a.events.size() != b.events.size()) {
        return std::to_string(b.events.size()) + " events instead of " + std::to_string(a.events.size());
    }
    return {};
}

// A formula as a key: equal keys, equal formulas.
using FormulaKey = std::pair<std::int64_t, std::vector<std::tuple<int, std::vector<std::int64_t>, std::vector<std::int64_t>>>>;
FormulaKey formulaKey(const DimFormula& f)
{
    FormulaKey key{f.base, {}};
    for (const auto& a : f.axes) key.second.emplace_back(a.dim, a.xs, a.values);
    return key;
}

std::string dimsText(const StepDims& d)
{
    std::string s;
    for (int i = 0; i < kStepDims; ++i) {
        s += (i ? ", " : "") + std::string(stepDimName(static_cast<StepDim>(i))) + " " + std::to_string(d[static_cast<std::size_t>(i)]);
    }
    return s;
}

} // namespace

std::vector<std::int64_t> stepNumbers(const RecordedStep& s)
{
    std::vector<std::int64_t> out;
    forEachNumber(s, [&](std::int64_t v, auto&&) { out.push_back(v); });
    return out;
}

const char* stepDimName(StepDim d)
{
    switch (d) {
    case StepDim::Batch: return "batch";
    case StepDim::Seq: return "sequence";
    case StepDim::Hidden: return "hidden";
    case StepDim::Heads: return "heads";
    case StepDim::KvHeads: return "kv heads";
    case StepDim::HeadDim: return "head size";
    case StepDim::Intermediate: return "intermediate";
    case StepDim::Vocab: return "vocabulary";
    case StepDim::Rank: return "LoRA rank";
    }
    return "?";
}

const std::string& RecordedStep::opName(const Event& e) const
{
    static const std::string none;
    return e.op >= 0 && static_cast<std::size_t>(e.op) < ops.size() ? ops[static_cast<std::size_t>(e.op)] : none;
}

std::int64_t RecordedStep::parameters() const
{
    std::int64_t n = 0;
    for (const auto v : parameterElements) n += v;
    return n;
}

std::int64_t RecordedStep::trainableParameters() const
{
    std::int64_t n = 0;
    for (std::size_t i = 0; i < parameterElements.size(); ++i) n += trainableBytes[i] > 0 ? parameterElements[i] : 0;
    return n;
}

std::int64_t RecordedStep::trainableParameterBytes() const
{
    std::int64_t n = 0;
    for (const auto v : trainableBytes) n += v;
    return n;
}

void orderReleases(RecordedStep& step)
{
    std::int32_t next = static_cast<std::int32_t>(step.resident.size()), lastMade = -1;
    auto& ev = step.events;
    for (std::size_t i = 0; i < ev.size();) {
        if (ev[i].bytes >= 0) {
            if (ev[i].bytes > 0) lastMade = next++;
            ++i;
            continue;
        }
        std::size_t j = i;
        while (j < ev.size() && ev[j].bytes < 0) ++j;
        const auto key = [lastMade](const RecordedStep::Event& e) {
            return std::pair<int, std::int32_t>{e.phase, e.block == lastMade ? -2 : e.block};
        };
        std::stable_sort(ev.begin() + static_cast<std::ptrdiff_t>(i), ev.begin() + static_cast<std::ptrdiff_t>(j),
                         [&key](const RecordedStep::Event& a, const RecordedStep::Event& b) { return key(a) < key(b); });
        i = j;
    }
}

void foldCpuAttentionScratch(RecordedStep& s)
{
    const auto residents = static_cast<std::int32_t>(s.resident.size());
    std::vector<std::int32_t> remap(static_cast<std::size_t>(residents));
    for (std::int32_t b = 0; b < residents; ++b) remap[static_cast<std::size_t>(b)] = b;
    std::int32_t oldNext = residents, newNext = residents;
    std::vector<RecordedStep::Event> out;
    out.reserve(s.events.size());
    const auto emit = [&](RecordedStep::Event e) {
        if (e.bytes > 0) {
            remap.push_back(newNext++);
            ++oldNext;
        } else if (e.bytes < 0 && e.block >= 0) {
            e.block = remap[static_cast<std::size_t>(e.block)];
        }
        out.push_back(e);
    };
    for (std::size_t i = 0; i < s.events.size();) {
        const auto& first = s.events[i];
        const std::string& op = first.bytes > 0 && first.firstInOp ? s.opName(first) : std::string();
        const bool forward = op == "aten::scaled_dot_product_attention";
        const bool backward = op == "aten::_scaled_dot_product_flash_attention_for_cpu_backward";
        if ((!forward && !backward) || !first.hasShape || first.opDropout) {
            emit(s.events[i++]);
            continue;
        }
        // The call: its allocations (the first `kept` are its outputs: q's
        // layout and the log-sum-exp; the q, k and v gradients), the
        // releases and bf16 products among them, until an allocation of
        // another call.
        const int kept = forward ? 2 : 3;
        std::size_t end = i + 1;
        while (end < s.events.size()) {
            const auto& e = s.events[end];
            if (e.bytes > 0 && (e.firstInOp || e.op != first.op)) break;
            ++end;
        }
        std::vector<std::int32_t> internal; // old block indices of the kernel's own blocks
        int allocations = 0;
        std::int32_t block = oldNext;
        std::int64_t live = 0, peak = 0;
        std::vector<std::size_t> others; // events of the window kept as they are (outputs, foreign releases)
        for (std::size_t j = i; j < end; ++j) {
            const auto& e = s.events[j];
            if (e.bytes > 0) {
                if (allocations++ < kept) {
                    others.push_back(j);
                } else {
                    internal.push_back(block);
                    live += e.bytes;
                    peak = std::max(peak, live);
                }
                ++block;
            } else if (e.bytes < 0) {
                if (std::find(internal.begin(), internal.end(), e.block) != internal.end()) live += e.bytes;
                else others.push_back(j);
            } else if (e.gemm.m != 0) {
                peak = std::max(peak, live + cpuGemmScratchBytes(e.gemm, 1));
            } else {
                others.push_back(j);
            }
        }
        const auto& q = first.shape;
        const auto rule = cpuFlashScratchBytes(backward, q[0], q[1], q[2], q[3], first.elementBytes, 1);
        // Every block of the kernel's released within the call, at the peak
        // the rule says. The folded block stands where the kernel's first was
        // made; the call's other events keep their order around it.
        const bool foldable = allocations > kept && live == 0 && peak == rule;
        if (!foldable) {
            for (std::size_t j = i; j < end; ++j) emit(s.events[j]);
            i = end;
            continue;
        }
        int seen = 0;
        bool folded = false;
        for (std::size_t j = i; j < end; ++j) {
            const auto& e = s.events[j];
            const bool isOther = std::find(others.begin(), others.end(), j) != others.end();
            if (e.bytes > 0 && seen++ >= kept) {
                // A kernel block: the first becomes the rule's block, made and released.
                remap.push_back(-1);
                ++oldNext;
                if (folded) continue;
                folded = true;
                RecordedStep::Event a = e;
                a.bytes = rule;
                a.gemm = {};
                a.firstInOp = false;
                a.hasShape = true;
                a.shape = first.shape;
                a.elementBytes = first.elementBytes;
                a.rule = backward ? 2 : 1;
                out.push_back(a);
                RecordedStep::Event r;
                r.bytes = -rule;
                r.block = newNext++;
                r.phase = e.phase;
                out.push_back(r);
                continue;
            }
            if (isOther) emit(e);
        }
        i = end;
    }
    s.events = std::move(out);
}

StepTrace replayStep(const RecordedStep& step)
{
    StepTrace t;
    std::int64_t live = 0;
    for (const auto b : step.resident) live += b;
    const auto push = [&t](std::int64_t v, std::uint8_t phase) {
        t.live.push_back(v);
        t.transient.push_back(v);
        t.phase.push_back(phase);
        t.gemm.emplace_back();
    };
    push(live, 0);
    struct Pending {
        std::int32_t block = -1;
        std::int64_t bytes = 0, live = 0;
        std::uint8_t phase = 0;
        GemmCall gemm;
    };
    std::optional<Pending> pending;
    const auto keep = [&] {
        if (pending) push(pending->live, pending->phase);
        pending.reset();
    };
    std::int32_t next = static_cast<std::int32_t>(step.resident.size());
    for (const auto& e : step.events) {
        if (e.bytes == 0) {
            // A bf16 product's marker: the scratch oneDNN takes for its shape, allocated and released.
            const auto scratch = e.gemm.m != 0 ? cpuGemmScratchBytes(e.gemm, 1) : 0;
            if (scratch <= 0) continue;
            keep();
            if (live + scratch > t.transient.back() && t.phase.back() == e.phase) {
                t.transient.back() = live + scratch;
                t.gemm.back() = e.gemm;
            } else if (t.phase.back() != e.phase) {
                // In a phase after the previous entry's: an entry of its own, as the direct recorder keeps it.
                push(live + scratch, e.phase);
            }
            continue;
        }
        if (e.bytes < 0 && e.block < 0) {
            // A block made before recording began is not in the start's
            // bytes, so its release takes nothing off (the direct recorder
            // counts such a block in its start's total and out here: the
            // model's own step is the same in both).
            keep();
            continue;
        }
        live += e.bytes;
        if (e.bytes > 0) {
            keep();
            pending = Pending{next++, e.bytes, live, e.phase, e.gemm};
            continue;
        }
        if (pending && e.block == pending->block && pending->bytes == -e.bytes && t.phase.back() == pending->phase) {
            if (pending->live > t.transient.back()) {
                t.transient.back() = pending->live;
                t.gemm.back() = pending->gemm;
            }
            pending.reset();
            continue;
        }
        keep();
    }
    keep();
    return t;
}

AllocatorReplay replayOnCudaAllocator(const RecordedStep& step, const CudaAllocatorSettings& settings,
                                      const std::vector<std::int64_t>& first, const std::vector<std::int64_t>& afterResidents)
{
    CudaAllocatorModel model(settings);
    std::vector<int> handles;
    handles.reserve(step.resident.size() + step.events.size());
    for (const auto b : first) (void)model.allocate(b);
    for (const auto b : step.resident) handles.push_back(model.allocate(b));
    for (const auto b : afterResidents) (void)model.allocate(b);
    AllocatorReplay out;
    out.startAllocated = model.allocated();
    for (auto& p : out.phasePeakAllocated) p = out.startAllocated;
    for (const auto& e : step.events) {
        if (e.bytes > 0) {
            handles.push_back(model.allocate(e.bytes));
            auto& peak = out.phasePeakAllocated[std::min<std::size_t>(e.phase, kStepPhases - 1)];
            peak = std::max(peak, model.allocated());
        } else if (e.bytes < 0 && e.block >= 0 && static_cast<std::size_t>(e.block) < handles.size()) {
            model.release(handles[static_cast<std::size_t>(e.block)]);
        }
    }
    out.peakAllocated = model.peakAllocated();
    out.peakReserved = model.peakReserved();
    out.segments = model.segments();
    return out;
}

std::int64_t DimFormula::at(const StepDims& dims) const
{
    if (axes.empty() || base == 0) return base;
    long double r = static_cast<long double>(base);
    for (const auto& a : axes) {
        const long double x = static_cast<long double>(dims[static_cast<std::size_t>(a.dim)]);
        long double value = 0;
        for (std::size_t i = 0; i < a.xs.size(); ++i) {
            long double term = static_cast<long double>(a.values[i]);
            for (std::size_t j = 0; j < a.xs.size(); ++j) {
                if (j != i) term *= (x - a.xs[j]) / static_cast<long double>(a.xs[i] - a.xs[j]);
            }
            value += term;
        }
        r *= value / static_cast<long double>(base);
    }
    return std::llround(r);
}

namespace {

bool follows(const DimFormula& f, StepDim d)
{
    return std::any_of(f.axes.begin(), f.axes.end(), [d](const DimFormula::Axis& a) { return a.dim == static_cast<int>(d); });
}

// Whether the formula grows with the square of the sequence (a score map's
// B x H x T x T): its values along the sequence have a second difference.
bool squareOfSequence(const DimFormula& f)
{
    for (const auto& a : f.axes) {
        if (a.dim != static_cast<int>(StepDim::Seq) || a.xs.size() < 3) continue;
        const auto& x = a.xs;
        const auto& v = a.values;
        for (std::size_t i = 2; i < x.size(); ++i) {
            // (v2 - v1) / (x2 - x1) != (v1 - v0) / (x1 - x0)
            if (static_cast<long double>(v[i] - v[i - 1]) * static_cast<long double>(x[i - 1] - x[i - 2])
                != static_cast<long double>(v[i - 1] - v[i - 2]) * static_cast<long double>(x[i] - x[i - 1])) {
                return true;
            }
        }
    }
    return false;
}

bool followsAWidth(const DimFormula& f)
{
    return follows(f, StepDim::Hidden) || follows(f, StepDim::Heads) || follows(f, StepDim::KvHeads)
        || follows(f, StepDim::HeadDim) || follows(f, StepDim::Intermediate) || follows(f, StepDim::Rank);
}

// base: the program's base probe (its batch, sequence and vocabulary).
BlockKind madeKind(const DimFormula& f, const RecordedStep::Event& e, const StepDims& base)
{
    if (e.phase >= 2) return BlockKind::OptimizerStep;
    // (First: a causal or sliding-window mask, T x T, follows no width either.)
    if (squareOfSequence(f)) return BlockKind::AttentionMaps;
    const bool rows = follows(f, StepDim::Batch) || follows(f, StepDim::Seq);
    // A built-in model's vocabulary is its dataset's, which the probes do not
    // move: there the logits follow no width, and hold a vocabulary's worth
    // of bytes a token (a norm's statistics or a loss per token, a few).
    const auto tokens = dimOf(base, StepDim::Batch) * dimOf(base, StepDim::Seq);
    if (rows && (follows(f, StepDim::Vocab) || (!followsAWidth(f) && f.base >= tokens * dimOf(base, StepDim::Vocab)))) {
        return BlockKind::Logits;
    }
    if (rows) return BlockKind::Activations;
    // Under autocast (mixed precision's forward, and a checkpointed block's
    // forward recomputed in the backward): a cast of a weight.
    if (e.phase == 0 || e.autocast) return BlockKind::WeightCopies;
    return BlockKind::Gradients;
}

// Each block's kind, walking the numbers in at()'s order.
std::vector<BlockKind> blockKindsOf(const StepProgram& p)
{
    std::vector<BlockKind> kinds;
    const auto& s = p.shape;
    kinds.reserve(s.resident.size() + s.events.size());
    std::size_t k = 0;
    const auto formula = [&](std::size_t at) -> const DimFormula* { return at < p.numbers.size() ? &p.numbers[at] : nullptr; };
    // A program without the batch and the sequence (a fixed sequence at batch
    // 1 or 2: each has a program of its own) cannot tell a step's blocks from
    // the model's: no kinds (the plan's terms are then what is live as the
    // step starts, and the rest).
    const auto rowsMove = std::any_of(p.numbers.begin(), p.numbers.end(), [](const DimFormula& f) {
        return follows(f, StepDim::Batch) || follows(f, StepDim::Seq);
    });
    if (!rowsMove) return {};
    for (std::size_t i = 0; i < s.resident.size(); ++i, ++k) {
        // The batch's ids (at batch 1 and 2, whose programs do not move the
        // batch: following the sequence and no width of the model).
        const auto* f = formula(k);
        const bool data = f && (follows(*f, StepDim::Batch) || (follows(*f, StepDim::Seq) && !followsAWidth(*f)));
        kinds.push_back(data ? BlockKind::Data : BlockKind::ModelState);
    }
    for (const auto& e : s.events) {
        const bool sized = !ruledEvent(e, p.ruled);
        const auto own = k;
        if (sized) ++k;
        if (e.gemm.m != 0) k += 4;
        if (e.hasShape) k += 4;
        if (e.bytes <= 0) continue;
        const auto* f = sized ? formula(own) : nullptr;
        kinds.push_back(f ? madeKind(*f, e, p.base) : BlockKind::Workspace); // (a rule sizes the CPU kernel's scratch)
    }
    return kinds;
}

} // namespace

const char* blockKindName(BlockKind k)
{
    switch (k) {
    case BlockKind::ModelState: return "model_state";
    case BlockKind::Data: return "data";
    case BlockKind::Activations: return "activations";
    case BlockKind::AttentionMaps: return "attention_maps";
    case BlockKind::Logits: return "logits";
    case BlockKind::WeightCopies: return "weight_copies";
    case BlockKind::Gradients: return "gradients";
    case BlockKind::OptimizerStep: return "optimizer_step";
    case BlockKind::Workspace: return "workspace";
    case BlockKind::None: break;
    }
    return "other";
}

const char* blockKindDescription(BlockKind k)
{
    switch (k) {
    case BlockKind::ModelState: return "live as a step starts and not the batch's data: weights, the gradients kept between "
                                       "steps, the optimizer's state";
    case BlockKind::Data: return "the batch's rows live as a step starts (following the batch, or the sequence and no "
                                 "width of the model)";
    case BlockKind::Activations: return "made by the step and following the batch or sequence: activations saved for the "
                                        "backward, and their gradients";
    case BlockKind::AttentionMaps: return "following the square of the sequence: attention scores and probabilities "
                                          "(batch x heads x sequence x sequence), their gradients, and causal or "
                                          "sliding-window masks";
    case BlockKind::Logits: return "following the batch or sequence and the vocabulary (or, a built-in model's, no width "
                                   "and a vocabulary's bytes a token): the output logits, the loss's softmax, and their "
                                   "gradients";
    case BlockKind::WeightCopies: return "following neither batch nor sequence, made in the forward or under autocast (a "
                                         "checkpointed block's recompute): casts of the weights (mixed precision) and other "
                                         "copies";
    case BlockKind::Gradients: return "made in the backward and following neither batch nor sequence: parameters' gradients";
    case BlockKind::OptimizerStep: return "the optimizer's temporaries while it updates the parameters";
    case BlockKind::Workspace: return "kernel scratch: released by the next event, or sized by a kernel's rule";
    case BlockKind::None: break;
    }
    return "";
}

LiveKinds liveKindsAtPeak(const RecordedStep& step)
{
    LiveKinds out, now;
    std::vector<BlockKind> kindOf;
    std::vector<std::int64_t> bytesOf;
    kindOf.reserve(step.resident.size() + step.events.size());
    bytesOf.reserve(kindOf.capacity());
    const auto slot = [](BlockKind k) { return static_cast<std::size_t>(k); };
    for (std::size_t i = 0; i < step.resident.size(); ++i) {
        const auto k = i < step.residentKind.size() && step.residentKind[i] != BlockKind::None ? step.residentKind[i]
                                                                                                : BlockKind::ModelState;
        kindOf.push_back(k);
        bytesOf.push_back(step.resident[i]);
        now.bytes[slot(k)] += step.resident[i];
        now.peak += step.resident[i];
    }
    out = now;
    const auto& ev = step.events;
    for (std::size_t i = 0; i < ev.size(); ++i) {
        const auto& e = ev[i];
        if (e.bytes > 0) {
            const auto block = static_cast<std::int32_t>(kindOf.size());
            auto k = e.kind == BlockKind::None ? BlockKind::Activations : e.kind;
            if (i + 1 < ev.size() && ev[i + 1].bytes == -e.bytes && ev[i + 1].block == block) k = BlockKind::Workspace;
            kindOf.push_back(k);
            bytesOf.push_back(e.bytes);
            now.bytes[slot(k)] += e.bytes;
            now.peak += e.bytes;
            if (now.peak > out.peak) out = now;
        } else if (e.bytes < 0 && e.block >= 0 && static_cast<std::size_t>(e.block) < kindOf.size()) {
            const auto b = static_cast<std::size_t>(e.block);
            now.bytes[slot(kindOf[b])] -= bytesOf[b];
            now.peak -= bytesOf[b];
            bytesOf[b] = 0; // (released once)
        }
    }
    return out;
}

void StepProgram::indexFormulas()
{
    formulaOf.clear();
    distinct.clear();
    std::map<FormulaKey, std::uint32_t> index;
    formulaOf.reserve(numbers.size());
    for (std::size_t k = 0; k < numbers.size(); ++k) {
        const auto [it, added] = index.emplace(formulaKey(numbers[k]), static_cast<std::uint32_t>(distinct.size()));
        if (added) distinct.push_back(static_cast<std::uint32_t>(k));
        formulaOf.push_back(it->second);
    }
    ruled = ruledBlocks(shape);
    anyRuled = std::find(ruled.begin(), ruled.end(), true) != ruled.end();
    kinds = blockKindsOf(*this);
}

RecordedStep StepProgram::at(const StepDims& dims) const
{
    RecordedStep out = shape;
    std::size_t k = 0;
    // Each distinct formula once (where indexed), then every number from them.
    std::vector<std::int64_t> values;
    const bool indexed = formulaOf.size() == numbers.size() && !numbers.empty();
    if (indexed) {
        values.reserve(distinct.size());
        for (const auto n : distinct) values.push_back(numbers[n].at(dims));
    }
    const auto set = [&](std::int64_t& v) {
        v = indexed ? values[formulaOf[k]] : numbers[k].at(dims);
        ++k;
    };
    for (auto& b : out.resident) set(b);
    // (The structure's ruled blocks: the program's, where indexed.)
    const auto found = indexed ? std::vector<bool>{} : ruledBlocks(out);
    const auto& ruledHere = indexed ? ruled : found;
    for (auto& e : out.events) {
        if (!ruledEvent(e, ruledHere)) set(e.bytes);
        if (e.gemm.m != 0) {
            set(e.gemm.batch);
            set(e.gemm.m);
            set(e.gemm.k);
            set(e.gemm.n);
        }
        if (e.hasShape) {
            for (auto& d : e.shape) set(d);
        }
    }
    for (std::size_t i = 0; i < out.parameterElements.size(); ++i) {
        set(out.parameterElements[i]);
        set(out.trainableBytes[i]);
    }
    if (!indexed || anyRuled) sizeRuledEvents(out, ruledHere);
    if (!kinds.empty() && kinds.size() >= out.resident.size()) { // (indexed: the shape's blocks, one kind each)
        out.residentKind.assign(kinds.begin(), kinds.begin() + static_cast<std::ptrdiff_t>(out.resident.size()));
        auto next = out.resident.size();
        for (auto& e : out.events) {
            if (e.bytes > 0 && next < kinds.size()) e.kind = kinds[next++];
        }
    }
    return out;
}

ProgramFit fitStepProgram(const StepRecorder& record, const StepDims& base, const std::vector<ProbeAxis>& axes,
                          const std::vector<StepDims>& checks)
{
    ProgramFit fit;
    StepProgram program;
    program.base = base;
    program.shape = record(base);
    ++fit.recorded;
    const auto baseNumbers = stepNumbers(program.shape);
    program.numbers.resize(baseNumbers.size());
    for (std::size_t k = 0; k < baseNumbers.size(); ++k) program.numbers[k].base = baseNumbers[k];
    for (const auto& axis : axes) {
        const auto d = static_cast<std::size_t>(axis.dim);
        std::vector<std::vector<std::int64_t>> along;
        for (const auto x : axis.values) {
            auto dims = base;
            dims[d] = x;
            const auto rec = record(dims);
            ++fit.recorded;
            if (auto diff = structureDifference(program.shape, rec); !diff.empty()) {
                fit.failure = "the step changes with the " + std::string(stepDimName(axis.dim)) + " (" + std::to_string(base[d])
                    + " to " + std::to_string(x) + "): " + diff;
                return fit;
            }
            along.push_back(stepNumbers(rec));
        }
        for (std::size_t k = 0; k < baseNumbers.size(); ++k) {
            bool moves = false;
            for (const auto& v : along) moves = moves || v[k] != baseNumbers[k];
            if (!moves) continue;
            if (baseNumbers[k] == 0) {
                fit.failure = nameOfNumber(program.shape, k) + " is 0 at the base probe and not along the "
                    + stepDimName(axis.dim) + ": not a product of one polynomial per dimension";
                return fit;
            }
            DimFormula::Axis a;
            a.dim = static_cast<int>(axis.dim);
            a.xs.push_back(base[d]);
            a.values.push_back(baseNumbers[k]);
            for (std::size_t i = 0; i < along.size(); ++i) {
                a.xs.push_back(axis.values[i]);
                a.values.push_back(along[i][k]);
            }
            program.numbers[k].axes.push_back(std::move(a));
        }
    }
    for (const auto& dims : checks) {
        ++fit.recorded;
        if (auto diff = programDifference(program, record(dims), dims); !diff.empty()) {
            fit.failure = diff;
            return fit;
        }
    }
    program.indexFormulas();
    fit.program = std::move(program);
    return fit;
}

std::string programDifference(const StepProgram& program, const RecordedStep& rec, const StepDims& dims)
{
    if (auto diff = structureDifference(program.shape, rec); !diff.empty()) return "the step changes at " + dimsText(dims) + ": " + diff;
    const auto got = stepNumbers(rec);
    const auto planned = stepNumbers(program.at(dims));
    for (std::size_t k = 0; k < got.size(); ++k) {
        if (got[k] != planned[k]) {
            return nameOfNumber(rec, k) + " at " + dimsText(dims) + " is " + std::to_string(got[k]) + ", the program says "
                + std::to_string(planned[k]) + ": not a product of one polynomial per dimension";
        }
    }
    return {};
}

std::optional<StepProgram> borrowFormulas(const StepProgram& known, const RecordedStep& atBase, const StepDims& base,
                                          const RecordedStep& atCheck, const StepDims& check,
                                          const std::vector<StepDims>& elsewhere, std::string& why)
{
    if (auto diff = structureDifference(atBase, atCheck); !diff.empty()) {
        why = "the step changes at " + dimsText(check) + ": " + diff;
        return std::nullopt;
    }
    // Each formula of `known` by its values at the two points. Two formulas
    // with the same values there that differ at any point `elsewhere` make
    // their values ambiguous (kAmbiguous): a number with them is not borrowed.
    constexpr std::size_t kAmbiguous = static_cast<std::size_t>(-1);
    std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> byValues;
    for (std::size_t k = 0; k < known.numbers.size(); ++k) {
        const auto [it, added] = byValues.emplace(std::pair{known.numbers[k].at(base), known.numbers[k].at(check)}, k);
        if (added || it->second == kAmbiguous) continue;
        const auto& other = known.numbers[it->second];
        for (const auto& d : elsewhere) {
            if (other.at(d) != known.numbers[k].at(d)) it->second = kAmbiguous;
        }
    }
    const auto atB = stepNumbers(atBase), atC = stepNumbers(atCheck);
    StepProgram out;
    out.base = base;
    out.shape = atBase;
    out.numbers.reserve(atB.size());
    for (std::size_t k = 0; k < atB.size(); ++k) {
        const auto it = byValues.find({atB[k], atC[k]});
        if (it == byValues.end() && atB[k] == atC[k]) {
            // The same at both points: no width moves it (a count of the
            // model's parameters, say, which its layers do).
            out.numbers.push_back(DimFormula{atB[k], {}});
            continue;
        }
        if (it == byValues.end() || it->second == kAmbiguous) {
            why = nameOfNumber(atBase, k) + " (" + std::to_string(atB[k]) + " and " + std::to_string(atC[k]) + ") is "
                + (it == byValues.end() ? "none of the smaller step's numbers" : "two of the smaller step's formulas");
            return std::nullopt;
        }
        out.numbers.push_back(known.numbers[it->second]);
    }
    out.indexFormulas();
    return out;
}

RecordedStep StepPrograms::at(std::int64_t batch, std::int64_t seqLen) const
{
    auto d = real;
    dimOf(d, StepDim::Batch) = batch;
    dimOf(d, StepDim::Seq) = seqLen;
    auto step = programs[batch == 1 ? 0 : batch == 2 ? 1 : 2].at(d);
    if (fixedResidents.empty()) return step;
    // Blocks are numbered residents first: the recorded ones move up.
    const auto shift = static_cast<std::int32_t>(fixedResidents.size());
    for (auto& e : step.events) {
        if (e.block >= 0) e.block += shift;
    }
    step.resident.insert(step.resident.begin(), fixedResidents.begin(), fixedResidents.end());
    if (!step.residentKind.empty()) step.residentKind.insert(step.residentKind.begin(), fixedResidents.size(), BlockKind::ModelState);
    if (fixedParameters > 0) {
        step.parameterElements.push_back(fixedParameters);
        step.trainableBytes.push_back(0);
    }
    return step;
}

// As JSON: each program's structure (events as [kind, block, phase, op,
// element bytes, flags]: the flags' bits are first in its operator, dtype
// named, under autocast, dropout asked, query sizes follow, then the
// product's five bits from bit 5 and the rule from bit 10) and its numbers as
// indices into one table of distinct formulas (a model's layers repeat
// theirs), each [base, [[dimension, xs, values], ...]].
std::string stepProgramsToJson(const StepPrograms& p)
{
    using nlohmann::json;
    std::map<FormulaKey, std::size_t> index;
    json formulas = json::array(), programs = json::array();
    for (const auto& program : p.programs) {
        json events = json::array(), numbers = json::array();
        for (const auto& e : program.shape.events) {
            const int bits = (e.gemm.m != 0 ? 1 : 0) | (e.gemm.batch != 0 ? 2 : 0) | (e.gemm.srcTransposed ? 4 : 0)
                | (e.gemm.weightsTransposed ? 8 : 0) | (e.gemm.accumulate ? 16 : 0);
            const int flags = (e.firstInOp ? 1 : 0) | (e.opDtype ? 2 : 0) | (e.autocast ? 4 : 0) | (e.opDropout ? 8 : 0)
                | (e.hasShape ? 16 : 0) | (bits << 5) | (e.rule << 10);
            events.push_back({e.bytes > 0 ? 1 : e.bytes < 0 ? -1 : 0, e.block, e.phase, e.op, e.elementBytes, flags});
        }
        for (const auto& f : program.numbers) {
            auto [it, added] = index.emplace(formulaKey(f), formulas.size());
            if (added) {
                json ax = json::array();
                for (const auto& a : f.axes) ax.push_back({a.dim, a.xs, a.values});
                formulas.push_back({f.base, ax});
            }
            numbers.push_back(it->second);
        }
        programs.push_back({{"base", program.base},
                            {"resident", program.shape.resident.size()},
                            {"parameters", program.shape.parameterElements.size()},
                            {"ops", program.shape.ops},
                            {"events", events},
                            {"numbers", numbers}});
    }
    json out{{"t0", p.t0}, {"real", p.real}, {"borrowed", p.borrowed}, {"formulas", formulas}, {"programs", programs}};
    if (p.shipped > 0) out["shipped"] = p.shipped;
    if (p.repeated > 0) out["repeated"] = p.repeated;
    if (!p.fixedResidents.empty()) {
        out["fixed_residents"] = p.fixedResidents;
        out["fixed_parameters"] = p.fixedParameters;
    }
    return out.dump();
}

StepPrograms stepProgramsFromJson(const std::string& text)
{
    const auto bad = [](const std::string& what) {
        return InputError("the derived plan's step programs are inconsistent: " + what);
    };
    try {
        const auto j = nlohmann::json::parse(text);
        StepPrograms p;
        p.t0 = j.at("t0").get<std::int64_t>();
        p.real = j.at("real").get<StepDims>();
        p.borrowed = j.at("borrowed").get<int>();
        p.shipped = j.value("shipped", 0);
        p.repeated = j.value("repeated", 0);
        if (j.contains("fixed_residents")) {
            p.fixedResidents = j.at("fixed_residents").get<std::vector<std::int64_t>>();
            p.fixedParameters = j.at("fixed_parameters").get<std::int64_t>();
            for (const auto b : p.fixedResidents) {
                if (b <= 0) throw bad("a fixed resident block of " + std::to_string(b) + " bytes");
            }
        }
        std::vector<DimFormula> formulas;
        for (const auto& f : j.at("formulas")) {
            DimFormula d;
            d.base = f.at(0).get<std::int64_t>();
            for (const auto& a : f.at(1)) {
                DimFormula::Axis axis;
                axis.dim = a.at(0).get<int>();
                axis.xs = a.at(1).get<std::vector<std::int64_t>>();
                axis.values = a.at(2).get<std::vector<std::int64_t>>();
                if (axis.dim < 0 || axis.dim >= kStepDims || axis.xs.size() != axis.values.size() || axis.xs.empty()) {
                    throw bad("a formula's axis " + a.dump());
                }
                d.axes.push_back(std::move(axis));
            }
            formulas.push_back(std::move(d));
        }
        const auto& programs = j.at("programs");
        if (programs.size() != p.programs.size()) throw bad(std::to_string(programs.size()) + " programs, not 3");
        for (std::size_t i = 0; i < p.programs.size(); ++i) {
            const auto& pj = programs[i];
            auto& program = p.programs[i];
            program.base = pj.at("base").get<StepDims>();
            auto& shape = program.shape;
            shape.resident.assign(pj.at("resident").get<std::size_t>(), 1);
            shape.parameterElements.assign(pj.at("parameters").get<std::size_t>(), 1);
            shape.trainableBytes.assign(shape.parameterElements.size(), 0);
            shape.ops = pj.at("ops").get<std::vector<std::string>>();
            std::int64_t blocks = static_cast<std::int64_t>(shape.resident.size());
            for (const auto& ej : pj.at("events")) {
                RecordedStep::Event e;
                e.bytes = ej.at(0).get<int>();
                e.block = ej.at(1).get<std::int32_t>();
                e.phase = ej.at(2).get<std::uint8_t>();
                e.op = ej.at(3).get<std::int16_t>();
                e.elementBytes = ej.at(4).get<std::uint8_t>();
                const int flags = ej.at(5).get<int>();
                if (ej.size() != 6 || flags < 0 || flags >= (3 << 10)) throw bad("event " + ej.dump());
                e.firstInOp = flags & 1;
                e.opDtype = flags & 2;
                e.autocast = flags & 4;
                e.opDropout = flags & 8;
                e.hasShape = flags & 16;
                const int bits = (flags >> 5) & 31;
                e.rule = static_cast<std::uint8_t>(flags >> 10);
                if (e.rule > 2 || (e.rule != 0 && (e.bytes <= 0 || !e.hasShape))) throw bad("event " + ej.dump());
                e.gemm.m = bits & 1;
                e.gemm.batch = (bits & 2) ? 1 : 0;
                e.gemm.srcTransposed = bits & 4;
                e.gemm.weightsTransposed = bits & 8;
                e.gemm.accumulate = bits & 16;
                if (e.bytes > 0) ++blocks;
                if ((e.bytes < 0 && e.block >= blocks) || e.phase >= kStepPhases
                    || (e.op >= 0 && static_cast<std::size_t>(e.op) >= shape.ops.size())) {
                    throw bad("event " + ej.dump());
                }
                shape.events.push_back(e);
            }
            std::size_t count = 0;
            forEachNumber(shape, [&](std::int64_t, auto&&) { ++count; });
            const auto numbers = pj.at("numbers").get<std::vector<std::size_t>>();
            if (numbers.size() != count) {
                throw bad(std::to_string(numbers.size()) + " numbers for a program of " + std::to_string(count));
            }
            for (const auto k : numbers) {
                if (k >= formulas.size()) throw bad("formula " + std::to_string(k) + " of " + std::to_string(formulas.size()));
                program.numbers.push_back(formulas[k]);
            }
            program.indexFormulas();
            program.shape = program.at(program.base);
        }
        return p;
    } catch (const nlohmann::json::exception& e) {
        throw InputError(std::string("the derived plan's step programs are not what trainbench-cli estimate --derived writes: ")
                         + e.what());
    }
}

} // namespace tb
