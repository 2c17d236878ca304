#!/usr/bin/env bash
# Trainbench's training loop against an equivalent plain-PyTorch loop (same
# LibTorch 1.13, same model, data, optimizer), and Trainbench's own overhead:
# the full product (metrics store, per-step callback and loss read, memory
# probe) against --bare (none of them). The sides alternate within each round
# and the median of the per-round ratios is reported (on a shared 2-core
# machine one round varied by 10% to 50%).
# The PyTorch loop also runs a second time with glibc's malloc set as
# Trainbench sets it for a CPU run (core/train/HostHeap.h), through the
# environment: how much of the ratio that setting accounts for.
# The last workload trains a Hugging Face Llama-family folder (model.type hf,
# generated here) against the same model and weights in plain PyTorch
# (bench/hf_train_throughput.py, written as transformers computes it).
# Usage: bench/train_throughput.sh [--torch2] [--kernels SET] [ROUNDS] [overhead | hf | gpt]   (needs a built tree: scripts/test or scripts/run)
#   --kernels: native (default), avx2, avx512 or cooperlake (bench/kernels.sh), the same for both sides.
#   overhead: only the full product against --bare (more rounds in the same time).
#   hf: only the Hugging Face folder workload.
#   gpt: only the two GPT workloads against PyTorch (no Hugging Face folder).
#   --torch2: the same on LibTorch 2.6, in the Debian 13 chroot of scripts/test
#     (its trainbench-cli and Debian 13's python3-torch-cuda 2.6, run on the CPU; build it first with
#     scripts/test --torch2).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/train_throughput.sh [--torch2] [--kernels native|avx2|avx512|cooperlake] [ROUNDS] [overhead | hf | gpt]   (ROUNDS: a whole number from 1, default 5)"
cli=build/app/trainbench-cli
case "${1:-}" in
  --torch2) shift; source bench/torch2.sh; tb_bench_rerun_in_torch2 train_throughput.sh "$@" ;;
  --in-chroot) shift; cli=/build/app/trainbench-cli ;;
  *) packaging/install-deps.sh --bench >/dev/null ;;
esac
kernels=native
if [[ ${1:-} == --kernels ]]; then
  kernels=${2:-}
  shift 2 || { echo "$usage" >&2; exit 2; }
fi
source bench/kernels.sh
tb_bench_kernels "$kernels" || { echo "$usage" >&2; exit 2; }
rounds=${1:-5}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "$usage" >&2; exit 2; }
only_hf=0
no_hf=0
case "${2:-}" in
  "") only_overhead=0 ;;
  overhead) only_overhead=1 ;;
  hf) only_overhead=0 only_hf=1 ;;
  gpt) only_overhead=0 no_hf=1 ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
[ -x "$cli" ] || { echo "build first (scripts/test or scripts/run)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rate() { sed -n 's/^throughput: \([0-9]*\) tokens.*/\1/p'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "$("$cli" --version); PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)');" \
  "kernels: $kernels ($(tb_bench_kernels_in_use /usr/bin/python3))"
# name layers d_model heads batch seq steps
workloads=("gpt 2 128 4 32 64 300" "tiny 1 64 4 8 32 3000")
((only_hf)) && workloads=()
for workload in "${workloads[@]}"; do
  set -- $workload
  name=$1 layers=$2 d=$3 heads=$4 batch=$5 seq=$6 steps=$7
  cat > "$work/$name.json" <<JSON
{"name": "bench-$name", "device": "cpu",
 "model": {"n_layer": $layers, "d_model": $d, "n_head": $heads, "positional_encoding": "learned"},
 "data": {"source": "text", "seq_len": $seq},
 "optim": {"optimizer": "adamw", "lr": 0.003, "warmup_steps": 20, "schedule": "constant"},
 "train": {"batch_size": $batch, "steps": $steps, "eval_every": 1000000, "precision": "fp32"}}
JSON
  echo "workload $name: GPT $layers layer(s), d_model $d, $heads heads, batch $batch, seq $seq, AdamW fp32, $steps steps, $rounds rounds"
  vs_py=(); vs_tuned=(); overhead=()
  for ((i = 1; i <= rounds; i++)); do
    full=$($cli train --config "$work/$name.json" --db "$work/b.db" --quiet | rate)
    bare=$($cli train --config "$work/$name.json" --db "$work/b.db" --quiet --bare | rate)
    if [ "$only_overhead" = 1 ]; then
      echo "  round $i: trainbench $full tok/s, bare $bare tok/s"
      overhead+=("$(awk -v a="$full" -v b="$bare" 'BEGIN {printf "%.2f", 100 * (b - a) / b}')")
      continue
    fi
    # PyTorch at its best thread count here (torch.set_num_threads(1), OpenBLAS on every core).
    py=$(/usr/bin/python3 bench/train_throughput.py --steps "$steps" --threads 1 --layers "$layers" \
           --d-model "$d" --heads "$heads" --batch "$batch" --seq "$seq" | rate)
    tuned=$(MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=2147483647 /usr/bin/python3 bench/train_throughput.py \
           --steps "$steps" --threads 1 --layers "$layers" --d-model "$d" --heads "$heads" --batch "$batch" --seq "$seq" | rate)
    echo "  round $i: trainbench $full tok/s, bare $bare tok/s, pytorch $py tok/s, pytorch with Trainbench's malloc settings $tuned tok/s"
    vs_py+=("$(ratio "$full" "$py")"); vs_tuned+=("$(ratio "$full" "$tuned")"); overhead+=("$(awk -v a="$full" -v b="$bare" 'BEGIN {printf "%.2f", 100 * (b - a) / b}')")
  done
  if [ "$only_overhead" = 1 ]; then
    echo "  $name: store+callbacks+probe overhead median $(printf '%s\n' "${overhead[@]}" | median)% (rounds: ${overhead[*]})"
    continue
  fi
  echo "  $name: trainbench / pytorch median ratio $(printf '%s\n' "${vs_py[@]}" | median)" \
       "(rounds: ${vs_py[*]}); store+callbacks+probe overhead median $(printf '%s\n' "${overhead[@]}" | median)%" \
       "(rounds: ${overhead[*]}); trainbench / pytorch with the same malloc settings median" \
       "$(printf '%s\n' "${vs_tuned[@]}" | median) (rounds: ${vs_tuned[*]})"
done
[ "$only_overhead" = 1 ] && exit 0
((no_hf)) && exit 0

# A Llama-family model folder: 4 layers, hidden 256, 8 heads (4 key/value), MLP 688, vocab 512.
/usr/bin/python3 tests/reference/hf_reference.py generate "$work/llama" --family llama --untied --seed 7 --vocab 512 \
  --hidden 256 --layers 4 --heads 8 --kv-heads 4 --intermediate 688 >/dev/null
/usr/bin/python3 -c "
import random, struct, sys
r = random.Random(5)
ids = [r.randrange(3, 512) for _ in range(200000)]
open(sys.argv[1], 'wb').write(struct.pack('<%dH' % len(ids), *ids))" "$work/tokens.bin"
batch=8 seq=128 steps=60
cat > "$work/hf.json" <<JSON
{"name": "bench-hf-llama", "device": "cpu",
 "model": {"type": "hf", "path": "$work/llama"},
 "data": {"source": "tokens", "path": "$work/tokens.bin", "seq_len": $seq},
 "optim": {"optimizer": "adamw", "lr": 0.0003, "warmup_steps": 0, "schedule": "constant"},
 "train": {"batch_size": $batch, "steps": $steps, "eval_every": 1000000, "precision": "fp32"}}
JSON
echo "workload hf-llama: model folder, Llama 4 layers, hidden 256, 8 heads (4 kv), MLP 688, vocab 512, batch $batch, seq $seq, AdamW fp32, $steps steps, $rounds rounds"
vs_py=()
for ((i = 1; i <= rounds; i++)); do
  full=$($cli train --config "$work/hf.json" --db "$work/b.db" --quiet | rate)
  py=$(/usr/bin/python3 bench/hf_train_throughput.py --model "$work/llama" --tokens "$work/tokens.bin" --threads 1 \
         --steps "$steps" --batch "$batch" --seq "$seq" | rate)
  echo "  round $i: trainbench $full tok/s, pytorch $py tok/s"
  vs_py+=("$(ratio "$full" "$py")")
done
echo "  hf-llama: trainbench / pytorch median ratio $(printf '%s\n' "${vs_py[@]}" | median) (rounds: ${vs_py[*]})"
