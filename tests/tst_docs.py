#!/usr/bin/env python3
"""The documentation is true to the program.

    python3 tests/tst_docs.py PATH/TO/trainbench-cli

Reads README.md and docs/*.md and checks, against the binary:

- commands: every `trainbench-cli SUBCOMMAND ...` in a code span or a code
  block names a command of `trainbench-cli --help`, and every --flag on that
  command line is an option of `trainbench-cli SUBCOMMAND --help` (or a
  global one). A command with verbs of its own (`hosts add|list|test|remove`)
  must be given one of them. A code span that starts with a subcommand's
  name and shows a flag (`estimate --derived`) is checked the same way.
  Placeholders (FILE, N, DIR, RUN_ID) and other positionals are not checked.
- config keys: every key of docs/config.md's table (`train.batch_size`,
  `lora.rank`, ...) is a key the config reader knows: one config that sets
  each key to its documented default (or a stand-in value) goes through
  `trainbench-cli validate`, and no key may come back as "unknown key". Value
  errors are expected there (stand-in values, fields that need each other)
  and are not failures. A made-up key in the same config must be reported
  unknown, which shows the check can fail.
- scripts and benchmarks: every `scripts/NAME` or `bench/NAME` command line
  names a file that exists, and each --flag on it appears in that file.
- paths: every repository path in a code span (`core/train/TorchCompat.h`,
  `tests/data/checkpoints`) exists.

Each failure is printed with its file, line and what is missing; the last
line is "N passed, M failed", and the exit status is 1 on any failure.
"""

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLOBAL_OPTIONS = {"--help", "--version", "-h"}
FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
# A word that stands for a value in usage lines: FILE, RUN_ID, N, DIR, ...
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*([|,][A-Z0-9_-]+)*$")
PATH_ROOTS = ("app/", "bench/", "core/", "docs/", "packaging/", "resources/", "scripts/", "tests/", "ui/")

passed = 0
failed = 0


def ok():
    global passed
    passed += 1


def fail(where, message):
    global failed
    failed += 1
    print(f"FAIL {where}: {message}")


def run(cli, *args):
    result = subprocess.run([cli, *args], capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout + result.stderr


# ---------------------------------------------------------------------------
# What the program says about itself.

class Cli:
    def __init__(self, path):
        self.path = path
        code, text = run(path, "--help")
        if code != 0:
            raise SystemExit(f"{path} --help exited {code}:\n{text}")
        self.commands = []
        in_list = False
        for line in text.splitlines():
            if line.strip() == "commands:":
                in_list = True
                continue
            if in_list:
                if not line.strip():
                    break
                self.commands.append(line.split()[0])
        if not self.commands:
            raise SystemExit(f"no commands found in '{path} --help':\n{text}")
        self._help = {}
        self._raw_help = {}
        # Every command's help, four at a time (each start loads LibTorch).
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            for name, result in zip(self.commands, pool.map(lambda c: run(path, c, "--help"), self.commands)):
                self._raw_help[name] = result

    def command_help(self, name):
        """(usage after the command's name, set of its options)."""
        if name not in self._help:
            code, text = self._raw_help.get(name) or run(self.path, name, "--help")
            if code != 0:
                raise SystemExit(f"{self.path} {name} --help exited {code}:\n{text}")
            usage = ""
            options = set()
            for line in text.splitlines():
                if line.startswith("usage: "):
                    usage = line[len("usage: "):].split(None, 2)[2] if len(line.split()) > 3 else ""
                m = re.match(r"\s{2}(--[A-Za-z0-9][A-Za-z0-9_-]*)", line)
                if m:
                    options.add(m.group(1))
            self._help[name] = (usage, options)
        return self._help[name]

    def verbs(self, name):
        """The verbs a command takes first (`hosts add ... | list | ...`), or None."""
        usage, _ = self.command_help(name)
        alternatives = split_top_level(usage, "|")
        verbs = set()
        for alternative in alternatives:
            words = alternative.split()
            if words and re.fullmatch(r"[a-z][a-z-]*", words[0]):
                verbs.add(words[0])
        return verbs or None


# ---------------------------------------------------------------------------
# Reading the docs: code spans and code blocks, with their line numbers.

def doc_files():
    files = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def code_pieces(path):
    """Yields (line, text, kind): kind "block" for a code block's command
    lines (continuations joined, comments dropped), "span" for inline code."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    prose = []  # (line number, text) outside code blocks
    in_block = False
    fence = ""
    pending = None  # (first line, text so far) of a command continued with "\"
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not in_block and re.match(r"^(```|~~~)", stripped):
            in_block, fence = True, stripped[:3]
            prose.append((number, ""))
            continue
        if in_block:
            if stripped.startswith(fence):
                in_block = False
                if pending:
                    yield pending[0], pending[1], "block"
                    pending = None
                prose.append((number, ""))
                continue
            prose.append((number, ""))
            if pending is None and stripped.startswith("#"):
                continue  # a comment: example output, notes
            text = pending[1] + " " + stripped if pending else stripped
            first = pending[0] if pending else number
            if text.endswith("\\"):
                pending = (first, text[:-1])
                continue
            pending = None
            yield first, text, "block"
            continue
        prose.append((number, line))
    # Inline code spans may run over a line break.
    text = "\n".join(t for _, t in prose)
    starts = [0]
    for i, c in enumerate(text):
        if c == "\n":
            starts.append(i + 1)
    for m in re.finditer(r"(`+)(.+?)\1", text, re.S):
        offset = m.start()
        number = prose[sum(1 for s in starts if s <= offset) - 1][0]
        yield number, m.group(2).replace("\n", " ").replace("\\|", "|").strip(), "span"


def split_top_level(text, separator):
    """Splits at " | " outside brackets and quotes."""
    parts, depth, quote, current = [], 0, "", ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "[(":
            depth += 1
        elif c in "])":
            depth = max(0, depth - 1)
        elif c == separator and depth == 0 and (i == 0 or text[i - 1].isspace()):
            parts.append(current)
            current = ""
            i += 1
            continue
        current += c
        i += 1
    parts.append(current)
    return parts


def command_segment(text):
    """The part of `text` that belongs to the command it starts with: up to a
    pipe, a redirection, a comment or a list separator outside quotes and
    usage brackets. Returns (segment, length used)."""
    depth, quote = 0, ""
    for i, c in enumerate(text):
        before = text[i - 1] if i else " "
        if quote:
            if c == quote:
                quote = ""
            continue
        if c in "\"'":
            quote = c
        elif c in "[(":
            depth += 1
        elif c in "])":
            if depth == 0:
                return text[:i], i
            depth -= 1
        elif depth == 0 and (
            c in ";`\n"
            or (c == "&" and text[i:i + 2] == "&&")
            or (c in "|<>#" and (before.isspace() or (c == ">" and before.isdigit())))
        ):
            return text[:i], i
    return text, len(text)


def words(segment):
    """Whitespace-separated words, quotes kept (a quoted word is a value)."""
    out, current, quote = [], "", ""
    for c in segment:
        if quote:
            current += c
            if c == quote:
                quote = ""
        elif c in "\"'":
            current += c
            quote = c
        elif c.isspace():
            if current:
                out.append(current)
            current = ""
        else:
            current += c
    if current:
        out.append(current)
    return out


def flags_of(tokens):
    found = []
    for t in tokens:
        if t[:1] in "\"'":
            continue
        bare = t.lstrip("[(")
        if bare.startswith("--"):
            m = FLAG.match(bare)
            if m:
                found.append(m.group(0))
    return found


# ---------------------------------------------------------------------------
# The checks.

def check_command(cli, where, shown, tokens, bare):
    """tokens: the words after `trainbench-cli` (or, for a bare span, the
    span's words with the subcommand first)."""
    if not tokens:
        return
    first = tokens[0].lstrip("[(")
    if first.startswith("--") or first == "-h":
        flag = FLAG.match(first)
        name = flag.group(0) if flag else first
        if name in GLOBAL_OPTIONS:
            ok()
        else:
            fail(where, f"`{shown}`: {name} is not an option of trainbench-cli itself (--help, --version)")
        return
    if PLACEHOLDER.match(first) or not re.fullmatch(r"[a-z][a-z0-9-]*", first):
        return  # COMMAND, a version string, ...: not a command line
    if first not in cli.commands:
        fail(where, f"`{shown}`: no command '{first}' in `trainbench-cli --help` "
                    f"(commands: {', '.join(cli.commands)})")
        return
    _, options = cli.command_help(first)
    problems = []
    for flag in flags_of(tokens[1:]):
        if flag not in options and flag not in GLOBAL_OPTIONS:
            problems.append(f"{flag} is not an option of `trainbench-cli {first} --help`")
    verbs = cli.verbs(first)
    if verbs and not bare:
        positional = next((t for t in tokens[1:] if not t.lstrip("[(").startswith("-")), None)
        word = positional.strip("[]()'\"") if positional else None
        if word is None:
            problems.append(f"'{first}' needs one of {', '.join(sorted(verbs))}")
        elif not PLACEHOLDER.match(word) and word not in verbs:
            problems.append(f"'{first} {word}': '{word}' is not one of {', '.join(sorted(verbs))}")
    if problems:
        for p in problems:
            fail(where, f"`{shown}`: {p}")
    else:
        ok()


def check_script(where, shown, path, tokens):
    full = os.path.join(ROOT, path)
    if not os.path.isfile(full):
        fail(where, f"`{shown}`: {path} does not exist")
        return
    with open(full, encoding="utf-8", errors="replace") as f:
        source = f.read()
    missing = [flag for flag in flags_of(tokens) if flag not in source]
    if missing:
        fail(where, f"`{shown}`: {', '.join(missing)} not found in {path}")
    else:
        ok()


def check_docs(cli):
    cli_word = re.compile(r"(?<![\w.-])(?:[\w./-]*/)?trainbench-cli(?![\w.-])")
    script_word = re.compile(r"(?<![\w./-])((?:scripts|bench)/[\w.-]+)")
    path_span = re.compile(r"^(?:\./)?((?:" + "|".join(re.escape(r) for r in PATH_ROOTS) + r")[\w./+-]*)$")
    for path in doc_files():
        rel = os.path.relpath(path, ROOT)
        for number, text, kind in code_pieces(path):
            where = f"{rel}:{number}"
            # trainbench-cli command lines
            position = 0
            while True:
                m = cli_word.search(text, position)
                if not m:
                    break
                segment, used = command_segment(text[m.end():])
                position = m.end() + max(used, 1)
                shown = (m.group(0) + segment).strip()
                check_command(cli, where, shown, words(segment), bare=False)
            # a span that starts with a subcommand and shows a flag: `estimate --derived`
            if kind == "span" and not cli_word.search(text):
                tokens = words(command_segment(text)[0])
                if len(tokens) >= 2 and tokens[0] in cli.commands and flags_of(tokens[1:]):
                    check_command(cli, where, text, tokens, bare=True)
            # scripts/NAME and bench/NAME command lines
            for m in script_word.finditer(text):
                segment, _ = command_segment(text[m.end():])
                tokens = words(segment)
                if kind == "span" and not tokens and not flags_of(tokens):
                    continue  # a path, checked below
                check_script(where, (m.group(1) + segment).strip(), m.group(1), tokens)
            # repository paths in code spans
            if kind == "span":
                pm = path_span.match(text.rstrip(".,;:"))
                if pm:
                    p = pm.group(1).rstrip("/")
                    if re.search(r"(?<![A-Za-z])[A-Z]{2,}(?![a-z])|[<>*{}]", p):
                        continue  # app/cli/cmd_NAME.cpp: a pattern, not a file
                    # core/memory/CpuGemmScratch: a module, its .h and .cpp
                    if any(os.path.exists(os.path.join(ROOT, p + ext)) for ext in ("", ".h", ".cpp")):
                        ok()
                    else:
                        fail(where, f"`{text}`: no such file or folder in the repository")


def stand_in(default, key):
    """A value for a config key from its documented default: the default
    itself where it is JSON, else a plausible value of its kind."""
    for candidate in (default, default.split(";")[0]):
        try:
            return json.loads(candidate.strip())
        except ValueError:
            pass
    m = re.match(r"\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)", default)
    if m:
        return json.loads(m.group(1))
    return "x"


def check_config_keys(cli):
    path = os.path.join(ROOT, "docs", "config.md")
    keys = []  # (line, key, default)
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = re.match(r"^\|\s*`([A-Za-z_][\w.]*)`\s*(?:\[(.*?)\])?\s*\|", line)
            if m and m.group(1) != "key":
                default = m.group(2) or ""
                # the bracket holds the default; a nested list closes later
                cell = line.split("|")[1]
                d = re.search(r"\[(.*)\]", cell)
                keys.append((number, m.group(1), d.group(1) if d else default))
    if len(keys) < 10:
        fail("docs/config.md", f"found only {len(keys)} keys in the table; the test cannot read it")
        return
    config = {}
    for _, key, default in keys:
        node = config
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = stand_in(default, key)
    bogus = "no_such_key_of_tst_docs"
    config.setdefault("train", {})[bogus] = 1
    with tempfile.TemporaryDirectory() as tmp:
        file = os.path.join(tmp, "all-keys.json")
        with open(file, "w", encoding="utf-8") as f:
            json.dump(config, f)
        code, text = run(cli.path, "validate", "--config", file)
    unknown = set(re.findall(r"([A-Za-z_][\w.\[\]]*): unknown key", text))
    if code not in (0, 2):
        fail("docs/config.md", f"`trainbench-cli validate` exited {code} on the config of every key:\n{text}")
        return
    if f"train.{bogus}" not in unknown:
        fail("docs/config.md", f"the made-up key train.{bogus} was not reported as an unknown key, so this "
                               f"check cannot tell; validate said:\n{text}")
        return
    ok()
    for number, key, _ in keys:
        hit = [u for u in unknown if key == u or key.startswith(u + ".")]
        if hit:
            fail(f"docs/config.md:{number}", f"config key `{key}` is documented, but the validator says "
                                             f"'{hit[0]}: unknown key'")
        else:
            ok()


def main():
    if len(sys.argv) != 2:
        print("usage: tst_docs.py PATH/TO/trainbench-cli", file=sys.stderr)
        return 2
    cli = Cli(os.path.abspath(sys.argv[1]))
    check_docs(cli)
    check_config_keys(cli)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
