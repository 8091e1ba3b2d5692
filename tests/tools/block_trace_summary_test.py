#!/usr/bin/env python3
"""tools/block_trace_summary.py on a hand-made trace of four launches (an embedding, a GEMV before the
DeltaNet step, the step, a GEMV after it): each launch's times after the previous launch's last block
ended, the GEMVs' roles taken from their neighbours, the marks (none: nan), the step's total, the
medians per role, and one role's spread over its blocks (--blocks).

  block_trace_summary_test.py SUMMARY_SCRIPT SCRATCH_DIR
"""
import os
import subprocess
import sys

script, scratch = sys.argv[1:3]
os.makedirs(scratch, exist_ok=True)
path = os.path.join(scratch, "blocks.tsv")
header = "launch\tname\tgrid\tthreads\tblock\tsm\tstart_ns\twaited_ns\tmark0_ns\tmark1_ns\tmark2_ns\tmark3_ns\tend_ns"
blocks = [  # launch, name, start, waited, mark0, mark1, mark2, mark3, end (ns; -1: none)
    (0, "embed", 0, -1, -1, -1, -1, -1, 2000),
    (1, "gemv", 1000, 3000, 4000, -1, -1, -1, 5000),
    (1, "gemv", 1500, 3200, -1, -1, -1, -1, 6000),
    (2, "deltanet_decode_step", 5500, 6500, 7000, -1, 7600, -1, 8000),
    (2, "deltanet_decode_step", 5600, 6600, 7100, 7500, 8600, 8800, 9000),
    (3, "gemv", 8500, 9500, -1, -1, -1, -1, 11000),
    (-1, "?", 100, -1, -1, -1, -1, -1, 50000),  # a block no launch claimed: left out
]
with open(path, "w") as f:
    print(header, file=f)
    for i, (launch, name, start, waited, m0, m1, m2, m3, end) in enumerate(blocks):
        print(f"{launch}\t{name}\t2\t256\t{i}\t0\t{start}\t{waited}\t{m0}\t{m1}\t{m2}\t{m3}\t{end}", file=f)

r = subprocess.run([sys.executable, script, path, "--launches"], capture_output=True, text=True, timeout=60)
failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(what)


check(r.returncode == 0, "exit status 0", r.stderr)
out = r.stdout
# first start, start, last start, waited, last waited, mark0 .. mark3, end, last end, own (µs)
rows = {
    "embed": "| 0 | embed | 1 | 0.00 | 0.00 | 0.00 | nan | nan | nan | nan | nan | nan | 2.00 | 2.00 | 2.00 |",
    "input stack": "| 1 | DeltaNet input stack | 2 | -1.00 | -0.75 | -0.50 | 1.10 | 1.20 | 2.00 | nan | nan | nan "
                   "| 3.50 | 4.00 | 4.00 |",
    "step": "| 2 | deltanet_decode_step | 2 | -0.50 | -0.45 | -0.40 | 0.55 | 0.60 | 1.05 | 1.50 | 2.10 | 2.80 "
            "| 2.50 | 3.00 | 3.00 |",
    "output projection": "| 3 | DeltaNet output projection | 1 | -0.50 | -0.50 | -0.50 | 0.50 | 0.50 | nan | nan | nan "
                         "| nan | 2.00 | 2.00 | 2.00 |",
}
for what, line in rows.items():
    check(line in out, f"the {what}'s row", out)
check("Step: 4 launches, 11.0 µs" in out, "the step's launches and time", out)
check("| DeltaNet input stack | 1 | 2 |" in out and out.count("| DeltaNet output projection |") == 2,
      "a row per role in the medians", out)

# --blocks: the step's two blocks, each time's minimum, 10th percentile, median, 90th percentile and
# maximum (interpolated between the two), a time only one block marked as that block's.
r = subprocess.run([sys.executable, script, path, "--blocks", "deltanet_decode_step"], capture_output=True,
                   text=True, timeout=60)
check(r.returncode == 0, "--blocks: exit status 0", r.stderr)
out = r.stdout
check("Blocks of deltanet_decode_step (1 launch, 2 blocks)" in out, "--blocks: the title", out)
for line in ("| start | 2 | -0.50 | -0.49 | -0.45 | -0.41 | -0.40 |",
             "| waited | 2 | 0.50 | 0.51 | 0.55 | 0.59 | 0.60 |",
             "| mark1 | 1 | 1.50 | 1.50 | 1.50 | 1.50 | 1.50 |",
             "| mark2 | 2 | 1.60 | 1.70 | 2.10 | 2.50 | 2.60 |",
             "| end | 2 | 2.00 | 2.10 | 2.50 | 2.90 | 3.00 |"):
    check(line in out, f"--blocks: {line.split('|')[1].strip()}", out)
r = subprocess.run([sys.executable, script, path, "--blocks", "moe experts"], capture_output=True, text=True,
                   timeout=60)
check(r.returncode != 0 and "no launch has the role 'moe experts'" in r.stderr and "embed" in r.stderr,
      "--blocks with an unknown role: an error naming the roles", r.stderr)

r = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=60)
check(r.returncode != 0 and "block_trace_summary.py" in r.stderr, "no file: the usage, and an error", r.stderr)

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
