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

using RecordedEvent = RecordedStep::Event;

// What the rules ask of an event's operator, found once per operator name
// (a 7B step has about 16,000 events and a few dozen names).
enum OpKind : std::uint16_t {
    kDropout = 1 << 0,         // aten::dropout, aten::feature_dropout
    kSoftmax = 1 << 1,         // aten::softmax
    kSoftmaxBackward = 1 << 2, // aten::_softmax_backward_data
    kMul = 1 << 3,             // aten::mul
    kGeneratorState = 1 << 4,  // trainbench::generator_state
    kSdpa = 1 << 5,            // the forward
    kSdpaBackward = 1 << 6,    // the CPU kernel's backward
    kFp32Always = 1 << 7,      // cudaAutocastFp32 whether a dtype was given or not
    kFp32UnlessDtype = 1 << 8, // cudaAutocastFp32 where none was
};

std::uint16_t opKind(const std::string& op)
{
    std::uint16_t k = 0;
    if (op == "aten::dropout" || op == "aten::feature_dropout") k |= kDropout;
    if (op == "aten::softmax") k |= kSoftmax;
    if (op == "aten::_softmax_backward_data") k |= kSoftmaxBackward;
    if (op == "aten::mul") k |= kMul;
    if (op == "trainbench::generator_state") k |= kGeneratorState;
    if (op == "aten::scaled_dot_product_attention") k |= kSdpa;
    if (op == "aten::_scaled_dot_product_flash_attention_for_cpu_backward") k |= kSdpaBackward;
    if (cudaAutocastFp32(op, true)) k |= kFp32Always;
    else if (cudaAutocastFp32(op, false)) k |= kFp32UnlessDtype;
    return k;
}

// The GPU's step, made from the CPU's event by event: each CPU block kept
// (sized for the GPU), dropped, or joined by blocks of the GPU's own.
class CudaStepBuilder {
public:
    CudaStepBuilder(const RecordedStep& cpu, const CudaTarget& target);
    CudaStep build();

private:
    std::int64_t rounded(std::int64_t bytes) const;
    void keep(RecordedEvent a);
    void drop();
    std::int32_t own(std::int64_t blockBytes, const RecordedEvent& like);
    void release(std::int32_t block, std::int64_t blockBytes, std::uint8_t phase);
    void unruled(const std::string& why);
    void onRelease(const RecordedEvent& e);
    void onAllocation(const RecordedEvent& e);
    std::uint16_t kindOf(const RecordedEvent& e) const;
    bool autocastSoftmax(const RecordedEvent& e, std::uint16_t kind);
    bool droppedMap(const RecordedEvent& e, std::uint16_t kind);
    bool droppedMapBackward(const RecordedEvent& e, std::uint16_t kind);
    bool autocastSoftmaxBackward(const RecordedEvent& e, std::uint16_t kind);
    void releaseMapGradient(std::int64_t bytes, std::uint8_t phase);
    void fusedAttention(const RecordedEvent& e, std::uint16_t kind);

    const RecordedStep& m_cpu;
    const CudaTarget m_target;
    std::vector<std::uint16_t> m_kinds; // per name in m_cpu.ops: opKind
    CudaStep m_out;
    // Per CPU block: its index on the GPU (-1: not made there), its bytes
    // there, and whether it is still live.
    std::vector<std::int32_t> m_index;
    std::vector<std::int64_t> m_bytes;
    std::vector<char> m_live;
    std::int32_t m_next = 0; // the GPU's next block

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
    //
    // With attention dropout, CUDA's fused dropout (native_dropout_cuda)
    // takes the fp32 map: a one-byte mask (the CPU's noise, as for any
    // dropout) and an fp32 output, which the product takes cast down (the
    // CPU's own 16-bit output, saved by the product in both) and which goes
    // once cast. Its backward (native_dropout_backward, fp32) runs on the
    // product's gradient cast up, where the CPU's MulBackward0 multiplies the
    // 16-bit one; the softmax's backward then takes an fp32 gradient.
    struct Upcast {
        std::int32_t map = -1, copy = -1; // the CPU's block of the map; the GPU's block of the copy (-1: dropped)
        std::int64_t copyBytes = 0;       // (dropped: the map's bytes on the CPU)
        bool released = false;            // the copy (or, dropped, the map) is gone
        std::int32_t droppedGradient = -1; // dropped: the CPU's block of the dropout's backward, fp32 here
    };
    std::vector<Upcast> m_upcasts;
    bool m_dropping = false; // the dropout of an fp32 map has made its mask; its output is next
    Upcast* latestUpcast();
    struct PendingCopy {
        RecordedEvent like;
        std::int32_t map = -1;
    };
    std::optional<PendingCopy> m_pendingCopy; // made before the next allocation

    // The scaled_dot_product_attention call (or its backward) running: its
    // allocations so far, and what the GPU's kernel keeps.
    int m_sdpaAllocations = 0;
    FusedAttentionBytes m_kernel;
    std::int64_t m_queryBytes = 0, m_cpuLse = 0;
};

CudaStepBuilder::CudaStepBuilder(const RecordedStep& cpu, const CudaTarget& target) : m_cpu(cpu), m_target(target)
{
    auto& s = m_out.step;
    s.resident.reserve(cpu.resident.size());
    for (const auto b : cpu.resident) s.resident.push_back(rounded(b));
    s.residentKind = cpu.residentKind;
    s.ops = cpu.ops;
    s.parameterElements = cpu.parameterElements;
    s.trainableBytes = cpu.trainableBytes;
    m_index.resize(cpu.resident.size());
    for (std::size_t i = 0; i < m_index.size(); ++i) m_index[i] = static_cast<std::int32_t>(i);
    m_bytes.assign(s.resident.begin(), s.resident.end());
    m_live.assign(m_index.size(), 1);
    m_next = static_cast<std::int32_t>(cpu.resident.size());
    m_kinds.reserve(cpu.ops.size());
    for (const auto& op : cpu.ops) m_kinds.push_back(opKind(op));
    // A rule adds a block or two where a kernel keeps more (a 7B step:
    // tens of thousands of events, built anew for every plan).
    const auto events = cpu.events.size() + cpu.events.size() / 8 + 16;
    s.events.reserve(events);
    m_index.reserve(m_index.size() + events);
    m_bytes.reserve(m_bytes.size() + events);
    m_live.reserve(m_live.size() + events);
}

std::uint16_t CudaStepBuilder::kindOf(const RecordedEvent& e) const
{
    return e.op >= 0 && static_cast<std::size_t>(e.op) < m_kinds.size() ? m_kinds[static_cast<std::size_t>(e.op)] : 0;
}

std::int64_t CudaStepBuilder::rounded(std::int64_t bytes) const
{
    const std::int64_t g = m_target.exact ? CudaAllocatorModel::kMinBlockSize : 1;
    return (bytes + g - 1) / g * g;
}

void CudaStepBuilder::keep(RecordedEvent a)
{
    a.bytes = rounded(a.bytes);
    a.gemm = {};
    m_index.push_back(m_next++);
    m_bytes.push_back(a.bytes);
    m_live.push_back(1);
    m_out.step.events.push_back(a);
}

void CudaStepBuilder::drop()
{
    m_index.push_back(-1);
    m_bytes.push_back(0);
    m_live.push_back(0);
}

std::int32_t CudaStepBuilder::own(std::int64_t blockBytes, const RecordedEvent& like)
{
    RecordedEvent a = like;
    a.bytes = rounded(blockBytes);
    a.firstInOp = false;
    a.hasShape = false;
    a.gemm = {};
    m_out.step.events.push_back(a);
    return m_next++;
}

void CudaStepBuilder::release(std::int32_t block, std::int64_t blockBytes, std::uint8_t phase)
{
    RecordedEvent r;
    r.bytes = -rounded(blockBytes);
    r.block = block;
    r.phase = phase;
    m_out.step.events.push_back(r);
}

void CudaStepBuilder::unruled(const std::string& why)
{
    if (m_out.unruled.empty()) m_out.unruled = why;
}

CudaStep CudaStepBuilder::build()
{
    m_out.step.events.reserve(m_cpu.events.size());
    for (const auto& e : m_cpu.events) {
        if (e.bytes == 0) continue; // a bf16 product's CPU scratch
        if (e.bytes < 0) onRelease(e);
        else onAllocation(e);
    }
    return std::move(m_out);
}

void CudaStepBuilder::onRelease(const RecordedEvent& e)
{
    if (e.block < 0 || static_cast<std::size_t>(e.block) >= m_index.size()) {
        m_out.step.events.push_back(e); // made before recording: takes nothing off
        return;
    }
    const auto at = static_cast<std::size_t>(e.block);
    m_live[at] = 0;
    if (m_index[at] < 0) return;
    // A softmax map's 16-bit copy that no backward released goes with the map.
    for (auto it = m_upcasts.rbegin(); it != m_upcasts.rend(); ++it) {
        if (it->map != e.block || it->released) continue;
        if (it->copy >= 0) release(it->copy, it->copyBytes, e.phase);
        it->released = true;
        break;
    }
    auto r = e;
    r.block = m_index[at];
    r.bytes = -m_bytes[at];
    m_out.step.events.push_back(r);
}

void CudaStepBuilder::onAllocation(const RecordedEvent& e)
{
    const auto kind = kindOf(e);
    if (droppedMap(e, kind)) return;
    if (m_pendingCopy) {
        const auto& copy = *m_pendingCopy;
        m_upcasts.push_back({copy.map, own(copy.like.bytes, copy.like), copy.like.bytes, false});
        m_pendingCopy.reset();
    }
    if (autocastSoftmax(e, kind) || droppedMapBackward(e, kind) || autocastSoftmaxBackward(e, kind)) return;
    if (kind & kGeneratorState) {
        drop();
        return;
    }
    if (kind & (kSdpa | kSdpaBackward)) {
        fusedAttention(e, kind);
        return;
    }
    if (e.autocast && e.elementBytes == 2 && ((kind & kFp32Always) || (!e.opDtype && (kind & kFp32UnlessDtype)))) {
        unruled(m_cpu.opName(e) + " of a 16-bit tensor under autocast (CUDA's runs it in fp32)");
    }
    auto a = e;
    if (e.firstInOp && e.elementBytes > 1 && (kind & kDropout)) {
        a.bytes = e.bytes / e.elementBytes;
    }
    keep(a);
}

bool CudaStepBuilder::autocastSoftmax(const RecordedEvent& e, std::uint16_t kind)
{
    if (!(kind & kSoftmax) || !e.firstInOp || !e.autocast || e.elementBytes != 2 || e.opDtype) return false;
    const auto mapBlock = static_cast<std::int32_t>(m_index.size());
    std::int32_t up = -1;
    if (!m_target.fp16) up = own(2 * e.bytes, e); // bf16 cast up
    auto a = e;
    a.bytes = 2 * e.bytes;
    keep(a);
    if (up >= 0) release(up, 2 * e.bytes, e.phase);
    m_pendingCopy = PendingCopy{e, mapBlock};
    return true;
}

// The dropout of a map the softmax made fp32: its first allocation (the
// noise) is the one-byte mask, its second (the output) the 16-bit copy the
// product takes, after an fp32 output of the GPU's own freed once cast.
bool CudaStepBuilder::droppedMap(const RecordedEvent& e, std::uint16_t kind)
{
    const bool dropout = kind & kDropout;
    if (m_pendingCopy && dropout && e.firstInOp && e.elementBytes == 2) {
        m_upcasts.push_back({m_pendingCopy->map, -1, m_pendingCopy->like.bytes, false});
        m_pendingCopy.reset();
        m_dropping = true;
        auto mask = e;
        mask.bytes = e.bytes / e.elementBytes;
        keep(mask);
        return true;
    }
    if (!m_dropping) return false;
    // (A scalar the dropout makes on the way, as on a GPU.)
    if (dropout && !e.firstInOp && e.bytes != m_upcasts.back().copyBytes && e.bytes < e.elementBytes * 64) return false;
    m_dropping = false;
    if (!dropout || e.firstInOp || e.bytes != m_upcasts.back().copyBytes) {
        unruled(m_cpu.opName(e) + " where the dropout of an attention map autocast made fp32 (CUDA's softmax) makes its output");
        return false;
    }
    const auto out32 = own(2 * e.bytes, e);
    keep(e);
    release(out32, 2 * e.bytes, e.phase);
    return true;
}

// The latest map whose backward has not run (earlier ones a checkpointed
// block's first forward freed).
CudaStepBuilder::Upcast* CudaStepBuilder::latestUpcast()
{
    while (!m_upcasts.empty() && m_upcasts.back().released) m_upcasts.pop_back();
    return m_upcasts.empty() ? nullptr : &m_upcasts.back();
}

// The product's 16-bit gradient of the map goes once cast up (the CPU frees
// it after the next backward): the latest block of its size still live.
void CudaStepBuilder::releaseMapGradient(std::int64_t bytes, std::uint8_t phase)
{
    for (auto i = static_cast<std::int64_t>(m_index.size()) - 1; i >= 0; --i) {
        const auto at = static_cast<std::size_t>(i);
        if (m_index[at] < 0 || !m_live[at] || m_bytes[at] != rounded(bytes)) continue;
        release(m_index[at], bytes, phase);
        m_index[at] = -1; // its CPU release takes nothing more
        return;
    }
}

// The dropout's backward of a dropped fp32 map (on the CPU, MulBackward0's
// aten::mul of the 16-bit gradient and the noise, the map's size, next
// after the product's backward): the gradient cast up, then its product with
// the mask in fp32.
bool CudaStepBuilder::droppedMapBackward(const RecordedEvent& e, std::uint16_t kind)
{
    if (!(kind & kMul) || e.phase != 1 || !e.firstInOp || e.elementBytes != 2) return false;
    auto* u = latestUpcast();
    if (!u || u->copy >= 0 || u->droppedGradient >= 0 || e.bytes != u->copyBytes) return false;
    const auto gradUp = own(2 * e.bytes, e);
    releaseMapGradient(e.bytes, e.phase);
    u->droppedGradient = static_cast<std::int32_t>(m_index.size());
    auto a = e;
    a.bytes = 2 * e.bytes;
    keep(a);
    release(gradUp, 2 * e.bytes, e.phase);
    return true;
}

bool CudaStepBuilder::autocastSoftmaxBackward(const RecordedEvent& e, std::uint16_t kind)
{
    if (!(kind & kSoftmaxBackward) || !e.firstInOp || e.elementBytes != 2) return false;
    auto* latest = latestUpcast();
    if (!latest) return false;
    const auto u = *latest;
    m_upcasts.pop_back();
    // A CPU block freed here rather than where the CPU frees it (its release
    // there takes nothing more).
    const auto freeNow = [&](std::int32_t block) {
        const auto at = static_cast<std::size_t>(block);
        if (block < 0 || at >= m_index.size() || m_index[at] < 0 || !m_live[at]) return;
        release(m_index[at], m_bytes[at], e.phase);
        m_index[at] = -1;
    };
    // The gradient in fp32: the dropout's backward's (dropped), else the
    // product's cast up.
    std::int32_t gradUp = -1;
    if (u.copy < 0) {
        if (u.droppedGradient < 0) {
            unruled(m_cpu.opName(e) + " of a dropped attention map whose dropout's backward did not run");
            return false;
        }
    } else {
        release(u.copy, u.copyBytes, e.phase);
        gradUp = own(2 * e.bytes, e);
        releaseMapGradient(e.bytes, e.phase);
    }
    const auto takeGradient = [&] {
        if (gradUp >= 0) release(gradUp, 2 * e.bytes, e.phase);
        else freeNow(u.droppedGradient);
    };
    if (m_target.fp16) {
        keep(e); // half_to_float's backward: the gradient in fp16
        takeGradient();
    } else {
        // bf16: an fp32 gradient, then (as the autograd engine frees the
        // softmax's input gradient and saved map before the next node) its
        // cast down.
        const auto grad32 = own(2 * e.bytes, e);
        takeGradient();
        freeNow(u.map);
        keep(e);
        release(grad32, 2 * e.bytes, e.phase);
    }
    return true;
}

void CudaStepBuilder::fusedAttention(const RecordedEvent& e, std::uint16_t kind)
{
    const bool forward = kind & kSdpa;
    const auto& op = m_cpu.opName(e);
    if (e.firstInOp) {
        m_sdpaAllocations = 0;
        m_kernel = {};
        if (!e.hasShape) {
            unruled(op + " without its query's sizes");
        } else if (e.opDropout) {
            unruled(op + " with dropout (the CPU's math path; a GPU's kernel drops in place)");
        } else {
            const auto& q = e.shape;
            m_kernel = gpuFusedAttentionBytes(q[0], q[1], q[2], q[3], e.elementBytes, m_target.computeCapability,
                                              m_target.fp16, false, m_target.exact);
            m_queryBytes = q[0] * q[1] * q[2] * q[3] * e.elementBytes;
            m_cpuLse = q[0] * q[1] * q[2] * 4; // the CPU kernel's log-sum-exp, fp32 [B, T, H]
            if (m_kernel.math) unruled(op + " on a card neither fused kernel takes (LibTorch's math fallback)");
            else if (!m_kernel.mergeCopies) {
                unruled(op + " by the memory-efficient kernel, whose output is laid out otherwise than the CPU's");
            }
        }
    }
    const int k = m_sdpaAllocations++;
    if (!m_out.unruled.empty() || !m_kernel.fused) {
        keep(e);
        return;
    }
    // Forward: the output (q's layout, as on the CPU) and the log-sum-exp
    // are kept; the CPU kernel's per-thread blocks are not a GPU's.
    // Backward: the q, k and v gradients, then (flash) the softmax_d and dq
    // accumulator while the kernel runs.
    const int kept = forward ? 2 : 3;
    if (k >= kept) {
        drop();
        return;
    }
    auto a = e;
    const std::int64_t expected = forward && k == 1 ? m_cpuLse : m_queryBytes;
    if (forward && k == 1) a.bytes = m_kernel.lse;
    if (e.bytes != expected) unruled(op + ": allocation " + std::to_string(k) + " is not what its kernel keeps");
    keep(a);
    if (!forward && k == 2 && m_kernel.backwardTemps > 0) {
        const auto temps = own(m_kernel.backwardTemps, e);
        release(temps, m_kernel.backwardTemps, e.phase);
    }
}

} // namespace

CudaStep cudaStepOf(const RecordedStep& cpu, const CudaTarget& target)
{
    return CudaStepBuilder(cpu, target).build();
}

} // namespace tb
