#!/usr/bin/env python3
"""A/B of `qwick bench` variants in one run: each round runs every variant once, in turn, so slow
drift of the machine (clocks, heat) falls on all of them alike; then one table per phase with each
variant's median over the rounds, every round's value, and the change against the first variant.

  tools/ab_bench.py [--rounds N] [--out DIR] VARIANT... -- BENCH ARGS...

A VARIANT is NAME=COMMAND: a qwick binary and any arguments of that variant alone, e.g.
  base=.cuda/base/qwick  next=.cuda/bin/qwick  "no-pdl=.cuda/bin/qwick --cuda-off overlap"
and, before the binary, environment variables of that variant alone: "no-graph=QWICK_CUDA_OFF=graph ./qwick".
BENCH ARGS go to every variant's `qwick bench` (model, device, lengths, repetitions). Each run's
--json lands in DIR (default $OUT or ab-out) as NAME.rK.json, its output as NAME.rK.txt.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys


ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")  # a VAR=VALUE word before a variant's binary


def parse(argv):
    if "--" not in argv:
        sys.exit("ab_bench: the bench arguments come after --")
    cut = argv.index("--")
    p = argparse.ArgumentParser(description="A/B of qwick bench variants, alternating rounds")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=os.environ.get("OUT", "ab-out"))
    p.add_argument("variants", nargs="+", metavar="NAME=COMMAND")
    a = p.parse_args(argv[:cut])
    variants = []  # (name, (environment, argv))
    for v in a.variants:
        name, sep, command = v.partition("=")
        words = shlex.split(command)
        env = dict(os.environ)
        while words and ASSIGNMENT.match(words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if not sep or not name or not words:
            sys.exit(f"ab_bench: a variant is NAME=COMMAND, not {v!r}")
        variants.append((name, (env, words)))
    if len({n for n, _ in variants}) != len(variants):
        sys.exit("ab_bench: variant names must differ")
    if a.rounds < 1:
        sys.exit("ab_bench: --rounds must be at least 1")
    return a, variants, argv[cut + 1:]


def run(name, command, bench_args, out, round_):
    stem = os.path.join(out, f"{name}.r{round_}")
    env, command = command
    cmd = [command[0], "bench", *bench_args, *command[1:], "--json", stem + ".json"]
    with open(stem + ".txt", "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        sys.exit(f"ab_bench: {name} (round {round_}) exited {rc}; its output is in {stem}.txt")
    with open(stem + ".json") as f:
        return json.load(f)["lengths"]


def table(title, key, lengths, results, names):
    """results[name][round] is a list of length entries; key names the tok/s field."""
    print(f"\n{title} (tokens/s: median of the rounds, then each round; change against {names[0]})\n")
    print("| variant | " + " | ".join(str(n) for n in lengths) + " |")
    print("|---|" + "---:|" * len(lengths))
    base = {}
    for name in names:
        cells = []
        for i, length in enumerate(lengths):
            values = [r[i][key] for r in results[name]]
            med = statistics.median(values)
            base.setdefault(length, med)
            change = "" if name == names[0] else f" {100.0 * (med / base[length] - 1.0):+.1f} %"
            cells.append(f"{med:,.1f}{change} ({' / '.join(f'{v:,.1f}' for v in values)})")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main():
    a, variants, bench_args = parse(sys.argv[1:])
    os.makedirs(a.out, exist_ok=True)
    results = {name: [] for name, _ in variants}
    for round_ in range(1, a.rounds + 1):
        for name, command in variants:
            results[name].append(run(name, command, bench_args, a.out, round_))
            print(f"round {round_}: {name} done", file=sys.stderr)
    names = [n for n, _ in variants]
    first = results[names[0]][0]
    lengths = [e["length"] for e in first]
    for name in names:
        for r in results[name]:
            if [e["length"] for e in r] != lengths:
                sys.exit(f"ab_bench: {name} measured other lengths than {names[0]}")
    if any(e.get("prefill_tokens_per_s", 0) > 0 for e in first):
        table("prefill", "prefill_tokens_per_s", lengths, results, names)
    if any(e.get("decode_tokens_per_s", 0) > 0 for e in first):
        table("decode", "decode_tokens_per_s", lengths, results, names)


if __name__ == "__main__":
    main()
