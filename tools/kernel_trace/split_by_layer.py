#!/usr/bin/env python3
"""The time of one qwick decode step by layer kind, from a kernel_trace TSV (kernel_trace.cpp).

    tools/kernel_trace/split_by_layer.py trace.tsv

Each kernel's own time (the step's end moving on while it finished last) goes to the part of the model
it belongs to: the DeltaNet mixers (input projections, the decode step, the output projection), the
attention mixers (q|k|v projection, prep, attention, combine, output projection), the MoE (router,
gate|up, down, or the one-pass gate|up and down), and the embedding, lm_head and sampler. A GEMV belongs to the mixer whose kernel
follows it (an input projection) or precedes it (an output projection). Only the fused decode step
(the default) is classified; other kernels are counted as "other".
"""
import csv
import sys

MOE = ("router_kernel", "gate_up_kernel", "down_kernel", "one_pass_kernel")
DELTANET = ("decode_step_kernel",)
ATTENTION = ("prep_kernel", "decode_mma_kernel", "decode_simt_kernel", "combine_kernel")


def kind_of(name):
    for kind, marks in (("MoE", MOE), ("DeltaNet", DELTANET), ("attention", ATTENTION)):
        if any(m in name for m in marks):
            return kind
    if any(m in name for m in ("embed_kernel", "sample_kernel", "gemv_stream_kernel")):
        return "embedding, lm_head, sampling"
    return "gemv" if "gemv_kernel" in name else "other"


def main(path):
    with open(path) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    kinds = [kind_of(r["name"]) for r in rows]
    for i, k in enumerate(kinds):
        if k != "gemv":
            continue
        after = next((kinds[j] for j in range(i + 1, len(kinds)) if kinds[j] != "gemv"), None)
        before = next((kinds[j] for j in range(i - 1, -1, -1) if kinds[j] != "gemv"), None)
        if after in ("DeltaNet", "attention"):
            kinds[i] = after  # an input projection
        elif after == "MoE" and before in ("DeltaNet", "attention"):
            kinds[i] = before  # an output projection
        else:
            kinds[i] = "embedding, lm_head, sampling"
    total = sum(float(r["own_us"]) for r in rows)
    split = {}
    for r, k in zip(rows, kinds):
        n, us = split.get(k, (0, 0.0))
        split[k] = (n + 1, us + float(r["own_us"]))
    print(f"| part | kernels | µs | share |\n|---|---:|---:|---:|")
    for k, (n, us) in sorted(split.items(), key=lambda kv: -kv[1][1]):
        print(f"| {k} | {n} | {us:.1f} | {100 * us / total:.1f} % |")
    print(f"| step | {len(rows)} | {total:.1f} | |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
