// Reasoning and tool calls end to end through the openai client, on `qwick serve` with a scripted
// engine (qwick_scripted_server: the reply is the text after "reply>" in the last user message,
// so the tokens are known). The client's own stream accumulator
// (chat.completions.stream(...).finalChatCompletion()) must rebuild the content and tool calls the
// whole response holds (reasoning it does not concatenate: see below). Also: the vLLM reasoning
// field name, a full queue, a client aborting, SIGTERM while a stream is open, 503 while the
// model loads, --reasoning-format none.
//
// usage: node server_scripted.mjs --server BIN       (exit 77: openai not installed)
import { checker, apiError, openaiModule, sleep, startServer } from "./server_common.mjs";
import { parseArgs } from "./common.mjs";

const args = parseArgs();
const OpenAI = await openaiModule();
const t = checker("server_scripted");

const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather by city",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" }, metric: { type: "boolean" } },
                  required: ["city"] } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { zone: { type: "string" } } } } },
];
const call = (name, params) =>
  `<tool_call>\n<function=${name}>\n` + Object.entries(params).map(([k, v]) => `<parameter=${k}>\n${v}\n</parameter>\n`).join("") +
  "</function>\n</tool_call>";
const script = "The user wants weather and time — two calls.\n</think>\n\nLet me look that up.\n\n" +
  call("get_weather", { city: "São Paulo", days: 3, metric: "true" }) + "\n" + call("get_time", { zone: "America/Sao_Paulo" });
const request = (s, extra = {}) => ({ model: "scripted", messages: [{ role: "user", content: `reply>${s}` }], tools, ...extra });

{
  const server = await startServer(args.server, []);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });

  await t.section("tool calls and reasoning, whole", async () => {
    const r = await client.chat.completions.create(request(script));
    const m = r.choices[0].message;
    t.eq(r.choices[0].finish_reason, "tool_calls", "finish_reason");
    t.eq(m.reasoning_content, "The user wants weather and time — two calls.", "reasoning_content");
    t.eq(m.content, "Let me look that up.", "content");
    t.eq(m.tool_calls.map((c) => [c.type, c.function.name, JSON.parse(c.function.arguments)]), [
      ["function", "get_weather", { city: "São Paulo", days: 3, metric: true }],
      ["function", "get_time", { zone: "America/Sao_Paulo" }],
    ], "tool calls with typed arguments");
    t.ok(m.tool_calls.every((c) => /^call_/.test(c.id)) && m.tool_calls[0].id !== m.tool_calls[1].id, "distinct call ids");
  });

  await t.section("tool calls and reasoning, streamed and reassembled by the client", async () => {
    const stream = client.chat.completions.stream(request(script));
    const deltas = [];
    stream.on("chunk", (c) => deltas.push(c));
    const final = await stream.finalChatCompletion();
    const m = final.choices[0].message;
    t.eq(final.choices[0].finish_reason, "tool_calls", "finish_reason");
    t.eq(m.content, "Let me look that up.", "content");
    // The accumulator copies fields it does not know (reasoning_content) from each delta over
    // the last, so only the deltas themselves hold the whole reasoning.
    const reasoning = deltas.map((c) => c.choices[0]?.delta?.reasoning_content ?? "").join("");
    t.eq(reasoning, "The user wants weather and time — two calls.", "reasoning_content deltas");
    t.ok(deltas.filter((c) => c.choices[0]?.delta?.reasoning_content).length > 1, "reasoning streamed in pieces");
    t.eq(m.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [
      ["get_weather", { city: "São Paulo", days: 3, metric: true }],
      ["get_time", { zone: "America/Sao_Paulo" }],
    ], "tool calls reassembled");
    // The deltas as llama-server sends them: the first for a call has index, id, type, name and
    // empty arguments; the rest only index and an arguments fragment.
    const callDeltas = deltas.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
    const starts = callDeltas.filter((d) => d.id);
    t.eq(starts.map((d) => [d.index, d.type, d.function.name, d.function.arguments]),
         [[0, "function", "get_weather", ""], [1, "function", "get_time", ""]], "call start deltas");
    t.ok(callDeltas.filter((d) => !d.id).every((d) => Object.keys(d).join() === "index,function" && Object.keys(d.function).join() === "arguments"),
         "argument deltas carry only index and arguments");
    t.ok(callDeltas.filter((d) => !d.id && d.index === 0).length >= 3, "arguments arrive in fragments");
  });

  await t.section("thinking off, tool_choice none, parallel_tool_calls false", async () => {
    // With thinking off the template closes the think block itself; the reply is all content.
    const r = await client.chat.completions.create(request("Plain answer.", { chat_template_kwargs: { enable_thinking: false } }));
    t.eq([r.choices[0].message.content, r.choices[0].message.reasoning_content], ["Plain answer.", undefined], "thinking off");
    const none = await client.chat.completions.create(request(script, { tool_choice: "none" }));
    t.ok(!none.choices[0].message.tool_calls && none.choices[0].message.content.includes("<tool_call>"), "tool_choice none: text");
    const one = await client.chat.completions.create(request(script, { parallel_tool_calls: false }));
    t.eq(one.choices[0].message.tool_calls?.map((c) => c.function.name), ["get_weather"], "parallel_tool_calls false");
  });

  await t.section("a tool result turn", async () => {
    const first = await client.chat.completions.create(request(script));
    const m = first.choices[0].message;
    const messages = [
      { role: "user", content: "weather?" },
      { role: "assistant", content: m.content, reasoning_content: m.reasoning_content, tool_calls: m.tool_calls },
      ...m.tool_calls.map((c) => ({ role: "tool", tool_call_id: c.id, content: '{"temp": 21}' })),
      { role: "user", content: "reply>Done.\n</think>\n\nIt is 21 degrees." },
    ];
    const r = await client.chat.completions.create({ model: "scripted", messages, tools });
    t.eq([r.choices[0].message.content, r.choices[0].finish_reason], ["It is 21 degrees.", "stop"], "answer after tool results");
  });

  await t.section("a client aborting mid-stream", async () => {
    const controller = new AbortController();
    const s = await client.chat.completions.create(request("x ".repeat(50)), { signal: controller.signal, stream: true });
    let n = 0;
    try {
      for await (const c of s) if (++n === 3) controller.abort();
    } catch {}
    const r = await client.chat.completions.create(request("Still fine.\n</think>\n\nyes"));
    t.eq(r.choices[0].message.content, "yes", "next request served");
  });

  t.eq(await server.stop(), { code: 0, signal: null }, "clean exit");
}

{
  // vLLM's field name; a queue of one; a slow engine.
  const server = await startServer(args.server, ["--reasoning-field", "reasoning", "--queue-size", "1", "--token-delay-ms", "20"]);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });

  await t.section("reasoning field named reasoning", async () => {
    const r = await client.chat.completions.create(request("Because.\n</think>\n\nAnswer."));
    t.eq([r.choices[0].message.reasoning, r.choices[0].message.reasoning_content, r.choices[0].message.content],
         ["Because.", undefined, "Answer."], "whole");
    const s = await client.chat.completions.create({ ...request("Because.\n</think>\n\nAnswer."), stream: true });
    let reasoning = "";
    for await (const c of s) reasoning += c.choices[0]?.delta?.reasoning ?? "";
    t.eq(reasoning, "Because.", "streamed");
  });

  await t.section("full queue: 503", async () => {
    const long = client.chat.completions.create(request("a ".repeat(40)));  // ~0.8 s
    await sleep(150);
    const waiting = client.chat.completions.create(request("b"));
    await sleep(150);
    const e = await apiError(client.chat.completions.create(request("c")));
    t.eq([e?.status, e?.error?.type, e?.error?.code], [503, "unavailable_error", 503], "third request refused");
    t.ok((await long).choices && (await waiting).choices, "the others complete");
  });

  await t.section("SIGTERM with a stream open", async () => {
    const s = await client.chat.completions.create({ ...request("z ".repeat(200)), stream: true });
    const read = (async () => {
      let n = 0;
      try {
        for await (const c of s) ++n;
        return { n, error: null };
      } catch (e) {
        return { n, error: e };
      }
    })();
    await sleep(200);
    const exit = await server.stop();
    const got = await read;
    t.eq(exit, { code: 0, signal: null }, "clean exit");
    t.ok(got.n > 2 && got.error && /shutting down/.test(got.error.message), "the stream ends with the shutdown error",
         `${got.n} chunks, ${got.error}`);
  });
}

{
  // While the model loads: /health and everything that needs the model answer 503.
  const server = await startServer(args.server, ["--load-delay-ms", "1500", "--reasoning-format", "none"], { waitHealthy: false });
  await t.section("503 while loading", async () => {
    const h = await fetch(`${server.url}/health`);
    t.eq([h.status, await h.json()], [503, { error: { message: "Loading model", type: "unavailable_error", param: null, code: 503 } }],
         "/health while loading");
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
    const e = await apiError(client.chat.completions.create(request("x")));
    t.eq([e?.status, e?.error?.message], [503, "Loading model"], "chat while loading");
    const m = await fetch(`${server.url}/metrics`);
    t.eq(m.status, 200, "metrics while loading");
    let status = 0;
    for (let i = 0; i < 100 && status !== 200; ++i, await sleep(50)) status = (await fetch(`${server.url}/health`)).status;
    t.eq(status, 200, "healthy once loaded");
    // --reasoning-format none: the raw text, think tag included, in the content.
    const r = await client.chat.completions.create(request("Because.\n</think>\n\nAnswer."));
    t.eq([r.choices[0].message.content, r.choices[0].message.reasoning_content], ["Because.\n</think>\n\nAnswer.", undefined],
         "--reasoning-format none");
  });
  t.eq(await server.stop(), { code: 0, signal: null }, "clean exit");
}

process.exit(t.done());
