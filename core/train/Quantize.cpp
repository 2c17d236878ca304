#include "train/Quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

namespace tb {
namespace {

// The NF4 levels: quantiles of N(0, 1) normalised to [-1, 1] with an exact
// zero (QLoRA paper, appendix E), as bitsandbytes' get_4bit_type("nf4") and
// its kernels' table hold them.
constexpr std::array<float, 16> kNf4Levels{
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

std::int64_t ceilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The index of the nearest entry of a sorted map: the number of midpoints
// below x. bitsandbytes' NF4 decision tree compares against the same
// midpoints (x > midpoint takes the upper level), and its 8-bit search picks
// the nearest entry.
at::Tensor nearestIndex(const at::Tensor& sortedMap, const at::Tensor& x)
{
    const auto mid = ((sortedMap.narrow(0, 0, sortedMap.numel() - 1).to(at::kDouble)
                       + sortedMap.narrow(0, 1, sortedMap.numel() - 1).to(at::kDouble))
                      / 2.0)
                         .to(at::kFloat)
                         .to(x.device());
    return at::searchsorted(mid, x.contiguous());
}

// x [blocks * blockSize] float32 in blocks: each block's absmax and x / absmax
// (x times the absmax's reciprocal, as bitsandbytes' kernels compute it; 0 in
// a block of zeros).
std::pair<at::Tensor, at::Tensor> normaliseBlocks(const at::Tensor& x, std::int64_t blockSize)
{
    const auto blocks = x.view({-1, blockSize});
    const auto absmax = blocks.abs().amax(1);
    auto normalised = blocks * absmax.reciprocal().unsqueeze(1);
    normalised = at::where(absmax.unsqueeze(1) == 0, at::zeros_like(normalised), normalised);
    return {absmax, normalised.view(-1)};
}

at::Tensor paddedTo(const at::Tensor& x, std::int64_t n)
{
    if (x.numel() == n) return x;
    return at::cat({x, at::zeros({n - x.numel()}, x.options())});
}

// The NF4 codes and block absmaxes of a CPU weight, written in place: per
// block the absmax of |x| in float, each weight times the absmax's float
// reciprocal, its code the count of level midpoints below it (bitsandbytes'
// decision tree; 0 in a block of zeros). Tensor operations took minutes and a
// gigabyte of temporaries for a 7B model's linears; this takes seconds and none.
template <typename T>
void nf4Kernel(const T* x, std::int64_t n, std::int64_t blockSize, float* absmax, std::uint8_t* packed)
{
    std::array<float, 15> mid{};
    for (std::size_t i = 0; i < mid.size(); ++i) {
        mid[i] = static_cast<float>((static_cast<double>(kNf4Levels[i]) + static_cast<double>(kNf4Levels[i + 1])) / 2.0);
    }
    const auto blocks = ceilDiv(n, blockSize);
    at::parallel_for(0, blocks, 256, [&](std::int64_t first, std::int64_t last) {
        std::vector<float> v(static_cast<std::size_t>(blockSize));
        std::vector<std::uint8_t> c(static_cast<std::size_t>(blockSize));
        for (std::int64_t b = first; b < last; ++b) {
            const auto begin = b * blockSize, count = std::min(n - begin, blockSize);
            float top = 0.0f;
            for (std::int64_t i = 0; i < count; ++i) top = std::max(top, std::abs(static_cast<float>(x[begin + i])));
            absmax[b] = top;
            const float inv = 1.0f / top;
            // A last partial block is padded with zeros (an odd weight pairs with one).
            for (std::int64_t i = 0; i < blockSize; ++i) v[i] = i < count && top != 0.0f ? static_cast<float>(x[begin + i]) * inv : 0.0f;
            // Each code counts the midpoints below its value, midpoint by midpoint over the block (vectorised).
            std::fill(c.begin(), c.end(), std::uint8_t{0});
            for (const float m : mid) {
                for (std::int64_t i = 0; i < blockSize; ++i) c[i] = static_cast<std::uint8_t>(c[i] + (m < v[i] ? 1 : 0));
            }
            // Pairs never straddle blocks (blockSize is even).
            for (std::int64_t i = 0; i < count; i += 2) packed[(begin + i) / 2] = static_cast<std::uint8_t>((c[i] << 4) | c[i + 1]);
        }
    });
}

QuantizedWeight quantizeNf4(const at::Tensor& w, bool doubleQuant)
{
    QuantizedWeight q;
    q.format = QuantFormat::Nf4;
    q.rows = w.size(0);
    q.cols = w.size(1);
    const auto n = w.numel();
    const auto blocks = ceilDiv(n, q.blockSize);
    const auto flat = w.detach().contiguous().view(-1);
    q.quantMap = nf4Levels().to(w.device());
    auto absmax = at::empty({blocks}, flat.options().dtype(at::kFloat));
    q.data = at::empty({ceilDiv(n, 2)}, flat.options().dtype(at::kByte));
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, flat.scalar_type(), "nf4Kernel", [&] {
        nf4Kernel(flat.data_ptr<scalar_t>(), n, q.blockSize, absmax.data_ptr<float>(), q.data.data_ptr<std::uint8_t>());
    });
    q.data = q.data.view({-1, 1});
    if (!doubleQuant) {
        q.absmax = absmax;
        return q;
    }
    q.nested = true;
    // The mean summed in double: one float32 whatever the order of the sum (bitsandbytes keeps it as stored).
    q.nestedOffset = static_cast<float>(absmax.to(at::kDouble).mean().item<double>());
    const auto centred = paddedTo(absmax - q.nestedOffset, ceilDiv(blocks, q.nestedBlockSize) * q.nestedBlockSize);
    auto [absmax2, normalised2] = normaliseBlocks(centred, q.nestedBlockSize);
    q.nestedQuantMap = dynamicMap8().to(w.device());
    q.nestedAbsmax = absmax2;
    q.absmax = nearestIndex(q.nestedQuantMap, normalised2).narrow(0, 0, blocks).to(at::kByte).contiguous();
    return q;
}

QuantizedWeight quantizeInt8(const at::Tensor& w)
{
    QuantizedWeight q;
    q.format = QuantFormat::Int8;
    q.rows = w.size(0);
    q.cols = w.size(1);
    q.absmax = at::empty({q.rows}, w.options().dtype(at::kFloat)); // SCB
    q.data = at::empty({q.rows, q.cols}, w.options().dtype(at::kChar));
    const auto source = w.detach().contiguous();
    {
        // bitsandbytes' Int8Params._quantize and int8_vectorwise_quant: the
        // weight as fp16, its row absmax (SCB), x * (127 / SCB) rounded half to even.
        AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, source.scalar_type(), "int8Kernel", [&] {
            const auto* x = source.data_ptr<scalar_t>();
            auto* scb = q.absmax.data_ptr<float>();
            auto* out = q.data.data_ptr<std::int8_t>();
            const auto cols = q.cols;
            at::parallel_for(0, q.rows, 16, [&](std::int64_t first, std::int64_t last) {
                for (auto r = first; r < last; ++r) {
                    const auto* row = x + r * cols;
                    float top = 0.0f;
                    for (std::int64_t c = 0; c < cols; ++c) {
                        top = std::max(top, std::abs(static_cast<float>(static_cast<at::Half>(static_cast<float>(row[c])))));
                    }
                    scb[r] = top;
                    const float scale = 127.0f / top;
                    for (std::int64_t c = 0; c < cols; ++c) {
                        const float v = static_cast<float>(static_cast<at::Half>(static_cast<float>(row[c])));
                        // (A weight beyond fp16's range leaves an infinite absmax: its row is 0, not undefined.)
                        const float code = std::nearbyint(v * scale);
                        out[r * cols + c] = top == 0.0f || !std::isfinite(code) ? 0 : static_cast<std::int8_t>(std::clamp(code, -127.0f, 127.0f));
                    }
                }
            });
        });
    }
    return q;
}

} // namespace

QuantFormat quantFormatOf(const std::string& name)
{
    if (name.empty()) return QuantFormat::None;
    if (name == "nf4") return QuantFormat::Nf4;
    if (name == "int8") return QuantFormat::Int8;
    throw std::invalid_argument("unknown quantization \"" + name + "\"");
}

const char* quantFormatName(QuantFormat f)
{
    switch (f) {
    case QuantFormat::Nf4: return "nf4";
    case QuantFormat::Int8: return "int8";
    case QuantFormat::None: break;
    }
    return "";
}

at::Tensor nf4Levels() { return at::tensor(std::vector<float>(kNf4Levels.begin(), kNf4Levels.end())); }

at::Tensor dynamicMap8()
{
    // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    // for exponent i of 0..6, 2^i means of linspace(0.1, 1, 2^i + 1)'s
    // neighbours, times 10^(i - 6), with both signs; then 0 and 1; sorted.
    // Computed in float32 as torch computes it there.
    std::vector<at::Tensor> parts;
    for (int i = 0; i < 7; ++i) {
        const auto boundaries = at::linspace(0.1, 1.0, (1 << i) + 1, at::kFloat);
        const auto means = (boundaries.narrow(0, 0, 1 << i) + boundaries.narrow(0, 1, 1 << i)) / 2.0;
        const double scale = i == 6 ? 1.0 : std::pow(10.0, i - 6);
        const auto scaled = means * scale;
        parts.push_back(scaled);
        parts.push_back(-scaled);
    }
    parts.push_back(at::zeros({1}, at::kFloat));
    parts.push_back(at::ones({1}, at::kFloat));
    return std::get<0>(at::sort(at::cat(parts)));
}

QuantizedWeight quantizeWeight(const at::Tensor& weight, const QuantizeSpec& spec)
{
    if (weight.dim() != 2 || !weight.is_floating_point()) {
        throw std::invalid_argument("only a 2-D floating-point weight can be quantized");
    }
    // Quantized where it loads, on the CPU (a weight elsewhere goes there and back).
    if (!weight.device().is_cpu()) return quantizeWeight(weight.cpu(), spec).to(weight.device());
    switch (spec.format) {
    case QuantFormat::Nf4: return quantizeNf4(weight, spec.doubleQuant);
    case QuantFormat::Int8: return quantizeInt8(weight);
    case QuantFormat::None: break;
    }
    throw std::invalid_argument("no quantization format given");
}

std::string QuantizedWeight::problem() const
{
    const auto n = rows * cols;
    const auto is = [](const at::Tensor& t, at::ScalarType dtype, std::int64_t numel) {
        return t.defined() && t.scalar_type() == dtype && t.numel() == numel;
    };
    if (rows <= 0 || cols <= 0) return "no weights";
    if (format == QuantFormat::Int8) {
        if (!is(data, at::kChar, n) || data.dim() != 2 || data.size(0) != rows) {
            return "its 8-bit codes are not int8 [" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
        }
        if (!is(absmax, at::kFloat, rows)) return "its row scales are not " + std::to_string(rows) + " float32 values";
        return {};
    }
    if (format != QuantFormat::Nf4) return "no format";
    if (blockSize < 2 || blockSize % 2 != 0) return "its block size is not even";
    const auto blocks = ceilDiv(n, blockSize);
    if (!is(data, at::kByte, ceilDiv(n, 2))) return "its 4-bit codes are not " + std::to_string(ceilDiv(n, 2)) + " bytes";
    if (!is(quantMap, at::kFloat, 16)) return "its levels are not 16 float32 values";
    if (!is(absmax, nested ? at::kByte : at::kFloat, blocks)) return "its block scales are not " + std::to_string(blocks) + " values";
    if (nested && (nestedBlockSize < 1 || !is(nestedAbsmax, at::kFloat, ceilDiv(blocks, nestedBlockSize))
                   || !is(nestedQuantMap, at::kFloat, 256) || !std::isfinite(nestedOffset))) {
        return "its nested scales do not fit its block scales";
    }
    return {};
}

// Both below allocate only tensors whose sizes are proportional to the
// weight's (no padding to whole blocks): the planner fits what a step
// allocates with polynomials in the model's widths.
at::Tensor QuantizedWeight::blockAbsmax() const
{
    if (!nested) return absmax;
    // map[q] * absmax2[block / 256] in float32, then + offset (bitsandbytes'
    // dequantize_blockwise, then absmax += offset).
    const auto blocks = absmax.numel();
    const auto which = at::arange(blocks, absmax.options().dtype(at::kInt)).div_(nestedBlockSize, "floor");
    return (nestedQuantMap.index_select(0, absmax.to(at::kInt)) * nestedAbsmax.index_select(0, which)).add_(nestedOffset);
}

at::Tensor QuantizedWeight::dequantize(at::ScalarType dtype) const
{
    at::Tensor values;
    const auto n = rows * cols;
    if (format == QuantFormat::Int8) {
        // (q * SCB) * (1/127) in float32, as bitsandbytes' int8_vectorwise_dequant.
        values = data.to(at::kFloat).mul_(absmax.unsqueeze(1)).mul_(1.0 / 127.0);
    } else {
        // Each byte holds two levels: a 256-row table of (high, low) pairs
        // turns the packed bytes into levels with one index (int32: half the
        // transient of int64 indices).
        const auto bytes = at::arange(256, data.options().dtype(at::kInt));
        const auto pairs = at::stack({quantMap.index_select(0, bytes.bitwise_right_shift(4)),
                                      quantMap.index_select(0, bytes.bitwise_and(15))},
                                     1); // [256, 2]
        const auto levels = pairs.index_select(0, data.view(-1).to(at::kInt)).view(-1); // n or n + 1
        const auto blockAbs = blockAbsmax();
        // Scaled in place: the whole blocks as a [blocks, 64] view, then a last partial block.
        const auto whole = n / blockSize, tail = n - whole * blockSize;
        if (whole > 0) levels.narrow(0, 0, whole * blockSize).view({whole, blockSize}).mul_(blockAbs.narrow(0, 0, whole).unsqueeze(1));
        if (tail > 0) levels.narrow(0, whole * blockSize, tail).mul_(blockAbs.narrow(0, whole, 1));
        values = levels.narrow(0, 0, n).view({rows, cols});
    }
    return dtype == at::kFloat ? values : values.to(dtype);
}

std::int64_t QuantizedWeight::storedBytes() const
{
    std::int64_t total = 0;
    for (const auto* t : {&data, &absmax, &quantMap, &nestedAbsmax, &nestedQuantMap}) {
        if (t->defined()) total += t->numel() * static_cast<std::int64_t>(t->element_size());
    }
    return total;
}

QuantizedWeight QuantizedWeight::to(const at::Device& device) const
{
    QuantizedWeight out = *this;
    for (auto* t : {&out.data, &out.absmax, &out.quantMap, &out.nestedAbsmax, &out.nestedQuantMap}) {
        if (t->defined()) *t = t->to(device);
    }
    return out;
}

QuantizedWeight quantizedPlaceholder(std::int64_t rows, std::int64_t cols, const QuantizeSpec& spec)
{
    QuantizedWeight q;
    q.format = spec.format;
    q.rows = rows;
    q.cols = cols;
    const auto n = rows * cols;
    const auto bytes = at::TensorOptions().dtype(at::kByte), floats = at::TensorOptions().dtype(at::kFloat);
    if (spec.format == QuantFormat::Int8) {
        q.data = at::empty({rows, cols}, at::TensorOptions().dtype(at::kChar));
        q.absmax = at::empty({rows}, floats);
        return q;
    }
    const auto blocks = ceilDiv(n, q.blockSize);
    q.data = at::empty({ceilDiv(n, 2), 1}, bytes);
    q.quantMap = nf4Levels();
    q.nested = spec.doubleQuant;
    q.absmax = at::empty({blocks}, q.nested ? bytes : floats);
    if (q.nested) {
        q.nestedAbsmax = at::empty({ceilDiv(blocks, q.nestedBlockSize)}, floats);
        q.nestedQuantMap = dynamicMap8();
    }
    return q;
}

std::vector<std::int64_t> quantizedBlockBytes(std::int64_t rows, std::int64_t cols, const QuantizeSpec& spec)
{
    const auto n = rows * cols;
    if (spec.format == QuantFormat::Int8) return {n, 4 * rows};
    if (spec.format != QuantFormat::Nf4) return {};
    const auto blocks = ceilDiv(n, 64);
    if (!spec.doubleQuant) return {ceilDiv(n, 2), 4 * blocks, 16 * 4};
    return {ceilDiv(n, 2), blocks, 16 * 4, 4 * ceilDiv(blocks, 256), 256 * 4};
}

std::int64_t quantizedBytes(std::int64_t rows, std::int64_t cols, const QuantizeSpec& spec)
{
    std::int64_t total = 0;
    for (const auto b : quantizedBlockBytes(rows, cols, spec)) total += b;
    return total;
}

} // namespace tb
