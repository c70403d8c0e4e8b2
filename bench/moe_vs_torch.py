#!/usr/bin/env python3
"""quantkv.fused_experts against torch's bf16 F.linear over the routed experts (dequantised
weights), side by side in one run: what an engine without a quantised MoE kernel does.

    python bench/moe_vs_torch.py [--model gpt_oss_20b|qwen3_30b_a3b] [--t 1,16,512]
                                 [--threads 1,2] [--reps 7]

The layers are bench/moe_bench.cpp's: gpt-oss-20b (H 2880, I 2880, 32 experts, top-4, MXFP4,
interleaved gate/up, SwiGLU-OAI, biases) and Qwen3-30B-A3B (H 2048, I 768, 128 experts, top-8,
NVFP4, halves, SiLU); random codes and scales, random top-k routing (k distinct experts per token,
seed 0). torch runs the loop an engine would write: per routed expert, gather its tokens,
F.linear (w13, bias), the activation, F.linear (w2, bias), scale by the router weight and
index_add into y. Needs the quantkv package and torch. Prints the CPU, then per (T, threads)
the median of --reps timed calls after a warm-up for quantkv W4A16 (bf16 activations), W4A4
(quantised activations) and torch bf16, and the routed experts' weight GB/s of each (codes and
block scales as checkpoints store them for quantkv; the bf16 weights torch reads for torch).
"""
import argparse
import statistics

import numpy as np
import torch
import torch.nn.functional as F

import quantkv
from linear_vs_torch import cpu_name, median_time  # this folder's script

MODELS = {
    "gpt_oss_20b": dict(h=2880, i=2880, e=32, k=4, fmt="mxfp4", gpt_oss=True),
    "qwen3_30b_a3b": dict(h=2048, i=768, e=128, k=8, fmt="nvfp4", gpt_oss=False),
}
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequantise(codes, scales, fmt, alpha):
    """bf16 [N, K] from packed e2m1 codes [N, K/2] and row-major block scales [N, K/SFV]."""
    c = torch.from_numpy(codes)
    vals = torch.stack([c & 0x0F, c >> 4], dim=-1).reshape(c.shape[0], -1).long()
    w = torch.tensor(E2M1)[vals]
    if fmt == "mxfp4":
        s = torch.exp2(torch.from_numpy(scales).float() - 127.0)
    else:
        s = torch.from_numpy(np.asarray(quantkv.decode_e4m3(scales & 0x7F), np.float32))
    sfv = w.shape[1] // s.shape[1]
    return (w.reshape(w.shape[0], -1, sfv) * s[:, :, None] * alpha).reshape(w.shape).bfloat16()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt_oss_20b", choices=sorted(MODELS))
    ap.add_argument("--t", default="1,16,512")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    m = MODELS[args.model]
    h, inter, e, k, fmt = m["h"], m["i"], m["e"], m["k"], m["fmt"]
    sfv = 32 if fmt == "mxfp4" else 16
    rng = np.random.default_rng(0)
    w13 = rng.integers(0, 256, (e, 2 * inter, h // 2), dtype=np.uint8)
    w2 = rng.integers(0, 256, (e, h, inter // 2), dtype=np.uint8)
    lo, hi = (120, 132) if fmt == "mxfp4" else (0x28, 0x50)
    s13 = rng.integers(lo, hi, (e, 2 * inter, h // sfv), dtype=np.uint8)
    s2 = rng.integers(lo, hi, (e, h, inter // sfv), dtype=np.uint8)
    alpha = 1.0 if fmt == "mxfp4" else 0.01
    glob = [1.0] * e if fmt == "mxfp4" else [400.0] * e
    experts = quantkv.prepare_experts(w13, s13, w2, s2, format=fmt, w13_alpha=[alpha] * e,
                                      w2_alpha=[alpha] * e, x_global=glob,
                                      h_global=[1.0 if fmt == "mxfp4" else 200.0] * e)
    b13 = torch.from_numpy(rng.normal(0, 0.1, (e, 2 * inter)).astype(np.float32))
    b2 = torch.from_numpy(rng.normal(0, 0.1, (e, h)).astype(np.float32))
    t13 = [dequantise(w13[x], s13[x], fmt, alpha) for x in range(e)]
    t2 = [dequantise(w2[x], s2[x], fmt, alpha) for x in range(e)]
    b13b, b2b = b13.bfloat16(), b2.bfloat16()
    expert_bytes = (w13[0].nbytes + s13[0].nbytes + w2[0].nbytes + s2[0].nbytes)
    expert_bf16 = 2 * (3 * h * inter)
    print(f"# {cpu_name()}, quantkv ISA {quantkv.isa_level()}, torch {torch.__version__}, "
          f"{args.model}: H {h}, I {inter}, E {e}, top-{k}, {fmt}")
    print(f"{'T':>4} {'thr':>3} {'routed':>6} {'W4A16 ms':>9} {'W4A4 ms':>8} {'torch ms':>9} "
          f"{'W4A16 GB/s':>10} {'W4A4 GB/s':>9} {'torch GB/s':>10} {'vs torch':>8}")
    kw = dict(gate_up="interleaved", activation="swiglu_oai", w13_bias=b13,
              w2_bias=b2) if m["gpt_oss"] else {}

    def torch_moe(x, ids, wts):
        y = torch.zeros(x.shape, dtype=torch.float32)
        for x_e in torch.unique(ids).tolist():
            tok, slot = torch.nonzero(ids == x_e, as_tuple=True)
            gu = F.linear(x[tok], t13[x_e], b13b[x_e] if m["gpt_oss"] else None)
            if m["gpt_oss"]:
                g = gu[:, 0::2].float().clamp(max=7.0)
                u = gu[:, 1::2].float().clamp(-7.0, 7.0)
                act = (g * torch.sigmoid(1.702 * g) * (u + 1)).bfloat16()
            else:
                act = (F.silu(gu[:, :inter].float()) * gu[:, inter:].float()).bfloat16()
            o = F.linear(act, t2[x_e], b2b[x_e] if m["gpt_oss"] else None)
            y.index_add_(0, tok, o.float() * wts[tok, slot][:, None])
        return y.bfloat16()

    for t in [int(v) for v in args.t.split(",")]:
        # Eight routings, one per call in turn, so that the routed experts are not the previous
        # call's (cached) ones.
        routings = []
        for _ in range(8):
            ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32)
            wts = rng.uniform(0.1, 1.0, (t, k)).astype(np.float32)
            wts /= wts.sum(axis=1, keepdims=True)
            routings.append((torch.from_numpy(ids), torch.from_numpy(wts)))
        routed = statistics.mean(len(torch.unique(r[0])) for r in routings)
        x = torch.from_numpy(rng.normal(0, 1, (t, h)).astype(np.float32)).bfloat16()
        turn = [0]

        def next_routing():
            turn[0] += 1
            return routings[turn[0] % len(routings)]

        def run_quantkv(threads, quantised):
            ids, wts = next_routing()
            return quantkv.fused_experts(x, ids, wts, experts, quantize_activations=quantised,
                                         num_threads=threads, **kw)

        def run_torch():
            ids, wts = next_routing()
            return torch_moe(x, ids.long(), wts)

        for threads in [int(v) for v in args.threads.split(",")]:
            torch.set_num_threads(threads)
            t16 = median_time(lambda: run_quantkv(threads, False), args.reps)
            t4 = median_time(lambda: run_quantkv(threads, True), args.reps)
            tt = median_time(run_torch, args.reps)
            gb = routed * expert_bytes / 1e9
            print(f"{t:>4} {threads:>3} {routed:>6.1f} {t16 * 1e3:>9.3f} {t4 * 1e3:>8.3f} "
                  f"{tt * 1e3:>9.3f} {gb / t16:>10.2f} {gb / t4:>9.2f} "
                  f"{routed * expert_bf16 / 1e9 / tt:>10.2f} {tt / t16:>7.2f}x")

if __name__ == "__main__":
    main()
