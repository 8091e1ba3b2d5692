#!/usr/bin/env python3
"""Where each kernel of a qwick decode step spends its time, block by block, from the file a
-DQWICK_BLOCK_TRACE=ON build writes (src/kernels/block_trace.h):

    QWICK_BLOCK_TRACE=blocks.tsv qwick bench ...      (the file holds the last decode step)
    tools/block_trace_summary.py blocks.tsv [--launches] [--blocks ROLE]

Times are µs after the previous launch's last block ended (negative: before it). Per launch: its
blocks' first, median and last start (how early they became resident), the median and last first
wait (griddepcontrol.wait returning), the median of the four marks a kernel may record
(block_trace_mark: a point inside its work, e.g. after staging; marks 0 and 1 when the block's first warp
got there, 2 and 3 when its last did), the median and last end, and its own
time (last end after the previous last end). The table gives, per role (the kernel and where it sits in its layer), the median
of each over the layers; --launches also prints every launch; --blocks ROLE the spread over the blocks of
that role's launches (every block of every such launch, each against its own launch's previous end):
minimum, 10th percentile, median, 90th percentile and maximum of each time, e.g. how unevenly a kernel's
blocks leave the GPU for the next one.
"""
import argparse
import csv
import statistics
import sys

# Names are launch_kernel's; a GEMV's role comes from the kernel after it (an input projection) or
# before it (an output projection), as in tools/kernel_trace/split_by_layer.py.
MIXER_AFTER = {"deltanet_decode_step": "DeltaNet input stack", "attention_prep": "attention q|k|v stack"}
MIXER_BEFORE = {"deltanet_decode_step": "DeltaNet output projection",
                "attention_decode_combine": "attention output projection"}


def roles(names):
    out, kind = [], "?"
    for i, n in enumerate(names):
        if n == "deltanet_decode_step":
            kind = "DeltaNet"
        elif n == "attention_prep":
            kind = "attention"
        if n == "gemv":
            after = names[i + 1] if i + 1 < len(names) else None
            before = names[i - 1] if i > 0 else None
            role = MIXER_AFTER.get(after) or MIXER_BEFORE.get(before) or "gemv"
            if after == "sample_token":
                role = "lm_head"
            out.append(role)
        elif n in ("moe router", "moe experts", "moe gate_up", "moe down"):
            out.append(f"{n} ({kind})")
        elif n == "gemv_stream":
            out.append("lm_head")
        else:
            out.append(n)
    return out


# A block's times (the TSV's NAME_ns columns) as main reads them, in this order.
TIMES = ("start", "waited", "mark0", "mark1", "mark2", "mark3", "end")


def quantile(ts, p):
    """The p-quantile of sorted ts, interpolated between the two nearest (p 0.5: statistics.median)."""
    at = p * (len(ts) - 1)
    lo = int(at)
    hi = min(lo + 1, len(ts) - 1)
    return ts[lo] + (ts[hi] - ts[lo]) * (at - lo)


def print_block_spread(role, spread, launches):
    plural = "" if launches == 1 else "es"
    print(f"\nBlocks of {role} ({launches} launch{plural}, {len(spread['start'])} blocks), µs after the "
          "previous launch's last block ended:\n")
    print("| time | blocks | min | p10 | median | p90 | max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in TIMES:
        ts = sorted(spread[name])
        if ts:
            cells = " | ".join(f"{quantile(ts, p):.2f}" for p in (0, 0.1, 0.5, 0.9, 1))
            print(f"| {name} | {len(ts)} | {cells} |")


def main(path, every, spread_role=None):
    launches = {}
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            j = int(r["launch"])
            if j < 0:
                continue
            launches.setdefault(j, {"name": r["name"], "blocks": []})["blocks"].append(
                tuple(int(r[f"{t}_ns"]) for t in TIMES))
    order = sorted(launches)
    names = [launches[j]["name"] for j in order]
    role_of = roles(names)
    prev_end = None
    rows = []
    spread = {k: [] for k in TIMES}  # (--blocks) every time of the role's blocks
    for j, role in zip(order, role_of):
        b = launches[j]["blocks"]
        starts = sorted(x[0] for x in b)
        waits = sorted(x[1] for x in b if x[1] >= 0)
        ends = sorted(x[6] for x in b)
        marks = [sorted(x[k] for x in b if x[k] >= 0) for k in range(2, 6)]
        base = prev_end if prev_end is not None else starts[0]
        us = lambda t: (t - base) / 1000.0
        median_us = lambda ts: us(statistics.median(ts)) if ts else float("nan")
        row = {
            "launch": j, "role": role, "blocks": len(b),
            "first start": us(starts[0]), "start": us(statistics.median(starts)), "last start": us(starts[-1]),
            "waited": median_us(waits),
            "last waited": us(waits[-1]) if waits else float("nan"),
            **{f"mark{i}": median_us(marks[i]) for i in range(4)},
            "end": us(statistics.median(ends)), "last end": us(ends[-1]),
        }
        row["own"] = row["last end"]
        rows.append(row)
        if role == spread_role:
            for x in b:
                for name, t in zip(TIMES, x):
                    if t >= 0:
                        spread[name].append(us(t))
        prev_end = ends[-1] if prev_end is None else max(prev_end, ends[-1])
    cols = ["first start", "start", "last start", "waited", "last waited", "mark0", "mark1", "mark2", "mark3",
            "end", "last end", "own"]
    if every:
        print("| launch | role | blocks | " + " | ".join(cols) + " |")
        print("|---:|---|---:|" + "---:|" * len(cols))
        for r in rows:
            print(f"| {r['launch']} | {r['role']} | {r['blocks']} | " +
                  " | ".join(f"{r[c]:.2f}" for c in cols) + " |")
        print()
    by_role = {}
    for r in rows:
        by_role.setdefault(r["role"], []).append(r)
    if spread_role is not None and spread_role not in by_role:
        sys.exit(f"block_trace_summary.py: no launch has the role {spread_role!r} "
                 f"(roles: {', '.join(sorted(by_role))})")
    total = sum(r["own"] for r in rows)
    print(f"Step: {len(rows)} launches, {total:.1f} µs from the first block's start to the last block's end.")
    print("Medians over each role's launches, µs after the previous launch's last block ended:\n")
    print("| role | launches | blocks | " + " | ".join(cols) + " | own µs a step |")
    print("|---|---:|---:|" + "---:|" * (len(cols) + 1))
    for role, rs in sorted(by_role.items(), key=lambda kv: -sum(r["own"] for r in kv[1])):
        med = {c: statistics.median(r[c] for r in rs) for c in cols}  # nan where no block marked
        print(f"| {role} | {len(rs)} | {rs[0]['blocks']} | " + " | ".join(f"{med[c]:.2f}" for c in cols) +
              f" | {sum(r['own'] for r in rs):.1f} |")
    if spread_role is not None:
        print_block_spread(spread_role, spread, len(by_role[spread_role]))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="the TSV a -DQWICK_BLOCK_TRACE=ON build wrote")
    p.add_argument("--launches", action="store_true", help="also print every launch")
    p.add_argument("--blocks", metavar="ROLE", help="the spread over that role's blocks")
    a = p.parse_args()
    main(a.trace, a.launches, a.blocks)
