#!/usr/bin/env python3
"""Writes the small seed corpus of each fuzz target: fuzz/corpus/<target>/seed-*.

The targets read their bytes through FuzzedDataProvider (fuzz_input.hpp): integers from the
end of the input, so a short input describes a small consistent call and an exhausted input
makes every defect choice "no". The seeds cover: nothing (all minimums), all-ones (maximum
shapes, every defect branch taken where the byte allows it), a few fixed pseudo-random inputs of
growing length, and patterns of the special bytes (0x7F / 0xFF: fp8 NaN codes, e8m0 NaN).
Deterministic: rerunning gives the same files."""
import os
import random
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
targets = sys.argv[1:] or sorted(
    f[:-4] for f in os.listdir(os.path.dirname(os.path.abspath(__file__))) if f.endswith("_fuzz.cpp"))
for t in targets:
    d = os.path.join(root, t)
    os.makedirs(d, exist_ok=True)
    rng = random.Random(t)
    seeds = {
        "zeros": bytes(64),
        "ones": bytes([0xFF]) * 256,
        "nan-codes": bytes([0x7F, 0xFF, 0x80, 0x00]) * 128,
        "saturation": bytes([0x7E, 0xFE, 0x43, 0xE0]) * 128,
    }
    for i, n in enumerate((16, 96, 512, 2048)):
        seeds[f"random-{i}"] = bytes(rng.randrange(256) for _ in range(n))
    for name, data in seeds.items():
        with open(os.path.join(d, "seed-" + name), "wb") as f:
            f.write(data)
