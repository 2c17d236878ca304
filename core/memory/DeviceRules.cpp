#include "memory/DeviceRules.h"

#include "memory/CudaAllocatorModel.h"

namespace tb {

CudaStep cudaStepOf(const RecordedStep& cpu, bool rounding)
{
    CudaStep out;
    auto& s = out.step;
    s.resident.reserve(cpu.resident.size());
    const auto rounded = [rounding](std::int64_t bytes) {
        const std::int64_t g = rounding ? CudaAllocatorModel::kMinBlockSize : 1;
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
            index.push_back(-1);
            bytes.push_back(0);
            continue;
        }
        if (op == "aten::scaled_dot_product_attention" && out.unruled.empty()) out.unruled = op;
        auto a = e;
        if (e.firstInOp && e.elementBytes > 1 && (op == "aten::dropout" || op == "aten::feature_dropout")) {
            a.bytes = e.bytes / e.elementBytes;
        }
        a.bytes = rounded(a.bytes);
        a.gemm = {};
        index.push_back(next++);
        bytes.push_back(a.bytes);
        s.events.push_back(a);
    }
    return out;
}

} // namespace tb
