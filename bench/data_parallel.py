#!/usr/bin/python3
"""Data-parallel scaling on this machine's CPU: one process against two.

  bench/data_parallel.py [ROUNDS]     (needs a built tree: build/app/trainbench-cli)

Per round, in alternating order, on one GPT workload (every process at the
same per-process batch b):
  1 process, batch b, all cores (the default thread setup)
  1 process, batch 2b, all cores        (the same global batch as 2 x b)
  2 processes (--nproc 2), batch b each, the cores split between them (one each here)
  2 processes with 2 MB buckets (train.dist_bucket_mb) instead of 25 MB
  2 processes, gradients all-reduced after backward (--no-overlap)
Reported: steady tokens/s of each (median over rounds), the scaling ratio
2 processes / 1 process at the same global batch, the weak-scaling efficiency
(2 processes / twice 1 process at b), and the share of each rank-0 step spent
waiting on the gradient all-reduce with and without overlap.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build", "app", "trainbench-cli")


def config(path, batch, bucket_mb=25):
    c = {"name": "dp-bench", "device": "cpu",
         "model": {"type": "gpt", "n_layer": 4, "d_model": 256, "n_head": 8, "positional_encoding": "learned",
                   "dropout": 0.0},
         "data": {"source": "text", "seq_len": 64},
         "optim": {"optimizer": "adamw", "lr": 0.0005, "warmup_steps": 5},
         "train": {"batch_size": batch, "steps": 50, "seed": 1, "precision": "fp32", "eval_every": 1000,
                   "dist_bucket_mb": bucket_mb}}
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def run(db, cfg, *extra):
    out = subprocess.run([CLI, "train", "--config", cfg, "--db", db, "--quiet", "--no-memory-probe", *extra],
                         capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(extra)}: {out.stderr.strip()[-400:]}")
    rate = float(re.search(r"throughput: ([0-9.]+) tokens/s", out.stdout).group(1))
    run_id = int(re.search(r"\(run ([0-9]+)\)", out.stdout).group(1))
    return rate, run_id


def wait_share(db, run_id):
    """Rank 0's all-reduce wait over its step time, after the 10th step."""
    rows = subprocess.run([CLI, "export", str(run_id), "--db", db], capture_output=True, text=True).stdout.splitlines()[1:]
    wait, step = {}, {}
    for line in rows:
        _, s, key, value = line.split(",")[:4]
        if key == "comm_wait_ms":
            wait[int(s)] = float(value)
        elif key == "step_ms":
            step[int(s)] = float(value)
    steps = [s for s in step if s > 10 and s in wait]
    return sum(wait[s] for s in steps) / sum(step[s] for s in steps), statistics.median(wait[s] for s in steps)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    tmp = tempfile.mkdtemp(prefix="tb-dp-bench-")
    db = os.path.join(tmp, "bench.db")
    b, b2 = config(os.path.join(tmp, "b.json"), 8), config(os.path.join(tmp, "b2.json"), 16)
    # 13.6 MB of gradients: at 25 MB they make 2 buckets (1 MB, then the rest,
    # which is full only at the end of backward); at 2 MB, 8.
    small = config(os.path.join(tmp, "small-buckets.json"), 8, bucket_mb=2)
    cores = os.cpu_count()
    sides = {
        # The default threads: 1 OpenMP thread, BLAS on every core (core/train/Threads.cpp).
        "1 process, batch 8": lambda: run(db, b),
        "1 process, batch 16": lambda: run(db, b2),
        "2 processes x batch 8": lambda: run(db, b, "--nproc", "2"),
        "2 processes x batch 8, 2 MB buckets": lambda: run(db, small, "--nproc", "2"),
        "2 processes x batch 8, no overlap": lambda: run(db, b, "--nproc", "2", "--no-overlap"),
    }
    rates = {k: [] for k in sides}
    shares = {k: [] for k in sides if "processes" in k}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for k in order:
            rate, run_id = sides[k]()
            rates[k].append(rate)
            if k in shares:
                shares[k].append(wait_share(db, run_id))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"machine: {cores} cores; GPT 4 x 256, seq 64, fp32 AdamW; {rounds} rounds, medians")
    for k, v in med.items():
        print(f"  {k:36s} {v:9.0f} tokens/s")
    print(f"scaling at the same global batch (2 x 8 against 1 x 16): {med['2 processes x batch 8'] / med['1 process, batch 16']:.2f}")
    print(f"weak-scaling efficiency (2 x 8 against twice 1 x 8):     "
          f"{med['2 processes x batch 8'] / (2 * med['1 process, batch 8']):.2f}")
    for k, v in shares.items():
        share = statistics.median(s for s, _ in v)
        ms = statistics.median(m for _, m in v)
        print(f"  {k:36s} waits on the all-reduce {100 * share:4.1f}% of the step (median {ms:.2f} ms a step)")


if __name__ == "__main__":
    main()
