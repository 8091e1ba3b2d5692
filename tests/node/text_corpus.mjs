// Generated text for the tokenizer tests and benchmark: words in several scripts, combining
// marks, digits, whitespace runs, contractions, emoji, control and odd code points, special tokens
// written literally (and near misses), long runs of one character, code.
const SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                  "<tool_response>", "<|vision_start|>", "<|image_pad|>", "<|fim_prefix|>", "<|repo_name|>"];
const NEAR_MISSES = ["<|im_start", "<|IM_END|>", "< think>", "</think", "<|endoftext|", "<tool_call >", "<<think>>"];
const WORDS = ["the", "The", "THE", "hello", "world", "tokenizer", "Qwen", "naïve", "café", "straße", "ﬁle", "don't",
               "WE'LL", "it's", "I'M", "they're", "you'VE", "she'd", "x'S", "rock'n'roll", "l'été", "O’Neil"];
const SCRIPTS = [
  [0x41, 0x5a], [0x61, 0x7a], [0xc0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x530, 0x58f], [0x5d0, 0x5ea],
  [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe7f], [0x10a0, 0x10ff], [0x3040, 0x30ff], [0x4e00, 0x4fff],
  [0xac00, 0xad00], [0x1f300, 0x1f64f], [0x1f900, 0x1f9ff], [0x2000, 0x206f], [0x2190, 0x22ff], [0xff00, 0xffef],
  // Scripts of Unicode 15, 16 and 17 (newer than some libraries' tables): CJK extension H, Kawi,
  // Nag Mundari, Ol Onal, Garay, Sidetic.
  [0x31350, 0x323af], [0x11f00, 0x11f5a], [0x1e4d0, 0x1e4f9], [0x1e5d0, 0x1e5fa], [0x10d40, 0x10d8f], [0x10940, 0x10959],
  // Anything at all, unassigned code points included (no surrogates).
  [0x0, 0xd7ff], [0xe000, 0x10ffff],
];
// Combining marks, some newer than Unicode 9.0 (the reference normalizes with 9.0 data).
const MARKS = [0x300, 0x301, 0x308, 0x316, 0x327, 0x334, 0x64b, 0x650, 0x651, 0x93e, 0x94d, 0xe31, 0xe48, 0x5b4, 0x20dd,
               0xfe0f, 0x200d, 0x1abf, 0x1dfa, 0x1df6, 0x1e944, 0x10eab, 0x1e130, 0x1e4ec, 0x11930, 0x11935];
const ODD = [0x0, 0x1, 0x7, 0x1b, 0x1c, 0x1f, 0x7f, 0x85, 0xa0, 0xad, 0x180e, 0x200b, 0x200c, 0x2028, 0x2029, 0x202f,
             0x3000, 0xfeff, 0xfffd, 0xe000, 0xf8ff, 0x10ffff, 0x1d11e, 0x17f, 0x212a, 0x130, 0x1e9e];
const SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\t\t\n", "\u00a0", "\u3000 "];

// Returns text(): a random text drawn with `rng` (common.mjs random()).
export function textGenerator(rng) {
  const codepoint = (range) => String.fromCodePoint(range[0] + rng.int(range[1] - range[0] + 1));
  function piece() {
    switch (rng.int(16)) {
      case 0: return rng.pick(WORDS);
      case 1: return String(rng.int(10 ** (1 + rng.int(8))));
      case 2: return rng.pick(SPACES);
      case 3: { let s = ""; const r = rng.pick(SCRIPTS); for (let i = 1 + rng.int(8); i > 0; --i) s += codepoint(r); return s; }
      case 4: return String.fromCodePoint(rng.pick(MARKS));
      case 5: return codepoint(rng.pick(SCRIPTS)) + String.fromCodePoint(rng.pick(MARKS), rng.pick(MARKS), rng.pick(MARKS));
      case 6: return String.fromCodePoint(rng.pick(ODD));
      case 7: return rng.pick(SPECIALS);
      case 8: return rng.pick(NEAR_MISSES);
      case 9: return rng.pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "’s", "'x"]);
      case 10: return rng.pick([".", ",", "!?", "...", "—", "(", ")", "{\"a\": [1, 2]}", "#", "==", "->", "http://x.io/a?b=c", "$", "%"]);
      case 11: return rng.pick(["👩‍👩‍👧‍👦", "👋🏽", "🇫🇷", "❤️", "🏳️‍🌈", "1️⃣"]);
      case 12: return "e\u0301" + rng.pick(["", "\u0323", "\u0302"]);  // NFD input
      case 13: { const c = rng.pick(["a", "ab", "x", " ", "7", "é", "字"]); return c.repeat(50 + rng.int(200)); }
      case 14: return rng.pick(["def f(x):\n    return x\n", "int main() {\n\treturn 0;\n}\n", "SELECT * FROM t;"]);
      default: return rng.pick(WORDS) + rng.pick(["", " ", ",", ".", "\n"]);
    }
  }

  function text() {
    let s = "";
    for (let i = rng.int(25); i >= 0; --i) s += piece();
    return s;
  }
  return text;
}
