#pragma once
// A training step compiled to polynomials in the batch B and the sequence
// length T. Every size a step allocates is a product of B and T with
// constants, of the form c0 + c1 T + c2 T^2 + c3 B + c4 BT + c5 BT^2, and the
// order of the allocations does not depend on B or T. So the live bytes after
// each allocation are such a polynomial, recovered exactly from steps traced
// at B in {g, g + 1} x three consecutive T (g = generalFrom: 2 for the hand
// replay, 3 for a traced step), and checked where no sample was taken. Below
// g each batch has polynomials in T of its own, from three more traces (at
// B = 1 LibTorch's matmul skips some copies, so the allocations differ).
// The peak at any (B, T) is the largest of the polynomials no other one
// dominates: tens of dot products instead of thousands of allocations.
//
// The traces come from the trainer's own step under the counting allocator
// (DerivedPlan.h), or a step program's evaluation. No LibTorch here.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "memory/CpuGemmScratch.h"

namespace tb {

// One step's allocations: the live bytes after each, and the phase each came
// in (0 forward, 1 backward, 2 optimizer; empty: all 0).
// transient: per entry, the most live while a scratch buffer allocated after
// it (and freed before the next allocation) existed; empty or equal to live
// where there was none. A scratch whose size does not follow the shapes
// (oneDNN's for bf16 products on the CPU) is bounded instead of fitted,
// unless the trace says which product took it.
// gemm: per entry, the bf16 matrix product whose scratch made the transient
// (m = 0: none, or not known); empty: not recorded.
struct StepTrace {
    std::vector<std::int64_t> live;
    std::vector<std::uint8_t> phase;
    std::vector<std::int64_t> transient;
    std::vector<GemmCall> gemm;
};
using StepTracer = std::function<StepTrace(std::int64_t batch, std::int64_t seqLen)>;
// A tracer whose traces outlive the compile, read in place: the pointer
// must stay valid across later calls (a std::map's node, not a vector's
// element). (A pointer, not a reference: a lambda returning a trace by
// value would convert to a reference-returning std::function and dangle.)
using StepTraceSource = std::function<const StepTrace*(std::int64_t batch, std::int64_t seqLen)>;

constexpr int kStepMonomials = 6;
using StepPoly = std::array<std::int64_t, kStepMonomials>;

// u = T - t0 + 1: the sequence length counted from the segment's first sample.
inline std::int64_t evaluateStepPoly(const StepPoly& p, std::int64_t B, std::int64_t u)
{
    return p[0] + u * (p[1] + u * p[2]) + B * (p[3] + u * (p[4] + u * p[5]));
}

constexpr int kStepPhases = 3;

// A bf16 product whose oneDNN scratch made a step's transient: the live bytes
// it sat on and its shape, each a polynomial in B and T, and its layout. Its
// scratch at any (B, T) is oneDNN's answer for that shape (CpuGemmScratch.h).
struct GemmSite {
    StepPoly base{};
    std::array<StepPoly, 4> dims{}; // batch (0: a 2-D product), m, k, n
    bool srcTransposed = false, weightsTransposed = false, accumulate = false;
    int phase = 0;
    std::int64_t traced = 0; // the largest scratch it took in the traces
    GemmCall at(std::int64_t B, std::int64_t u) const;
};

struct CompiledSegment {
    std::int64_t t0 = 1, tLast = 1; // the sequence lengths it covers
    // From this batch on the general polynomials hold; each smaller batch
    // (B = 1, where matmul skips copies; with some data, B = 2) has
    // polynomials in T of its own.
    std::int64_t generalFrom = 2;
    // Per phase, the undominated polynomials, largest first: for B >=
    // generalFrom, and for each B below it (index B - 1).
    std::array<std::vector<StepPoly>, kStepPhases> peaks;
    std::vector<std::array<std::vector<StepPoly>, kStepPhases>> peaksSmall;
    StepPoly first{};                 // the live bytes as the step starts (B >= generalFrom)
    std::vector<StepPoly> firstSmall; // the same for each B below generalFrom
    // Scratch buffers whose size follows no polynomial: the live bytes they
    // sat on (per phase, as peaks) and the largest of them seen in any trace.
    std::array<std::vector<StepPoly>, kStepPhases> scratchBases;
    std::vector<std::array<std::vector<StepPoly>, kStepPhases>> scratchBasesSmall;
    std::int64_t irregularScratch = 0;
    // Scratch of bf16 products whose shapes the traces recorded: exact at any
    // (B, T), from oneDNN (for B >= generalFrom, and per smaller B).
    std::vector<GemmSite> gemmSites;
    std::vector<std::vector<GemmSite>> gemmSitesSmall;
    bool compiled = true;             // false: not polynomial here (its rows are replayed)
    int traces = 0;                   // samples and checks it was compiled from (one trace may serve twice)

    // withScratch false: without the CPU's kernel scratch (a GPU has none of
    // it). threads: the CPU's intra-op threads (oneDNN's buffers are per thread).
    // exactProducts false: each bf16 product's scratch is the largest it took
    // in the traces instead of oneDNN's answer at (B, T) (which costs some
    // microseconds a new shape: a fit map's thousands of cells use this).
    std::int64_t phasePeak(int phase, std::int64_t B, std::int64_t T, bool withScratch = true, int threads = 1,
                           bool exactProducts = true) const;
    std::int64_t peak(std::int64_t B, std::int64_t T, int threads = 1, bool exactProducts = true) const; // over the phases
    bool hasProducts() const; // bf16 products' scratch sites, in any regime
    std::int64_t start(std::int64_t B, std::int64_t T) const;
};

// The (B, T) points a segment is checked at, besides its samples: one near
// them, the corners and the middle of [t0, tLast] x [1, bMax].
std::vector<std::pair<std::int64_t, std::int64_t>> segmentChecks(std::int64_t t0, std::int64_t tLast, std::int64_t bMax);

// Compiles the step over [t0, tLast] from traces at T in {t0, t0 + 1,
// t0 + 2} and B from 1 to generalFrom + 1; nullopt where a check's trace
// differs from the polynomials in length or in any value. bMax bounds B (for
// ordering only). Each (B, T) is traced once: a check at a sample's shape
// reads the sample's trace.
// polynomialSizes: every allocation's size is a polynomial (a program's
// step, memory/StepProgram.h: its numbers are formulas; a product's scratch
// is a marker of its own). Then an entry's transient is the larger of its
// live total and a polynomial (a block allocated and freed after releases),
// and a check where that polynomial has fallen under the live total is no
// irregular scratch. A traced step's scratch (oneDNN's) follows no shape:
// there such a check is.
std::optional<CompiledSegment> compileSegment(const StepTracer& trace, std::int64_t t0, std::int64_t tLast,
                                              std::int64_t bMax,
                                              const std::vector<std::pair<std::int64_t, std::int64_t>>& checks,
                                              std::int64_t generalFrom = 2, bool polynomialSizes = false);
// The same, reading the traces where they are kept (no copies: a 7B step's
// trace has thousands of entries).
std::optional<CompiledSegment> compileSegmentInPlace(const StepTraceSource& trace, std::int64_t t0, std::int64_t tLast,
                                                     std::int64_t bMax,
                                                     const std::vector<std::pair<std::int64_t, std::int64_t>>& checks,
                                                     std::int64_t generalFrom = 2, bool polynomialSizes = false);

} // namespace tb
