// qwick's chat template against the real template files rendered by @huggingface/jinja, on
// generated conversations: random role sequences (valid and not), system prompts, list-of-parts
// content, images and videos, reasoning in reasoning_content or in <think> tags, tool calls
// (wrapped in "function" or not) with arguments of every JSON type, consecutive tool results,
// tool definitions, unicode, and every keyword argument. Rejections must carry the same message.
//
// Inputs avoid the documented differences between @huggingface/jinja and Python Jinja (the
// reference transformers uses): whitespace other than "\n" right after </think> (JS strips it),
// the whitespace characters the two |trim implementations disagree on, integral floats and
// integer-like object keys (JS has one number type and reorders such keys). For the Qwen3.5
// template also booleans and null as tool arguments (JS renders |string of them differently).
//
// usage: node chat_template.mjs --qwick BIN --templates DIR; QWICK_TEST_SEED picks new cases.
import fs from "node:fs";
import path from "node:path";
import { importOrSkip, parseArgs, qwick, random, report, seedFromEnv } from "./common.mjs";

const { Template } = await importOrSkip("@huggingface/jinja");
const args = parseArgs();
const seed = seedFromEnv(4321);
const rng = random(seed);

const TEXTS = ["Hello!", "What's the weather in Paris?", "  padded  ", "\n\nnewlines first", "你好，世界", "Ünïcödé ✓",
               "emoji 👩‍👩‍👧 and 🇯🇵", "tabs\tinside", "<b>html & \"quotes\"</b>", "line 1\nline 2\n", "", "   ",
               "back\\slash", "नमस्ते", "مرحبا", "a<tool_call>b", "x </think>y", "<think>inner</think>tail", "ß", "\u00a0nbsp\u00a0"];
const NAMES = ["get_weather", "search", "write_file", "list_files", "calc", "翻訳"];

function text() {
  let s = rng.pick(TEXTS);
  if (rng.chance(0.3)) s += " " + rng.pick(TEXTS);
  return s;
}

function value(depth = 0) {
  switch (rng.int(depth > 1 ? 5 : 7)) {
    case 0: return text();
    case 1: return rng.int(2000) - 1000;
    case 2: return (rng.int(20000) - 10000) / 8 + 0.125;  // never integral
    case 3: return rng.chance(0.5);
    case 4: return null;
    case 5: return Array.from({ length: rng.int(4) }, () => value(depth + 1));
    default: {
      const o = {};
      for (let i = rng.int(4); i > 0; --i) o[rng.pick(["a", "key", "nested", "ü", "x_y"]) + i] = value(depth + 1);
      return o;
    }
  }
}

function content() {
  const r = rng.int(10);
  if (r < 6) return text();
  if (r === 6) return null;
  const parts = [];
  for (let i = 1 + rng.int(3); i > 0; --i) {
    const k = rng.int(8);
    if (k === 0) parts.push({ type: "image", image: "a.png" });
    else if (k === 1) parts.push({ type: "image_url", image_url: { url: "data:" } });
    else if (k === 2) parts.push({ type: "video", video: "v.mp4" });
    else parts.push({ type: "text", text: text() });
  }
  return parts;
}

function toolCall(scalarsOnlySafe) {
  const args = {};
  for (let i = rng.int(4); i > 0; --i) {
    let v = value();
    if (scalarsOnlySafe) while (v === null || typeof v === "boolean") v = value();
    args[rng.pick(["city", "days", "unit", "path", "content", "query", "opts"]) + (i > 1 ? i : "")] = v;
  }
  const call = { name: rng.pick(NAMES), arguments: args };
  if (rng.chance(0.15)) delete call.arguments;
  return rng.chance(0.8) ? { id: `call_${rng.int(999)}`, type: "function", function: call } : call;
}

function assistant(scalarsOnlySafe) {
  const m = { role: "assistant", content: content() };
  const r = rng.int(4);
  if (r === 0) m.reasoning_content = text();
  if (r === 1 && typeof m.content === "string") m.content = `<think>\n${text()}\n</think>\n\n${text().trimStart()}`;
  if (r === 2 && typeof m.content === "string") m.content = `${text()}</think>${rng.pick(["", "\n", "\n\n"])}${text().trimStart()}`;
  if (rng.chance(0.4)) m.tool_calls = Array.from({ length: 1 + rng.int(3) }, () => toolCall(scalarsOnlySafe));
  return m;
}

function tool() {
  const props = {};
  for (let i = rng.int(4); i > 0; --i)
    props[rng.pick(["city", "days", "unit", "q"]) + i] = { type: rng.pick(["string", "integer", "number", "boolean", "object", "array"]), description: text() };
  const fn = { name: rng.pick(NAMES), description: text(), parameters: { type: "object", properties: props, required: Object.keys(props).slice(0, 1) } };
  return rng.chance(0.85) ? { type: "function", function: fn } : fn;
}

function conversation(scalarsOnlySafe) {
  const messages = [];
  if (rng.chance(0.5)) messages.push({ role: "system", content: rng.chance(0.8) ? text() : [{ type: "text", text: text() }] });
  for (let turns = 1 + rng.int(6); turns > 0; --turns) {
    const r = rng.int(20);
    if (r < 8) messages.push({ role: "user", content: content() });
    else if (r < 14) messages.push(assistant(scalarsOnlySafe));
    else if (r < 17) for (let i = 1 + rng.int(3); i > 0; --i) messages.push({ role: "tool", tool_call_id: "c", content: text() });
    else if (r === 17) messages.push({ role: "user", content: `<tool_response>\n${text()}\n</tool_response>` });
    else if (r === 18) messages.push({ role: rng.pick(["system", "developer", "function"]), content: text() });
    else messages.push({ role: "user", content: text() });
  }
  const request = { messages };
  if (rng.chance(0.4)) request.tools = Array.from({ length: 1 + rng.int(3) }, tool);
  const kwargs = {};
  for (const k of ["enable_thinking", "preserve_thinking", "add_vision_id"]) if (rng.chance(0.35)) kwargs[k] = rng.chance(0.5);
  request.chat_template_kwargs = kwargs;
  request.add_generation_prompt = rng.chance(0.75);
  return request;
}

function reference(template, request) {
  try {
    const prompt = template.render({
      messages: request.messages, tools: request.tools ?? null, documents: null,
      add_generation_prompt: request.add_generation_prompt, bos_token: null, eos_token: "<|im_end|>",
      pad_token: "<|endoftext|>",
      ...request.chat_template_kwargs,
    });
    return { prompt };
  } catch (e) {
    return { error: e.message };
  }
}

let status = 0;
for (const [name, file, scalarsOnlySafe] of [["qwen3.6", "qwen3.6-chat_template.jinja", false],
                                            ["qwen3.5", "qwen3.5-chat_template.jinja", true]]) {
  const templatePath = path.join(args.templates, file);
  const template = new Template(fs.readFileSync(templatePath, "utf8"));
  const requests = Array.from({ length: 1500 }, () => conversation(scalarsOnlySafe));
  const ours = qwick(args.qwick, ["template", "--jsonl", "--chat-template", templatePath],
                     requests.map((r) => JSON.stringify(r)).join("\n") + "\n").split("\n");
  const failures = [];
  let errors = 0;
  for (let i = 0; i < requests.length; ++i) {
    const want = reference(template, requests[i]);
    const got = JSON.parse(ours[i]);
    if (want.error) ++errors;
    const same = want.error ? got.error === want.error : got.prompt === want.prompt;
    if (!same) failures.push({ request: requests[i], ours: got, want });
  }
  console.log(`${name}: ${errors} of ${requests.length} conversations rejected by the template`);
  status |= report(`chat template ${name} (seed ${seed})`, requests.length, failures);
}
process.exit(status);
