#!/usr/bin/env bash
# How reliably does training learn? 2-digit addition, 500 steps, held-out exact
# match at step 500 on many seeds, for each positional encoding of the GPT
# (resources/examples/addition.json's architecture: 3 layers, d_model 128,
# 4 heads, untied head; lr 1e-3, 50 warmup steps, batch 128) and for the Llama
# model at its documented setting (docs/learning.md) (4 query / 2 key-value heads, lr 3e-3), side by
# side with the plain-PyTorch reference (bench/learning_reference.py) on the
# same seeds.
#
# Trainbench runs the way a user runs it: `trainbench-cli train`, default
# train.threads, the machine's own kernels (unless --kernels names a set). Runs one
# Trainbench run at a time (it uses every core) and two reference runs at a
# time (one thread each: its results do not depend on the thread count).
#
# Results accumulate in OUT/results.tsv, and runs already there are skipped,
# so the bench can run in parts. About 25 s per run on the 2-core development
# machine: 16 seeds x 4 parts x 2 sides is about an hour.
#
# Usage: bench/learning_robustness.sh [--torch2] [--seeds "1 2 ..."] [--parts "learned sinusoidal rope llama"]
#          [--kernels native|avx2|avx512|cooperlake] [--threads 0|1|2|...] [--no-reference] [--out DIR]
#
# --threads N sets Trainbench's train.threads (0: its default, 1 ATen thread
# and OpenBLAS on every core); the reference keeps one thread. Results are
# kept per kernel set and thread count.
# --torch2 runs the LibTorch 2.6 tree's trainbench-cli in the Debian 13 chroot
# of scripts/test (build it first: scripts/test --torch2), and the reference
# on Debian 13's PyTorch 2.6; its results are kept apart (kernel sets
# "torch2-...") in the build tree's learning-results folder
# (~/.cache/trainbench/build-torch2/learning-results), the chroot seeing the
# source read-only.
set -euo pipefail
cd "$(dirname "$0")/.."
cli=$PWD/build/app/trainbench-cli
tree=
out=bench-results/learning
case "${1:-}" in
  --torch2) shift; source bench/torch2.sh; tb_bench_rerun_in_torch2 learning_robustness.sh "$@" ;;
  --in-chroot) shift; cli=/build/app/trainbench-cli tree=torch2- out=/build/learning-results ;;
esac
usage() {
  sed -n 's/^# Usage: //p; s/^#  \{9\}/   /p' "$0" >&2
  exit 2
}
seeds=$(seq -s ' ' 1 16)
parts="learned sinusoidal rope llama"
kernels=native
threads=0
reference=1
while (($#)); do
  case "$1" in
    --seeds) seeds=${2:?}; shift 2 ;;
    --parts) parts=${2:?}; shift 2 ;;
    --kernels) kernels=${2:?}; shift 2 ;;
    --threads) threads=${2:?}; shift 2 ;;
    --no-reference) reference=0; shift ;;
    --out) out=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
source bench/kernels.sh
tb_bench_kernels "$kernels" || usage
[[ $threads =~ ^[0-9]+$ ]] || { echo "threads '$threads' is not a number" >&2; usage; }
# A result is kept per kernel set and thread count: "avx512" (default threads) or "avx512/t1".
kernelsKey=$tree$kernels
((threads == 0)) || kernelsKey="$tree$kernels/t$threads"
for p in $parts; do
  case "$p" in learned | sinusoidal | rope | llama) ;; *) echo "unknown part '$p'" >&2; usage ;; esac
done
for s in $seeds; do [[ $s =~ ^[0-9]+$ ]] || { echo "seed '$s' is not a number" >&2; usage; }; done

[ -x "$cli" ] || { echo "build first (scripts/test or scripts/run)" >&2; exit 1; }
py=/usr/bin/python3
if ((reference)) && ! "$py" -c 'import torch' 2>/dev/null; then
  echo "the reference needs Debian's python3-torch: packaging/install-deps.sh --bench" >&2
  exit 1
fi
mkdir -p "$out"
results=$out/results.tsv
touch "$results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

have() { awk -v p="$1" -v i="$2" -v k="$kernelsKey" -v s="$3" '$1==p && $2==i && $3==k && $4==s {f=1} END {exit !f}' "$results"; }

config() { # part seed
  local model
  if [[ $1 == llama ]]; then
    model='"type": "llama", "n_layer": 3, "d_model": 128, "n_head": 4, "n_kv_head": 2, "tie_embeddings": false'
    lr=0.003
  else
    model="\"type\": \"gpt\", \"n_layer\": 3, \"d_model\": 128, \"n_head\": 4, \"positional_encoding\": \"$1\", \"tie_embeddings\": false"
    lr=0.001
  fi
  cat <<JSON
{"name": "robustness-$1-$2", "device": "cpu",
 "model": {$model},
 "data": {"source": "addition", "digits": 2},
 "optim": {"optimizer": "adamw", "lr": $lr, "weight_decay": 0.01, "warmup_steps": 50, "schedule": "cosine"},
 "train": {"batch_size": 128, "steps": 500, "seed": $2, "eval_every": 500, "checkpoint_every": 0, "precision": "fp32", "threads": $threads}}
JSON
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernels: $kernels, train.threads: $threads" \
  "($(tb_bench_kernels_in_use "$py"))"
for part in $parts; do
  for seed in $seeds; do
    have "$part" trainbench "$seed" && continue
    config "$part" "$seed" >"$work/config.json"
    rm -f "$work/runs.db"
    acc=$("$cli" train --config "$work/config.json" --db "$work/runs.db" --quiet 2>&1 |
      sed -n 's/.*val accuracy \([0-9.]*\)%.*/\1/p')
    rm -rf "$work/runs.db"*
    printf '%s\ttrainbench\t%s\t%s\t%s\n' "$part" "$kernelsKey" "$seed" "${acc:-nan}" >>"$results"
    echo "trainbench $part seed $seed: ${acc:-nan}%"
  done
  if ((reference)); then
    todo=()
    for seed in $seeds; do have "$part" pytorch "$seed" || todo+=("$seed"); done
    if ((${#todo[@]})); then
      if [[ $part == llama ]]; then args="--model llama --lr 3e-3"; else args="--model gpt --encoding $part --lr 1e-3"; fi
      printf '%s\n' "${todo[@]}" | OPENBLAS_NUM_THREADS=1 xargs -P 2 -I{} sh -c \
        "$py bench/learning_reference.py --threads 1 --seed {} $args > $work/ref-{}.json"
      for seed in "${todo[@]}"; do
        acc=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['final'])" "$work/ref-$seed.json" 2>/dev/null || echo nan)
        printf '%s\tpytorch\t%s\t%s\t%s\n' "$part" "$kernelsKey" "$seed" "$acc" >>"$results"
        echo "pytorch $part seed $seed: $acc%"
      done
    fi
  fi
done

# The table: per part and side, the share of seeds at >= 80% and the distribution.
echo
echo "Held-out exact match at step 500 ($kernelsKey kernels), seeds: $seeds"
"$py" - "$results" "$kernelsKey" "$parts" "$seeds" <<'PY'
import statistics, sys
path, kernels, parts, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
rows = {}
for line in open(path):
    f = line.split()
    if len(f) == 5:
        rows[(f[2], f[0], f[1], f[3])] = float(f[4])
print("| part | side | runs >= 90% | runs >= 80% | min | median | held-out exact match by seed |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for part in parts:
    for side in ("trainbench", "pytorch"):
        vals = [rows.get((kernels, part, side, s)) for s in seeds]
        got = [v for v in vals if v is not None and v == v]
        if not got:
            continue
        ok90, ok80 = sum(v >= 90.0 for v in got), sum(v >= 80.0 for v in got)
        cells = " / ".join("-" if v is None else f"{v:.1f}" for v in vals)
        print(f"| {part} | {side} | {ok90} of {len(got)} | {ok80} of {len(got)} | {min(got):.1f} | "
              f"{statistics.median(got):.1f} | {cells} |")
# Every kernel set and thread count this results file holds, on the same seeds.
print()
print("Every kernel set kept in " + path + ", same seeds:")
print("| part | side | kernels (/tN: train.threads N) | runs >= 90% | min | median |")
print("| --- | --- | --- | --- | --- | --- |")
for part in parts:
    for side in ("trainbench", "pytorch"):
        for key in sorted({k for (k, p, i, _) in rows if p == part and i == side}):
            got = [rows[(key, part, side, s)] for s in seeds if (key, part, side, s) in rows]
            got = [v for v in got if v == v]
            if got:
                print(f"| {part} | {side} | {key} | {sum(v >= 90.0 for v in got)} of {len(got)} | {min(got):.1f} | "
                      f"{statistics.median(got):.1f} |")
PY
