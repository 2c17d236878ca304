#!/usr/bin/env bash
# ATen operators per training step, Trainbench against the plain-PyTorch loop
# (bench/train_throughput.py), on the benchmark GPT of bench/train_throughput.sh.
# Each side runs 20 and 40 steps; (ops at 40 - ops at 20) / 20 is the steady
# per-step count, without setup and the step-0 validation. Prints the totals
# and the operators whose per-step counts differ.
# Usage: bench/op_count.sh   (needs a built tree: scripts/test or scripts/run)
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/install-deps.sh --bench >/dev/null
cli=build/app/trainbench-cli
[ -x "$cli" ] || { echo "build first (scripts/test or scripts/run)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/gpt.json" <<JSON
{"name": "ops-gpt", "device": "cpu",
 "model": {"n_layer": 2, "d_model": 128, "n_head": 4, "positional_encoding": "learned"},
 "data": {"source": "text", "seq_len": 64},
 "optim": {"optimizer": "adamw", "lr": 0.003, "warmup_steps": 20, "schedule": "constant"},
 "train": {"batch_size": 32, "steps": 40, "eval_every": 1000000, "precision": "fp32", "threads": 1}}
JSON
for steps in 20 40; do
  $cli train --config "$work/gpt.json" --db "$work/ops.db" --steps $steps --bare --quiet --count-ops |
    sed -n 's/^op //p' > "$work/cpp-$steps"
  /usr/bin/python3 bench/train_throughput.py --steps $steps --threads 1 --count-ops | sed -n 's/^op //p' > "$work/py-$steps"
done
awk -v work="$work" '
  FNR == 1 { file = FILENAME; sub(".*/", "", file) }
  { n[file, $1] += $2; names[$1] = 1 }
  END {
    for (k in names) {
      c = (n["cpp-40", k] - n["cpp-20", k]) / 20; p = (n["py-40", k] - n["py-20", k]) / 20
      tc += c; tp += p
      if (c != p) printf "  %-36s trainbench %8.1f   pytorch %8.1f\n", k, c, p
    }
    printf "ATen operators per step: trainbench %.1f, pytorch %.1f\n", tc, tp
  }' "$work"/cpp-20 "$work"/cpp-40 "$work"/py-20 "$work"/py-40 | sort
