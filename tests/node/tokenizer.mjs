// qwick's tokenizer against the Rust tokenizers library (@anush008/tokenizers) on generated text:
// unicode of many scripts, combining marks, digits, whitespace runs, contractions, emoji, control
// and odd code points, special tokens written literally, long runs. Both fixture tokenizer.json
// files and the one `qwick make-model` writes are checked; encode with and without special-token
// matching, and decode of the reference ids and of random ids (lossy UTF-8 included).
//
// usage: node tokenizer.mjs --qwick BIN --fixtures DIR --scratch DIR
//   (DIR/qwen3/tokenizer.json, DIR/qwen35-regex/tokenizer.json); QWICK_TEST_SEED picks new cases.
import fs from "node:fs";
import path from "node:path";
import { importOrSkip, parseArgs, qwick, random, report, seedFromEnv } from "./common.mjs";
import { textGenerator } from "./text_corpus.mjs";

const { Tokenizer } = await importOrSkip("@anush008/tokenizers");
const args = parseArgs();
const seed = seedFromEnv(1234);
const rng = random(seed);
const text = textGenerator(rng);

const texts = [""];
for (let i = 0; i < 400; ++i) texts.push(text());
let big = "";
while (big.length < 60000) big += text();
texts.push(big);

// The reference for encoding without --special: the file with its special=true added tokens
// removed. The library numbers the remaining added tokens anew, so its ids are mapped back to the
// file's through their text.
function withoutSpecial(file, reference) {
  const j = JSON.parse(fs.readFileSync(file, "utf8"));
  j.added_tokens = j.added_tokens.filter((t) => !t.special);
  const plain = Tokenizer.fromString(JSON.stringify(j));
  const base = reference.getVocabSize(false);
  return {
    encode: async (text) => {
      const ids = (await plain.encode(text, null, { addSpecialTokens: false })).getIds();
      return ids.map((id) => (id < base ? id : reference.tokenToId(plain.idToToken(id))));
    },
  };
}

async function check(name, file) {
  const reference = Tokenizer.fromFile(file);
  const full = { encode: async (text) => (await reference.encode(text, null, { addSpecialTokens: false })).getIds() };
  const plain = withoutSpecial(file, reference);
  const failures = [];
  let total = 0;
  for (const [special, ref] of [[true, full], [false, plain]]) {
    const flags = ["tokenize", "--jsonl", "--tokenizer", file, ...(special ? ["--special"] : [])];
    const ours = qwick(args.qwick, flags, texts.map((t) => JSON.stringify(t)).join("\n") + "\n").split("\n");
    for (let i = 0; i < texts.length; ++i) {
      const want = JSON.stringify(await ref.encode(texts[i]));
      ++total;
      if (ours[i] !== want) failures.push({ special, text: texts[i].slice(0, 300), ours: ours[i]?.slice(0, 300), want: want.slice(0, 300) });
    }
  }
  // Decode: the reference ids of every text, and random id sequences (any bytes, so invalid UTF-8).
  const vocab = reference.getVocabSize(true);
  const idLists = [];
  for (const t of texts.slice(0, 200)) idLists.push((await reference.encode(t, null, { addSpecialTokens: false })).getIds());
  for (let i = 0; i < 200; ++i) idLists.push(Array.from({ length: rng.int(12) }, () => rng.int(vocab)));
  for (const skip of [false, true]) {
    const flags = ["detokenize", "--jsonl", "--tokenizer", file, ...(skip ? ["--skip-special"] : [])];
    const ours = qwick(args.qwick, flags, idLists.map((l) => JSON.stringify(l)).join("\n") + "\n").split("\n");
    for (let i = 0; i < idLists.length; ++i) {
      const want = JSON.stringify(await reference.decode(idLists[i], skip));
      ++total;
      if (ours[i] !== want) failures.push({ decode: idLists[i], skip, ours: ours[i], want });
    }
  }
  return report(`tokenizer ${name} (seed ${seed})`, total, failures);
}

let status = 0;
status |= await check("qwen3", path.join(args.fixtures, "qwen3/tokenizer.json"));
status |= await check("qwen35-regex", path.join(args.fixtures, "qwen35-regex/tokenizer.json"));
for (const preset of ["tiny", "small"]) {
  const dir = path.join(args.scratch, `node-${preset}`);
  qwick(args.qwick, ["make-model", "--preset", preset, dir]);
  status |= await check(`make-model ${preset}`, path.join(dir, "tokenizer.json"));
}
process.exit(status);
