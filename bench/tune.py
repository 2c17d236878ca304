#!/usr/bin/env python3
"""trainbench-cli tune against an exhaustive measured grid of the same space.

For each budget: `tune` as a user runs it (plan every candidate, measure the
best few), then `tune --measure-all` (every candidate that fits, measured the
same way in one process). Reports the winner's figure in the exhaustive grid
against the grid's best (the check: within 5%), how many candidates each side
trained, and that neither the winner's planned nor its measured peak is over
the budget. Steps per candidate: --steps (default 20, after one untimed step).

Usage: bench/tune.py [--steps N] [--config FILE] [--keep-effective-batch] [BUDGET ...]
  BUDGET: as tune takes it ("64 MiB"); default 32 MiB, 64 MiB and 256 MiB.
  Needs a built tree (scripts/test or scripts/run).
"""
import argparse
import json
import os
import subprocess
import sys
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
    parser.add_argument("budgets", nargs="*", default=["32 MiB", "64 MiB", "256 MiB"])
    args = parser.parse_args()
    if args.steps < 1:
        sys.exit("--steps must be at least 1")
    if not os.access(CLI, os.X_OK):
        sys.exit(f"{CLI} is not built: run scripts/test or scripts/run first")
    extra = ["--keep-effective-batch"] if args.keep_effective_batch else []
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
        worst = min(worst, share)
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
    print(f"worst share of the grid's best: {100 * worst:.1f}% (the check: at least 95%)")


if __name__ == "__main__":
    main()
