#!/usr/bin/env bash
# Trainbench's training loop against an equivalent plain-PyTorch loop (same
# LibTorch 1.13, same model, data, optimizer and thread count), and
# Trainbench's own overhead (metrics store + memory probe on vs off).
# Usage: bench/train_throughput.sh [STEPS] [REPEATS]   (needs a built tree: scripts/test or scripts/run)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
repeats=${2:-3}
packaging/install-deps.sh --bench >/dev/null
cli=build/app/trainbench-cli
[ -x "$cli" ] || { echo "build first (scripts/test or scripts/run)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/bench.json" <<JSON
{"name": "bench", "device": "cpu",
 "model": {"n_layer": 2, "d_model": 128, "n_head": 4, "positional_encoding": "learned"},
 "data": {"source": "text", "seq_len": 64},
 "optim": {"optimizer": "adamw", "lr": 0.003, "warmup_steps": 20, "schedule": "constant"},
 "train": {"batch_size": 32, "steps": $steps, "eval_every": 1000000, "precision": "fp32"}}
JSON

rate() { sed -n 's/^throughput: \([0-9]*\) tokens.*/\1/p'; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "workload: GPT d_model 128, 2 layers, 4 heads, seq 64, batch 32, AdamW, fp32, $steps steps, median of $repeats"
# auto: trainbench's default threads (1 OpenMP + OpenBLAS on every core) against
#       PyTorch's torch.set_num_threads(1), which leaves OpenBLAS on every core too.
# 1:    one thread everywhere (OpenBLAS pinned to 1 in both).
for setup in auto 1; do
  if [[ $setup == auto ]]; then tbargs=(); pyenv=(); else tbargs=(--threads 1); pyenv=(OPENBLAS_NUM_THREADS=1); fi
  tb=(); tbbare=(); py=()
  for ((i = 0; i < repeats; i++)); do
    tb+=("$($cli train --config "$work/bench.json" --db "$work/b.db" "${tbargs[@]}" --quiet | rate)")
    tbbare+=("$($cli train --config "$work/bench.json" --db "$work/b.db" "${tbargs[@]}" --quiet --no-metrics --no-memory-probe | rate)")
    py+=("$(env "${pyenv[@]}" /usr/bin/python3 bench/train_throughput.py --steps "$steps" --threads 1 | rate)")
  done
  t=$(printf '%s\n' "${tb[@]}" | median); b=$(printf '%s\n' "${tbbare[@]}" | median); p=$(printf '%s\n' "${py[@]}" | median)
  echo "threads $setup: trainbench $t tok/s (store+probe off: $b), pytorch $p tok/s;" \
       "ratio $(awk -v a="$t" -v b="$p" 'BEGIN {printf "%.2f", a / b}'),"\
       "overhead $(awk -v a="$t" -v b="$b" 'BEGIN {printf "%.1f%%", 100 * (b - a) / b}')"
done
