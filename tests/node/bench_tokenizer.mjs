// Tokenizer encode throughput: qwick against the Rust tokenizers library (@anush008/tokenizers)
// on the same text, one thread each, load time excluded.
//
// The text is this repository's sources, docs and JSON fixtures (code and English) followed by
// generated multilingual text (text_corpus.mjs), about 1.5 MB. Each side encodes it RUNS times;
// the first run (empty word caches) and the median of the rest are reported.
//
// usage: node bench_tokenizer.mjs --qwick BIN --tokenizer FILE [--runs 5] [--repo DIR]
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { importOrSkip, parseArgs, qwick, random } from "./common.mjs";
import { textGenerator } from "./text_corpus.mjs";

const { Tokenizer } = await importOrSkip("@anush008/tokenizers");
const args = parseArgs();
const runs = Number(args.runs ?? 5);
const repo = args.repo ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

function repoText(dir) {
  let out = "";
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith(".") || ["node_modules", "build"].includes(entry.name)) continue;
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) out += repoText(p);
    else if (/\.(cpp|h|md|json|mjs|txt|cmake|jinja)$/.test(entry.name) && fs.statSync(p).size < 4 << 20)
      out += fs.readFileSync(p, "utf8");
  }
  return out;
}

let text = repoText(repo);
const generate = textGenerator(random(99));
const target = text.length + 800000;
while (text.length < target) text += generate();
const bytes = Buffer.byteLength(text);

const ours = JSON.parse(qwick(args.qwick, ["tokenize", "--special", "--tokenizer", args.tokenizer, "--bench", String(runs)], text));

const reference = Tokenizer.fromFile(args.tokenizer);
const seconds = [];
let tokens = 0;
for (let r = 0; r < runs; ++r) {
  const t0 = process.hrtime.bigint();
  tokens = (await reference.encode(text, null, { addSpecialTokens: false })).getIds().length;
  seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
const cold = seconds[0];
const warm = seconds.slice(1).sort((a, b) => a - b);
const median = warm.length ? warm[Math.floor(warm.length / 2)] : cold;

const row = (name, b, n, c, m) =>
  `| ${name.padEnd(26)} | ${(b / 1e6 / m).toFixed(2).padStart(8)} | ${(n / m / 1e6).toFixed(3).padStart(10)} | ${(b / 1e6 / c).toFixed(2).padStart(12)} |`;
console.log(`text: ${(bytes / 1e6).toFixed(2)} MB, ${tokens} tokens (${path.basename(path.dirname(args.tokenizer))}), ${runs} runs`);
console.log("| encoder                    |     MB/s |   Mtok/s   | MB/s (cold)  |");
console.log("|----------------------------|----------|------------|--------------|");
console.log(row("qwick", ours.bytes, ours.tokens, ours.cold_seconds, ours.median_seconds));
console.log(row("@anush008/tokenizers 0.6.0", bytes, tokens, cold, median));
if (ours.tokens !== tokens) {
  console.log(`token counts differ: qwick ${ours.tokens}, reference ${tokens}`);
  process.exit(1);
}
