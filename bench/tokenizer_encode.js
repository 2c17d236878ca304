// The reference side of bench/tokenizer_throughput.py: Hugging Face's Rust
// tokenizers through the npm binding, one chunk at a time (one thread).
// usage: TB_NPM_MODULES=DIR node tokenizer_encode.js TOKENIZER_JSON TEXT_FILE CHUNK_BYTES
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(process.env.TB_NPM_MODULES, 'tokenizers'));

async function main() {
  const [file, textFile, chunkArg] = process.argv.slice(2);
  const t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(file);
  const load = Number(process.hrtime.bigint() - t0) / 1e9;
  const buf = fs.readFileSync(textFile);
  const chunk = Number(chunkArg);
  // Chunks cut exactly as the C++ side cuts them (bytes, at a line break).
  const chunks = [];
  for (let at = 0; at < buf.length;) {
    let end = buf.indexOf(10, Math.min(buf.length, at + chunk));
    end = end < 0 ? buf.length : end + 1;
    chunks.push(buf.subarray(at, end).toString('utf8'));
    at = end;
  }
  let tokens = 0;
  const t1 = process.hrtime.bigint();
  for (const c of chunks) {
    const enc = await tok.encode(c, null, { addSpecialTokens: false });
    tokens += enc.getIds().length;
  }
  const seconds = Number(process.hrtime.bigint() - t1) / 1e9;
  process.stdout.write(JSON.stringify({ seconds, bytes: buf.length, tokens, load_seconds: load }) + '\n');
}
main().catch((e) => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(1); });
