#!/usr/bin/env python3
"""Memory planner accuracy: estimate vs measured peak tensor bytes on the CPU,
in fp32 and in bf16 mixed precision (autocast).

For each configuration of the grid, runs `trainbench-cli estimate --json` and
`trainbench-cli measure --json --steps 2` (the counting allocator) and prints
the relative error, next to the per-parameter-multiplier method (16 bytes per
parameter for fp32 AdamW, 8 for SGD with momentum, 4 + 4 for plain SGD; no
activations). Usage: bench/memory_accuracy.py [CLI] (default build/app/trainbench-cli).
With --random N [--seed S] it plans and measures N configurations drawn at
random over the same space instead (configurations nobody tuned the planner on).
The estimate is the plan of the trainer's own step, recorded at small
shapes (--derived, once needed for that, is accepted and changes nothing).
With --lora-sweep it runs 78 small LoRA configurations instead (1 and 2
layers, d_model 64, batch 32 on the addition task: every single Llama
projection and group, GPT's groups with and without dropout, in fp32, bf16
and pure bf16), where the first blocks' frozen parts and each adapter's
gradient show most.
With --families the random draws also take Hugging Face folders of every
family the trainer reads (Llama, Mistral, Qwen2, GPT-2, GPT-NeoX), written
with random weights by tests/reference/hf_reference.py (needs python3-torch),
trained on random token ids.
With --sdpa (a LibTorch 2.x CLI) half of the random draws use attention
"sdpa" (scaled_dot_product_attention: the CPU's flash kernel, or its math
fallback with dropout); the draws are otherwise those without the flag.
With --windows (and --families) a Mistral folder has a sliding window of 4
to 40 positions half the time: past it the trainer masks the window and runs
eager attention, SDPA asked for or not. Drawn on a generator of its own, so
the draws are otherwise those without the flag.
With --odd half of the built-in models' draws take widths that are not powers
of two instead: 3, 5, 6 or 12 heads of 8 to 16 dimensions, an odd d_ff (99
to 301), an odd sequence (17 to 97 positions) and an odd batch (1 to 7); on
a generator of its own too.
"""
import json, os, random, statistics, struct, subprocess, sys, tempfile

args = sys.argv[1:]
def option(name, default):
    if name not in args:
        return default
    i = args.index(name)
    value = args[i + 1]
    del args[i:i + 2]
    return int(value)
def flag(name):
    if name not in args:
        return False
    args.remove(name)
    return True
flag("--derived")  # (every plan is derived)
FAMILIES = flag("--families")
SDPA = flag("--sdpa")
WINDOWS = flag("--windows")
ODD = flag("--odd")
LORA_SWEEP = flag("--lora-sweep")
REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference", "hf_reference.py")
RANDOM = option("--random", 0)
SEED = option("--seed", 1)
CLI = args[0] if args else "build/app/trainbench-cli"

def cfg(model, data, train, optim=None, lora=None):
    c = {"name": "grid", "device": "cpu", "model": model, "data": data,
         "train": dict({"steps": 2, "precision": "fp32", "eval_batches": 2, "threads": 1}, **train),
         "optim": optim or {"optimizer": "adamw"}}
    if lora:
        c["lora"] = lora
    return c

GRID = [
    ("gpt L1 d64 learned", cfg({"type": "gpt", "n_layer": 1, "d_model": 64, "n_head": 4}, {"source": "text", "seq_len": 32}, {"batch_size": 4})),
    ("gpt L2 d128 learned b16 t64", cfg({"type": "gpt", "n_layer": 2, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 64}, {"batch_size": 16})),
    ("gpt L4 d256 sinusoidal b8 t128", cfg({"type": "gpt", "n_layer": 4, "d_model": 256, "n_head": 8, "positional_encoding": "sinusoidal"}, {"source": "text", "seq_len": 128}, {"batch_size": 8})),
    ("gpt L3 d128 rope b8 t256", cfg({"type": "gpt", "n_layer": 3, "d_model": 128, "n_head": 4, "positional_encoding": "rope"}, {"source": "text", "seq_len": 256}, {"batch_size": 8})),
    ("gpt L2 d64 addition b64", cfg({"type": "gpt", "n_layer": 2, "d_model": 64, "n_head": 2}, {"source": "addition", "digits": 3}, {"batch_size": 64})),
    ("gpt L2 d128 sgd b16 t64", cfg({"type": "gpt", "n_layer": 2, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 64}, {"batch_size": 16}, {"optimizer": "sgd"})),
    ("gpt L2 d128 accum4 b8 t64", cfg({"type": "gpt", "n_layer": 2, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 64}, {"batch_size": 8, "grad_accum": 4})),
    ("gpt L6 d64 b1 t512", cfg({"type": "gpt", "n_layer": 6, "d_model": 64, "n_head": 4}, {"source": "text", "seq_len": 512, "val_fraction": 0.1}, {"batch_size": 1})),
    ("gpt L2 d512 b2 t32 untied", cfg({"type": "gpt", "n_layer": 2, "d_model": 512, "n_head": 8, "tie_embeddings": False}, {"source": "text", "seq_len": 32}, {"batch_size": 2})),
    ("gpt L2 d128 dropout0.1", cfg({"type": "gpt", "n_layer": 2, "d_model": 128, "n_head": 4, "dropout": 0.1}, {"source": "text", "seq_len": 64}, {"batch_size": 16})),
    ("gpt L4 d64 h8 dropout sgd b32 t128 untied", cfg({"type": "gpt", "n_layer": 4, "d_model": 64, "n_head": 8, "dropout": 0.1, "tie_embeddings": False}, {"source": "text", "seq_len": 128}, {"batch_size": 32}, {"optimizer": "sgd", "momentum": 0.9})),
    ("gpt L3 d128 checkpointing b16 t128", cfg({"type": "gpt", "n_layer": 3, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 128}, {"batch_size": 16, "activation_checkpointing": True})),
    ("llama L1 d64 gqa", cfg({"type": "llama", "n_layer": 1, "d_model": 64, "n_head": 4, "n_kv_head": 2}, {"source": "text", "seq_len": 32}, {"batch_size": 4})),
    ("llama L2 d128 mha b16 t64", cfg({"type": "llama", "n_layer": 2, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 64}, {"batch_size": 16})),
    ("llama L4 d256 gqa8/2 b8 t128", cfg({"type": "llama", "n_layer": 4, "d_model": 256, "n_head": 8, "n_kv_head": 2}, {"source": "text", "seq_len": 128}, {"batch_size": 8})),
    ("llama L2 d128 sgd b32 t32", cfg({"type": "llama", "n_layer": 2, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 32}, {"batch_size": 32}, {"optimizer": "sgd"})),
    ("llama L2 d128 checkpointing b8 t128", cfg({"type": "llama", "n_layer": 2, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 128}, {"batch_size": 8, "activation_checkpointing": True})),
    ("llama L2 d64 addition b64", cfg({"type": "llama", "n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 1}, {"source": "addition", "digits": 3}, {"batch_size": 64})),
    ("llama L2 d128 accum4 b4 t64", cfg({"type": "llama", "n_layer": 2, "d_model": 128, "n_head": 4, "n_kv_head": 2}, {"source": "text", "seq_len": 64}, {"batch_size": 4, "grad_accum": 4})),
    ("gpt L2 d128 lora r4 (all)", cfg({"type": "gpt", "n_layer": 2, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 64}, {"batch_size": 16}, lora={"rank": 4})),
    ("llama L2 d128 lora r8 (attn)", cfg({"type": "llama", "n_layer": 2, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 64}, {"batch_size": 16}, lora={"rank": 8, "targets": ["attn"]})),
    ("llama L2 d128 lora r8 (all)", cfg({"type": "llama", "n_layer": 2, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 64}, {"batch_size": 16}, lora={"rank": 8})),
    ("gpt L3 d128 lora attn dropout b8 t128", cfg({"type": "gpt", "n_layer": 3, "d_model": 128, "n_head": 4, "dropout": 0.1}, {"source": "text", "seq_len": 128}, {"batch_size": 8}, lora={"rank": 4, "targets": ["attn"]})),
    ("gpt L3 d128 lora checkpointing b8 t128", cfg({"type": "gpt", "n_layer": 3, "d_model": 128, "n_head": 4}, {"source": "text", "seq_len": 128}, {"batch_size": 8, "activation_checkpointing": True}, lora={"rank": 8})),
    ("llama L3 d128 gqa lora ckpt b8 t128", cfg({"type": "llama", "n_layer": 3, "d_model": 128, "n_head": 4, "n_kv_head": 2}, {"source": "text", "seq_len": 128}, {"batch_size": 8, "activation_checkpointing": True}, lora={"rank": 8, "targets": ["attn"]})),
    ("llama L2 d256 gqa8/2 lora r16 b4 t256", cfg({"type": "llama", "n_layer": 2, "d_model": 256, "n_head": 8, "n_kv_head": 2}, {"source": "text", "seq_len": 256}, {"batch_size": 4}, lora={"rank": 16})),
    ("gpt L2 d128 rope lora mlp b8 t256", cfg({"type": "gpt", "n_layer": 2, "d_model": 128, "n_head": 4, "positional_encoding": "rope"}, {"source": "text", "seq_len": 256}, {"batch_size": 8}, lora={"rank": 8, "targets": ["mlp"]})),
    ("gpt L2 d64 sinusoidal lora addition acc4", cfg({"type": "gpt", "n_layer": 2, "d_model": 64, "n_head": 4, "positional_encoding": "sinusoidal"}, {"source": "addition", "digits": 3}, {"batch_size": 64, "grad_accum": 4}, lora={"rank": 4})),
    ("llama L4 d128 lora q,v dropout sgd t512", cfg({"type": "llama", "n_layer": 4, "d_model": 128, "n_head": 4, "dropout": 0.1}, {"source": "text", "seq_len": 512, "val_fraction": 0.1}, {"batch_size": 2}, {"optimizer": "sgd", "momentum": 0.9}, lora={"rank": 8, "targets": ["q_proj", "v_proj"]})),
]

# CPU bf16 autocast (fp32 master weights): the same configurations in mixed precision.
BF16 = ["gpt L2 d128 learned b16 t64", "gpt L4 d256 sinusoidal b8 t128", "gpt L3 d128 rope b8 t256",
        "gpt L2 d64 addition b64", "gpt L2 d128 dropout0.1", "gpt L3 d128 checkpointing b16 t128",
        "llama L4 d256 gqa8/2 b8 t128", "llama L2 d128 sgd b32 t32", "llama L2 d128 checkpointing b8 t128",
        "llama L2 d128 accum4 b4 t64", "gpt L2 d128 lora r4 (all)", "gpt L3 d128 lora checkpointing b8 t128",
        "llama L3 d128 gqa lora ckpt b8 t128", "llama L4 d128 lora q,v dropout sgd t512",
        "gpt L2 d64 sinusoidal lora addition acc4", "llama L2 d256 gqa8/2 lora r16 b4 t256"]

def bf16(rows):
    out = []
    for name, c in rows:
        c = json.loads(json.dumps(c))
        c["train"]["precision"] = "bf16"
        out.append((name + " bf16", c))
    return out

def run(args):
    out = subprocess.run([CLI] + args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(" ".join(args) + ": " + out.stderr.strip())
    return json.loads(out.stdout)

def multiplier(params, optimizer):
    return params * (16 if optimizer == "adamw" else 8)

def with_init_from(d):
    """Two fine-tuning rows: weights exported from a short run, then trained
    further (GPT, all weights) or adapted (Llama, LoRA)."""
    rows = []
    for typ, lora in (("gpt", None), ("llama", {"rank": 4, "targets": ["attn"]})):
        model = {"type": typ, "n_layer": 2, "d_model": 128, "n_head": 4}
        base = cfg(model, {"source": "text", "seq_len": 64}, {"batch_size": 8})
        db = os.path.join(d, typ + ".db")
        path = os.path.join(d, typ + "-base.json")
        with open(path, "w") as f:
            json.dump(base, f)
        subprocess.run([CLI, "train", "--config", path, "--db", db, "--quiet"], check=True, capture_output=True)
        out = os.path.join(d, typ + "-model")
        subprocess.run([CLI, "export-model", "1", "--db", db, "--output", out], check=True, capture_output=True)
        tuned = cfg(model, {"source": "text", "seq_len": 64}, {"batch_size": 16, "init_from": out}, lora=lora)
        rows.append((f"{typ} L2 d128 init_from" + (" + lora attn" if lora else ""), tuned))
    return rows

# The projections a LoRA config may name, by Hugging Face family.
HF_PROJECTIONS = {
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "gpt_neox": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
}

def hf_folder(rng, tmp, i, windows):
    """A folder of a drawn family and shape (random weights), and what a LoRA
    config may target in it. windows: the generator of Mistral's sliding
    windows (None: no window)."""
    family = rng.choice(["llama", "mistral", "qwen2", "gpt2", "gpt_neox"])
    heads = rng.choice([1, 2, 4, 8])
    hidden = rng.choice([h for h in (48, 64, 80, 96, 128) if h % heads == 0 and (h // heads) % 2 == 0])
    options = ["--family", family, "--seed", str(i), "--vocab", str(rng.choice([211, 256, 300])),
               "--hidden", str(hidden), "--heads", str(heads), "--layers", str(rng.randint(1, 3)),
               "--intermediate", str(rng.choice([64, 100, 128, 172, 256])), rng.choice(["--tied", "--untied"])]
    if family in ("llama", "mistral", "qwen2"):
        options += ["--kv-heads", str(rng.choice([k for k in (1, 2, heads) if heads % k == 0]))]
    if family == "gpt_neox":
        options += ["--rotary-pct", str(rng.choice([0.25, 0.5, 1.0]))]
        if rng.random() < 0.5:
            options.append("--sequential-residual")
    if family == "mistral" and windows and windows.random() < 0.5:
        options += ["--sliding-window", str(windows.randint(4, 40))]
    folder = os.path.join(tmp, "hf%d" % i)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # Debian's, with python3-torch
    subprocess.run([python, REFERENCE, "generate", folder] + options, check=True, capture_output=True)
    names = HF_PROJECTIONS.get(family, HF_PROJECTIONS["llama"])
    return family, folder, options, names

def drawn(n, seed, tmp):
    """n configurations drawn at random: both models, every positional encoding,
    fp32, bf16 and pure bf16, LoRA (groups and single projections), checkpointing,
    dropout, accumulation (1 to 4), both datasets, batch 1, one head, tied and
    untied heads, widths that are not powers of two (with --families, also
    Hugging Face folders of every family, on token ids)."""
    rng = random.Random(seed)
    out = []
    tokens = os.path.join(tmp, "tokens.bin")
    if FAMILIES:  # (its own generator: the draws without --families stay as they were)
        ids = random.Random(seed + 1)
        with open(tokens, "wb") as f:
            f.write(struct.pack("<20000H", *[ids.randrange(3, 211) for _ in range(20000)]))
    fused = random.Random(seed + 2)  # (--sdpa's own generator, as --families has)
    windows = random.Random(seed + 3) if WINDOWS else None  # (--windows' own)
    odd = random.Random(seed + 4) if ODD else None  # (--odd's own)
    for i in range(n):
        sdpa = SDPA and fused.random() < 0.5
        typ = rng.choice(["gpt", "llama", "hf", "hf"] if FAMILIES else ["gpt", "llama"])
        if typ == "hf":
            family, folder, options, names = hf_folder(rng, tmp, i, windows)
            model = {"type": "hf", "path": folder}
            if sdpa:
                model["attention"] = "sdpa"
            data = {"source": "tokens", "path": tokens, "seq_len": rng.choice([16, 31, 48, 64])}
            train = {"precision": rng.choice(["fp32", "bf16", "bf16-pure"]), "batch_size": rng.choice([1, 2, 4, 8]),
                     "grad_accum": rng.choice([1, 1, 2, 3]), "activation_checkpointing": rng.random() < 0.3}
            optim = {"optimizer": rng.choice(["adamw", "sgd"]) if train["precision"] != "bf16-pure" else "adamw"}
            if optim["optimizer"] == "sgd":
                optim["momentum"] = rng.choice([0, 0.9])
            lora = None
            if rng.random() < 0.5:
                targets = rng.choice([["attn"], ["mlp"], ["attn", "mlp"], [rng.choice(names)], rng.sample(names, 2)])
                lora = {"rank": rng.choice([2, 4, 8]), "targets": targets}
            out.append((f"random {seed}.{i + 1}: {json.dumps([family] + options[4:] + (['sdpa'] if sdpa else []) + [data['seq_len'], train, optim, lora])}",
                        cfg(model, data, train, optim, lora)))
            continue
        d = rng.choice([48, 64, 80, 96, 112, 128, 160, 192, 256])
        heads = rng.choice([h for h in (1, 2, 4, 8) if d % h == 0 and (d // h) % 2 == 0])
        model = {"type": typ, "n_layer": rng.randint(1, 4), "d_model": d, "n_head": heads}
        model["tie_embeddings"] = rng.choice([True, False])
        if typ == "llama":
            model["n_kv_head"] = rng.choice([k for k in (1, 2, heads) if heads % k == 0])
        else:
            model["positional_encoding"] = rng.choice(["learned", "sinusoidal", "rope"])
        if rng.random() < 0.3:
            model["dropout"] = 0.1
        if sdpa:
            model["attention"] = "sdpa"
        data = {"source": rng.choice(["text", "text", "addition"])}
        if data["source"] == "text":
            data["seq_len"] = rng.choice([32, 48, 64, 128, 256])
        else:
            data["digits"] = rng.choice([2, 3])
        train = {"precision": rng.choice(["fp32", "bf16", "bf16-pure"]), "batch_size": rng.choice([1, 2, 4, 8, 16, 32]),
                 "grad_accum": rng.choice([1, 1, 2, 3, 4]), "activation_checkpointing": rng.random() < 0.3}
        if odd and odd.random() < 0.5:
            heads = odd.choice([3, 5, 6, 12])
            model["n_head"] = heads
            model["d_model"] = heads * odd.choice([8, 10, 12, 16])  # (even head widths: RoPE pairs them)
            model["d_ff"] = odd.choice([99, 171, 257, 301])
            if typ == "llama":
                model["n_kv_head"] = odd.choice([k for k in (1, 3, heads) if heads % k == 0])
            if data["source"] == "text":
                data["seq_len"] = odd.choice([17, 33, 47, 63, 97])
            train["batch_size"] = odd.choice([1, 3, 5, 7])
        # (SGD in pure bf16 is refused: it rounds the small updates away.)
        optim = {"optimizer": rng.choice(["adamw", "sgd"]) if train["precision"] != "bf16-pure" else "adamw"}
        if optim["optimizer"] == "sgd":
            optim["momentum"] = rng.choice([0, 0.9])
        lora = None
        if rng.random() < 0.4:
            targets = [["attn"], ["mlp"], ["attn", "mlp"]]
            if typ == "llama":  # a Llama config may also name single projections
                targets += [["q_proj", "v_proj"], ["down_proj"], ["q_proj"], ["k_proj"], ["v_proj"], ["o_proj"],
                            ["gate_proj", "up_proj"]]
            lora = {"rank": rng.choice([2, 4, 8]), "targets": rng.choice(targets)}
        out.append((f"random {seed}.{i + 1}: {json.dumps([model, data, train, optim, lora])}",
                    cfg(model, data, train, optim, lora)))
    return out

def lora_sweep():
    out = []
    for typ in ("llama", "gpt"):
        targets = ([["attn"], ["mlp"], ["down_proj"], ["gate_proj", "up_proj"], ["o_proj"], ["v_proj"], ["q_proj"]]
                   if typ == "llama" else [["attn"], ["mlp"], ["attn", "mlp"]])
        for t in targets:
            for precision in ("fp32", "bf16", "bf16-pure"):
                for dropout in ((0, 0.1) if typ == "gpt" else (0,)):
                    for layers in (1, 2):
                        model = {"type": typ, "n_layer": layers, "d_model": 64, "n_head": 2}
                        if dropout:
                            model["dropout"] = dropout
                        if typ == "llama":
                            model["n_kv_head"] = 1
                        name = f"lora sweep {typ} L{layers} {precision} {','.join(t)}" + (" dropout" if dropout else "")
                        out.append((name, cfg(model, {"source": "addition", "digits": 3}, {"precision": precision, "batch_size": 32},
                                              lora={"rank": 4, "targets": t})))
    return out

rows = []
declined = []
with tempfile.TemporaryDirectory() as d:
    if LORA_SWEEP:
        configurations = lora_sweep()
    elif RANDOM:
        configurations = drawn(RANDOM, SEED, d)
    else:
        tuned = with_init_from(d)
        configurations = GRID + tuned + bf16([(n, c) for n, c in GRID if n in BF16] + tuned)
    for name, c in configurations:
        path = os.path.join(d, "c.json")
        with open(path, "w") as f:
            json.dump(c, f)
        try:
            est = run(["estimate", "--config", path, "--json"])
        except RuntimeError as e:
            # The plan declines a step whose sizes are not polynomial in batch and sequence.
            declined.append(name)
            print(f"{name:46s} declined: {str(e).splitlines()[-1]}", flush=True)
            continue
        mea = run(["measure", "--config", path, "--json", "--steps", "2"])
        e, m = est["peak_bytes"], mea["peak_bytes"]
        steady = mea["steps"][-1]["phases"]["forward"]["start_bytes"]
        # (From LibTorch 2.0 zero_grad frees the gradients: the next step starts without them.)
        grads = est["trainable_parameters"] * (2 if c["train"]["precision"] == "bf16-pure" else 4)
        end = est["end_of_step_bytes"]
        if min(abs(end - steady), abs(end - grads - steady)) > 0.01 * steady:
            print(f"  (self-check: the estimate ends the step at {est['end_of_step_bytes']} bytes, measured {steady})")
        mult = multiplier(mea["parameters"], c["optim"]["optimizer"])
        rows.append((name, m, e, (e - m) / m, (mult - m) / m, est["peak_phase"],
                     max(mea["phase_peak_bytes"], key=mea["phase_peak_bytes"].get)))
        print(f"{name:46s} measured {m:>11d}  estimate {e:>11d}  error {100*(e-m)/m:+7.2f}%  "
              f"multiplier {100*(mult-m)/m:+7.1f}%  peak {est['peak_phase']}/{rows[-1][6]}", flush=True)
if declined:
    print(f"{len(declined)} configurations declined by the derived plan")
errs = [abs(r[3]) for r in rows]
mults = [abs(r[4]) for r in rows]
print(f"{len(rows)} configurations: estimate |error| median {100*statistics.median(errs):.2f}%, "
      f"max {100*max(errs):.2f}%; multiplier |error| median {100*statistics.median(mults):.1f}%, max {100*max(mults):.1f}%")
