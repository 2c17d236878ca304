#include "memory/DeviceRules.h"

#include "memory/CudaAllocatorModel.h"

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
        if (out.unruled.empty()) {
            if (op == "aten::scaled_dot_product_attention") out.unruled = op;
            else if (e.autocast && e.elementBytes == 2 && cudaAutocastFp32(op, e.opDtype)) out.unruled = op + " of a 16-bit tensor under autocast (CUDA's runs it in fp32)";
        }
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
