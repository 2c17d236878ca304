#pragma once
// A training step derived from the trainer's own allocations (traced by
// train/DerivedPlan.h) and compiled to polynomials in batch and sequence: what
// a plan at any shape needs, as data. Evaluating it is arithmetic, so the
// Memory planner's sliders and fit map use it without LibTorch, from the JSON
// 'trainbench-cli estimate --derived --json' writes.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "memory/Estimator.h"
#include "memory/StepPolynomials.h"
#include "memory/StepProgram.h"

namespace tb {

struct DerivedStep {
    CompiledSegment segment;
    // A model with a sliding window (Mistral) masks it once the sequence is
    // longer, and runs eager attention even where SDPA was asked for: past
    // slidingWindow the step is pastWindow's, traced with the window taken
    // as one position (and segment traced with none).
    std::int64_t slidingWindow = 0;
    std::optional<CompiledSegment> pastWindow;
    const CompiledSegment& segmentAt(std::int64_t seqLen) const
    {
        return pastWindow && seqLen > slidingWindow ? *pastWindow : segment;
    }
    // Parameters at sequence 0, and per token of the sequence the model is
    // built for (the built-in GPT's learned positions follow it).
    std::int64_t parameters = 0, trainableParameters = 0;
    std::int64_t parametersPerToken = 0, trainablePerToken = 0;
    std::int64_t trainableBytes = 0; // the trainable parameters' bytes: data parallel's gradient buckets
    std::int64_t largestTracedSeqLen = 0;
    std::int64_t fixedSeqLen = 0; // > 0: the dataset fixes the sequence length (addition)
    // The micro-batches of a step it was traced with (at most two) and of
    // the config's (train.grad_accum). A step of one frees its gradients
    // where an accumulating one keeps them across micro-batches, so a plan at
    // another count of the same kind differs only by the micro-batches drawn
    // before the first forward (extraDataBytes, by the setup's gradAccum);
    // of the other kind, it is traced again.
    int tracedAccum = 1, accum = 1;
    std::string dataset; // the config's data source as setupFor names it (a loss mask beside the ids: addition, chat)
    std::string tracedOn;         // "LibTorch 1.13.1 on this machine's CPU"
    // The Llama family: the step as programs (memory/StepProgram.h), within
    // the sliding window and past it. On a GPU a shape's plan is then the
    // program's step by the device rules (memory/DeviceRules.h) replayed on
    // the caching allocator's model, and gpuSegment (pastWindowOnGpu) is
    // those rules' tensors compiled, for the fit map's cells. Without them,
    // or where an operator has no rule (unruled), a GPU plan is a lower bound.
    std::shared_ptr<const StepPrograms> programs, pastWindowPrograms;
    std::optional<CompiledSegment> gpuSegment, pastWindowOnGpu;
    std::string unruled; // on a card that runs the flash kernel
    // notExactOn's answers by card (compute capability, fp16), shared by copies.
    struct CardAnswers {
        std::mutex mutex;
        std::map<std::pair<int, bool>, std::string> byCard;
    };
    std::shared_ptr<CardAnswers> cardAnswers = std::make_shared<CardAnswers>();
    // Empty where a GPU's plan on this card (setup.gpu, its compute
    // capability and precision) is the programs' by the device rules; else
    // why it is a lower bound there.
    std::string notExactOn(const TrainingSetup& setup) const;

    // The plan at this batch and sequence length, on this CPU with the
    // config's accumulation: peak, phase peaks, the bytes live when the step
    // starts and what the step adds at its peak.
    MemoryEstimate at(std::int64_t batch, std::int64_t seqLen) const;
    // On a GPU (setup.gpu, its compute capability, context override and
    // LibTorch): with programs (notExactOn empty), the step by the device rules on
    // the caching allocator's model, plus the CUDA context and the cuBLAS
    // workspaces. Else the traced tensors plus those: a lower bound (the
    // allocator's blocks, and what a GPU kernel allocates that the CPU's did
    // not, are not in a CPU trace).
    MemoryEstimate at(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const;
    // What a rank holds beyond the traced one-process step: with data
    // parallel (setup.gpus ranks, more than 1) the reducer's gradient
    // buckets (bucketBytes: the trainable bytes); and the data the trace did
    // not draw: the other ranks' rows of the global batch every rank draws
    // (rank 0 also keeps the global batch's validation), and the
    // micro-batches of setup.gradAccum beyond tracedAccum (none when it
    // asks for fewer: the traced ones, on the safe side). 0 for the traced setup.
    std::int64_t bucketBytes(const TrainingSetup& setup) const { return setup.gpus > 1 ? trainableBytes : 0; }
    std::int64_t extraDataBytes(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const;
    std::int64_t beyondTracedBytes(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const
    {
        return bucketBytes(setup) + extraDataBytes(batch, seqLen, setup);
    }
    // Their terms (ddp_buckets, data), where above 0.
    void beyondTracedTerms(MemoryEstimate& e, std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const;
    // at(...).peakBytes alone, without the terms and notes: for fit maps and
    // searches. exactProducts false: each bf16 product's CPU scratch is the
    // largest it took while tracing, not oneDNN's answer for this shape.
    std::int64_t peakBytes(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup,
                           bool exactProducts = true) const;
    // The planner's map over batches x sequences. On the CPU a bf16 product's
    // scratch is oneDNN's answer for its shape (microseconds a new shape), so
    // the cells take the largest each product took while tracing, and the
    // kExactCells cells nearest the budget are evaluated exactly: there the
    // figure and the verdict are the estimate's; elsewhere a figure can differ
    // from it by a product's scratch (tens to hundreds of KiB).
    static constexpr std::size_t kExactCells = 16;
    FitMap fitMap(const TrainingSetup& setup, std::int64_t budget, const std::vector<std::int64_t>& batches,
                  const std::vector<std::int64_t>& seqLens) const;
    // The largest batch at this sequence, and the largest sequence at this
    // batch, whose peak fits budget bytes (0: none; LargestFitting.h).
    std::int64_t largestBatch(std::int64_t seqLen, const TrainingSetup& setup, std::int64_t budget,
                              std::int64_t limit = 1 << 20) const;
    std::int64_t largestSeqLen(std::int64_t batch, const TrainingSetup& setup, std::int64_t budget) const;
    // On a GPU with programs: the tensors the allocator holds from the
    // rules' compiled step (unrounded: under the exact figure by the
    // allocator's reserve), for the map's cells and the fit answers' guesses.
    std::int64_t placedOnGpu(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const;
    // The step on a GPU from the programs: at()'s where notExactOn(setup) is empty (else meaningless).
    MemoryEstimate onGpu(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const;
    // onGpu's peak, tensor peak and reserved peak alone (no terms, phases
    // or notes): the fit map's replays.
    MemoryEstimate peaksOnGpu(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const;
    // onGpu: the step by CUDA's rules, whose kernels (SDPA's by the card's,
    // cuBLAS outside the allocator) are sized by the shape asked, so a CPU
    // kernel that would change past the traced shapes does not enter it.
    void shapeNotes(MemoryEstimate& e, std::int64_t asked, std::int64_t seqLen, bool onGpu = false) const;
    // The sequence the polynomials are evaluated at: the dataset's fixed one,
    // else at least the shortest traced (below it a size may take another
    // form; the peak grows with the sequence, so planning it longer is safe).
    std::int64_t plannedSeqLen(std::int64_t seqLen) const
    {
        return fixedSeqLen > 0 ? fixedSeqLen : std::max(seqLen, segmentAt(seqLen).t0);
    }
};

// The JSON object estimate --derived --json writes under "derived_step", and
// back. fromJson throws InputError naming what is missing.
std::string derivedStepToJson(const DerivedStep& step);
DerivedStep derivedStepFromJson(const std::string& json);

} // namespace tb
