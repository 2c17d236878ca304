#!/usr/bin/env python3
"""The reference for model folders that ship only a SentencePiece tokenizer.model.

The SentencePiece library itself (Debian's python3-sentencepiece) encodes and
decodes; special-token text is split out first, as transformers' slow
(legacy) Llama tokenizer does: the added tokens of tokenizer_config.json's
added_tokens_decoder and the model's control and unknown pieces, leftmost
first and the longest at a position. Each stretch between them is encoded on
its own. With special tokens, BOS comes first when add_bos_token (default
true) and EOS last when add_eos_token (default false). A decode joins the
library's decode of each run of model pieces with the added tokens' text.

usage: sentencepiece_reference.py FOLDER encode|encode-special|decode < JSONL
"""
import json
import os
import sys

import sentencepiece


def load(folder):
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, "tokenizer.model"))
    config_path = os.path.join(folder, "tokenizer_config.json")
    config = json.load(open(config_path, encoding="utf-8")) if os.path.exists(config_path) else {}
    added = {}  # text -> id
    for key, entry in config.get("added_tokens_decoder", {}).items():
        added[entry["content"]] = int(key)
    for i in range(sp.get_piece_size()):
        if sp.is_control(i) or sp.is_unknown(i):
            added.setdefault(sp.id_to_piece(i), i)

    def token(key, fallback):
        value = config.get(key, fallback)
        if isinstance(value, dict):
            value = value["content"]
        if value is None:
            return None
        if value in added:
            return added[value]
        i = sp.piece_to_id(value)
        return i if sp.id_to_piece(i) == value else None

    bos, eos = token("bos_token", "<s>"), token("eos_token", "</s>")
    add_bos = config.get("add_bos_token", True) and bos is not None
    add_eos = config.get("add_eos_token", False) and eos is not None
    return sp, added, bos if add_bos else None, eos if add_eos else None


def split(text, added):
    out, start, i = [], 0, 0
    while i < len(text):
        best = max((t for t in added if text.startswith(t, i)), key=len, default=None)
        if best is None:
            i += 1
            continue
        if start < i:
            out.append(text[start:i])
        out.append(added[best])
        i += len(best)
        start = i
    if start < len(text):
        out.append(text[start:])
    return out


def main():
    folder, mode = sys.argv[1], sys.argv[2]
    sp, added, bos, eos = load(folder)
    by_id = {i: t for t, i in added.items()}
    for line in sys.stdin:
        if not line.strip():
            continue
        value = json.loads(line)
        if mode == "decode":
            out, run = [], []
            for i in value:
                if i in by_id:
                    if run:
                        out.append(sp.decode(run))
                        run = []
                    out.append(by_id[i])
                else:
                    run.append(i)
            if run:
                out.append(sp.decode(run))
            print(json.dumps("".join(out)))
            continue
        ids = [bos] if mode == "encode-special" and bos is not None else []
        for part in split(value, added):
            ids += [part] if isinstance(part, int) else sp.encode(part)
        if mode == "encode-special" and eos is not None:
            ids.append(eos)
        print(json.dumps(ids))


if __name__ == "__main__":
    main()
