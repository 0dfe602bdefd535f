// bpe_oracle.js: compares token shards written by `cohort prepare --tokenizer gpt2` with the
// ids of the JavaScript GPT-2 encoder (npm gpt-3-encoder): every input file is one document,
// so the shard must be, per file, [50256, ...encode(text)].
// usage: node bpe_oracle.js MODULE_DIR SHARD FILE...
'use strict';
const fs = require('fs');
const path = require('path');
const [moduleDir, shard, ...files] = process.argv.slice(2);
const { encode, decode } = require(path.join(moduleDir, 'node_modules', 'gpt-3-encoder'));

const buf = fs.readFileSync(shard);
const header = new Int32Array(buf.buffer, buf.byteOffset, 256);
if (header[0] !== 20240520 || header[1] !== 1) {
  console.error(`bad shard header in ${shard}`);
  process.exit(1);
}
const got = [];
for (let i = 0; i < header[2]; i++) got.push(buf.readUInt16LE(1024 + 2 * i));

// encode() concatenates arrays per pre-token (quadratic on a whole file), so large texts are
// encoded one pre-token at a time with the library's own pattern: the same ids, in linear time.
// Small texts go through encode() whole.
const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
function encodeLarge(text) {
  if (text.length < 20000) return encode(text);
  const ids = [];
  for (const m of text.matchAll(pat)) for (const id of encode(m[0])) ids.push(id);
  return ids;
}
const want = [];
for (const f of files) {
  const text = fs.readFileSync(f, 'utf8');
  const ids = encodeLarge(text);
  if (decode(ids) !== text) {
    console.error(`oracle round trip failed on ${f}`);
    process.exit(1);
  }
  want.push(50256);
  for (const id of ids) want.push(id);
}
let first = -1;
for (let i = 0; i < Math.max(got.length, want.length); i++)
  if (got[i] !== want[i]) { first = i; break; }
if (first >= 0) {
  console.error(`mismatch at token ${first} of ${want.length} (cohort ${got.length} tokens)`);
  console.error(`  cohort: ${got.slice(Math.max(0, first - 5), first + 10).join(' ')}`);
  console.error(`  oracle: ${want.slice(Math.max(0, first - 5), first + 10).join(' ')}`);
  process.exit(1);
}
console.log(`identical: ${got.length} tokens over ${files.length} file(s)`);
