// The OpenAI Responses API end to end through the official clients, on `qwick serve` with a
// scripted engine (qwick_scripted_server: the reply is the text after the last "reply>" in the
// prompt, up to the end of the turn or of a tool result, so a tool's result scripts the next
// reply). openai: responses.create and responses.stream with function tools (the SDK's stream
// accumulator must rebuild the response the whole one holds), a function-call loop continued by
// previous_response_id and by passing the items back, a tool call opened inside the reasoning,
// retrieve / delete, and the refusals as the SDK's typed errors. @openai/agents: an agent with
// one function tool completes a run (a call, the tool, the final answer).
//
// usage: node openai_responses.mjs --server BIN       (exit 77: openai or @openai/agents missing)
import { checker, openaiModule, startServer } from "./server_common.mjs";
import { importOrSkip, parseArgs } from "./common.mjs";

const args = parseArgs();
const OpenAI = await openaiModule();
const agents = await importOrSkip("@openai/agents");
const t = checker("openai_responses");

const tools = [{
  type: "function", name: "get_weather", description: "Weather by city", strict: false,
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] },
}];
const call = (name, params) =>
  `<tool_call>\n<function=${name}>\n` + Object.entries(params).map(([k, v]) => `<parameter=${k}>\n${v}\n</parameter>\n`).join("") +
  "</function>\n</tool_call>";
const script = "The user wants the weather.\n</think>\n\nLet me look.\n\n" + call("get_weather", { city: "São Paulo", days: 3 });
const request = (s, extra = {}) => ({ model: "scripted", tools, input: `reply>${s}`, ...extra });
// The response without what differs between two responses (ids, time) and what the stream
// helper adds (the parsed forms of structured outputs).
const added = new Set(["parsed", "parsed_arguments", "output_parsed"]);
const shape = (r) => JSON.parse(JSON.stringify(r, (k, v) => (added.has(k) ? undefined : v))
  .replace(/"(resp|rs|msg|fc|call)_[A-Za-z0-9]{20,}"/g, '"$1_X"').replace(/"created_at":\d+/, '"created_at":0'));

const server = await startServer(args.server, []);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });

await t.section("responses.create with function tools", async () => {
  const r = await client.responses.create(request(script));
  t.eq(r.status, "completed", "status");
  t.eq(r.output.map((i) => i.type), ["reasoning", "message", "function_call"], "item types");
  t.eq(r.output[0].content[0].text, "The user wants the weather.", "reasoning text");
  t.eq(r.output_text, "Let me look.", "output_text");
  t.eq([r.output[2].name, JSON.parse(r.output[2].arguments)], ["get_weather", { city: "São Paulo", days: 3 }], "call");
  t.ok(/^call_/.test(r.output[2].call_id), "call_id", r.output[2].call_id);
  t.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, "usage", JSON.stringify(r.usage));
});

await t.section("responses.stream reassembled by the SDK equals the whole response", async () => {
  const whole = await client.responses.create(request(script));
  const stream = client.responses.stream(request(script));
  const seq = [];
  let args = "";
  stream.on("event", (e) => seq.push(e.sequence_number));
  stream.on("response.function_call_arguments.delta", (e) => (args += e.delta));
  const final = await stream.finalResponse();
  t.eq(shape(final), shape(whole), "final response");
  t.eq(JSON.parse(args), { city: "São Paulo", days: 3 }, "argument deltas");
  t.eq(seq, seq.map((_, i) => i), "sequence numbers 0, 1, 2, ...");
});

await t.section("a tool call opened inside the reasoning is a function_call, whole and streamed", async () => {
  const inside = "I need the weather first.\n" + call("get_weather", { city: "Oslo" });
  const whole = await client.responses.create(request(inside));
  t.eq(whole.output.map((i) => i.type), ["reasoning", "function_call"], "items");
  t.eq(JSON.parse(whole.output[1].arguments), { city: "Oslo" }, "arguments");
  const final = await client.responses.stream(request(inside)).finalResponse();
  t.eq(shape(final), shape(whole), "streamed");
});

await t.section("a function-call loop by previous_response_id and by passing the items back", async () => {
  const first = await client.responses.create(request(script));
  const fc = first.output.find((i) => i.type === "function_call");
  const result = { type: "function_call_output", call_id: fc.call_id, output: "reply>ok\n</think>\n\nSunny in São Paulo." };
  const byId = await client.responses.create({ model: "scripted", tools, previous_response_id: first.id, input: [result] });
  t.eq(byId.output_text, "Sunny in São Paulo.", "answer by previous_response_id");
  t.eq(byId.previous_response_id, first.id, "previous_response_id echoed");
  const byItems = await client.responses.create({
    model: "scripted", tools, store: false, input: [{ role: "user", content: `reply>${script}` }, ...first.output, result],
  });
  t.eq(byItems.output_text, "Sunny in São Paulo.", "answer by items");
  t.eq(byItems.usage.input_tokens, byId.usage.input_tokens, "the same prompt both ways");
  const got = await client.responses.retrieve(byId.id);
  t.eq(shape(got), shape(byId), "retrieve");
  const deleted = await client.responses.delete(byId.id).then(() => true, (e) => e);
  t.eq(deleted, true, "delete");
  const gone = await client.responses.retrieve(byId.id).then(() => null, (e) => e);
  t.ok(gone instanceof OpenAI.NotFoundError, "retrieve after delete: NotFoundError", gone?.constructor?.name);
});

await t.section("refusals are the SDK's typed errors", async () => {
  const err = (p) => p.then(() => null, (e) => e);
  let e = await err(client.responses.create(request("x", { tool_choice: { type: "allowed_tools", mode: "auto", tools: [] } })));
  t.ok(e instanceof OpenAI.BadRequestError && e.param === "tool_choice", "tool_choice allowed_tools", e?.message);
  e = await err(client.responses.create(request("x", { text: { format: { type: "json_schema", name: "x" } } })));
  t.ok(e instanceof OpenAI.BadRequestError && e.param === "text.format.schema", "json_schema without a schema", e?.message);
  e = await err(client.responses.create(request("x", { previous_response_id: "resp_unknown" })));
  t.ok(e instanceof OpenAI.BadRequestError && e.param === "previous_response_id", "unknown previous_response_id", e?.message);
});

await t.section("an agent with one function tool completes a run", async () => {
  const { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } = agents;
  setTracingDisabled(true);
  setOpenAIAPI("responses");
  setDefaultOpenAIClient(client);
  const calls = [];
  const weather = tool({
    name: "get_weather", description: "Weather by city", strict: false,
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
    execute: async ({ city }) => {
      calls.push(city);
      return `reply>done\n</think>\n\nIt is sunny in ${city}.`;
    },
  });
  const agent = new Agent({ name: "Weather", instructions: "Answer with the weather.", model: "scripted", tools: [weather] });
  const result = await run(agent, "reply>" + "Look it up.\n</think>\n\n" + call("get_weather", { city: "Lima" }));
  t.eq(calls, ["Lima"], "the tool ran once with the model's argument");
  t.eq(result.finalOutput, "It is sunny in Lima.", "final output");
});

const stopped = await server.stop();
t.eq(stopped.code, 0, "server exit status");
process.exit(t.done());
