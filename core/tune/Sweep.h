#pragma once
// Sweeps: a sweep file in the shape of a W&B sweep configuration (as JSON),
// its trials as config changes, and the early-termination rule. No LibTorch,
// no store: the runner (trainbench-cli sweep) keeps the queue in the store.
//
//   {"name": "lr", "method": "grid" | "random",
//    "metric": {"name": "val_loss", "goal": "minimize" | "maximize"},
//    "parameters": {"optim.lr": {"min": 1e-4, "max": 1e-2, "distribution": "log_uniform_values"},
//                   "optim.weight_decay": {"value": 0.01},
//                   "optim.warmup_steps": {"min": 0, "max": 100, "distribution": "int_uniform"},
//                   "train.batch_size": {"values": [16, 32]}},
//    "run_cap": 8, "seed": 1,
//    "early_terminate": {"type": "median", "min_step": 50}}

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/RunConfig.h"

namespace tb {

struct SweepParameter {
    std::string path;                 // a config field, "optim.lr"
    std::vector<std::string> values;  // compact JSON of each value (values, or one value)
    // A range (random search): uniform | log_uniform_values | int_uniform | q_uniform
    std::string distribution;
    double min = 0, max = 0, q = 0;
};

struct SweepSpec {
    std::string name;
    std::string method = "grid"; // grid | random
    std::string metric = "val_loss";
    bool maximize = false;
    std::vector<SweepParameter> parameters; // in the file's order
    int runCap = 0;                         // random: the number of trials; grid: at most this many (0: all)
    std::uint64_t seed = 1;
    // Early termination: a trial whose metric at an evaluation step is worse
    // than the median of the other trials' at that step is stopped, from
    // minStep on (0: never).
    bool earlyTerminate = false;
    int minStep = 0;
};

// Parses and checks a sweep file's text. Throws InputError naming the field
// and what to do ("parameters.optim.lr: give values, value, or min and max").
SweepSpec parseSweep(const std::string& json, const std::string& source = "sweep");
SweepSpec loadSweepFile(const std::string& path);

// One trial: each parameter's value as compact JSON, in the spec's order.
struct SweepTrial {
    int index = 0; // 0-based, in the order they are run
    std::vector<std::pair<std::string, std::string>> values;
    std::string describe() const; // "optim.lr=0.003 train.batch_size=16"
    std::string toJson() const;   // {"optim.lr": 0.003, ...}
};

// Every trial of a grid (the product of the values, the last parameter
// varying fastest), or runCap random draws (seeded: the same file gives the
// same trials). Throws InputError for a grid too large (over 10000 trials) or
// a random search without run_cap.
std::vector<SweepTrial> sweepTrials(const SweepSpec& spec);

// The base config with a trial's values set, validated as a config file is
// (the base's folder kept for relative paths). Throws ConfigError naming the
// field when a value does not make a valid config.
RunConfig trialConfig(const RunConfig& base, const SweepTrial& trial);

// The rule of early termination: whether `value` is worse than the median of
// `others` (the other trials' metric at the same step) for the goal. Needs at
// least two others; NaN is worse than anything.
bool worseThanMedian(double value, std::vector<double> others, bool maximize);

// The metric names a run stores at evaluation steps or every step.
const std::vector<std::string>& sweepMetricNames();

} // namespace tb
