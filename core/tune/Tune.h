#pragma once
// Tune: the fastest configuration of an experiment that fits a memory budget,
// found by plan. Every candidate (micro-batch and gradient accumulation,
// activation checkpointing, precision, attention path) is planned by the same
// planner, verdict and preflight as everywhere else; what does not fit or does
// not run is discarded with the reason; the rest are ranked by a throughput
// model. Measuring the best few on this machine is TuneMeasure.h's (it needs
// LibTorch); this file has none.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "diagnose/Preflight.h"
#include "gpu/Catalogue.h"
#include "memory/Estimator.h"
#include "memory/Verdict.h"

namespace tb {

// What a machine does per second, for ranking candidates (not for promising a
// figure): dense products at two sizes (rows of a [rows, hidden] x [hidden,
// 4 hidden] product, so small micro-batches are slower per token), memory
// traffic, and the fixed cost of dispatching one operator.
struct ThroughputMachine {
    std::string source;              // "matmul probe on this CPU", "catalogue: Tesla T4"
    double fp32Flops = 0;            // at large rows
    double halfFlops = 0;            // bf16 or fp16 products, at large rows (0: as fp32)
    double halfRowsFlops = 0;        // the rows at which a product runs at half its large-rows rate
    double bytesPerSecond = 0;
    double opSeconds = 0;            // one operator's dispatch
};

// A catalogue card's figures (its data sheet's FLOPS and bandwidth, at
// typical efficiencies of an eager LibTorch step).
ThroughputMachine throughputFromCatalogue(const CatalogueGpu& gpu);

// Predicted tokens per second of one training step (every micro-batch and the
// optimizer) on a machine.
// trainableParameters: the plan's (MemoryEstimate::trainableParameters),
// whose optimizer state the step reads and writes.
double predictedTokensPerSecond(const ArchitectureSpec& arch, const TrainingSetup& setup, const ThroughputMachine& machine,
                                std::int64_t trainableParameters);

struct TuneOptions {
    // nullopt: this machine (the CPU, or its GPU when the config trains there,
    // with `local` describing it); else a catalogue card.
    std::optional<GpuTarget> gpu;
    std::optional<LocalMachine> local;
    std::int64_t budgetBytes = 0; // > 0: the memory a step may use (required without gpu)
    bool keepEffectiveBatch = false;
    bool sdpaAvailable = false;   // this build has scaled_dot_product_attention (LibTorch 2)
    std::int64_t maxBatch = 4096;
};

struct TuneCandidate {
    RunConfig config; // the base config with this candidate's choices
    int batch = 1;
    int gradAccum = 1;
    bool checkpointing = false;
    std::string precision;  // as the target runs it: fp32 | fp16 | bf16 | bf16-pure
    std::string attention;  // eager | sdpa
    std::int64_t peakBytes = 0;
    MemoryVerdict verdict = MemoryVerdict::Fits;
    std::string rejected;   // non-empty: why it is not proposed (does not fit, does not run, a preflight error)
    double predictedTokensPerSecond = 0;
    // Measured on this machine (TuneMeasure.h); < 0: not measured.
    double measuredTokensPerSecond = -1;
    std::int64_t measuredPeakBytes = -1;
    std::string measureError;

    // "batch 64 x accumulation 2, checkpointing, bf16, eager"
    std::string describe() const;
};

struct TuneResult {
    std::string targetLabel;      // "Tesla T4", "this machine's CPU"
    std::int64_t budgetBytes = 0;
    ThroughputMachine machine;
    // Every candidate planned: those that fit first, best predicted first, then the rejected.
    std::vector<TuneCandidate> candidates;
    int winner = -1; // index in candidates; -1: nothing fits
    // When nothing fits: the smallest changes that would, one sentence each.
    std::vector<std::string> nothingFits;
    // The winner against the base config: "train.batch_size: 32 -> 64".
    std::vector<std::string> changes;
    // Set with the winner when it trains another effective batch (batch x
    // accumulation) than the config, which changes what the run learns.
    std::string effectiveBatchNote;
    std::vector<std::string> notes;
    // The measured over the predicted, the median over the measured
    // candidates (calibratePredictions); 0 until something was measured.
    double calibration = 0;
};

// Plans every candidate and ranks those that fit. Throws InputError for a
// config it cannot tune (invalid, a TorchScript model) or a missing budget.
TuneResult planTune(const RunConfig& base, const TuneOptions& options, const ThroughputMachine& machine);

// The winner: the fastest measured candidate whose measured peak is within the
// budget, else the best predicted that did not fail to measure; a tight fit
// (under 10% to spare) only when nothing fits with room. Sets result.winner
// and result.changes.
void chooseWinner(TuneResult& result, const RunConfig& base);

// Scales every prediction by the median of measured / predicted over the
// candidates measured, so the unmeasured are shown in the same units as the
// measured (the order is the model's, unchanged). Says so in a note.
void calibratePredictions(TuneResult& result);

// The indices of the candidates worth measuring, at most `count`: the best
// predicted that fit (with room, where any does), spread so that two of one
// setup are at least twice apart in batch before any closer pair is taken.
std::vector<int> candidatesToMeasure(const TuneResult& result, int count);

std::string tuneResultToJson(const TuneResult& result);

} // namespace tb
