#include "diagnose/TargetPlan.h"

namespace tb {

TargetPlan planOnTarget(const RunConfig& config, bool gpu, std::optional<ComputeCapability> cc, int count)
{
    TargetPlan plan;
    // A TorchScript model has no architecture to plan; its setup still resolves.
    if (plannableModel(config)) plan.arch = architectureFor(config);
    plan.setup = setupFor(config);
    // A GPU of unknown capability is still a GPU: decidePrecision takes an
    // unknown capability as "cannot tell", not as the CPU.
    const std::optional<ComputeCapability> device = gpu ? std::optional<ComputeCapability>(cc.value_or(ComputeCapability{}))
                                                        : std::nullopt;
    plan.precision = decidePrecision(config.train.precision, device);
    if (plan.setup.precision != "bf16-pure") plan.setup.precision = plan.precision.precision;
    // Weights loaded in bf16 and trained in bf16 ("auto" resolved to it
    // here) are pure bf16, as setupFor plans an explicit "bf16".
    if (plan.setup.precision == "bf16" && config.train.weightsDtype == "bf16" && config.lora.rank == 0) {
        plan.setup.precision = "bf16-pure";
    }
    plan.setup.gpu = gpu;
    if (gpu && cc && cc->known()) plan.setup.computeCapability = cc->major * 10 + cc->minor;
    // A GPU target's count is its data-parallel replicas; on the CPU the
    // config's train.world_size is (setupFor).
    if (gpu) plan.setup.gpus = count;
    return plan;
}

TargetPlan planOnTarget(const RunConfig& config, const std::optional<GpuTarget>& target)
{
    if (!target) return planOnTarget(config, false, std::nullopt);
    const auto cc = target->gpu.cc.known() ? std::optional<ComputeCapability>(target->gpu.cc) : std::nullopt;
    return planOnTarget(config, true, cc, target->count);
}

std::string precisionError(const std::string& planned, std::optional<ComputeCapability> cc)
{
    const std::string requested = planned == "bf16-pure" ? "bf16" : planned;
    return decidePrecision(requested, cc.value_or(ComputeCapability{})).shortfall;
}

} // namespace tb
