"""quantkv's operations as torch custom ops: ``import quantkv.torch`` registers them with
``torch.library`` so that ``torch.ops.quantkv.<op>`` runs eagerly and inside ``torch.compile``
(each op has a fake implementation giving its output shapes and dtypes).

Custom ops take tensors only, so a paged cache is passed as its tensors (blocks, cache
lengths, lookup table and, for the indexer's K cache, scales): the layout of
``quantkv.PagedCacheView``. Ops that store into the cache declare the blocks (and scales) as
mutated arguments.

Ops (shapes as in the functions of the same names in ``quantkv``):

- ``quantize_dynamic_block_scaled(x, format, global_scale) -> (data, scales)``
- ``indexer_q_prepare(q, weights, scale_mode) -> (q_fp8, q_s)``
- ``indexer_k_store(k, input_row_offsets, k_blocks, k_scales, cache_lengths, lookup_table,
  layer_idx, scale_mode) -> ()``: writes k_blocks and k_scales
- ``mla_indexer_ragged_float8_paged(q, q_s, input_row_offsets, k_blocks, k_scales,
  cache_lengths, lookup_table, top_k, layer_idx, mask) -> int32 [T, top_k]``
- ``fused_qkv_paged(hidden_state, input_row_offsets, weight, input_scale, weight_scale,
  kv_blocks, cache_lengths, lookup_table, q_dim, tensor_sf, layer_idx, format)
  -> bfloat16 [M, q_dim]``: writes kv_blocks
- ``sparse_mla(q, kv, indices, sm_scale, d_v, topk_length) -> (bfloat16 [T, H, d_v],
  float32 [T, H])``: kv bfloat16 latent rows or uint8 fp8 rows (FlashMLA's 656-byte layout)
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _quantkv as _q

_SFV = {"nvfp4": 16, "mxfp4": 32, "mxfp8": 32}


def _dtype(name: str) -> torch.dtype:
    """The torch dtype the eager op returns for bits of `name` (uint8 where torch lacks it)."""
    found = getattr(torch, name, torch.uint8)
    return found if isinstance(found, torch.dtype) else torch.uint8


def _check_format(fmt: str) -> str:
    if fmt.lower() not in _SFV:
        raise ValueError(f"format: expected 'nvfp4', 'mxfp4' or 'mxfp8', got '{fmt}'")
    return fmt.lower()


@torch.library.custom_op("quantkv::quantize_dynamic_block_scaled", mutates_args=())
def quantize_dynamic_block_scaled(x: torch.Tensor, format: str = "nvfp4",
                                  global_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """x: float32 or bfloat16 [M, K] -> (data [M, K/2] fp4x2 or [M, K] e4m3, swizzled scales)."""
    data, scales = _q.quantize_dynamic_block_scaled(x, format, global_scale)
    return data, scales


@quantize_dynamic_block_scaled.register_fake
def _(x: torch.Tensor, format: str = "nvfp4",
      global_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    fmt = _check_format(format)
    m, k = x.shape
    shape = _q.swizzled_scale_shape(m, k // _SFV[fmt])
    if fmt == "mxfp8":
        data = x.new_empty((m, k), dtype=_dtype("float8_e4m3fn"))
    else:
        data = x.new_empty((m, k // 2), dtype=_dtype("float4_e2m1fn_x2"))
    scale_dtype = _dtype("float8_e4m3fn" if fmt == "nvfp4" else "float8_e8m0fnu")
    return data, x.new_empty(shape, dtype=scale_dtype)


@torch.library.custom_op("quantkv::indexer_q_prepare", mutates_args=())
def indexer_q_prepare(q: torch.Tensor, weights: torch.Tensor,
                      scale_mode: str = "power_of_two") -> tuple[torch.Tensor, torch.Tensor]:
    """q: float32 [T, H, D], weights: float32 [T, H] -> (float8_e4m3fn [T, H, D], float32 [T, H])."""
    q_fp8, q_s = _q.indexer_q_prepare(q, weights, scale_mode)
    return q_fp8, q_s


@indexer_q_prepare.register_fake
def _(q: torch.Tensor, weights: torch.Tensor,
      scale_mode: str = "power_of_two") -> tuple[torch.Tensor, torch.Tensor]:
    return q.new_empty(q.shape, dtype=_dtype("float8_e4m3fn")), weights.new_empty(weights.shape)


@torch.library.custom_op("quantkv::indexer_k_store", mutates_args=("k_blocks", "k_scales"))
def indexer_k_store(k: torch.Tensor, input_row_offsets: torch.Tensor, k_blocks: torch.Tensor,
                    k_scales: torch.Tensor, cache_lengths: torch.Tensor,
                    lookup_table: torch.Tensor, layer_idx: int = 0,
                    scale_mode: str = "power_of_two") -> None:
    """Stores k (float32 or bfloat16 [T, D]) per token into the fp8 K cache given by its tensors."""
    cache = _q.PagedCacheView(k_blocks, cache_lengths, lookup_table, k_scales)
    _q.indexer_k_store(k, input_row_offsets, cache, layer_idx, scale_mode)


@indexer_k_store.register_fake
def _(k: torch.Tensor, input_row_offsets: torch.Tensor, k_blocks: torch.Tensor,
      k_scales: torch.Tensor, cache_lengths: torch.Tensor, lookup_table: torch.Tensor,
      layer_idx: int = 0, scale_mode: str = "power_of_two") -> None:
    return None


@torch.library.custom_op("quantkv::mla_indexer_ragged_float8_paged", mutates_args=())
def mla_indexer_ragged_float8_paged(q: torch.Tensor, q_s: torch.Tensor,
                                    input_row_offsets: torch.Tensor, k_blocks: torch.Tensor,
                                    k_scales: torch.Tensor, cache_lengths: torch.Tensor,
                                    lookup_table: torch.Tensor, top_k: int, layer_idx: int = 0,
                                    mask: str = "causal") -> torch.Tensor:
    """The lightning indexer: int32 [T, top_k] key positions per token (see quantkv's function)."""
    cache = _q.PagedCacheView(k_blocks, cache_lengths, lookup_table, k_scales)
    out: torch.Tensor = _q.mla_indexer_ragged_float8_paged(q, q_s, input_row_offsets, cache,
                                                           top_k, layer_idx, mask)
    return out


@mla_indexer_ragged_float8_paged.register_fake
def _(q: torch.Tensor, q_s: torch.Tensor, input_row_offsets: torch.Tensor,
      k_blocks: torch.Tensor, k_scales: torch.Tensor, cache_lengths: torch.Tensor,
      lookup_table: torch.Tensor, top_k: int, layer_idx: int = 0,
      mask: str = "causal") -> torch.Tensor:
    return q.new_empty((q.shape[0], top_k), dtype=torch.int32)


@torch.library.custom_op("quantkv::fused_qkv_paged", mutates_args=("kv_blocks",))
def fused_qkv_paged(hidden_state: torch.Tensor, input_row_offsets: torch.Tensor,
                    weight: torch.Tensor, input_scale: torch.Tensor, weight_scale: torch.Tensor,
                    kv_blocks: torch.Tensor, cache_lengths: torch.Tensor,
                    lookup_table: torch.Tensor, q_dim: int, tensor_sf: float = 1.0,
                    layer_idx: int = 0, format: str = "nvfp4") -> torch.Tensor:
    """The fused block-scaled QKV projection: bfloat16 Q [M, q_dim]; K/V go into kv_blocks."""
    cache = _q.PagedCacheView(kv_blocks, cache_lengths, lookup_table)
    out: torch.Tensor = _q.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hidden_state, input_row_offsets, weight, input_scale, weight_scale, cache, tensor_sf,
        layer_idx, format, q_dim=q_dim)
    return out


@fused_qkv_paged.register_fake
def _(hidden_state: torch.Tensor, input_row_offsets: torch.Tensor, weight: torch.Tensor,
      input_scale: torch.Tensor, weight_scale: torch.Tensor, kv_blocks: torch.Tensor,
      cache_lengths: torch.Tensor, lookup_table: torch.Tensor, q_dim: int,
      tensor_sf: float = 1.0, layer_idx: int = 0, format: str = "nvfp4") -> torch.Tensor:
    return hidden_state.new_empty((hidden_state.shape[0], q_dim), dtype=torch.bfloat16)


# Prepared weights are not tensors: a model registers each once and passes its integer handle
# (as vLLM's CPU oneDNN matmuls pass theirs), so the op stays traceable by torch.compile.
_prepared: "dict[int, _q.PreparedQkvWeights | _q.PreparedExperts]" = {}


def register_prepared_weights(weights: "_q.PreparedQkvWeights | _q.PreparedExperts") -> int:
    """Keeps `weights` (quantkv.prepare_weights, a loader's .weights, or quantkv.prepare_experts)
    alive and returns the handle quantkv::linear / quantkv::fused_experts take;
    release_prepared_weights drops it."""
    handle = id(weights)
    _prepared[handle] = weights
    return handle


def release_prepared_weights(handle: int) -> None:
    _prepared.pop(handle, None)


@torch.library.custom_op("quantkv::linear", mutates_args=())
def linear(x: torch.Tensor, weight_handle: int, n: int, x_scale: Optional[torch.Tensor] = None,
           alpha: float = 1.0, column_alpha: Optional[torch.Tensor] = None,
           bias: Optional[torch.Tensor] = None, out_dtype: str = "bfloat16") -> torch.Tensor:
    """y = x . W^T (+ bias) on registered prepared weights (quantkv.linear): x uint8 with x_scale
    (W4A4 / MXFP8) or bfloat16 (weight-only); y bfloat16 or float32 [M, n]."""
    w = _prepared.get(weight_handle)
    if not isinstance(w, _q.PreparedQkvWeights):
        raise ValueError(f"weight_handle: {weight_handle} is not a registered prepared weight")
    if w.n != n:
        raise ValueError(f"n: expected the weight's N = {w.n}, got {n}")
    out: torch.Tensor = _q.linear(x, w, x_scale=x_scale, alpha=alpha, column_alpha=column_alpha,
                                  bias=bias, out_dtype=out_dtype)
    return out


@linear.register_fake
def _(x: torch.Tensor, weight_handle: int, n: int, x_scale: Optional[torch.Tensor] = None,
      alpha: float = 1.0, column_alpha: Optional[torch.Tensor] = None,
      bias: Optional[torch.Tensor] = None, out_dtype: str = "bfloat16") -> torch.Tensor:
    return x.new_empty((x.shape[0], n), dtype=_dtype(out_dtype))


@torch.library.custom_op("quantkv::fused_experts", mutates_args=())
def fused_experts(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  experts_handle: int, expert_offset: int = 0, quantize_activations: bool = False,
                  gate_up: str = "halves", activation: str = "silu",
                  swiglu_alpha: float = 1.702, swiglu_limit: float = 7.0,
                  w13_bias: Optional[torch.Tensor] = None, w2_bias: Optional[torch.Tensor] = None,
                  out_dtype: str = "bfloat16") -> torch.Tensor:
    """The mixture-of-experts layer (quantkv.fused_experts) on registered prepared experts:
    y [T, H] = sum over the token's routed experts of weight x expert(x)."""
    e = _prepared.get(experts_handle)
    if not isinstance(e, _q.PreparedExperts):
        raise ValueError(f"experts_handle: {experts_handle} is not registered prepared experts")
    out: torch.Tensor = _q.fused_experts(
        x, topk_ids, topk_weights, e, expert_offset=expert_offset,
        quantize_activations=quantize_activations, gate_up=gate_up, activation=activation,
        swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit, w13_bias=w13_bias,
        w2_bias=w2_bias, out_dtype=out_dtype)
    return out


@fused_experts.register_fake
def _(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, experts_handle: int,
      expert_offset: int = 0, quantize_activations: bool = False, gate_up: str = "halves",
      activation: str = "silu", swiglu_alpha: float = 1.702, swiglu_limit: float = 7.0,
      w13_bias: Optional[torch.Tensor] = None, w2_bias: Optional[torch.Tensor] = None,
      out_dtype: str = "bfloat16") -> torch.Tensor:
    return x.new_empty((x.shape[0], x.shape[1]), dtype=_dtype(out_dtype))


@torch.library.custom_op("quantkv::sparse_mla", mutates_args=())
def sparse_mla(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
               d_v: int = 512,
               topk_length: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA attention (quantkv.sparse_mla_attention) over the latent cache kv: bfloat16
    [..., d_qk] or the fp8 rows as uint8 [..., sparse_mla_fp8_row_bytes(d_v, d_rope)] (leading
    dimensions, e.g. [pages, page_size], flattened into slots) -> (out bfloat16 [T, H, d_v],
    lse float32 [T, H])."""
    slots = kv.reshape(-1, kv.shape[-1])
    if kv.dtype == torch.bfloat16:
        out, lse = _q.sparse_mla_attention(q, indices, sm_scale, kv=slots, d_v=d_v,
                                           topk_length=topk_length)
    elif kv.dtype == torch.uint8:
        out, lse = _q.sparse_mla_attention(q, indices, sm_scale, kv_fp8=slots, d_v=d_v,
                                           topk_length=topk_length)
    else:
        raise ValueError(f"kv: expected bfloat16 (latent rows) or uint8 (fp8 rows), got {kv.dtype}")
    return out, lse


@sparse_mla.register_fake
def _(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int = 512,
      topk_length: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    t, h = q.shape[0], q.shape[1]
    return (q.new_empty((t, h, d_v), dtype=torch.bfloat16),
            q.new_empty((t, h), dtype=torch.float32))


__all__ = ["quantize_dynamic_block_scaled", "indexer_q_prepare", "indexer_k_store",
           "mla_indexer_ragged_float8_paged", "fused_qkv_paged", "linear",
           "register_prepared_weights", "release_prepared_weights", "fused_experts", "sparse_mla"]
