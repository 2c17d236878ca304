#pragma once
// The memory plan of any model the trainer can build, derived from the
// trainer's own step: one steady-state
// training step (the second) runs on this machine's CPU under the counting
// allocator at a few small batches and sequence lengths, each allocation's
// live total becomes a polynomial in batch and sequence
// (memory/StepPolynomials.h), and the polynomials are evaluated at the
// shape asked for. A new layer, family or TorchScript model needs no planner
// change: whatever the step allocates is in the trace. The Llama and GPT
// families' step is recorded instead as programs at small widths and two
// layers (memory/StepProgram.h, recordStepPrograms below), its layers
// repeated to the model's (memory/LayerRepeat.h) and evaluated at its own
// widths, so that a 7B model's plan takes seconds whatever its layer count.
// No LibTorch in this header.
//
// What it cannot see: a size that is not one polynomial in batch and
// sequence beyond the traced shapes (a kernel that switches algorithm at a
// size, a validation split capped by the corpus); the checks it runs at
// shapes it did not sample catch those within them. It plans the CPU's
// tensors. On a GPU a step recorded as programs is turned into the GPU's by
// the device rules (memory/DeviceRules.h) and replayed on the caching
// allocator's model; a traced step adds the context and cuBLAS workspaces,
// not the allocator's blocks (DerivedStep::at says it is a lower bound).

#include <atomic>
#include <optional>
#include <cstdint>
#include <functional>
#include <string>

#include "config/RunConfig.h"
#include "memory/DerivedStep.h"
#include "memory/MemoryPlan.h"
#include "memory/StepProgram.h"

namespace tb {

struct DerivedPlanProgress {
    // After each traced step: how many so far, and the shape traced.
    std::function<void(int traced, std::int64_t batch, std::int64_t seqLen)> onTrace;
    const std::atomic<bool>* cancel = nullptr; // set: stop after the step being traced (throws Cancelled)
};

// Traces the config's step at small shapes (train.batch_size and
// data.seq_len are ignored) on the CPU, and compiles it. Throws InputError
// when the config cannot train here, when it was cancelled, or when its
// allocations do not follow polynomials in batch and sequence (naming the
// batches and sequences tried).
DerivedStep deriveStep(const RunConfig& config, const DerivedPlanProgress& progress = {});

// What tells two derivations apart: the config without what deriveStep sets
// itself or ignores (batch, sequence, steps, schedule, seed, threads, ranks;
// accumulation beyond the two micro-batches it traces), and the model file's
// size and time (a folder's config.json is edited in place, a TorchScript
// file saved again). Equal keys derive the same step (the accumulation it
// records aside: callers plan at their own through the setup's gradAccum):
// the caches of a launch, the Memory planner's and the Diagnostics panel's
// share it.
std::string derivedStepKey(const RunConfig& traced);

// The Llama and GPT families' step (built-in or a folder's) as programs
// recorded at small widths, the model's layers repeated from two
// (memory/StepProgram.h, memory/LayerRepeat.h): what
// deriveStep compiles, and what a device's allocator model replays.
// nullopt (why says why) for other models, or where no program fits. A
// sliding window is taken as longer than any sequence.
std::optional<StepPrograms> recordStepPrograms(const RunConfig& config, std::string* why = nullptr,
                                               const DerivedPlanProgress& progress = {});

// The plan of a config as every panel and command plans it
// (memory/MemoryPlan.h): its own step, recorded in `precision` (what its
// target runs: planOnTarget's, "auto" resolved) in seconds. Throws
// InputError where its step cannot be derived.
MemoryPlan memoryPlanOf(const RunConfig& config, const ArchitectureSpec& arch, const std::string& precision,
                        const DerivedPlanProgress& progress = {});

// The step programs this build ships (resources/programs/torch1 and
// torch2: one file a model kind, built-in and each Hugging Face family,
// listed in resources/programs/kinds.json): the kind's model with two
// layers, recorded along every dimension in each batch regime and on each
// side of a sliding window. deriveStep and recordStepPrograms start from a
// shipped program that the config's own step equals at two probes where
// every width moved (with more layers: one whose layers repeat to the
// model's, found with three layers and checked with three and four), so a
// model of a shipped kind records two or three probes a regime instead of
// about twelve; any other is recorded as before. tst_derived_plan re-records every shipped program
// and fails on any difference: a trainer change that moves memory fails
// there, not in a plan.
std::string shippedProgramsFolder();
// The folder in the source tree (generated at configure: TB_PROGRAMS_SOURCE).
const char* sourceProgramsFolder();
// What a shipped file holds, as JSON: the config's model with two layers
// (whatever its own count), recorded. Throws InputError where it cannot be.
std::string recordShippedPrograms(const RunConfig& config);
// Empty when two such records' programs are the same; else the first
// difference, named.
std::string shippedProgramsDifference(const std::string& shipped, const std::string& recorded);

} // namespace tb
