// `qwick serve` on a tiny random-weight model, driven by the official openai client (openai@6)
// and plain fetch: chat (whole and streamed, usage chunk, timings, logprobs, logit_bias, stop
// strings, seeded sampling), /v1/completions, models, health, metrics, props, tokenize /
// detokenize / apply-template, the command line (--help, environment variables), and every error
// case, each answered in the OpenAI error shape without disturbing the requests after it.
//
// usage: node server_api.mjs --qwick BIN --scratch DIR       (exit 77: openai not installed)
import { spawnSync } from "node:child_process";
import { checker, apiError, openaiModule, postJson, startServer, tinyModel } from "./server_common.mjs";
import { parseArgs } from "./common.mjs";

const args = parseArgs();
const OpenAI = await openaiModule();
const t = checker("server_api");
const model = tinyModel(args.qwick, args.scratch);
const KEY = "sk-qwick-test";
const server = await startServer(args.qwick, [
  "serve", "-m", model, "-c", "512", "-t", "1", "--api-key", KEY, "--max-body-size", "65536", "-a", "tiny-test",
]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
const auth = { Authorization: `Bearer ${KEY}` };
const user = (content) => [{ role: "user", content }];
const greedy = { model: "tiny-test", temperature: 0, max_tokens: 24 };

async function chatText(body) {
  const r = await client.chat.completions.create({ ...greedy, ...body });
  return r.choices[0].message;
}

await t.section("health, models, props", async () => {
  const h = await fetch(`${server.url}/health`);
  t.eq([h.status, await h.json()], [200, { status: "ok" }], "/health without a key");
  const models = await client.models.list();
  t.eq(models.data.map((m) => [m.id, m.object, m.owned_by]), [["tiny-test", "model", "qwick"]], "/v1/models");
  t.eq(models.data[0].meta.n_ctx, 512, "models meta.n_ctx");
  t.eq(models.data[0].meta.n_vocab, 512, "models meta.n_vocab");
  const props = await (await fetch(`${server.url}/props`, { headers: auth })).json();
  t.eq(props.default_generation_settings.n_ctx, 512, "props n_ctx");
  t.ok(props.chat_template.includes("<|im_start|>"), "props chat_template");
  // generation_config.json of the tiny model: temperature 1, top_k 20, top_p 0.95.
  t.eq([props.default_generation_settings.params.temperature, props.default_generation_settings.params.top_k],
       [1, 20], "defaults from generation_config.json");
});

await t.section("chat, whole", async () => {
  const r = await client.chat.completions.create({ ...greedy, messages: user("Hello!") });
  t.eq(r.object, "chat.completion", "object");
  t.ok(/^chatcmpl-[A-Za-z0-9]{32}$/.test(r.id), "id", r.id);
  t.eq(r.model, "tiny-test", "model is the alias");
  t.eq(r.choices[0].finish_reason, "length", "finish_reason length");
  t.eq(r.usage.completion_tokens, 24, "completion_tokens = max_tokens");
  t.eq(r.usage.total_tokens, r.usage.prompt_tokens + 24, "total_tokens");
  t.ok(typeof r.usage.prompt_tokens_details.cached_tokens === "number", "cached_tokens present");
  t.ok(r.timings && r.timings.predicted_n === 24 && r.timings.prompt_n + r.timings.cache_n === r.usage.prompt_tokens,
       "timings", JSON.stringify(r.timings));
  const m = r.choices[0].message;
  t.eq(m.role, "assistant", "role");
  // Thinking on (the template opens <think>): what the model wrote first is reasoning.
  t.ok(typeof m.reasoning_content === "string" && m.reasoning_content.length > 0, "reasoning_content", JSON.stringify(m));
  // Greedy is deterministic.
  const again = await chatText({ messages: user("Hello!") });
  t.eq([again.content, again.reasoning_content], [m.content, m.reasoning_content], "greedy repeats");
  // max_completion_tokens works as well.
  const r2 = await client.chat.completions.create({ ...greedy, max_tokens: undefined, max_completion_tokens: 5, messages: user("Hi") });
  t.eq(r2.usage.completion_tokens, 5, "max_completion_tokens");
});

await t.section("chat, streamed, with usage", async () => {
  const whole = await chatText({ messages: user("Stream me"), chat_template_kwargs: { enable_thinking: false } });
  const stream = await client.chat.completions.create({
    ...greedy, messages: user("Stream me"), chat_template_kwargs: { enable_thinking: false },
    stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  t.eq(chunks[0].choices[0].delta, { role: "assistant", content: null }, "first chunk carries the role");
  const ids = new Set(chunks.map((c) => c.id));
  t.eq(ids.size, 1, "one id for every chunk");
  t.eq(new Set(chunks.map((c) => c.created)).size, 1, "one created for every chunk");
  const finish = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
  t.eq(finish.map((c) => [c.choices[0].finish_reason, c.choices[0].delta]), [["length", {}]], "one finish chunk, empty delta");
  const last = chunks[chunks.length - 1];
  t.eq(last.choices, [], "usage chunk has no choices");
  t.eq(last.usage?.completion_tokens, 24, "usage chunk");
  t.ok(last.timings?.predicted_n === 24, "timings on the last chunk");
  let content = "";
  for (const c of chunks) if (c.choices.length && typeof c.choices[0].delta.content === "string") content += c.choices[0].delta.content;
  t.eq(content, whole.content ?? "", "streamed content = whole content");
  t.ok(!chunks.some((c) => c.choices.length && c.choices[0].delta.reasoning_content), "no reasoning with thinking off");
  // Without include_usage: no usage chunk.
  const plain = await client.chat.completions.create({ ...greedy, max_tokens: 4, messages: user("x"), stream: true });
  const pc = [];
  for await (const c of plain) pc.push(c);
  t.ok(pc.every((c) => c.choices.length === 1 && !c.usage), "no usage chunk unless asked");
  // The raw bytes: data lines, blank line separators, [DONE] last.
  const raw = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST", headers: { ...auth, "Content-Type": "application/json" },
    body: JSON.stringify({ ...greedy, max_tokens: 3, messages: user("raw"), stream: true }),
  });
  t.eq(raw.headers.get("content-type"), "text/event-stream", "SSE content type");
  const text = await raw.text();
  t.ok(text.endsWith("data: [DONE]\n\n"), "ends with [DONE]");
  t.ok(text.split("\n\n").filter((e) => e).every((e) => e.startsWith("data: ") || e.startsWith(":")), "only data events");
});

await t.section("logprobs and logit_bias", async () => {
  const r = await client.chat.completions.create({ ...greedy, max_tokens: 6, messages: user("lp"), logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs?.content ?? [];
  t.eq(lp.length, 6, "one logprob entry per token");
  t.ok(lp.every((e) => e.logprob <= 0 && e.top_logprobs.length === 3 && Array.isArray(e.bytes)), "entry shape");
  // Greedy: the chosen token is the most likely.
  t.ok(lp.every((e) => Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6), "greedy picks the top token");
  t.ok(lp.every((e) => e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob), "top_logprobs sorted");
  const biased = await client.chat.completions.create({ ...greedy, max_tokens: 5, messages: user("bias"), logprobs: true, logit_bias: { 65: 100 } });
  t.eq(biased.choices[0].logprobs.content.map((e) => e.id), [65, 65, 65, 65, 65], "logit_bias +100 forces the token");
  // Streamed logprobs ride on the chunks.
  const s = await client.chat.completions.create({ ...greedy, max_tokens: 5, messages: user("lp"), logprobs: true, stream: true });
  let n = 0;
  for await (const c of s) n += c.choices[0]?.logprobs?.content?.length ?? 0;
  t.eq(n, 5, "streamed logprobs cover every token");
});

await t.section("stop strings", async () => {
  const base = await client.completions.create({ ...greedy, prompt: "The weather today is", max_tokens: 32 });
  const text = base.choices[0].text;
  // A stop string from the middle of the greedy text (printable ASCII only).
  let stop = null;
  for (let i = 4; i + 3 <= text.length && !stop; ++i) {
    const s = text.slice(i, i + 3);
    if (/^[A-Za-z]{3}$/.test(s)) stop = s;
  }
  if (!t.ok(stop, "a stop string candidate in the greedy text", text)) return;
  const expected = text.slice(0, text.indexOf(stop));
  const cut = await client.completions.create({ ...greedy, prompt: "The weather today is", max_tokens: 32, stop: [stop, "\u0000never"] });
  t.eq([cut.choices[0].text, cut.choices[0].finish_reason], [expected, "stop"], "completion cut before the stop string");
  const stream = await client.completions.create({ ...greedy, prompt: "The weather today is", max_tokens: 32, stop, stream: true });
  let streamed = "";
  let finish = null;
  for await (const c of stream) {
    streamed += c.choices[0]?.text ?? "";
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  t.eq([streamed, finish], [expected, "stop"], "streamed completion cut before the stop string, nothing leaked");
});

await t.section("seeded sampling", async () => {
  const body = { model: "m", messages: user("Tell me a story"), temperature: 1.0, top_k: 0, top_p: 1, max_tokens: 16 };
  const a = await client.chat.completions.create({ ...body, seed: 42 });
  const b = await client.chat.completions.create({ ...body, seed: 42 });
  const c = await client.chat.completions.create({ ...body, seed: 43 });
  const text = (r) => JSON.stringify(r.choices[0].message);
  t.eq(text(a), text(b), "same seed, same output");
  t.ok(text(a) !== text(c), "another seed, another output");
});

await t.section("penalties", async () => {
  const body = { ...greedy, max_tokens: 32, messages: user("Repeat after me: la la la la") };
  const plain = JSON.stringify(await chatText(body));
  const llama = JSON.stringify(await chatText({ ...body, repeat_penalty: 3 }));
  const vllm = JSON.stringify(await chatText({ ...body, repetition_penalty: 3 }));
  t.ok(llama !== plain, "repeat_penalty changes the greedy output");
  t.eq(vllm, llama, "repetition_penalty is the same as repeat_penalty");
  t.ok(JSON.stringify(await chatText({ ...body, presence_penalty: 2 })) !== plain, "presence_penalty changes it");
  t.ok(JSON.stringify(await chatText({ ...body, frequency_penalty: 2 })) !== plain, "frequency_penalty changes it");
});

await t.section("completions", async () => {
  const r = await client.completions.create({ ...greedy, prompt: "Once upon a time", max_tokens: 8, logprobs: 2 });
  t.eq(r.object, "text_completion", "object");
  t.ok(/^cmpl-/.test(r.id), "id");
  // (A random model may write a stop token early: then fewer, and finish_reason "stop".)
  const n = r.usage.completion_tokens;
  t.ok(r.choices[0].finish_reason === "length" ? n === 8 : r.choices[0].finish_reason === "stop" && n < 8, "usage",
       JSON.stringify([n, r.choices[0].finish_reason]));
  t.eq(r.choices[0].logprobs.tokens.length, n, "legacy logprobs tokens");
  t.eq(r.choices[0].logprobs.tokens.join(""), r.choices[0].text, "tokens concatenate to the text");
  t.ok(r.choices[0].logprobs.top_logprobs.every((o) => Object.keys(o).length >= 1), "top_logprobs objects");
  // Token ids as the prompt give the same as the text they tokenize to.
  const tok = await postJson(`${server.url}/tokenize`, { content: "Once upon a time" }, auth);
  const r2 = await client.completions.create({ ...greedy, prompt: tok.json.tokens, max_tokens: 8 });
  t.eq(r2.choices[0].text, r.choices[0].text, "token-id prompt");
  const s = await client.completions.create({ ...greedy, prompt: "Once upon a time", max_tokens: 8, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let usage = null;
  for await (const c of s) {
    text += c.choices[0]?.text ?? "";
    usage = c.usage ?? usage;
  }
  t.eq(text, r.choices[0].text, "streamed completion text");
  t.eq(usage?.completion_tokens, n, "streamed completion usage");
});

await t.section("tokenize, detokenize, apply-template", async () => {
  const tok = await postJson(`${server.url}/tokenize`, { content: "Hello world <|im_end|>" }, auth);
  t.ok(Array.isArray(tok.json.tokens) && tok.json.tokens.length > 2, "tokenize");
  const det = await postJson(`${server.url}/detokenize`, { tokens: tok.json.tokens }, auth);
  t.eq(det.json.content, "Hello world <|im_end|>", "detokenize round trip");
  const plain = await postJson(`${server.url}/tokenize`, { content: "<|im_end|>", parse_special: false }, auth);
  const special = await postJson(`${server.url}/tokenize`, { content: "<|im_end|>" }, auth);
  t.eq(special.json.tokens.length, 1, "special token parsed");
  t.ok(plain.json.tokens.length > 1, "parse_special false: text");
  const pieces = await postJson(`${server.url}/tokenize`, { content: "Hi there", with_pieces: true }, auth);
  t.eq(pieces.json.tokens.map((p) => p.piece).join(""), "Hi there", "with_pieces");
  const conv = { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }],
                 chat_template_kwargs: { enable_thinking: false } };
  const applied = await postJson(`${server.url}/apply-template`, conv, auth);
  const cli = spawnSync(args.qwick, ["template", "-m", model], { input: JSON.stringify(conv), encoding: "utf8" });
  t.eq(applied.json.prompt, cli.stdout, "apply-template = qwick template");
  t.ok(applied.json.prompt.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "generation prompt, thinking off");
  const history = await postJson(`${server.url}/apply-template`, { ...conv, add_generation_prompt: false }, auth);
  t.ok(applied.json.prompt.startsWith(history.json.prompt) && history.json.prompt.endsWith("<|im_end|>\n"), "add_generation_prompt false");
});

await t.section("errors", async () => {
  const err = async (body, status, param, type = "invalid_request_error") => {
    const e = await apiError(client.chat.completions.create(body));
    const what = JSON.stringify(body).slice(0, 100);
    if (!t.ok(e, `rejected: ${what}`)) return;
    t.eq([e.status, e.error?.type, e.error?.param ?? null, e.error?.code], [status, type, param, status], `error for ${what}`);
    t.ok(typeof e.error?.message === "string" && e.error.message.length > 10, "a message", e.error?.message);
    return e;
  };
  await err({ ...greedy, messages: user("x"), temperature: "hot" }, 400, "temperature");
  await err({ ...greedy, messages: user("x"), max_tokens: 2.5 }, 400, "max_tokens");
  await err({ ...greedy, messages: user("x"), max_tokens: 0 }, 400, "max_tokens");
  await err({ ...greedy, messages: user("x"), stop: [1] }, 400, "stop[0]");
  await err({ ...greedy, messages: [{ role: "robot", content: "x" }] }, 400, "messages[0].role");
  await err({ ...greedy, messages: [{ content: "x" }] }, 400, "messages[0].role");
  await err({ ...greedy, messages: [] }, 400, "messages");
  await err({ ...greedy }, 400, "messages");
  await err({ ...greedy, messages: [{ role: "user", content: 5 }] }, 400, "messages[0].content");
  await err({ ...greedy, messages: user("x"), n: 2 }, 400, "n");
  await err({ ...greedy, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:," } }] }] }, 400,
            "messages[0].content[0].type");
  await err({ ...greedy, messages: user("x"), response_format: { type: "json_schema", json_schema: { name: "a", schema: { not: {} } } } },
            400, "response_format");
  await err({ ...greedy, messages: user("x"), response_format: { type: "xml" } }, 400, "response_format");
  const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }];
  await err({ ...greedy, messages: user("x"), tool_choice: "required" }, 400, "tool_choice");
  await err({ ...greedy, messages: user("x"), tools, tool_choice: { type: "function", function: { name: "g" } } }, 400, "tool_choice");
  await err({ ...greedy, messages: user("x"), tools, tool_choice: { type: "function" } }, 400, "tool_choice");
  await err({ ...greedy, messages: user("x"), tools: [{ type: "retrieval" }] }, 400, "tools[0].type");
  await err({ ...greedy, messages: user("x"), logit_bias: { 99999: 1 } }, 400, "logit_bias.99999");
  await err({ ...greedy, messages: user("x"), top_logprobs: 2 }, 400, "top_logprobs");
  await err({ ...greedy, messages: user("x"), chat_template_kwargs: [] }, 400, "chat_template_kwargs");
  // What the chat template itself refuses.
  await err({ ...greedy, messages: [{ role: "user", content: "x" }, { role: "system", content: "late" }] }, 400, "messages");
  await err({ ...greedy, messages: [{ role: "assistant", content: "x", tool_calls: [{ type: "function", function: { name: "f", arguments: "{not json" } }] }, { role: "user", content: "y" }] },
            400, "messages[0].tool_calls[0].function.arguments");
  // Context: 600 tokens do not fit 512.
  const long = "word ".repeat(600);
  const e = await err({ ...greedy, messages: user(long) }, 400, null, "exceed_context_size_error");
  t.ok(e?.error?.n_ctx === 512 && e?.error?.n_prompt_tokens > 512, "n_ctx and n_prompt_tokens", JSON.stringify(e?.error));
  // Completions.
  const cerr = async (body, param) => {
    const x = await apiError(client.completions.create(body));
    t.eq([x?.status, x?.error?.param], [400, param], `completions error ${JSON.stringify(body).slice(0, 80)}`);
  };
  await cerr({ ...greedy, prompt: ["a", "b"] }, "prompt");
  await cerr({ ...greedy, prompt: "a", echo: true }, "echo");
  await cerr({ ...greedy, prompt: "a", best_of: 3 }, "best_of");
  await cerr({ ...greedy, prompt: [1, 99999] }, "prompt");
  await cerr({ ...greedy, prompt: "" }, "prompt");

  // Raw HTTP: invalid JSON, a non-object body, an unknown endpoint, an oversize body, API keys.
  const raw = await postJson(`${server.url}/v1/chat/completions`, '{"messages": [', auth);
  t.eq([raw.status, raw.json?.error?.type, raw.json?.error?.code], [400, "invalid_request_error", 400], "invalid JSON");
  t.ok(raw.json?.error?.message.includes("not valid JSON"), "invalid JSON message", raw.text);
  const arr = await postJson(`${server.url}/v1/chat/completions`, "[1,2]", auth);
  t.eq(arr.status, 400, "a JSON array body");
  const nf = await fetch(`${server.url}/v1/nothing`, { headers: auth });
  t.eq([nf.status, (await nf.json()).error?.type], [404, "not_found_error"], "unknown endpoint");
  const big = await postJson(`${server.url}/v1/chat/completions`, { ...greedy, messages: user("x".repeat(70000)) }, auth).catch((x) => ({ status: `threw ${x}` }));
  t.eq([big.status, big.json?.error?.code], [413, 413], "oversize body: 413");
  t.ok(big.json?.error?.message?.includes("65536"), "413 names the limit", big.text);
  const nokey = await postJson(`${server.url}/v1/chat/completions`, { ...greedy, messages: user("x") });
  t.eq([nokey.status, nokey.json?.error?.type], [401, "authentication_error"], "missing API key");
  const wrong = await apiError(new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "sk-wrong", maxRetries: 0 })
    .chat.completions.create({ ...greedy, messages: user("x") }));
  t.eq([wrong?.status, wrong?.error?.type], [401, "authentication_error"], "wrong API key");
  const tokNoKey = await postJson(`${server.url}/tokenize`, { content: "x" });
  t.eq(tokNoKey.status, 401, "tokenize needs the key");
  const badTok = await postJson(`${server.url}/detokenize`, { tokens: [1, -5] }, auth);
  t.eq([badTok.status, badTok.json?.error?.param], [400, "tokens"], "detokenize bad id");

  // Nothing above disturbed the server.
  const after = await client.chat.completions.create({ ...greedy, max_tokens: 3, messages: user("still there?") });
  t.eq(after.usage.completion_tokens, 3, "still serving after the errors");
});

await t.section("metrics", async () => {
  const m = await (await fetch(`${server.url}/metrics`, { headers: auth })).text();
  const value = (name) => Number((m.match(new RegExp(`^${name.replace(/[:]/g, "\\$&")} (\\S+)$`, "m")) ?? [])[1]);
  t.ok(value("llamacpp:tokens_predicted_total") > 100, "tokens predicted counter", m.slice(0, 400));
  t.ok(value("llamacpp:prompt_tokens_total") > 20, "prompt tokens counter");
  t.ok(value("llamacpp:predicted_tokens_seconds") > 0, "generation throughput");
  t.eq(value("llamacpp:requests_processing"), 0, "nothing running");
  t.eq(value("llamacpp:requests_deferred"), 0, "nothing waiting");
  t.ok(value("qwick:time_to_first_token_seconds_count") >= 20, "time to first token histogram");
  t.ok(/# TYPE qwick:time_to_first_token_seconds histogram/.test(m), "histogram type line");
});

await t.section("command line", async () => {
  const help = spawnSync(args.qwick, ["serve", "--help"], { encoding: "utf8" });
  for (const opt of ["--host", "--port", "--alias", "--api-key", "--ctx-size", "--model", "--threads", "--temp",
                     "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--presence-penalty", "--frequency-penalty",
                     "--seed", "--n-predict", "--chat-template-kwargs", "--reasoning-format", "--queue-size",
                     "--max-body-size", "--cache-ram", "--cache-ram-fraction", "--receive-timeout", "--threads-http", "LLAMA_ARG_PORT", "LLAMA_ARG_HOST",
                     "LLAMA_API_KEY", "LLAMA_ARG_CTX_SIZE", "LLAMA_ARG_CACHE_RAM"])
    t.ok(help.stdout.includes(opt), `--help lists ${opt}`);
  // Environment variables configure it like flags.
  const s2 = await startServer(args.qwick, ["serve", "-m", model, "-t", "1"], {
    env: { LLAMA_ARG_CTX_SIZE: "256", LLAMA_ARG_ALIAS: "from-env", LLAMA_CHAT_TEMPLATE_KWARGS: '{"enable_thinking": false}' },
  });
  try {
    const c2 = new OpenAI({ baseURL: `${s2.url}/v1`, apiKey: "none", maxRetries: 0 });
    const models = await c2.models.list();
    t.eq([models.data[0].id, models.data[0].meta.n_ctx], ["from-env", 256], "LLAMA_ARG_ALIAS, LLAMA_ARG_CTX_SIZE");
    const r = await c2.chat.completions.create({ ...greedy, max_tokens: 4, messages: user("x") });
    t.ok(r.choices[0].message.reasoning_content === undefined, "server chat_template_kwargs: thinking off",
         JSON.stringify(r.choices[0].message));
  } finally {
    t.eq(await s2.stop(), { code: 0, signal: null }, "SIGTERM: clean exit");
  }
  // Bad values are refused before anything loads.
  for (const [flag, value, message] of [["--chat-template-kwargs", "[1]", "must be a JSON object"],
                                        ["--queue-size", "0", "at least 1"], ["--reasoning-format", "think", "deepseek, auto or none"],
                                        ["--port", "70000", "0 .. 65535"], ["--cache-ram", "lots", "expected an integer"],
                                        ["--cache-ram-fraction", "1.5", "in (0, 1]"], ["--receive-timeout", "0", "must be positive"]]) {
    const bad = spawnSync(args.qwick, ["serve", flag, value, "-m", "/nonexistent"], { encoding: "utf8", timeout: 20000 });
    t.ok(bad.status === 1 && bad.stderr.includes(message) && !bad.stderr.includes("listening"), `bad ${flag}`, bad.stderr);
  }
});

t.eq(await server.stop(), { code: 0, signal: null }, "SIGTERM: clean exit");
process.exit(t.done());
