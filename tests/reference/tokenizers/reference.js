// The reference for Trainbench's tokenizers: Hugging Face's own Rust
// `tokenizers` library, through its official Node binding (npm `tokenizers`).
// usage: node reference.js TOKENIZER_JSON (encode|encode-special|decode) < in.jsonl > out.jsonl
// encode: each input line is a JSON string, each output line the JSON array of its ids.
// decode: each input line is a JSON array of ids, each output line the JSON string
// decode(ids, skipSpecialTokens = false) gives.
'use strict';
const fs = require('fs');
const path = require('path');
const modules = process.env.TB_NPM_MODULES;
const { Tokenizer } = require(modules ? path.join(modules, 'tokenizers') : 'tokenizers');

async function main() {
  const [file, mode] = process.argv.slice(2);
  if (!file || !['encode', 'encode-special', 'decode'].includes(mode)) {
    process.stderr.write('usage: node reference.js TOKENIZER_JSON (encode|encode-special|decode)\n');
    process.exit(2);
  }
  const tok = Tokenizer.fromFile(file);
  const lines = fs.readFileSync(0, 'utf8').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  const out = [];
  for (const line of lines) {
    const value = JSON.parse(line);
    if (mode === 'decode') out.push(JSON.stringify(await tok.decode(value, false)));
    else {
      const enc = await tok.encode(value, null, { addSpecialTokens: mode === 'encode-special' });
      out.push(JSON.stringify(Array.from(enc.getIds())));
    }
  }
  process.stdout.write(out.length ? out.join('\n') + '\n' : '');
}
main().catch((e) => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(1); });
