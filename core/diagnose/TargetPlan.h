#pragma once
// What a config becomes on a target: the precision the trainer picks there and
// the memory setup planned for it. The Experiment form's estimate, the memory
// planner, preflight and `trainbench-cli estimate` all resolve a config through
// this one function, so they give one answer for one config and target.

#include <optional>

#include "config/RunConfig.h"
#include "gpu/Capability.h"
#include "gpu/Catalogue.h"
#include "memory/Estimator.h"

namespace tb {

struct TargetPlan {
    ArchitectureSpec arch;       // empty for a TorchScript model (plannableModel false)
    TrainingSetup setup;         // precision resolved for the target, gpu and gpus set
    PrecisionDecision precision; // train.precision on the target; error: it cannot run there
};

// gpu: the device is a GPU of capability cc (nullopt: not known); count replicas.
// Not a GPU: the CPU.
TargetPlan planOnTarget(const RunConfig& config, bool gpu, std::optional<ComputeCapability> cc, int count = 1);
// A catalogue GPU, or the CPU for nullopt.
TargetPlan planOnTarget(const RunConfig& config, const std::optional<GpuTarget>& target);

// A planning precision (fp32 | fp16 | bf16 | bf16-pure) on a GPU of capability
// cc: why preflight refuses it there ("needs compute capability 8.0 or newer,
// this GPU has 7.5"), empty when it can run.
std::string precisionError(const std::string& planned, std::optional<ComputeCapability> cc);

} // namespace tb
