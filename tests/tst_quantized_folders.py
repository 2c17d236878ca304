#!/usr/bin/python3
"""Quantized base weights in model folders, against independent references:
bitsandbytes folders written by tests/reference/bnb_reference.py (numpy,
from the QLoRA paper and bitsandbytes' layout) give, in Trainbench, the
logits the plain-PyTorch reference (tests/reference/hf_reference.py) gives
for the same model with the dequantized weights in float32; damaged folders
get one sentence each; a QLoRA run on such a folder learns, is planned
within 2% of what it measures, resumes, trains data parallel as one process
does, sweeps, and exports.

  tst_quantized_folders.py TRAINBENCH_CLI [--no-data-parallel]
"""
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HF_REFERENCE = os.path.join(HERE, "reference", "hf_reference.py")
BNB_REFERENCE = os.path.join(HERE, "reference", "bnb_reference.py")
CLI = None
DATA_PARALLEL = True  # --no-data-parallel: a build without c10d/Gloo, or under a sanitizer
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def trainbench(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True)


def hf_batch(lines):
    out = subprocess.run([sys.executable, HF_REFERENCE, "batch"], input="".join(json.dumps(l) + "\n" for l in lines),
                         check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def quantize_folder(src, dst, fmt, nested, dequantized=None):
    args = [sys.executable, BNB_REFERENCE, "quantize-folder", src, dst, "--format", fmt]
    if not nested:
        args.append("--no-double")
    if dequantized:
        args += ["--dequantized", dequantized]
    subprocess.run(args, check=True)


FAMILIES = [
    ("llama, grouped kv", ["--family", "llama", "--heads", "4", "--kv-heads", "2", "--hidden", "64", "--untied"]),
    ("qwen2, q/k/v biases, tied", ["--family", "qwen2", "--tied", "--hidden", "48"]),
    ("gpt2, Conv1D", ["--family", "gpt2", "--tied", "--dtype", "bfloat16"]),
    ("gpt_neox, rotary 0.25", ["--family", "gpt_neox", "--rotary-pct", "0.25", "--heads", "2", "--hidden", "32"]),
]
FORMATS = [("nf4", True), ("nf4", False), ("int8", False)]


def logits_cases(tmp):
    """Every family in every format: Trainbench on the bitsandbytes folder
    against the reference on the dequantized one."""
    rng = random.Random(3)
    plain = []
    for i, (name, options) in enumerate(FAMILIES):
        plain.append((name, os.path.join(tmp, "plain%d" % i), options + ["--seed", str(40 + i)]))
    hf_batch([["generate", folder, *options] for _, folder, options in plain])
    lines, runs = [], []
    for name, folder, _ in plain:
        with open(os.path.join(folder, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        for fmt, nested in FORMATS:
            label = "%s, %s%s" % (name, fmt, " double" if nested else "")
            tag = "%s-%s-%d" % (os.path.basename(folder), fmt, nested)
            bnb, deq = os.path.join(tmp, "bnb-" + tag), os.path.join(tmp, "deq-" + tag)
            quantize_folder(folder, bnb, fmt, nested, deq)
            ids = [rng.randrange(3, vocab) for _ in range(rng.randint(4, 10))]
            lines.append(["run", deq, "--ids", ",".join(map(str, ids)), "--max-tokens", "6"])
            runs.append((label, bnb, ids))
    refs = hf_batch(lines)
    for (label, bnb, ids), ref in zip(runs, refs):
        got = trainbench("sample", "--model", bnb, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", "6",
                         "--temperature", "0", "--json", "--logits")
        if got.returncode != 0:
            check(False, "%s: trainbench-cli failed: %s" % (label, got.stderr.strip()))
            continue
        out = json.loads(got.stdout)
        worst = max(abs(a - b) for ra, rb in zip(ref["logits"], out["logits"]) for a, b in zip(ra, rb))
        # Float summation order only: 1e-5 of the largest logit (or 1e-5).
        scale = max(1.0, max(abs(a) for row in ref["logits"] for a in row))
        check(worst <= 1e-5 * scale, "%s: logits differ by up to %.3g (limit %.3g)" % (label, worst, 1e-5 * scale))
        check(out["completion_ids"] == ref["completion_ids"],
              "%s: greedy decode %s, reference %s" % (label, out["completion_ids"], ref["completion_ids"]))
        print("ok %-40s max |dlogit| %.2e of logits up to %.1f" % (label, worst, scale), flush=True)
    return plain


def read_safetensors(path):
    sys.path.insert(0, os.path.dirname(BNB_REFERENCE))
    import bnb_reference
    return bnb_reference.read_safetensors(path)


def write_safetensors(path, tensors):
    import bnb_reference
    bnb_reference.write_safetensors(path, tensors)


def damaged_folders(tmp, plain):
    """Each kind of damage to a bitsandbytes folder: one sentence naming it."""
    source = plain[0][1]
    cases = []

    def variant(name, edit_config=None, edit_tensors=None):
        folder = os.path.join(tmp, "damaged-" + name.replace(" ", "-"))
        quantize_folder(source, folder, "int8" if "8-bit" in name else "nf4", True)
        if edit_config:
            path = os.path.join(folder, "config.json")
            with open(path) as f:
                config = json.load(f)
            edit_config(config["quantization_config"])
            with open(path, "w") as f:
                json.dump(config, f)
        if edit_tensors:
            path = os.path.join(folder, "model.safetensors")
            tensors = read_safetensors(path)
            edit_tensors(tensors)
            write_safetensors(path, tensors)
        return folder

    q = "model.layers.0.self_attn.q_proj"

    def drop(name):
        return lambda t: t.pop(name)

    def state(edit):
        def apply(t):
            dtype, shape, raw = t[q + ".weight.quant_state.bitsandbytes__nf4"]
            s = json.loads(raw.decode())
            edit(s)
            blob = json.dumps(s).encode()
            t[q + ".weight.quant_state.bitsandbytes__nf4"] = ("U8", [len(blob)], blob)
        return apply

    cases.append(("fp4", variant("fp4", edit_config=lambda c: c.update(bnb_4bit_quant_type="fp4")), ["fp4", "nf4"]))
    cases.append(("another method", variant("gptq", edit_config=lambda c: c.update(quant_method="gptq")),
                  ["quant_method", "gptq", "bitsandbytes"]))
    cases.append(("absmax missing", variant("no absmax", edit_tensors=drop(q + ".weight.absmax")),
                  ["lacks", q + ".weight.absmax"]))
    cases.append(("nested map missing", variant("no nested map", edit_tensors=drop(q + ".weight.nested_quant_map")),
                  ["lacks", "nested_quant_map"]))
    cases.append(("state of another shape", variant("shape", edit_tensors=state(lambda s: s.update(shape=[3, 5]))),
                  ["shape", "[3, 5]"]))
    cases.append(("state not JSON", variant("not json", edit_tensors=lambda t: t.update(
        {q + ".weight.quant_state.bitsandbytes__nf4": ("U8", [3], b"{x:")})), ["not a JSON object"]))
    cases.append(("codes cut short", variant("short", edit_tensors=lambda t: t.update(
        {q + ".weight": ("U8", [8, 1], t[q + ".weight"][2][:8])})), ["bytes of 4-bit codes"]))

    def bad_format(t):
        t[q + ".weight_format"] = ("U8", [], bytes([2]))
    cases.append(("8-bit tiled layout", variant("8-bit tiled", edit_tensors=bad_format), ["weight_format", "row-major"]))

    def short_scb(t):
        dtype, shape, raw = t[q + ".SCB"]
        t[q + ".SCB"] = (dtype, [shape[0] - 1], raw[:-4])
    cases.append(("8-bit scales cut short", variant("8-bit scb", edit_tensors=short_scb), [q + ".SCB"]))
    # A bitsandbytes folder as train.init_from of a plain run: refused (it would quantize a run planned unquantized).
    bnb = cases[2][1]
    config = {"model": {"type": "hf", "path": source}, "data": {"source": "tokens", "path": os.path.join(tmp, "ids.bin"), "seq_len": 8},
              "train": {"steps": 1, "init_from": bnb}, "lora": {"rank": 4}}
    with open(os.path.join(tmp, "ids.bin"), "wb") as f:
        f.write(bytes([3, 0]) * 400)
    got = trainbench("train", "--config", write(tmp, "init-from-bnb.json", config), "--db", os.path.join(tmp, "init.db"))
    check(got.returncode != 0 and "is a bitsandbytes nf4 folder" in got.stderr,
          "a bitsandbytes folder as init_from is refused: %r" % got.stderr[-300:])
    print("ok init_from of a bitsandbytes folder refused", flush=True)
    for name, folder, needles in cases:
        got = trainbench("sample", "--model", folder, "--prompt-ids", "3,4", "--max-tokens", "1")
        text = got.stderr.strip()
        check(got.returncode != 0 and all(n in text for n in needles) and text.count("\n") == 0
              and "Exception" not in text and "frame #" not in text,
              "damaged (%s): %r, wanted %s" % (name, text[:400], needles))
        print("ok damaged: %-26s %s" % (name, text[:150]), flush=True)


def write_tokens(path, count, vocab, seed):
    rng = random.Random(seed)
    # A learnable stream: a repeating phrase with noise.
    phrase = [rng.randrange(3, vocab) for _ in range(11)]
    ids = [phrase[i % len(phrase)] if rng.random() > 0.1 else rng.randrange(3, vocab) for i in range(count)]
    with open(path, "wb") as f:
        f.write(b"".join(i.to_bytes(2, "little") for i in ids))


def training(tmp, plain):
    """QLoRA on a bitsandbytes folder: it learns, its plan is its measure,
    it resumes, and it exports a plain folder whose logits the reference gives."""
    source = plain[0][1]
    folder = os.path.join(tmp, "train-bnb")
    quantize_folder(source, folder, "nf4", True)
    with open(os.path.join(folder, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    tokens = os.path.join(tmp, "tokens.bin")
    write_tokens(tokens, 20000, vocab, 7)
    config = {"name": "qlora", "model": {"type": "hf", "path": folder},
              "data": {"source": "tokens", "path": tokens, "seq_len": 32},
              "optim": {"lr": 3e-3, "warmup_steps": 5}, "train": {"batch_size": 8, "steps": 40, "seed": 2, "eval_every": 20},
              "lora": {"rank": 8, "alpha": 16}}
    path = os.path.join(tmp, "qlora.json")
    with open(path, "w") as f:
        json.dump(config, f)
    db = os.path.join(tmp, "runs.db")
    got = trainbench("train", "--config", path, "--db", db)
    check(got.returncode == 0, "qlora train failed: " + got.stderr[-500:])
    # The plan against the measured peak, in the run and on its own.
    measured = trainbench("measure", "--config", path, "--json")
    estimated = trainbench("estimate", "--config", path, "--json")
    if measured.returncode == 0 and estimated.returncode == 0:
        m = json.loads(measured.stdout)["peak_bytes"]
        e = json.loads(estimated.stdout)["peak_bytes"]
        check(0.995 * m <= e <= 1.02 * m, "qlora plan %d against measured %d" % (e, m))
        print("ok qlora plan %d bytes, measured %d" % (e, m), flush=True)
    else:
        check(False, "qlora measure/estimate failed: %s %s" % (measured.stderr[-300:], estimated.stderr[-300:]))
    runs = trainbench("runs", "--db", db, "--json")
    check(runs.returncode == 0 and json.loads(runs.stdout)[0]["status"] == "finished", "qlora run: " + runs.stdout[-300:])
    metrics = trainbench("export", "1", "--db", db, "--format", "json")
    check(metrics.returncode == 0, "qlora metrics: " + metrics.stderr[-300:])
    if metrics.returncode == 0:
        losses = [r["value"] for r in json.loads(metrics.stdout) if r["key"] == "loss"]
        check(len(losses) == 40 and sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5,
              "qlora did not learn: %s ... %s" % (losses[:3], losses[-3:]))
        print("ok qlora loss %.3f -> %.3f" % (losses[0], losses[-1]), flush=True)
    resume(tmp, config, db)
    if DATA_PARALLEL:
        data_parallel(tmp, config)
    sweep(tmp, config, e if measured.returncode == 0 and estimated.returncode == 0 else 0)
    merged = os.path.join(tmp, "merged")
    got = trainbench("export-model", "1", "--db", db, "--output", merged, "--merge-lora")
    check(got.returncode == 0, "qlora export failed: " + got.stderr[-300:])
    if got.returncode == 0:
        ids = [3, 5, 7, 9, 11]
        ref = hf_batch([["run", merged, "--ids", ",".join(map(str, ids)), "--max-tokens", "3"]])[0]
        out = trainbench("sample", "--model", merged, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", "3",
                         "--temperature", "0", "--json", "--logits")
        worst = max(abs(a - b) for ra, rb in zip(ref["logits"], json.loads(out.stdout)["logits"]) for a, b in zip(ra, rb))
        check(worst <= 1e-4, "merged export: logits differ by %.3g" % worst)
        print("ok merged export, max |dlogit| %.2e against the reference" % worst, flush=True)
        with open(os.path.join(merged, "config.json")) as f:
            written = json.load(f)
        check(written["torch_dtype"] == "bfloat16" and "quantization_config" not in written,
              "a QLoRA run's merged export is a plain bf16 folder: %s" % {k: written.get(k) for k in ("torch_dtype", "quantization_config")})
    # --quantized: a bitsandbytes folder, read by the reference from the format alone.
    for fmt in ("nf4", "int8"):
        run = 1 if fmt == "nf4" else int8_run(tmp, config, db)
        folder = os.path.join(tmp, "exported-" + fmt)
        got = trainbench("export-model", str(run), "--db", db, "--output", folder, "--quantized")
        check(got.returncode == 0, "export --quantized (%s) failed: %s" % (fmt, got.stderr[-300:]))
        if got.returncode != 0:
            continue
        plain = os.path.join(tmp, "exported-%s-dequantized" % fmt)
        subprocess.run([sys.executable, BNB_REFERENCE, "dequantize-folder", folder, plain], check=True)
        ids = [4, 6, 8, 10]
        ref = hf_batch([["run", plain, "--ids", ",".join(map(str, ids)), "--max-tokens", "3"]])[0]
        out = trainbench("sample", "--model", folder, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", "3",
                         "--temperature", "0", "--json", "--logits")
        worst = max(abs(a - b) for ra, rb in zip(ref["logits"], json.loads(out.stdout)["logits"]) for a, b in zip(ra, rb))
        check(worst <= 1e-4, "export --quantized (%s): logits differ from the reference's reading by %.3g" % (fmt, worst))
        print("ok export --quantized %s: the reference reads it, max |dlogit| %.2e" % (fmt, worst), flush=True)


def data_parallel(tmp, config):
    """QLoRA with two ranks (Gloo) at batch 4 each, accumulating 2, against
    one process at batch 8 x 2: the same losses but for the order of the
    gradients' sums (each rank quantizes the same base from the folder)."""
    db = os.path.join(tmp, "dp.db")
    losses = []
    for nproc, batch in ((1, 8), (2, 4)):
        c = dict(config, name="qlora-dp%d" % nproc)
        c["train"] = dict(config["train"], steps=8, batch_size=batch, grad_accum=2)
        got = trainbench("train", "--config", write(tmp, "dp%d.json" % nproc, c), "--db", db, "--nproc", str(nproc))
        check(got.returncode == 0, "QLoRA on %d processes failed: %s" % (nproc, got.stderr[-300:]))
        run = max(r["id"] for r in json.loads(trainbench("runs", "--db", db, "--json").stdout))
        out = json.loads(trainbench("export", str(run), "--db", db, "--format", "json").stdout)
        losses.append([r["value"] for r in sorted(out, key=lambda r: r["step"]) if r["key"] == "loss"])
    worst = max((abs(a - b) / abs(a) for a, b in zip(*losses)), default=float("inf"))
    check(len(losses[0]) == len(losses[1]) == 8 and worst <= 1e-4,
          "QLoRA on two ranks gives one process's losses (largest relative difference %.3g)" % worst)
    print("ok qlora on 2 ranks x batch 4 = 1 x batch 8, accumulating 2: largest loss difference %.1e (relative)" % worst,
          flush=True)


def sweep(tmp, config, planned):
    """A sweep with a budget between the QLoRA plan and the plan of the same
    model unquantized runs its trial (an unquantized plan once skipped it as
    'does not fit')."""
    if planned <= 0:
        return
    plain = dict(config)
    plain["model"] = dict(config["model"], quantize="none")
    plain["model"]["path"] = os.path.join(tmp, "plain0")
    unquantized = json.loads(trainbench("estimate", "--config", write(tmp, "unq.json", plain), "--json").stdout)["peak_bytes"]
    check(unquantized > planned, "the unquantized plan %d is over the QLoRA plan %d" % (unquantized, planned))
    budget = (planned + unquantized) // 2
    short = dict(config, name="qlora-sweep")
    short["train"] = dict(config["train"], steps=3)
    short["optim"] = dict(config["optim"], warmup_steps=1)
    spec = {"name": "lr", "method": "grid", "metric": {"name": "val_loss", "goal": "minimize"},
            "parameters": {"optim.lr": {"values": [0.001]}}}
    db = os.path.join(tmp, "sweep.db")
    got = trainbench("sweep", "--config", write(tmp, "sweep-base.json", short), "--sweep", write(tmp, "sweep.json", spec),
                     "--budget", str(budget), "--db", db, "--json")
    statuses = [t.get("status") for t in json.loads(got.stdout).get("trials", [])] if got.returncode == 0 else []
    check(statuses == ["finished"], "a QLoRA sweep trial under a budget it fits ran: %s %s" % (statuses, got.stderr[-600:]))
    print("ok qlora sweep trial at a budget of %d bytes (plan %d, unquantized %d): %s" % (budget, planned, unquantized, statuses),
          flush=True)


def write(tmp, name, obj):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def int8_run(tmp, config, db):
    """A short QLoRA run in 8 bits of the same plain folder, quantized as it loads: its run id."""
    plain = dict(config, name="qlora-int8")
    plain["model"] = {"type": "hf", "path": os.path.join(tmp, "plain0"), "quantize": "int8"}
    plain["train"] = dict(config["train"], steps=5)
    path = os.path.join(tmp, "qlora-int8.json")
    with open(path, "w") as f:
        json.dump(plain, f)
    got = trainbench("train", "--config", path, "--db", db)
    check(got.returncode == 0, "the int8 QLoRA run failed: " + got.stderr[-300:])
    return max(r["id"] for r in json.loads(trainbench("runs", "--db", db, "--json").stdout))


def resume(tmp, config, db):
    """The same QLoRA run stopped with Ctrl-C and resumed gives the
    uninterrupted run's losses (run 1 of db): the base quantized again from
    the folder is the same bytes."""
    cut = dict(config, name="qlora-cut")
    cut["train"] = dict(config["train"], checkpoint_every=5)
    path = os.path.join(tmp, "qlora-cut.json")
    with open(path, "w") as f:
        json.dump(cut, f)
    proc = subprocess.Popen([CLI, "train", "--config", path, "--db", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
        with sqlite3.connect(db) as c:
            row = c.execute("SELECT steps_done FROM runs WHERE id = 2").fetchone()
        if row and (row[0] or 0) >= 12:
            proc.send_signal(signal.SIGINT)
            break
    proc.communicate(timeout=60)
    check(proc.returncode == 130, "Ctrl-C stops the QLoRA run (rc %s)" % proc.returncode)
    got = trainbench("resume", "2", "--db", db, "--quiet")
    check(got.returncode == 0, "resume of the QLoRA run failed: " + got.stderr[-300:])

    def losses(run):
        out = json.loads(trainbench("export", str(run), "--db", db, "--format", "json").stdout)
        return {r["step"]: r["value"] for r in out if r["key"] == "loss"}
    a, b = losses(1), losses(2)
    worst = max((abs(a[k] - b[k]) for k in a if k in b), default=float("inf"))
    check(len(a) == len(b) == 40 and worst <= 1e-6, "the resumed QLoRA run's losses (%d, largest difference %.3g)" % (len(b), worst))
    print("ok qlora stopped and resumed, largest loss difference %.1e" % worst, flush=True)


def main():
    global CLI, DATA_PARALLEL
    CLI = os.path.abspath(sys.argv[1])
    DATA_PARALLEL = "--no-data-parallel" not in sys.argv
    tmp = tempfile.mkdtemp(prefix="tb-quantized-")
    try:
        plain = logits_cases(tmp)
        damaged_folders(tmp, plain)
        training(tmp, plain)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
