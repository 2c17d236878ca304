#!/usr/bin/env python3
"""Chat templates rendered as transformers renders them (the reference for
tests/tst_tokenizers.py), with Debian's python3-jinja2: an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop
controls, plus the raise_exception and strftime_now globals and the tojson
filter that transformers adds (written from transformers'
utils/chat_template_utils.py).

usage: chat_reference.py MODEL_DIR [--add-generation-prompt] < conversations.jsonl
Each input line is {"messages": [...], ...} or a list of messages; each output
line is the rendered text as a JSON string, or {"error": MESSAGE}.
"""
import json
import sys
from datetime import datetime

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    folder = sys.argv[1]
    generation = "--add-generation-prompt" in sys.argv
    config = json.load(open(folder + "/tokenizer_config.json", encoding="utf-8"))
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    template = env.from_string(config["chat_template"])
    variables = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            variables[key] = value
    for line in sys.stdin:
        if not line.strip():
            continue
        record = json.loads(line)
        context = dict(variables)
        if isinstance(record, list):
            context["messages"] = record
        else:
            context.update(record)
        context.setdefault("add_generation_prompt", generation)
        try:
            out = json.dumps(template.render(**context), ensure_ascii=False)
        except Exception as e:  # noqa: BLE001 - the reference reports any failure as data
            out = json.dumps({"error": str(e)}, ensure_ascii=False)
        sys.stdout.write(out + "\n")


if __name__ == "__main__":
    main()
