// bpe_anchor.js: the anchor of bench_tokenize.sh: encodes files with the npm package
// gpt-3-encoder 1.1.4 (one pre-token at a time with the package's own pattern, since its
// encode() concatenates arrays quadratically) after one untimed warm-up pass, and prints
// "tokens seconds" of REPEAT timed passes.
// usage: node bpe_anchor.js MODULE_DIR REPEAT FILE...
'use strict';
const fs = require('fs');
const path = require('path');
const [moduleDir, repeat, ...files] = process.argv.slice(2);
const { encode } = require(path.join(moduleDir, 'node_modules', 'gpt-3-encoder'));
const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const texts = files.map(f => fs.readFileSync(f, 'utf8'));
const pass = () => {
  let n = 0;
  for (const text of texts)
    for (const m of text.matchAll(pat)) n += encode(m[0]).length;
  return n;
};
pass(); // warm-up: JIT and the encoder's cache
const t0 = process.hrtime.bigint();
let n = 0;
for (let r = 0; r < Number(repeat); r++) n += pass();
const s = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(`${n} ${s}`);
