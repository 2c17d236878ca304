#pragma once
// Frozen base weights stored in 4-bit NormalFloat (NF4, the QLoRA paper) or
// 8 bits per weight (LLM.int8's row-wise absmax), in bitsandbytes' layout, so
// a folder transformers saved with bitsandbytes is read as it is stored and
// ours can be written the same way.
//
// NF4: the weight, flattened row by row, in blocks of `blockSize` (64); each
// block's absmax (float32); each weight the index of the nearest of 16 levels
// to weight / absmax, two per byte, the first of a pair in the high nibble
// (bitsandbytes' kQuantizeBlockwise). Double quantization stores the block
// absmaxes in 8 bits: their mean is subtracted (the offset), and the rest is
// quantized in blocks of 256 to bitsandbytes' signed dynamic 8-bit map.
// Dequantized: level[nibble] * absmax[block] in float32, rounded once to the
// compute dtype; a nested absmax is map[q] * absmax2[block] + offset first.
//
// int8: per output row of the weight in fp16, SCB = max |w|, q = round(w * (127 / SCB));
// dequantized (q * SCB) * (1/127) in float32.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace tb {

enum class QuantFormat { None, Nf4, Int8 };

// "nf4" | "int8" | "" (none). Throws std::invalid_argument on another name.
QuantFormat quantFormatOf(const std::string& name);
const char* quantFormatName(QuantFormat f);

struct QuantizeSpec {
    QuantFormat format = QuantFormat::None;
    bool doubleQuant = true; // nf4: the block absmaxes in 8 bits
    bool active() const { return format != QuantFormat::None; }
};

// One quantized [out, in] weight. Every tensor is on one device; the float32
// ones stay float32 whatever the model's dtype.
struct QuantizedWeight {
    QuantFormat format = QuantFormat::None;
    std::int64_t rows = 0, cols = 0;
    at::Tensor data;          // nf4: uint8 [(n + 1) / 2, 1], packed; int8: int8 [rows, cols]
    at::Tensor absmax;        // nf4: float32 [blocks], or uint8 [blocks] when nested; int8: SCB float32 [rows]
    at::Tensor quantMap;      // nf4: float32 [16], the levels
    std::int64_t blockSize = 64;
    bool nested = false;
    at::Tensor nestedAbsmax;  // float32 [ceil(blocks / nestedBlockSize)]
    at::Tensor nestedQuantMap; // float32 [256]
    std::int64_t nestedBlockSize = 256;
    float nestedOffset = 0.0f;

    // What does not fit together (sizes, dtypes, block sizes), for a form
    // read from a file; empty when it is consistent.
    std::string problem() const;
    // The weight [rows, cols] in `dtype`, computed on the tensors' device.
    at::Tensor dequantize(at::ScalarType dtype) const;
    // The block absmaxes as float32 (nested ones dequantized).
    at::Tensor blockAbsmax() const;
    // Bytes the stored form takes (data, scales, maps).
    std::int64_t storedBytes() const;
    // The same weight with every tensor moved to `device`.
    QuantizedWeight to(const at::Device& device) const;
};

// The 16 NF4 levels (bitsandbytes' table, float32).
at::Tensor nf4Levels();
// bitsandbytes' signed dynamic 8-bit map (create_dynamic_map(signed=True)), float32 [256].
at::Tensor dynamicMap8();

// Quantizes a 2-D weight [out, in] of any floating dtype, on its device.
QuantizedWeight quantizeWeight(const at::Tensor& weight, const QuantizeSpec& spec);

// A quantized weight of the stored sizes with values left unset (an audit
// of where a model's tensors live reads no values).
QuantizedWeight quantizedPlaceholder(std::int64_t rows, std::int64_t cols, const QuantizeSpec& spec);

// The bytes of each tensor quantizeWeight stores for a weight of `rows` x
// `cols`, in the order a quantized layer holds them (data, absmax, levels,
// nested absmax, nested map), and their sum.
std::vector<std::int64_t> quantizedBlockBytes(std::int64_t rows, std::int64_t cols, const QuantizeSpec& spec);
std::int64_t quantizedBytes(std::int64_t rows, std::int64_t cols, const QuantizeSpec& spec);

} // namespace tb
