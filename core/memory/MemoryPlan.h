#pragma once
// One model's memory plan: the one interface every panel and command asks
// (the peak at a batch and sequence, the largest batch or sequence that fits
// a budget, the fit map), for built-in, Hugging Face and TorchScript models
// alike: the model's own training step, recorded (memory/DerivedStep.h, made
// by train/DerivedPlan.h memoryPlanOf). No LibTorch here.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memory/Estimator.h"

namespace tb {

struct DerivedStep;

class MemoryPlan {
public:
    // A model's recorded step (arch: its description, for what is not memory: its name, its layers).
    MemoryPlan(std::shared_ptr<const DerivedStep> step, ArchitectureSpec arch);

    // setup says how it trains and where (precision, checkpointing, LoRA, the GPU); the batch and sequence are these.
    MemoryEstimate at(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const;
    // The largest batch at this sequence, and the largest sequence at this
    // batch, whose peak fits budget bytes; 0 when none does.
    std::int64_t largestBatch(std::int64_t seqLen, const TrainingSetup& setup, std::int64_t budget,
                              std::int64_t limit = std::int64_t{1} << 20) const;
    std::int64_t largestSequence(std::int64_t batch, const TrainingSetup& setup, std::int64_t budget) const;
    // The three at a point, as the Memory planner's sliders ask them: the
    // estimate, the largest batch at its sequence and (withSequence) the
    // largest sequence at its batch. On a GPU each is replays of the
    // caching allocator's model (milliseconds each): the two searches run
    // beside the estimate on the machine's other cores.
    struct PointAnswers {
        MemoryEstimate estimate;
        std::int64_t largestBatch = 0, largestSequence = 0;
    };
    PointAnswers answersAt(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup, std::int64_t budget,
                           std::int64_t batchLimit, bool withSequence) const;
    FitMap fitMap(const TrainingSetup& setup, std::int64_t budget, const std::vector<std::int64_t>& batches,
                  const std::vector<std::int64_t>& seqLens) const;
    // Why the plan on this setup is not the step the trainer takes there
    // (a recorded step on a GPU whose kernels have no rule: a lower bound),
    // empty when it is.
    std::string notExactOn(const TrainingSetup& setup) const;

    const ArchitectureSpec& arch() const { return m_arch; }
    // The recorded step, for what shows how it was recorded.
    const DerivedStep& step() const { return *m_step; }

private:
    ArchitectureSpec m_arch;
    std::shared_ptr<const DerivedStep> m_step;
};

} // namespace tb
