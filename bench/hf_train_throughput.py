#!/usr/bin/env python3
"""Plain-PyTorch reference for the Hugging Face folder workload of
bench/train_throughput.sh.

A Llama-family decoder written the way transformers' LlamaForCausalLM computes
it in eager mode (RMSNorm in fp32 then cast, rotate-half RoPE, grouped-query
attention with repeat_kv, softmax in fp32, SwiGLU), as nn.Modules, with the
folder's weights (read by tests/reference/hf_reference.py's own safetensors
reader). It trains like Trainbench's run of the same config: random windows
of the token file's first 95%, AdamW (betas 0.9/0.99, weight decay 0.01 on
matrices), clipping at 1.0, fp32. Prints tokens/s over the steps after the
first 10, as trainbench-cli measures them.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import hf_reference  # noqa: E402


class RmsNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        hs = x.to(torch.float32)
        hs = hs * torch.rsqrt(hs.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * hs.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.kv = cfg.get("num_key_value_heads") or self.heads
        self.hd = cfg.get("head_dim") or h // self.heads
        bias = cfg.get("attention_bias", False)
        self.q_proj = nn.Linear(h, self.heads * self.hd, bias=bias)
        self.k_proj = nn.Linear(h, self.kv * self.hd, bias=bias)
        self.v_proj = nn.Linear(h, self.kv * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.hd, h, bias=bias)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, -1, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, -1, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, -1, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.kv != self.heads:
            k = k.repeat_interleave(self.heads // self.kv, dim=1)
            v = v.repeat_interleave(self.heads // self.kv, dim=1)
        att = torch.matmul(q, k.transpose(2, 3)) * self.hd ** -0.5 + mask
        att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj(torch.matmul(att, v).transpose(1, 2).reshape(B, T, -1))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, ff, eps = cfg["hidden_size"], cfg["intermediate_size"], cfg.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RmsNorm(h, eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RmsNorm(h, eps)
        bias = cfg.get("mlp_bias", False)
        self.gate_proj = nn.Linear(h, ff, bias=bias)
        self.up_proj = nn.Linear(h, ff, bias=bias)
        self.down_proj = nn.Linear(ff, h, bias=bias)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        hs = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(hs)) * self.up_proj(hs))


class Llama(nn.Module):
    def __init__(self, cfg, T):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RmsNorm(cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6))
        self.tied = cfg.get("tie_word_embeddings", False)
        if not self.tied:
            self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        freqs = torch.outer(torch.arange(T).float(), hf_reference.rope_inv_freq(cfg, hd))
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.register_buffer("mask", torch.zeros(T, T).masked_fill(
            torch.ones(T, T, dtype=torch.bool).triu(1), torch.finfo(torch.float32).min))

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed_tokens(tokens)
        cos, sin, mask = self.cos[:T], self.sin[:T], self.mask[:T, :T]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        x = self.norm(x)
        return F.linear(x, self.embed_tokens.weight) if self.tied else self.lm_head(x)

    def load_folder(self, folder):
        # The folder's names, with the MLP one level up in this module.
        weights = {k.replace("model.", "", 1).replace("mlp.", ""): v
                   for k, v in hf_reference.read_folder(folder).items() if not k.endswith("inv_freq")}
        missing, unexpected = self.load_state_dict({k: v.float() for k, v in weights.items()}, strict=False)
        missing = [m for m in missing if m not in ("cos", "sin", "mask")]
        if missing or unexpected:
            raise SystemExit("cannot load %s: missing %s, unexpected %s" % (folder, missing, unexpected))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="a Llama-family model folder")
    ap.add_argument("--tokens", required=True, help="uint16 token ids")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-4)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    T, B = a.seq, a.batch
    data = torch.frombuffer(bytearray(open(a.tokens, "rb").read()), dtype=torch.int16).to(torch.long) & 0xFFFF
    train_end = len(data) - int(len(data) * 0.05)
    model = Llama(cfg, T)
    model.load_folder(a.model)
    matrices = [p for p in model.parameters() if p.dim() >= 2 and p is not model.embed_tokens.weight]
    others = [p for p in model.parameters() if p.dim() < 2 or p is model.embed_tokens.weight]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.01}, {"params": others, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99))
    offsets = torch.arange(T + 1)
    start = None
    V = cfg["vocab_size"]
    for step in range(1, a.steps + 1):
        opt.zero_grad()
        idx = torch.randint(0, train_end - T - 1, (B,)).unsqueeze(1) + offsets
        batch = data[idx]
        x, y = batch[:, :T], batch[:, 1:]
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = loss.item()
        if step == 10:
            start = time.perf_counter()
    seconds = time.perf_counter() - start
    steps = a.steps - 10
    print(f"throughput: {B * T * steps / seconds:.0f} tokens/s over steps 11-{a.steps} "
          f"({1000 * seconds / steps:.2f} ms a step), final loss {loss_value:.4f}")


if __name__ == "__main__":
    main()
