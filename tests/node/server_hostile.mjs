// Hostile load on `qwick serve` (tiny model, --receive-timeout 2 s, more HTTP threads than
// connections, since connections beyond them wait their turn): in each round, over raw
// sockets, slow senders trickle request heads and bodies a byte at a time, oversized chunked
// bodies pour in, heads lie about their Content-Length, and clients vanish (mid-stream, mid-head,
// right after connecting), while /health is asked every 100 ms and ordinary openai clients make
// requests. Every hostile connection must be closed by the server within the receive timeout
// (plus slack) with the answer its kind calls for, /health must answer every time within a
// second, and the ordinary requests must complete. After each round the server must go back to
// idle: no request running or queued in /metrics, no more open file descriptors than before the
// rounds, and resident memory after the third round within a few MiB of after the second.
//
// usage: node server_hostile.mjs --qwick BIN --scratch DIR [--rss-limit-kib N] [--slack S]
//        (N = 0: memory not checked, for sanitizer builds; S multiplies the time allowed beyond
//        the bounds, for slower builds; exit 77: openai not installed)
import fs from "node:fs";
import net from "node:net";
import { checker, openaiModule, rssKiB, sleep, startServer, tinyModel } from "./server_common.mjs";
import { parseArgs, random } from "./common.mjs";

const args = parseArgs();
const OpenAI = await openaiModule();
const t = checker("server_hostile");
const model = tinyModel(args.qwick, args.scratch);
const RSS_LIMIT = Number(args["rss-limit-kib"] ?? 8192);
const RECEIVE_S = 2, KEEP_ALIVE_S = 5, MAX_BODY = 1 << 20;
const SLACK = Number(args.slack ?? 1);
const CUT_MS = RECEIVE_S * 1000 + 2000 * SLACK;  // a slow sender must be closed on within this
const HEALTH_MS = 1000 * SLACK;  // /health must answer within this throughout
const server = await startServer(args.qwick,
  ["serve", "-m", model, "-c", "1024", "-t", "1", "--queue-size", "16", "--cache-ram", "4", "--no-log-requests",
   "--receive-timeout", String(RECEIVE_S), "--max-body-size", String(MAX_BODY), "--threads-http", "96"],
  // One malloc arena per pool thread would keep a megabyte body's pages wherever it landed, and
  // memory would drift up by the arena over several rounds before settling.
  { env: { MALLOC_ARENA_MAX: "2" } });
const { hostname, port } = new URL(server.url);

const HEAD = `POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\n`;
const BODY = JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 8 });

// One raw connection: sends `data` at once, then `trickle` a byte every 100 ms, then `chunks` (a
// generator of buffers, written as the socket takes them); with `vanishAfterMs` the client closes
// first. Resolves with what the server sent, the time until the connection closed, whether the
// server was the one to close it (false when it was still open after 15 s), the bytes the socket
// took, and the socket error, if any.
function raw({ data = "", trickle = "", chunks = null, vanishAfterMs = null }) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const socket = net.connect(Number(port), hostname);
    let answer = "", sent = 0, done = false, vanished = false, error = null;
    const finish = (byServer) => {
      if (done) return;
      done = true;
      clearTimeout(guard);
      socket.destroy();
      resolve({ answer, ms: Date.now() - t0, byServer, sent, error });
    };
    const guard = setTimeout(() => finish(false), 15000);
    socket.on("data", (d) => (answer += d.toString("latin1")));
    socket.on("error", (e) => ((error = e.code), finish(!vanished)));
    socket.on("close", () => finish(!vanished));
    const write = (b) => new Promise((ok) => (socket.writable ? socket.write(b, () => ok(true)) : ok(false)));
    socket.on("connect", async () => {
      if (vanishAfterMs !== null) setTimeout(() => ((vanished = true), finish(false)), vanishAfterMs);
      if (data && (await write(data))) sent += data.length;
      for (const ch of trickle) {
        if (done || !(await write(ch))) return;
        sent += 1;
        await sleep(100);
      }
      // As HTTP clients do, a flood stops once the answer has come.
      for (const c of chunks ?? []) {
        if (done || answer || !(await write(c))) return;
        sent += c.length;
      }
    });
  });
}

function* chunkedFlood(total) {
  const piece = Buffer.from(`10000\r\n${" ".repeat(0x10000)}\r\n`);
  for (let n = 0; n < total; n += piece.length) yield piece;
}

// The hostile connections of one round: [name, promise, check(result) -> problem or null].
function hostile(rng) {
  const status = (r) => r.answer.slice(0, 12);
  const cut = (r) => (!r.byServer ? "never closed by the server" : r.ms > CUT_MS ? `closed after ${r.ms} ms` : null);
  const answered = (code) => (r) => cut(r) ?? (status(r) === `HTTP/1.1 ${code}` ? null
    : `answer ${JSON.stringify(r.answer.slice(0, 80))} after ${r.ms} ms, ${r.sent} bytes sent, ${r.error ?? "closed"}`);
  // At 10 bytes a second, each would take a minute.
  const slowHead = HEAD + `X-Padding: ${"a".repeat(600)}\r\n\r\n`;
  const slowBody = " ".repeat(600) + BODY;
  const list = [];
  for (let i = 0; i < 8; ++i) list.push(["trickled head", raw({ trickle: slowHead }), cut]);
  for (let i = 0; i < 4; ++i)
    list.push(["trickled body", raw({ data: HEAD + `Content-Length: ${slowBody.length}\r\n\r\n`, trickle: slowBody }), answered(400)]);
  for (let i = 0; i < 2; ++i)
    // (That reading stops at the limit is server_limits_test's to check: here the server also
    // drains for a moment before closing, so the bytes a fast client gets out vary.)
    list.push(["oversized chunked body", raw({ data: HEAD + "Transfer-Encoding: chunked\r\n\r\n", chunks: chunkedFlood(64 * MAX_BODY) }),
               answered(413)]);
  list.push(["Content-Length longer than the body", raw({ data: HEAD + "Content-Length: 1000\r\n\r\n" + BODY }), answered(400)],
            ["Content-Length not a number", raw({ data: HEAD + "Content-Length: abc\r\n\r\n" + BODY }), answered(400)],
            ["Content-Length negative", raw({ data: HEAD + "Content-Length: -5\r\n\r\n" + BODY }), answered(400)],
            ["Content-Length twice", raw({ data: HEAD + `Content-Length: ${BODY.length}\r\nContent-Length: 5\r\n\r\n` + BODY }), answered(400)]);
  const stream = JSON.stringify({ messages: [{ role: "user", content: "tell me" }], max_tokens: 64, stream: true });
  for (let i = 0; i < 8; ++i) {
    const vanishAfterMs = 20 + rng.int(300);
    list.push(["vanished mid-stream", raw({ data: HEAD + `Content-Length: ${stream.length}\r\n\r\n` + stream, vanishAfterMs }), () => null],
              ["vanished mid-head", raw({ data: HEAD.slice(0, 30), vanishAfterMs }), () => null],
              ["vanished at once", raw({ vanishAfterMs: 0 }), () => null]);
  }
  return list;
}

// Ordinary clients: each request must complete.
async function ordinary(rng) {
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 30000 });
  const problems = [];
  for (let i = 0; i < 3; ++i) {
    const body = { model: "m", messages: [{ role: "user", content: `question ${rng.int(1000)}` }], max_tokens: 4 + rng.int(12) };
    try {
      if (rng.chance(0.5)) {
        const r = await client.chat.completions.create(body);
        if (!r.choices[0].finish_reason) problems.push("whole response without finish_reason");
      } else {
        let finish = null;
        for await (const c of await client.chat.completions.create({ ...body, stream: true })) finish = c.choices[0]?.finish_reason ?? finish;
        if (!finish) problems.push("stream without finish_reason");
      }
    } catch (e) {
      problems.push(`failed: ${e}`);
    }
  }
  return problems;
}

async function round(n) {
  const rng = random(n + 1);
  const probe = { slowest: 0, failures: 0, stop: false };
  const prober = (async () => {
    while (!probe.stop) {
      const t0 = Date.now();
      const r = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(5000) }).catch(() => null);
      probe.slowest = Math.max(probe.slowest, Date.now() - t0);
      if (!r || r.status !== 200) ++probe.failures;
      await sleep(100);
    }
  })();
  const t0 = Date.now();
  const attacks = hostile(rng);
  const [results, problems] = await Promise.all([
    Promise.all(attacks.map(([, p]) => p)),
    Promise.all(Array.from({ length: 8 }, () => ordinary(rng))).then((p) => p.flat()),
  ]);
  probe.stop = true;
  await prober;
  console.log(`round ${n}: ${attacks.length} hostile connections, 24 ordinary requests in ${Date.now() - t0} ms; ` +
              `slowest /health ${probe.slowest} ms`);
  const bad = attacks.map(([name, , check], i) => [name, check(results[i])]).filter(([, p]) => p);
  t.eq(bad, [], `round ${n}: every hostile connection answered as its kind calls for and closed`);
  t.eq(problems, [], `round ${n}: ordinary requests complete`);
  t.ok(probe.failures === 0 && probe.slowest < HEALTH_MS, `round ${n}: /health answers within ${HEALTH_MS} ms throughout`,
       `${probe.failures} failures, slowest ${probe.slowest} ms`);
}

const openFds = () => fs.readdirSync(`/proc/${server.pid}/fd`).length;
const gauges = async () => {
  const m = await (await fetch(`${server.url}/metrics`)).text();
  return ["requests_processing", "requests_deferred"].map((g) => m.match(new RegExp(`^llamacpp:${g} (\\d+)$`, "m"))[1]);
};
// Polls until `ok()` or `ms` pass; the last value.
async function settle(read, ok, ms) {
  const until = Date.now() + ms;
  let v = await read();
  while (!ok(v) && Date.now() < until) {
    await sleep(200);
    v = await read();
  }
  return v;
}

try {
  // Idle keep-alive connections (the health checks of start-up) close after KEEP_ALIVE_S.
  await sleep((KEEP_ALIVE_S + 1) * 1000);
  const fdsIdle = openFds();
  // Round 1 warms up the HTTP pool (each thread's first connections fill its malloc caches);
  // memory is compared between rounds 2 and 3.
  let rssBefore = 0;
  for (const n of [1, 2, 3]) {
    await t.section(`hostile round ${n}`, async () => {
      await round(n);
      t.eq(await settle(gauges, (g) => g.every((x) => x === "0"), 20000), ["0", "0"], `round ${n}: nothing left running or queued`);
      const fds = await settle(openFds, (k) => k <= fdsIdle, (KEEP_ALIVE_S + 3) * 1000);
      t.ok(fds <= fdsIdle, `round ${n}: open descriptors back to idle`, `${fdsIdle} before, ${fds} after`);
    });
    if (n === 2) rssBefore = rssKiB(server.pid);
  }
  const rssAfter = rssKiB(server.pid);
  console.log(`resident memory: ${rssBefore} KiB after round 2, ${rssAfter} KiB after round 3`);
  if (RSS_LIMIT > 0) t.ok(rssAfter - rssBefore < RSS_LIMIT, `memory does not grow (under ${RSS_LIMIT} KiB)`, `${rssBefore} -> ${rssAfter} KiB`);
  else console.log("NOT CHECKED: memory growth (--rss-limit-kib 0, a sanitizer build)");
  const h = await fetch(`${server.url}/health`);
  t.eq(h.status, 200, "healthy afterwards");
} finally {
  t.eq(await server.stop(), { code: 0, signal: null }, "clean exit");
}
process.exit(t.done());
