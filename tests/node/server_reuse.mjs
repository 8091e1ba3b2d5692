// Prompt reuse across turns on `qwick serve` (tiny model, exact CPU numerics): a multi-turn
// conversation reports growing cached_tokens equal to the previous turn's history, prefills only
// the new tokens (timings.prompt_n, and the server's prompt-token counter), survives an unrelated
// request in between, and gives the same greedy output as a server with reuse off
// (--no-cache-prompt). The same holds with the default fast CPU numerics: their prefill does not
// depend on the chunking, and states reached by decoding (whose numerics differ) are not reused.
//
// usage: node server_reuse.mjs --qwick BIN --scratch DIR       (exit 77: openai not installed)
import { checker, openaiModule, postJson, startServer, tinyModel } from "./server_common.mjs";
import { parseArgs } from "./common.mjs";

const args = parseArgs();
const OpenAI = await openaiModule();
const t = checker("server_reuse");
const model = tinyModel(args.qwick, args.scratch);
// The conversations here are short: every prefix is worth saving for the test.
const common = ["serve", "-m", model, "-c", "2048", "-t", "1", "--cache-min-tokens", "0"];

const questions = ["What is the capital of France?", "And of Italy? Answer briefly.", "Compare the two cities.",
                   "Which one is older?", "Thanks! One more: which is larger?"];

async function conversation(url, { interleave = false } = {}) {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
  const messages = [{ role: "system", content: "You are a terse geography assistant." }];
  const turns = [];
  for (const q of questions) {
    messages.push({ role: "user", content: q });
    // The history this turn extends: everything up to this user message, as the template renders
    // it without the generation prompt (what the server snapshots).
    const history = await postJson(`${url}/apply-template`, { messages, add_generation_prompt: false });
    const historyTokens = (await postJson(`${url}/tokenize`, { content: history.json.prompt })).json.tokens.length;
    const r = await client.chat.completions.create({ model: "m", messages, temperature: 0, max_tokens: 16 });
    const m = r.choices[0].message;
    turns.push({ message: { content: m.content, reasoning_content: m.reasoning_content, finish: r.choices[0].finish_reason },
                 usage: r.usage, timings: r.timings, historyTokens });
    messages.push({ role: "assistant", content: m.content ?? "", ...(m.reasoning_content ? { reasoning_content: m.reasoning_content } : {}) });
    if (interleave) await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: `unrelated ${q}` }], temperature: 0, max_tokens: 4 });
  }
  return turns;
}

async function promptTokensCounter(url) {
  const m = await (await fetch(`${url}/metrics`)).text();
  return Number(m.match(/^llamacpp:prompt_tokens_total (\S+)$/m)[1]);
}

const cached = await startServer(args.qwick, [...common, "--exact"]);
const fresh = await startServer(args.qwick, [...common, "--exact", "--no-cache-prompt"]);
try {
  let withReuse, without;
  await t.section("a conversation with reuse", async () => {
    const before = await promptTokensCounter(cached.url);
    withReuse = await conversation(cached.url);
    const prefilled = (await promptTokensCounter(cached.url)) - before;
    t.eq(withReuse[0].usage.prompt_tokens_details.cached_tokens, 0, "turn 1: nothing cached");
    for (let i = 1; i < withReuse.length; ++i) {
      const turn = withReuse[i];
      const c = turn.usage.prompt_tokens_details.cached_tokens;
      // Turn i extends the history of turn i-1 (its reply is re-rendered without its reasoning).
      t.eq(c, withReuse[i - 1].historyTokens, `turn ${i + 1}: cached = the previous turn's history`);
      t.ok(c > withReuse[i - 1].usage.prompt_tokens_details.cached_tokens, `turn ${i + 1}: cached grows`);
      t.eq(turn.timings.cache_n, c, `turn ${i + 1}: timings.cache_n`);
      t.eq(turn.timings.prompt_n, turn.usage.prompt_tokens - c, `turn ${i + 1}: only the new tokens prefilled`);
    }
    const expected = withReuse.reduce((s, x) => s + x.usage.prompt_tokens - x.usage.prompt_tokens_details.cached_tokens, 0);
    t.eq(prefilled, expected, "the server's prompt-token counter counts only prefilled tokens");
  });
  await t.section("the same conversation without reuse", async () => {
    without = await conversation(fresh.url);
    t.ok(without.every((x) => x.usage.prompt_tokens_details.cached_tokens === 0), "--no-cache-prompt: nothing cached");
    t.eq(withReuse.map((x) => x.message), without.map((x) => x.message), "greedy output identical with and without reuse");
    t.eq(withReuse.map((x) => x.usage.prompt_tokens), without.map((x) => x.usage.prompt_tokens), "same prompts");
  });
  await t.section("with unrelated requests in between", async () => {
    const interleaved = await conversation(cached.url, { interleave: true });
    t.eq(interleaved.map((x) => x.message), without.map((x) => x.message), "greedy output identical");
    for (let i = 1; i < interleaved.length; ++i)
      t.ok(interleaved[i].usage.prompt_tokens_details.cached_tokens >= interleaved[i - 1].historyTokens,
           `turn ${i + 1}: restored from a snapshot`, JSON.stringify(interleaved[i].usage));
  });
  await t.section("cache_prompt false in the request", async () => {
    const r = await postJson(`${cached.url}/v1/chat/completions`, {
      messages: [{ role: "user", content: questions[0] }], temperature: 0, max_tokens: 4, cache_prompt: false });
    t.eq(r.json.usage.prompt_tokens_details.cached_tokens, 0, "no reuse when the request says so");
  });
} finally {
  t.eq(await cached.stop(), { code: 0, signal: null }, "clean exit");
  t.eq(await fresh.stop(), { code: 0, signal: null }, "clean exit");
}

// The default (fast) CPU numerics.
{
  const a = await startServer(args.qwick, common);
  const b = await startServer(args.qwick, [...common, "--no-cache-prompt"]);
  try {
    await t.section("fast numerics: reuse against none", async () => {
      const x = await conversation(a.url), y = await conversation(b.url);
      t.eq(x.map((turn) => turn.message), y.map((turn) => turn.message), "greedy output identical with and without reuse");
      t.ok(x.slice(1).every((turn) => turn.usage.prompt_tokens_details.cached_tokens > 0), "later turns reuse");
    });
  } finally {
    t.eq(await a.stop(), { code: 0, signal: null }, "clean exit");
    t.eq(await b.stop(), { code: 0, signal: null }, "clean exit");
  }
}

process.exit(t.done());
