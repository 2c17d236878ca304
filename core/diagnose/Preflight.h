#pragma once
// Preflight: the rules a config must pass before a run is launched, checked
// against the GPU it is planned for (a catalogue entry: the machine running
// the check may have no GPU) or this machine's device, and against the memory
// planner's estimate. Each problem is a Finding with cause, fix and, where one
// exists, an automatic fix.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/ModelFileFacts.h"
#include "config/RunConfig.h"
#include "diagnose/Finding.h"
#include "gpu/Catalogue.h"
#include "gpu/Discovery.h"

namespace tb {

struct DerivedStep;

// This machine, as the launcher sees it (filled by the caller, which may use LibTorch).
struct LocalMachine {
    bool torchBuiltWithCuda = false;
    int torchCudaDevices = 0;         // what LibTorch sees
    std::vector<DeviceInfo> devices;  // what the driver reports (capability, memory)
    std::int64_t hostMemoryBytes = 0; // 0: unknown
};

struct PreflightTarget {
    std::optional<GpuTarget> gpu;      // plan for this GPU (overrides the local device)
    std::optional<LocalMachine> local; // check the local machine (at launch, or without a GPU named)
    // A TorchScript model's facts (inspectModelFile, which loads it); without
    // them its vocabulary is not checked.
    std::optional<ModelFileFacts> model;
    // The plan of a config's own training step, and of a LoRA config with
    // its base in NF4 for the fix that offers it. The CLI derives it
    // (seconds, train/DerivedPlan.h); the window passes what it has derived,
    // or nothing. Without it the memory is not checked (an Info finding says
    // so), and NF4 is not offered. May return null.
    std::function<std::shared_ptr<const DerivedStep>(const RunConfig&)> derivePlan;
};

// Every finding for this config on this target, errors first. Config problems
// (validateConfig) are findings too, so an invalid config is reported, not thrown.
// Without checkFiles a missing data file is left to the run, which fails on it
// and is stored as failed (a file may vanish between the check and the launch).
std::vector<Finding> runPreflight(const RunConfig& config, const PreflightTarget& target, bool checkFiles = true);

// Findings for a config's validation problems: optim.lr -> learning_rate, data.path -> dataset_missing, ...
std::vector<Finding> configIssueFindings(const std::vector<ConfigIssue>& issues);

// The config with a finding's automatic fix applied. Throws ConfigError when
// the result is not a valid config (a fix never should be).
RunConfig applyAutoFix(const RunConfig& config, const std::vector<ConfigChange>& changes);

// Physical memory of this machine in bytes (0 when unknown).
std::int64_t hostMemoryBytes();

} // namespace tb
