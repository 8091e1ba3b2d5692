// Prompt reuse through the agent-facing APIs on `qwick serve` (tiny model): the next turn of a
// conversation restores the state the previous turn saved, and the responses report it:
// Anthropic's usage.cache_read_input_tokens (with input_tokens the rest of the prompt, so their
// sum is count_tokens' total) and the Responses API's usage.input_tokens_details.cached_tokens,
// for a conversation sent whole each turn and one continued by previous_response_id.
//
// usage: node agent_api_reuse.mjs --qwick BIN --scratch DIR
import { checker, postJson, startServer, tinyModel } from "./server_common.mjs";
import { parseArgs } from "./common.mjs";

const args = parseArgs();
const t = checker("agent_api_reuse");
const model = tinyModel(args.qwick, args.scratch);
// Every prefix is worth a snapshot here (the tiny model's turns are shorter than the default minimum).
const server = await startServer(args.qwick, ["serve", "-m", model, "-c", "2048", "-t", "1", "--exact",
  "--cache-min-tokens", "0"]);
const questions = ["What is the capital of France?", "And of Italy?", "Which one is older?"];

await t.section("Messages: cache_read_input_tokens from the second turn on", async () => {
  const messages = [];
  for (const [i, q] of questions.entries()) {
    messages.push({ role: "user", content: q });
    const body = { model: "m", max_tokens: 8, temperature: 0, system: "Be terse.", messages };
    const r = await postJson(`${server.url}/v1/messages`, body);
    t.eq(r.status, 200, `turn ${i} status`);
    const u = r.json.usage;
    const count = await postJson(`${server.url}/v1/messages/count_tokens`, body);
    t.eq(u.input_tokens + u.cache_read_input_tokens, count.json.input_tokens, `turn ${i}: input + cache read = the prompt`);
    if (i === 0) t.eq(u.cache_read_input_tokens, 0, "first turn: nothing cached");
    else t.ok(u.cache_read_input_tokens > 0, `turn ${i}: the previous turn's state restored`, JSON.stringify(u));
    messages.push({ role: "assistant", content: r.json.content });
  }
});

await t.section("Responses: cached_tokens by previous_response_id", async () => {
  let previous = null;
  for (const [i, q] of questions.entries()) {
    const r = await postJson(`${server.url}/v1/responses`, {
      model: "m", max_output_tokens: 8, temperature: 0, input: q, ...(previous ? { previous_response_id: previous } : {}),
    });
    t.eq(r.status, 200, `turn ${i} status`);
    const u = r.json.usage;
    if (i === 0) t.eq(u.input_tokens_details.cached_tokens, 0, "first turn: nothing cached");
    else t.ok(u.input_tokens_details.cached_tokens > 0 && u.input_tokens_details.cached_tokens < u.input_tokens,
              `turn ${i}: the previous turn's state restored`, JSON.stringify(u));
    previous = r.json.id;
  }
});

const stopped = await server.stop();
t.eq(stopped.code, 0, "server exit status");
process.exit(t.done());
