// Forced and strict tool calls through `qwick serve` on a tiny random-weight model, with the
// official clients: Chat Completions (tool_choice required / a named function / none, strict
// tools), Responses (tool_choice, text.format) and Anthropic Messages (tool_choice any / tool).
// Whatever the weights pick, a reply that ends (not cut by max_tokens) must be a parsed tool call
// of an allowed tool whose arguments validate against its schema (ajv); what cannot be enforced is
// a 400 naming the keyword.
//
// usage: node server_tool_choice.mjs --qwick BIN --scratch DIR
import { checker, openaiModule, postJson, startServer, tinyModel } from "./server_common.mjs";
import { importOrSkip, parseArgs } from "./common.mjs";

const args = parseArgs();
const OpenAI = await openaiModule();
const Anthropic = (await importOrSkip("@anthropic-ai/sdk")).default;
const Ajv = (await importOrSkip("ajv")).default;
const t = checker("server_tool_choice");
const model = tinyModel(args.qwick, args.scratch);
const server = await startServer(args.qwick, ["serve", "-m", model, "-c", "2048", "-t", "1", "-a", "tiny"]);
const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 120000 });
const anthropic = new Anthropic({ baseURL: server.url, apiKey: "none", maxRetries: 0, timeout: 120000 });

// Bounded values, so that a random model ends its calls well within the token limit.
const weather = {
  type: "object",
  properties: {
    city: { type: "string", maxLength: 12 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
    flags: { type: "array", items: { type: "boolean" }, maxItems: 3 },
  },
  required: ["city", "days"],
  additionalProperties: false,
};
const lookup = { type: "object", properties: { id: { type: "integer", minimum: 0, maximum: 999 } }, required: ["id"] };
const schemas = { get_weather: weather, lookup };
const fn = (name, strict) => ({ type: "function", function: { name, parameters: schemas[name], ...(strict ? { strict } : {}) } });
const tools = [fn("get_weather"), fn("lookup")];
const ajv = new Ajv({ strict: false, logger: false });
const validators = Object.fromEntries(Object.entries(schemas).map(([k, s]) => [k, ajv.compile(s)]));

// Each call: an allowed name and arguments that validate. Returns how many calls there were.
function checkCalls(calls, allowed, what) {
  t.ok(calls.length >= 1, `${what}: a tool call`, JSON.stringify(calls));
  for (const c of calls) {
    t.ok(allowed.includes(c.name), `${what}: allowed tool ${c.name}`, allowed);
    const v = validators[c.name];
    t.ok(v !== undefined && v(c.args), `${what}: arguments validate`, `${JSON.stringify(c.args)} ${JSON.stringify(v?.errors)}`);
  }
}

const chat = (extra) => ({
  model: "tiny",
  messages: [{ role: "user", content: "What is the weather?" }],
  max_tokens: 1024,
  temperature: 1,
  chat_template_kwargs: { enable_thinking: false },
  tools,
  ...extra,
});

await t.section("Chat Completions: required, named, none", async () => {
  let ended = 0;
  for (const [choice, allowed] of [["required", ["get_weather", "lookup"]], [{ type: "function", function: { name: "lookup" } }, ["lookup"]]]) {
    for (let seed = 1; seed <= 3; ++seed) {
      const r = await openai.chat.completions.create(chat({ seed, tool_choice: choice }));
      const c = r.choices[0];
      if (c.finish_reason === "length") continue;
      ++ended;
      t.eq(c.finish_reason, "tool_calls", `finish_reason (seed ${seed})`);
      checkCalls((c.message.tool_calls ?? []).map((x) => ({ name: x.function.name, args: JSON.parse(x.function.arguments) })), allowed, `chat ${JSON.stringify(choice)} seed ${seed}`);
    }
  }
  t.ok(ended >= 3, "most forced calls end within the limit", ended);
  const single = await openai.chat.completions.create(chat({ seed: 5, tool_choice: "required", parallel_tool_calls: false }));
  if (single.choices[0].finish_reason !== "length") t.eq(single.choices[0].message.tool_calls?.length, 1, "parallel_tool_calls false: one call");
  const none = await openai.chat.completions.create(chat({ seed: 1, tool_choice: "none", max_tokens: 8 }));
  t.ok(none.choices[0].message.tool_calls === undefined || none.choices[0].message.tool_calls === null || none.choices[0].message.tool_calls.length === 0, "tool_choice none: no calls");
  // Streamed: the call arrives as tool-call deltas.
  const stream = await openai.chat.completions.create(chat({ seed: 2, tool_choice: { type: "function", function: { name: "lookup" } }, stream: true }));
  const streamed = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
      streamed[d.index] ??= { name: "", text: "" };
      streamed[d.index].name += d.function?.name ?? "";
      streamed[d.index].text += d.function?.arguments ?? "";
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  if (finish !== "length") checkCalls(streamed.map((c) => ({ name: c.name, args: JSON.parse(c.text) })), ["lookup"], "streamed named call");
});

await t.section("Chat Completions: strict tools under auto", async () => {
  for (let seed = 1; seed <= 3; ++seed) {
    const r = await openai.chat.completions.create(chat({ seed, tools: [fn("get_weather", true), fn("lookup", true)], max_tokens: 256 }));
    const calls = r.choices[0].message.tool_calls ?? [];
    if (calls.length > 0) checkCalls(calls.map((x) => ({ name: x.function.name, args: JSON.parse(x.function.arguments) })), ["get_weather", "lookup"], `strict auto seed ${seed}`);
    // A call cut by the limit is text; one that ended must have been read as a call.
    if (r.choices[0].finish_reason !== "length")
      t.ok(!(r.choices[0].message.content ?? "").includes("<tool_call>"), "no call left as text", r.choices[0].message.content);
  }
});

await t.section("Responses: tool_choice and text.format", async () => {
  const input = { model: "tiny", input: "Weather?", max_output_tokens: 1024, temperature: 1, reasoning: { effort: "none" } };
  const rtools = [{ type: "function", name: "get_weather", parameters: weather, strict: true }, { type: "function", name: "lookup", parameters: lookup, strict: true }];
  let ended = 0;
  for (const [choice, allowed] of [["required", ["get_weather", "lookup"]], [{ type: "function", name: "get_weather" }, ["get_weather"]]]) {
    for (let seed = 1; seed <= 2; ++seed) {
      const r = await openai.responses.create({ ...input, tools: rtools, tool_choice: choice, seed });
      if (r.status === "incomplete") continue;
      ++ended;
      checkCalls(r.output.filter((o) => o.type === "function_call").map((o) => ({ name: o.name, args: JSON.parse(o.arguments) })), allowed, `responses ${JSON.stringify(choice)}`);
      t.eq(r.tool_choice, choice, "the response repeats tool_choice");
    }
  }
  t.ok(ended >= 2, "most forced calls end", ended);
  const format = { type: "json_schema", name: "out", strict: true, schema: lookup };
  const j = await openai.responses.create({ ...input, text: { format }, seed: 3 });
  if (j.status === "completed") t.ok(validators.lookup(JSON.parse(j.output_text)), "text.format json_schema validates", j.output_text);
  t.eq(j.text?.format?.type, "json_schema", "the response repeats text.format");
  const o = await openai.responses.create({ ...input, text: { format: { type: "json_object" } }, seed: 4 });
  if (o.status === "completed") t.eq(typeof JSON.parse(o.output_text), "object", "text.format json_object");
});

await t.section("Anthropic Messages: tool_choice any and tool", async () => {
  const atools = [{ name: "get_weather", input_schema: weather }, { name: "lookup", input_schema: lookup, strict: true }];
  let ended = 0;
  for (const [choice, allowed] of [[{ type: "any" }, ["get_weather", "lookup"]], [{ type: "tool", name: "lookup" }, ["lookup"]]]) {
    for (let seed = 1; seed <= 2; ++seed) {
      const m = await anthropic.messages.create({
        model: "tiny", max_tokens: 1024, temperature: 1, thinking: { type: "disabled" }, tools: atools, tool_choice: choice,
        messages: [{ role: "user", content: "Weather?" }], metadata: { user_id: `seed-${seed}` },
      });
      if (m.stop_reason === "max_tokens") continue;
      ++ended;
      t.eq(m.stop_reason, "tool_use", "stop_reason");
      checkCalls(m.content.filter((b) => b.type === "tool_use").map((b) => ({ name: b.name, args: b.input })), allowed, `messages ${JSON.stringify(choice)}`);
    }
  }
  t.ok(ended >= 2, "most forced calls end", ended);
});

await t.section("refusals name the keyword", async () => {
  const refused = async (url, body, param, fragment) => {
    const r = await postJson(`${server.url}${url}`, body);
    t.eq([r.status, r.json?.error?.param ?? r.json?.error?.type], [400, param], `refused: ${JSON.stringify(body).slice(0, 140)}`);
    t.ok((r.json?.error?.message ?? "").includes(fragment), `message names ${fragment}`, r.json?.error?.message);
  };
  const mixed = { type: "object", properties: { a: { type: ["string", "integer"] } } };
  await refused("/v1/chat/completions", chat({ tools: [{ type: "function", function: { name: "f", parameters: mixed } }], tool_choice: "required" }), "tool_choice", "'type'");
  await refused("/v1/chat/completions", chat({ tools: [{ type: "function", function: { name: "f", strict: true, parameters: { type: "object", properties: { a: { not: {} } } } } }] }), "tools", "'not'");
  await refused("/v1/chat/completions", chat({ tool_choice: { type: "function", function: { name: "absent" } } }), "tool_choice", "absent");
  await refused("/v1/chat/completions", chat({ tools: undefined, tool_choice: "required" }), "tool_choice", "no tools");
  await refused("/v1/chat/completions", chat({ tool_choice: "required", response_format: { type: "json_object" } }), "tool_choice", "cannot both");
  await refused("/v1/responses", { model: "tiny", input: "x", tools: [{ type: "function", name: "f", parameters: mixed }], tool_choice: { type: "allowed_tools", tools: [] } }, "tool_choice", "allowed_tools");
  const h = await fetch(`${server.url}/health`);
  t.eq(h.status, 200, "the server keeps serving");
});

await server.stop();
process.exit(t.done());
