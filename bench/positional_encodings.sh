#!/usr/bin/env bash
# Does every positional encoding learn? 2-digit addition with the bundled
# addition architecture (resources/examples/addition.json: 3 layers, d_model
# 128, 4 heads, untied output head), batch 128, lr 1e-3,
# 50 warmup steps, cosine schedule, 500 steps, one thread per run, two runs at
# a time. Prints held-out exact match per encoding and seed.
# Usage: bench/positional_encodings.sh [SEEDS...]   (default: 1 2 3; needs a built tree)
set -euo pipefail
cd "$(dirname "$0")/.."
cli=$PWD/build/app/trainbench-cli
[ -x "$cli" ] || { echo "build first (scripts/test or scripts/run)" >&2; exit 1; }
seeds=${*:-1 2 3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

one() {
  local cli=$1 work=$2 encoding=$3 seed=$4
  mkdir -p "$work/$encoding-$seed"
  cat > "$work/$encoding-$seed/config.json" <<JSON
{"name": "pe-$encoding-$seed", "device": "cpu",
 "model": {"type": "gpt", "n_layer": 3, "d_model": 128, "n_head": 4, "positional_encoding": "$encoding", "tie_embeddings": false},
 "data": {"source": "addition", "digits": 2},
 "optim": {"optimizer": "adamw", "lr": 0.001, "weight_decay": 0.01, "warmup_steps": 50, "schedule": "cosine"},
 "train": {"batch_size": 128, "steps": 500, "seed": $seed, "eval_every": 500, "checkpoint_every": 0, "threads": 1}}
JSON
  "$cli" train --config "$work/$encoding-$seed/config.json" --db "$work/$encoding-$seed/runs.db" --quiet 2>&1 |
    sed -n 's/.*val accuracy \([0-9.]*\)%.*/\1/p' > "$work/$encoding-$seed/accuracy"
}
export -f one
# The same kernels as tst_positional_encodings (tests/CMakeLists.txt says why).
export OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for encoding in learned sinusoidal rope; do
  for seed in $seeds; do echo "$cli $work $encoding $seed"; done
done | xargs -P 2 -L 1 bash -c 'one "$@"' _
printf "%-11s" "seed"; for seed in $seeds; do printf "%8s" "$seed"; done; echo
for encoding in learned sinusoidal rope; do
  printf "%-11s" "$encoding"
  for seed in $seeds; do printf "%7.1f%%" "$(cat "$work/$encoding-$seed/accuracy" 2>/dev/null || echo nan)"; done
  echo
done
