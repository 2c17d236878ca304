#!/usr/bin/python3
"""Hugging Face model folders: Trainbench's logits and greedy decodes against
the independent reference in tests/reference/hf_reference.py, on tiny random
checkpoints generated here in the Hub's layout, and one clear error for each
kind of damaged folder.

Why it takes 5 to 6 minutes on 2 cores (over the suite's usual 120 s): every
check starts trainbench-cli and the Python reference as processes (about
1 s each before any work), for eight families and their variants (tied and
untied heads, biases, head_dim, rope scaling, query and key norms, fused
projections, sliding layers, random draws), each trained in three precisions
with and without LoRA and planned against `measure`; and sample's and chat's
generation settings against transformers' processors. It is the only check
of the folders against an independent implementation.

  tst_hf_models.py TRAINBENCH_CLI [--seeds N] [--no-data-parallel]
"""
import json
import os
import random
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "reference", "hf_reference.py")
CLI = None
DATA_PARALLEL = True  # --no-data-parallel: a build without c10d/Gloo, or under a sanitizer
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def generate(folder, *options):
    subprocess.run([sys.executable, REFERENCE, "generate", folder, *options], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)


def run_line(folder, ids, max_tokens, adapter=None):
    return ["run", folder, "--ids", ",".join(map(str, ids)), "--max-tokens", str(max_tokens)] + \
        (["--adapter", adapter] if adapter else [])


def reference_batch(lines):
    """Several reference command lines in one process (importing torch takes 2 s)."""
    out = subprocess.run([sys.executable, REFERENCE, "batch"], input="".join(json.dumps(l) + "\n" for l in lines),
                         check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def reference(folder, ids, max_tokens, adapter=None):
    return reference_batch([run_line(folder, ids, max_tokens, adapter)])[0]


def max_difference(rows_a, rows_b):
    return max(abs(a - b) for ra, rb in zip(rows_a, rows_b) for a, b in zip(ra, rb))


def trainbench(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True)


def compare(name, folder, cfg, ids, max_tokens=8, ref=None):
    ref = ref or reference(folder, ids, max_tokens)
    got = trainbench("sample", "--model", folder, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens",
                     str(max_tokens), "--temperature", "0", "--json", "--logits")
    if got.returncode != 0:
        check(False, "%s: trainbench-cli failed: %s" % (name, got.stderr.strip()))
        return
    out = json.loads(got.stdout)
    rows_ref, rows = ref["logits"], out["logits"]
    check(len(rows) == len(ids) and all(len(r) == cfg["vocab_size"] for r in rows),
          "%s: logits shape %dx%d" % (name, len(rows), len(rows[0]) if rows else 0))
    worst = max(abs(a - b) for ra, rb in zip(rows_ref, rows) for a, b in zip(ra, rb))
    check(worst <= 1e-5, "%s: logits differ by up to %.3g (limit 1e-5)" % (name, worst))
    check(out["completion_ids"] == ref["completion_ids"],
          "%s: greedy decode %s, reference %s" % (name, out["completion_ids"], ref["completion_ids"]))
    print("ok %-44s max |dlogit| %.2e, decode %s" % (name, worst, out["completion_ids"]), flush=True)


def named_cases(tmp):
    """Each published trap on its own, then random combinations."""
    cases = [
        ("llama untied", ["--family", "llama", "--untied"]),
        ("llama tied (head absent from the file)", ["--family", "llama", "--tied"]),
        ("llama attention_bias + mlp_bias", ["--family", "llama", "--attention-bias", "--mlp-bias"]),
        ("llama head_dim != hidden/heads", ["--family", "llama", "--head-dim", "12", "--heads", "4", "--hidden", "40"]),
        ("llama3 rope scaling", ["--family", "llama", "--rope-llama3", "--head-dim", "16", "--heads", "2",
                                 "--hidden", "32"]),
        ("llama GQA one kv head", ["--family", "llama", "--heads", "4", "--kv-heads", "1"]),
        ("llama bf16 weights, 3 shards", ["--family", "llama", "--dtype", "bfloat16", "--shards", "3"]),
        ("llama fp16 weights", ["--family", "llama", "--dtype", "float16"]),
        ("mistral sliding window 3", ["--family", "mistral", "--sliding-window", "3"]),
        ("mistral window above the length", ["--family", "mistral", "--sliding-window", "64"]),
        ("mistral no window (null)", ["--family", "mistral"]),
        ("qwen2 tied, q/k/v biases", ["--family", "qwen2", "--tied"]),
        ("qwen2 untied, 2 shards", ["--family", "qwen2", "--untied", "--shards", "2"]),
        ("qwen3 q/k norms, head_dim 16 over hidden 32", ["--family", "qwen3", "--untied", "--head-dim", "16", "--heads", "4",
                                                         "--hidden", "32"]),
        ("qwen3 tied, GQA, bf16 weights", ["--family", "qwen3", "--tied", "--heads", "4", "--kv-heads", "2",
                                           "--dtype", "bfloat16"]),
        ("phi3 fused qkv and gate/up, GQA", ["--family", "phi3", "--untied", "--heads", "4", "--kv-heads", "2"]),
        ("phi3 sliding window 3, 2 shards", ["--family", "phi3", "--sliding-window", "3", "--shards", "2"]),
        ("gemma3 sliding and full layers, tied", ["--family", "gemma3_text", "--layers", "4"]),
        ("gemma3 untied, GQA, bf16 weights", ["--family", "gemma3_text", "--untied", "--heads", "4", "--kv-heads", "2",
                                              "--dtype", "bfloat16"]),
        ("gpt2 tied (head absent), Conv1D", ["--family", "gpt2", "--tied"]),
        ("gpt2 original names and mask buffers", ["--family", "gpt2", "--tied", "--legacy-names"]),
        ("gpt2 untied, bf16, 2 shards", ["--family", "gpt2", "--untied", "--dtype", "bfloat16", "--shards", "2"]),
        ("neox rotary 0.25, parallel residual", ["--family", "gpt_neox", "--rotary-pct", "0.25", "--heads", "2",
                                                 "--hidden", "32"]),
        ("neox rotary 1.0, sequential residual", ["--family", "gpt_neox", "--rotary-pct", "1.0",
                                                  "--sequential-residual"]),
        ("neox tied, rotary 0.5", ["--family", "gpt_neox", "--tied", "--rotary-pct", "0.5", "--heads", "2",
                                   "--hidden", "32"]),
        # Heads 6 wide: half of them is 3 dimensions, which RoPE cannot rotate,
        # so the generator writes rotary_pct 1.0 (it once took the width of a
        # head it drew, not of the hidden size given, and wrote 0.5).
        ("neox 6-wide heads, rotary 0.5 asked", ["--family", "gpt_neox", "--rotary-pct", "0.5", "--heads", "8",
                                                 "--hidden", "48"]),
    ]
    for i, (name, options) in enumerate(cases):
        yield name, os.path.join(tmp, "case%d" % i), options + ["--seed", str(100 + i)]


def random_cases(tmp, count, seed):
    rng = random.Random(seed)
    for i in range(count):
        family = rng.choice(["llama", "mistral", "qwen2", "gpt2", "gpt_neox"])
        options = ["--family", family, "--seed", str(1000 + i), "--shards", str(rng.choice([1, 1, 2, 3])),
                   "--dtype", rng.choice(["float32", "float32", "bfloat16"])]
        if family == "llama" and rng.random() < 0.3:
            options.append("--rope-llama3")
        if family == "llama" and rng.random() < 0.3:
            options += ["--attention-bias"]
        if family == "mistral":
            options += ["--sliding-window", str(rng.randint(1, 12))]
        yield "random %d (%s)" % (i, family), os.path.join(tmp, "random%d" % i), options


def expect_error(name, folder, *needles):
    got = trainbench("sample", "--model", folder, "--prompt-ids", "3,4", "--max-tokens", "1", "--json")
    message = got.stderr.strip()
    check(got.returncode == 2, "%s: exit %d, expected 2 (%s)" % (name, got.returncode, message))
    check(message.count("\n") == 0 and "terminate" not in message and "Traceback" not in message,
          "%s: not one clear line: %r" % (name, message))
    for needle in needles:
        check(needle in message, "%s: message lacks %r: %r" % (name, needle, message))
    print("ok %-44s %s" % (name, message), flush=True)


def damaged_folders(tmp):
    base = os.path.join(tmp, "base")
    generate(base, "--family", "llama", "--untied", "--shards", "2", "--seed", "7", "--vocab", "50")

    def copy(name):
        folder = os.path.join(tmp, name)
        shutil.copytree(base, folder)
        return folder

    with open(os.path.join(base, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shard1 = "model-00001-of-00002.safetensors"

    f = copy("missing_shard")
    os.remove(os.path.join(f, shard1))
    expect_error("missing shard", f, shard1, "not in")

    f = copy("index_names_other_file")
    index2 = json.loads(json.dumps(index))
    first = next(iter(index2["weight_map"]))
    index2["weight_map"][first] = "model-elsewhere.safetensors"
    with open(os.path.join(f, "model.safetensors.index.json"), "w") as out:
        json.dump(index2, out)
    expect_error("index naming a file that is not there", f, "model-elsewhere.safetensors")

    f = copy("truncated")
    path = os.path.join(f, shard1)
    size = os.path.getsize(path)
    with open(path, "r+b") as out:
        out.truncate(size - 100)
    expect_error("truncated shard", f, shard1, "truncated")

    f = copy("lying_offsets")
    path = os.path.join(f, shard1)
    with open(path, "rb") as inp:
        data = bytearray(inp.read())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    name = next(k for k in header if k != "__metadata__")
    a, b = header[name]["data_offsets"]
    header[name]["data_offsets"] = [a, b + 4]
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + data[8 + n:])
    expect_error("header lying about offsets", f, shard1, name)

    f = copy("lying_dtype")
    path = os.path.join(f, shard1)
    header[name]["data_offsets"] = [a, b]
    header[name]["dtype"] = "F64"
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + data[8 + n:])
    expect_error("header lying about a dtype", f, shard1, name)

    f = copy("wrong_shape")
    with open(os.path.join(f, "config.json")) as inp:
        cfg = json.load(inp)
    cfg["intermediate_size"] += 8
    with open(os.path.join(f, "config.json"), "w") as out:
        json.dump(cfg, out)
    expect_error("tensor of the wrong shape (both shapes named)", f, "mlp.gate_proj.weight",
                 "[%d, %d]" % (cfg["intermediate_size"] - 8, cfg["hidden_size"]),
                 "[%d, %d]" % (cfg["intermediate_size"], cfg["hidden_size"]))

    f = copy("missing_tensor")
    with open(os.path.join(f, "config.json")) as inp:
        cfg = json.load(inp)
    cfg["num_hidden_layers"] += 1
    with open(os.path.join(f, "config.json"), "w") as out:
        json.dump(cfg, out)
    expect_error("tensor missing", f, "model.layers.%d." % (cfg["num_hidden_layers"] - 1), "has no tensor")

    f = copy("unknown_family")
    cfg["model_type"] = "falcon"
    with open(os.path.join(f, "config.json"), "w") as out:
        json.dump(cfg, out)
    expect_error("unknown model_type", f, "falcon", "llama, mistral, qwen2")

    f = copy("moe")
    with open(os.path.join(base, "config.json")) as inp:
        cfg = json.load(inp)
    cfg["num_local_experts"] = 8
    with open(os.path.join(f, "config.json"), "w") as out:
        json.dump(cfg, out)
    expect_error("mixture of experts", f, "num_local_experts")

    f = copy("no_weights")
    for name in os.listdir(f):
        if "safetensors" in name:
            os.remove(os.path.join(f, name))
    expect_error("no weights at all", f, "model.safetensors")

    expect_error("no such folder", os.path.join(tmp, "nowhere"), "not found")

    got = trainbench("sample", "--model", base, "--prompt-ids", "3,50", "--json")
    check(got.returncode == 2 and "id 50" in got.stderr and "vocabulary of 50" in got.stderr,
          "an id at the vocabulary size: %r" % got.stderr)
    got = trainbench("sample", "--model", base, "--prompt", "hello")
    check(got.returncode == 2 and "--prompt-ids" in got.stderr, "--prompt without a tokenizer: %r" % got.stderr)
    got = trainbench("sample", "--model", base, "--prompt-ids", "3,x")
    check(got.returncode == 2 and "entry 2" in got.stderr, "a bad id list: %r" % got.stderr)
    got = trainbench("sample", "--model", base, "--prompt-ids", "3,4", "--max-tokens", "0", "--json")
    check(got.returncode == 0 and json.loads(got.stdout)["completion_ids"] == [], "--max-tokens 0: %r" % got.stdout)
    got = trainbench("sample", "--model", base, "--prompt-ids", "3,4", "--max-tokens", "3", "--precision", "bf16",
                     "--temperature", "0", "--json")
    check(got.returncode == 0 and len(json.loads(got.stdout)["completion_ids"]) >= 1, "bf16: %r" % got.stderr)


def write_tokens(path, ids, width=2):
    with open(path, "wb") as f:
        f.write(struct.pack("<%d%s" % (len(ids), "H" if width == 2 else "I"), *ids))


def train(tmp, name, folder, steps, lr, **extra):
    cfg = {"name": name, "device": "cpu", "model": {"type": "hf", "path": folder},
           "data": {"source": "tokens", "path": os.path.join(tmp, "train.bin"), "seq_len": 24},
           "train": {"batch_size": 8, "steps": steps, "eval_every": steps, "seed": 3},
           "optim": {"lr": lr, "warmup_steps": 0}}
    for section, values in extra.items():
        cfg.setdefault(section, {}).update(values)
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return trainbench("train", "--config", path, "--db", os.path.join(tmp, "runs.db"))


def exported_losses(db, run):
    out = trainbench("export", str(run), "--db", db).stdout
    series = {}
    for line in out.splitlines()[1:]:
        parts = line.split(",")
        if len(parts) >= 4 and parts[2] == "loss":
            series.setdefault(int(parts[1]), []).append(float(parts[3]))
    return series


def hf_resume(tmp, model, targets):
    """A LoRA fine-tune of a folder, stopped with Ctrl-C mid-run and resumed,
    stores each step once and gives the losses of the same run uninterrupted."""
    db = os.path.join(tmp, "runs.db")
    steps = 300
    extra = {"lora": {"rank": 4, "alpha": 8, "targets": targets}, "train": {"checkpoint_every": 10}}
    ref = train(tmp, "resume-ref", model, steps, 1e-2, **extra)
    check(ref.returncode == 0, "the uninterrupted LoRA run failed: %s" % ref.stderr.strip()[-300:])
    cfg = {"name": "resume-cut", "device": "cpu", "model": {"type": "hf", "path": model},
           "data": {"source": "tokens", "path": os.path.join(tmp, "train.bin"), "seq_len": 24},
           "train": {"batch_size": 8, "steps": steps, "eval_every": steps, "seed": 3, "checkpoint_every": 10},
           "optim": {"lr": 1e-2, "warmup_steps": 0}, "lora": extra["lora"]}
    path = os.path.join(tmp, "resume-cut.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    with sqlite3.connect(db) as c:
        before = {r[0] for r in c.execute("SELECT id FROM runs")}
    proc = subprocess.Popen([CLI, "train", "--config", path, "--db", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    run, deadline = None, time.time() + 120
    while time.time() < deadline and run is None and proc.poll() is None:
        time.sleep(0.1)
        with sqlite3.connect(db) as c:
            rows = [r for r in c.execute("SELECT id, steps_done FROM runs") if r[0] not in before]
        if rows and (rows[0][1] or 0) >= 25:
            run = rows[0][0]
            proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    with sqlite3.connect(db) as c:
        status, done = c.execute("SELECT status, steps_done FROM runs WHERE id = ?", (run or -1,)).fetchone() or (None, 0)
    check(run is not None and proc.returncode == 130 and status == "cancelled" and 0 < done < steps,
          "Ctrl-C stops the hf LoRA run mid-run (rc %s, %s at step %s): %s" % (proc.returncode, status, done, err.strip()[-200:]))
    if run is None:
        return
    got = trainbench("resume", str(run), "--db", db, "--quiet")
    check(got.returncode == 0, "resume of the hf LoRA run failed: %s" % got.stderr.strip()[-300:])
    resumed, uninterrupted = exported_losses(db, run), exported_losses(db, run_id(ref) or -1)
    once = sorted(resumed) == list(range(1, steps + 1)) and all(len(v) == 1 for v in resumed.values())
    check(once, "each of the %d steps is stored once after the resume (%d steps, %d duplicated)"
          % (steps, len(resumed), sum(len(v) > 1 for v in resumed.values())))
    worst = max((abs(resumed[k][0] - uninterrupted[k][0]) for k in resumed if k in uninterrupted), default=float("inf"))
    check(len(uninterrupted) == steps and worst <= 1e-6,
          "the resumed run's losses equal the uninterrupted run's (largest difference %.3g)" % worst)
    print("ok %-44s stopped at step %d, largest loss difference %.1e" % ("llama: LoRA run stopped and resumed", done, worst),
          flush=True)
    # A token-id run's prompt: ids with commas or spaces; an empty one is one clear sentence.
    for prompt, expect in (("", "the prompt is empty"), ("  ", "the prompt is empty"), ("3,,4", 'entry 2 is ""')):
        got = trainbench("sample", str(run), "--prompt", prompt, "--max-tokens", "2", "--db", db)
        check(got.returncode == 2 and expect in got.stderr and got.stderr.count("\n") == 1,
              "sample --prompt %r of a token-id run: %r" % (prompt, got.stderr))
    same = [trainbench("sample", str(run), "--prompt", p, "--max-tokens", "3", "--temperature", "0", "--db", db).stdout
            for p in ("3,10,20", "3 10 20", "3, 10 ,20")]
    check(same[0] and len(set(same)) == 1, "token ids with commas and spaces sample alike: %r" % same)


def final_val_loss(result):
    for line in result.stdout.splitlines():
        if " finished" in line and "val loss" in line:
            return float(line.rsplit("val loss", 1)[1].split()[0].rstrip(","))
    return None


def run_id(result):
    for line in result.stdout.splitlines():
        if line.startswith("run ") and " finished" in line:
            return line.split()[1]
    return None


FAMILIES = {
    # family: (generate options, LoRA targets, the adapted modules PEFT lists, one PEFT tensor name)
    "llama": (["--kv-heads", "2", "--shards", "2"], ["q_proj", "v_proj", "mlp"],
              ["down_proj", "gate_proj", "q_proj", "up_proj", "v_proj"],
              "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"),
    "qwen3": (["--kv-heads", "2", "--head-dim", "16"], ["q_proj", "k_proj", "mlp"],
              ["down_proj", "gate_proj", "k_proj", "q_proj", "up_proj"],
              "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"),
    "phi3": (["--kv-heads", "2"], ["attn", "gate_up_proj"], ["gate_up_proj", "o_proj", "qkv_proj"],
             "base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight"),
    "gemma3_text": (["--kv-heads", "2", "--head-dim", "16", "--sliding-window", "3"], ["q_proj", "v_proj", "mlp"],
                    ["down_proj", "gate_proj", "q_proj", "up_proj", "v_proj"],
                    "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"),
    "gpt2": (["--tied"], ["c_attn", "mlp"], ["c_attn", "c_fc", "c_proj"],
             "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"),
    "gpt_neox": (["--rotary-pct", "0.25"], ["query_key_value", "dense_4h_to_h"], ["dense_4h_to_h", "query_key_value"],
                 "base_model.model.gpt_neox.layers.0.attention.query_key_value.lora_A.weight"),
}


def training(tmp, family):
    """Fine-tuning a folder: it starts from the folder's weights, learns, and
    exports a folder (or a PEFT adapter) that the reference loads and decodes
    identically."""
    options, targets, modules, peft_name = FAMILIES[family]
    tmp = os.path.join(tmp, "train-" + family)
    os.makedirs(tmp)
    model = os.path.join(tmp, "tiny")
    generate(model, "--family", family, "--untied", "--seed", "21", "--vocab", "64", "--hidden", "32",
             "--heads", "4", "--layers", "2", "--intermediate", "64", *options)
    pattern = []
    for i in range(6000):
        pattern += [3 + i % 7, 10 + i % 5, 20]
    write_tokens(os.path.join(tmp, "train.bin"), pattern)
    prompt = [3, 10, 20, 4, 11, 20]

    # 1 step at a learning rate of 1e-30: the exported weights are the folder's.
    got = train(tmp, "untouched", model, 1, 1e-30)
    check(got.returncode == 0, "1-step run failed: %s" % got.stderr.strip())
    out = os.path.join(tmp, "untouched-export")
    got = trainbench("export-model", run_id(got) or "?", "--output", out, "--db", os.path.join(tmp, "runs.db"))
    check(got.returncode == 0, "export-model failed: %s" % got.stderr.strip())
    before, after = reference_batch([run_line(model, prompt, 0), run_line(out, prompt, 0)])
    worst = max_difference(before["logits"], after["logits"])
    check(worst <= 1e-6, "an hf run does not start from the folder's weights (logits moved by %.3g)" % worst)
    print("ok %-44s max |dlogit| %.2e" % (family + ": starts from the folder's weights", worst), flush=True)

    # Full fine-tuning learns the pattern; the export matches the reference.
    got = train(tmp, "full", model, 80, 3e-3)
    losses = [float(line.split("loss")[1].split()[0]) for line in got.stdout.splitlines() if line.startswith("step ")]
    check(got.returncode == 0 and len(losses) >= 2 and losses[-1] < 0.5 * losses[0],
          "full fine-tuning did not learn: %s %s" % (losses, got.stderr.strip()))
    out = os.path.join(tmp, "full-export")
    trainbench("export-model", run_id(got) or "?", "--output", out, "--db", os.path.join(tmp, "runs.db"))
    check(os.path.exists(os.path.join(out, "generation_config.json")), "the export lacks generation_config.json")
    compare(family + ": full fine-tune export", out, json.load(open(os.path.join(out, "config.json"))), prompt)
    print("ok %-44s loss %.3f -> %.3f" % (family + ": full fine-tuning learns", losses[0], losses[-1]), flush=True)

    # LoRA: the PEFT adapter on the base equals the merged export, and sampling the run agrees.
    got = train(tmp, "lora", model, 60, 1e-2, lora={"rank": 4, "alpha": 8, "targets": targets})
    check(got.returncode == 0, "LoRA run failed: %s" % got.stderr.strip())
    rid = run_id(got) or "?"
    peft, merged = os.path.join(tmp, "lora-peft"), os.path.join(tmp, "lora-merged")
    trainbench("export-model", rid, "--output", peft, "--db", os.path.join(tmp, "runs.db"))
    trainbench("export-model", rid, "--output", merged, "--merge-lora", "--db", os.path.join(tmp, "runs.db"))
    with open(os.path.join(peft, "adapter_config.json")) as f:
        adapter = json.load(f)
    check(adapter["r"] == 4 and sorted(adapter["target_modules"]) == modules
          and adapter["fan_in_fan_out"] == (family == "gpt2"), "adapter_config.json: %s" % adapter)
    names = read_header(os.path.join(peft, "adapter_model.safetensors"))
    check(peft_name in names, "PEFT names: %s" % names[:3])
    via_adapter, via_merged = reference_batch([run_line(model, prompt, 8, peft), run_line(merged, prompt, 8)])
    worst = max_difference(via_adapter["logits"], via_merged["logits"])
    check(worst <= 1e-5 and via_adapter["completion_ids"] == via_merged["completion_ids"],
          "the PEFT adapter differs from the merged export by %.3g" % worst)
    moved = max_difference(via_merged["logits"], before["logits"])
    check(moved > 1e-3, "LoRA training left the model unchanged (%.3g)" % moved)
    got = trainbench("sample", rid, "--prompt", ",".join(map(str, prompt)), "--max-tokens", "8", "--temperature", "0",
                     "--json", "--db", os.path.join(tmp, "runs.db"))
    ids = json.loads(got.stdout)["completion_ids"] if got.returncode == 0 else got.stderr
    check(ids == via_merged["completion_ids"], "sample RUN %s, reference on the merged export %s"
          % (ids, via_merged["completion_ids"]))
    got = trainbench("sample", rid, "--prompt", ",".join(map(str, prompt)), "--max-tokens", "8", "--temperature", "0",
                     "--db", os.path.join(tmp, "runs.db"))
    check(got.stdout.strip() == ",".join(map(str, prompt + via_merged["completion_ids"])),
          "sample RUN prints the prompt and its continuation as one id list: %r" % got.stdout)
    print("ok %-44s adapter vs merged %.2e, decode %s" % (family + ": PEFT adapter = merged export", worst, ids),
          flush=True)
    if family == "llama":
        hf_resume(tmp, model, targets)

    # train.init_from: the PEFT adapter into this run's adapters, the same adapter
    # merged into a run without LoRA, and a model folder of the family. Each run is
    # one step at a learning rate of 1e-30, so its export is where it started.
    db = os.path.join(tmp, "runs.db")
    starts = [("adapter into LoRA", {"lora": {"rank": 4, "alpha": 8, "targets": targets}, "train": {"init_from": peft}}),
              ("adapter merged", {"train": {"init_from": peft}}),
              ("model folder", {"train": {"init_from": merged}})]
    exports = []
    for i, (what, extra) in enumerate(starts):
        got = train(tmp, "init%d" % i, model, 1, 1e-30, **extra)
        check(got.returncode == 0, "init_from %s failed: %s" % (what, got.stderr.strip()))
        out = os.path.join(tmp, "init%d-export" % i)
        trainbench("export-model", run_id(got) or "?", "--output", out, "--merge-lora", "--db", db)
        exports.append(out if os.path.exists(os.path.join(out, "config.json")) else None)
    refs = reference_batch([run_line(out, prompt, 0) for out in exports if out])
    for (what, _), out in zip(starts, exports):
        worst = max_difference(refs.pop(0)["logits"], via_merged["logits"]) if out else float("inf")
        check(worst <= 1e-5, "%s: init_from %s starts %.3g away from the trained model" % (family, what, worst))
        print("ok %-44s max |dlogit| %.2e" % (family + ": init_from " + what, worst), flush=True)
    # Pure bf16 (weights, gradients and AdamW's moments in bf16) learns like mixed
    # precision: rounded to nearest, small updates were lost (33% behind at lr 1e-3).
    finals = {}
    for precision in ("bf16", "bf16-pure"):
        got = train(tmp, precision, model, 100, 1e-3, train={"precision": precision, "seed": 5})
        finals[precision] = final_val_loss(got)
    gap = finals["bf16-pure"] / finals["bf16"] - 1 if None not in finals.values() else float("inf")
    check(abs(gap) <= 0.05, "%s: pure bf16 val loss %s against mixed %s" % (family, finals["bf16-pure"], finals["bf16"]))
    print("ok %-44s val %.4f vs %.4f (%+.1f%%)" % (family + ": pure bf16 learns like mixed", finals["bf16-pure"],
                                                    finals["bf16"], 100 * gap), flush=True)
    if family != "llama":
        return

    # Wrong settings: one clear error each.
    got = train(tmp, "wrong-rank", model, 1, 1e-3, lora={"rank": 2, "alpha": 8, "targets": targets},
                train={"init_from": os.path.join(tmp, "lora-peft")})
    # A start that does not fit fails the run (recorded, as for a checkpoint of
    # another model), with the reason said once.
    check(got.returncode == 1 and got.stderr.count("has r 4 and lora_alpha 8") == 1 and "rank 2" in got.stderr,
          "an adapter of another rank: %r" % got.stderr)
    other = os.path.join(tmp, "wider")
    generate(other, "--family", family, "--untied", "--seed", "22", "--vocab", "64", "--hidden", "32",
             "--heads", "4", "--layers", "2", "--intermediate", "48", *options)
    got = train(tmp, "wrong-folder", model, 1, 1e-3, train={"init_from": other})
    check(got.returncode == 1 and "[48, 32]" in got.stderr and "[64, 32]" in got.stderr and "more tensors do not fit" in got.stderr,
          "a model folder of other sizes: %r" % got.stderr)
    got = train(tmp, "wrong-target", model, 1, 1e-3, lora={"rank": 2, "targets": ["c_attn"]})
    check(got.returncode == 2 and "\"c_attn\" is not a projection of a llama model" in got.stderr,
          "a LoRA target of another family: %r" % got.stderr)
    got = train(tmp, "mismatch", model, 1, 1e-3, model={"n_layer": 5})
    check(got.returncode == 2 and "model.n_layer: 5 differs from num_hidden_layers 2" in got.stderr,
          "a size field that differs: %r" % got.stderr)
    got = train(tmp, "repeat", model, 1, 1e-3, model={"n_layer": 2, "d_model": 32, "n_kv_head": 2})
    check(got.returncode == 0, "a config repeating the folder's sizes: %r" % got.stderr)
    bad = list(pattern)
    bad[1234] = 64
    write_tokens(os.path.join(tmp, "train.bin"), bad)
    got = train(tmp, "bad-id", model, 1, 1e-3)
    check(got.returncode != 0 and "token 1234" in got.stderr and "id 64" in got.stderr,
          "an id at the vocabulary size: %r" % got.stderr)
    print("ok %-44s" % "size mismatch, repeats, other family's target, bad id", flush=True)


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return [k for k in json.loads(f.read(n)) if k != "__metadata__"]

def byte_level_tokenizer(folder, texts, merges_wanted=60):
    """A small byte-level BPE tokenizer.json learnt from `texts` (GPT-2's byte
    alphabet, the Llama 3 split regex), with <s> and </s>: 256 + merges + 2 ids.
    Writes tokenizer.json and tokenizer_config.json; returns the vocabulary size."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_char = {b: chr(c) for b, c in zip(bs, cs)}
    vocab = {byte_char[b]: i for i, b in enumerate(range(256))}
    words = {}
    for t in texts:
        for w in t.split(" "):
            key = tuple(byte_char[b] for b in (" " + w).encode())
            words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(merges_wanted):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        vocab.setdefault(best[0] + best[1], len(vocab))
        merged = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    bos, eos = len(vocab), len(vocab) + 1
    special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True}
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [special(bos, "<s>"), special(eos, "</s>")], "normalizer": None,
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
           "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                        {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}}},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": [[a, b] for a, b in merges]}}
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>"}, f)
    return len(vocab) + 2


def generation_and_chat(tmp):
    """sample's repetition penalty, temperature, top-k and top-p against
    transformers' logits processors (the reference writes them from
    logits_process.py): greedy decodes under the penalty equal, and the first
    new token's probabilities after all four within 1e-5 with the same tokens
    kept. Then `chat`: each turn of a conversation with a system prompt is the
    conversation rendered by tests/reference/chat_reference.py (python3-jinja2
    set up as transformers sets it up), and the reply is the reference's
    greedy decode of it, to its end of turn."""
    tmp = os.path.join(tmp, "generation")
    os.makedirs(tmp)
    model = os.path.join(tmp, "tiny-chat")
    os.makedirs(model)
    words = "the cat sat on a mat and then the dog ran to the red ball while birds sang".split()
    vocab = byte_level_tokenizer(model, [" ".join(words)] * 4, merges_wanted=30)
    template = ("{{ bos_token }}{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}"
                "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
                "{% if add_generation_prompt %}{{ 'assistant:' }}{% endif %}")
    with open(os.path.join(model, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "chat_template": template}, f)
    generate(model, "--family", "llama", "--seed", "9", "--vocab", str(vocab), "--hidden", "32", "--heads", "4",
             "--layers", "2", "--intermediate", "64")
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    cfg["eos_token_id"] = vocab - 1  # </s> ends a turn
    cfg["max_position_embeddings"] = 512  # the whole conversation in the window
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(cfg, f)
    ids = [40, 41, 40, 42, 41, 40, 43, 44]  # repeats: the penalty has work
    settings = [(1.3, 0, 0, 1.0), (1.2, 0.8, 20, 0.9), (0.7, 1.5, 0, 0.5), (1.0, 1.0, 5, 1.0), (2.0, 0.6, 50, 0.95)]
    refs = reference_batch([run_line(model, ids, 8) + ["--repetition-penalty", str(r), "--temperature", str(t),
                                                       "--top-k", str(k), "--top-p", str(p)] for r, t, k, p in settings])
    for (r, t, k, p), ref in zip(settings, refs):
        name = "repetition penalty %g, temperature %g, top-k %d, top-p %g" % (r, t, k, p)
        got = trainbench("sample", "--model", model, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens",
                         "8" if t == 0 else "1", "--temperature", str(t), "--top-k", str(k), "--top-p", str(p),
                         "--repetition-penalty", str(r), "--json", "--probabilities")
        if got.returncode != 0:
            check(False, "%s: sample failed: %s" % (name, got.stderr.strip()))
            continue
        out = json.loads(got.stdout)
        worst = max(abs(a - b) for a, b in zip(out["probabilities"], ref["probabilities"]))
        kept = lambda ps: {i for i, v in enumerate(ps) if v > 0}
        check(len(out["probabilities"]) == vocab and worst <= 1e-5 and kept(out["probabilities"]) == kept(ref["probabilities"]),
              "%s: probabilities differ by up to %.3g, %d tokens kept, reference %d" %
              (name, worst, len(kept(out["probabilities"])), len(kept(ref["probabilities"]))))
        if t == 0:
            check(out["completion_ids"] == ref["completion_ids"],
                  "%s: greedy decode %s, reference %s" % (name, out["completion_ids"], ref["completion_ids"]))
        print("ok %-60s max |dp| %.1e, %d kept" % (name, worst, len(kept(out["probabilities"]))), flush=True)

    users = ["the cat sat", "then the dog ran to the red ball", "birds sang"]
    got = subprocess.run([CLI, "chat", "--model", model, "--system", "be brief", "--temperature", "0", "--max-tokens", "12",
                          "--repetition-penalty", "1.1", "--json"], input="".join(u + "\n" for u in users),
                         capture_output=True, text=True)
    if got.returncode != 0:
        check(False, "chat failed: %s" % got.stderr.strip())
        return
    turns = json.loads(got.stdout)["turns"]
    check(len(turns) == len(users), "chat: %d turns for %d messages" % (len(turns), len(users)))
    messages = [{"role": "system", "content": "be brief"}]
    for user, turn in zip(users, turns):
        messages.append({"role": "user", "content": user})
        text = json.loads(subprocess.run([sys.executable, os.path.join(HERE, "reference", "chat_reference.py"), model,
                                          "--add-generation-prompt"], input=json.dumps(messages) + "\n",
                                         capture_output=True, text=True, check=True).stdout)
        tok = subprocess.run([CLI, "tokenize", "--model", model, "--text", text], capture_output=True, text=True)
        prompt = [int(v) for v in tok.stdout.replace(",", " ").split()]
        ref = reference_batch([run_line(model, prompt, 12) + ["--repetition-penalty", "1.1"]])[0]
        check(turn["prompt_tokens"] == len(prompt) and not turn["prompt_cut"] and turn["reply_ids"] == ref["completion_ids"],
              "chat turn %r: %d prompt tokens, reply %s; reference %d tokens, %s"
              % (user, turn["prompt_tokens"], turn["reply_ids"], len(prompt), ref["completion_ids"]))
        check((turn["end"] == "end_of_turn") == (ref["completion_ids"][-1:] == [vocab - 1]), "chat turn %r ends %s" % (user, turn["end"]))
        messages.append({"role": "assistant", "content": turn["reply"]})
    print("ok chat: %d turns with a system prompt, each the reference's rendering and greedy reply" % len(turns), flush=True)
    # Wrong arguments, each one clear error.
    for args, needle in ((["--top-p", "0"], "--top-p must be a number above 0"),
                         (["--repetition-penalty", "x"], "--repetition-penalty must be a number"),
                         (["--temperature", "-1"], "--temperature must be a number from 0"),
                         (["--precision", "bf16", "1"], "give either a RUN_ID or --model")):
        bad = subprocess.run([CLI, "chat", "--model", model, *args], input="hi\n", capture_output=True, text=True)
        check(bad.returncode != 0 and needle in bad.stderr and "Traceback" not in bad.stderr,
              "chat %s: %r" % (" ".join(args), bad.stderr.strip()))
    empty = subprocess.run([CLI, "chat", "--model", model], input="", capture_output=True, text=True)
    check(empty.returncode != 0 and "no message on standard input" in empty.stderr, "chat with no input: %r" % empty.stderr)


def corpus_training(tmp):
    """text and jsonl data tokenized with the folder's own tokenizer: bad lines
    are named (or skipped and counted), the corpus is tokenized once into the
    token cache, a changed file is tokenized again, and the run learns."""
    tmp = os.path.join(tmp, "corpus")
    os.makedirs(tmp)
    rng = random.Random(9)
    words = "the cat sat on a mat and then the dog ran to the red ball while birds sang".split()
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) + "." for _ in range(400)]
    model = os.path.join(tmp, "tiny")
    os.makedirs(model)
    vocab = byte_level_tokenizer(model, docs)
    generate(model, "--family", "llama", "--seed", "4", "--vocab", str(vocab), "--hidden", "32", "--heads", "4",
             "--layers", "2", "--intermediate", "64")
    data = os.path.join(tmp, "docs.jsonl")
    lines = [json.dumps({"text": d, "id": i}) for i, d in enumerate(docs)]
    lines.insert(10, '{"text": "unterminated')        # line 11: not JSON
    lines.insert(20, json.dumps({"body": "x"}))       # line 21: no "text"
    lines.insert(30, json.dumps({"text": 42}))        # line 31: not a string
    lines.insert(40, json.dumps(["a", "list"]))       # line 41: not an object
    with open(data, "w") as f:
        f.write("\n".join(lines) + "\n")
    cache = os.path.join(tmp, "token-cache")
    env = dict(os.environ, TRAINBENCH_TOKEN_CACHE=cache)

    def run(name, steps, **data_extra):
        cfg = {"name": name, "device": "cpu", "model": {"type": "hf", "path": model},
               "data": dict({"source": "jsonl", "path": data, "seq_len": 32, "val_fraction": 0.1}, **data_extra),
               "train": {"batch_size": 8, "steps": steps, "eval_every": steps, "seed": 3},
               "optim": {"lr": 3e-3, "warmup_steps": 0}}
        path = os.path.join(tmp, name + ".json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return subprocess.run([CLI, "train", "--config", path, "--db", os.path.join(tmp, "runs.db")],
                              capture_output=True, text=True, env=env)

    got = run("stops", 2)
    check(got.returncode == 1 and "line 11: not valid JSON" in got.stderr and "skip_bad_lines" in got.stderr,
          "a bad JSONL line is not named: exit %d, %s" % (got.returncode, got.stderr.strip()))
    check(not os.path.isdir(cache) or not [e for e in os.listdir(cache) if "partial" in e or len(e) == 16],
          "a failed tokenization left a cache entry: %s" % (os.listdir(cache) if os.path.isdir(cache) else []))

    got = run("skips", 60, skip_bad_lines=True)
    check(got.returncode == 0, "a jsonl run with skip_bad_lines failed: %s" % got.stderr.strip())
    check("skipped 4 bad lines" in got.stderr and "line 21: no field \"text\"" in got.stderr and
          "line 31: field \"text\" is a number" in got.stderr and "line 41: not a JSON object" in got.stderr,
          "the skipped lines are not counted and named: %s" % got.stderr.strip())
    losses = [float(line.split("loss")[1].split()[0]) for line in got.stdout.splitlines() if line.startswith("step ")]
    check(len(losses) >= 2 and losses[-1] < 0.6 * losses[0], "the jsonl run did not learn: %s" % losses)
    entries = [e for e in os.listdir(cache) if len(e) == 16]
    check(len(entries) == 1, "expected one token cache entry, found %s" % os.listdir(cache))
    entry = os.path.join(cache, entries[0]) if entries else cache
    meta = json.load(open(os.path.join(entry, "meta.json")))
    check(meta["documents"] == 400 and meta["skipped_lines"] == 4, "token cache meta: %s" % meta)
    # The cache holds each document's ids as `tokenize --add-special-tokens` gives them, then </s>.
    enc = subprocess.run([CLI, "tokenize", "--model", model, "--jsonl", "--add-special-tokens"],
                         input="".join(json.dumps(d) + "\n" for d in docs), capture_output=True, text=True)
    expected = []
    for line in enc.stdout.splitlines():
        expected += json.loads(line) + [vocab - 1]
    with open(os.path.join(entry, "tokens.bin"), "rb") as f:
        raw = f.read()
    cached = list(struct.unpack("<%dH" % (len(raw) // 2), raw))
    check(cached == expected, "the token cache is not the documents' ids with EOS between them (%d vs %d ids)" % (
        len(cached), len(expected)))
    stamp = os.path.getmtime(os.path.join(entry, "meta.json"))

    # The same file again: the cache is reused, not rebuilt.
    got = run("again", 2, skip_bad_lines=True)
    check(got.returncode == 0 and os.path.getmtime(os.path.join(entry, "meta.json")) == stamp,
          "an unchanged file was tokenized again: %s" % got.stderr.strip())
    # A changed file: tokenized again, and the old entry removed.
    with open(data, "a") as f:
        f.write(json.dumps({"text": "one more document about the cat."}) + "\n")
    got = run("changed", 2, skip_bad_lines=True)
    now = [e for e in os.listdir(cache) if len(e) == 16]
    check(got.returncode == 0 and len(now) == 1 and now != entries,
          "a changed file was not tokenized again: %s %s" % (now, got.stderr.strip()))
    if now:
        meta = json.load(open(os.path.join(cache, now[0], "meta.json")))
        check(meta["documents"] == 401, "the changed file's cache has %d documents" % meta["documents"])

    # Plain text, documents separated by blank lines; sampling takes a text prompt.
    text = os.path.join(tmp, "docs.txt")
    with open(text, "w") as f:
        f.write("\n\n".join(docs) + "\n")
    got = run("text", 40, source="text", path=text)
    check(got.returncode == 0 and "400 documents" in got.stdout + got.stderr,
          "a text run failed or did not split documents at blank lines: %s %s" % (got.stdout[-300:], got.stderr.strip()))
    rid = run_id(got)
    got = subprocess.run([CLI, "sample", rid or "?", "--prompt", "the cat", "--max-tokens", "8", "--db",
                          os.path.join(tmp, "runs.db")], capture_output=True, text=True, env=env)
    check(got.returncode == 0 and "the cat" in got.stdout, "sampling a text prompt failed: %s %s" % (got.stdout, got.stderr))
    print("ok %-44s 4 bad lines named and skipped, cache reused, loss %.3f -> %.3f" % (
        "jsonl data through the folder's tokenizer", losses[0] if losses else -1, losses[-1] if losses else -1), flush=True)


def planning(tmp):
    """The memory planner on a folder of every family: `estimate` against the
    peak `measure` counts (CPU, two steps) in fp32, bf16 mixed and pure bf16,
    with and without LoRA (GPT-NeoX's layers also with checkpointing): within
    2% and never 0.5% under, and no plan says it is not yet exact."""
    tmp = os.path.join(tmp, "planning")
    os.makedirs(tmp)
    rng = random.Random(7)
    tokens = os.path.join(tmp, "train.bin")
    write_tokens(tokens, [rng.randrange(3, 200) for _ in range(8000)])
    folders = [("llama", ["--family", "llama", "--kv-heads", "2"], ["q_proj", "v_proj"]),
               ("qwen2", ["--family", "qwen2", "--kv-heads", "1", "--tied"], ["k_proj", "down_proj"]),
               ("mistral", ["--family", "mistral"], ["o_proj", "gate_proj"]),
               # q/k norms at a head size of hidden / heads: planned from its own step for the norms alone.
               ("qwen3", ["--family", "qwen3", "--kv-heads", "2", "--head-dim", "16"], ["q_proj", "v_proj"]),
               ("phi3", ["--family", "phi3", "--kv-heads", "2"], ["qkv_proj", "gate_up_proj"]),
               # Gemma 3's sliding layers past their window (40 < 48) and within it (64).
               ("gemma3 past window", ["--family", "gemma3_text", "--kv-heads", "2", "--head-dim", "16",
                                       "--sliding-window", "40"], ["q_proj", "mlp"]),
               ("gemma3 within window", ["--family", "gemma3_text", "--kv-heads", "1", "--head-dim", "32",
                                         "--sliding-window", "64"], ["o_proj", "up_proj"]),
               ("gpt2", ["--family", "gpt2", "--tied"], ["c_attn"]),
               ("gpt_neox", ["--family", "gpt_neox", "--rotary-pct", "0.25"], ["query_key_value"]),
               ("gpt_neox sequential", ["--family", "gpt_neox", "--rotary-pct", "0.5", "--sequential-residual"],
                ["dense_h_to_4h"])]
    for name, options, targets in folders:
        def folder_of(mlp):
            folder = os.path.join(tmp, "%s-%d" % (name.replace(" ", "-"), mlp))
            if not os.path.exists(folder):
                generate(folder, *options, "--untied" if "--tied" not in options else "--tied", "--seed", "3",
                         "--vocab", "256", "--hidden", "64", "--heads", "4", "--layers", "2", "--intermediate", str(mlp))
            return folder
        rows = [("fp32", None, False), ("bf16", None, False), ("bf16-pure", None, False), ("fp32", targets, False),
                ("bf16", targets, False), ("bf16-pure", targets, False)]
        if name.startswith(("qwen3", "phi3", "gemma3")):
            # Planned from the recorded step, which is exact in every row
            # (all six measured 2026-12-06); three keep the suite short.
            rows = [("fp32", None, False), ("bf16", targets, False), ("bf16-pure", targets, False)]
        if name.startswith("gpt_neox"):
            # A checkpointed block's first forward runs without grad, and the
            # layer holds its attention output until it returns. (MLP 128
            # and seq 64: these peaks fall in the recomputed MLP, where at an
            # MLP of 112, or at 4 x 48 and 8 x 32, the peak is a scratch
            # buffer of the CPU's bf16 GEMM that the planner does not know;
            # docs/hf-models.md.)
            rows += [("bf16", None, True), ("bf16", targets, True)]
        for precision, lora, ckpt in rows:
            folder = folder_of(128 if ckpt else 112)
            cfg = {"name": "plan", "device": "cpu", "model": {"type": "hf", "path": folder},
                   "data": {"source": "tokens", "path": tokens, "seq_len": 64 if ckpt else 48},
                   "train": {"batch_size": 4, "steps": 2, "precision": precision, "eval_every": 2,
                             "eval_batches": 2, "threads": 1, "activation_checkpointing": ckpt}}
            if lora:
                cfg["lora"] = {"rank": 4, "targets": lora}
            path = os.path.join(tmp, "plan.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            what = "%s %s%s%s" % (name, precision, " lora " + ",".join(lora) if lora else "", " ckpt" if ckpt else "")
            measured, planned = trainbench("measure", "--config", path, "--json", "--steps", "2"), trainbench("estimate", "--config", path, "--json")
            if measured.returncode != 0 or planned.returncode != 0:
                check(False, "%s: measure or estimate failed: %s%s" % (what, measured.stderr.strip(), planned.stderr.strip()))
                continue
            peak, plan = json.loads(measured.stdout)["peak_bytes"], json.loads(planned.stdout)
            error = (plan["peak_bytes"] - peak) / peak
            print("plan %-44s measured %9d planned %9d %+6.2f%%" % (what, peak, plan["peak_bytes"], 100 * error))
            named = any("not yet exact" in n for n in plan.get("notes", []))
            check(-0.005 <= error <= 0.02 and not named, "%s: planned %+.2f%% off the measured peak%s"
                  % (what, 100 * error, " (and says it is not yet exact)" if named else ""))


def options_walk(tmp):
    """The trainer's options across every family, as a user combines them:
    each folder (a head size of its own, biases and llama3 rope scaling,
    sliding windows, q/k norms, fused projections, Gemma 3's layers, tied and
    untied heads) with LoRA on attention and the MLP, checkpointing,
    accumulation and dropout. None may be refused or noted "not yet exact",
    and `estimate` is within 2% of `measure` and never 0.5% under. (The GPT-2
    replay planned a checkpointed LoRA block with dropout 3.1% over.)"""
    tmp = os.path.join(tmp, "walk")
    os.makedirs(tmp)
    rng = random.Random(9)
    tokens = os.path.join(tmp, "train.bin")
    write_tokens(tokens, [rng.randrange(3, 200) for _ in range(8000)])
    folders = {"llama": ["--family", "llama", "--kv-heads", "2"],
               "llama head_dim 32": ["--family", "llama", "--head-dim", "32"],
               "llama biases, llama3 rope": ["--family", "llama", "--attention-bias", "--mlp-bias", "--rope-llama3",
                                             "--head-dim", "16"],
               "mistral window 40": ["--family", "mistral", "--sliding-window", "40"],
               "qwen2 tied": ["--family", "qwen2", "--tied"],
               "qwen3": ["--family", "qwen3", "--head-dim", "16"],
               "phi3": ["--family", "phi3", "--kv-heads", "2"],
               "gemma3 window 40": ["--family", "gemma3_text", "--head-dim", "16", "--sliding-window", "40"],
               "gpt2 tied": ["--family", "gpt2", "--tied"],
               "neox rotary 0.25": ["--family", "gpt_neox", "--rotary-pct", "0.25"]}
    reference_batch([["generate", os.path.join(tmp, "f%d" % i), *options, "--seed", "3", "--vocab", "256", "--hidden", "64",
                      "--heads", "4", "--layers", "2", "--intermediate", "112"] for i, options in enumerate(folders.values())])
    for i, name in enumerate(folders):
        for precision, lora, ckpt, accum, dropout in (("bf16", ["attn", "mlp"], True, 2, 0.0), ("fp32", ["mlp"], True, 1, 0.1)):
            cfg = {"name": "walk", "device": "cpu", "model": {"type": "hf", "path": os.path.join(tmp, "f%d" % i), "dropout": dropout},
                   "data": {"source": "tokens", "path": tokens, "seq_len": 48},
                   "train": {"batch_size": 4, "steps": 2, "precision": precision, "eval_every": 2, "eval_batches": 2,
                             "threads": 1, "activation_checkpointing": ckpt, "grad_accum": accum},
                   "lora": {"rank": 4, "targets": lora}}
            path = os.path.join(tmp, "walk.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            what = "%s %s lora %s ckpt accum %d dropout %g" % (name, precision, "+".join(lora), accum, dropout)
            planned = trainbench("estimate", "--config", path, "--json")
            measured = trainbench("measure", "--config", path, "--json", "--steps", "2")
            if planned.returncode != 0 or measured.returncode != 0:
                check(False, "%s: refused: %s%s" % (what, planned.stderr.strip(), measured.stderr.strip()))
                continue
            plan, peak = json.loads(planned.stdout), json.loads(measured.stdout)["peak_bytes"]
            error = (plan["peak_bytes"] - peak) / peak
            noted = [n for n in plan.get("notes", []) if "not yet exact" in n or "lower bound" in n]
            print("walk %-62s %+6.2f%%" % (what, 100 * error), flush=True)
            check(-0.005 <= error <= 0.02 and not noted, "%s: planned %+.2f%% off the measured peak %s" % (what, 100 * error, noted))


def chat_planning(tmp):
    """Chat data keeps a float loss mask beside each example's ids (the
    validation batches for the whole run, the step's batch): the plan, and
    the plan for two ranks, against measure and measure --nproc 2. Many validation windows of a small model
    make the mask a few percent of the peak."""
    tmp = os.path.join(tmp, "chat-planning")
    os.makedirs(tmp)
    rng = random.Random(12)
    words = "the cat sat on a mat and then the dog ran to the red ball while birds sang".split()
    sentence = lambda: " ".join(rng.choice(words) for _ in range(rng.randint(4, 16))) + "."
    conversations = [[{"role": "user", "content": sentence()}, {"role": "assistant", "content": sentence()}]
                     for _ in range(300)]
    model = os.path.join(tmp, "tiny")
    os.makedirs(model)
    vocab = byte_level_tokenizer(model, [m["content"] for c in conversations for m in c], merges_wanted=30)
    with open(os.path.join(model, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "chat_template":
                   "{{ bos_token }}{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}"
                   "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"}, f)
    generate(model, "--family", "llama", "--seed", "5", "--vocab", str(vocab), "--hidden", "32", "--heads", "4",
             "--layers", "2", "--intermediate", "64")
    data = os.path.join(tmp, "chat.jsonl")
    with open(data, "w") as f:
        f.write("".join(json.dumps({"messages": c}) + "\n" for c in conversations))
    cfg = {"name": "chat-plan", "device": "cpu", "model": {"type": "hf", "path": model},
           "data": {"source": "chat", "path": data, "seq_len": 96, "val_fraction": 0.2},
           "train": {"batch_size": 6, "steps": 2, "eval_every": 2, "eval_batches": 40, "threads": 1}}
    lora = dict(cfg, train=dict(cfg["train"], precision="bf16"), lora={"rank": 4, "targets": ["q_proj", "v_proj"]})
    # LoRA over a base kept in bf16 (PEFT's way with a published model) trains;
    # bf16 weights without LoRA (train.weights_dtype) are a setup to plan, not to run.
    halfbase = dict(lora, train=dict(lora["train"], weights_dtype="bf16"))
    loaded = dict(cfg, train=dict(cfg["train"], precision="bf16", weights_dtype="bf16"))
    paths = {}
    for name, c in (("fp32", cfg), ("lora", lora), ("halfbase", halfbase), ("loaded", loaded)):
        paths[name] = os.path.join(tmp, name + ".json")
        with open(paths[name], "w") as f:
            json.dump(c, f)
    env = dict(os.environ, TRAINBENCH_TOKEN_CACHE=os.path.join(tmp, "token-cache"))
    def run(*args):
        try:
            return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=300)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess([CLI, *args], -1, "", "did not finish in 300 s")
    cases = [("chat data", "fp32", ["measure"], ["estimate"]),
             ("chat data, bf16 LoRA q,v", "lora", ["measure"], ["estimate"]),
             ("chat data, bf16 LoRA q,v, bf16 base", "halfbase", ["measure"], ["estimate"])]
    if DATA_PARALLEL:
        cases += [("chat data, 2 ranks", "fp32", ["measure", "--nproc", "2"], ["estimate", "--gpus", "2"]),
                  ("chat data, 2 ranks, bf16 base", "halfbase", ["measure", "--nproc", "2"], ["estimate", "--gpus", "2"])]
    peak = None
    for what, config, measure, estimate in cases:
        path = paths[config]
        if measure:
            m = run(*measure, "--config", path, "--json", "--steps", "2")
            if m.returncode != 0:
                check(False, "%s: measure failed: %s" % (what, m.stderr.strip()[-400:]))
                break
            peak = json.loads(m.stdout)["peak_bytes"]
        e = run(*estimate, "--config", path, "--json")
        if e.returncode != 0:
            check(False, "%s: estimate failed: %s" % (what, e.stderr.strip()[-400:]))
            continue
        planned = json.loads(e.stdout)["peak_bytes"]
        error = (planned - peak) / peak
        print("plan %-44s measured %9d planned %9d %+6.2f%%" % (what, peak, planned, 100 * error), flush=True)
        check(-0.005 <= error <= 0.02, "%s: planned %+.2f%% off the measured peak" % (what, 100 * error))
    # measure ran fp32 weights for a config that plans bf16 ones, and
    # reported that as the setup's peak; it refuses it now. (With --nproc it
    # is refused once, before any rank starts.)
    for args in (["measure"],) + ((["measure", "--nproc", "2"],) if DATA_PARALLEL else ()):
        r = run(*args, "--config", paths["loaded"], "--json")
        check(r.returncode != 0 and r.stderr.count("train.weights_dtype \"bf16\" describes a setup to plan") == 1,
              "%s with train.weights_dtype bf16: exit %d, %s" % (" ".join(args), r.returncode, r.stderr.strip()[-300:]))
    # The plan of weights loaded in bf16 and trained in bf16 is pure bf16's
    # step (the same tensors from the first step on), as train.precision
    # "bf16-pure" over fp32 weights is traced.
    r = run("estimate", "--config", paths["loaded"], "--json")
    check(r.returncode == 0, "the plan of bf16 weights failed: %s" % r.stderr.strip()[-300:])
    if r.returncode == 0:
        pure = json.loads(open(paths["loaded"]).read())
        pure["train"]["precision"] = "bf16-pure"
        pure["train"]["weights_dtype"] = "fp32"
        pure_path = paths["loaded"] + ".pure.json"
        with open(pure_path, "w") as f:
            json.dump(pure, f)
        p = run("estimate", "--config", pure_path, "--json")
        check(p.returncode == 0 and json.loads(p.stdout)["peak_bytes"] == json.loads(r.stdout)["peak_bytes"],
              "bf16 weights trained in bf16 are not planned as pure bf16: %s" % p.stderr.strip()[-300:])


def main():
    global CLI, DATA_PARALLEL
    CLI = os.path.abspath(sys.argv[1])
    DATA_PARALLEL = "--no-data-parallel" not in sys.argv
    count = int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 12
    tmp = tempfile.mkdtemp(prefix="tb-hf-")
    try:
        rng = random.Random(5)
        cases = list(named_cases(tmp)) + list(random_cases(tmp, count, 11))
        reference_batch([["generate", folder, *options] for _, folder, options in cases])
        prompts = []
        for _, folder, _ in cases:
            with open(os.path.join(folder, "config.json")) as f:
                cfg = json.load(f)
            prompts.append((cfg, [rng.randrange(3, cfg["vocab_size"]) for _ in range(rng.randint(4, 12))]))
        refs = reference_batch([run_line(folder, ids, 8) for (_, folder, _), (_, ids) in zip(cases, prompts)])
        for (name, folder, _), (cfg, ids), ref in zip(cases, prompts, refs):
            compare(name, folder, cfg, ids, ref=ref)
        damaged_folders(tmp)
        generation_and_chat(tmp)
        planning(tmp)
        options_walk(tmp)
        chat_planning(tmp)
        corpus_training(tmp)
        for family in FAMILIES:
            training(tmp, family)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
