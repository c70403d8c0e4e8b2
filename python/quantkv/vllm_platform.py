"""quantkv's vLLM platform plugin (the `vllm.platform_plugins` entry point `quantkv`).

vLLM 0.32.0's CPU platform refuses sparse attention outright
(`CpuPlatform.get_attn_backend_cls`: "Sparse Attention is not supported on CPU.") and picks a
KV-cache block size of 16 (reference CPU MLA) or 128 (AMX MLA) for every MLA model, while
DeepSeek-V3.2's indexer backend (`DeepseekV32IndexerBackend`) supports block size 64 only.
`QuantkvCpuPlatform` is vLLM's `CpuPlatform` with two classmethods changed for sparse-MLA models
(DeepSeek-V3.2 / GLM-5: the config has `index_topk`): the attention backend is quantkv's
(`quantkv.vllm_sparse.QuantkvSparseMLABackend`) and the block size is 64. Everything else,
dense models included, is vLLM's CpuPlatform unchanged (`_enum` stays `PlatformEnum.CPU`).

This module must stay importable while vLLM resolves its platform: it imports vLLM's CPU
platform only when vLLM imports the class by its qualified name.
"""

from __future__ import annotations

import os
from typing import Any

SUPPORTED_VLLM = "0.32.0"
QUALNAME = "quantkv.vllm_platform.QuantkvCpuPlatform"


def platform_plugin() -> str | None:
    """The entry point: QuantkvCpuPlatform where vLLM's own CPU detection finds a CPU build (and
    the version is the tested one), else None (vLLM then picks its builtin platform)."""
    if os.environ.get("QUANTKV_VLLM_PLATFORM", "1") == "0":
        return None
    import vllm
    from vllm.platforms import cpu_platform_plugin

    version = getattr(vllm, "__version__", "unknown")
    if version != SUPPORTED_VLLM and os.environ.get("QUANTKV_VLLM_ALLOW_UNTESTED") != "1":
        return None
    if cpu_platform_plugin() is None:
        return None
    return QUALNAME


def _is_sparse_mla(vllm_config: Any) -> bool:
    model_config = getattr(vllm_config, "model_config", None)
    if model_config is None or not getattr(model_config, "use_mla", False):
        return False
    return hasattr(model_config.hf_text_config, "index_topk")


def __getattr__(name: str) -> Any:
    # QuantkvCpuPlatform is built on first access: importing vllm.platforms.cpu at module import
    # would run while vLLM is still resolving current_platform.
    if name == "QuantkvCpuPlatform":
        cls = _make_platform()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


SPARSE_BLOCK_SIZE = 64  # DeepseekV32IndexerBackend.get_supported_kernel_block_sizes off ROCm


def _make_platform() -> Any:
    from vllm.logger import init_logger
    from vllm.platforms.cpu import CpuPlatform

    log = init_logger("quantkv.vllm_platform")

    class QuantkvCpuPlatform(CpuPlatform):  # type: ignore[misc]
        """vLLM's CpuPlatform; sparse MLA (DeepSeek-V3.2 / GLM-5) runs on quantkv."""

        @classmethod
        def get_attn_backend_cls(cls, selected_backend: Any, attn_selector_config: Any,
                                 num_heads: int | None = None) -> str:
            if attn_selector_config.use_sparse:
                if not attn_selector_config.use_mla:
                    raise NotImplementedError("quantkv: sparse attention without MLA is not "
                                              "supported on CPU")
                log.info_once("Using quantkv's sparse MLA backend (QUANTKV_SPARSE_MLA).")
                return "quantkv.vllm_sparse.QuantkvSparseMLABackend"
            return super().get_attn_backend_cls(selected_backend, attn_selector_config,  # type: ignore[no-any-return]
                                                num_heads)

        @classmethod
        def check_and_update_config(cls, vllm_config: Any) -> None:
            super().check_and_update_config(vllm_config)
            if not _is_sparse_mla(vllm_config):
                return
            cache_config = vllm_config.cache_config
            if cache_config.block_size != SPARSE_BLOCK_SIZE:
                if cache_config.user_specified_block_size:
                    log.warning("quantkv sparse MLA: the indexer cache needs block_size=%d, "
                                "overriding block_size=%d", SPARSE_BLOCK_SIZE,
                                cache_config.block_size)
                cache_config.block_size = SPARSE_BLOCK_SIZE

    QuantkvCpuPlatform.__module__ = __name__
    QuantkvCpuPlatform.__qualname__ = "QuantkvCpuPlatform"
    return QuantkvCpuPlatform
