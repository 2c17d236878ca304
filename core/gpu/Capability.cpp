#include "gpu/Capability.h"

#include <cstdio>

namespace tb {
namespace {

struct Rule {
    const char* feature;
    const char* title;
    int major;
    int minor;
    const char* meaning;
};

// Thresholds from NVIDIA's architecture documents: Volta (7.0) introduced fp16
// tensor cores, Turing (7.5) int8 tensor cores, Ampere (8.0) bf16 and tf32
// tensor cores (FlashAttention-2 requires Ampere or newer), Ada (8.9) fp8.
const Rule kRules[] = {
    {"fp16_tensor_cores", "fp16 tensor cores", 7, 0, "fast fp16 matrix products; mixed precision with loss scaling"},
    {"int8_tensor_cores", "int8 tensor cores", 7, 5, "fast int8 inference (quantised models)"},
    {"bf16", "bf16 (native)", 8, 0, "bf16 mixed precision without loss scaling"},
    {"tf32", "tf32", 8, 0, "fp32 matrix products on tensor cores with a 10-bit mantissa"},
    {"flash_attention_2", "FlashAttention-2", 8, 0, "memory-efficient fused attention kernels"},
    {"fp8", "fp8", 8, 9, "fp8 matrix products (Transformer Engine)"},
};

CapabilityAnswer answer(const Rule& r, ComputeCapability cc)
{
    CapabilityAnswer a;
    a.feature = r.feature;
    a.title = r.title;
    a.meaning = r.meaning;
    const std::string need = std::to_string(r.major) + "." + std::to_string(r.minor);
    if (!cc.known()) {
        a.reason = std::string(r.feature) + ": unknown — compute capability unknown";
        return a;
    }
    a.supported = cc.atLeast(r.major, r.minor);
    a.reason = std::string(r.feature) + (a.supported ? ": yes — compute capability " + cc.text() + " >= " + need
                                                     : ": no — compute capability " + cc.text() + " < " + need);
    return a;
}

} // namespace

std::optional<ComputeCapability> ComputeCapability::parse(const std::string& text)
{
    int major = 0, minor = 0;
    char tail = 0;
    if (std::sscanf(text.c_str(), "%d.%d%c", &major, &minor, &tail) != 2 || major <= 0 || minor < 0) return std::nullopt;
    return ComputeCapability{major, minor};
}

std::vector<CapabilityAnswer> capabilitiesOf(ComputeCapability cc)
{
    std::vector<CapabilityAnswer> out;
    for (const auto& r : kRules) out.push_back(answer(r, cc));
    return out;
}

CapabilityAnswer capability(ComputeCapability cc, const std::string& feature)
{
    for (const auto& r : kRules) {
        if (feature == r.feature) return answer(r, cc);
    }
    return {feature, feature, false, feature + ": unknown feature", ""};
}

PrecisionDecision decidePrecision(const std::string& requested, std::optional<ComputeCapability> cuda)
{
    PrecisionDecision d;
    if (!cuda) {
        if (requested == "fp16") {
            d.shortfall = "needs a CUDA device";
            d.error = "train.precision: fp16 " + d.shortfall + "; on the CPU use \"fp32\" or \"bf16\"";
        }
        d.precision = requested == "auto" || requested == "fp16" ? "fp32" : requested; // bf16-pure stays itself
        d.reason = requested == "auto" ? "auto on the CPU: fp32" : requested + " as requested";
        return d;
    }
    const auto bf16 = capability(*cuda, "bf16");
    if ((requested == "bf16" || requested == "bf16-pure") && cuda->known() && !bf16.supported) {
        d.shortfall = "needs compute capability 8.0 or newer, this GPU has " + cuda->text();
        d.error = "train.precision: " + requested + " " + d.shortfall
            + "; use \"fp16\" (with loss scaling) or \"auto\"";
    }
    if (requested == "bf16-pure") {
        // Weights, gradients and optimizer state in bf16 (torchtune, Lightning's bf16-true).
        d.precision = "bf16-pure";
        d.fp32TrainableWeights = false;
        d.reason = "bf16-pure as requested: weights, gradients and optimizer state in bf16";
    } else if (requested == "fp32") {
        d.precision = "fp32";
        d.reason = "fp32 as requested";
    } else if (requested == "bf16" || (requested == "auto" && bf16.supported)) {
        d.precision = "bf16";
        d.reason = requested == "auto" ? "auto: " + bf16.reason : "bf16 as requested";
    } else {
        // fp16 on a GPU: the scaler needs fp32 trainable weights (autocast keeps them fp32).
        d.precision = "fp16";
        d.lossScaling = true;
        d.reason = requested == "auto" ? "auto: " + bf16.reason + ", so fp16 with dynamic loss scaling and fp32 weights"
                                       : "fp16 as requested, with dynamic loss scaling and fp32 weights";
    }
    return d;
}

} // namespace tb
