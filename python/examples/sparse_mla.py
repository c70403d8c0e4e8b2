import numpy as np
import quantkv

rng = np.random.default_rng(0)
T, PAGE, TOP_K, H, D_V, D_ROPE = 40, 16, 8, 16, 512, 64

# One sequence of 40 tokens in shuffled pages. The block table is shared by the indexer's fp8 K
# cache (the engines' layout: per page 16 key rows of 128 bytes, then 16 float32 scales) and
# the latent cache (576 bf16 values per token, here as uint16 bits).
table = rng.permutation(8)[:3].astype(np.int32).reshape(1, 3)
k_cache = np.zeros((8, PAGE, 128 + 4), np.uint8)
latent = np.zeros((8, PAGE, D_V + D_ROPE), np.uint16)
offsets, cache_lengths = [0, T], np.zeros(1, np.int32)
quantkv.indexer_k_store_engine(rng.standard_normal((T, 128)).astype(np.float32), offsets,
                               k_cache, table, cache_lengths)
slot_of = table[0, np.arange(T) // PAGE] * PAGE + np.arange(T) % PAGE
latent.reshape(-1, D_V + D_ROPE)[slot_of] = quantkv.encode_bf16(
    rng.standard_normal((T, D_V + D_ROPE)).astype(np.float32))

# The lightning indexer picks each token's TOP_K keys as global slots (page * 16 + slot) ...
q8, q_s = quantkv.indexer_q_prepare(rng.standard_normal((T, 4, 128)).astype(np.float32),
                                    rng.standard_normal((T, 4)).astype(np.float32))
slots = quantkv.mla_indexer_ragged_float8_paged_engine(q8, q_s, offsets, k_cache, table,
                                                       cache_lengths, TOP_K,
                                                       index_output="global_slots")
# ... and sparse MLA attends over those latent rows (absorbed queries, bf16 bits).
q = quantkv.encode_bf16(rng.standard_normal((T, H, D_V + D_ROPE)).astype(np.float32))
sm_scale = (128 + 64) ** -0.5
out, lse = quantkv.sparse_mla_attention(q, slots, sm_scale, kv=latent.reshape(-1, D_V + D_ROPE))
print("out", out.shape, out.dtype, "lse", lse.shape, "slots of the last token", slots[-1])

# The last token by hand: softmax over its selected rows.
rows = quantkv.decode_bf16(latent.reshape(-1, D_V + D_ROPE)[slots[-1][slots[-1] >= 0]])
scores = sm_scale * quantkv.decode_bf16(q[-1]) @ rows.T
p = np.exp(scores - scores.max(axis=1, keepdims=True))
want = (p / p.sum(axis=1, keepdims=True)) @ rows[:, :D_V]
err = np.abs(quantkv.decode_bf16(out[-1]) - want).max() / np.abs(want).max()
print(f"relative error of out: {err:.5f}")
