#!/usr/bin/env python3
"""Tokens/s and resident memory of vLLM's CPU backend serving an NVFP4 checkpoint through
quantkv's plugin, side by side with vLLM's own bf16 path on the same model dequantised to bf16
(docs/vllm.md, "Speed and memory on a small model").

    python scripts/vllm_speed.py [--work DIR]
                                 [--modes nvfp4_w4a16,nvfp4_w4a4,mxfp4_w4a16,bf16]

Run it in the venv scripts/vllm_ci.sh builds (vLLM, torch, compressed-tensors, quantkv with its
plugin). The model is a random Llama of SMALL_LLAMA's shape (about 0.5 B parameters: hidden 2048,
8 layers, intermediate 8192), quantised with compressed-tensors' own API by scripts/vllm_e2e.py's
make_model; the bf16 model holds the NVFP4 W4A16 checkpoint's weights dequantised, so every mode
runs the same network. Each mode is served in its own process as a user would (vLLM's engine core
and worker processes, TP=1, enforce_eager); the resident memory is that process tree's (each
process's VmRSS, and VmHWM for the peak, summed). Timed after one warm-up call: decode at batch 1 and 8 (64 greedy tokens per
prompt, 16-token prompts; the figure is generated tokens over the call's wall time, prefill
included) and prefill of one 512-token prompt (prompt tokens over the wall time of a 1-token call).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.join(_here, "..", "bench")]
import vllm_e2e  # noqa: E402  (the model makers and the dequantiser)
from linear_vs_torch import cpu_name  # noqa: E402

SMALL_LLAMA = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 8,
               "num_attention_heads": 16, "num_key_value_heads": 8,
               "max_position_embeddings": 1024}
MODES = {"nvfp4_w4a16": "NVFP4A16", "nvfp4_w4a4": "NVFP4", "mxfp4_w4a16": "MXFP4A16",
         "bf16": "BF16"}
DECODE_TOKENS, PROMPT_TOKENS, PREFILL_TOKENS = 64, 16, 512


def make_bf16_model(src: str, out: str) -> None:
    """The NVFP4 W4A16 checkpoint `src` dequantised: a plain bf16 Llama vLLM runs unquantised."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(src)
    del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
    _, state, dequant, _ = vllm_e2e.dequantise_checkpoint(src, "NVFP4A16")
    state.update({name + ".weight": w.to(torch.bfloat16) for name, w in dequant.items()})
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    model.save_pretrained(out)
    for f in os.listdir(src):
        if f.startswith("tokenizer") or f == "special_tokens_map.json":
            shutil.copy(os.path.join(src, f), out)


def tree_rss_mib() -> tuple[float, float]:
    """(current, peak) resident memory in MiB of this process and all its descendants (vLLM's
    engine core and worker processes), each process's VmRSS / VmHWM summed."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    todo, total, peak = [os.getpid()], 0.0, 0.0
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if "VmRSS" in fields:
            total += int(fields["VmRSS"].split()[0]) / 1024
            peak += int(fields["VmHWM"].split()[0]) / 1024
    return total, peak


def serve(path: str, out: str) -> None:
    import random

    from vllm import LLM, SamplingParams

    llm = LLM(model=path, tokenizer=path, dtype="bfloat16", enforce_eager=True,
              max_model_len=PREFILL_TOKENS + 64, max_num_seqs=8, seed=0)
    rng = random.Random(0)
    vocab = llm.get_tokenizer().vocab_size

    def prompts(n: int, length: int) -> list:
        return [{"prompt_token_ids": [rng.randrange(3, vocab) for _ in range(length)]}
                for _ in range(n)]

    decode = SamplingParams(temperature=0.0, max_tokens=DECODE_TOKENS, ignore_eos=True)
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    llm.generate(prompts(8, PROMPT_TOKENS), decode, use_tqdm=False)  # warm-up
    res = {}
    for batch in (1, 8):
        t = time.perf_counter()
        outs = llm.generate(prompts(batch, PROMPT_TOKENS), decode, use_tqdm=False)
        dt = time.perf_counter() - t
        res[f"decode_b{batch}"] = sum(len(o.outputs[0].token_ids) for o in outs) / dt
    t = time.perf_counter()
    llm.generate(prompts(1, PREFILL_TOKENS), one, use_tqdm=False)
    res["prefill"] = PREFILL_TOKENS / (time.perf_counter() - t)
    res["rss_mib"], res["peak_rss_mib"] = tree_rss_mib()
    import quantkv  # the level this process would pick; the worker inherits the environment

    res["isa"] = quantkv.isa_level()
    with open(out, "w") as f:
        json.dump(res, f)


def dir_mib(path: str) -> float:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if f.endswith(".safetensors")) / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/quantkv-vllm-speed")
    ap.add_argument("--modes", default="nvfp4_w4a16,nvfp4_w4a4,bf16")
    ap.add_argument("--serve", nargs=2, metavar=("PATH", "OUT"))
    args = ap.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    rows = []
    for mode in args.modes.split(","):
        preset = MODES[mode]
        path = os.path.join(args.work, preset.lower())
        if not os.path.exists(os.path.join(path, "config.json")):
            t = time.time()
            if preset == "BF16":
                src = os.path.join(args.work, "nvfp4a16")
                if not os.path.exists(os.path.join(src, "config.json")):
                    vllm_e2e.make_model("NVFP4A16", src, SMALL_LLAMA)
                make_bf16_model(src, path)
            else:
                vllm_e2e.make_model(preset, path, SMALL_LLAMA)
            print(f"# made {mode} in {time.time() - t:.0f} s", flush=True)
        out = os.path.join(args.work, mode + ".json")
        subprocess.run([sys.executable, __file__, "--serve", path, out], check=True)
        with open(out) as f:
            rows.append((mode, dir_mib(path), json.load(f)))
    print(f"# {cpu_name()}, {os.cpu_count()} CPUs, vLLM CPU backend, TP=1, random Llama "
          f"{json.dumps(SMALL_LLAMA)}")
    print(f"{'mode':>12} {'weights MiB':>11} {'decode b1 tok/s':>15} {'decode b8 tok/s':>15} "
          f"{'prefill tok/s':>13} {'RSS MiB':>8} {'peak RSS':>8} {'quantkv ISA':>11}")
    for mode, size, r in rows:
        print(f"{mode:>12} {size:>11.0f} {r['decode_b1']:>15.1f} {r['decode_b8']:>15.1f} "
              f"{r['prefill']:>13.1f} {r['rss_mib']:>8.0f} {r['peak_rss_mib']:>8.0f} "
              f"{r['isa']:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
