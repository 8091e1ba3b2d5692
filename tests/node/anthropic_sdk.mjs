// The Anthropic Messages API end to end through the official @anthropic-ai/sdk client, on
// `qwick serve` with a scripted engine (qwick_scripted_server: the reply is the text after the
// last "reply>" in the prompt, up to the end of the turn or of a tool result). messages.create
// and messages.stream with tools and thinking; the SDK's stream helper must reassemble the same
// message the whole response holds; a tool round trip where the tool's result scripts the next
// reply; a tool call the model opens inside its reasoning; count_tokens; the API key; errors as the
// SDK's typed errors.
//
// usage: node anthropic_sdk.mjs --server BIN       (exit 77: @anthropic-ai/sdk not installed)
import { checker, startServer } from "./server_common.mjs";
import { importOrSkip, parseArgs } from "./common.mjs";

const args = parseArgs();
const Anthropic = (await importOrSkip("@anthropic-ai/sdk")).default;
const t = checker("anthropic_sdk");

const tools = [{
  name: "get_weather", description: "Weather by city",
  input_schema: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] },
}];
const call = (name, params) =>
  `<tool_call>\n<function=${name}>\n` + Object.entries(params).map(([k, v]) => `<parameter=${k}>\n${v}\n</parameter>\n`).join("") +
  "</function>\n</tool_call>";
const script = "The user wants the weather.\n</think>\n\nLet me look.\n\n" + call("get_weather", { city: "São Paulo", days: 3 });
const request = (s, extra = {}) => ({
  model: "scripted", max_tokens: 1024, tools, thinking: { type: "enabled", budget_tokens: 512 },
  messages: [{ role: "user", content: `reply>${s}` }], ...extra,
});
// The message without what differs between two responses (ids) and what the stream helper adds
// (parsed_output).
const shape = ({ parsed_output, ...m }) => ({ ...m, id: "MSG", content: m.content.map((b) => (b.type === "tool_use" ? { ...b, id: "TOOLU" } : b)) });

const server = await startServer(args.server, ["--api-key", "secret"]);
const client = new Anthropic({ baseURL: server.url, apiKey: "secret", maxRetries: 0 });

await t.section("messages.create with tools and thinking", async () => {
  const m = await client.messages.create(request(script));
  t.eq(m.type, "message", "type");
  t.eq(m.stop_reason, "tool_use", "stop_reason");
  t.eq(m.content.map((b) => b.type), ["thinking", "text", "tool_use"], "block types");
  t.eq(m.content[0].thinking, "The user wants the weather.", "thinking");
  t.eq(m.content[1].text, "Let me look.", "text");
  t.eq([m.content[2].name, m.content[2].input], ["get_weather", { city: "São Paulo", days: 3 }], "tool_use input, typed");
  t.ok(/^toolu_/.test(m.content[2].id), "tool_use id", m.content[2].id);
  t.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0, "usage", JSON.stringify(m.usage));
  const count = await client.messages.countTokens({ model: "scripted", tools, messages: request(script).messages,
                                                     thinking: { type: "enabled", budget_tokens: 512 } });
  t.eq(count.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens, "count_tokens = the prompt");
});

await t.section("messages.stream reassembled by the SDK equals the whole message", async () => {
  const whole = await client.messages.create(request(script));
  const stream = client.messages.stream(request(script));
  const types = [];
  let thinking = "", json = "";
  stream.on("streamEvent", (e) => types.push(e.type));
  stream.on("thinking", (d) => (thinking += d));
  stream.on("inputJson", (d) => (json += d));
  const final = await stream.finalMessage();
  t.eq(shape(final), shape(whole), "final message");
  t.eq(thinking, "The user wants the weather.", "thinking deltas");
  t.eq(JSON.parse(json), { city: "São Paulo", days: 3 }, "input_json deltas");
  t.eq(types[0], "message_start", "first event");
  t.eq(types.at(-1), "message_stop", "last event");
  t.ok(types.filter((x) => x === "content_block_start").length === 3, "three blocks", types.join(","));
});

await t.section("a tool call opened inside the reasoning is a tool_use, whole and streamed", async () => {
  const inside = "I need the weather first.\n" + call("get_weather", { city: "Oslo" });
  const whole = await client.messages.create(request(inside));
  t.eq(whole.content.map((b) => b.type), ["thinking", "tool_use"], "blocks");
  t.eq(whole.content[1].input, { city: "Oslo" }, "input");
  t.eq(whole.stop_reason, "tool_use", "stop_reason");
  const final = await client.messages.stream(request(inside)).finalMessage();
  t.eq(shape(final), shape(whole), "streamed");
});

await t.section("a tool round trip", async () => {
  const first = await client.messages.create(request(script));
  const use = first.content.find((b) => b.type === "tool_use");
  const second = await client.messages.create({
    ...request(""),
    messages: [
      { role: "user", content: "reply>" + script },
      { role: "assistant", content: first.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: use.id,
                                  content: "reply>Done.\n</think>\n\nSão Paulo: sunny for 3 days." }] },
    ],
  });
  t.eq(second.stop_reason, "end_turn", "stop_reason");
  t.eq(second.content.at(-1).text, "São Paulo: sunny for 3 days.", "answer from the tool result");
});

await t.section("stop sequences and thinking disabled", async () => {
  const m = await client.messages.create(request("a\n</think>\n\nOne. Two. Three.", { stop_sequences: ["Two"] }));
  t.eq([m.stop_reason, m.stop_sequence, m.content.at(-1).text], ["stop_sequence", "Two", "One."], "stop_sequence");
  const plain = await client.messages.create(request("Just text.", { thinking: { type: "disabled" }, tools: undefined }));
  t.eq(plain.content, [{ type: "text", text: "Just text." }], "no thinking block");
});

await t.section("errors are the SDK's typed errors", async () => {
  const err = async (p) => p.then(() => null, (e) => e);
  let e = await err(client.messages.create({ ...request("x"), tool_choice: { type: "tool" } }));
  t.ok(e instanceof Anthropic.BadRequestError, "tool_choice tool without a name: BadRequestError", e?.constructor?.name);
  t.eq(e?.error?.error?.type, "invalid_request_error", "error type");
  t.ok(/tool_choice.name/.test(e?.error?.error?.message), "message says why", e?.error?.error?.message);
  e = await err(client.messages.create({ ...request("x"), messages: [{ role: "user", content: [
    { type: "tool_result", tool_use_id: "toolu_missing", content: "r" }] }] }));
  t.ok(e instanceof Anthropic.BadRequestError && /no earlier assistant tool_use/.test(e.error.error.message),
       "tool_result without its tool_use", e?.message);
  const bad = new Anthropic({ baseURL: server.url, apiKey: "wrong", maxRetries: 0 });
  e = await err(bad.messages.create(request("x")));
  t.ok(e instanceof Anthropic.AuthenticationError, "wrong x-api-key: AuthenticationError", e?.constructor?.name);
});

const stopped = await server.stop();
t.eq(stopped.code, 0, "server exit status");
process.exit(t.done());
