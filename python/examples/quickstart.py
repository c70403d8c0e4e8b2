import numpy as np
import quantkv

rng = np.random.default_rng(0)

# A bf16 KV cache: 2 sequences, 8 KV heads of 64, pages of 16 tokens.
cache = quantkv.PagedKVCache(num_blocks=8, dtype="bfloat16", num_heads=8, head_size=64,
                             page_size=16, batch_size=2, max_pages_per_seq=4)
seq_lens = [5, 11]
for b, n in enumerate(seq_lens):
    cache.reserve(b, n)                      # pages for positions [0, n)
offsets = np.array([0, 5, 16], dtype=np.uint32)  # ragged batch: rows of each sequence

# Quantise activations and weights to NVFP4, run the fused QKV projection.
hidden, q_dim = 256, 512
x = rng.normal(size=(16, hidden)).astype(np.float32)              # [M, K]
w = rng.normal(size=(q_dim + 2 * 8 * 64, hidden)).astype(np.float32) * 0.05  # [N, K]
g_x = 448 * 6 / np.abs(x).max()
g_w = 448 * 6 / np.abs(w).max()
x_fp4, x_scales = quantkv.quantize_dynamic_block_scaled(x, "nvfp4", g_x)
w_fp4, w_scales = quantkv.quantize_dynamic_block_scaled(w, "nvfp4", g_w)
weights = quantkv.prepare_qkv_weights(w_fp4, w_scales)  # repacked once, reused every step
q_bf16 = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    x_fp4, offsets, weights, x_scales, None, cache, tensor_sf=1 / (g_x * g_w))
q = quantkv.decode_bf16(q_bf16)                                     # [16, 512] float32
k0 = cache.read_k(0, stop=5)                                        # [5, 8, 64] float32
print("q", q.shape, "K of sequence 0", k0.shape)
exact = x @ w[:q_dim].T
print("relative error of q:", float(np.abs(q - exact).max() / np.abs(exact).max()))

# The lightning indexer over an fp8 K cache with one scale per token.
k_cache = quantkv.PagedKVCache(num_blocks=8, dtype="float8_e4m3fn", kv_dim=1, num_heads=1,
                               head_size=128, scale_granularity=128, page_size=16,
                               batch_size=2, max_pages_per_seq=4)
for b, n in enumerate(seq_lens):
    k_cache.reserve(b, n)
quantkv.indexer_k_store(rng.normal(size=(16, 128)).astype(np.float32), offsets, k_cache)
q_fp8, q_s = quantkv.indexer_q_prepare(rng.normal(size=(16, 4, 128)).astype(np.float32),
                                       rng.normal(size=(16, 4)).astype(np.float32))
top = quantkv.mla_indexer_ragged_float8_paged(q_fp8, q_s, offsets, k_cache, top_k=4,
                                              mask="causal")
print("top-4 keys of the first tokens:\n", top[:3])   # -1 where fewer keys are visible
