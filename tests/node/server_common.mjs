// Shared by the server tests: starting a server process on a free port (--port 0; it prints the
// address), waiting for /health, stopping it with SIGTERM, a tiny model made on demand, the
// openai client (exit 77 = skipped when `npm ci` has not been run), and a small assertion
// collector that reports every failed check, not just the first.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { importOrSkip } from "./common.mjs";

export async function openaiModule() {
  return (await importOrSkip("openai")).default;
}

// `qwick make-model --preset tiny` into scratch/NAME once.
export function tinyModel(qwick, scratch, name = "tiny") {
  const dir = path.join(scratch, name);
  if (!fs.existsSync(path.join(dir, "config.json"))) {
    fs.mkdirSync(scratch, { recursive: true });
    const r = spawnSync(qwick, ["make-model", "--preset", "tiny", dir], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`make-model failed: ${r.stderr}`);
  }
  return dir;
}

// Starts `binary args...` and resolves once it listens and (unless waitHealthy is false) /health
// says ok.
export async function startServer(binary, args, { env = {}, timeoutMs = 30000, waitHealthy = true } = {}) {
  const proc = spawn(binary, [...args, "--host", "127.0.0.1", "--port", "0"], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  proc.stderr.on("data", (d) => (stderr += d));
  proc.stdout.on("data", () => {});
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + timeoutMs;
  let url = null;
  while (!url) {
    const m = stderr.match(/listening on (http:\/\/[\d.]+:\d+)/);
    if (m) url = m[1];
    else if (proc.exitCode !== null) throw new Error(`server exited early: ${stderr}`);
    else if (Date.now() > deadline) throw new Error(`server did not start: ${stderr}`);
    else await sleep(20);
  }
  while (waitHealthy) {
    const r = await fetch(`${url}/health`).catch(() => null);
    if (r && r.status === 200) break;
    if (proc.exitCode !== null) throw new Error(`server exited: ${stderr}`);
    if (Date.now() > deadline) throw new Error(`server never became healthy: ${stderr}`);
    await sleep(20);
  }
  return {
    url,
    pid: proc.pid,
    stderr: () => stderr,
    exited,
    // SIGTERM, then the exit status.
    async stop() {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      return await exited;
    },
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Resident memory of a process in KiB.
export function rssKiB(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) : NaN;
}

export async function postJson(url, body, headers = {}) {
  const r = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, headers: r.headers, text, json };
}

// Collects failed checks; `done()` prints them and returns the exit status.
export function checker(name) {
  const failures = [];
  let count = 0;
  const fail = (what, detail) => failures.push(`${what}${detail === undefined ? "" : `: ${detail}`}`);
  const c = {
    ok(cond, what, detail) {
      ++count;
      if (!cond) fail(what, detail);
      return !!cond;
    },
    eq(actual, expected, what) {
      ++count;
      const a = JSON.stringify(actual), e = JSON.stringify(expected);
      if (a !== e) fail(what, `got ${a}, expected ${e}`);
      return a === e;
    },
    // Runs a named group of checks; an exception fails the group without stopping the others.
    async section(title, fn) {
      const before = failures.length;
      const t0 = Date.now();
      try {
        await fn();
      } catch (e) {
        fail(`${title} threw`, e?.stack ?? String(e));
      }
      console.log(`${failures.length === before ? "ok  " : "FAIL"} ${title} (${Date.now() - t0} ms)`);
    },
    done() {
      for (const f of failures) console.log(`FAILED ${f}`);
      console.log(`${name}: ${count - failures.length}/${count} checks passed`);
      return failures.length === 0 ? 0 : 1;
    },
  };
  return c;
}

// An API error from the openai client: {status, error} (null when the call succeeded).
export async function apiError(promise) {
  try {
    await promise;
    return null;
  } catch (e) {
    return { status: e.status, error: e.error, name: e.constructor?.name, message: e.message };
  }
}
