#!/usr/bin/python3
"""An independent reference for Hugging Face Llama-family model folders.

Written from the published `transformers` modeling code (LlamaForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM and their rotary embedding, including
`_compute_llama3_parameters`; GPT2LMHeadModel with Conv1D and NewGELU;
GPTNeoXForCausalLM with partial rotary and parallel residual), in plain PyTorch, with its own safetensors
reader and writer (the format is an 8-byte little-endian header length, a JSON
header and the raw bytes). It shares no code with Trainbench.

  hf_reference.py generate DIR --family llama|mistral|qwen2|gpt2|gpt_neox [--seed S] [--shards N]
        [--dtype float32|bfloat16|float16] [--tied] [--untied] [--head-dim D]
        [--attention-bias] [--mlp-bias] [--sliding-window W] [--rope-llama3]
        [--vocab V --hidden H --layers L --heads A --kv-heads K --intermediate I]
     writes a tiny random checkpoint in the Hub's layout (config.json,
     generation_config.json, model.safetensors or shards with
     model.safetensors.index.json; a tied head is absent from the files).
  hf_reference.py run DIR --ids 1,2,3 [--max-tokens N] [--adapter PEFT_DIR]
     prints {"logits": [[...]], "completion_ids": [...]}: fp32 logits of every
     prompt position and a greedy decode that stops at eos_token_id.
  hf_reference.py batch
     reads command lines as JSON lists (["generate", DIR, ...], ["run", DIR, ...])
     from standard input, one a line, and prints one JSON result a line.
"""
import argparse
import json
import math
import os
import random
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
NAMES = {v: k for k, v in DTYPES.items()}


# ---------------------------------------------------------------- safetensors
def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype in (torch.bfloat16, torch.float16) else t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = bytearray(data[8 + n + a:8 + n + b])
        dtype = DTYPES[e["dtype"]]
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(e["shape"]).clone()
    return out


def read_folder(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(folder, name)))
    return weights


# ---------------------------------------------------------------- generation
def generate(args):
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    family = args.family
    if family in ("gpt2", "gpt_neox"):
        return generate_gpt(args, rng)
    if family == "gemma3_text":
        return generate_gemma3(args, rng)
    heads = args.heads or rng.choice([2, 4])
    kv = args.kv_heads or rng.choice([k for k in (1, 2, heads) if heads % k == 0])
    head_dim = args.head_dim or rng.choice([8, 12, 16])
    hidden = args.hidden or (heads * head_dim if not args.head_dim else rng.choice([32, 48]))
    cfg = {
        "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                           "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM"}[family]],
        "model_type": family,
        "vocab_size": args.vocab or rng.randint(40, 300),
        "hidden_size": hidden,
        "intermediate_size": args.intermediate or rng.choice([40, 64, 88]),
        "num_hidden_layers": args.layers or rng.randint(1, 3),
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "max_position_embeddings": 128,
        "rms_norm_eps": rng.choice([1e-5, 1e-6]),
        "rope_theta": rng.choice([10000.0, 500000.0, 1000000.0]),
        "hidden_act": "silu",
        "tie_word_embeddings": bool(args.tied) or (not args.untied and rng.random() < 0.5),
        "torch_dtype": args.dtype,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if args.head_dim:
        cfg["head_dim"] = args.head_dim
    if family == "llama":
        cfg["attention_bias"] = bool(args.attention_bias)
        cfg["mlp_bias"] = bool(args.mlp_bias)
    if family in ("mistral", "phi3"):
        cfg["sliding_window"] = args.sliding_window if args.sliding_window else None
    if family in ("qwen2", "qwen3"):
        cfg["use_sliding_window"] = False
    if family == "qwen3":
        cfg["attention_bias"] = bool(args.attention_bias)
        cfg["head_dim"] = head_dim  # Qwen3Config's default is 128, not hidden / heads: always written
    if args.rope_llama3:
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 16}
    write_folder(args, cfg, random_weights(cfg))


def generate_gemma3(args, rng):
    """A Gemma3TextConfig: head_dim of its own, query_pre_attn_scalar, sliding
    layers among full ones (as layer_types, or the older sliding_window_pattern),
    each kind with its RoPE base, tied head by default."""
    heads = args.heads or rng.choice([2, 4])
    kv = args.kv_heads or rng.choice([k for k in (1, 2, heads) if heads % k == 0])
    head_dim = args.head_dim or rng.choice([8, 16])
    layers = args.layers or rng.randint(2, 4)
    pattern = rng.choice([2, 3])
    cfg = {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "vocab_size": args.vocab or rng.randint(40, 300),
        "hidden_size": args.hidden or rng.choice([32, 48]),
        "intermediate_size": args.intermediate or rng.choice([40, 64]),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "max_position_embeddings": 128,
        "rms_norm_eps": 1e-6,
        "rope_theta": rng.choice([10000.0, 1000000.0]),
        "rope_local_base_freq": 10000.0,
        "query_pre_attn_scalar": rng.choice([head_dim, 24]),
        "sliding_window": args.sliding_window or rng.choice([2, 3, 5]),
        "hidden_activation": "gelu_pytorch_tanh",
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "rope_scaling": None,
        "tie_word_embeddings": not args.untied,
        "torch_dtype": args.dtype,
        "bos_token_id": 2,
        "eos_token_id": 1,
    }
    if rng.random() < 0.5:
        cfg["layer_types"] = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    else:
        cfg["sliding_window_pattern"] = pattern
    h, v, ff, hd = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"], head_dim
    w = {"model.embed_tokens.weight": torch.randn(v, h) * 0.5}

    def linear(name, fan_in, fan_out):
        w[name + ".weight"] = torch.randn(fan_out, fan_in) / math.sqrt(fan_in)

    for i in range(layers):
        p = "model.layers.%d." % i
        linear(p + "self_attn.q_proj", h, heads * hd)
        linear(p + "self_attn.k_proj", h, kv * hd)
        linear(p + "self_attn.v_proj", h, kv * hd)
        linear(p + "self_attn.o_proj", heads * hd, h)
        linear(p + "mlp.gate_proj", h, ff)
        linear(p + "mlp.up_proj", h, ff)
        linear(p + "mlp.down_proj", ff, h)
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            w[p + norm + ".weight"] = 0.2 * torch.randn(h)  # Gemma's norms scale by 1 + w
        w[p + "self_attn.q_norm.weight"] = 0.2 * torch.randn(hd)
        w[p + "self_attn.k_norm.weight"] = 0.2 * torch.randn(hd)
    w["model.norm.weight"] = 0.2 * torch.randn(h)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = torch.randn(v, h) / math.sqrt(h)
    write_folder(args, cfg, w)


def write_folder(args, cfg, weights):
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    weights = {k: v.to(dtype) for k, v in weights.items()}
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(args.dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    names = list(weights)
    if args.shards <= 1:
        write_safetensors(os.path.join(args.dir, "model.safetensors"), weights)
    else:
        weight_map = {}
        per = math.ceil(len(names) / args.shards)
        for i in range(args.shards):
            shard = "model-%05d-of-%05d.safetensors" % (i + 1, args.shards)
            part = {n: weights[n] for n in names[i * per:(i + 1) * per]}
            write_safetensors(os.path.join(args.dir, shard), part)
            weight_map.update({n: shard for n in part})
        total = sum(t.numel() * t.element_size() for t in weights.values())
        with open(os.path.join(args.dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    print(json.dumps(cfg))


def generate_gpt(args, rng):
    heads = args.heads or rng.choice([2, 4])
    head_dim = rng.choice([8, 12, 16])
    hidden = args.hidden or heads * head_dim
    head_dim = hidden // heads  # (a hidden size given sets it: the rotary fraction below is of this one)
    vocab = args.vocab or rng.randint(40, 300)
    layers = args.layers or rng.randint(1, 3)
    inner = args.intermediate or rng.choice([40, 64, 96])
    tied = bool(args.tied) or (not args.untied and rng.random() < 0.5)
    if args.family == "gpt2":
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab, "n_embd": hidden,
               "n_layer": layers, "n_head": heads, "n_inner": inner, "n_positions": 64,
               "layer_norm_epsilon": rng.choice([1e-5, 1e-6]),
               "activation_function": rng.choice(["gelu_new", "gelu_new", "gelu"]),
               "tie_word_embeddings": tied, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": args.dtype}
    else:
        cfg = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": vocab,
               "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
               "intermediate_size": inner, "max_position_embeddings": 128,
               "rotary_pct": args.rotary_pct or rng.choice([0.25, 0.5, 1.0]),
               "rotary_emb_base": rng.choice([10000, 500000]), "layer_norm_eps": rng.choice([1e-5, 1e-6]),
               "use_parallel_residual": not args.sequential_residual, "hidden_act": "gelu",
               "tie_word_embeddings": tied, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": args.dtype}
        if int(head_dim * cfg["rotary_pct"]) % 2:
            cfg["rotary_pct"] = 1.0
    weights = random_gpt_weights(cfg)
    if args.legacy_names and args.family == "gpt2":
        # As the original openai-community/gpt2 files: no "transformer." prefix, and the causal-mask buffers.
        weights = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in weights.items()}
        for i in range(cfg["n_layer"]):
            weights["h.%d.attn.bias" % i] = torch.tril(torch.ones(1, 1, 64, 64))
    write_folder(args, cfg, weights)


def random_gpt_weights(cfg):
    v = cfg["vocab_size"]
    gpt2 = cfg["model_type"] == "gpt2"
    h = cfg["n_embd"] if gpt2 else cfg["hidden_size"]
    ff = cfg["n_inner"] if gpt2 else cfg["intermediate_size"]
    w = {}

    def norm(name):
        w[name + ".weight"] = 1.0 + 0.2 * torch.randn(h)
        w[name + ".bias"] = 0.1 * torch.randn(h)

    def dense(name, fan_in, fan_out, conv1d):
        weight = torch.randn(fan_out, fan_in) / math.sqrt(fan_in)
        w[name + ".weight"] = weight.T.contiguous() if conv1d else weight  # Conv1D stores [in, out]
        w[name + ".bias"] = 0.1 * torch.randn(fan_out)

    if gpt2:
        w["transformer.wte.weight"] = torch.randn(v, h) * 0.5
        w["transformer.wpe.weight"] = torch.randn(cfg["n_positions"], h) * 0.5
        for i in range(cfg["n_layer"]):
            p = "transformer.h.%d." % i
            norm(p + "ln_1")
            dense(p + "attn.c_attn", h, 3 * h, True)
            dense(p + "attn.c_proj", h, h, True)
            norm(p + "ln_2")
            dense(p + "mlp.c_fc", h, ff, True)
            dense(p + "mlp.c_proj", ff, h, True)
        norm("transformer.ln_f")
        if not cfg["tie_word_embeddings"]:
            w["lm_head.weight"] = torch.randn(v, h) / math.sqrt(h)
    else:
        w["gpt_neox.embed_in.weight"] = torch.randn(v, h) * 0.5
        for i in range(cfg["num_hidden_layers"]):
            p = "gpt_neox.layers.%d." % i
            norm(p + "input_layernorm")
            norm(p + "post_attention_layernorm")
            dense(p + "attention.query_key_value", h, 3 * h, False)
            dense(p + "attention.dense", h, h, False)
            dense(p + "mlp.dense_h_to_4h", h, ff, False)
            dense(p + "mlp.dense_4h_to_h", ff, h, False)
        norm("gpt_neox.final_layer_norm")
        if not cfg["tie_word_embeddings"]:
            w["embed_out.weight"] = torch.randn(v, h) / math.sqrt(h)
    return w


def random_weights(cfg):
    h, v, ff = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // heads
    qkv_bias = cfg["model_type"] == "qwen2" or cfg.get("attention_bias", False)
    o_bias = cfg["model_type"] != "qwen2" and cfg.get("attention_bias", False)
    qk_norm = cfg["model_type"] == "qwen3"
    fused = cfg["model_type"] == "phi3"
    mlp_bias = cfg.get("mlp_bias", False)
    w = {"model.embed_tokens.weight": torch.randn(v, h) * 0.5}

    def linear(name, fan_in, fan_out, bias):
        w[name + ".weight"] = torch.randn(fan_out, fan_in) / math.sqrt(fan_in)
        if bias:
            w[name + ".bias"] = torch.randn(fan_out) * 0.1

    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        if fused:  # Phi-3: q, k, v in one product; gate, then up in another
            linear(p + "self_attn.qkv_proj", h, (heads + 2 * kv) * hd, False)
            linear(p + "mlp.gate_up_proj", h, 2 * ff, False)
        else:
            linear(p + "self_attn.q_proj", h, heads * hd, qkv_bias)
            linear(p + "self_attn.k_proj", h, kv * hd, qkv_bias)
            linear(p + "self_attn.v_proj", h, kv * hd, qkv_bias)
            linear(p + "mlp.gate_proj", h, ff, mlp_bias)
            linear(p + "mlp.up_proj", h, ff, mlp_bias)
        linear(p + "self_attn.o_proj", heads * hd, h, o_bias)
        linear(p + "mlp.down_proj", ff, h, mlp_bias)
        if qk_norm:
            w[p + "self_attn.q_norm.weight"] = 1.0 + 0.2 * torch.randn(hd)
            w[p + "self_attn.k_norm.weight"] = 1.0 + 0.2 * torch.randn(hd)
        w[p + "input_layernorm.weight"] = 1.0 + 0.2 * torch.randn(h)
        w[p + "post_attention_layernorm.weight"] = 1.0 + 0.2 * torch.randn(h)
    w["model.norm.weight"] = 1.0 + 0.2 * torch.randn(h)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = torch.randn(v, h) / math.sqrt(h)
    return w


# ---------------------------------------------------------------- the model
def rope_inv_freq(cfg, dim):
    # transformers: _compute_default_rope_parameters, then _compute_llama3_parameters
    base = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = cfg.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor = scaling["factor"]
        low_freq_factor = scaling["low_freq_factor"]
        high_freq_factor = scaling["high_freq_factor"]
        old_context_len = scaling["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        inv_freq = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    return inv_freq


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def rms_norm(x, weight, eps):
    input_dtype = x.dtype
    hs = x.to(torch.float32)
    variance = hs.pow(2).mean(-1, keepdim=True)
    hs = hs * torch.rsqrt(variance + eps)
    return weight * hs.to(input_dtype)


def linear(w, name, x):
    return torch.nn.functional.linear(x, w[name + ".weight"], w.get(name + ".bias"))


def gemma_rms_norm(x, weight, eps):
    # Gemma3RMSNorm: in float32, times (1 + w), then back to the input's dtype.
    output = x.float()
    output = output * torch.rsqrt(output.pow(2).mean(-1, keepdim=True) + eps)
    output = output * (1.0 + weight.float())
    return output.type_as(x)


def forward_gemma3(cfg, w, ids):
    """Gemma3ForCausalLM (text), eager attention, from transformers' modeling_gemma3.py."""
    h = cfg["hidden_size"]
    heads, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg.get("rms_norm_eps", 1e-6)
    layers = cfg["num_hidden_layers"]
    if "layer_types" in cfg:
        sliding = [t == "sliding_attention" for t in cfg["layer_types"]]
    else:
        pattern = cfg.get("sliding_window_pattern", 6)
        sliding = [bool((i + 1) % pattern) for i in range(layers)]
    T = len(ids)
    embed = w["model.embed_tokens.weight"]
    x = embed[torch.tensor([ids])] * torch.tensor(h ** 0.5).to(embed.dtype)  # Gemma3TextScaledWordEmbedding
    position_ids = torch.arange(T)[None, :]

    def rope(base):
        inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        freqs = (inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]

    global_rope, local_rope = rope(cfg.get("rope_theta", 1000000.0)), rope(cfg.get("rope_local_base_freq", 10000.0))
    q_idx, kv_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    causal = kv_idx <= q_idx
    windowed = causal & (kv_idx > q_idx - cfg["sliding_window"])
    scaling = cfg["query_pre_attn_scalar"] ** -0.5
    for i in range(layers):
        p = "model.layers.%d." % i
        cos, sin = local_rope if sliding[i] else global_rope
        allowed = windowed if sliding[i] else causal
        mask = torch.zeros(T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
        residual = x
        hs = gemma_rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(w, p + "self_attn.q_proj", hs).view(1, T, -1, hd)
        k = linear(w, p + "self_attn.k_proj", hs).view(1, T, -1, hd)
        v = linear(w, p + "self_attn.v_proj", hs).view(1, T, -1, hd).transpose(1, 2)
        q = gemma_rms_norm(q, w[p + "self_attn.q_norm.weight"], eps).transpose(1, 2)
        k = gemma_rms_norm(k, w[p + "self_attn.k_norm.weight"], eps).transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k = repeat_kv(k, heads // kv)
        v = repeat_kv(v, heads // kv)
        attn = torch.matmul(q, k.transpose(2, 3)) * scaling + mask
        attn = torch.nn.functional.softmax(attn, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(1, T, -1)
        hs = gemma_rms_norm(linear(w, p + "self_attn.o_proj", out), w[p + "post_attention_layernorm.weight"], eps)
        x = residual + hs
        residual = x
        hs = gemma_rms_norm(x, w[p + "pre_feedforward_layernorm.weight"], eps)
        hs = linear(w, p + "mlp.down_proj", torch.nn.functional.gelu(linear(w, p + "mlp.gate_proj", hs), approximate="tanh")
                    * linear(w, p + "mlp.up_proj", hs))
        x = residual + gemma_rms_norm(hs, w[p + "post_feedforward_layernorm.weight"], eps)
    x = gemma_rms_norm(x, w["model.norm.weight"], eps)
    head = embed if cfg.get("tie_word_embeddings", True) else w["lm_head.weight"]
    return torch.nn.functional.linear(x, head)[0]


def forward(cfg, w, ids):
    h = cfg["hidden_size"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or h // heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    T = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor([ids])]
    position_ids = torch.arange(T)[None, :]
    inv_freq = rope_inv_freq(cfg, hd)
    freqs = (inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    q_idx = torch.arange(T)[:, None]
    kv_idx = torch.arange(T)[None, :]
    allowed = kv_idx <= q_idx
    window = cfg.get("sliding_window") if cfg["model_type"] in ("mistral", "phi3") else None
    if window:
        allowed = allowed & (kv_idx > q_idx - window)
    mask = torch.zeros(T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        residual = x
        hs = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        if cfg["model_type"] == "phi3":
            # Phi3Attention: qkv_proj, split as query_pos = heads * head_dim, then the key/value heads' widths.
            qkv = linear(w, p + "self_attn.qkv_proj", hs)
            query_pos = heads * hd
            q = qkv[..., :query_pos].view(1, T, -1, hd)
            k = qkv[..., query_pos:query_pos + kv * hd].view(1, T, -1, hd)
            v = qkv[..., query_pos + kv * hd:].view(1, T, -1, hd).transpose(1, 2)
        else:
            q = linear(w, p + "self_attn.q_proj", hs).view(1, T, -1, hd)
            k = linear(w, p + "self_attn.k_proj", hs).view(1, T, -1, hd)
            v = linear(w, p + "self_attn.v_proj", hs).view(1, T, -1, hd).transpose(1, 2)
        if cfg["model_type"] == "qwen3":
            # Qwen3Attention: q_norm and k_norm (RMSNorm over head_dim) on the projected heads, before RoPE.
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k = repeat_kv(k, heads // kv)
        v = repeat_kv(v, heads // kv)
        attn = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5 + mask
        attn = torch.nn.functional.softmax(attn, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(1, T, -1)
        x = residual + linear(w, p + "self_attn.o_proj", out)
        residual = x
        hs = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        if cfg["model_type"] == "phi3":
            # Phi3MLP: gate, up_states = gate_up_proj(x).chunk(2, dim=-1); down_proj(up_states * act(gate))
            gate, up_states = linear(w, p + "mlp.gate_up_proj", hs).chunk(2, dim=-1)
            mlp = linear(w, p + "mlp.down_proj", up_states * torch.nn.functional.silu(gate))
        else:
            mlp = linear(w, p + "mlp.down_proj",
                         torch.nn.functional.silu(linear(w, p + "mlp.gate_proj", hs)) * linear(w, p + "mlp.up_proj", hs))
        x = residual + mlp
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return torch.nn.functional.linear(x, head)[0]


def apply_peft_adapter(w, folder):
    # PEFT's LoRA (peft.tuners.lora.Linear): W + lora_B @ lora_A * (lora_alpha / r),
    # tensors named base_model.model.<module>.lora_{A,B}.weight.
    with open(os.path.join(folder, "adapter_config.json")) as f:
        cfg = json.load(f)
    scale = cfg["lora_alpha"] / cfg["r"]
    adapters = read_safetensors(os.path.join(folder, "adapter_model.safetensors"))
    prefix = "base_model.model."
    for name, a in adapters.items():
        if not name.endswith(".lora_A.weight"):
            continue
        module = name[len(prefix):-len(".lora_A.weight")]
        b = adapters[prefix + module + ".lora_B.weight"]
        delta = (b.float() @ a.float()) * scale
        if cfg.get("fan_in_fan_out", False):  # Conv1D weights [in, out]
            delta = delta.T
        w[module + ".weight"] = w[module + ".weight"] + delta


def gelu_new(x):
    # transformers' NewGELUActivation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def layer_norm(w, name, x, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], eps)


def conv1d(w, name, x):
    # transformers' Conv1D: torch.addmm(bias, x.view(-1, x.size(-1)), weight), weight [in, out]
    out = torch.addmm(w[name + ".bias"], x.reshape(-1, x.size(-1)), w[name + ".weight"])
    return out.view(x.shape[:-1] + (w[name + ".weight"].shape[1],))


def forward_gpt2(cfg, w, ids):
    T, h, heads = len(ids), cfg["n_embd"], cfg["n_head"]
    hd = h // heads
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    act = gelu_new if cfg.get("activation_function", "gelu_new") in ("gelu_new", "gelu_pytorch_tanh") else \
        torch.nn.functional.gelu
    x = w["transformer.wte.weight"][torch.tensor([ids])] + w["transformer.wpe.weight"][torch.arange(T)][None]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = "transformer.h.%d." % i
        residual = x
        hs = layer_norm(w, p + "ln_1", x, eps)
        q, k, v = conv1d(w, p + "attn.c_attn", hs).split(h, dim=2)
        q, k, v = (t.view(1, T, heads, hd).permute(0, 2, 1, 3) for t in (q, k, v))
        att = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5)
        att = torch.where(causal, att, torch.full([], torch.finfo(att.dtype).min))
        att = torch.nn.functional.softmax(att, dim=-1)
        out = torch.matmul(att, v).permute(0, 2, 1, 3).contiguous().view(1, T, h)
        x = conv1d(w, p + "attn.c_proj", out) + residual
        residual = x
        hs = layer_norm(w, p + "ln_2", x, eps)
        x = residual + conv1d(w, p + "mlp.c_proj", act(conv1d(w, p + "mlp.c_fc", hs)))
    x = layer_norm(w, "transformer.ln_f", x, eps)
    head = w["transformer.wte.weight"] if cfg.get("tie_word_embeddings", True) else w["lm_head.weight"]
    return torch.nn.functional.linear(x, head)[0]


def forward_neox(cfg, w, ids):
    T, h, heads = len(ids), cfg["hidden_size"], cfg["num_attention_heads"]
    hd = h // heads
    eps = cfg.get("layer_norm_eps", 1e-5)
    rot = int(hd * cfg.get("rotary_pct", 0.25))
    base = cfg.get("rope_theta", cfg.get("rotary_emb_base", 10000))
    inv_freq = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.int64).float() / rot))
    freqs = (inv_freq[None, :, None].float() @ torch.arange(T)[None, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    mask = torch.zeros(T, T).masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), torch.finfo(torch.float32).min)
    act = gelu_new if cfg.get("hidden_act", "gelu") in ("gelu_new", "gelu_fast", "gelu_pytorch_tanh") else \
        torch.nn.functional.gelu
    x = w["gpt_neox.embed_in.weight"][torch.tensor([ids])]
    for i in range(cfg["num_hidden_layers"]):
        p = "gpt_neox.layers.%d." % i
        hs = layer_norm(w, p + "input_layernorm", x, eps)
        qkv = linear(w, p + "attention.query_key_value", hs).view(1, T, -1, 3 * hd).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        q_rot, q_pass = q[..., :rot], q[..., rot:]
        k_rot, k_pass = k[..., :rot], k[..., rot:]
        q = torch.cat(((q_rot * cos) + (rotate_half(q_rot) * sin), q_pass), dim=-1)
        k = torch.cat(((k_rot * cos) + (rotate_half(k_rot) * sin), k_pass), dim=-1)
        att = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5 + mask
        att = torch.nn.functional.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(att, v).transpose(1, 2).reshape(1, T, h)
        attn_out = linear(w, p + "attention.dense", out)
        if cfg.get("use_parallel_residual", True):
            mlp_in = layer_norm(w, p + "post_attention_layernorm", x, eps)
            x = linear(w, p + "mlp.dense_4h_to_h", act(linear(w, p + "mlp.dense_h_to_4h", mlp_in))) + attn_out + x
        else:
            attn_out = attn_out + x
            mlp_in = layer_norm(w, p + "post_attention_layernorm", attn_out, eps)
            x = linear(w, p + "mlp.dense_4h_to_h", act(linear(w, p + "mlp.dense_h_to_4h", mlp_in))) + attn_out
    x = layer_norm(w, "gpt_neox.final_layer_norm", x, eps)
    head = w["gpt_neox.embed_in.weight"] if cfg.get("tie_word_embeddings", False) else w["embed_out.weight"]
    return torch.nn.functional.linear(x, head)[0]


def process_scores(scores, input_ids, args):
    """The logits processors of transformers' generate, as its
    generation/logits_process.py writes them, in the order generate applies
    them: RepetitionPenaltyLogitsProcessor (always), then with sampling
    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper (min_tokens_to_keep 1).
    scores: [1, vocab]; input_ids: [1, n]."""
    if args.repetition_penalty != 1.0:
        score = torch.gather(scores, 1, input_ids)
        score = torch.where(score < 0, score * args.repetition_penalty, score / args.repetition_penalty)
        scores = scores.scatter(1, input_ids, score)
    if args.temperature == 0:
        return scores
    scores = scores / args.temperature
    if args.top_k > 0:
        top_k = min(max(args.top_k, 1), scores.size(-1))
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        scores = scores.masked_fill(indices_to_remove, -float("inf"))
    if args.top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - args.top_p)
        sorted_indices_to_remove[..., -1:] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        scores = scores.masked_fill(indices_to_remove, -float("inf"))
    return scores


def run(args):
    with open(os.path.join(args.dir, "config.json")) as f:
        cfg = json.load(f)
    eos = cfg.get("eos_token_id")
    gen_path = os.path.join(args.dir, "generation_config.json")
    if os.path.exists(gen_path):
        with open(gen_path) as f:
            eos = json.load(f).get("eos_token_id", eos)
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    w = {k: v.float() for k, v in read_folder(args.dir).items()}
    if cfg["model_type"] == "gpt2":  # GPT2LMHeadModel accepts its base model's names without the prefix
        w = {k if k.startswith(("transformer.", "lm_head.")) else "transformer." + k: v for k, v in w.items()}
    if args.adapter:
        apply_peft_adapter(w, args.adapter)
    ids = [int(t) for t in args.ids.split(",")]
    model = {"gpt2": forward_gpt2, "gpt_neox": forward_neox, "gemma3_text": forward_gemma3}.get(cfg["model_type"], forward)
    with torch.no_grad():
        logits = model(cfg, w, ids)
        out, completion = list(ids), []
        # The first new token's probabilities after the processors (sampling, or greedy's one-hot).
        first = process_scores(logits[-1:].clone(), torch.tensor([ids]), args)
        probabilities = first.softmax(-1)[0] if args.temperature > 0 else \
            torch.nn.functional.one_hot(first.argmax(-1), first.size(-1))[0].float()
        for _ in range(args.max_tokens):
            # Greedy (do_sample=False): the processors, then the most likely token.
            scores = process_scores(model(cfg, w, out)[-1:].clone(), torch.tensor([out]), argparse.Namespace(
                repetition_penalty=args.repetition_penalty, temperature=0))
            nxt = int(scores[0].argmax())
            completion.append(nxt)
            out.append(nxt)
            if nxt in eos:
                break
    return {"logits": logits.tolist(), "completion_ids": completion, "probabilities": probabilities.tolist()}


def batch(parser):
    # One command line a line of standard input (a JSON list: ["generate", DIR, ...]
    # or ["run", DIR, ...]), one JSON result a line out: torch is imported once.
    import contextlib
    import io
    for line in sys.stdin:
        if not line.strip():
            continue
        args = parser.parse_args(json.loads(line))
        if args.cmd == "generate":
            with contextlib.redirect_stdout(io.StringIO()):
                generate(args)
            print(json.dumps({"generated": args.dir}), flush=True)
        elif args.cmd == "run":
            print(json.dumps(run(args)), flush=True)
        else:
            raise SystemExit("batch: only generate and run lines")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("dir")
    g.add_argument("--family", required=True, choices=["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3_text", "gpt2", "gpt_neox"])
    g.add_argument("--rotary-pct", type=float, default=0.0)
    g.add_argument("--sequential-residual", action="store_true")
    g.add_argument("--legacy-names", action="store_true", help="gpt2: the original files' names and mask buffers")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--shards", type=int, default=1)
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    g.add_argument("--tied", action="store_true")
    g.add_argument("--untied", action="store_true")
    g.add_argument("--head-dim", type=int, default=0)
    g.add_argument("--attention-bias", action="store_true")
    g.add_argument("--mlp-bias", action="store_true")
    g.add_argument("--sliding-window", type=int, default=0)
    g.add_argument("--rope-llama3", action="store_true")
    for k in ("vocab", "hidden", "layers", "heads", "kv-heads", "intermediate"):
        g.add_argument("--" + k, type=int, default=0)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--ids", required=True)
    r.add_argument("--max-tokens", type=int, default=0)
    r.add_argument("--adapter", default="", help="a PEFT LoRA adapter folder applied on top")
    r.add_argument("--repetition-penalty", type=float, default=1.0, help="applied while decoding greedily, and to the probabilities")
    r.add_argument("--temperature", type=float, default=0.0, help="for the first new token's probabilities (0: greedy)")
    r.add_argument("--top-k", type=int, default=0)
    r.add_argument("--top-p", type=float, default=1.0)
    sub.add_parser("batch", help="command lines as JSON lists on standard input, one a line")
    args = ap.parse_args()
    if args.cmd == "generate":
        generate(args)
    elif args.cmd == "run":
        print(json.dumps(run(args)))
    else:
        batch(ap)


if __name__ == "__main__":
    sys.exit(main())
