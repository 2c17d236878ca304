#!/usr/bin/env bash
# The store, per-step callbacks and memory probe, counted in instructions
# rather than seconds: wall-clock rounds on a shared 2-core machine vary more
# than the effect (bench/train_throughput.sh ... overhead). callgrind counts the
# instructions each function runs, whatever else the machine is doing. The tiny
# workload of bench/train_throughput.sh, one thread (no spinning BLAS pool),
# full product and --bare, 10 and 30 steps each; the difference of the two
# runs is 20 steady steps, without start-up, validation or the final checkpoint.
# Prints, per step, the training thread's instructions (Trainer::run,
# inclusive) on both sides and the metric writer thread's.
# Slow: about 8 minutes (valgrind runs LibTorch ~500x slower).
# Usage: bench/overhead_instructions.sh   (needs a built tree: scripts/test or scripts/run)
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/install-deps.sh --bench >/dev/null
cli=build/app/trainbench-cli
[ -x "$cli" ] || { echo "build first (scripts/test or scripts/run)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for steps in 10 30; do
  cat > "$work/tiny-$steps.json" <<JSON
{"name": "overhead-tiny", "device": "cpu",
 "model": {"n_layer": 1, "d_model": 64, "n_head": 4, "positional_encoding": "learned"},
 "data": {"source": "text", "seq_len": 32},
 "optim": {"optimizer": "adamw", "lr": 0.003, "warmup_steps": 5, "schedule": "constant"},
 "train": {"batch_size": 8, "steps": $steps, "eval_every": 1000000, "precision": "fp32", "threads": 1}}
JSON
done
count() { # side steps [flag]
  "$cli" validate --config "$work/tiny-$2.json" >/dev/null || { echo "config rejected" >&2; exit 1; }
  valgrind --tool=callgrind --callgrind-out-file="$work/$1-$2.out" \
    "$cli" train --config "$work/tiny-$2.json" --db "$work/$1-$2.db" --quiet ${3:-} >/dev/null 2>&1
  callgrind_annotate --inclusive=yes --threshold=100 "$work/$1-$2.out" |
    awk -v side="$1" -v steps="$2" '
      /:tb::Trainer::run\(tb::TrainerCallbacks const&\) \[/ { gsub(",", "", $1); print side, steps, "trainer", $1 }
      /:tb::MetricWriter::loop\(\) \[/ { gsub(",", "", $1); print side, steps, "writer", $1 }' >> "$work/counts"
}
# Two at a time: one per core.
count full 10 & count bare 10 --bare & wait
count full 30 & count bare 30 --bare & wait
awk '
  { n[$1, $2, $3] = $4 }
  END {
    if (!n["full", 10, "trainer"] || !n["full", 30, "trainer"] || !n["bare", 10, "trainer"] || !n["bare", 30, "trainer"]) {
      print "a run did not train (no Trainer::run in its profile)" > "/dev/stderr"; exit 1
    }
    full = (n["full", 30, "trainer"] - n["full", 10, "trainer"]) / 20
    bare = (n["bare", 30, "trainer"] - n["bare", 10, "trainer"]) / 20
    writer = (n["full", 30, "writer"] - n["full", 10, "writer"]) / 20
    printf "training thread, instructions a step: full %.0f, bare %.0f (%+.2f%%)\n", full, bare, 100 * (full - bare) / bare
    printf "metric writer thread (full only; it wakes every 250 ms of wall time, and under valgrind a step lasts seconds): %.0f a step\n", writer
  }' "$work/counts"
