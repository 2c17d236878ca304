#!/usr/bin/env python3
"""trainbench-cli tune against an exhaustive measured grid of the same space.

For each budget: `tune` as a user runs it (plan every candidate, measure the
best few), then `tune --measure-all` (every candidate that fits, measured the
same way in one process). Reports the winner's figure in the exhaustive grid
against the grid's best (the check: within 5%), how many candidates each side
trained, and that neither the winner's planned nor its measured peak is over
the budget. Steps per candidate: --steps (default 20, after one untimed step).
Where the winner is not the grid's best, one measurement each cannot tell
them apart (neighbours differ by less than its noise on a shared machine): the
two are then trained alternately --rounds times (twice the steps, after 10
untimed) and their medians compared.

Usage: bench/tune.py [--steps N] [--rounds R] [--config FILE] [--keep-effective-batch] [BUDGET ...]
  BUDGET: as tune takes it ("64 MiB"); default 32 MiB, 64 MiB and 256 MiB.
  Needs a built tree (scripts/test or scripts/run).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build", "app", "trainbench-cli")


def tune(config, budget, steps, extra):
    cmd = [CLI, "tune", "--config", config, "--budget", budget, "--measure-steps", str(steps), "--json"] + extra
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode not in (0, 1):
        sys.exit(f"tune failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout), seconds


def train_rate(config, steps):
    """Steady-state tokens/s of `train` on a config (a store of its own)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "c.json")
        with open(path, "w") as f:
            json.dump(config, f)
        done = subprocess.run([CLI, "train", "--config", path, "--db", os.path.join(tmp, "e.db"), "--quiet"],
                              capture_output=True, text=True)
        match = re.search(r"throughput: (\d+) tokens/s", done.stdout)
        if done.returncode != 0 or not match:
            sys.exit(f"train failed: {done.stdout}{done.stderr}")
        return float(match.group(1))


def with_candidate(base, c, steps):
    config = json.loads(json.dumps(base))
    config["device"] = "cpu"
    train = config.setdefault("train", {})
    train.update({"batch_size": c["batch_size"], "grad_accum": c["grad_accum"], "precision": c["precision"],
                  "activation_checkpointing": c["activation_checkpointing"], "steps": steps + 10,
                  "eval_every": steps + 10, "checkpoint_every": 0})
    config.setdefault("model", {})["attention"] = c["attention"]
    config.setdefault("optim", {})["warmup_steps"] = 0
    return config


def rematch(base, winner, best, steps, rounds):
    """The winner and the grid's best trained alternately, `rounds` times each:
    the median of each side's steady-state tokens/s."""
    w, b = [], []
    for _ in range(rounds):
        w.append(train_rate(with_candidate(base, winner, steps), steps))
        b.append(train_rate(with_candidate(base, best, steps), steps))
    return statistics.median(w), statistics.median(b)


def key(c):
    return (c["batch_size"], c["grad_accum"], c["activation_checkpointing"], c["precision"], c["attention"])


def describe(c):
    text = f"batch {c['batch_size']}"
    if c["grad_accum"] > 1:
        text += f" x {c['grad_accum']}"
    if c["activation_checkpointing"]:
        text += ", checkpointing"
    return text + f", {c['precision']}, {c['attention']}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--config", default=os.path.join(ROOT, "resources", "examples", "addition.json"))
    parser.add_argument("--keep-effective-batch", action="store_true")
    parser.add_argument("--rounds", type=int, default=3,
                        help="when the winner is not the grid's best: alternating trainings of each (default 3)")
    parser.add_argument("budgets", nargs="*", default=["32 MiB", "64 MiB", "256 MiB"])
    args = parser.parse_args()
    if args.steps < 1:
        sys.exit("--steps must be at least 1")
    if not os.access(CLI, os.X_OK):
        sys.exit(f"{CLI} is not built: run scripts/test or scripts/run first")
    extra = ["--keep-effective-batch"] if args.keep_effective_batch else []
    with open(args.config) as f:
        base = json.load(f)
    print(f"config {os.path.relpath(args.config, ROOT)}, {args.steps} timed steps per candidate"
          + (", effective batch kept" if extra else ""))
    print(f"{'budget':>9}  {'tune winner':<34} {'in grid':>9} {'grid best':>9} {'share':>6}  "
          f"{'trained':>7}  {'grid':>4}  {'tune s':>6}  {'grid s':>6}  over budget")
    worst = 1.0
    for budget in args.budgets:
        picked, tune_s = tune(args.config, budget, args.steps, extra)
        grid, grid_s = tune(args.config, budget, args.steps, extra + ["--measure-all"])
        if picked["winner"] < 0:
            print(f"{budget:>9}  nothing fits: {'; '.join(picked.get('nothing_fits', []))}")
            continue
        winner = picked["candidates"][picked["winner"]]
        measured = [c for c in grid["candidates"] if c.get("measured_tokens_per_second", -1) > 0
                    and c.get("measured_peak_bytes", 0) <= grid["budget_bytes"]]
        best = max(measured, key=lambda c: c["measured_tokens_per_second"])
        same = [c for c in measured if key(c) == key(winner)]
        in_grid = same[0]["measured_tokens_per_second"] if same else float("nan")
        share = in_grid / best["measured_tokens_per_second"]
        trained = sum(1 for c in picked["candidates"] if "measured_tokens_per_second" in c)
        over = []
        if winner["planned_peak_bytes"] > picked["budget_bytes"]:
            over.append("planned")
        if winner.get("measured_peak_bytes", 0) > picked["budget_bytes"]:
            over.append("measured")
        print(f"{budget:>9}  {describe(winner):<34} {in_grid:9.0f} {best['measured_tokens_per_second']:9.0f} "
              f"{100 * share:5.1f}%  {trained:7d}  {len(measured):4d}  {tune_s:6.1f}  {grid_s:6.1f}  "
              f"{', '.join(over) or 'no'}")
        print(f"{'':>9}  grid best: {describe(best)}")
        if key(best) != key(winner):
            # Neighbours in the grid differ by less than one measurement's
            # noise: train the two alternately and compare medians.
            w, b = rematch(base, winner, best, args.steps * 2, args.rounds)
            share = w / b
            print(f"{'':>9}  trained alternately {args.rounds} times, {args.steps * 2} steps each: winner {w:.0f}, "
                  f"grid best {b:.0f} tokens/s, {100 * share:.1f}%")
        worst = min(worst, share)
    print(f"worst share of the grid's best: {100 * worst:.1f}% (the check: at least 95%)")


if __name__ == "__main__":
    main()
