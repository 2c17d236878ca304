#include "memory/DeviceRules.h"

#include "memory/CudaAllocatorModel.h"
#include "memory/FusedAttention.h"

#include <set>

namespace tb {
namespace {

// CUDA's autocast runs these in fp32 (LibTorch's autocast_mode.cpp: its
// fp32 list for CUDA, and its fp32_set_opt_dtype list, whose operators run
// as called when given a dtype); the CPU's autocast leaves them in the
// input's dtype.
bool cudaAutocastFp32(const std::string& op, bool dtypeGiven)
{
    static const std::set<std::string> always{
        "aten::layer_norm", "aten::native_layer_norm", "aten::group_norm", "aten::rsqrt", "aten::pow", "aten::exp",
        "aten::log", "aten::log1p", "aten::reciprocal", "aten::logsumexp", "aten::norm", "aten::frobenius_norm",
        "aten::softplus", "aten::cross_entropy_loss", "aten::cosine_similarity", "aten::erfinv"};
    static const std::set<std::string> unlessDtype{"aten::softmax", "aten::log_softmax", "aten::sum", "aten::cumsum",
                                                   "aten::cumprod", "aten::prod", "aten::linalg_vector_norm"};
    return always.count(op) > 0 || (!dtypeGiven && unlessDtype.count(op) > 0);
}

} // namespace

CudaStep cudaStepOf(const RecordedStep& cpu, const CudaTarget& target)
{
    CudaStep out;
    auto& s = out.step;
    s.resident.reserve(cpu.resident.size());
    const auto rounded = [&target](std::int64_t bytes) {
        const std::int64_t g = target.exact ? CudaAllocatorModel::kMinBlockSize : 1;
        return (bytes + g - 1) / g * g;
    };
    for (const auto b : cpu.resident) s.resident.push_back(rounded(b));
    s.ops = cpu.ops;
    s.parameterElements = cpu.parameterElements;
    s.trainableBytes = cpu.trainableBytes;
    // Each block's index and bytes on the GPU (-1: not made there).
    std::vector<std::int32_t> index(cpu.resident.size());
    std::vector<std::int64_t> bytes(s.resident.begin(), s.resident.end());
    for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<std::int32_t>(i);
    auto next = static_cast<std::int32_t>(cpu.resident.size());
    const auto keep = [&](RecordedStep::Event a) {
        a.bytes = rounded(a.bytes);
        a.gemm = {};
        index.push_back(next++);
        bytes.push_back(a.bytes);
        s.events.push_back(a);
    };
    const auto drop = [&] {
        index.push_back(-1);
        bytes.push_back(0);
    };
    const auto unruled = [&out](const std::string& why) {
        if (out.unruled.empty()) out.unruled = why;
    };
    // The scaled_dot_product_attention call (or its backward) running: its
    // allocations so far, and what the GPU's kernel keeps.
    int sdpaAllocations = 0;
    FusedAttentionBytes kernel;
    std::int64_t queryBytes = 0, cpuLse = 0;
    s.events.reserve(cpu.events.size());
    for (const auto& e : cpu.events) {
        if (e.bytes == 0) continue; // a bf16 product's CPU scratch
        if (e.bytes < 0) {
            if (e.block < 0 || static_cast<std::size_t>(e.block) >= index.size()) {
                s.events.push_back(e); // made before recording: takes nothing off
                continue;
            }
            const auto at = static_cast<std::size_t>(e.block);
            if (index[at] < 0) continue;
            auto r = e;
            r.block = index[at];
            r.bytes = -bytes[at];
            s.events.push_back(r);
            continue;
        }
        const auto& op = cpu.opName(e);
        if (op == "trainbench::generator_state") {
            drop();
            continue;
        }
        const bool sdpaForward = op == "aten::scaled_dot_product_attention";
        const bool sdpaBackward = op == "aten::_scaled_dot_product_flash_attention_for_cpu_backward";
        if (sdpaForward || sdpaBackward) {
            if (e.firstInOp) {
                sdpaAllocations = 0;
                kernel = {};
                if (!e.hasShape) {
                    unruled(op + " without its query's sizes");
                } else if (e.opDropout) {
                    unruled(op + " with dropout (the CPU's math path; a GPU's kernel drops in place)");
                } else {
                    const auto& q = e.shape;
                    kernel = gpuFusedAttentionBytes(q[0], q[1], q[2], q[3], e.elementBytes, target.computeCapability,
                                                    target.fp16, false, target.exact);
                    queryBytes = q[0] * q[1] * q[2] * q[3] * e.elementBytes;
                    cpuLse = q[0] * q[1] * q[2] * 4; // the CPU kernel's log-sum-exp, fp32 [B, T, H]
                    if (kernel.math) unruled(op + " on a card neither fused kernel takes (LibTorch's math fallback)");
                    else if (!kernel.mergeCopies) {
                        unruled(op + " by the memory-efficient kernel, whose output is laid out otherwise than the CPU's");
                    }
                }
            }
            const int k = sdpaAllocations++;
            if (!out.unruled.empty() || !kernel.fused) {
                keep(e);
                continue;
            }
            // Forward: the output (q's layout, as on the CPU) and the
            // log-sum-exp are kept; the CPU kernel's per-thread blocks are not
            // a GPU's. Backward: the q, k and v gradients, then (flash) the
            // softmax_d and dq accumulator while the kernel runs.
            const int kept = sdpaForward ? 2 : 3;
            if (k >= kept) {
                drop();
                continue;
            }
            auto a = e;
            const std::int64_t expected = sdpaForward && k == 1 ? cpuLse : queryBytes;
            if (sdpaForward && k == 1) a.bytes = kernel.lse;
            if (e.bytes != expected) unruled(op + ": allocation " + std::to_string(k) + " is not what its kernel keeps");
            keep(a);
            if (sdpaBackward && k == 2 && kernel.backwardTemps > 0) {
                // A block of the GPU's own (no CPU block stands for it).
                RecordedStep::Event temps = e;
                temps.bytes = rounded(kernel.backwardTemps);
                temps.firstInOp = false;
                temps.hasShape = false;
                temps.gemm = {};
                s.events.push_back(temps);
                RecordedStep::Event release;
                release.bytes = -temps.bytes;
                release.block = next++;
                release.phase = e.phase;
                s.events.push_back(release);
            }
            continue;
        }
        if (e.autocast && e.elementBytes == 2 && cudaAutocastFp32(op, e.opDtype)) {
            unruled(op + " of a 16-bit tensor under autocast (CUDA's runs it in fp32)");
        }
        auto a = e;
        if (e.firstInOp && e.elementBytes > 1 && (op == "aten::dropout" || op == "aten::feature_dropout")) {
            a.bytes = e.bytes / e.elementBytes;
        }
        keep(a);
    }
    return out;
}

} // namespace tb
