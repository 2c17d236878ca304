#!/usr/bin/python3
"""An independent reference for quantized weights, in numpy only, written from
the QLoRA paper (Dettmers et al. 2023: NF4, blocks of 64, double quantization
of the block scales in 8 bits with blocks of 256) and bitsandbytes' storage
layout (two 4-bit codes per byte, the first in the high nibble; absmax per
block in float32; LLM.int8's per-row absmax "SCB" with q = round(w * 127/SCB)).
It shares no code with Trainbench.

  bnb_reference.py cases OUT.safetensors [--seed N]

writes, for each case cN, the source weight and the reference's quantized form
and dequantized values:
  cN.source            F32 [rows, cols]
  cN.format            U8 [1]: 4 = nf4, 8 = int8
  nf4:  cN.weight (U8 [(n+1)//2, 1]), cN.absmax (F32, or U8 when nested),
        cN.quant_map (F32 [16]); nested: cN.nested_absmax (F32),
        cN.nested_quant_map (F32 [256]), cN.nested_offset (F32 [1])
  int8: cN.weight (I8 [rows, cols]), cN.SCB (F32 [rows])
  cN.expected_f32      F32 [rows, cols]: the dequantized weight
  cN.expected_bf16     BF16 [rows, cols]: the same rounded to bfloat16 (nearest, ties to even)
"""
import json
import struct
import sys

import numpy as np

# The 16 NF4 levels (QLoRA paper, appendix E; bitsandbytes' table).
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)


def dynamic_map():
    """The signed dynamic 8-bit map of the 8-bit optimizers paper (Dettmers et
    al. 2022): for exponents 10^-6 .. 10^0, means of evenly spaced fractions in
    [0.1, 1] (2^i of them at exponent i), both signs, plus 0 and 1."""
    values = [0.0, 1.0]
    for i in range(7):
        edges = np.linspace(0.1, 1.0, 2 ** i + 1, dtype=np.float32)
        means = ((edges[:-1] + edges[1:]) / np.float32(2)).astype(np.float32)
        scaled = (means * np.float32(10.0 ** (i - 6))).astype(np.float32)
        values += list(scaled) + list(-scaled)
    return np.array(sorted(values), dtype=np.float32)


def nearest(table, x):
    """Index of the nearest table entry (ties to the lower), by midpoints."""
    mid = ((table[:-1].astype(np.float64) + table[1:].astype(np.float64)) / 2).astype(np.float32)
    return np.searchsorted(mid, x, side="left")


def blockwise(x, block):
    """x (float32, 1-D) in blocks: absmax per block and x * (1/absmax)."""
    n = x.size
    blocks = -(-n // block)
    padded = np.zeros(blocks * block, dtype=np.float32)
    padded[:n] = x
    padded = padded.reshape(blocks, block)
    absmax = np.abs(padded).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = (np.float32(1) / absmax).astype(np.float32)
        norm = (padded * inv[:, None]).astype(np.float32)
    norm[absmax == 0] = 0
    return absmax, norm.reshape(-1)


def quantize_nf4(w, nested):
    x = w.astype(np.float32).reshape(-1)
    n = x.size
    absmax, norm = blockwise(x, 64)
    codes = nearest(NF4, norm)[: n + (n % 2)].astype(np.uint8)
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8).reshape(-1, 1)
    out = {"weight": packed, "quant_map": NF4.copy()}
    if not nested:
        out["absmax"] = absmax
        return out
    offset = np.float32(absmax.astype(np.float64).mean())
    centred = (absmax - offset).astype(np.float32)
    absmax2, norm2 = blockwise(centred, 256)
    table = dynamic_map()
    out["absmax"] = nearest(table, norm2)[: absmax.size].astype(np.uint8)
    out["nested_absmax"] = absmax2
    out["nested_quant_map"] = table
    out["nested_offset"] = np.array([offset], dtype=np.float32)
    return out


def dequantize_nf4(q, rows, cols):
    n = rows * cols
    packed = q["weight"].reshape(-1)
    codes = np.empty(packed.size * 2, dtype=np.uint8)
    codes[0::2] = packed >> 4
    codes[1::2] = packed & 15
    if "nested_absmax" in q:
        j = np.arange(q["absmax"].size) // 256
        absmax = (q["nested_quant_map"][q["absmax"]] * q["nested_absmax"][j]).astype(np.float32)
        absmax = (absmax + q["nested_offset"][0]).astype(np.float32)
    else:
        absmax = q["absmax"]
    values = (q["quant_map"][codes[:n]] * absmax[np.arange(n) // 64]).astype(np.float32)
    return values.reshape(rows, cols)


def quantize_int8(w):
    x = w.astype(np.float16).astype(np.float32)  # bitsandbytes quantizes the fp16 weight
    scb = np.abs(x).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (np.float32(127) / scb).astype(np.float32)
        q = np.rint((x * scale[:, None]).astype(np.float32))
    q[scb == 0] = 0
    return {"weight": q.astype(np.int8), "SCB": scb}


def dequantize_int8(q):
    return ((q["weight"].astype(np.float32) * q["SCB"][:, None]).astype(np.float32)
            * np.float32(1.0 / 127.0)).astype(np.float32)


def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest, ties to even."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def array_entry(a):
    a = np.ascontiguousarray(a)
    return DTYPES[a.dtype], a.shape, a.tobytes()


def cases(out, seed):
    rng = np.random.default_rng(seed)
    # (rows, cols, format, nested): whole blocks, a partial last block, an odd
    # count, more than 256 blocks (two nested blocks, the last partial), a
    # row of zeros and a block of zeros.
    shapes = [(8, 64, "nf4", False), (7, 9, "nf4", False), (5, 13, "nf4", True), (33, 100, "nf4", True),
              (130, 140, "nf4", True), (24, 48, "nf4", False), (16, 40, "int8", False), (9, 31, "int8", False)]
    tensors = {}
    for i, (rows, cols, fmt, nested) in enumerate(shapes):
        w = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 0.5)).astype(np.float32)
        if i == 5:
            w.reshape(-1)[64:128] = 0  # a block of zeros
        if i == 6:
            w[3, :] = 0  # a row of zeros
        p = "c%d." % i
        tensors[p + "source"] = array_entry(w)
        tensors[p + "format"] = array_entry(np.array([4 if fmt == "nf4" else 8], dtype=np.uint8))
        if fmt == "nf4":
            q = quantize_nf4(w, nested)
            expected = dequantize_nf4(q, rows, cols)
        else:
            q = quantize_int8(w)
            expected = dequantize_int8(q)
        for key, value in q.items():
            tensors[p + key] = array_entry(value)
        tensors[p + "expected_f32"] = array_entry(expected)
        tensors[p + "expected_bf16"] = ("BF16", expected.shape, bf16_bits(expected).tobytes())
    write_safetensors(out, tensors)


def main(argv):
    if len(argv) >= 2 and argv[0] == "cases":
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 1
        cases(argv[1], seed)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
