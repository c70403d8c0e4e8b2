#!/usr/bin/env python3
"""End-to-end check of quantkv's vLLM plugin (docs/vllm.md), run by scripts/vllm_ci.sh.

For each case: a tiny random Llama (hidden 256, 2 layers) is made on the fly, quantised with
compressed-tensors' own API (NVFP4 W4A4 and W4A16, MXFP8 W8A8, MXFP4 W4A16), saved with a tokenizer
trained on the fly (``tokenizers``), and served by vLLM's offline ``LLM`` API with the plugin (a
subprocess per case: one vLLM engine at a time). Each greedy step's top logprobs are compared with
a torch reference on the dequantised weights (the model in bf16 as vLLM runs it, every quantised
linear layer y = bf16(q(x) . W^T) in fp32, q the same activation quantiser for W4A4 / W8A8),
teacher-forced on vLLM's tokens:

- |logprob_vllm - logprob_ref| <= BOUND[case][0] for every returned token of every step, and
  their mean <= BOUND[case][1];
- the greedy token equals the reference's argmax wherever the reference's top-2 logit margin
  exceeds 2 * BOUND[case][0];
- 'layers': the plugin's kernels on single layers as vLLM's schemes leave them, to the bf16
  rounding of the output (and its NVFP4 fused-experts method on one MoE layer).

The moe_* cases do the same on a tiny random Qwen3-MoE (8 experts, top-2) whose experts are
NVFP4 (make_moe_model), served through quantkv's fused experts; the reference routes as vLLM does
and runs each expert in fp32 on the dequantised weights. moe_gptoss_mxfp4: a tiny random gpt-oss
whose experts are MXFP4 in gpt-oss's own checkpoint format (make_gptoss_model; interleaved gate/up,
SwiGLU-OAI, per-expert biases), served through the plugin's gpt-oss MXFP4 method. v32: a tiny
random DeepSeek-V3.2 (make_v32_model) served through quantkv's sparse MLA backend and indexer
(quantkv.vllm_platform, quantkv.vllm_sparse), against transformers' DeepseekV32ForCausalLM
attending to vLLM's selections, the selections checked against its scores and against quantkv's
standalone indexer (compare_v32).
modelopt_nvfp4 / modelopt_nvfp4_w4a16: the NVFP4 Llama rewritten in NVIDIA ModelOpt's export layout
(make_modelopt_model), through vLLM's modelopt_fp4 scheme. *_avx2: cases run with QUANTKV_ISA=avx2
(the engine in the serving process, which reports the level quantkv's kernels ran at).

Exits non-zero on any mismatch; the closing line is 'N passed, N failed'.
Usage: vllm_e2e.py [--work DIR] [--cases nvfp4_w4a4,nvfp4_w4a16,mxfp8,mxfp4_w4a16,
                                     nvfp4_w4a4_tp2,moe_nvfp4_w4a16,moe_nvfp4_w4a4_tp2,
                                     moe_gptoss_mxfp4,v32,modelopt_nvfp4,modelopt_nvfp4_w4a16,
                                     nvfp4_w4a16_avx2,moe_gptoss_mxfp4_avx2,
                                     moe_gptoss_mxfp4_tp2,nvfp4_w4a16_compiled,layers]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# The documented bounds (logprob, natural log units): the reference runs the model in bf16 as
# vLLM does, but its attention, norms and rotary embedding are HF's, not vLLM's CPU kernels: bf16
# rounding differences remain, and a W4A4 activation quantiser turns a one-ulp difference of an
# input into a whole e2m1 step, so W4A4 gets the wider bound (docs/vllm.md has the measured ones).
# (max, mean) over every returned token of every step. With activations quantised the random
# model is chaotic: the reference itself, its quantiser inputs perturbed by +-2^-9 (about one
# bf16 ulp), moves by up to 2.0 (mean 0.36) on the NVFP4 W4A4 model and 0.51 (mean 0.13) on the
# MXFP8 one, so those bounds only catch gross errors (a wrong factor, a wrong scale layout); the
# 'layers' case checks the plugin's kernels on single layers to the bf16 rounding.
BOUND = {"nvfp4_w4a4": (2.5, 0.5), "nvfp4_w4a16": (0.1, 0.03), "mxfp8": (0.75, 0.2),
         "mxfp4_w4a16": (0.1, 0.03), "nvfp4_w4a4_tp2": (2.5, 0.5),
         "moe_nvfp4_w4a16": (0.1, 0.03), "moe_nvfp4_w4a4_tp2": (3.0, 0.5),
         "moe_gptoss_mxfp4": (0.1, 0.03), "v32": (0.1, 0.03),
         "modelopt_nvfp4": (2.5, 0.5), "modelopt_nvfp4_w4a16": (0.1, 0.03),
         "nvfp4_w4a16_avx2": (0.1, 0.03),
         "moe_gptoss_mxfp4_avx2": (0.1, 0.03), "moe_gptoss_mxfp4_tp2": (5.0, 0.5),
         "nvfp4_w4a16_compiled": (0.1, 0.03)}
# TP=2 cases checked against the TP=1 case's vLLM logprobs (itself checked on recorded routes):
# the steps up to each prompt's first differing token, at least TP_STEPS_WITHIN of them within
# TP_CONSISTENCY (a route flipped by bf16 noise moves a step by up to ~0.7; a wrong shard or a
# bias added on both ranks moves every step).
TP1_OF = {"moe_gptoss_mxfp4_tp2": "moe_gptoss_mxfp4"}
TP_CONSISTENCY, TP_STEPS_WITHIN = 0.1, 0.8
# MoE: the router's top-k flips on bf16 noise where two experts' probabilities nearly tie (margins
# of 1e-3 on these random models), and one flipped route moves that step's logprobs by up to ~2
# (later steps by ~0.3, through attention). At TP=1 serve() records vLLM's routes and the
# reference takes them (ROUTING_MARGIN), so the weight-only bound is the dense one. vLLM 0.32.0
# returns routed experts (enable_return_routed_experts) only from its GPU model runner, and at
# TP=2 the experts run in worker processes, so the TP=2 case routes on its own: a gross-error
# bound, as for the dense W4A4 cases.
CASES = {  # name: (compressed-tensors preset, tensor-parallel size)
    "nvfp4_w4a4": ("NVFP4", 1),
    "nvfp4_w4a16": ("NVFP4A16", 1),
    "mxfp8": ("MXFP8", 1),
    "mxfp4_w4a16": ("MXFP4A16", 1),
    "nvfp4_w4a4_tp2": ("NVFP4", 2),
    # A tiny Qwen3-MoE with NVFP4 experts (make_moe_model): quantkv's fused experts.
    "moe_nvfp4_w4a16": ("NVFP4A16", 1),
    "moe_nvfp4_w4a4_tp2": ("NVFP4", 2),
    # A tiny gpt-oss with MXFP4 experts in gpt-oss's own format (make_gptoss_model).
    "moe_gptoss_mxfp4": ("GPTOSS_MXFP4", 1),
    # gpt-oss at TP=2: each rank's shard of the interleaved w13 / of w2, w2's bias on rank 0
    # only; the routes come from worker processes (not recorded): a gross-error bound against the
    # reference, and TP_CONSISTENCY against the TP=1 case's own vLLM output.
    "moe_gptoss_mxfp4_tp2": ("GPTOSS_MXFP4", 2),
    # A tiny DeepSeek-V3.2 (make_v32_model): quantkv's sparse MLA backend and indexer.
    "v32": ("V32", 1),
    # The NVFP4 Llama in NVIDIA ModelOpt's export layout (make_modelopt_model), vLLM's
    # modelopt_fp4 scheme: W4A4 (quant_algo NVFP4) and weight-only (W4A16_NVFP4).
    "modelopt_nvfp4": ("MODELOPT_NVFP4", 1),
    "modelopt_nvfp4_w4a16": ("MODELOPT_NVFP4A16", 1),
    # quantkv's AVX2 kernels inside vLLM (QUANTKV_ISA=avx2 in every vLLM process, checked by the
    # level the served process reports): a dense and an MoE case.
    "nvfp4_w4a16_avx2": ("NVFP4A16", 1),
    # vLLM's default compiled mode (torch.compile of the model, the plugin's ops traced through
    # their fake implementations) instead of enforce_eager.
    "nvfp4_w4a16_compiled": ("NVFP4A16", 1),
    "moe_gptoss_mxfp4_avx2": ("GPTOSS_MXFP4", 1),
}
# Cases run with quantkv's kernels forced to an ISA level (QUANTKV_ISA in every vLLM process).
CASE_ISA = {"nvfp4_w4a16_avx2": "avx2", "moe_gptoss_mxfp4_avx2": "avx2"}
# Cases served in vLLM's default compiled mode (every other case: enforce_eager).
CASE_COMPILED = {"nvfp4_w4a16_compiled"}
MOE_EXPERTS, MOE_TOP_K, MOE_INTERMEDIATE = 8, 2, 256
# Where vLLM's routes are recorded (TP=1, serve()), the reference takes them; a route that
# differs from the reference's own top-k is accepted only where the reference's k-th and
# (k+1)-th expert probabilities are within ROUTING_MARGIN (a near-tie flipped by bf16 noise).
ROUTING_MARGIN = 0.01
PROMPTS = ["the quick brown fox", "a tiny model serves", "quantised weights in four bits",
           "block scaled formats"]
MAX_TOKENS = 12
TOP_LOGPROBS = 8
CORPUS = ("the quick brown fox jumps over the lazy dog . a tiny model serves tokens . "
          "quantised weights in four bits with block scaled formats and global scales . "
          "every step of the engine runs the linear layers on the cpu . ") * 20

FP4_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


# ---------------------------------------------------------------------------- model making
def make_tokenizer(out: str) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator([CORPUS], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.save_pretrained(out)
    return int(tok.get_vocab_size())


# The tiny Llama's shape (make_model; scripts/vllm_speed.py passes a larger one).
TINY_LLAMA = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


def make_model(preset: str, out: str, shape: dict | None = None) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    os.makedirs(out, exist_ok=True)
    vocab = make_tokenizer(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=max(vocab, 320), **(shape or TINY_LLAMA), initializer_range=0.08,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                      torch_dtype="bfloat16")
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()

    # Calibrate input amax per linear layer (for NVFP4's static input global scale).
    amax: dict[str, float] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and "lm_head" not in name:
            def hook(m: torch.nn.Module, args: tuple, name: str = name) -> None:
                amax[name] = max(amax.get(name, 0.0), float(args[0].abs().max()))
            hooks.append(mod.register_forward_pre_hook(hook))
    ids = torch.randint(3, vocab, (4, 32))
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()

    # Fused projections (q/k/v, gate/up) share one weight global scale, as vLLM expects.
    def fused_key(name: str) -> str:
        for group, members in (("qkv", ("q_proj", "k_proj", "v_proj")),
                               ("gate_up", ("gate_proj", "up_proj"))):
            for m in members:
                if name.endswith(m):
                    return name[: -len(m)] + group
        return name

    compressor = quantise_linears(model, preset, amax, fused_key)
    model.save_pretrained(out)
    compressor.update_config(out)


def make_modelopt_model(preset: str, out: str) -> None:
    """make_model's NVFP4 Llama rewritten in the layout NVIDIA ModelOpt exports (vLLM's
    modelopt_fp4 scheme; quant_algo NVFP4, or W4A16_NVFP4 without input scales): per linear
    layer `weight` (packed e2m1, U8 [N, K/2], element 2i in the low nibble as in
    compressed-tensors), `weight_scale` (e4m3 [N, K/16]), `weight_scale_2` =
    fl(1 / weight_global_scale) and `input_scale` = fl(1 / input_global_scale), both f32 scalars
    (ModelOpt's scales divide where compressed-tensors' global scales multiply). The W4A4 config
    is the hf_quant_config.json form, the W4A16 one the flat form (quant_algo in config.json)."""
    import shutil

    from safetensors.torch import load_file, save_file

    assert preset in ("MODELOPT_NVFP4", "MODELOPT_NVFP4A16"), preset
    w4a16 = preset.endswith("A16")
    ct = out + ".ct"
    make_model("NVFP4A16" if w4a16 else "NVFP4", ct)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(ct):
        src = os.path.join(ct, f)
        if f.endswith(".safetensors"):
            tensors = {}
            for k, v in load_file(src).items():
                if k.endswith(".weight_packed"):
                    tensors[k[: -len("_packed")]] = v
                elif k.endswith(".weight_global_scale"):
                    tensors[k[: -len("_global_scale")] + "_scale_2"] = \
                        (1.0 / v.float()).reshape(())
                elif k.endswith(".input_global_scale"):
                    tensors[k[: -len("_global_scale")] + "_scale"] = (1.0 / v.float()).reshape(())
                else:
                    tensors[k] = v
            save_file(tensors, os.path.join(out, f), metadata={"format": "pt"})
        elif f != "config.json":
            shutil.copy(src, out)
    with open(os.path.join(ct, "config.json")) as fin:
        cfg = json.load(fin)
    if w4a16:  # the flat form of newer exports, in config.json only
        cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4",
                                      "group_size": 16, "ignore": ["lm_head"],
                                      "producer": {"name": "modelopt"}}
    else:  # the hf_quant_config.json form (NVIDIA's published NVFP4 checkpoints)
        quant = {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                 "exclude_modules": ["lm_head"]}
        cfg["quantization_config"] = {"quant_method": "modelopt",
                                      "producer": {"name": "modelopt"}, "quantization": quant}
        with open(os.path.join(out, "hf_quant_config.json"), "w") as fout:
            json.dump({"producer": {"name": "modelopt"}, "quantization": quant}, fout, indent=2)
    with open(os.path.join(out, "config.json"), "w") as fout:
        json.dump(cfg, fout, indent=2)
    shutil.rmtree(ct)


def quantise_linears(model, preset: str, amax: dict, fused_key) -> object:
    """Quantises every nn.Linear of `model` but lm_head in place with compressed-tensors' own
    API (weight global scales shared by the layers of one fused_key, input global scales from
    the calibrated maxima `amax` by layer name) and compresses it; returns the compressor."""
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationStatus,
                                                 apply_quantization_config)
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    scheme = preset_name_to_scheme(preset, ["Linear"])
    qcfg = QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"],
                              quantization_status=QuantizationStatus.INITIALIZED)
    apply_quantization_config(model, qcfg)

    wmax: dict[str, float] = {}
    for name, mod in model.named_modules():
        if hasattr(mod, "quantization_scheme"):
            key = fused_key(name)
            wmax[key] = max(wmax.get(key, 0.0), float(mod.weight.float().abs().max()))
    with torch.no_grad():
        for name, mod in model.named_modules():
            if not hasattr(mod, "quantization_scheme"):
                continue
            wargs = mod.quantization_scheme.weights
            w = mod.weight.float()
            gsize = wargs.group_size
            groups = w.reshape(w.shape[0], -1, gsize)
            gscale = None
            if hasattr(mod, "weight_global_scale"):
                m = torch.tensor([wmax[fused_key(name)]])
                gscale = generate_gparam(-m, m)
                mod.weight_global_scale.data.copy_(gscale)
            scale, zp = calculate_qparams(groups.amin(-1), groups.amax(-1), wargs,
                                          global_scale=gscale)
            mod.weight_scale.data = scale.to(mod.weight_scale.dtype)
            if hasattr(mod, "weight_zero_point"):
                mod.weight_zero_point.data = zp.to(mod.weight_zero_point.dtype)
            if hasattr(mod, "input_global_scale"):
                a = torch.tensor([amax[name]])
                mod.input_global_scale.data.copy_(generate_gparam(-a, a))
            mod.quantization_status = QuantizationStatus.FROZEN
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    return compressor


def make_moe_model(preset: str, out: str) -> None:
    """A tiny random Qwen3-MoE (hidden 256, 2 layers, MOE_EXPERTS experts of intermediate 256,
    top-MOE_TOP_K, attention as the Llamas') whose experts only are quantised with
    compressed-tensors (attention, router and lm_head stay bf16), written as Hugging Face
    checkpoints write Qwen3-MoE: experts.{e}.{gate,up,down}_proj per expert.

    transformers 5 holds a Qwen3-MoE layer's experts as two stacked parameters, not Linear
    modules, so the experts are copied into a tree of nn.Linear named as in the checkpoint,
    quantised there by quantise_linears (as the dense models' layers), and saved with the
    model's other tensors."""
    import json

    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    os.makedirs(out, exist_ok=True)
    vocab = make_tokenizer(out)
    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(vocab_size=max(vocab, 320), hidden_size=256, intermediate_size=512,
                         moe_intermediate_size=MOE_INTERMEDIATE, num_experts=MOE_EXPERTS,
                         num_experts_per_tok=MOE_TOP_K, norm_topk_prob=True,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=64, max_position_embeddings=256, initializer_range=0.08,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         torch_dtype="bfloat16")
    cfg.architectures = ["Qwen3MoeForCausalLM"]
    model = Qwen3MoeForCausalLM(cfg).to(torch.bfloat16).eval()
    inter = MOE_INTERMEDIATE

    # Calibrate per layer: the MoE block's input amax (every expert's w13 input global scale)
    # and, per expert, the amax of its intermediate on all tokens (its w2 input global scale).
    amax: dict[str, float] = {}
    hooks = []
    for li, layer in enumerate(model.model.layers):
        def hook(m: torch.nn.Module, args: tuple, li: int = li) -> None:
            x = args[0].reshape(-1, args[0].shape[-1]).float()
            for e in range(MOE_EXPERTS):
                base = f"model.layers.{li}.mlp.experts.{e}."
                g = x @ m.experts.gate_up_proj[e].float().T
                h = torch.nn.functional.silu(g[:, :inter]) * g[:, inter:]
                for proj, v in (("gate_proj", x), ("up_proj", x), ("down_proj", h)):
                    amax[base + proj] = max(amax.get(base + proj, 0.0), float(v.abs().max()))
        hooks.append(layer.mlp.register_forward_pre_hook(hook))
    ids = torch.randint(3, vocab, (4, 32))
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()

    experts = torch.nn.Module()
    for li, layer in enumerate(model.model.layers):
        ex = layer.mlp.experts
        for e in range(MOE_EXPERTS):
            for proj, w in (("gate_proj", ex.gate_up_proj[e, :inter]),
                            ("up_proj", ex.gate_up_proj[e, inter:]),
                            ("down_proj", ex.down_proj[e])):
                lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=torch.bfloat16)
                lin.weight.data.copy_(w.detach())
                lin.weight.requires_grad_(False)
                parent = experts
                for part in f"model.layers.{li}.mlp.experts.{e}".split("."):
                    if not hasattr(parent, part):
                        parent.add_module(part, torch.nn.Module())
                    parent = getattr(parent, part)
                parent.add_module(proj, lin)

    def fused_key(name: str) -> str:
        # Gate and up each with its own weight global scale (llm-compressor would tie them):
        # the plugin passes up's as w3_alpha, where vLLM's own kernels would take gate's.
        return name

    compressor = quantise_linears(experts, preset, amax, fused_key)
    state = {k: v.contiguous() for k, v in experts.state_dict().items()}
    if preset.startswith("NVFP4"):  # the case this model exists for: gate's g_w != up's
        gates = [k for k in state if k.endswith("gate_proj.weight_global_scale")]
        differ = sum(not torch.equal(state[k], state[k.replace("gate_proj", "up_proj")])
                     for k in gates)
        assert differ > 0, "gate and up share every weight global scale"
    for k, v in model.state_dict().items():
        if ".mlp.experts." not in k:
            state[k] = v.contiguous()
    save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(out)
    compressor.update_config(out)
    # Only the experts are quantised: name the rest in the config's ignore list.
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"]["ignore"] = ["lm_head", "re:.*self_attn.*", "re:.*mlp.gate$"]
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def quantise_gptoss_mxfp4(w):
    """w [E, N, K] (K a multiple of 32) to gpt-oss's MXFP4 checkpoint tensors: blocks
    [E, N, K/32, 16] uint8 (two e2m1 codes a byte, the even element in the low nibble) and scales
    [E, N, K/32] uint8 e8m0 (exponent + 127): scale 2^(floor(log2(amax)) - 2), the OCP MX rule,
    e2m1 rounded to nearest, ties to even code, saturating at 6."""
    import torch

    e, n, k = w.shape
    b = w.float().reshape(e, n, k // 32, 32)
    amax = b.abs().amax(-1, keepdim=True).clamp(min=2.0 ** -126)
    exp = torch.floor(torch.log2(amax)) - 2
    a = (b.abs() / torch.exp2(exp)).clamp(max=6.0)
    mag = _round_e2m1(a)
    code = torch.searchsorted(torch.tensor(FP4_GRID), mag.contiguous()).to(torch.uint8)
    code = code | ((b < 0) & (code != 0)).to(torch.uint8) << 3
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).to(torch.uint8)
    return blocks.contiguous(), (exp[..., 0] + 127).to(torch.uint8).contiguous()


def dequant_gptoss_mxfp4(blocks, scales):
    """gpt-oss's MXFP4 blocks [E, N, K/32, 16] and e8m0 scales [E, N, K/32] to fp32 [E, N, K]."""
    import torch

    grid = torch.tensor(FP4_GRID + [-v for v in FP4_GRID])
    codes = torch.stack([blocks & 0xF, blocks >> 4], -1).long()  # [E, N, K/32, 16, 2]
    vals = grid[codes].reshape(*scales.shape, 32)
    vals = vals * torch.exp2(scales.float() - 127)[..., None]
    return vals.reshape(scales.shape[0], scales.shape[1], -1)


def make_gptoss_model(preset: str, out: str) -> None:
    """A tiny random gpt-oss (GptOssForCausalLM: hidden 256, 2 layers, a sliding-window layer
    and a full one, attention sinks, MOE_EXPERTS experts of intermediate MOE_INTERMEDIATE top
    MOE_TOP_K with biases and SwiGLU-OAI) whose experts are MXFP4 as gpt-oss checkpoints hold
    them: *_blocks, *_scales (e8m0) and *_bias (bf16) per layer, quantization_config
    {"quant_method": "mxfp4"}; everything else bf16."""
    import torch
    from safetensors.torch import save_file
    from transformers import GptOssConfig, GptOssForCausalLM

    os.makedirs(out, exist_ok=True)
    vocab = make_tokenizer(out)
    torch.manual_seed(0)
    cfg = GptOssConfig(vocab_size=max(vocab, 320), hidden_size=256,
                       intermediate_size=MOE_INTERMEDIATE, num_local_experts=MOE_EXPERTS,
                       num_experts_per_tok=MOE_TOP_K, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=64, sliding_window=32,
                       max_position_embeddings=131072,  # yarn's 4096 x 32, as gpt-oss
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                       torch_dtype="bfloat16")
    cfg.architectures = ["GptOssForCausalLM"]
    model = GptOssForCausalLM(cfg).to(torch.bfloat16).eval()
    # transformers initialises with std 0.02 here: larger experts and lm_head, so that the
    # experts' GEMMs (not only their biases) move the output and the logprobs are not flat.
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if name.endswith(("experts.gate_up_proj", "experts.down_proj", "lm_head.weight")):
                prm.normal_(0.0, 0.08)
    state = {}
    for k, v in model.state_dict().items():
        if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"):
            # HF holds them [E, in, out]; the checkpoint's rows are the outputs.
            blocks, scales = quantise_gptoss_mxfp4(v.transpose(1, 2))
            e, n = scales.shape[:2]
            state[k + "_blocks"] = blocks.reshape(e, n, -1, 16)
            state[k + "_scales"] = scales
        elif k.endswith("_bias") and ".experts." in k:
            # transformers initialises them to zero: random ones, to check that they are added.
            state[k] = (torch.randn(v.shape) * 0.2).to(torch.bfloat16)
        else:
            state[k] = v.contiguous()
    save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
        "lm_head"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


# ---------------------------------------------------------------------------- the reference
def _round_e2m1(a):  # a >= 0, already clamped to 6; round to nearest, ties to even code
    import torch

    grid = torch.tensor(FP4_GRID)
    d = (a.unsqueeze(-1) - grid).abs()
    dmin = d.min(-1, keepdim=True).values
    odd = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    score = (d == dmin).int() * (2 - odd)
    return grid[score.argmax(-1)]


def fake_quant_nvfp4(x, g: float):
    import torch

    shp = x.shape
    b = x.float().reshape(-1, 16)
    amax = b.abs().amax(-1, keepdim=True)
    s = (amax / 6.0 * g).clamp(max=448.0).to(torch.float8_e4m3fn).float()
    safe = torch.where(s == 0, torch.ones_like(s), s)
    q = _round_e2m1((b * g / safe).abs().clamp(max=6.0)) * b.sign()
    return torch.where(s == 0, torch.zeros_like(b), q * s / g).reshape(shp)


def fake_quant_mxfp8(x):
    import torch

    shp = x.shape
    b = x.float().reshape(-1, 32)
    amax = b.abs().amax(-1, keepdim=True).clamp(min=2.0 ** -126)
    scale = torch.exp2(torch.ceil(torch.log2(amax / 448.0)))  # quantkv's rule: no saturation
    q = (b / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float()
    return (q * scale).reshape(shp)


def dequantise_checkpoint(path: str, preset: str):
    """The checkpoint's tensors, split into (all tensors, the bf16 state of the unquantised ones,
    the dequantised fp32 weight of each quantised linear layer by module name, each layer's input
    global scale where it has one)."""
    import torch
    from safetensors.torch import load_file

    tensors = {}
    for f in os.listdir(path):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(path, f)))
    grid = torch.tensor(FP4_GRID + [-v for v in FP4_GRID])
    state: dict[str, "torch.Tensor"] = {}
    dequant: dict[str, "torch.Tensor"] = {}
    input_g: dict[str, float] = {}
    modelopt = preset.startswith("MODELOPT_NVFP4")
    for k, v in tensors.items():
        if k.endswith(".weight_packed") or (modelopt and k.endswith(".weight") and
                                            v.dtype == torch.uint8):
            base = k[: -len(".weight_packed")] if k.endswith("_packed") else k[: -len(".weight")]
            codes = torch.stack([v & 0xF, v >> 4], -1).reshape(v.shape[0], -1).long()
            vals = grid[codes]
            sc = tensors[base + ".weight_scale"]
            if modelopt:  # ModelOpt's scales divide: w = e2m1 * e4m3 * weight_scale_2
                s = sc.float().repeat_interleave(16, -1)
                dequant[base] = vals * s * tensors[base + ".weight_scale_2"].float()
                if base + ".input_scale" in tensors:
                    input_g[base] = float(1.0 / tensors[base + ".input_scale"].float())
            elif preset.startswith("NVFP4"):
                s = sc.float().repeat_interleave(16, -1)
                dequant[base] = vals * s / tensors[base + ".weight_global_scale"].float()
            else:
                dequant[base] = vals * torch.exp2(sc.float() - 127).repeat_interleave(32, -1)
            if base + ".input_global_scale" in tensors:
                input_g[base] = float(tensors[base + ".input_global_scale"].float())
        elif k.endswith(".weight_scale") or k.endswith("_global_scale") or k.endswith(
                "zero_point") or (modelopt and k.endswith((".weight_scale_2", ".input_scale"))):
            continue
        elif v.dtype == torch.float8_e4m3fn:  # MXFP8 weight
            base = k[: -len(".weight")]
            s = torch.exp2(tensors[base + ".weight_scale"].float() - 127)
            dequant[base] = v.float() * s.repeat_interleave(32, -1)
        else:
            state[k] = v.to(torch.bfloat16)
    return tensors, state, dequant, input_g


def dequantised_reference(path: str, preset: str):
    """The HF Llama in bf16 as vLLM runs it (embeddings, norms, attention, lm_head in bf16), each
    quantised linear layer replaced by y = bf16(q(x) . W^T) in fp32 on the checkpoint's
    dequantised weights, q the activation quantiser (fake-quantised: NVFP4 with the layer's input
    global scale, MXFP8) or the identity for weight-only checkpoints."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(path)
    del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
    tensors, state, dequant, input_g = dequantise_checkpoint(path, preset)
    if cfg.model_type == "gpt_oss":
        state = {k: v for k, v in state.items() if ".mlp.experts." not in k}
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert not unexpected, unexpected
        assert all(".mlp.experts." in m for m in missing), missing
        for li, layer in enumerate(model.model.layers):
            layer.mlp.forward = _reference_gptoss_moe(layer.mlp, f"model.layers.{li}.mlp.experts.",
                                                      tensors, cfg, [model], li)
        return model
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    moe = cfg.model_type == "qwen3_moe"
    assert all("rotary" in m or m[: -len(".weight")] in dequant or (moe and ".mlp.experts." in m)
               for m in missing), missing
    if moe:
        for li, layer in enumerate(model.model.layers):
            layer.mlp.forward = _reference_moe(layer.mlp, f"model.layers.{li}.mlp.experts.",
                                               dequant, input_g, preset, cfg, [model], li)
        return model
    for name, mod in model.named_modules():
        if name not in dequant:
            continue
        w = dequant[name]
        if preset in ("NVFP4", "MODELOPT_NVFP4"):
            g = input_g[name]
            quant = (lambda a, g=g: fake_quant_nvfp4(a, g))
        elif preset == "MXFP8":
            quant = fake_quant_mxfp8
        else:
            quant = (lambda a: a)
        mod.forward = (lambda x, w=w, quant=quant:
                       (quant(x.float()) @ w.T).to(torch.bfloat16))
    return model


def _route(logits, k: int, model, layer_index: int):
    """vLLM's routing of bf16 router logits: softmax in fp32, top-k, renormalised. Where serve()
    recorded vLLM's routes (model.routing["forced"]), its experts are taken, weighted by the
    reference's probabilities of them; where they differ from the reference's own top-k, the
    largest margin (k-th minus (k+1)-th probability) is kept for compare() to check."""
    import torch

    probs = torch.softmax(logits.float(), -1)
    top, idx = torch.topk(probs, k, -1)
    routing = getattr(model, "routing", None)
    forced = None if routing is None else routing["forced"]
    if forced is not None:
        n = min(forced.shape[0], idx.shape[0])
        vllm_idx = forced[:n, layer_index].long()
        srt = probs[:n].sort(-1, descending=True).values
        diff = (vllm_idx.sort(-1).values != idx[:n].sort(-1).values).any(-1)
        routing["routes"] += n
        routing["differ"] += int(diff.sum())
        if bool(diff.any()):
            margin = (srt[:, k - 1] - srt[:, k])[diff]
            routing["max_margin"] = max(routing["max_margin"], float(margin.max()))
        idx = idx.clone()
        idx[:n] = vllm_idx
        top = probs.gather(-1, idx)
    return idx, top / top.sum(-1, keepdim=True)


def _reference_gptoss_moe(mlp, prefix: str, tensors: dict, cfg, model_ref: list,
                          layer_index: int):
    """gpt-oss's MoE block as vLLM routes it (bf16 router logits with bias, softmax in fp32,
    top-k, renormalised) with each routed expert in fp32 on the dequantised MXFP4 weights:
    g = x . W13^T + b13 (gate and up rows interleaved), h = bf16(SwiGLU-OAI(g[0::2], g[1::2]))
    (alpha, limit from the config; h rounded to bf16 as quantkv does), y_e = h . W2^T + b2."""
    import torch

    w13, w2 = (dequant_gptoss_mxfp4(tensors[f"{prefix}{p}_blocks"], tensors[f"{prefix}{p}_scales"])
               for p in ("gate_up_proj", "down_proj"))
    b13, b2 = (tensors[f"{prefix}{p}_bias"].float() for p in ("gate_up_proj", "down_proj"))
    alpha, limit = cfg.swiglu_alpha, cfg.swiglu_limit

    def forward(hs):
        b, s_len, hid = hs.shape
        x = hs.reshape(-1, hid)
        logits = torch.nn.functional.linear(x, mlp.router.weight, mlp.router.bias)
        idx, top = _route(logits, cfg.num_experts_per_tok, model_ref[0], layer_index)
        y = torch.zeros(x.shape[0], hid)
        for e in range(cfg.num_local_experts):
            tok, slot = torch.where(idx == e)
            if tok.numel() == 0:
                continue
            g = x[tok].float() @ w13[e].T + b13[e]
            gate = g[:, 0::2].clamp(max=limit)
            up = g[:, 1::2].clamp(-limit, limit)
            h = (gate * torch.sigmoid(alpha * gate) * (up + 1)).bfloat16().float()
            y.index_add_(0, tok, top[tok, slot, None] * (h @ w2[e].T + b2[e]))
        return y.to(torch.bfloat16).reshape(b, s_len, hid), None

    return forward


def _reference_moe(mlp, prefix: str, dequant: dict, input_g: dict, preset: str, cfg,
                   model_ref: list, layer_index: int):
    """The Qwen3-MoE block as vLLM routes it (router logits in bf16, softmax in fp32, top-k,
    renormalised, fp32 weights) with each routed expert in fp32 on the dequantised weights:
    y = sum_j w_j . bf16(q_h(silu(gate) . up)) . W2^T over q_x(x) . W13^T (q_x, q_h the NVFP4
    activation quantisers with the expert's input global scales for W4A4, else the identity;
    weight-only rounds h to bf16 as quantkv does)."""
    import torch

    num = cfg.num_experts
    inter = cfg.moe_intermediate_size
    w13 = [torch.cat([dequant[f"{prefix}{e}.gate_proj"], dequant[f"{prefix}{e}.up_proj"]])
           for e in range(num)]
    w2 = [dequant[f"{prefix}{e}.down_proj"] for e in range(num)]
    w4a4 = preset == "NVFP4"

    def forward(hs):
        b, s_len, hid = hs.shape
        x = hs.reshape(-1, hid)
        logits = torch.nn.functional.linear(x, mlp.gate.weight)
        idx, top = _route(logits, cfg.num_experts_per_tok, model_ref[0], layer_index)
        y = torch.zeros(x.shape[0], hid)
        for e in range(num):
            tok, slot = torch.where(idx == e)
            if tok.numel() == 0:
                continue
            xe = x[tok].float()
            if w4a4:
                g_x = min(input_g[f"{prefix}{e}.gate_proj"], input_g[f"{prefix}{e}.up_proj"])
                xe = fake_quant_nvfp4(xe, g_x)
            g = xe @ w13[e].T
            h = torch.nn.functional.silu(g[:, :inter]) * g[:, inter:]
            if w4a4:
                h = fake_quant_nvfp4(h, input_g[f"{prefix}{e}.down_proj"])
            else:
                h = h.bfloat16().float()
            y.index_add_(0, tok, top[tok, slot, None] * (h @ w2[e].T))
        return y.to(torch.bfloat16).reshape(b, s_len, hid)

    return forward


# ---------------------------------------------------------------------------- vLLM (child)

# ---------------------------------------------------------------------------- DeepSeek-V3.2
V32_TOPK = 16  # index_topk: below the prompts' lengths plus MAX_TOKENS, so selection matters
# Prompts of 20+ tokens: every row past the 16th selects 16 of its visible keys.
V32_PROMPTS = [" ".join(CORPUS.split()[i:i + n]) for i, n in ((0, 22), (9, 28), (20, 20), (31, 34))]


def make_v32_model(preset: str, out: str) -> None:
    """A tiny random DeepSeek-V3.2 (transformers' DeepseekV32ForCausalLM, bf16): hidden 256,
    2 layers with dense MLPs, 4 heads (nope 64, rope 64, v 64), q_lora_rank 64, kv_lora_rank 512,
    4 index heads of 128, index_topk V32_TOPK; weights drawn with std 0.05."""
    import torch
    from transformers import DeepseekV32Config, DeepseekV32ForCausalLM

    vocab = make_tokenizer(out)
    cfg = DeepseekV32Config(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, moe_intermediate_size=256,
        num_hidden_layers=2, first_k_dense_replace=2, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=512, qk_rope_head_dim=64,
        qk_nope_head_dim=64, v_head_dim=64, index_n_heads=4, index_head_dim=128,
        index_topk=V32_TOPK, max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, initializer_range=0.05,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    DeepseekV32ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)


def v32_reference(path: str):
    """transformers' DeepseekV32ForCausalLM in bf16 (eager attention), its indexer wrapped:
    model.forced[layer] = vLLM's positions [S, topk] (-1 padded) replace its own top-k, and
    model.index_scores[layer] keeps its own float32 scores [S, S] (HF's semantics: bf16 q, k after
    RoPE, no fp8) and their magnitudes for the selection check."""
    import torch
    from transformers import DeepseekV32ForCausalLM
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as md

    model = DeepseekV32ForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                                   attn_implementation="eager").eval()
    model.forced, model.index_scores = {}, {}

    def indexer_forward(self, hidden_states, q_resid, position_embeddings, attention_mask,
                        position_ids, past_key_values=None):
        b, s, _ = hidden_states.shape
        cos, sin = position_embeddings
        q = self.wq_b(q_resid).view(b, s, self.n_heads, self.head_dim)
        rope, rest = self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim
        q_rot, q_pass = torch.split(q, [rope, rest], dim=-1)
        k = self.k_norm(self.wk(hidden_states)).unsqueeze(2)
        k_rot, k_pass = torch.split(k, [rope, rest], dim=-1)
        q_rot, k_rot = md.apply_rotary_pos_emb(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q_pass], dim=-1)
        k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
        dots = torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1))
        w = self.weights_proj(hidden_states.to(self.weights_proj.weight.dtype)).float()
        w = w * self.n_heads ** -0.5 * self.softmax_scale
        scores = torch.matmul(w.unsqueeze(-2), torch.relu(dots)).squeeze(-2)[0]   # [S, S]
        mag = torch.matmul(w.abs().unsqueeze(-2),
                           torch.matmul(q.float().abs(),
                                        k.float().abs().transpose(-1, -2).unsqueeze(1))
                           ).squeeze(-2)[0]
        model.index_scores[self.layer_idx] = (scores, mag)
        forced = model.forced[self.layer_idx].long()                                # [S, topk]
        forced = torch.where(forced >= 0, forced, forced[:, :1])  # pad with a selected key
        return forced[None].to(torch.int32)

    for layer in model.model.layers:
        layer.self_attn.indexer.forward = indexer_forward.__get__(layer.self_attn.indexer)
    return model


def compare_v32(case: str, path: str, got: dict) -> tuple[bool, str]:
    """vLLM's logprobs against transformers' model attending to vLLM's selected keys, teacher-
    forced; vLLM's selections checked against the reference's own index scores: each row holds
    min(topk, visible) distinct causal positions, and every selected key's float32 score is within
    eps of the k-th best, eps = 2^-3 * (the row's sum_h |w_h| |q_h| . |k|): e4m3 rounds q and k to
    2^-4 relative each (vLLM quantises them; the reference does not); keys the reference ranks
    clearly above the k-th (by more than eps) must be selected."""
    import torch

    bound, mean_bound = BOUND[case]
    model = v32_reference(path)
    topk = model.config.index_topk
    worst = total = 0.0
    count = greedy_checked = rows = same_sets = outside = 0
    bad = []
    for pi, r in enumerate(got["results"]):
        ids = torch.tensor([r["prompt_ids"] + r["ids"]])
        n_rows = len(r["prompt_ids"]) + len(r["ids"]) - 1  # the last token is never forwarded
        sel = {li: torch.tensor(v) for li, v in enumerate(r["indices"])}
        for li, v in sel.items():
            assert v.shape == (n_rows, topk), f"prompt {pi} layer {li}: indices {v.shape}"
            model.forced[li] = torch.cat([v, v[-1:]])  # the unused last row: any valid keys
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        for li, v in sel.items():
            scores, mag = model.index_scores[li]
            for t in range(n_rows):
                row = v[t]
                n = min(topk, t + 1)
                got_keys = row[:n].tolist()
                rows += 1
                if (row[n:] != -1).any() or len(set(got_keys)) != n or min(got_keys) < 0 or \
                        max(got_keys) > t:
                    bad.append(f"prompt {pi} layer {li} row {t}: indices {row.tolist()}")
                    continue
                s = scores[t, :t + 1].double()
                eps = 2.0 ** -3 * float(mag[t, :t + 1].max())
                tau = float(torch.sort(s, descending=True).values[n - 1])
                if any(float(s[j]) < tau - eps for j in got_keys) or any(
                        j not in got_keys for j in torch.nonzero(s > tau + eps)[:, 0].tolist()):
                    outside += 1
                    bad.append(f"prompt {pi} layer {li} row {t}: selection outside the "
                               f"tolerance of the reference's scores")
                same_sets += sorted(got_keys) == sorted(torch.topk(s, n).indices.tolist())
        lp_ref = torch.log_softmax(logits, -1)
        p = len(r["prompt_ids"])
        for step, lps in enumerate(r["logprobs"]):
            ref = lp_ref[p - 1 + step]
            for t, lp in lps.items():
                d = abs(lp - float(ref[int(t)]))
                worst = max(worst, d)
                total += d
                count += 1
                if d > bound:
                    bad.append(f"prompt {pi} step {step} token {t}: vllm {lp:.4f} "
                               f"ref {float(ref[int(t)]):.4f}")
            top2 = torch.topk(logits[p - 1 + step], 2).values
            if float(top2[0] - top2[1]) > 2 * bound:
                greedy_checked += 1
                if int(logits[p - 1 + step].argmax()) != r["ids"][step]:
                    bad.append(f"prompt {pi} step {step}: greedy {r['ids'][step]} != "
                               f"reference {int(logits[p - 1 + step].argmax())}")
    mean = total / max(count, 1)
    if mean > mean_bound:
        bad.append(f"mean |dlogprob| {mean:.4f} > {mean_bound}")
    standalone = got.get("standalone_rows_differ")
    if standalone is None or standalone != 0:
        bad.insert(0, f"vLLM's indices differ from quantkv's standalone indexer on "
                      f"{standalone} rows")
    tps = got["tokens"] / got["gen_s"]
    msg = (f"{case}: max |dlogprob| {worst:.4f} (bound {bound}), mean {mean:.4f} (bound "
           f"{mean_bound}), greedy checked at {greedy_checked} steps; {rows} index rows "
           f"(index_topk {topk}), {same_sets} equal to the reference's own top-k, {outside} "
           f"outside its tolerance; standalone indexer: {got.get('standalone_rows_differ')} of "
           f"{got.get('standalone_rows')} rows differ; load "
           f"{got['load_s']:.1f} s, {tps:.1f} tokens/s")
    if bad:
        msg += "\n  " + "\n  ".join(bad[:10])
    return not bad, msg


def v32_standalone_check(captured: list) -> tuple[int, int]:
    """Replays every captured indexer call of one request at a time through quantkv's standalone
    path (a PagedKVCache of its own, indexer_k_store, mla_indexer_ragged_float8_paged with
    positions) on the same q, weights and keys vLLM gave the plugin; returns (rows, rows whose
    indices differ from what the plugin wrote into vLLM's topk buffer)."""
    import torch

    import quantkv

    rows = differ = 0
    caches: dict = {}
    for c in captured:
        qsl, lens = c["query_start_loc"], c["cache_lengths"]
        assert len(lens) == 1, "the capture runs one request at a time (max_num_seqs=1)"
        if int(lens[0]) == 0:  # a new request: fresh caches
            caches.pop(c["layer"], None)
        if c["layer"] not in caches:
            caches[c["layer"]] = quantkv.PagedKVCache(
                8, dtype="float8_e4m3fn", kv_dim=1, num_layers=1, page_size=16, num_heads=1,
                head_size=c["k"].shape[1], scale_granularity=c["k"].shape[1], batch_size=1,
                max_pages_per_seq=8)
        cache = caches[c["layer"]]
        t = int(qsl[1])
        cache.reserve(0, int(lens[0]) + t)
        cache.set_cache_length(0, int(lens[0]))
        quantkv.indexer_k_store(c["k"], qsl, cache)
        pos = torch.as_tensor(quantkv.mla_indexer_ragged_float8_paged(
            c["q8"], c["q_s"], qsl, cache, c["positions"].shape[1], index_output="positions"))
        rows += t
        differ += int((pos != c["positions"]).any(1).sum())
    return rows, differ


def serve(path: str, tp: int, out: str) -> None:
    from vllm import LLM, SamplingParams

    # Recording vLLM's routes (MoE, engine in this process: VLLM_ENABLE_V1_MULTIPROCESSING=0):
    # the plugin's expert calls are wrapped to keep their topk_ids, one request at a time
    # (max_num_seqs=1) so that the calls are prompt 0's prefill and decode steps, then prompt 1's...
    record = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
    calls: list = []
    if record:
        import quantkv.vllm as qv

        inner = qv._run_experts

        def recording(layer, x, topk_weights, topk_ids, quantize):
            calls.append((id(layer), topk_ids.detach().clone()))
            return inner(layer, x, topk_weights, topk_ids, quantize)

        qv._run_experts = recording
    with open(os.path.join(path, "config.json")) as f:
        v32 = "index_topk" in json.load(f)
    if v32:
        assert record, "the V3.2 case captures the indexer in this process"
    t0 = time.time()
    llm = LLM(model=path, tokenizer=path, dtype="bfloat16", tensor_parallel_size=tp,
              enforce_eager=os.environ.get("QUANTKV_E2E_COMPILED") != "1", max_model_len=128,
              max_num_seqs=1 if record else 4, seed=0,
              distributed_executor_backend="mp" if tp > 1 else None)
    t_load = time.time() - t0
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, logprobs=TOP_LOGPROBS,
                            ignore_eos=True)
    calls.clear()  # the engine's warm-up runs
    if v32:
        import quantkv.vllm_sparse as vs

        vs.CAPTURE = []
    t1 = time.time()
    outs = llm.generate(V32_PROMPTS if v32 else PROMPTS, params)
    t_gen = time.time() - t1
    indices = None
    extra = {}
    if v32:
        import torch

        captured, vs.CAPTURE = vs.CAPTURE, None
        rows = [len(o.prompt_token_ids) + MAX_TOKENS - 1 for o in outs]
        names = list(dict.fromkeys(c["layer"] for c in captured))
        per_layer = [torch.cat([c["positions"] for c in captured if c["layer"] == n])
                     for n in names]
        assert all(t.shape[0] == sum(rows) for t in per_layer), (
            f"captured {[t.shape[0] for t in per_layer]} index rows per layer, expected "
            f"{sum(rows)}")
        indices = [torch.stack([t.split(rows)[i] for t in per_layer]).tolist()
                   for i in range(len(outs))]  # per prompt [layers, rows, topk]
        extra["standalone_rows"], extra["standalone_rows_differ"] = \
            v32_standalone_check(captured)
    routed = None
    if record and not v32 and calls:  # MoE models only: a dense model routes nothing
        import torch

        layers = list(dict.fromkeys(k for k, _ in calls))
        per_layer = [torch.cat([v for k, v in calls if k == lid]) for lid in layers]
        rows = [len(o.prompt_token_ids) + MAX_TOKENS - 1 for o in outs]  # forwarded tokens
        assert all(t.shape[0] == sum(rows) for t in per_layer), (
            f"recorded {[t.shape[0] for t in per_layer]} routes per layer, expected {sum(rows)}")
        routed = torch.stack(per_layer, 1).split(rows)  # per prompt [tokens, layers, k]
    res = []
    for i, o in enumerate(outs):
        c = o.outputs[0]
        res.append({"prompt_ids": list(o.prompt_token_ids), "ids": list(c.token_ids),
                    "logprobs": [{str(t): lp.logprob for t, lp in step.items()}
                                 for step in c.logprobs],
                    "routed": None if routed is None else routed[i].tolist(),
                    "indices": None if indices is None else indices[i]})
    import quantkv

    with open(out, "w") as f:
        json.dump({"results": res, "load_s": t_load, "gen_s": t_gen, "isa": quantkv.isa_level(),
                   "tokens": sum(len(r["ids"]) for r in res), **extra}, f)


# ---------------------------------------------------------------------------- compare
def compare(case: str, preset: str, path: str, got: dict) -> tuple[bool, str]:
    import torch

    if preset == "V32":
        return compare_v32(case, path, got)
    bound, mean_bound = BOUND[case]
    model = dequantised_reference(path, preset)
    worst = total = 0.0
    count = 0
    greedy_checked = 0
    bad = []
    routing = {"forced": None, "differ": 0, "routes": 0, "max_margin": 0.0}
    model.routing = routing  # read by _reference_moe's blocks (MoE models only)
    for pi, r in enumerate(got["results"]):
        ids = torch.tensor([r["prompt_ids"] + r["ids"]])
        routing["forced"] = None if r.get("routed") is None else torch.tensor(r["routed"])
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        lp_ref = torch.log_softmax(logits, -1)
        p = len(r["prompt_ids"])
        for step, lps in enumerate(r["logprobs"]):
            ref = lp_ref[p - 1 + step]
            for t, lp in lps.items():
                d = abs(lp - float(ref[int(t)]))
                worst = max(worst, d)
                total += d
                count += 1
                if d > bound:
                    bad.append(f"prompt {pi} step {step} token {t}: vllm {lp:.4f} "
                               f"ref {float(ref[int(t)]):.4f}")
            top2 = torch.topk(logits[p - 1 + step], 2).values
            if float(top2[0] - top2[1]) > 2 * bound:
                greedy_checked += 1
                if int(logits[p - 1 + step].argmax()) != r["ids"][step]:
                    bad.append(f"prompt {pi} step {step}: greedy {r['ids'][step]} != "
                               f"reference {int(logits[p - 1 + step].argmax())}")
    mean = total / max(count, 1)
    if mean > mean_bound:
        bad.append(f"mean |dlogprob| {mean:.4f} > {mean_bound}")
    tps = got["tokens"] / got["gen_s"]
    msg = (f"{case}: max |dlogprob| {worst:.4f} (bound {bound}), mean {mean:.4f} (bound "
           f"{mean_bound}), greedy checked at "
           f"{greedy_checked} steps, load {got['load_s']:.1f} s, {tps:.1f} tokens/s")

    if routing["routes"]:
        msg += (f"; vLLM's routes taken, {routing['differ']} of {routing['routes']} differ from "
                f"the reference's own top-k (margins <= {routing['max_margin']:.1e})")
        if routing["max_margin"] > ROUTING_MARGIN:
            bad.insert(0, f"vLLM routed differently where the reference's k-th and (k+1)-th "
                       f"probabilities differ by {routing['max_margin']:.1e} > {ROUTING_MARGIN}")
    if bad:
        msg += "\n  " + "\n  ".join(bad[:10])
    return not bad, msg


def tp_consistency(tp1_path: str, got: dict) -> tuple[bool, str]:
    """The TP=2 output against the TP=1 case's (same model, same prompts): the logprobs of the
    tokens both returned, at every step up to each prompt's first differing greedy token (after
    it the two continue different texts): at least TP_STEPS_WITHIN of them within TP_CONSISTENCY."""
    with open(tp1_path) as f:  # the TP=1 case runs first (its absence fails the case)
        ref = json.load(f)["results"]
    worst, steps, within = 0.0, 0, 0
    for r1, r2 in zip(ref, got["results"]):
        for t1, t2, l1, l2 in zip(r1["ids"], r2["ids"], r1["logprobs"], r2["logprobs"]):
            # no token in both top lists (a flipped route can change the whole step): outside
            step = max((abs(l1[t] - l2[t]) for t in set(l1) & set(l2)), default=float("inf"))
            worst = max(worst, step)
            steps += 1
            within += step <= TP_CONSISTENCY
            if t1 != t2:
                break
    msg = (f"against TP=1's vLLM output: {within} of {steps} steps within {TP_CONSISTENCY} "
           f"(at least {TP_STEPS_WITHIN:.0%} required), max {worst:.4f}")
    return steps > 0 and within >= TP_STEPS_WITHIN * steps, msg


def check_layers(work: str) -> tuple[bool, str]:
    """The plugin's kernels on single layers holding what vLLM's compressed-tensors schemes leave
    before calling process_weights_after_loading (weight, weight_scale, and for NVFP4
    weight_global_scale = 1/g_w, W4A4 also input_global_scale_inv = g_x, alpha = 1/(g_x g_w)),
    against y = bf16(q(x) . W^T) in fp32: the only differences allowed are the fp32 summation
    order and the one bf16 rounding (|y - ref| <= 2^-8 |ref| + 1e-4)."""
    import torch
    from safetensors.torch import load_file
    from vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel import (
        Mxfp8LinearLayerConfig)
    from vllm.model_executor.kernels.linear.nvfp4.base import NvFp4LinearLayerConfig

    import quantkv.vllm as qv

    kernels = qv._kernel_classes()
    P = torch.nn.Parameter
    grid = torch.tensor(FP4_GRID + [-v for v in FP4_GRID])
    torch.manual_seed(0)
    x = (torch.randn(7, 256) * 0.7).bfloat16()
    worst = 0.0
    lines = []
    t = load_file(os.path.join(work, "nvfp4", "model.safetensors"))
    base = "model.layers.0.mlp.gate_proj"
    wp, ws = t[base + ".weight_packed"], t[base + ".weight_scale"]
    gw, gx = float(t[base + ".weight_global_scale"]), float(t[base + ".input_global_scale"])
    w = (grid[torch.stack([wp & 0xF, wp >> 4], -1).reshape(wp.shape[0], -1).long()]
         * ws.float().repeat_interleave(16, -1) / gw)
    cases = []
    for w4a4 in (True, False):
        layer = torch.nn.Module()
        layer.weight = P(wp.clone(), requires_grad=False)
        layer.weight_scale = P(ws.clone(), requires_grad=False)
        layer.weight_global_scale = P(torch.tensor(1.0 / gw), requires_grad=False)
        if w4a4:
            layer.input_global_scale_inv = P(torch.tensor(gx), requires_grad=False)
            layer.alpha = P(torch.tensor(1.0 / gx) * torch.tensor(1.0 / gw), requires_grad=False)
        xr = fake_quant_nvfp4(x.float(), gx) if w4a4 else x.float()
        cases.append((f"nvfp4 {'w4a4' if w4a4 else 'w4a16'}",
                      kernels["nvfp4"](NvFp4LinearLayerConfig()), layer, xr @ w.T))
    mx = os.path.join(work, "mxfp8", "model.safetensors")
    if os.path.exists(mx):
        t = load_file(mx)
        w8, s8 = t[base + ".weight"], t[base + ".weight_scale"]
        layer = torch.nn.Module()
        layer.weight = P(w8.clone(), requires_grad=False)
        layer.weight_scale = P(s8.clone(), requires_grad=False)
        w = w8.float() * torch.exp2(s8.float() - 127).repeat_interleave(32, -1)
        cases.append(("mxfp8", kernels["mxfp8"](Mxfp8LinearLayerConfig(tuple(w8.shape))), layer,
                      fake_quant_mxfp8(x.float()) @ w.T))
    ok = True
    for name, kernel, layer, ref in cases:
        kernel.process_weights_after_loading(layer)
        y = kernel.apply_weights(layer, x).float()
        err = float(((y - ref).abs() - (ref.abs() * 2.0 ** -8 + 1e-4)).max())
        rel = float(((y - ref).abs() / (ref.abs() + 1e-4)).max())
        worst = max(worst, rel)
        ok &= err <= 0
        lines.append(f"{name} max rel {rel:.2e}")
    moe_ok, moe_line = check_moe_layer(work)
    return ok and moe_ok, "layers: " + ", ".join(lines + [moe_line])


def check_moe_layer(work: str) -> tuple[bool, str]:
    """The plugin's NVFP4 fused-experts method (weight-only) on one layer of the MoE checkpoint,
    its parameters stacked as vLLM's loader stacks them (w13 = [gate; up] per expert), on random
    tokens and routes (duplicate-free top-2 of 8, random weights), against the fp32 mixture on
    the dequantised weights with h rounded to bf16. Allowed: the fp32 summation order, h's
    bf16 rounding on either side (2^-8 |h| per element) and y's own bf16 rounding:
    |y - ref| <= 2^-8 (sum_j |w_j| |h_j| . |W2_e|^T + |ref|) + 1e-4."""
    import types

    import torch
    from safetensors.torch import load_file

    import quantkv.vllm as qv

    path = os.path.join(work, "moe_nvfp4a16")
    if not os.path.exists(os.path.join(path, "config.json")):
        make_moe_model("NVFP4A16", path)
    t = load_file(os.path.join(path, "model.safetensors"))
    grid = torch.tensor(FP4_GRID + [-v for v in FP4_GRID])
    pre = "model.layers.0.mlp.experts."

    def stack(proj: str, suffix: str) -> torch.Tensor:
        return torch.stack([t[f"{pre}{e}.{p}.{suffix}"] for e in range(MOE_EXPERTS)
                            for p in proj.split("+")]).reshape(
            MOE_EXPERTS, -1, t[f"{pre}0.{proj.split('+')[0]}.{suffix}"].shape[-1])

    def deq(e: int, p: str) -> torch.Tensor:
        wp, ws = t[f"{pre}{e}.{p}.weight_packed"], t[f"{pre}{e}.{p}.weight_scale"]
        codes = torch.stack([wp & 0xF, wp >> 4], -1).reshape(wp.shape[0], -1).long()
        return (grid[codes] * ws.float().repeat_interleave(16, -1)
                / t[f"{pre}{e}.{p}.weight_global_scale"].float())

    P = torch.nn.Parameter
    layer = torch.nn.Module()
    layer.w13_weight_packed = P(stack("gate_proj+up_proj", "weight_packed"), requires_grad=False)
    layer.w13_weight_scale = P(stack("gate_proj+up_proj", "weight_scale"), requires_grad=False)
    layer.w2_weight_packed = P(stack("down_proj", "weight_packed"), requires_grad=False)
    layer.w2_weight_scale = P(stack("down_proj", "weight_scale"), requires_grad=False)
    layer.w13_weight_global_scale = P(stack("gate_proj+up_proj", "weight_global_scale")
                                      .reshape(MOE_EXPERTS, 2), requires_grad=False)
    layer.w2_weight_global_scale = P(stack("down_proj", "weight_global_scale")
                                     .reshape(MOE_EXPERTS), requires_grad=False)
    layer.activation = "silu"
    layer.expert_map = None
    cls = qv._moe_method_classes()["nvfp4"]
    method = cls.__new__(cls)  # vLLM's FusedMoEConfig is not needed for these two calls
    method.moe = types.SimpleNamespace(is_act_and_mul=True)
    method.use_a16 = True
    method.process_weights_after_loading(layer)

    seed = 1234
    gen = torch.Generator().manual_seed(seed)
    tokens = 9
    x = (torch.randn(tokens, 256, generator=gen) * 0.7).bfloat16()
    ids = torch.stack([torch.randperm(MOE_EXPERTS, generator=gen)[:MOE_TOP_K]
                       for _ in range(tokens)]).int()
    w = torch.rand(tokens, MOE_TOP_K, generator=gen)
    y = method.apply(layer, x, w, ids, None, None).float()
    ref = torch.zeros(tokens, 256)
    mag = torch.zeros(tokens, 256)
    for e in range(MOE_EXPERTS):
        tok, slot = torch.where(ids == e)
        if tok.numel() == 0:
            continue
        g = x[tok].float() @ torch.cat([deq(e, "gate_proj"), deq(e, "up_proj")]).T
        h = (torch.nn.functional.silu(g[:, :MOE_INTERMEDIATE]) * g[:, MOE_INTERMEDIATE:])
        w2 = deq(e, "down_proj")
        ref.index_add_(0, tok, w[tok, slot, None] * (h.bfloat16().float() @ w2.T))
        mag.index_add_(0, tok, w[tok, slot, None] * (h.abs() @ w2.abs().T))
    excess = float(((y - ref).abs() - (2.0 ** -8 * (mag + ref.abs()) + 1e-4)).max())
    rel = float(((y - ref).abs() / (mag + ref.abs() + 1e-4)).max())
    return excess <= 0, (f"moe nvfp4 w4a16 (seed {seed}) max |y - ref| / (mag + |ref|) "
                         f"{rel:.2e}")


def model_dir(work: str, case: str) -> str:
    """The directory of the case's model (made by the first case that needs it)."""
    preset = CASES[case][0]
    return os.path.join(work, ("moe_" if case.startswith("moe_") else "") + preset.lower())


def run_case(case: str, work: str, timeout: int) -> tuple[bool, str]:
    """One case: its model made if missing, served by vLLM in a subprocess, checked."""
    preset, tp = CASES[case]
    moe = case.startswith("moe_")
    path = model_dir(work, case)
    if not os.path.exists(os.path.join(path, "config.json")):
        maker = make_gptoss_model if preset == "GPTOSS_MXFP4" else (
            make_v32_model if preset == "V32" else make_moe_model if moe else
            make_modelopt_model if preset.startswith("MODELOPT_") else make_model)
        maker(preset, path)
    out = os.path.join(work, case + ".json")
    env = dict(os.environ)
    if tp > 1:
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0|1")
    elif moe or preset == "V32" or case in CASE_ISA:  # the engine in serve()'s
        # process, which records vLLM's routes (MoE), the indexer's selections (V3.2) and
        # the ISA level quantkv's kernels ran at
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if case in CASE_ISA:
        env["QUANTKV_ISA"] = CASE_ISA[case]
    if case in CASE_COMPILED:
        env["QUANTKV_E2E_COMPILED"] = "1"
    subprocess.run([sys.executable, __file__, "--serve", path, str(tp), out], check=True,
                   timeout=timeout, env=env)
    with open(out) as f:
        got = json.load(f)
    ok, msg = compare(case, preset, path, got)
    if case in TP1_OF:
        tp_ok, tp_msg = tp_consistency(os.path.join(work, TP1_OF[case] + ".json"), got)
        ok, msg = ok and tp_ok, msg + "; " + tp_msg
    if case in CASE_ISA:  # the level the kernels ran at, not only the one asked for
        isa_ok = got.get("isa") == CASE_ISA[case]
        msg += f"; quantkv's kernels at {got.get('isa')} (asked {CASE_ISA[case]})"
        ok = ok and isa_ok
    return ok, msg


def lanes_for(cases: list[str], jobs: int) -> list[list[str]]:
    """Cases split into `jobs` lanes that run at once. Cases sharing a model stay in one lane, in
    the given order (the first makes the model; a TP=2 case reads its TP=1 case's output); every
    TP>1 case is in lane 0, so one TP>1 engine runs at a time (it binds both cores and takes free
    ports); the other groups go to the lane with the fewest cases."""
    groups: dict[str, list[str]] = {}
    for c in cases:
        groups.setdefault(model_dir("", c), []).append(c)
    lanes: list[list[str]] = [[] for _ in range(jobs)]
    multi = [g for g in groups.values() if any(CASES[c][1] > 1 for c in g)]
    for g in multi:
        lanes[0] += g
    for g in groups.values():
        if g not in multi:
            min(lanes, key=len).extend(g)
    return [lane for lane in lanes if lane]


def run_lanes(cases: list[str], work: str, timeout: int, jobs: int) -> list[tuple[bool, str]]:
    """The cases in lanes (lanes_for), each lane one process of this script writing its own
    log; the logs are printed whole when every lane has ended. Most of a case's time is vLLM's
    three processes importing torch and vLLM, one core each, so two lanes take about half the
    time on two cores. Results: each lane's PASS / FAIL lines, and a failure for a lane that
    ended without its closing line."""
    os.makedirs(work, exist_ok=True)
    procs = []
    for i, lane in enumerate(lanes_for(cases, jobs)):
        log = os.path.join(work, f"lane{i}.log")
        print(f"lane {i}: {','.join(lane)} (log {log})", flush=True)
        with open(log, "w") as f:
            procs.append((lane, log, subprocess.Popen(
                [sys.executable, __file__, "--work", work, "--cases", ",".join(lane),
                 "--timeout", str(timeout)], stdout=f, stderr=subprocess.STDOUT)))
    results = []
    for i, (lane, log, proc) in enumerate(procs):
        rc = proc.wait()
        with open(log) as f:
            text = f.read()
        print(f"==== lane {i} ({','.join(lane)}): exit {rc}\n{text}", flush=True)
        lines = [ln for ln in text.splitlines() if ln.startswith(("PASS ", "FAIL "))]
        results += [(ln.startswith("PASS "), ln[5:]) for ln in lines]
        if rc != 0 and not any(ln.startswith("FAIL ") for ln in lines):
            results.append((False, f"lane {i} exited with {rc}"))
    return results


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/quantkv-vllm-e2e")
    ap.add_argument("--cases",
                    default="nvfp4_w4a4,nvfp4_w4a16,mxfp8,mxfp4_w4a16,nvfp4_w4a4_tp2,"
                            "moe_nvfp4_w4a16,moe_nvfp4_w4a4_tp2,moe_gptoss_mxfp4,v32,"
                            "modelopt_nvfp4,modelopt_nvfp4_w4a16,nvfp4_w4a16_avx2,"
                            "moe_gptoss_mxfp4_avx2,moe_gptoss_mxfp4_tp2,nvfp4_w4a16_compiled,"
                            "layers")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--jobs", type=int, default=1,
                    help="run the cases in this many lanes at once ('layers' runs after them)")
    ap.add_argument("--serve", nargs=3, metavar=("PATH", "TP", "OUT"))
    args = ap.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), args.serve[2])
        return 0
    cases = args.cases.split(",")
    unknown = [c for c in cases if c != "layers" and c not in CASES]
    if unknown:
        ap.error(f"--cases: unknown case(s) {','.join(unknown)}")
    results = []
    served = [c for c in cases if c != "layers"]
    if args.jobs > 1 and served:
        results += run_lanes(served, args.work, args.timeout, args.jobs)
        cases = [c for c in cases if c == "layers"]
    for case in cases:
        t0 = time.time()
        try:
            if case == "layers":  # reads the nvfp4 model (made by a served case)
                ok, msg = check_layers(args.work)
            else:
                ok, msg = run_case(case, args.work, args.timeout)
                msg += f" ({time.time() - t0:.0f} s)"
        except Exception as e:  # a failed case is reported, the others still run
            ok, msg = False, f"{case}: {type(e).__name__}: {e}"
        print(f"{'PASS' if ok else 'FAIL'} {msg}", flush=True)
        results.append((ok, msg))
    passed = sum(ok for ok, _ in results)
    if args.jobs > 1:
        print("summary:\n" + "\n".join(f"{'PASS' if ok else 'FAIL'} {m}" for ok, m in results))
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
