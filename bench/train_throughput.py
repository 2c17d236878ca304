#!/usr/bin/env python3
"""Plain-PyTorch reference for bench/train_throughput.sh.

The same GPT as Trainbench's core (pre-LayerNorm, learned positions, causal
attention, GELU MLP, tied embeddings), the same data (random 64-byte windows
of resources/data/sample.txt), AdamW with clipping, fp32. Prints tokens/s over
the steps after the first 10, measured like trainbench-cli (wall time between
step ends).
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, d_ff, n_layer):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, d_ff), nn.Linear(d_ff, d)
        for lin in (self.qkv, self.fc):
            nn.init.normal_(lin.weight, 0.0, 0.02)
            nn.init.zeros_(lin.bias)
        for lin in (self.proj, self.out):
            nn.init.normal_(lin.weight, 0.0, 0.02 / math.sqrt(2 * n_layer))
            nn.init.zeros_(lin.bias)

    def attn(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
        att = att.masked_fill(mask[:T, :T].logical_not(), float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, T, n_layer, d, heads, d_ff):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(T, d)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, d_ff, n_layer) for _ in range(n_layer))
        self.lnf = nn.LayerNorm(d)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).tril())

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x, self.mask)
        return self.lnf(x) @ self.wte.weight.t()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--text", default="resources/data/sample.txt")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--count-ops", action="store_true", help="count the ATen operators of the whole run")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    T, B = a.seq, a.batch
    data = torch.tensor(list(open(a.text, "rb").read()), dtype=torch.long)
    train_end = len(data) - int(len(data) * 0.05)
    model = Gpt(256, T, a.layers, a.d_model, a.heads, 4 * a.d_model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99), weight_decay=0.01)
    offsets = torch.arange(T + 1)
    start = None
    profiler = None
    if a.count_ops:
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        profiler.__enter__()
    for step in range(1, a.steps + 1):
        for group in opt.param_groups:
            group["lr"] = 3e-3 * min(1.0, step / 20)
        opt.zero_grad()
        idx = torch.randint(0, train_end - T - 1, (B,)).unsqueeze(1) + offsets
        batch = data[idx]
        x, y = batch[:, :T], batch[:, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="none").sum() / (B * T)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = loss.item()
        if step == 10:
            start = time.perf_counter()
    seconds = time.perf_counter() - start
    if profiler:
        profiler.__exit__(None, None, None)
        ops = {e.key: e.count for e in profiler.key_averages() if e.key.startswith("aten::")}
        print(f"ops: {sum(ops.values())} ATen operators dispatched")
        for name in sorted(ops):
            print(f"op {name} {ops[name]}")
    steps = a.steps - 10
    print(f"throughput: {B * T * steps / seconds:.0f} tokens/s over steps 11-{a.steps} "
          f"({1000 * seconds / steps:.2f} ms a step), final loss {loss_value:.4f}")


if __name__ == "__main__":
    main()
