// Constrained output through `qwick serve` on a tiny random-weight model: whatever the weights
// pick, the output must follow the requested schema or grammar. Outputs are validated with ajv
// (an independent JSON Schema validator); refused schemas must be a 400 naming the keyword.
//
// With --bench DIR (the JSONSchemaBench sample, ../shared/constrained/jsonschemabench) it also
// runs every --stride'th schema there: compiled, generated within 1,024 tokens, validated. A
// missing folder is reported and that part skipped.
//
// usage: node server_constrained.mjs --qwick BIN --scratch DIR [--bench DIR] [--stride N]
import fs from "node:fs";
import path from "node:path";
import { checker, apiError, openaiModule, postJson, startServer, tinyModel } from "./server_common.mjs";
import { importOrSkip, parseArgs } from "./common.mjs";

const args = parseArgs();
const OpenAI = await openaiModule();
const Ajv = (await importOrSkip("ajv")).default;
const addFormats = (await importOrSkip("ajv-formats")).default;
const t = checker("server_constrained");
const model = tinyModel(args.qwick, args.scratch);
const server = await startServer(args.qwick, ["serve", "-m", model, "-c", "2048", "-t", "1", "-a", "tiny"]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 120000 });

// The formats the engine enforces are checked; any other format is an annotation (as in draft
// 2020-12), which ajv (not strict) ignores.
const enforced = ["date", "time", "date-time", "uuid", "email", "ipv4", "hostname", "uri", "uri-reference"];
function compileSchema(schema) {
  const ajv = new Ajv({ strict: false, validateSchema: false, logger: false });
  addFormats(ajv, enforced);
  return ajv.compile(schema);
}

const chat = (extra) => ({
  model: "tiny",
  messages: [{ role: "user", content: "Answer in JSON." }],
  max_tokens: 1024,
  temperature: 1,
  chat_template_kwargs: { enable_thinking: false },
  ...extra,
});
const schemaFormat = (schema) => ({ type: "json_schema", json_schema: { name: "out", strict: true, schema } });

// One constrained generation; {status: "valid" | "cut" | "refused" | "invalid", detail}.
async function generate(schema, seed) {
  try {
    const r = await client.chat.completions.create(chat({ seed, response_format: schemaFormat(schema) }));
    const choice = r.choices[0];
    if (choice.finish_reason === "length") return { status: "cut" };
    let value;
    try {
      value = JSON.parse(choice.message.content);
    } catch (e) {
      return { status: "invalid", detail: `not JSON: ${choice.message.content.slice(0, 200)}` };
    }
    let validate;
    try {
      validate = compileSchema(schema);
    } catch (e) {
      return { status: "unchecked", detail: `ajv cannot compile the schema: ${e.message}` };
    }
    return validate(value) ? { status: "valid" } : { status: "invalid", detail: `${JSON.stringify(validate.errors).slice(0, 300)} for ${choice.message.content.slice(0, 300)}` };
  } catch (e) {
    if (e.status === 400) return { status: "refused", detail: e.error?.message ?? e.message, param: e.error?.param };
    throw e;
  }
}

await t.section("response_format json_object and json_schema (strict)", async () => {
  for (let seed = 1; seed <= 3; ++seed) {
    const r = await client.chat.completions.create(chat({ seed, response_format: { type: "json_object" } }));
    if (r.choices[0].finish_reason === "stop") {
      const v = JSON.parse(r.choices[0].message.content);
      t.ok(v !== null && typeof v === "object" && !Array.isArray(v), "json_object gives an object", r.choices[0].message.content);
    }
  }
  const schema = {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 16 },
      age: { type: "integer", minimum: 0, maximum: 150 },
      email: { type: "string", format: "email" },
      tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 3 },
      nested: { $ref: "#/$defs/node" },
    },
    required: ["name", "age"],
    additionalProperties: false,
    $defs: { node: { type: "object", properties: { v: { type: ["number", "null"] }, next: { $ref: "#/$defs/node" } }, required: ["v"] } },
  };
  let valid = 0;
  for (let seed = 1; seed <= 6; ++seed) {
    const g = await generate(schema, seed);
    t.ok(g.status === "valid" || g.status === "cut", `schema output validates (seed ${seed})`, g.detail);
    valid += g.status === "valid";
  }
  t.ok(valid >= 2, "most generations end within 1,024 tokens", valid);
  // Streamed: the deltas concatenate to valid JSON.
  const stream = await client.chat.completions.create(chat({ seed: 9, stream: true, response_format: schemaFormat({ type: "array", items: { type: "boolean" }, maxItems: 5 }) }));
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  t.eq(finish, "stop", "streamed finish_reason");
  t.ok(Array.isArray(JSON.parse(text)) && JSON.parse(text).every((x) => typeof x === "boolean"), "streamed JSON array", text);
});

await t.section("grammar and json_schema fields, /v1/completions", async () => {
  const r = await postJson(`${server.url}/v1/completions`, {
    prompt: "Say:", max_tokens: 64, temperature: 1, seed: 4, grammar: 'root ::= ("yes" | "no") ", " [0-9]{2,3} "!"',
  });
  t.eq(r.status, 200, "grammar request");
  t.ok(/^(yes|no), [0-9]{2,3}!$/.test(r.json?.choices?.[0]?.text ?? ""), "text follows the grammar", r.text);
  t.eq(r.json?.choices?.[0]?.finish_reason, "stop", "ends where the grammar is complete");
  const s = await postJson(`${server.url}/v1/chat/completions`, chat({ seed: 2, json_schema: { type: "integer", minimum: 10, maximum: 99 } }));
  t.eq(s.status, 200, "json_schema field");
  const n = Number(s.json?.choices?.[0]?.message?.content);
  t.ok(Number.isInteger(n) && n >= 10 && n <= 99, "integer within bounds", s.text);
  // Thinking on: the reasoning is free, the constraint starts after </think> (here the tiny model
  // may never close it, so only the request's success is checked).
  const think = await postJson(`${server.url}/v1/chat/completions`, { ...chat({ seed: 1, response_format: { type: "json_object" } }), chat_template_kwargs: {}, max_tokens: 16 });
  t.eq(think.status, 200, "constraint with thinking on");
});

await t.section("refusals name the keyword or the grammar error", async () => {
  const refused = async (body, param, fragment, url = "/v1/chat/completions") => {
    const r = await postJson(`${server.url}${url}`, body);
    t.eq([r.status, r.json?.error?.param], [400, param], `refused: ${JSON.stringify(body).slice(0, 120)}`);
    t.ok((r.json?.error?.message ?? "").includes(fragment), `message names ${fragment}`, r.json?.error?.message);
  };
  await refused(chat({ response_format: schemaFormat({ type: "object", properties: { a: { not: { type: "null" } } } }) }), "response_format", "'not'");
  await refused(chat({ response_format: schemaFormat({ type: "array", uniqueItems: true, minItems: 2 }) }), "response_format", "'uniqueItems'");
  await refused(chat({ response_format: schemaFormat({ type: "string", pattern: "(a)\\1" }) }), "response_format", "'pattern'");
  await refused(chat({ json_schema: { $ref: "https://example.com/s.json" } }), "json_schema", "'$ref'");
  await refused({ prompt: "x", grammar: "root ::= (" }, "grammar", "syntax error", "/v1/completions");
  await refused({ prompt: "x", grammar: "root ::= root \"a\" | \"b\"" }, "grammar", "left-recursive", "/v1/completions");
  await refused(chat({ grammar: 'root ::= "a"', response_format: { type: "json_object" } }), "grammar", "cannot both");
  await refused(chat({ response_format: { type: "json_schema" } }), "response_format", "json_schema");
});

await t.section("adversarial schemas are refused or bounded", async () => {
  const t0 = Date.now();
  // Deep recursion through $ref, deep nesting, a huge enum, a catastrophic regex.
  const deep = { $ref: "#/$defs/a", $defs: { a: { type: "array", items: { $ref: "#/$defs/a" } } } };
  let nested = { type: "integer" };
  for (let i = 0; i < 40; ++i) nested = { type: "array", items: nested };
  const huge = { enum: Array.from({ length: 20000 }, (_, i) => `v${i}-${"x".repeat(i % 17)}`) };
  const catastrophic = { type: "string", pattern: "^(a+)+(b|bb)*$" };
  for (const schema of [deep, nested, huge, catastrophic]) {
    const g = await generate(schema, 5);
    t.ok(["valid", "cut", "refused"].includes(g.status), `bounded: ${JSON.stringify(schema).slice(0, 60)}`, g.detail);
  }
  t.ok(Date.now() - t0 < 240000, "within the time bound", Date.now() - t0);
  const h = await fetch(`${server.url}/health`);
  t.eq(h.status, 200, "the server keeps serving");
});

if (args.bench) {
  await t.section(`JSONSchemaBench sample (${args.bench})`, async () => {
    if (!fs.existsSync(args.bench)) {
      console.log(`skipped: ${args.bench} does not exist (the sample lives beside the checkout as ../shared)`);
      return;
    }
    const stride = Number(args.stride ?? 10);
    const files = fs.readFileSync(path.join(args.bench, "MANIFEST.tsv"), "utf8").split("\n").slice(1).filter(Boolean).map((l) => l.split("\t")[0]);
    const counts = { valid: 0, cut: 0, refused: 0, invalid: 0, unchecked: 0 };
    for (let i = 0; i < files.length; i += stride) {
      const schema = JSON.parse(fs.readFileSync(path.join(args.bench, files[i]), "utf8"));
      const g = await generate(schema, 1);
      counts[g.status]++;
      if (g.status === "invalid") t.ok(false, `${files[i]} output validates`, g.detail);
      if (g.status === "refused") t.ok(/keyword '|grammar|ambiguous|too large|nest/.test(g.detail ?? ""), `${files[i]} refusal says why`, g.detail);
    }
    console.log(`jsonschemabench every ${stride}th schema: ${JSON.stringify(counts)}`);
    t.eq(counts.invalid, 0, "every finished generation validates");
  });
}

await server.stop();
process.exit(t.done());
