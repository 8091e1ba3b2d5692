// Shared by the comparison tests: arguments, the qwick binary, a seeded random generator, and
// loading the reference libraries (exit 77 = skipped, when `npm ci` has not been run here).
import { spawnSync } from "node:child_process";

export const SKIP = 77;

// --name value pairs from the command line.
export function parseArgs(argv = process.argv.slice(2)) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--")) throw new Error(`unexpected argument ${argv[i]}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  return args;
}

export async function importOrSkip(name) {
  try {
    return await import(name);
  } catch (e) {
    console.log(`SKIPPED: ${name} is not installed (${e.code ?? e.message}); run \`npm ci\` in tests/node`);
    process.exit(SKIP);
  }
}

// Runs `qwick args...` with `input` on stdin; throws with stderr on a non-zero exit.
export function qwick(binary, args, input = "") {
  const r = spawnSync(binary, args, { input, maxBuffer: 1 << 30, encoding: "utf8" });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`qwick ${args.join(" ")} exited ${r.status}: ${r.stderr}`);
  return r.stdout;
}

// mulberry32: small, fast, good enough to draw test cases reproducibly.
export function random(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  const pick = (list) => list[int(list.length)];
  const chance = (p) => next() < p;
  return { next, int, pick, chance };
}

export function seedFromEnv(fallback) {
  const s = process.env.QWICK_TEST_SEED;
  return s ? Number(s) : fallback;
}

// Reports mismatches (the first few in full) and the exit status.
export function report(name, total, failures) {
  for (const f of failures.slice(0, 5)) console.log(`MISMATCH ${name}: ${JSON.stringify(f)}`);
  console.log(`${name}: ${total - failures.length}/${total} identical`);
  return failures.length === 0 ? 0 : 1;
}
