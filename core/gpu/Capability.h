#pragma once
// What a GPU can do, decided from its compute capability by one table of
// rules. Every answer carries its reason, e.g.
// "bf16: no — compute capability 7.5 < 8.0". Creating a bf16 tensor is not
// support: PyTorch's is_bf16_supported() says true on a T4 through emulation
// (docs/known-failures.md, "bf16 on a GPU without native bf16").

#include <optional>
#include <string>
#include <vector>

namespace tb {

struct ComputeCapability {
    int major = 0;
    int minor = 0;
    bool known() const { return major > 0; }
    bool atLeast(int maj, int min) const { return major > maj || (major == maj && minor >= min); }
    std::string text() const { return std::to_string(major) + "." + std::to_string(minor); }
    // "7.5" -> {7, 5}; nullopt for anything else.
    static std::optional<ComputeCapability> parse(const std::string& text);
};

struct CapabilityAnswer {
    std::string feature; // "bf16"
    std::string title;   // "bf16 (native)"
    bool supported = false;
    std::string reason;  // "bf16: no — compute capability 7.5 < 8.0"
    std::string meaning; // what it is for, one sentence
};

// The rule set, in display order: fp16 tensor cores 7.0, int8 tensor cores
// 7.5, bf16 8.0, tf32 8.0, FlashAttention-2 8.0, fp8 8.9.
std::vector<CapabilityAnswer> capabilitiesOf(ComputeCapability cc);
CapabilityAnswer capability(ComputeCapability cc, const std::string& feature);

// The precision a run will use, decided before any model is built.
struct PrecisionDecision {
    std::string precision; // fp32 | fp16 | bf16 (mixed) | bf16-pure
    bool lossScaling = false;
    bool fp32TrainableWeights = true;
    std::string reason;
    std::string error; // non-empty: the request cannot work on this device
    std::string shortfall; // with error: what the device lacks ("needs compute capability 8.0 or newer, this GPU has 7.5")
};
// cuda: the target GPU's capability; nullopt for the CPU.
PrecisionDecision decidePrecision(const std::string& requested, std::optional<ComputeCapability> cuda);

} // namespace tb
