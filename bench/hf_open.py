#!/usr/bin/env python3
"""Opening a 7B-shaped Hugging Face folder: is it bound by the disk, and how
much anonymous memory does it take?

Writes a Llama-2-7B-shaped folder (vocab 32000, hidden 4096, 32 layers, MLP
11008, untied head: 6.74 B parameters, 13.5 GB in bf16) as sharded bf16
safetensors with an index, filled from a repeated block of N(0, 0.02) values
(the bytes do not matter to loading), unless DIR already holds it. Then:

1. reads the shards with `cat` into /dev/null: the disk's own time;
2. runs `trainbench-cli sample --model DIR --prompt-ids 1 --max-tokens 0
   --precision bf16`: it maps the shards, builds the model in bf16, copies
   every tensor in and runs one forward pass over one token;

polling /proc/PID/status every 10 ms for the largest RssAnon (anonymous
memory: the model, not the page cache of the mapped files), RssFile and
VmHWM. Where the page cache can be dropped (root), both steps start cold.
The goal: RssAnon <= 1.1 x the model's bf16 bytes, and seconds near the
disk's.

With --quantize nf4 (or int8) step 2 quantizes the block linears as they
load (QLoRA's base): the goal is then RssAnon <= 1.1 x (the quantized model's
bytes, its other tensors in bf16, plus one decoder layer's bf16 weights).

  bench/hf_open.py [--dir DIR] [--cli build/app/trainbench-cli] [--layers 32] [--keep] [--quantize nf4|int8]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import torch


def shapes(layers):
    v, h, ff = 32000, 4096, 11008
    out = [("model.embed_tokens.weight", [v, h])]
    for i in range(layers):
        p = "model.layers.%d." % i
        out += [(p + "self_attn.%s_proj.weight" % n, [h, h]) for n in "qkvo"]
        out += [(p + "mlp.gate_proj.weight", [ff, h]), (p + "mlp.up_proj.weight", [ff, h]),
                (p + "mlp.down_proj.weight", [h, ff]),
                (p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h])]
    out += [("model.norm.weight", [h]), ("lm_head.weight", [v, h])]
    return out


def quantized_bytes(shape, fmt):
    """What Trainbench stores for one [out, in] weight (train/Quantize.h): nf4
    with double quantization (codes, 8-bit block scales, levels, nested
    scales and map) or int8 (codes and a scale per row)."""
    n = shape[0] * shape[1]
    if fmt == "int8":
        return n + 4 * shape[0]
    blocks = -(-n // 64)
    return -(-n // 2) + blocks + 16 * 4 + 4 * -(-blocks // 256) + 256 * 4


def model_bytes(layers, fmt):
    """The model as it loads: block linears quantized, everything else bf16;
    and the largest decoder layer's bf16 bytes."""
    total, layer = 0, 0
    for name, shape in shapes(layers):
        n = 1
        for d in shape:
            n *= d
        linear = ".layers." in name and len(shape) == 2
        total += quantized_bytes(shape, fmt) if linear else 2 * n
        if name.startswith("model.layers.0."):
            layer += 2 * n
    return total, layer


def write_folder(folder, layers):
    os.makedirs(folder, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
           "intermediate_size": 11008, "num_hidden_layers": layers, "num_attention_heads": 32,
           "num_key_value_heads": 32, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 1,
           "eos_token_id": 2}
    torch.manual_seed(1)
    block = (torch.randn(1 << 25) * 0.02).to(torch.bfloat16).view(torch.int16).numpy().tobytes()  # 64 MiB
    shard_limit = 5_000_000_000
    shards, current, size = [], [], 0
    for name, shape in shapes(layers):
        n = 2
        for d in shape:
            n *= d
        if current and size + n > shard_limit:
            shards.append(current)
            current, size = [], 0
        current.append((name, shape, n))
        size += n
    shards.append(current)
    weight_map, total = {}, 0
    for k, tensors in enumerate(shards):
        file = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards))
        header, offset = {}, 0
        for name, shape, n in tensors:
            header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[name] = file
        header["__metadata__"] = {"format": "pt"}
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        with open(os.path.join(folder, file), "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for _, _, n in tensors:
                while n > 0:
                    chunk = min(n, len(block))
                    f.write(block[:chunk])
                    n -= chunk
        total += offset
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    return total


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def status_kb(pid, keys):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in keys:
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "trainbench-7b-folder"))
    ap.add_argument("--cli", default="build/app/trainbench-cli")
    ap.add_argument("--layers", type=int, default=32, help="fewer layers where the disk is short")
    ap.add_argument("--keep", action="store_true", help="keep the generated folder")
    ap.add_argument("--quantize", choices=["nf4", "int8"], help="quantize the block linears as they load")
    a = ap.parse_args()
    made = False
    if not os.path.exists(os.path.join(a.dir, "model.safetensors.index.json")):
        t = time.time()
        total = write_folder(a.dir, a.layers)
        made = True
        print("wrote %s: %.2f GB of bf16 in %d s" % (a.dir, total / 1e9, time.time() - t), flush=True)
    with open(os.path.join(a.dir, "model.safetensors.index.json")) as f:
        total = json.load(f)["metadata"]["total_size"]
    files = sorted(set(json.load(open(os.path.join(a.dir, "model.safetensors.index.json")))["weight_map"].values()))
    cold = drop_caches()
    t = time.time()
    subprocess.run(["cat"] + [os.path.join(a.dir, f) for f in files], stdout=subprocess.DEVNULL, check=True)
    disk = time.time() - t
    print("disk: cat of %d shards, %.2f GB, %.1f s (%s cache)" % (len(files), total / 1e9, disk, "cold" if cold else "warm"),
          flush=True)
    drop_caches()
    keys = ("RssAnon", "RssFile", "VmHWM")
    peak = dict.fromkeys(keys, 0)
    anon_series = []  # (seconds since start, RssAnon kB)
    t = time.time()
    command = [a.cli, "sample", "--model", a.dir, "--prompt-ids", "1", "--max-tokens", "0", "--precision", "bf16", "--json"]
    if a.quantize:
        command += ["--quantize", a.quantize]
    p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while p.poll() is None:
        now = status_kb(p.pid, keys)
        for k, v in now.items():
            peak[k] = max(peak[k], v)
        if "RssAnon" in now:
            anon_series.append((time.time() - t, now["RssAnon"]))
        time.sleep(0.01)
    seconds = time.time() - t
    out, err = p.communicate()
    if p.returncode != 0:
        print("trainbench-cli failed: %s" % err.strip())
        sys.exit(1)
    timing = json.loads(out)
    anon = peak["RssAnon"] * 1024
    print("trainbench-cli sample (open, build in bf16, load, 1-token forward): %.1f s (%s cache); peak RssAnon %.2f GB "
          "= %.3f x the model's %.2f GB of bf16; peak RssFile %.2f GB; VmHWM %.2f GB"
          % (seconds, "cold" if cold else "warm", anon / 1e9, anon / total, total / 1e9, peak["RssFile"] * 1024 / 1e9,
             peak["VmHWM"] * 1024 / 1e9))
    print("of which: opening the folder, building the model and copying the weights in %.1f s; the forward pass %.1f s"
          % (timing["load_seconds"], timing["compute_seconds"]))
    if a.quantize:
        stored, layer = model_bytes(a.layers, a.quantize)
        goal = 1.1 * (stored + layer)
        # Opening alone: the samples before the forward pass began (the run's own clock says when).
        opened = seconds - timing["compute_seconds"]
        open_peak = max((kb for s, kb in anon_series if s <= opened), default=0) * 1024
        print("quantized %s as it loads: the model holds %.2f GB (%.3f bytes a weight of the block linears' %s); "
              "one decoder layer is %.2f GB of bf16"
              % (a.quantize, stored / 1e9, quantized_bytes([4096, 11008], a.quantize) / (4096 * 11008), a.quantize,
                 layer / 1e9))
        print("opening (before the forward pass): peak RssAnon %.2f GB = %.3f x (the quantized model + one layer); "
              "goal <= 1.1 x = %.2f GB: %s. With the forward pass (each layer dequantized in turn): %.2f GB, %.3f x"
              % (open_peak / 1e9, open_peak / (stored + layer), goal / 1e9, "met" if open_peak <= goal else "NOT met",
                 anon / 1e9, anon / (stored + layer)))
    else:
        print("goal RssAnon <= 1.1 x: %s; loading seconds / disk seconds: %.2f"
              % ("met" if anon <= 1.1 * total else "NOT met", timing["load_seconds"] / disk))
    if made and not a.keep:
        shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
