#!/usr/bin/env python3
"""QLoRA against LoRA on the CPU: does a fine-tune on a base stored in NF4
(or int8) learn as the same fine-tune on the unquantized base, and what does
a step cost?

1. Pretrains the built-in Llama on the bundled sample text (bytes) and exports
   it as a Hugging Face folder: a base that has learned something, so that
   its quantization error matters to what the adapters start from.
2. Fine-tunes it on other text (this repository's docs, as byte ids) with
   LoRA and with QLoRA, the same data, steps, seeds and settings, and reports
   each run's final validation loss and steady-state tokens per second.

Goals (docs/qlora.md): the QLoRA run's final loss within 5% of LoRA's on
every seed; a QLoRA step at most 1.5x the LoRA step.

  bench/qlora.py [--cli build/app/trainbench-cli] [--seeds 3] [--steps 150] [--format nf4|int8] [--dir DIR]
"""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cli, *args):
    p = subprocess.run([cli, *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("trainbench-cli %s failed: %s" % (" ".join(args[:2]), p.stderr.strip()[-500:]))
    return p.stdout


def train(cli, db, config, path):
    with open(path, "w") as f:
        json.dump(config, f)
    out = run(cli, "train", "--config", path, "--db", db)
    speed = re.search(r"throughput: (\d+) tokens/s", out)
    runs = json.loads(run(cli, "runs", "--db", db, "--json"))
    last = max(runs, key=lambda r: r["id"])
    return last, int(speed.group(1)) if speed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/app/trainbench-cli"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--format", default="nf4", choices=["nf4", "int8"])
    ap.add_argument("--dir", default="")
    a = ap.parse_args()
    tmp = a.dir or tempfile.mkdtemp(prefix="tb-qlora-bench-")
    os.makedirs(tmp, exist_ok=True)
    db = os.path.join(tmp, "runs.db")
    # 1. The base.
    base = {"name": "base", "device": "cpu",
            "model": {"type": "llama", "n_layer": 4, "d_model": 256, "n_head": 4},
            "data": {"source": "text", "seq_len": 128},
            "optim": {"lr": 3e-3, "warmup_steps": 30},
            "train": {"batch_size": 16, "steps": 400, "seed": 1}}
    pre, _ = train(a.cli, db, base, os.path.join(tmp, "base.json"))
    folder = os.path.join(tmp, "base-folder")
    run(a.cli, "export-model", str(pre["id"]), "--db", db, "--output", folder)
    with open(os.path.join(folder, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    print("base: built-in Llama, 4 layers x 256, pretrained %d steps on the sample text (val loss %.3f), vocab %d"
          % (base["train"]["steps"], pre["final_val_loss"], vocab), flush=True)
    # 2. The fine-tuning data: this repository's docs as byte ids.
    text = b"".join(open(p, "rb").read() for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))))
    ids = [b for b in text if b < vocab]
    tokens = os.path.join(tmp, "docs.bin")
    with open(tokens, "wb") as f:
        f.write(b"".join(i.to_bytes(2, "little") for i in ids))
    print("fine-tuning data: docs/*.md, %d byte ids" % len(ids), flush=True)
    rows = []
    for seed in range(1, a.seeds + 1):
        result = {}
        for method in ("lora", a.format):
            config = {"name": "%s-%d" % (method, seed), "device": "cpu",
                      "model": {"type": "hf", "path": folder},
                      "data": {"source": "tokens", "path": tokens, "seq_len": 128},
                      "optim": {"lr": 2e-3, "warmup_steps": 10},
                      "train": {"batch_size": 16, "steps": a.steps, "seed": seed, "eval_batches": 16},
                      "lora": {"rank": 16, "alpha": 32}}
            if method != "lora":
                config["model"]["quantize"] = method
            r, speed = train(a.cli, db, config, os.path.join(tmp, "%s-%d.json" % (method, seed)))
            result[method] = (r["final_val_loss"], speed)
        lora, quant = result["lora"], result[a.format]
        rows.append((seed, lora, quant))
        print("seed %d: LoRA val loss %.4f at %d tokens/s; %s %.4f at %d tokens/s: loss %+.2f%%, step cost %.2fx"
              % (seed, lora[0], lora[1], a.format, quant[0], quant[1], 100 * (quant[0] / lora[0] - 1),
                 lora[1] / max(quant[1], 1)), flush=True)
    worst = max(abs(q[0] / l[0] - 1) for _, l, q in rows)
    cost = statistics.median(l[1] / max(q[1], 1) for _, l, q in rows)
    print("largest loss difference %.2f%% (goal <= 5%%: %s); median step cost %.2fx LoRA's (goal <= 1.5x: %s)"
          % (100 * worst, "met" if worst <= 0.05 else "NOT met", cost, "met" if cost <= 1.5 else "NOT met"))
    if not a.dir:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
