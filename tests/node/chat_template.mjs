// qwick's chat template against the real template files rendered by a Jinja engine, on generated
// conversations: random role sequences (valid and not), system prompts, list-of-parts content,
// images and videos, reasoning in reasoning_content or in <think> tags, tool calls (wrapped in
// "function" or not) with arguments of every JSON type, consecutive tool results, tool
// definitions, unicode, and every keyword argument. Rejections must carry the same message.
//
// Two references (--oracle):
//   hf      @huggingface/jinja (npm). Inputs avoid its documented differences from Python Jinja:
//           whitespace other than "\n" right after </think> (it strips all), the characters the two
//           |trim implementations disagree on, and for the Qwen3.5 template booleans and null as
//           tool arguments (it renders |string of them differently).
//   python  Python Jinja set up as transformers does (jinja2_render.py, Debian python3-jinja2): the
//           renderer the goldens come from, so those inputs are generated too. A failure of the
//           template on its input (not raise_exception) only needs qwick to fail as well.
// Neither sees tool-call arguments given as JSON strings (qwick parses them on purpose; the
// template cannot) or integral floats (JavaScript cannot write 2.0).
//
// usage: node chat_template.mjs --qwick BIN --templates DIR [--oracle hf|python]
// QWICK_TEST_SEED picks new cases. Exit 77 (skipped) when the oracle is not installed.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { SKIP, importOrSkip, parseArgs, qwick, random, report, seedFromEnv } from "./common.mjs";

const args = parseArgs();
const oracle = args.oracle ?? "hf";
const python = oracle === "python";
const { Template } = python ? {} : await importOrSkip("@huggingface/jinja");
const seed = seedFromEnv(4321);
const rng = random(seed);

const TEXTS = ["Hello!", "What's the weather in Paris?", "  padded  ", "\n\nnewlines first", "你好，世界", "Ünïcödé ✓",
               "emoji 👩‍👩‍👧 and 🇯🇵", "tabs\tinside", "<b>html & \"quotes\"</b>", "line 1\nline 2\n", "", "   ",
               "back\\slash", "नमस्ते", "مرحبا", "a<tool_call>b", "x </think>y", "<think>inner</think>tail", "ß", "\u00a0nbsp\u00a0"];
// Only for the Python reference (see above).
if (python) TEXTS.push("x </think> y", "<think>in</think>\t tab", "\u001ctrim\u0085", "\ufeffbom\ufeff", "</think>  ");
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
    if (scalarsOnlySafe && !python) while (v === null || typeof v === "boolean") v = value();
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

function renderHf(templatePath, requests) {
  const template = new Template(fs.readFileSync(templatePath, "utf8"));
  return requests.map((request) => {
    try {
      return { prompt: template.render({
        messages: request.messages, tools: request.tools ?? null, documents: null,
        add_generation_prompt: request.add_generation_prompt, bos_token: null, eos_token: "<|im_end|>",
        pad_token: "<|endoftext|>", ...request.chat_template_kwargs,
      }) };
    } catch (e) {
      return { error: e.message, kind: "raise_exception" };  // its raise_exception and type errors look alike
    }
  });
}

function renderPython(templatePath, requests) {
  const script = path.join(path.dirname(fileURLToPath(import.meta.url)), "jinja2_render.py");
  const r = spawnSync("python3", [script, templatePath], {
    input: requests.map((q) => JSON.stringify(q)).join("\n") + "\n", encoding: "utf8", maxBuffer: 1 << 30 });
  if (r.error || r.status === SKIP) {
    console.log(r.stdout || `SKIPPED: python3 is not available (${r.error?.message})`);
    process.exit(SKIP);
  }
  if (r.status !== 0) throw new Error(`jinja2_render.py failed: ${r.stderr}`);
  return r.stdout.trimEnd().split("\n").map((l) => JSON.parse(l));
}

let status = 0;
for (const [name, file, scalarsOnlySafe] of [["qwen3.6", "qwen3.6-chat_template.jinja", false],
                                            ["qwen3.5", "qwen3.5-chat_template.jinja", true]]) {
  const templatePath = path.join(args.templates, file);
  const requests = Array.from({ length: 1500 }, () => conversation(scalarsOnlySafe));
  const wants = python ? renderPython(templatePath, requests) : renderHf(templatePath, requests);
  const ours = qwick(args.qwick, ["template", "--jsonl", "--chat-template", templatePath],
                     requests.map((r) => JSON.stringify(r)).join("\n") + "\n").split("\n");
  const failures = [];
  let errors = 0;
  for (let i = 0; i < requests.length; ++i) {
    const want = wants[i];
    const got = JSON.parse(ours[i]);
    if (want.error) ++errors;
    // The template's own rejections must say the same; its type errors only need an error here.
    const same = want.error ? got.error !== undefined && (want.kind !== "raise_exception" || got.error === want.error)
                            : got.prompt === want.prompt;
    if (!same) failures.push({ request: requests[i], ours: got, want });
  }
  console.log(`${name}: ${errors} of ${requests.length} conversations rejected by the template`);
  status |= report(`chat template ${name} vs ${python ? "Python jinja2" : "@huggingface/jinja"} (seed ${seed})`,
                   requests.length, failures);
}
process.exit(status);
