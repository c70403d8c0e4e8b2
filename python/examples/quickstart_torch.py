import torch
import quantkv

torch.manual_seed(0)

# The engine owns its caches: blocks [num_blocks, kv_dim, layers, page_size, heads, head_size],
# an int32 block table (shuffled pages) and int32 cache lengths. quantkv writes into them.
num_blocks, page = 8, 16
kv_blocks = torch.zeros(num_blocks, 2, 1, page, 8, 64, dtype=torch.bfloat16)
block_table = torch.randperm(num_blocks, dtype=torch.int32)[:8].reshape(2, 4)
cache_lengths = torch.zeros(2, dtype=torch.int32)
cache = quantkv.PagedCacheView(kv_blocks, cache_lengths, block_table)
offsets = torch.tensor([0, 5, 16], dtype=torch.int32)  # ragged batch: 5 and 11 new tokens

# Quantise activations and weights to NVFP4 (torch.float4_e2m1fn_x2 data, float8 scales).
hidden, q_dim = 256, 512
x = torch.randn(16, hidden)                                          # [M, K]
w = torch.randn(q_dim + 2 * 8 * 64, hidden) * 0.05                   # [N, K]
g_x = 448 * 6 / float(x.abs().max())
g_w = 448 * 6 / float(w.abs().max())
x_fp4, x_scales = quantkv.quantize_dynamic_block_scaled(x, "nvfp4", g_x)
w_fp4, w_scales = quantkv.quantize_dynamic_block_scaled(w, "nvfp4", g_w)
weights = quantkv.prepare_qkv_weights(w_fp4, w_scales)  # repacked once, reused every step
q = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    x_fp4, offsets, weights, x_scales, None, cache, tensor_sf=1 / (g_x * g_w))
print("q", q.dtype, tuple(q.shape))                                  # torch.bfloat16 [16, 512]
exact = x @ w[:q_dim].T
print("relative error of q:", float((q.float() - exact).abs().max() / exact.abs().max()))
k0 = kv_blocks[block_table[0, 0], 0, 0, :5]                         # K of sequence 0, in place
print("K of sequence 0 written into the engine's blocks:", bool(k0.abs().sum() > 0))

# The lightning indexer over the engine's fp8 K cache with one float32 scale per token.
k_blocks = torch.zeros(num_blocks, 1, 1, page, 1, 128, dtype=torch.float8_e4m3fn)
k_scales = torch.zeros(num_blocks, 1, 1, page, 1, 1)
k_cache = quantkv.PagedCacheView(k_blocks, cache_lengths, block_table, k_scales)
quantkv.indexer_k_store(torch.randn(16, 128), offsets, k_cache)
q_fp8, q_s = quantkv.indexer_q_prepare(torch.randn(16, 4, 128), torch.randn(16, 4))
top = quantkv.mla_indexer_ragged_float8_paged(q_fp8, q_s, offsets, k_cache, top_k=4, mask="causal")
print("top-4 keys of the first tokens:\n", top[:3])   # -1 where fewer keys are visible
cache_lengths += torch.tensor([5, 11], dtype=torch.int32)  # the engine advances its lengths
