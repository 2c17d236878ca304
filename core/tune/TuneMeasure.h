#pragma once
// Tune's part that needs LibTorch: the throughput model's figures for this
// machine (a fraction of a second of products, copies and small operators,
// with the trainer's threads), and measuring candidates for a few real
// training steps. `trainbench-cli tune` runs them; the window's Tune… runs
// that command as a process of its own.

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "tune/Tune.h"

namespace tb {

// Products of [rows, hidden] x [hidden, 4 hidden] (hidden clamped to 64..1024)
// at two row counts in fp32 and bf16, a large copy and a run of one-element
// additions, on the device a config trains on ("cpu" or "cuda"), with its
// train.threads applied.
ThroughputMachine probeThroughput(const RunConfig& config, const std::string& device);

struct TuneMeasureProgress {
    // Called before each candidate: its index in the result, how many are
    // measured before it, and of how many.
    std::function<void(int candidate, int done, int total)> onCandidate;
    const std::atomic<bool>* cancel = nullptr; // set: the candidate in progress is the last
};

// Trains each candidate for `steps` steps after one untimed step (no store,
// no checkpoints) and records its tokens per second over the timed steps and
// its peak tensor memory; a candidate that fails keeps its error. Then
// chooses the winner again (chooseWinner).
void measureCandidates(TuneResult& result, const RunConfig& base, const std::vector<int>& which, int steps,
                       const TuneMeasureProgress& progress = {});

} // namespace tb
