// Time to first token of turn 2 of a long conversation, against a running `qwick serve`:
// turn 1 is a long user message (about --words words) answered with --reply tokens; turn 2 adds
// a short question. Prints, for each turn, the prompt size, the reused (cached) tokens, the
// server's prompt time and the time to the first streamed token as the client sees it.
// Run it once against a server with prompt reuse (the default) and once against one started
// with --no-cache-prompt. Needs only Node (fetch); no npm packages.
//
// usage: node bench/server_ttft.mjs --url http://127.0.0.1:8080 [--words 1500] [--reply 8]
const args = Object.fromEntries(process.argv.slice(2).reduce((a, x, i, all) => (i % 2 ? a : [...a, [x.slice(2), all[i + 1]]]), []));
const url = args.url ?? "http://127.0.0.1:8080";
const words = Number(args.words ?? 1500), reply = Number(args.reply ?? 8);

// Deterministic filler text.
const vocabulary = ["model", "layer", "expert", "token", "state", "cache", "prompt", "reuse", "kernel", "memory",
                    "the", "of", "and", "a", "to", "in", "is", "that", "for", "it"];
let seed = 7;
const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
const filler = Array.from({ length: words }, () => vocabulary[next() % vocabulary.length]).join(" ");

// One streamed turn: time to the first delta with text, and the final usage/timings.
async function turn(messages) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ messages, max_tokens: reply, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const decoder = new TextDecoder();
  let buffer = "", ttft = null, usage = null, timings = null, content = "", reasoning = "";
  for await (const bytes of r.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const chunk = JSON.parse(event.slice(6));
      const delta = chunk.choices?.[0]?.delta ?? {};
      if (ttft === null && (delta.content || delta.reasoning_content || delta.tool_calls)) ttft = performance.now() - t0;
      content += delta.content ?? "";
      reasoning += delta.reasoning_content ?? "";
      usage = chunk.usage ?? usage;
      timings = chunk.timings ?? timings;
    }
  }
  return { ttft, usage, timings, content, reasoning };
}

const messages = [{ role: "system", content: "You are a helpful assistant." },
                  { role: "user", content: `Summarise these notes:\n${filler}` }];
const results = [];
for (const [label, question] of [["turn 1", null], ["turn 2", "Thanks. Now list three keywords from it."]]) {
  if (question) messages.push({ role: "user", content: question });
  const r = await turn(messages);
  messages.push({ role: "assistant", content: r.content, reasoning_content: r.reasoning });
  results.push(r);
  console.log(`${label}: prompt ${r.usage.prompt_tokens} tokens, ${r.usage.prompt_tokens_details.cached_tokens} reused, ` +
              `${r.timings.prompt_n} prefilled in ${(r.timings.prompt_ms / 1000).toFixed(2)} s; ` +
              `time to first token ${(r.ttft / 1000).toFixed(2)} s`);
}
