#!/usr/bin/python3
"""An independent reference for quantized weights, in numpy only, written from
the QLoRA paper (Dettmers et al. 2023: NF4, blocks of 64, double quantization
of the block scales in 8 bits with blocks of 256) and bitsandbytes' storage
layout (two 4-bit codes per byte, the first in the high nibble; absmax per
block in float32; LLM.int8's per-row absmax "SCB" with q = round(w * 127/SCB)).
It shares no code with Trainbench.

  bnb_reference.py cases OUT.safetensors [--seed N]
  bnb_reference.py quantize-folder SRC DST [--format nf4|int8] [--no-double] [--dequantized DIR]
  bnb_reference.py dequantize-folder SRC DST

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
# quantize-folder writes a model folder in bitsandbytes' layout (below).


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
    # Two weights of over a million (Trainbench quantizes in slices of 2^20 weights).
    shapes = [(8, 64, "nf4", False), (7, 9, "nf4", False), (5, 13, "nf4", True), (33, 100, "nf4", True),
              (130, 140, "nf4", True), (24, 48, "nf4", False), (16, 40, "int8", False), (9, 31, "int8", False),
              (1100, 1001, "nf4", True), (1500, 777, "int8", False)]
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


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = (entry["dtype"], entry["shape"], data[begin:end])
    return out


def as_float32(dtype, shape, raw):
    if dtype == "F32":
        return np.frombuffer(raw, dtype=np.float32).reshape(shape).copy()
    if dtype == "F16":
        return np.frombuffer(raw, dtype=np.float16).astype(np.float32).reshape(shape)
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    raise ValueError("not a float tensor: " + dtype)


def block_linear(name, shape):
    """A 2-D weight inside a numbered block: what transformers' bitsandbytes
    integration replaces (every nn.Linear and Conv1D but the output head)."""
    parts = name.split(".")
    return len(shape) == 2 and parts[-1] == "weight" and any(p.isdigit() for p in parts)


def quantize_folder(src, dst, fmt, nested, dequantized):
    """A folder as transformers saves a bitsandbytes model: each block linear
    quantized (GPT-2's Conv1D transposed to [out, in] first), the state packed
    as JSON bytes, config.json's quantization_config. With `dequantized`, the
    same model with those weights dequantized, in float32, beside it."""
    import os
    import shutil
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    conv1d = config["model_type"] == "gpt2"
    tensors = read_safetensors(os.path.join(src, "model.safetensors"))
    out, plain = {}, {}
    for name, (dtype, shape, raw) in tensors.items():
        if not block_linear(name, shape):
            out[name] = (dtype, shape, raw)
            if dtype in ("F32", "F16", "BF16"):
                plain[name] = array_entry(as_float32(dtype, shape, raw))
            else:
                plain[name] = (dtype, shape, raw)
            continue
        w = as_float32(dtype, shape, raw)
        if conv1d:
            w = np.ascontiguousarray(w.T)
        rows, cols = w.shape
        if fmt == "nf4":
            q = quantize_nf4(w, nested)
            values = dequantize_nf4(q, rows, cols)
            out[name] = array_entry(q["weight"])
            out[name + ".absmax"] = array_entry(q["absmax"])
            out[name + ".quant_map"] = array_entry(q["quant_map"])
            state = {"quant_type": "nf4", "blocksize": 64, "dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
                     "shape": [rows, cols]}
            if nested:
                out[name + ".nested_absmax"] = array_entry(q["nested_absmax"])
                out[name + ".nested_quant_map"] = array_entry(q["nested_quant_map"])
                state.update({"nested_blocksize": 256, "nested_dtype": "float32",
                              "nested_offset": float(q["nested_offset"][0])})
            blob = np.frombuffer(json.dumps(state).encode("utf-8"), dtype=np.uint8)
            out[name + ".quant_state.bitsandbytes__nf4"] = array_entry(blob)
        else:
            q = quantize_int8(w)
            values = dequantize_int8(q)
            out[name] = array_entry(q["weight"])
            out[name[: -len(".weight")] + ".SCB"] = array_entry(q["SCB"])
            out[name[: -len(".weight")] + ".weight_format"] = ("U8", [], bytes([0]))
        plain[name] = array_entry(np.ascontiguousarray(values.T) if conv1d else values)
    os.makedirs(dst, exist_ok=True)
    write_safetensors(os.path.join(dst, "model.safetensors"), out)
    quantized = dict(config)
    quantized["quantization_config"] = {
        "_load_in_4bit": fmt == "nf4", "_load_in_8bit": fmt == "int8", "bnb_4bit_compute_dtype": "bfloat16",
        "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4" if fmt == "nf4" else "fp4",
        "bnb_4bit_use_double_quant": bool(nested and fmt == "nf4"), "llm_int8_enable_fp32_cpu_offload": False,
        "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0,
        "load_in_4bit": fmt == "nf4", "load_in_8bit": fmt == "int8", "quant_method": "bitsandbytes"}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(quantized, f, indent=2, sort_keys=True)
    if dequantized:
        os.makedirs(dequantized, exist_ok=True)
        write_safetensors(os.path.join(dequantized, "model.safetensors"), plain)
        config = dict(config)
        config["torch_dtype"] = "float32"
        with open(os.path.join(dequantized, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(src, extra)):
                shutil.copy(os.path.join(src, extra), os.path.join(dequantized, extra))


def dequantize_folder(src, dst):
    """A bitsandbytes folder (transformers' layout) read by the format alone:
    each quantized weight dequantized with its stored maps and scales (GPT-2's
    back to Conv1D's [in, out]), everything in float32, config.json without
    quantization_config."""
    import os
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    conv1d = config["model_type"] == "gpt2"
    tensors = read_safetensors(os.path.join(src, "model.safetensors"))
    out = {}
    for name, (dtype, shape, raw) in tensors.items():
        if ".weight." in name or name.endswith((".SCB", ".weight_format")):
            continue  # a quantized weight's parts, read with it
        state_name = name + ".quant_state.bitsandbytes__nf4"
        if state_name in tensors:
            state = json.loads(tensors[state_name][2].decode("utf-8"))
            rows, cols = state["shape"]
            part = lambda key, np_type: np.frombuffer(tensors[name + "." + key][2], dtype=np_type)
            q = {"weight": np.frombuffer(raw, dtype=np.uint8), "quant_map": part("quant_map", np.float32)}
            if state["blocksize"] != 64:
                raise ValueError("the reference reads blocks of 64")
            if "nested_offset" in state:
                q["absmax"] = part("absmax", np.uint8)
                q["nested_absmax"] = part("nested_absmax", np.float32)
                q["nested_quant_map"] = part("nested_quant_map", np.float32)
                q["nested_offset"] = np.array([state["nested_offset"]], dtype=np.float32)
            else:
                q["absmax"] = part("absmax", np.float32)
            w = dequantize_nf4(q, rows, cols)
        elif name.endswith(".weight") and name[: -len(".weight")] + ".SCB" in tensors:
            scb = np.frombuffer(tensors[name[: -len(".weight")] + ".SCB"][2], dtype=np.float32)
            w = dequantize_int8({"weight": np.frombuffer(raw, dtype=np.int8).reshape(shape), "SCB": scb})
        else:
            out[name] = array_entry(as_float32(dtype, shape, raw))
            continue
        out[name] = array_entry(np.ascontiguousarray(w.T) if conv1d else w)
    os.makedirs(dst, exist_ok=True)
    write_safetensors(os.path.join(dst, "model.safetensors"), out)
    config.pop("quantization_config", None)
    config["torch_dtype"] = "float32"
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def main(argv):
    if len(argv) >= 2 and argv[0] == "cases":
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 1
        cases(argv[1], seed)
        return 0
    if len(argv) >= 3 and argv[0] == "quantize-folder":
        fmt = argv[argv.index("--format") + 1] if "--format" in argv else "nf4"
        dequantized = argv[argv.index("--dequantized") + 1] if "--dequantized" in argv else None
        quantize_folder(argv[1], argv[2], fmt, "--no-double" not in argv, dequantized)
        return 0
    if len(argv) >= 3 and argv[0] == "dequantize-folder":
        dequantize_folder(argv[1], argv[2])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
