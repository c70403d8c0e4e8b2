#!/usr/bin/env python3
"""quantkv.linear against torch's bf16 linear (oneDNN) on the dequantised weight, side by side in
one run: what an engine developer would otherwise do with an NVFP4 / MXFP4 / MXFP8 checkpoint.

    python bench/linear_vs_torch.py [--k 14336 --n 4096] [--m 1,16,64,128,512] [--isa avx2]

Needs the quantkv package (pip install .) and numpy; torch is measured when it is importable.
Prints one row per M: quantkv W4A16 (bf16 activations), W4A4 (quantised activations, the
quantiser's time included) — W8A16 and W8A8 for MXFP8 —, torch bf16 F.linear, and the speed-ups. The CPU is named in the
header; the figures are medians of --reps timed calls after a warm-up.
"""
import argparse
import platform
import statistics
import time

import numpy as np

import quantkv


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def median_time(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=14336)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--m", default="1,16,64,128,512")
    ap.add_argument("--format", default="nvfp4", choices=["nvfp4", "mxfp4", "mxfp8"])
    ap.add_argument("--isa", default=None, help="force quantkv's ISA level (e.g. avx2)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.isa:
        quantkv.set_isa_level(args.isa)
    try:
        import torch
        if args.threads:
            torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    k, n, fmt = args.k, args.n, args.format
    w = rng.normal(0, 1, (n, k)).astype(np.float32)
    g_w = 1.0 if fmt != "nvfp4" else 448.0 * 6.0 / float(np.abs(w).max())
    data, scales = quantkv.quantize_dynamic_block_scaled(w, format=fmt, global_scale=g_w)
    prepared = quantkv.prepare_weights(data, scale=scales, format=fmt)
    del w
    print(f"# {cpu_name()}, quantkv ISA {quantkv.isa_level()}, K = {k}, N = {n}, {fmt}, "
          f"torch {torch.__version__ if torch else 'not installed'}")
    if torch is not None:
        kb = k // (16 if fmt == "nvfp4" else 32)
        rows = quantkv.swizzled_to_linear_scales(scales, n, kb)
        codes = (quantkv.unpack_e2m1(data) if fmt != "mxfp8" else data).astype(np.uint8)
        vals = (quantkv.decode_e2m1(codes) if fmt != "mxfp8" else quantkv.decode_e4m3(codes))
        sc = (quantkv.decode_e4m3(rows & 0x7F) if fmt == "nvfp4" else quantkv.decode_e8m0(rows))
        deq = np.asarray(vals, np.float32).reshape(n, kb, -1) * np.asarray(sc, np.float32)[:, :, None]
        w_bf16 = torch.from_numpy(deq.reshape(n, k) / g_w).to(torch.bfloat16)
        del deq, vals, codes
    wb = "W8" if fmt == "mxfp8" else "W4"  # MXFP8: W8A16 and W8A8
    print(f"{'M':>5} {wb + 'A16 ms':>10} {wb + 'A' + wb[1] + ' ms':>9} {'torch bf16 ms':>14} "
          f"{wb + 'A16 vs torch':>15} {wb + 'A' + wb[1] + ' vs torch':>14}")
    for m in [int(v) for v in args.m.split(",")]:
        x = rng.normal(0, 1, (m, k)).astype(np.float32)
        xb = quantkv.encode_bf16(x)
        t16 = median_time(lambda: quantkv.linear(xb, prepared, alpha=1.0 / g_w,
                                                 num_threads=args.threads), args.reps)
        g_x = 1.0 if fmt != "nvfp4" else 448.0 * 6.0 / float(np.abs(x).max())

        def w4a4():
            xq, xs = quantkv.quantize_dynamic_block_scaled(xb, format=fmt, global_scale=g_x,
                                                           num_threads=args.threads)
            return quantkv.linear(xq, prepared, x_scale=xs, alpha=1.0 / (g_x * g_w),
                                  num_threads=args.threads)
        t4 = median_time(w4a4, args.reps)
        if torch is not None:
            xt = torch.from_numpy(x).to(torch.bfloat16)
            tt = median_time(lambda: torch.nn.functional.linear(xt, w_bf16), args.reps)
            print(f"{m:>5} {t16 * 1e3:>10.3f} {t4 * 1e3:>9.3f} {tt * 1e3:>14.3f} {tt / t16:>14.2f}x "
                  f"{tt / t4:>13.2f}x")
        else:
            print(f"{m:>5} {t16 * 1e3:>10.3f} {t4 * 1e3:>9.3f} {'-':>14} {'-':>15} {'-':>14}")


if __name__ == "__main__":
    main()
