#!/usr/bin/env python3
"""tools/ab_bench.py on the CPU with the built-in small model: two variants over two rounds give a
prefill and a decode table with a row per variant and every run's JSON; a variant's leading VAR=VALUE
words reach its bench as environment; a variant whose bench fails and a command line without "--" end
with an error naming the cause.

  ab_bench_test.py QWICK_BINARY AB_BENCH_SCRIPT SCRATCH_DIR
"""
import os
import re
import subprocess
import sys

qwick, script, scratch = sys.argv[1:4]
bench = ["--device", "cpu", "-t", "1", "--lengths", "8,16", "--prefill-reps", "1", "--decode-reps", "1",
         "--decode-tokens", "2", "--pp", "0", "--tg", "0"]
failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(what)


def ab(*args):
    r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


out = os.path.join(scratch, "ab")
rc, stdout, stderr = ab("--rounds", "2", "--out", out, f"plain={qwick}", f"exact={qwick} --exact", "--", *bench)
check(rc == 0, "two variants run", stderr)
for phase in ("prefill", "decode"):
    m = re.search(rf"^{phase} .*?\n\n(\| variant \| 8 \| 16 \|\n\|---\|---:\|---:\|\n(?:\|.*\n)+)", stdout, re.M)
    check(m is not None, f"a {phase} table over both lengths", stdout)
    if m:
        rows = m.group(1).splitlines()[2:]
        check([r.split("|")[1].strip() for r in rows] == ["plain", "exact"], f"{phase}: a row per variant", rows)
        # Every cell: the median, then both rounds; the second variant's also its change in %.
        cell = r"[\d,]+\.\d \(([\d,]+\.\d) / ([\d,]+\.\d)\)"
        check(all(re.fullmatch(cell, c.strip()) for c in rows[0].split("|")[2:-1]), f"{phase}: first row's cells",
              rows[0])
        check(all(re.fullmatch(r"[\d,]+\.\d [+-]\d+\.\d % \(([\d,]+\.\d) / ([\d,]+\.\d)\)", c.strip())
                  for c in rows[1].split("|")[2:-1]), f"{phase}: second row's cells", rows[1])
check(sorted(f for f in os.listdir(out) if f.endswith(".json")) ==
      ["exact.r1.json", "exact.r2.json", "plain.r1.json", "plain.r2.json"], "every run's JSON kept")

# The device from the environment (no --device here): a variant's own QWICK_DEVICE reaches its bench.
# (Their runs go to a folder of their own, so a rerun's listing of `out` above is unchanged.)
no_device, env_out = bench[2:], os.path.join(scratch, "ab-env")
rc, _, stderr = ab("--rounds", "1", "--out", env_out, f"env-cpu=QWICK_DEVICE=cpu {qwick}", "--", *no_device)
check(rc == 0, "a variant with an environment variable runs", stderr)
rc, _, stderr = ab("--rounds", "1", "--out", env_out, f"env-bad=QWICK_DEVICE=nosuch {qwick}", "--", *no_device)
check(rc != 0 and "env-bad (round 1) exited" in stderr, "a variant's environment reaches its bench", stderr)
with open(os.path.join(env_out, "env-bad.r1.txt")) as f:
    log = f.read()
check("unknown device" in log, "the bad device is named in its output", log)

rc, _, stderr = ab("--out", out, f"plain={qwick}", f"broken={qwick} --no-such-flag", "--", *bench)
check(rc != 0 and "broken (round 1) exited" in stderr and "broken.r1.txt" in stderr, "a failing variant is named",
      stderr)
rc, _, stderr = ab(f"plain={qwick}", *bench)
check(rc != 0 and "come after --" in stderr, "bench arguments without -- are refused", stderr)
rc, _, stderr = ab("plain", "--", *bench)
check(rc != 0 and "NAME=COMMAND" in stderr, "a variant without a name is refused", stderr)

print(f"ab_bench: {'all checks passed' if not failures else f'{len(failures)} checks failed'}")
sys.exit(1 if failures else 0)
