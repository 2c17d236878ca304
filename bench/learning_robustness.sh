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
# train.threads, the machine's own kernels (unless --kernels avx2 or avx512). Runs one
# Trainbench run at a time (it uses every core) and two reference runs at a
# time (one thread each: its results do not depend on the thread count).
#
# Results accumulate in OUT/results.tsv, and runs already there are skipped,
# so the bench can run in parts. About 25 s per run on the 2-core development
# machine: 16 seeds x 4 parts x 2 sides is about an hour.
#
# Usage: bench/learning_robustness.sh [--seeds "1 2 ..."] [--parts "learned sinusoidal rope llama"]
#          [--kernels native|avx2|avx512] [--no-reference] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
  sed -n 's/^# Usage: //p; s/^#  \{9\}/   /p' "$0" >&2
  exit 2
}
seeds=$(seq -s ' ' 1 16)
parts="learned sinusoidal rope llama"
kernels=native
reference=1
out=bench-results/learning
while (($#)); do
  case "$1" in
    --seeds) seeds=${2:?}; shift 2 ;;
    --parts) parts=${2:?}; shift 2 ;;
    --kernels) kernels=${2:?}; shift 2 ;;
    --no-reference) reference=0; shift ;;
    --out) out=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
case "$kernels" in
  native) ;;
  avx2) export OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 ;;
  # Debian 12's LibTorch 1.13 defaults to its AVX2 code even where the CPU has
  # AVX-512, and OpenBLAS 0.3.21 may pick Haswell kernels on it (AMD EPYC), so
  # "native" can equal "avx2": this forces both libraries' AVX-512 code.
  avx512) export OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512 ;;
  *) usage ;;
esac
for p in $parts; do
  case "$p" in learned | sinusoidal | rope | llama) ;; *) echo "unknown part '$p'" >&2; usage ;; esac
done
for s in $seeds; do [[ $s =~ ^[0-9]+$ ]] || { echo "seed '$s' is not a number" >&2; usage; }; done

cli=$PWD/build/app/trainbench-cli
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

have() { awk -v p="$1" -v i="$2" -v k="$kernels" -v s="$3" '$1==p && $2==i && $3==k && $4==s {f=1} END {exit !f}' "$results"; }

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
 "train": {"batch_size": 128, "steps": 500, "seed": $2, "eval_every": 500, "checkpoint_every": 0, "precision": "fp32"}}
JSON
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernels: $kernels" \
  "(OpenBLAS core: $(OPENBLAS_VERBOSE=2 "$py" -c 'import torch; torch.ones(2, 2) @ torch.ones(2, 2)' 2>&1 | sed -n 's/^Core: //p'))"
for part in $parts; do
  for seed in $seeds; do
    have "$part" trainbench "$seed" && continue
    config "$part" "$seed" >"$work/config.json"
    rm -f "$work/runs.db"
    acc=$("$cli" train --config "$work/config.json" --db "$work/runs.db" --quiet 2>&1 |
      sed -n 's/.*val accuracy \([0-9.]*\)%.*/\1/p')
    rm -rf "$work/runs.db"*
    printf '%s\ttrainbench\t%s\t%s\t%s\n' "$part" "$kernels" "$seed" "${acc:-nan}" >>"$results"
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
        printf '%s\tpytorch\t%s\t%s\t%s\n' "$part" "$kernels" "$seed" "$acc" >>"$results"
        echo "pytorch $part seed $seed: $acc%"
      done
    fi
  fi
done

# The table: per part and side, the share of seeds at >= 80% and the distribution.
echo
echo "Held-out exact match at step 500 ($kernels kernels), seeds: $seeds"
"$py" - "$results" "$kernels" "$parts" "$seeds" <<'PY'
import statistics, sys
path, kernels, parts, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
rows = {}
for line in open(path):
    f = line.split()
    if len(f) == 5 and f[2] == kernels:
        rows[(f[0], f[1], f[3])] = float(f[4])
print("| part | side | runs >= 80% | min | median | held-out exact match by seed |")
print("| --- | --- | --- | --- | --- | --- |")
for part in parts:
    for side in ("trainbench", "pytorch"):
        vals = [rows.get((part, side, s)) for s in seeds]
        got = [v for v in vals if v is not None and v == v]
        if not got:
            continue
        ok = sum(v >= 80.0 for v in got)
        cells = " / ".join("-" if v is None else f"{v:.1f}" for v in vals)
        print(f"| {part} | {side} | {ok} of {len(got)} | {min(got):.1f} | {statistics.median(got):.1f} | {cells} |")
PY
