# Type stubs of the extension, generated with pybind11-stubgen 3.0.0 from the built module
# (PYTHONPATH=build/release/python pybind11-stubgen quantkv._quantkv --numpy-array-use-type-var)
# and checked in CI by mypy and mypy.stubtest against the module (scripts/python_ci.sh).
"""
quantkv: low-precision kernels for LLM inference over a paged KV cache.

Arrays are numpy arrays (ml_dtypes included) or any CPU object with __dlpack__ (torch
tensors...), taken zero-copy. fp8 and fp4 data travel as their bits: uint8 or a
float8_e4m3fn / float8_e8m0fnu / float4_e2m1fn_x2 dtype (two e2m1 values per byte, low
nibble first), bfloat16 as uint16 bits or a bfloat16 dtype. Results come back as numpy
arrays (fp8 / bfloat16 ones typed with ml_dtypes when an input is an ml_dtypes array),
or as torch tensors when the inputs are torch tensors. Bad shapes or dtypes raise
ValueError with the library's message.
"""
from __future__ import annotations
import numpy
import typing
class ExpertsCheckpoint:
    """
    One layer's experts loaded from a checkpoint, with the fused_experts keywords they need.
    """
    @property
    def activation(self) -> str:
        ...
    @property
    def experts(self) -> typing.Any:
        ...
    @property
    def format(self) -> str:
        ...
    @property
    def gate_up(self) -> str:
        ...
    @property
    def hidden(self) -> int:
        ...
    @property
    def intermediate(self) -> int:
        ...
    @property
    def layout(self) -> str:
        ...
    @property
    def num_experts(self) -> int:
        ...
    @property
    def w13_bias(self) -> typing.Any:
        ...
    @property
    def w2_bias(self) -> typing.Any:
        ...
class LinearCheckpoint:
    """
    One linear layer (or several stacked) loaded from a checkpoint.
    """
    @property
    def column_factors_w4a4(self) -> list[float]:
        ...
    @property
    def column_factors_weight_only(self) -> list[float]:
        ...
    @property
    def format(self) -> str:
        ...
    @property
    def input_global(self) -> float:
        ...
    @property
    def section_rows(self) -> list[int]:
        ...
    @property
    def weight_factor(self) -> list[float]:
        ...
    @property
    def weights(self) -> typing.Any:
        ...
class PagedKVCache:
    """
    A paged KV cache (contract §2) that owns its storage.
    
    Storage (numpy views, zero-copy, valid while the cache lives):
      blocks         [num_blocks, kv_dim, num_layers, page_size, num_heads, head_size]
                     float32 | uint16 (bfloat16 bits) | float16 | uint8 (float8_e4m3fn bits)
      scales         float32 [num_blocks, kv_dim, num_layers, page_size, num_heads,
                     ceil(head_size / scale_granularity)], or None without scales
      cache_lengths  uint32 [batch_size]                     (read-only; set_cache_length)
      lookup_table   uint32 [batch_size, max_pages_per_seq]  (read-only; reserve)
    Position p of sequence b lives in page lookup_table[b, p // page_size], slot p % page_size;
    pages come from a pool shuffled with `seed`, unassigned entries hold num_blocks.
    """
    def __init__(self, num_blocks: int, *, dtype: str = 'bfloat16', kv_dim: int = 2, num_layers: int = 1, page_size: int = 16, num_heads: int = 1, head_size: int = 128, scale_granularity: int = 0, batch_size: int = 1, max_pages_per_seq: int = 1, seed: int = 0) -> None:
        """
        Zeroed storage. dtype: 'float32', 'bfloat16', 'float16' or 'float8_e4m3fn'; kv_dim 2 (K and V) or 1 (K only); scale_granularity > 0 adds a float32 scales tensor with one scale per that many elements of head_size.
        """
    def __repr__(self) -> str:
        ...
    def cache_length(self, b: int) -> int:
        """
        Tokens cached for sequence b.
        """
    def pages_used(self, b: int) -> int:
        """
        Pages assigned to sequence b.
        """
    def read(self, b: int, kv: int = 0, layer: int = 0, start: int = 0, stop: int | None = None) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
        """
        float32 [stop - start, num_heads, head_size]: K (kv=0) or V (kv=1) of positions [start, stop) of sequence b, decoded. stop defaults to the reserved positions.
        """
    def read_k(self, b: int, layer: int = 0, start: int = 0, stop: int | None = None) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
        """
        read(b, kv=0, ...): float32 [n, num_heads, head_size].
        """
    def read_raw(self, b: int, kv: int = 0, layer: int = 0, start: int = 0, stop: int | None = None) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
        """
        As read, in the storage dtype (uint8 e4m3 bits, uint16 bf16 bits, float16, float32).
        """
    def read_scales(self, b: int, kv: int = 0, layer: int = 0, start: int = 0, stop: int | None = None) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
        """
        float32 [n, num_heads, scale_cols]: the scales of positions [start, stop).
        """
    def read_v(self, b: int, layer: int = 0, start: int = 0, stop: int | None = None) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
        """
        read(b, kv=1, ...): float32 [n, num_heads, head_size].
        """
    def reserve(self, b: int, num_positions: int) -> None:
        """
        Assigns pages to sequence b so that positions [0, num_positions) are backed.
        """
    def set_cache_length(self, b: int, length: int) -> None:
        """
        Marks `length` tokens of sequence b as cached (they must be reserved).
        """
    def write(self, b: int, values: typing.Any, kv: int = 0, layer: int = 0, start: int = 0) -> None:
        """
        Stores float32 values [n, num_heads, head_size] at positions [start, start + n) of sequence b, converted to the cache dtype (RNE; e4m3 saturating).
        """
    def write_raw(self, b: int, values: typing.Any, kv: int = 0, layer: int = 0, start: int = 0) -> None:
        """
        As write, with values already in the storage dtype (e.g. uint8 e4m3 bits).
        """
    def write_scales(self, b: int, scales: typing.Any, kv: int = 0, layer: int = 0, start: int = 0) -> None:
        """
        Stores float32 scales [n, num_heads, scale_cols] at positions [start, start + n).
        """
    @property
    def batch_size(self) -> int:
        ...
    @property
    def blocks(self) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
        """
        numpy view [num_blocks, kv_dim, num_layers, page_size, num_heads, head_size] of the storage.
        """
    @property
    def cache_lengths(self) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
        """
        Read-only uint32 view [batch_size]: tokens cached per sequence.
        """
    @property
    def dtype(self) -> str:
        ...
    @property
    def free_pages(self) -> int:
        ...
    @property
    def head_size(self) -> int:
        ...
    @property
    def kv_dim(self) -> int:
        ...
    @property
    def lookup_table(self) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
        """
        Read-only uint32 view [batch_size, max_pages_per_seq] of page ids (num_blocks = none).
        """
    @property
    def max_pages_per_seq(self) -> int:
        ...
    @property
    def num_blocks(self) -> int:
        ...
    @property
    def num_heads(self) -> int:
        ...
    @property
    def num_layers(self) -> int:
        ...
    @property
    def page_size(self) -> int:
        ...
    @property
    def scale_granularity(self) -> int:
        ...
    @property
    def scales(self) -> typing.Any:
        """
        float32 numpy view [num_blocks, kv_dim, num_layers, page_size, num_heads, scale_cols], or None.
        """
class PagedCacheView:
    """
    A paged cache over arrays the caller owns (an engine's KV cache).
    
    PagedCacheView(blocks, cache_lengths, lookup_table, scales=None, *, scale_granularity=None)
    
      blocks         [num_blocks, kv_dim, num_layers, page_size, num_heads, head_size], C-contiguous:
                     float32 | bfloat16 (torch.bfloat16, ml_dtypes.bfloat16 or uint16 bits) |
                     float16 | float8_e4m3fn (torch / ml_dtypes, or uint8 bits)
      cache_lengths  uint32 or int32 [B]: tokens already cached per sequence
      lookup_table   uint32 or int32 [B, max_pages_per_seq]: page ids (>= num_blocks: no page)
      scales         float32 [num_blocks, kv_dim, num_layers, page_size, num_heads, scale_cols],
                     C-contiguous, or None; scale_granularity defaults to head_size / scale_cols
    
    numpy arrays, ml_dtypes arrays or torch CPU tensors (any __dlpack__ object), taken without a
    copy: the operations read the caller's page table and lengths when they run and write K/V
    (and scales) into the caller's blocks. The view keeps the arrays alive; replacing a tensor in
    the engine (rather than updating it in place) needs a new view. The operations do not advance
    cache_lengths: the engine does, as with PagedKVCache.set_cache_length.
    """
    def __init__(self, blocks: typing.Any, cache_lengths: typing.Any, lookup_table: typing.Any, scales: typing.Any = None, *, scale_granularity: int | None = None) -> None:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def batch_size(self) -> int:
        ...
    @property
    def blocks(self) -> typing.Any:
        """
        The blocks object as passed.
        """
    @property
    def cache_lengths(self) -> typing.Any:
        """
        The cache_lengths object as passed.
        """
    @property
    def dtype(self) -> str:
        ...
    @property
    def head_size(self) -> int:
        ...
    @property
    def kv_dim(self) -> int:
        ...
    @property
    def lookup_table(self) -> typing.Any:
        """
        The lookup_table object as passed.
        """
    @property
    def max_pages_per_seq(self) -> int:
        ...
    @property
    def num_blocks(self) -> int:
        ...
    @property
    def num_heads(self) -> int:
        ...
    @property
    def num_layers(self) -> int:
        ...
    @property
    def page_size(self) -> int:
        ...
    @property
    def scale_granularity(self) -> int:
        ...
    @property
    def scales(self) -> typing.Any:
        """
        The scales object as passed, or None.
        """
class QkvCheckpoint:
    """
    One attention layer's q/k/v weights loaded from a checkpoint.
    """
    @property
    def format(self) -> str:
        ...
    @property
    def gemm_scales(self) -> tuple[float, float, float]:
        ...
    @property
    def input_global(self) -> float:
        ...
    @property
    def k_rows(self) -> int:
        ...
    @property
    def q_rows(self) -> int:
        ...
    @property
    def v_rows(self) -> int:
        ...
    @property
    def weight_factor(self) -> tuple[float, float, float]:
        ...
    @property
    def weights(self) -> typing.Any:
        ...
class PreparedExperts:
    """
    A layer's experts packed once for fused_experts.
    """
    @property
    def hidden(self) -> int:
        ...
    @property
    def intermediate(self) -> int:
        ...
    @property
    def num_experts(self) -> int:
        ...
class PreparedQkvWeights:
    """
    QKV weights repacked once for the CPU kernels (prepare_qkv_weights); pass as `weight` to the fused projection with weight_scale=None.
    """
    @property
    def format(self) -> str:
        ...
    @property
    def k(self) -> int:
        ...
    @property
    def n(self) -> int:
        ...
def build_info() -> dict[str, typing.Any]:
    """
    How the library was built: {'openmp', 'cuda_compiled', 'cuda_architectures', 'compiler'}.
    """
def decode_bf16(bits: typing.Any) -> typing.Any:
    """
    uint16 [...] bfloat16 bits -> float32 [...] (exact).
    """
def decode_e2m1(codes: typing.Any) -> typing.Any:
    """
    uint8 [...] e2m1 codes (low 4 bits) -> float32 [...].
    """
def decode_e4m3(bits: typing.Any) -> typing.Any:
    """
    uint8 [...] float8_e4m3fn bits -> float32 [...] (exact).
    """
def decode_e8m0(bits: typing.Any) -> typing.Any:
    """
    uint8 [...] float8_e8m0fnu bits -> float32 [...] = 2^(bits - 127).
    """
def encode_bf16(x: typing.Any) -> typing.Any:
    """
    float32 [...] -> uint16 [...] bfloat16 bits (round to nearest even).
    """
def encode_e2m1(x: typing.Any) -> typing.Any:
    """
    float32 [...] -> uint8 [...] one e2m1 code (0..15) per value, unpacked (RNE, saturating to ±6).
    """
def encode_e4m3(x: typing.Any) -> typing.Any:
    """
    float32 [...] -> uint8 [...] float8_e4m3fn bits (round to nearest even, saturating to ±448, NaN -> 0x7F).
    """
def encode_e8m0(x: typing.Any) -> typing.Any:
    """
    float32 [...] -> uint8 [...] float8_e8m0fnu bits (|x| rounded up to a power of two).
    """
def fused_qk_rope_ragged(q_proj: typing.Any, input_row_offsets: typing.Any, kv_cache: typing.Any, freqs_cis: typing.Any, layer_idx: int = 0, *, position_ids: typing.Any = None, rope_layout: str = 'interleaved', rope_placement: str = 'trailing', num_threads: int = 0) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
    """MAX's fused_qk_rope_ragged: q_proj with its rope part rotated; K's rope part rotated in the cache."""
def indexer_k_store_front_end(k: typing.Any, input_row_offsets: typing.Any, cache: typing.Any, layer_idx: int = 0, scale_mode: str = 'power_of_two', *, freqs_cis: typing.Any = None, position_ids: typing.Any = None, rope_layout: str = 'half_split', rope_placement: str = 'leading', hadamard: bool = True, rounding: str = 'bf16', block_table: typing.Any = None, cache_lengths: typing.Any = None, page_size: typing.Optional[int] = None, num_threads: int = 0) -> None:
    """indexer_k_store after DeepSeek-V3.2's front end (RoPE, Walsh-Hadamard, bf16 steps), into a PagedKVCache or, with block_table and cache_lengths, an engine-layout K cache."""
def indexer_q_prepare_front_end(q: typing.Any, weights: typing.Any, scale_mode: str = 'power_of_two', *, freqs_cis: typing.Any = None, position_ids: typing.Any = None, rope_layout: str = 'half_split', rope_placement: str = 'leading', hadamard: bool = True, rounding: str = 'bf16', num_threads: int = 0) -> tuple[typing.Any, typing.Any]:
    """indexer_q_prepare after the front end; returns (q_fp8, q_s)."""
def make_freqs_cis(max_seq_len: int, rope_dim: int, theta: float = 10000.0) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
    """float32 [max_seq_len, rope_dim]: (cos, sin) of p * theta^(-2i / rope_dim) at columns 2i, 2i + 1."""
def generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(hidden_state: typing.Any, input_row_offsets: typing.Any, weight: typing.Any, input_scale: typing.Any, weight_scale: typing.Any, kv_cache: typing.Any, tensor_sf: float | tuple[float, float, float] = 1.0, layer_idx: int = 0, format: str | None = None, *, q_dim: int | None = None, out: typing.Any = None, num_threads: int = 0) -> typing.Any:
    """
    Fused block-scaled QKV projection into the paged cache (contract §4).
    
    hidden_state: uint8 [M, K/2] packed e2m1 or float4_e2m1fn_x2 (uint8 [M, K] or float8_e4m3fn
    for 'mxfp8');
    input_row_offsets: integers [B + 1] with offs[B] == M;
    weight: uint8 [N, K/2] (or [N, K]); row n holds output column n; or PreparedQkvWeights
    (then weight_scale is None and format defaults to the prepared one);
    input_scale: uint8 (or float8_e4m3fn / float8_e8m0fnu) swizzled [ceil(M/128), ceil(K/SFV/4), 32, 4, 4];
    weight_scale: the same for N rows [ceil(N/128), ceil(K/SFV/4), 32, 4, 4];
    kv_cache: PagedKVCache or PagedCacheView (kv_dim 2: N = q_dim + 2*H*D; kv_dim 1:
    N = q_dim + H*D), no scales;
    tensor_sf: the GEMM factor 1 / (g_a * g_w), or a (q, k, v) tuple of per-section factors.
    format: 'nvfp4' (default), 'mxfp4' or 'mxfp8'.
    Returns uint16 [M, q_dim] bfloat16 bits of the Q columns (decode_bf16 gives float32; a
    torch.bfloat16 tensor for torch inputs), or fills `out` (uint16 or bfloat16, writable); the
    K/V columns of row offs[b] + i go to position cache_length(b) + i.
    """
def indexer_k_store(k: typing.Any, input_row_offsets: typing.Any, cache: typing.Any, layer_idx: int = 0, scale_mode: str = 'power_of_two', *, num_threads: int = 0) -> None:
    """
    Quantises new indexer keys per token into the cache (contract §5).
    
    k: float32 or bfloat16 (or uint16 bits) [T, D]; input_row_offsets: integers [B + 1].
    cache: PagedKVCache or PagedCacheView with dtype float8_e4m3fn, num_heads 1, head_size D and
    scales (scale_granularity >= D). Row offs[b] + i goes to position cache_length(b) + i: the
    fp8 bits into the cache's blocks, the float32 scale into its scales.
    """
def indexer_k_store_engine(k: typing.Any, input_row_offsets: typing.Any, kv_cache: typing.Any, block_table: typing.Any, cache_lengths: typing.Any, *, scale_mode: str = 'power_of_two', page_size: typing.Optional[int] = None, num_threads: int = 0, k_format: str = 'fp8', k_global_scale: float = 1.0) -> None:
    """
    The indexer K store into one layer's K cache in the engines' layout, in place.

    kv_cache: uint8, each page = page_size e4m3 key rows of D bytes, then page_size float32 scales
    (vLLM's indexer_k_quant_and_cache, SGLang's NSA index-K buffer, DeepGEMM's
    fp8_paged_mqa_logits): [num_blocks, page_size * (D + 4)] (give page_size),
    [num_blocks, page_size, D + 4] or [num_blocks, page_size, 1, D + 4]; pages may be padded.
    k_format='mxfp4': DeepSeek-V4's MXFP4 cache instead, each page = page_size rows of D/2 e2m1
    bytes, then page_size rows of D/32 ue8m0 bytes ([num_blocks, page_size, D/2 + D/32], ...;
    scale_mode must be 'power_of_two'); written with vLLM's rounding, bit for bit.
    k_format='nvfp4': D/2 e2m1 bytes, then D/16 e4m3 bytes per token ([..., D/2 + D/16]), with the
    per-tensor k_global_scale g (sf = e4m3(g * amax / 6), value = code * sf / g).
    block_table: int32 (negative = no page) or uint32 [B, max_pages_per_seq]; cache_lengths [B].
    k: float32 or uint16 (bfloat16 bits) [T, D]. Bit-identical to indexer_k_store on a PagedKVCache.
    """

def indexer_q_prepare(q: typing.Any, weights: typing.Any, scale_mode: str = 'power_of_two', *, num_threads: int = 0) -> tuple[typing.Any, typing.Any]:
    """
    Quantises indexer queries per (token, head) (contract §5).
    
    q: float32 [T, H, D]; weights: float32 [T, H].
    scale_mode: 'power_of_two' (ue8m0 scales, DeepSeek-V3.2's default) or 'float' (amax / 448).
    Returns (q_fp8 uint8 [T, H, D] e4m3 bits, q_s float32 [T, H] = w * H^-0.5 * D^-0.5 * scale).
    """
def isa_level() -> str:
    """
    The CPU code path in use ('scalar', 'avx2' or 'avx512').
    """
def linear_to_swizzled_scales(linear: typing.Any) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
    """
    uint8 [R, Kb] linear block scales -> uint8 [ceil(R/128), ceil(Kb/4), 32, 4, 4] swizzled (row r, column kb at [r/128, kb/4, r%32, (r%128)/32, kb%4]; padding zero).
    """
def max_supported_isa() -> str:
    """
    The best CPU code path this machine supports: 'scalar', 'avx2' or 'avx512'.
    """
def mla_indexer_ragged_float8_paged(q: typing.Any, q_s: typing.Any, input_row_offsets: typing.Any, k_cache: typing.Any, top_k: int, layer_idx: int = 0, mask: str = 'causal', *, out: typing.Any = None, num_threads: int = 0, scores_budget_bytes: int = 0, index_output: str = 'positions') -> typing.Any:
    """
    DeepSeek-V3.2 lightning indexer (contract §3): the top_k key positions per new token.
    
    q: float8_e4m3fn [T, H, D] (or uint8 bits); q_s: float32 [T, H]; input_row_offsets: integers
    [B + 1]; k_cache: e4m3 PagedKVCache or PagedCacheView, 1 head of D, one scale per token;
    mask: 'causal' or 'null'.
    Returns int32 [T, top_k] (numpy, or torch for torch inputs; or fills `out`, any writable
    int32 array or tensor): positions by score descending, ties by smaller position, then -1.
    scores_budget_bytes 0 = the default 512 MiB workspace bound.
    index_output: 'positions' or 'global_slots' (page id * page_size + slot of each selected key,
    FlashMLA's sparse-attention indices; the -1 tail is kept).
    """
def mla_indexer_ragged_float8_paged_engine(q: typing.Any, q_s: typing.Any, input_row_offsets: typing.Any, kv_cache: typing.Any, block_table: typing.Any, cache_lengths: typing.Any, top_k: int, *, mask: str = 'causal', index_output: str = 'positions', page_size: typing.Optional[int] = None, num_threads: int = 0, scores_budget_bytes: int = 0, k_format: str = 'fp8', k_global_scale: float = 1.0) -> typing.Any:
    """
    The lightning indexer over a K cache in the engines' layout, read in place.

    Arguments as indexer_k_store_engine plus q uint8 [T, H, D] (e4m3 bits), q_s float32 [T, H],
    top_k, mask ('causal' or 'null'). index_output: 'positions' (per-sequence positions, as
    mla_indexer_ragged_float8_paged) or 'global_slots' (page id * page_size + slot, FlashMLA's
    sparse-attention indices). Returns int32 [T, top_k], -1 after the min(top_k, visible keys) best.
    """

def pack_e2m1(x: typing.Any) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
    """
    float32 [..., K] (K even) -> uint8 [..., K/2]: packed e2m1, element 2c in the low nibble of byte c.
    """
def load_qkv_checkpoint(path: str, prefix: str, *, num_threads: int = 0) -> QkvCheckpoint:
    """
    Loads PREFIX.q_proj/.k_proj/.v_proj from a checkpoint: a .safetensors file, a sharded
    checkpoint's index or a directory (docs/checkpoints.md).
    """
def load_fused_qkv_checkpoint(path: str, projection: str, sections: tuple[int, int, int], *, num_threads: int = 0) -> QkvCheckpoint:
    """
    Loads one fused projection whose rows are [q; k; v] of sections (q_rows, k_rows, v_rows).
    """
def list_quantized_projections(path: str) -> list[typing.Any]:
    """
    The quantised projections of a checkpoint (file, index or directory).
    """
def dequantize_qkv_checkpoint(path: str, prefix: str) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
    """
    The dequantised float32 weight [q_rows + k_rows + v_rows, K] of the same projections.
    """
def dequantize_fused_qkv_checkpoint(path: str, projection: str, sections: tuple[int, int, int]) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
    """
    The dequantised float32 weight [N, K] of a fused projection.
    """
def linear(x: typing.Any, weight: PreparedQkvWeights, *, x_scale: typing.Any = None, alpha: float = 1.0, column_alpha: typing.Any = None, bias: typing.Any = None, out: typing.Any = None, out_dtype: str = 'bfloat16', num_threads: int = 0) -> typing.Any:
    """
    y = x . W^T (+ bias) on prepared weights (docs/linear.md).
    """
def fused_experts(x: typing.Any, topk_ids: typing.Any, topk_weights: typing.Any, experts: PreparedExperts, *, expert_offset: int = 0, quantize_activations: bool = False, gate_up: str = 'halves', activation: str = 'silu', swiglu_alpha: float = 1.7020000219345093, swiglu_limit: float = 7.0, w13_bias: typing.Any = None, w2_bias: typing.Any = None, out: typing.Any = None, out_dtype: str = 'bfloat16', num_threads: int = 0) -> typing.Any:
    """
    The mixture-of-experts layer (docs/moe.md).
    """
def sparse_mla_fp8_row_bytes(d_v: int = 512, d_rope: int = 64) -> int:
    """
    Bytes of one fp8 latent-cache row (FlashMLA's 'fp8_ds_mla').
    """
def sparse_mla_attention(q: typing.Any, indices: typing.Any, sm_scale: float, *, kv: typing.Any = None, kv_fp8: typing.Any = None, d_v: int = 512, topk_length: typing.Any = None, out: typing.Any = None, lse: typing.Any = None, num_threads: int = 0) -> tuple[typing.Any, typing.Any]:
    """
    Sparse MLA attention over the indexer's top-k latent-cache slots (docs/sparse_mla.md).
    """
def prepare_experts(w13: typing.Any, w13_scale: typing.Any, w2: typing.Any, w2_scale: typing.Any, *, format: str = 'nvfp4', w13_alpha: list[float] | None = None, w2_alpha: list[float] | None = None, x_global: list[float] | None = None, h_global: list[float] | None = None, w3_alpha: list[float] | None = None, num_threads: int = 0) -> PreparedExperts:
    """
    Packs a layer's experts once for fused_experts (docs/moe.md).
    """
def load_linear_checkpoint(path: str, projections: str | list[str], *, num_threads: int = 0) -> LinearCheckpoint:
    """
    Loads one projection by name or several stacked row-wise.
    """
def load_experts_checkpoint(path: str, prefix: str, *, layout: str = 'auto', num_threads: int = 0) -> ExpertsCheckpoint:
    """
    Loads one layer's MoE experts (docs/checkpoints.md).
    """
def list_quantized_experts(path: str) -> list[typing.Any]:
    """
    The MoE expert groups of a checkpoint (file, index or directory).
    """
def fused_qkv_weight_only(hidden_state: typing.Any, input_row_offsets: typing.Any, weight: PreparedQkvWeights, kv_cache: typing.Any, section_sf: float | tuple[float, float, float] = 1.0, layer_idx: int = 0, *, out: typing.Any = None, num_threads: int = 0) -> typing.Any:
    """
    The fused QKV with bf16 activations (weight-only mode) on a PreparedQkvWeights.
    """
def prepare_weights(weight: typing.Any, *, scale: typing.Any = None, scale_rows: typing.Any = None, format: str = 'nvfp4', num_threads: int = 0) -> PreparedQkvWeights:
    """
    Packs a weight once for every GEMM entry point (linear, the fused QKV).
    """
def prepare_qkv_weights(weight: typing.Any, weight_scale: typing.Any, format: str = 'nvfp4', *, num_threads: int = 0) -> PreparedQkvWeights:
    """
    Repacks a QKV weight once for repeated projections.
    
    weight: uint8 [N, K/2] packed e2m1 (uint8 [N, K] e4m3 for 'mxfp8');
    weight_scale: uint8 swizzled [ceil(N/128), ceil(K/SFV/4), 32, 4, 4].
    Returns PreparedQkvWeights; the fused projection on it gives bit-identical results.
    """
def quantize_dynamic_block_scaled(x: typing.Any, format: str = 'nvfp4', global_scale: float = 1.0, *, num_threads: int = 0) -> tuple[typing.Any, typing.Any]:
    """
    Block-scaled quantisation of activations (contract §5).
    
    x: float32 or bfloat16 (or uint16 bits) [M, K]; K % SFV == 0 (SFV 16 for 'nvfp4',
    32 for 'mxfp4' and 'mxfp8').
    global_scale: NVFP4's global multiplier g = 448*6 / amax(x) (ignored by MX formats). The GEMM
    later takes tensor_sf = 1 / (g_a * g_w), the inverse.
    Returns (data, scales):
      data   uint8 [M, K/2] packed e2m1 (nvfp4, mxfp4) or uint8 [M, K] e4m3 (mxfp8)
      scales uint8 [ceil(M/128), ceil(K/SFV/4), 32, 4, 4] swizzled (e4m3 for nvfp4, else e8m0)
    numpy arrays; for a torch x, torch tensors typed float4_e2m1fn_x2 / float8_e4m3fn (data) and
    float8_e4m3fn / float8_e8m0fnu (scales).
    """
def set_isa_level(level: str) -> None:
    """
    Forces a CPU code path: 'scalar', 'avx2' or 'avx512' (ValueError if the CPU lacks it).
    """
def swizzled_scale_shape(rows: int, kb_count: int) -> tuple[int, int, int, int, int]:
    """
    Shape of the 5-D swizzled scale tensor: (ceil(R/128), ceil(Kb/4), 32, 4, 4).
    """
def swizzled_to_linear_scales(swizzled: typing.Any, rows: int, kb_count: int) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
    """
    uint8 [ceil(R/128), ceil(Kb/4), 32, 4, 4] swizzled -> uint8 [R, Kb] linear block scales.
    """
def unpack_e2m1(packed: typing.Any) -> numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]:
    """
    uint8 [..., K/2] packed e2m1 -> float32 [..., K].
    """
def version() -> str:
    """
    The library version, e.g. '0.1.0'.
    """
__version__: str = '0.1.0'
