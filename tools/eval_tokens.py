#!/usr/bin/env python3
"""Writes the token file of the GPU scripts' CUDA-vs-CPU logit comparison: 300 ids (or COUNT) drawn
with a fixed seed, as a safetensors file with one I32 tensor "tokens" (the input of `qwick eval
--tokens`).
Usage: tools/eval_tokens.py OUT [COUNT]"""
import json
import random
import struct
import sys

COUNT, VOCAB = int(sys.argv[2]) if len(sys.argv) > 2 else 300, 248044

random.seed(0)
ids = [random.randrange(0, VOCAB) for _ in range(COUNT)]
header = json.dumps({"tokens": {"dtype": "I32", "shape": [COUNT], "data_offsets": [0, 4 * COUNT]}}).encode()
header += b" " * ((8 - len(header) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + struct.pack(f"<{COUNT}i", *ids))
