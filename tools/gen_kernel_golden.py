#!/usr/bin/env python3
"""Writes tests/data/dequant_golden.json: raw block bytes + dequantized values made by an
independent implementation (gguf==0.17.1, gguf.quants.dequantize) for the kernels' dequantizer
tests. Real rows of the default model (Q4_1 linear weights, Q8_0 token embedding) confirm that our
reading of ggml's layouts matches real files, as do two Q5_0 rows of Gemma 3 270M when that model
is present; seeded random blocks cover Q4_0/Q4_K/Q6_K/Q5_0/F16/BF16.

Usage: tools/gen_kernel_golden.py [model.gguf [gemma.gguf]]
(defaults: ~/.cache/kvserve/models/SmolLM2-135M-Instruct.Q4_1.gguf, .../gemma-3-270m-q4_k_m.gguf)
Not run by CI; the output is committed (keep it < 200 KB).
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as QT
from gguf.quants import dequantize

MODEL = os.path.expanduser("~/.cache/kvserve/models/SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA = os.path.expanduser("~/.cache/kvserve/models/gemma-3-270m-q4_k_m.gguf")
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "dequant_golden.json")


def case(name, qtype, raw):
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    values = dequantize(raw, qtype).astype(np.float32).reshape(-1)
    return {
        "name": name,
        "type": qtype.name,
        "bytes_hex": raw.tobytes().hex(),
        # repr of float32 through float64 is exact, so the test can compare tightly.
        "values": [float(v) for v in values],
    }


def real_rows(path, cases, wanted):
    reader = GGUFReader(path)
    for t in reader.tensors:
        qtype = QT(t.tensor_type)
        if wanted.get(qtype, 0) == 0:
            continue
        wanted[qtype] -= 1
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        cols = int(t.shape[0])  # gguf shape is (cols, rows)
        row_bytes = cols // block_elems * block_bytes
        data = np.asarray(t.data).reshape(-1).view(np.uint8)
        for r in (0, int(t.shape[1]) // 2 + 1):
            cases.append(case(f"{t.name}[{r}]", qtype, data[r * row_bytes:(r + 1) * row_bytes]))


def random_blocks(cases):
    rng = np.random.default_rng(20261129)
    for qtype, blocks in ((QT.Q4_0, 4), (QT.Q4_1, 2), (QT.Q8_0, 2), (QT.Q4_K, 3), (QT.Q6_K, 3),
                          (QT.F16, 96), (QT.BF16, 96), (QT.Q5_0, 6)):
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=blocks * block_bytes, dtype=np.uint8)
        view = raw.reshape(blocks, block_bytes)
        # Keep f16 scale fields finite and of sane magnitude (random bytes can be inf/NaN).
        def f16(vals):
            return np.asarray(vals, dtype=np.float16).view(np.uint8).reshape(blocks, 2)
        if qtype in (QT.Q4_0, QT.Q8_0, QT.Q5_0):
            view[:, 0:2] = f16(rng.uniform(-2, 2, blocks))
        elif qtype == QT.Q4_1:
            view[:, 0:2] = f16(rng.uniform(0, 2, blocks))
            view[:, 2:4] = f16(rng.uniform(-8, 8, blocks))
        elif qtype == QT.Q4_K:
            view[:, 0:2] = f16(rng.uniform(0, 0.1, blocks))
            view[:, 2:4] = f16(rng.uniform(0, 0.1, blocks))
        elif qtype == QT.Q6_K:
            view[:, 208:210] = f16(rng.uniform(-0.05, 0.05, blocks))
        elif qtype == QT.F16:
            raw = np.asarray(rng.uniform(-100, 100, blocks), dtype=np.float16).view(np.uint8)
        elif qtype == QT.BF16:
            f = np.asarray(rng.uniform(-100, 100, blocks), dtype=np.float32)
            raw = (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        cases.append(case(f"random_{qtype.name}", qtype, raw))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else MODEL
    gemma = sys.argv[2] if len(sys.argv) > 2 else GEMMA
    cases = []
    real_rows(path, cases, {QT.Q4_1: 2, QT.Q8_0: 2})
    if os.path.exists(gemma):
        real_rows(gemma, cases, {QT.Q5_0: 1})
    random_blocks(cases)
    with open(OUT, "w") as f:
        json.dump({"generator": "tools/gen_kernel_golden.py (gguf 0.17.1)", "cases": cases}, f,
                  separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(cases)} cases, {os.path.getsize(OUT)} bytes to {OUT}")


if __name__ == "__main__":
    main()
