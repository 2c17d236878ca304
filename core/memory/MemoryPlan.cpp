#include "memory/MemoryPlan.h"

#include "memory/DerivedStep.h"

#include <future>
#include <system_error>
#include <thread>

namespace tb {

MemoryPlan::MemoryPlan(std::shared_ptr<const DerivedStep> step, ArchitectureSpec arch)
    : m_arch(std::move(arch)), m_step(std::move(step))
{
}

MemoryEstimate MemoryPlan::at(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup) const
{
    return m_step->at(batch, seqLen, setup);
}

std::int64_t MemoryPlan::largestBatch(std::int64_t seqLen, const TrainingSetup& setup, std::int64_t budget,
                                      std::int64_t limit) const
{
    return m_step->largestBatch(seqLen, setup, budget, limit);
}

std::int64_t MemoryPlan::largestSequence(std::int64_t batch, const TrainingSetup& setup, std::int64_t budget) const
{
    return m_step->largestSeqLen(batch, setup, budget);
}

MemoryPlan::PointAnswers MemoryPlan::answersAt(std::int64_t batch, std::int64_t seqLen, const TrainingSetup& setup,
                                               std::int64_t budget, std::int64_t batchLimit, bool withSequence) const
{
    PointAnswers out;
    const auto inTurn = [&] {
        out.estimate = at(batch, seqLen, setup);
        out.largestBatch = largestBatch(seqLen, setup, budget, batchLimit);
        if (withSequence) out.largestSequence = largestSequence(batch, setup, budget);
        return out;
    };
    // (On the CPU each is arithmetic, the estimate's terms a walk of the
    // step: under a millisecond, about a thread's start.)
    if (!setup.gpu || std::thread::hardware_concurrency() < 2) return inTurn();
    std::future<std::int64_t> batches, sequences;
    try {
        batches = std::async(std::launch::async, [&] { return largestBatch(seqLen, setup, budget, batchLimit); });
        if (withSequence) sequences = std::async(std::launch::async, [&] { return largestSequence(batch, setup, budget); });
    } catch (const std::system_error&) {
        return inTurn(); // no thread to be had (a started search finishes first: its future waits)
    }
    out.estimate = at(batch, seqLen, setup); // (on a throw the futures wait for their work as they go)
    out.largestBatch = batches.get();
    if (withSequence) out.largestSequence = sequences.get();
    return out;
}

FitMap MemoryPlan::fitMap(const TrainingSetup& setup, std::int64_t budget, const std::vector<std::int64_t>& batches,
                          const std::vector<std::int64_t>& seqLens) const
{
    return m_step->fitMap(setup, budget, batches, seqLens);
}

std::string MemoryPlan::notExactOn(const TrainingSetup& setup) const
{
    return setup.gpu ? m_step->notExactOn(setup) : std::string();
}

} // namespace tb
