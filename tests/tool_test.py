#!/usr/bin/env python3
"""End-to-end checks of the quantkv program (standard library only).

usage: tool_test.py QUANTKV_BINARY WORK_DIR {demo|bench|ceilings|errors|checkpoint}

demo:   `quantkv demo --quick --json` (NVFP4 and MXFP8, and on the scalar ISA): shapes, pages,
        the documented accuracy bounds (docs/demo.md), index sanity.
bench:  `quantkv bench --quick --json` (and `--isas` over every level the CPU runs): ceilings,
        every standard shape, ratios present and
        positive, the SVG plot; on every ISA level the machine has, no kernel above its
        ceiling (a ratio above 1 means a ceiling measured wrong; run with --strict, so that
        fails here).
ceilings: a ratio above 1 made on purpose (the hidden --testing-ceiling-scale): a warning
        naming it and exit 0, or with --strict an error and exit 1.
errors: bad options and values: a non-zero exit code and a short message naming them.
checkpoint: `quantkv inspect` (projections and MoE expert groups) and `demo --checkpoint` on small NVFP4 (ModelOpt) and MXFP4
        checkpoints written here (random codes): the projections listed, the errors printed
        within the bounds of docs/checkpoints.md, a bad file named.

QUANTKV_EMULATOR (space-separated, set by CMake in cross builds) prefixes every run of the
binary, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu max".
"""
import json
import math
import os
import random
import re
import struct
import subprocess
import sys

# The bounds documented in docs/demo.md (and printed by the demo), by format.
Q_REL_ERR_MAX = {"NVFP4": 0.16, "MXFP4": 0.19, "MXFP8": 0.05}
# Quantisation must be visible: an error below this means the fp32 data went through.
Q_REL_ERR_MIN = {"NVFP4": 0.05, "MXFP4": 0.05, "MXFP8": 0.005}
RECALL_MIN = 0.95
PIPELINE_RECALL_MIN = 0.85  # not a documented bound; a guard against gross breakage

# The deepseek-v3.2-tiny preset that --quick runs.
TINY = {"hidden": 256, "q_dim": 64, "kv_lora": 64, "rope_dim": 32, "kv_head_size": 96,
        "qkv_n": 160, "index_heads": 8, "index_dim": 64, "top_k": 16, "page_size": 16,
        "decode_steps": 4}
TINY_PROMPTS = [64, 30]

EMULATOR = os.environ.get("QUANTKV_EMULATOR", "").split()

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(binary, args, timeout=600):
    proc = subprocess.run(EMULATOR + [binary] + args, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def run_json(binary, args):
    rc, out, err = run(binary, args)
    if rc != 0:
        print(err)
        raise SystemExit("FAIL: quantkv %s exited with %d" % (" ".join(args), rc))
    return json.loads(out)


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def check_demo_run(d, fmt):
    tag = "demo %s: " % fmt
    check(d["command"] == "demo" and d["preset"] == "deepseek-v3.2-tiny", tag + "preset")
    check(d["format"] == fmt, tag + "format %s" % d["format"])
    for key, value in TINY.items():
        check(d["shapes"][key] == value, tag + "shape %s = %s, expected %s" % (key, d["shapes"][key], value))
    page = TINY["page_size"]
    seqs = d["sequences"]
    check([s["prompt_tokens"] for s in seqs] == TINY_PROMPTS, tag + "prompt lengths")
    all_pages = []
    crossed = 0
    for s in seqs:
        final = s["prompt_tokens"] + TINY["decode_steps"]
        check(s["final_tokens"] == final, tag + "final length")
        check(s["kv_pages"] == -(-final // page), tag + "pages cover the sequence exactly")
        check(s["index_pages"] == s["kv_pages"], tag + "indexer cache pages")
        check(len(s["page_ids"]) == s["kv_pages"], tag + "page ids listed")
        crossed += s["kv_pages"] > s["kv_pages_after_prompt"]
        all_pages += s["page_ids"]
    check(crossed == len(seqs), tag + "every sequence crosses a page boundary while decoding")
    check(len(set(all_pages)) == len(all_pages), tag + "no page shared between sequences")
    check(all(0 <= p < d["kv_num_blocks"] for p in all_pages), tag + "page ids in range")
    check(all_pages != sorted(all_pages), tag + "pages are shuffled")

    tokens = sum(TINY_PROMPTS) + len(TINY_PROMPTS) * TINY["decode_steps"]
    check(d["prefill"]["tokens"] == sum(TINY_PROMPTS), tag + "prefill tokens")
    check(d["decode"]["tokens"] == len(TINY_PROMPTS) * TINY["decode_steps"], tag + "decode tokens")
    for phase in ("prefill", "decode"):
        steps = d[phase]["steps"]
        check(len(steps) == 6, tag + phase + " steps")
        check(all(s["seconds"] >= 0 and s["rate"] >= 0 for s in steps), tag + phase + " timings")
        check(positive(d[phase]["seconds"]), tag + phase + " total time")

    for smp in d["samples"]:
        idx = smp["indices"]
        check(len(idx) == min(10, TINY["top_k"], smp["visible"]), tag + "sample size")
        check(len(set(idx)) == len(idx) and all(0 <= i < smp["visible"] for i in idx),
              tag + "sample indices distinct and visible")

    a = d["accuracy"]
    check(a["index_errors"] == 0 and a["rows_validated"] == tokens, tag + "index checks on every row")
    check(a["rows_checked"] > 0 and a["contested_rows"] > 0, tag + "rows checked against fp32")
    check(Q_REL_ERR_MIN[fmt] <= a["q_rel_err"] <= Q_REL_ERR_MAX[fmt],
          tag + "Q relative error %s within [%s, %s]" % (a["q_rel_err"], Q_REL_ERR_MIN[fmt], Q_REL_ERR_MAX[fmt]))
    check(Q_REL_ERR_MIN[fmt] <= a["kv_rel_err"] <= Q_REL_ERR_MAX[fmt],
          tag + "KV relative error %s" % a["kv_rel_err"])
    check(RECALL_MIN <= a["recall"] <= 1.0, tag + "recall %s >= %s" % (a["recall"], RECALL_MIN))
    check(PIPELINE_RECALL_MIN <= a["pipeline_recall"] <= 1.0,
          tag + "pipeline recall %s" % a["pipeline_recall"])
    check(a["bounds"] == {"q_rel_err_max": Q_REL_ERR_MAX[fmt], "kv_rel_err_max": Q_REL_ERR_MAX[fmt],
                          "recall_min": RECALL_MIN}, tag + "documented bounds")


def test_demo(binary):
    default = run_json(binary, ["demo", "--quick", "--json"])
    check_demo_run(default, "NVFP4")
    check_demo_run(run_json(binary, ["demo", "--quick", "--json", "--format", "mxfp8", "--threads", "1"]), "MXFP8")
    scalar = run_json(binary, ["demo", "--quick", "--json", "--isa", "scalar"])
    check(scalar["isa"] == "scalar", "demo --isa scalar runs the scalar path")
    check_demo_run(scalar, "NVFP4")
    # The library's results do not depend on the ISA; only the demo's fp32 glue may round
    # differently, so the errors agree closely.
    for key in ("q_rel_err", "kv_rel_err"):
        a, b = default["accuracy"][key], scalar["accuracy"][key]
        check(abs(a - b) <= 1e-3 * a, "demo %s: %s (default ISA) vs %s (scalar)" % (key, a, b))
    rc, out, err = run(binary, ["demo", "--quick"])
    check(rc == 0 and "Accuracy against fp32" in out and "Selected keys" in out, "demo text report")


ISA_LEVELS = ["scalar", "avx2", "avx512"]


def supported_isa_levels(binary):
    """The levels up to the best this CPU supports, from `quantkv info`."""
    rc, out, err = run(binary, ["info"], timeout=60)
    for line in out.splitlines():
        if "best supported:" in line:
            best = line.split("best supported:")[1].split(";")[0].strip()
            return ISA_LEVELS[:ISA_LEVELS.index(best) + 1]
    check(False, "quantkv info names the best supported ISA level")
    return ["scalar"]


def check_within_ceilings(d, tag):
    """Each kernel's rate is at most its ceiling: the ceiling loops are honest on this level."""
    check(d["ceiling_errors"] == [], tag + ": results above their ceiling: %s" % d["ceiling_errors"])
    for r in d["results"]:
        check(r["ratio"] <= 1.0, tag + ": %s %s ratio %s <= 1" % (r["op"], r["case"], r["ratio"]))


def test_bench(binary, work_dir):
    svg = os.path.join(work_dir, "quantkv_bench_test.svg")
    if os.path.exists(svg):
        os.remove(svg)
    d = run_json(binary, ["bench", "--quick", "--json", "--strict", "--svg", svg])
    c = d["ceilings"]
    check(all(positive(c[k]) for k in ("bf16_gflops", "int8_gops", "read_gbs")), "bench ceilings")
    results = d["results"]
    ops = [r["op"] for r in results]
    check(ops.count("indexer") == 2 and ops.count("qkv") == 3, "bench shapes: %s" % ops)
    for r in results:
        name = "%s %s" % (r["op"], r["case"])
        for key in ("seconds", "flops", "bytes", "gflops", "gbs", "intensity", "ratio"):
            check(positive(r[key]), "bench %s: %s = %s is positive" % (name, key, r[key]))
        check(r["reps"] >= 1, "bench %s reps" % name)
        # The roofline: the compute ceiling, or the read bandwidth where bandwidth x intensity
        # is lower (which one binds at M = 16 depends on the machine).
        compute = "bf16 dot" if r["op"] == "indexer" else "int8 dot"
        peak = c["bf16_gflops"] if compute == "bf16 dot" else c["int8_gops"]
        expected = "read bw" if c["read_gbs"] * r["intensity"] < peak else compute
        check(r["ceiling"] == expected, "bench %s ceiling %s, expected %s" % (name, r["ceiling"], expected))
        # With SIMD int8 dots M = 1 is bound by the weight read; the scalar level's int8 ceiling
        # is low enough that bandwidth x intensity may pass it (the portable build), and the
        # check above already holds the roofline to the measured ceilings.
        if r["case"].endswith("M=1") and d["isa"] != "scalar":
            check(r["ceiling"] == "read bw", "bench %s: M = 1 is bound by the read bandwidth" % name)
        rate = r["gbs"] if r["ceiling"] == "read bw" else r["gflops"]
        ceiling = {"bf16 dot": c["bf16_gflops"], "int8 dot": c["int8_gops"], "read bw": c["read_gbs"]}[r["ceiling"]]
        check(abs(r["ratio"] - rate / ceiling) <= 1e-3 * r["ratio"] + 1e-9, "bench %s ratio" % name)
    check_within_ceilings(d, "bench (isa %s)" % d["isa"])
    # Every level this CPU runs, in one run (--isas): each against its own ceilings.
    levels = supported_isa_levels(binary)
    if len(levels) > 1:
        multi = run_json(binary, ["bench", "--quick", "--json", "--strict", "--isas", ",".join(levels),
                                  "--svg", ""])
        check([r["isa"] for r in multi["runs"]] == levels, "bench --isas: one run per level, in order")
        for level_run in multi["runs"]:
            check([r["case"] for r in level_run["results"]] == [r["case"] for r in results],
                  "bench --isas %s: the same shapes" % level_run["isa"])
            check_within_ceilings(level_run, "bench --isas (%s)" % level_run["isa"])
    check(os.path.exists(svg), "bench wrote the SVG plot")
    if os.path.exists(svg):
        text = open(svg).read()
        check(text.startswith("<svg") and text.rstrip().endswith("</svg>"), "SVG document")
        check(text.count("<circle") >= len(results), "SVG has a point per shape")
    only = run_json(binary, ["bench", "--quick", "--json", "--strict", "--op", "qkv", "--svg", ""])
    check([r["op"] for r in only["results"]] == ["qkv"] * 3 and only["svg"] is None, "bench --op qkv")


def test_ceilings(binary):
    """Every measured ceiling scaled down 10^6 times (the hidden testing option): ratios above 1
    whatever the machine's noise. A user's run warns and succeeds; --strict (CI) fails."""
    args = ["bench", "--quick", "--json", "--op", "qkv", "--svg", "", "--testing-ceiling-scale", "1e-6"]
    for strict in (False, True):
        tag = "bench %s, ceilings scaled down: " % ("--strict" if strict else "without --strict")
        rc, out, err = run(binary, args + (["--strict"] if strict else []))
        check(rc == (1 if strict else 0), tag + "exit code %d, expected %d" % (rc, 1 if strict else 0))
        d = json.loads(out)
        check(d["strict"] == strict, tag + "strict = %s in the JSON" % d["strict"])
        c = d["ceilings"]
        above = [r for r in d["results"] if r["ratio"] > 1.0]
        check(len(above) >= 1, tag + "a ratio above 1")
        check(d["ceiling_errors"] == ["%s %s" % (r["op"], r["case"]) for r in above],
              tag + "ceiling_errors %s" % d["ceiling_errors"])
        prefix = "error: " if strict else "warning: "
        lines = [line for line in err.splitlines() if line.startswith(("warning: ", "error: "))]
        check(len(lines) == len(above) and all(line.startswith(prefix) for line in lines),
              tag + "one %sline per result above its ceiling on stderr: %r" % (prefix, err))
        for r, line in zip(above, lines):
            # The line names the shape, its ratio and the ceiling with its value (the JSON's
            # numbers have 6 significant digits, the line's ratio 3 decimals and ceiling 3 digits).
            value, unit = {"bf16 dot": (c["bf16_gflops"], "GFLOP/s"), "int8 dot": (c["int8_gops"], "GOP/s"),
                           "read bw": (c["read_gbs"], "GB/s")}[r["ceiling"]]
            m = re.search(r"ran at ([0-9.]+) of its (.+) ceiling \(([0-9.e+-]+) (\S+) measured", line)
            check("%s %s (%s," % (r["op"], r["case"], r["shape"]) in line, tag + "%r names the shape" % line)
            check(m is not None and m.group(2) == r["ceiling"] and m.group(4) == unit,
                  tag + "%r names the %s ceiling in %s" % (line, r["ceiling"], unit))
            if m:
                check(abs(float(m.group(1)) - r["ratio"]) <= 1e-5 * r["ratio"] + 1e-3,
                      tag + "%r: ratio %s" % (line, r["ratio"]))
                check(abs(float(m.group(3)) - value) <= 1e-2 * value, tag + "%r: ceiling %s" % (line, value))
        check(d["warnings"] == ([] if strict else lines), tag + "the JSON's warnings are stderr's: %r" % d["warnings"])


def other_architecture_level(binary):
    """A level of the architecture the program does not run on: known, but not supported."""
    rc, out, _ = run(binary, ["info"], timeout=60)
    return "avx512" if "best supported: neon" in out else "neon"


def test_errors(binary):
    cases = [
        (["demo", "--format", "fp3"], "--format"),
        (["demo", "--bogus"], "--bogus"),
        (["demo", "--tokens", "abc"], "--tokens"),
        (["demo", "--tokens", "-5"], "--tokens"),
        (["demo", "--hidden", "100"], "--hidden"),
        (["demo", "--seqs", "0"], "--seqs"),
        (["demo", "--preset", "llama"], "--preset"),
        (["demo", "--quick", "--preset", "deepseek-v3.2"], "--preset"),
        (["demo", "--threads", "x"], "--threads"),
        (["demo", "--isa", "sse9"], "--isa"),
        (["demo", "--isa", other_architecture_level(binary)], "--isa"),
        (["bench", "--op", "foo"], "--op"),
        (["bench", "--svg", os.path.join("/nonexistent-dir", "x.svg")], "--svg"),
        (["bench", "--isas", "avx2,sse9"], "--isas"),
        (["bench", "--isas", other_architecture_level(binary)], "--isas"),
        (["bench", "--isas", "scalar", "--isa", "scalar"], "--isas"),
        (["frobnicate"], "frobnicate"),
        ([], "subcommand"),
    ]
    for args, named in cases:
        rc, out, err = run(binary, args, timeout=60)
        what = "quantkv %s" % " ".join(args)
        check(rc not in (0, -6, -11) and 0 < rc < 128, what + ": exit code %d" % rc)
        lines = err.strip().splitlines()
        check(1 <= len(lines) <= 2 and named in lines[0], what + ": one line naming %s, got %r" % (named, err))
        check(out == "", what + ": nothing on stdout")
    rc, out, err = run(binary, ["demo", "--help"], timeout=60)
    check(rc == 0 and "--preset" in out and "--decode-steps" in out, "demo --help")
    rc, out, err = run(binary, ["info"], timeout=60)
    check(rc == 0 and "isa level" in out, "info still works")


def write_checkpoint(path, layout, k=128, rows=(64, 32, 32), extra=()):
    """q/k/v of `layout` ('nvfp4-modelopt', 'mxfp4' or 'mxfp4-ct': compressed-tensors'
    mxfp4-pack-quantized), random codes, sane block scales; `extra`: more (name, n, k)."""
    rng = random.Random(5)
    header, blobs, offset = {}, [], 0

    def add(name, dtype, shape, data):
        nonlocal offset
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)

    projections = [("model.layers.0.self_attn.%s_proj" % s, n, k) for s, n in zip("qkv", rows)]
    for i, (p, n, k) in enumerate(projections + list(extra)):
        shard = "qkv"[i % 3]
        data = bytes(rng.randrange(256) for _ in range(n * k // 2))
        if layout == "mxfp4-ct":
            add(p + ".weight_packed", "U8", [n, k // 2], data)
            add(p + ".weight_scale", "U8", [n, k // 32], bytes(rng.randrange(120, 132) for _ in range(n * k // 32)))
        elif layout == "mxfp4":
            add(p + ".weight_blocks", "U8", [n, k // 32, 16], data)
            add(p + ".weight_scales", "U8", [n, k // 32], bytes(rng.randrange(120, 132) for _ in range(n * k // 32)))
        else:
            add(p + ".weight", "U8", [n, k // 2], data)
            add(p + ".weight_scale", "F8_E4M3", [n, k // 16], bytes(rng.randrange(0x28, 0x50) for _ in range(n * k // 16)))
            add(p + ".weight_scale_2", "F32", [], struct.pack("<f", 0.001 * (1 + "qkv".index(shard))))
            add(p + ".input_scale", "F32", [], struct.pack("<f", 4.0 / 2688))
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_experts_checkpoint(path):
    """Layer 0: gpt-oss's stacked MXFP4 experts (E = 4, H = 64, I = 32, biases); layer 1:
    per-expert compressed-tensors MXFP4 (E = 3, H = 64, I = 32, no biases)."""
    rng = random.Random(6)
    header, blobs, offset = {}, [], 0

    def add(name, dtype, shape, nbytes, lo=0, hi=255):
        nonlocal offset
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        blobs.append(bytes(rng.randrange(lo, hi + 1) for _ in range(nbytes)))
        offset += nbytes

    g = "model.layers.0.mlp.experts"
    add(g + ".gate_up_proj_blocks", "U8", [4, 64, 2, 16], 4 * 64 * 32)
    add(g + ".gate_up_proj_scales", "U8", [4, 64, 2], 4 * 64 * 2, 124, 128)
    add(g + ".gate_up_proj_bias", "F32", [4, 64], 4 * 64 * 4, 0, 0)
    add(g + ".down_proj_blocks", "U8", [4, 64, 1, 16], 4 * 64 * 16)
    add(g + ".down_proj_scales", "U8", [4, 64, 1], 4 * 64, 124, 128)
    add(g + ".down_proj_bias", "F32", [4, 64], 4 * 64 * 4, 0, 0)
    for e in range(3):
        for proj, n, k in (("gate_proj", 32, 64), ("up_proj", 32, 64), ("down_proj", 64, 32)):
            p = "model.layers.1.mlp.experts.%d.%s" % (e, proj)
            add(p + ".weight_packed", "U8", [n, k // 2], n * k // 2)
            add(p + ".weight_scale", "U8", [n, k // 32], n * k // 32, 124, 128)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_checkpoint(binary, work_dir):
    prefix = "model.layers.0.self_attn"
    for layout, fmt in (("nvfp4-modelopt", "NVFP4 (ModelOpt)"), ("mxfp4", "MXFP4 (gpt-oss)")):
        path = os.path.join(work_dir, layout + ".safetensors")
        write_checkpoint(path, layout)
        rc, out, err = run(binary, ["inspect", path], timeout=60)
        check(rc == 0 and "3 quantised projections" in out, "inspect %s: %r %r" % (layout, out, err))
        check(out.count(fmt) == 3 and prefix + ".k_proj" in out, "inspect %s lists q/k/v" % layout)
        for acts, q_max, kv_max, q_min in (("bf16", 0.005, 1e-4, 0.0), ("quantized", 0.2, 0.2, 0.03)):
            rc, out, err = run(binary, ["demo", "--checkpoint", path, "--prefix", prefix,
                                        "--activations", acts, "--head-size", "16"], timeout=120)
            check(rc == 0, "demo --checkpoint %s %s: exit %d %s" % (layout, acts, rc, err))
            errs = {line.split()[0]: float(line.split()[-1]) for line in out.splitlines()
                    if line.strip().startswith(("Q (", "K (", "V ("))}
            check(set(errs) == {"Q", "K", "V"}, "demo --checkpoint prints Q, K, V errors: %r" % out)
            check(q_min <= errs.get("Q", -1) <= q_max, "%s %s: Q error %r" % (layout, acts, errs.get("Q")))
            for s in "KV":
                check(errs.get(s, 1) <= kv_max, "%s %s: %s error %r" % (layout, acts, s, errs.get(s)))
    # Every projection of a layer is listed, here in compressed-tensors' MXFP4.
    path = os.path.join(work_dir, "mxfp4-ct.safetensors")
    mlp = [("model.layers.0.self_attn.o_proj", 128, 64), ("model.layers.0.mlp.gate_proj", 96, 128),
           ("model.layers.0.mlp.up_proj", 96, 128), ("model.layers.0.mlp.down_proj", 128, 96)]
    write_checkpoint(path, "mxfp4-ct", extra=mlp)
    rc, out, err = run(binary, ["inspect", path], timeout=60)
    check(rc == 0 and "7 quantised projections" in out, "inspect mxfp4-ct: %r %r" % (out, err))
    check(out.count("MXFP4 (compressed-tensors)") == 7 and all(p in out for p, _, _ in mlp),
          "inspect mxfp4-ct lists q/k/v, o_proj and the MLP: %r" % out)
    rc, out, err = run(binary, ["demo", "--checkpoint", path, "--prefix", prefix, "--head-size", "16"],
                       timeout=120)
    check(rc == 0 and "MXFP4 (compressed-tensors)" in out, "demo --checkpoint mxfp4-ct: %d %r" % (rc, err))
    # MoE expert groups, one line per layer; the per-expert projections are not listed one by one.
    path = os.path.join(work_dir, "experts.safetensors")
    write_experts_checkpoint(path)
    rc, out, err = run(binary, ["inspect", path], timeout=60)
    check(rc == 0 and "0 quantised projections, 2 MoE expert groups" in out, "inspect experts: %r %r" % (out, err))
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("model.layers.")}
    check(set(rows) == {"model.layers.0.mlp.experts", "model.layers.1.mlp.experts"}, "expert groups: %r" % out)
    check(rows.get("model.layers.0.mlp.experts", [])[-7:]
          == ["4", "64", "32", "gpt-oss", "stacked", "interleaved", "yes"], "gpt-oss group: %r" % out)
    check(rows.get("model.layers.1.mlp.experts", [])[-7:] == ["3", "64", "32", "per", "expert", "halves", "no"],
          "per-expert group: %r" % out)
    bad = os.path.join(work_dir, "bad.safetensors")
    with open(bad, "wb") as f:
        f.write(struct.pack("<Q", 1000) + b"{}")
    rc, out, err = run(binary, ["inspect", bad], timeout=60)
    check(rc == 1 and "runs past the end of the file" in err, "inspect bad file: %d %r" % (rc, err))
    rc, out, err = run(binary, ["demo", "--checkpoint", bad], timeout=60)
    check(rc == 2 and "--prefix" in err, "demo --checkpoint without --prefix: %d %r" % (rc, err))


def main():
    binary, work_dir, which = sys.argv[1], sys.argv[2], sys.argv[3]
    {"demo": lambda: test_demo(binary), "bench": lambda: test_bench(binary, work_dir),
     "ceilings": lambda: test_ceilings(binary),
     "errors": lambda: test_errors(binary),
     "checkpoint": lambda: test_checkpoint(binary, work_dir)}[which]()
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
