#include "memory/DeviceRules.h"

#include "memory/CudaAllocatorModel.h"
#include "memory/FusedAttention.h"

#include <optional>
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
    std::vector<char> live(index.size(), 1); // not yet released
    for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<std::int32_t>(i);
    auto next = static_cast<std::int32_t>(cpu.resident.size());
    const auto keep = [&](RecordedStep::Event a) {
        a.bytes = rounded(a.bytes);
        a.gemm = {};
        index.push_back(next++);
        bytes.push_back(a.bytes);
        live.push_back(1);
        s.events.push_back(a);
    };
    const auto drop = [&] {
        index.push_back(-1);
        bytes.push_back(0);
        live.push_back(0);
    };
    const auto unruled = [&out](const std::string& why) {
        if (out.unruled.empty()) out.unruled = why;
    };
    // A block of the GPU's own (no CPU block stands for it), and a release.
    const auto own = [&](std::int64_t blockBytes, const RecordedStep::Event& like) {
        RecordedStep::Event a = like;
        a.bytes = rounded(blockBytes);
        a.firstInOp = false;
        a.hasShape = false;
        a.gemm = {};
        s.events.push_back(a);
        return next++;
    };
    const auto release = [&](std::int32_t block, std::int64_t blockBytes, std::uint8_t phase) {
        RecordedStep::Event r;
        r.bytes = -rounded(blockBytes);
        r.block = block;
        r.phase = phase;
        s.events.push_back(r);
    };
    // The attention softmax autocast runs in fp32 on CUDA (the GPT family's:
    // train/Layers.cpp causalAttention, softmax(att, -1) on 16-bit scores).
    // CUDA's autocast calls softmax(x, dim, float) (autocast_mode.cpp,
    // fp32_set_opt_dtype), which (native/SoftMax.cpp softmax) runs fp16
    // through the half_to_float kernel and casts bf16 up first (a copy freed
    // as it returns); the output is fp32, saved by its backward. The product
    // with the values takes it cast down (att.to(values' dtype): a copy, made
    // before the product's own allocation, and saved by it until its
    // backward has run). The CPU's one 16-bit map (saved by both) becomes
    // the fp32 output, and the copy a block of the GPU's own: released as the
    // map's backward begins, or with the map where no backward saved it (a
    // checkpointed block's first forward). The backward
    // (_softmax_backward_data, which the CPU runs on the 16-bit map) gets the
    // product's gradient cast up (ToCopyBackward), and for bf16 makes an fp32
    // gradient cast down after it.
    struct Upcast {
        std::int32_t map = -1, copy = -1; // the CPU's block of the map; the GPU's block of the copy
        std::int64_t copyBytes = 0;
        bool released = false;
    };
    std::vector<Upcast> upcasts;
    struct PendingCopy {
        RecordedStep::Event like;
        std::int32_t map = -1;
    };
    std::optional<PendingCopy> pendingCopy; // made before the next allocation
    const auto releaseCopyOf = [&](std::int32_t mapBlock, std::uint8_t phase) {
        for (auto it = upcasts.rbegin(); it != upcasts.rend(); ++it) {
            if (it->map != mapBlock || it->released) continue;
            release(it->copy, it->copyBytes, phase);
            it->released = true;
            return;
        }
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
            live[at] = 0;
            if (index[at] < 0) continue;
            releaseCopyOf(e.block, e.phase);
            auto r = e;
            r.block = index[at];
            r.bytes = -bytes[at];
            s.events.push_back(r);
            continue;
        }
        const auto& op = cpu.opName(e);
        if (pendingCopy) {
            const auto& copy = *pendingCopy;
            if (op == "aten::dropout" || op == "aten::feature_dropout") {
                unruled(op + " of an attention map autocast made fp32 (CUDA's softmax)");
            }
            upcasts.push_back({copy.map, own(copy.like.bytes, copy.like), copy.like.bytes, false});
            pendingCopy.reset();
        }
        if (op == "aten::softmax" && e.firstInOp && e.autocast && e.elementBytes == 2 && !e.opDtype) {
            const auto mapBlock = static_cast<std::int32_t>(index.size());
            std::int32_t up = -1;
            if (!target.fp16) up = own(2 * e.bytes, e); // bf16 cast up
            auto a = e;
            a.bytes = 2 * e.bytes;
            keep(a);
            if (up >= 0) release(up, 2 * e.bytes, e.phase);
            pendingCopy = PendingCopy{e, mapBlock};
            continue;
        }
        if (op == "aten::_softmax_backward_data" && e.firstInOp && e.elementBytes == 2) {
            while (!upcasts.empty() && upcasts.back().released) upcasts.pop_back();
            if (!upcasts.empty()) {
                const auto u = upcasts.back();
                upcasts.pop_back();
                release(u.copy, u.copyBytes, e.phase);
                const auto gradUp = own(2 * e.bytes, e);
                // The product's 16-bit gradient of the map goes once cast up
                // (the CPU frees it after the softmax's backward): the latest
                // block of its size still live.
                for (auto i = static_cast<std::int64_t>(index.size()) - 1; i >= 0; --i) {
                    const auto at = static_cast<std::size_t>(i);
                    if (index[at] < 0 || !live[at] || bytes[at] != rounded(e.bytes)) continue;
                    release(index[at], e.bytes, e.phase);
                    index[at] = -1; // its CPU release takes nothing more
                    break;
                }
                if (target.fp16) {
                    keep(e);
                    release(gradUp, 2 * e.bytes, e.phase);
                } else {
                    const auto grad32 = own(2 * e.bytes, e);
                    release(gradUp, 2 * e.bytes, e.phase);
                    keep(e); // cast down
                    release(grad32, 2 * e.bytes, e.phase);
                }
                continue;
            }
        }
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
