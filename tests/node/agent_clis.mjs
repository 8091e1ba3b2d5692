// The coding-agent CLIs themselves against qwick, non-interactively, each in a scratch directory:
// Codex CLI (`codex exec`, a custom model provider at qwick's /v1 with the Responses wire API) and
// Claude Code (`claude -p` with ANTHROPIC_BASE_URL at qwick). The server is qwick_scripted_server
// (the reply is the text after the last "reply>" in the prompt, up to the end of the turn or of a
// tool result): the task's prompt scripts a tool call that reads a file, the file's text scripts
// the final answer, so each CLI must run the tool, send its result back and print an answer that
// names what the file says. The CLIs run offline (no telemetry, no update checks).
//
// Codex runs with multi-agent tools and web search off: their tools are a `namespace` and
// a built-in `web_search`, which the server refuses (it serves function tools only).
//
// usage: node agent_clis.mjs --server BIN --scratch DIR
//        (exit 77: the CLIs are not installed; `npm ci` in tests/node/cli installs them)
import { spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { checker, startServer } from "./server_common.mjs";
import { parseArgs } from "./common.mjs";

const args = parseArgs();
const require = createRequire(path.join(import.meta.dirname, "cli", "package.json"));
const binary = (pkg, file) => {
  try {
    return path.join(path.dirname(require.resolve(`${pkg}/package.json`)), file);
  } catch {
    return null;
  }
};
const codex = binary("@openai/codex", "bin/codex.js");
const claude = binary(`@anthropic-ai/claude-code-${process.platform}-${process.arch}`, "claude");
if (!codex || !claude) {
  console.log("SKIPPED: the agent CLIs are not installed; run `npm ci` in tests/node/cli");
  process.exit(77);
}
const t = checker("agent_clis");
const answer = "The note says: swordfish";
// What the scripted model first answers: a call of `tool` with one parameter.
const callScript = (tool, param, value) =>
  `reply>I will read the note.\n</think>\n\n<tool_call>\n<function=${tool}>\n<parameter=${param}>\n${value}\n` +
  "</parameter>\n</function>\n</tool_call>";

// A scratch directory holding note.txt, whose text scripts the final answer.
function scratch(name) {
  const dir = path.join(args.scratch, name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(path.join(dir, "work"), { recursive: true });
  fs.mkdirSync(path.join(dir, "home"), { recursive: true });
  fs.writeFileSync(path.join(dir, "work", "note.txt"), `reply>done\n</think>\n\n${answer}`);
  return dir;
}

// Runs a CLI without blocking the event loop (the server's log is read meanwhile).
function run(file, argv, { input = "", timeout = 120000, ...options }) {
  return new Promise((resolve) => {
    const p = spawn(file, argv, { ...options, stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "", stderr = "";
    p.stdout.on("data", (d) => (stdout += d));
    p.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => p.kill("SIGKILL"), timeout);
    p.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
    p.stdin.end(input);
  });
}

// The completions the server logged since `from`: [api, finish reason].
const turns = (server, from) =>
  [...server.stderr().slice(from).matchAll(/^(messages|responses) \S+: .* finish (\S+)$/gm)].map((m) => [m[1], m[2]]);

const server = await startServer(args.server, ["-c", "262144", "--log-requests"]);

await t.section("codex exec runs a command the model asks for and answers with its output", async () => {
  const dir = scratch("codex");
  const from = server.stderr().length;
  const r = await run(process.execPath, [codex, "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access",
    "--disable", "multi_agent", "-c", "web_search=disabled",
    "-c", "model_provider=qwick",
    "-c", `model_providers.qwick={name="qwick",base_url="${server.url}/v1",wire_api="responses"}`,
    "-m", "scripted", callScript("exec_command", "cmd", "cat note.txt")], {
    cwd: path.join(dir, "work"),
    env: { ...process.env, CODEX_HOME: path.join(dir, "home") },
  });
  t.eq(r.status, 0, "exit status", r.stderr);
  t.ok(r.stdout.trim().endsWith(answer), "the final answer names the file's text", r.stdout + r.stderr);
  t.eq(turns(server, from), [["responses", "tool_calls"], ["responses", "stop"]], "a call, then the answer");
});

await t.section("claude -p reads a file the model asks for and answers with its text", async () => {
  const dir = scratch("claude");
  const from = server.stderr().length;
  const r = await run(claude, ["-p", "--model", "scripted", "--allowedTools", "Read"], {
    cwd: path.join(dir, "work"),
    input: callScript("Read", "file_path", path.join(dir, "work", "note.txt")),
    env: { ...process.env, HOME: path.join(dir, "home"), ANTHROPIC_BASE_URL: server.url, ANTHROPIC_API_KEY: "none",
           CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", DISABLE_AUTOUPDATER: "1" },
  });
  t.eq(r.status, 0, "exit status", r.stderr);
  // Read numbers the file's lines, so the scripted answer carries the numbers too.
  t.ok(r.stdout.trim().endsWith(answer), "the final answer names the file's text", r.stdout + r.stderr);
  t.eq(turns(server, from), [["messages", "tool_calls"], ["messages", "stop"]], "a call, then the answer");
});

const stopped = await server.stop();
t.eq(stopped.code, 0, "server exit status");
process.exit(t.done());
