#!/usr/bin/env python3
"""Plain-PyTorch reference for bench/learning_robustness.sh.

An independent model of Trainbench's addition task, written from the task's
description and PyTorch's own modules, not from Trainbench's code:

- data: "a+b=" then the digits of a+b least significant first, then an end
  marker (vocab 13: digits, '+', '=', end); held-out pairs chosen by a hash of
  the unordered pair; loss and exact match on the answer positions only;
- GPT: pre-LayerNorm blocks, causal attention, GELU MLP (4 d), untied head,
  learned / sinusoidal / RoPE positions;
- Llama: RMSNorm, grouped-query attention with RoPE, SwiGLU, no biases;
- AdamW, linear warmup then cosine to a tenth of the peak, gradient clipping.

By default everything is PyTorch's own default ("plain"): nn.Linear
initialisation, AdamW betas (0.9, 0.999), eps 1e-8, weight decay on every
parameter. The one exception is the embedding tables, drawn N(0, 0.02) as GPT-2
and nanoGPT draw them: with nn.Embedding's own N(0, 1) this reference stalls on
most seeds (RoPE: 3 of 16 seeds reach 80%; --embedding-std 1 shows it). Flags switch single choices to Trainbench's, so the cause
of a difference can be isolated one choice at a time.

To tell the implementation from the random draws, --init-from starts the Llama
or the GPT from Trainbench's own initial weights (`trainbench-cli export-model`
of a 1-step run at lr 1e-30 and the same seed) and --trainbench-batches draws
Trainbench's batches (--batch-seed: another seed's, to swap weights and
batches between seeds); with --beta2 0.99 --decay-matrices-only the first
steps' losses (--losses N prints them) then equal Trainbench's to about 1e-6
(docs/learning.md, "Learning robustness").

Prints one line: the held-out exact match at each evaluation, as JSON.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

PLUS, EQUALS, END = 10, 11, 12
MASK64 = (1 << 64) - 1


def splitmix(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class Addition:
    """Sums of numbers below 10^digits; 5% of unordered pairs held out."""

    def __init__(self, digits, val_fraction=0.05):
        self.digits = digits
        self.limit = 10 ** digits
        self.T = 3 * digits + 3
        pairs = [(a, b) for a in range(self.limit) for b in range(self.limit)]
        held = [self.held_out(a, b, val_fraction) for a, b in pairs]
        self.train_pairs = torch.tensor([p for p, h in zip(pairs, held) if not h])
        self.val_pairs = torch.tensor([p for p, h in zip(pairs, held) if h])

    @staticmethod
    def held_out(a, b, fraction):
        a, b = min(a, b), max(a, b)
        h = splitmix(((a * 0x100000001B3) & MASK64) ^ splitmix(b))
        return (h % 1000000) < fraction * 1000000

    def encode(self, pairs):
        d = self.digits
        a, b = pairs[:, 0], pairs[:, 1]
        s = a + b
        cols = []
        for i in reversed(range(d)):
            cols.append(a // 10 ** i % 10)
        cols.append(torch.full_like(a, PLUS))
        for i in reversed(range(d)):
            cols.append(b // 10 ** i % 10)
        cols.append(torch.full_like(a, EQUALS))
        for i in range(d + 1):
            cols.append(s // 10 ** i % 10)
        cols.append(torch.full_like(a, END))
        seq = torch.stack(cols, 1)
        mask = torch.zeros(len(pairs), self.T)
        mask[:, 2 * d + 1:] = 1.0
        return seq[:, :-1], seq[:, 1:], mask


def rope_tables(T, head_dim, base=10000.0):
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    return ang.cos().float(), ang.sin().float()


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attend(q, k, v):
    T = q.shape[2]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return att.masked_fill(~causal, float("-inf")).softmax(-1) @ v


class GptBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.proj = nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, rope):
        B, T, C = x.shape
        h = self.ln1(x)
        q, k, v = (lin(h).view(B, T, self.heads, -1).transpose(1, 2) for lin in (self.q, self.k, self.v))
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        x = x + self.proj(attend(q, k, v).transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, T, layers, d, heads, encoding, sinusoid_scale):
        super().__init__()
        self.encoding = encoding
        self.tok = nn.Embedding(vocab, d)
        if encoding == "learned":
            self.pos = nn.Embedding(T, d)
        elif encoding == "sinusoidal":
            pos = torch.arange(T, dtype=torch.float32)[:, None]
            div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
            table = torch.zeros(T, d)
            table[:, 0::2], table[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
            self.register_buffer("sinusoid", table * sinusoid_scale)
        elif encoding == "rope":
            self.rope = rope_tables(T, d // heads)
        self.blocks = nn.ModuleList(GptBlock(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok(tokens)
        if self.encoding == "learned":
            x = x + self.pos.weight[:T]
        elif self.encoding == "sinusoidal":
            x = x + self.sinusoid[:T]
        rope = tuple(t[:T] for t in self.rope) if self.encoding == "rope" else None
        for block in self.blocks:
            x = block(x, rope)
        return self.head(self.lnf(x))

    def residual_outputs(self):
        return [m for b in self.blocks for m in (b.proj, b.out)]


class RmsNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, d_ff):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.n1, self.n2 = RmsNorm(d), RmsNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, d_ff, bias=False), nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x, rope):
        B, T, C = x.shape
        h = self.n1(x)
        q = self.q(h).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q, k = rotate(q, *rope), rotate(k, *rope)
        g = self.heads // self.kv_heads
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        x = x + self.o(attend(q, k, v).transpose(1, 2).reshape(B, T, C))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, vocab, T, layers, d, heads, kv_heads, d_ff):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.rope = rope_tables(T, d // heads)
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, kv_heads, d_ff) for _ in range(layers))
        self.norm = RmsNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok(tokens)
        rope = tuple(t[:T] for t in self.rope)
        for block in self.blocks:
            x = block(x, rope)
        return self.head(self.norm(x))

    def residual_outputs(self):
        return [m for b in self.blocks for m in (b.o, b.down)]


def load_safetensors(path):
    """The tensors of a float32 model.safetensors (8-byte header size, JSON header, data)."""
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    try:
        raw = open(path, "rb").read()
        size = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + size])
    except (OSError, struct.error, ValueError) as e:
        sys.exit(f"{path}: not a readable model.safetensors ({e}); write one with trainbench-cli export-model")
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            sys.exit(f"{path}: tensor {name} is {entry['dtype']}; only F32 is read")
        begin, end = entry["data_offsets"]
        data = bytearray(raw[8 + size + begin:8 + size + end])
        if len(data) != 4 * math.prod(entry["shape"]):
            sys.exit(f"{path}: tensor {name} is cut short; export the model again")
        tensors[name] = torch.frombuffer(data, dtype=torch.float32).reshape(entry["shape"]).clone()
    return tensors


def load_trainbench_llama(model, path, layers):
    """Loads `trainbench-cli export-model` weights (Hugging Face Llama names) into Llama."""
    names = {"model.embed_tokens.weight": "tok.weight", "model.norm.weight": "norm.weight",
             "lm_head.weight": "head.weight"}
    for i in range(layers):
        for p in "qkvo":
            names[f"model.layers.{i}.self_attn.{p}_proj.weight"] = f"blocks.{i}.{p}.weight"
        for p in ("gate", "up", "down"):
            names[f"model.layers.{i}.mlp.{p}_proj.weight"] = f"blocks.{i}.{p}.weight"
        names[f"model.layers.{i}.input_layernorm.weight"] = f"blocks.{i}.n1.weight"
        names[f"model.layers.{i}.post_attention_layernorm.weight"] = f"blocks.{i}.n2.weight"
    tensors = load_safetensors(path)
    unknown, missing = sorted(set(tensors) - set(names)), sorted(set(names) - set(tensors))
    if unknown or missing:
        what = f"has {unknown[0]}" if unknown else f"lacks {missing[0]}"
        sys.exit(f"{path}: not a {layers}-layer untied Trainbench Llama (it {what}); match --layers to the model")
    own = model.state_dict()
    for k, v in tensors.items():
        if tuple(v.shape) != tuple(own[names[k]].shape):
            sys.exit(f"{path}: {k} is {list(v.shape)}, this model's is {list(own[names[k]].shape)}; "
                     "match --d-model, --heads and --kv-heads to the exported model")
    model.load_state_dict({names[k]: v for k, v in tensors.items()}, strict=True)


def load_trainbench_gpt(model, path, layers):
    """Loads `trainbench-cli export-model` weights of a built-in GPT (Trainbench's
    own names; q, k and v stacked in one qkv projection, no head bias) into Gpt."""
    tensors = load_safetensors(path)
    own = model.state_dict()
    mapped = {}
    for name, value in tensors.items():
        parts = name.split(".")
        if name == "wte.weight":
            mapped["tok.weight"] = value
        elif name == "wpe.weight":
            mapped["pos.weight"] = value
        elif parts[0] in ("lnf", "head"):
            mapped[name] = value
        elif parts[0] == "blocks" and len(parts) == 5 and parts[2] == "attn" and parts[3] == "qkv":
            for piece, part in zip(value.chunk(3, 0), "qkv"):
                mapped[f"blocks.{parts[1]}.{part}.{parts[4]}"] = piece
        elif parts[0] == "blocks" and len(parts) == 5 and parts[2] == "attn":
            mapped[f"blocks.{parts[1]}.{parts[3]}.{parts[4]}"] = value
        else:
            mapped[name] = value
    # Parameters must all come from the file; a buffer (the sinusoid table) may.
    params = {n for n, _ in model.named_parameters()}
    unknown, missing = sorted(set(mapped) - set(own)), sorted(params - set(mapped))
    if unknown or missing:
        what = f"has {unknown[0]}" if unknown else f"lacks {missing[0]}"
        sys.exit(f"{path}: not a {layers}-layer untied Trainbench GPT of this encoding (it {what}); "
                 "match --layers and --encoding to the model")
    for k, v in mapped.items():
        if tuple(v.shape) != tuple(own[k].shape):
            sys.exit(f"{path}: {k} is {list(v.shape)}, this model's is {list(own[k].shape)}; "
                     "match --d-model and --heads to the exported model")
    model.load_state_dict(mapped, strict=False)


def trainbench_batches(data, seed, batch):
    """Batches as Trainbench draws them: its generator seed, pairs of torch.randint
    draws over [0, 10^digits), held-out pairs skipped."""
    gen = torch.Generator().manual_seed((seed * 0x9E3779B97F4A7C15 + 17) & MASK64)
    while True:
        pairs = []
        while len(pairs) < batch:
            v = torch.randint(0, data.limit, (2 * batch,), generator=gen).tolist()
            for i in range(0, 2 * batch - 1, 2):
                if len(pairs) < batch and not Addition.held_out(v[i], v[i + 1], 0.05):
                    pairs.append((v[i], v[i + 1]))
        yield data.encode(torch.tensor(pairs))


def lr_at(step, total, warmup, peak):
    if warmup > 0 and step <= warmup:
        return peak * step / warmup
    progress = min(max((step - warmup) / max(1, total - warmup), 0.0), 1.0)
    return 0.1 * peak + 0.5 * 0.9 * peak * (1 + math.cos(math.pi * progress))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["gpt", "llama"], default="gpt")
    ap.add_argument("--encoding", choices=["learned", "sinusoidal", "rope"], default="rope")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--digits", type=int, default=2)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads; 0: PyTorch's default")
    # Trainbench's choices, one at a time.
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--decay-matrices-only", action="store_true",
                    help="no decay on biases, norm gains and embedding tables")
    ap.add_argument("--embedding-std", type=float, default=0.02, help="N(0, std) embedding tables")
    ap.add_argument("--linear-std", type=float, default=0.0,
                    help="N(0, std) linear weights with zero biases; 0: nn.Linear's default")
    ap.add_argument("--zero-residual", action="store_true", help="attention and MLP output projections start at 0")
    ap.add_argument("--sinusoid-scale", type=float, default=1.0)
    # Trainbench's own random draws, to tell the implementation from the initialisation.
    ap.add_argument("--init-from", metavar="FILE",
                    help="start from these weights, a folder or its model.safetensors (trainbench-cli "
                         "export-model of a 1-step run at lr 1e-30); a GPT then has no head bias, as Trainbench's")
    ap.add_argument("--trainbench-batches", action="store_true", help="draw the batches as Trainbench does for --seed")
    ap.add_argument("--batch-seed", type=int, default=None,
                    help="with --trainbench-batches: Trainbench's batches of this seed instead (to swap weights "
                         "and batches between seeds)")
    ap.add_argument("--losses", type=int, default=0, metavar="N", help="also print the first N steps' training losses")
    ap.add_argument("--token-embedding-scale", type=float, default=1.0, help="multiply the token table after initialisation")
    a = ap.parse_args()

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    data = Addition(a.digits)
    if a.model == "gpt":
        model = Gpt(13, data.T, a.layers, a.d_model, a.heads, a.encoding, a.sinusoid_scale)
    else:
        d_ff = (8 * a.d_model // 3 + 63) // 64 * 64
        model = Llama(13, data.T, a.layers, a.d_model, a.heads, a.kv_heads, d_ff)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, a.embedding_std)
            if a.linear_std > 0 and isinstance(m, nn.Linear):
                m.weight.normal_(0.0, a.linear_std)
                if m.bias is not None:
                    m.bias.zero_()
        if a.zero_residual:
            for m in model.residual_outputs():
                m.weight.zero_()
                if m.bias is not None:
                    m.bias.zero_()
    if a.init_from and a.model == "gpt":
        model.head = nn.Linear(a.d_model, 13, bias=False)
        load_trainbench_gpt(model, a.init_from, a.layers)
    elif a.init_from:
        load_trainbench_llama(model, a.init_from, a.layers)
    with torch.no_grad():
        model.tok.weight.mul_(a.token_embedding_scale)

    if a.decay_matrices_only:
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith(("tok.", "pos."))]
        ids = {id(p) for p in decay}
        rest = [p for p in model.parameters() if id(p) not in ids]
        groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    else:
        groups = [{"params": list(model.parameters()), "weight_decay": a.weight_decay}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, a.beta2), eps=a.eps)

    gen = torch.Generator().manual_seed(a.seed * 7919 + 17)
    batch_seed = a.seed if a.batch_seed is None else a.batch_seed
    tb_batches = trainbench_batches(data, batch_seed, a.batch) if a.trainbench_batches else None
    losses = []
    val_x, val_y, val_mask = data.encode(data.val_pairs)
    curve = {}
    for step in range(1, a.steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, a.steps, a.warmup, a.lr)
        if tb_batches is not None:
            x, y, mask = next(tb_batches)
        else:
            pick = torch.randint(0, len(data.train_pairs), (a.batch,), generator=gen)
            x, y, mask = data.encode(data.train_pairs[pick])
        logits = model(x)
        per_token = F.cross_entropy(logits.reshape(-1, 13), y.reshape(-1), reduction="none")
        loss = (per_token * mask.reshape(-1)).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        if step <= a.losses:
            losses.append(loss.item())
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            with torch.no_grad():
                pred = model(val_x).argmax(-1)
                wrong = ((pred != val_y).float() * val_mask).sum(1)
                curve[step] = round(100.0 * (wrong == 0).float().mean().item(), 2)
            model.train()
            if not math.isfinite(loss.item()):
                break
    out = {"seed": a.seed, "exact_match": curve, "final": curve[max(curve)]}
    if a.losses:
        out["losses"] = losses
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
