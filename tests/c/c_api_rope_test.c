/* The C API of fused_qk_rope_ragged and of the indexer front end, from C11: a rotation checked
 * against cos/sin computed here, the Hadamard front end on a one-hot row, named errors. */
#include <math.h>
#include <stdint.h>

#include "c_api_test_util.h"

enum { D = 8, ROPE = 4, MAX_SEQ = 8, T = 2 };

static void test_fused_qk_rope_ragged(void) {
  quantkv_cache_config_t cfg = quantkv_cache_config_default();
  cfg.dtype = QUANTKV_DTYPE_F32;
  cfg.num_blocks = 2;
  cfg.page_size = 4;
  cfg.head_size = D;
  cfg.max_pages_per_seq = 2;
  quantkv_cache_t* cache = NULL;
  CHECK_OK(quantkv_cache_create(&cfg, 3, &cache));
  CHECK_OK(quantkv_cache_reserve(cache, 0, 3 + T));
  CHECK_OK(quantkv_cache_set_cache_length(cache, 0, 3));
  quantkv_paged_kv_t view;
  CHECK_OK(quantkv_cache_view(cache, &view));
  const int64_t n = view.num_blocks * view.kv_dim * view.num_layers * view.page_size * view.num_heads * view.head_size;
  for (int64_t i = 0; i < n; ++i) ((float*)view.blocks)[i] = 1.0f;

  float freqs[MAX_SEQ][ROPE];
  for (int p = 0; p < MAX_SEQ; ++p) {
    for (int i = 0; i < ROPE / 2; ++i) {
      freqs[p][2 * i] = cosf(0.3f * (float)(p * (i + 1)));
      freqs[p][2 * i + 1] = sinf(0.3f * (float)(p * (i + 1)));
    }
  }
  float q[T][1][D], out[T][1][D];
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < D; ++d) q[t][0][d] = (float)(d + 1);
  const uint32_t offs[2] = {0, T};
  const int64_t q_shape[3] = {T, 1, D}, offs_shape[1] = {2}, freqs_shape[2] = {MAX_SEQ, ROPE};
  quantkv_tensor_t qt = quantkv_tensor_contiguous(q, QUANTKV_DTYPE_F32, 3, q_shape);
  quantkv_tensor_t ot = quantkv_tensor_contiguous(out, QUANTKV_DTYPE_F32, 3, q_shape);
  quantkv_tensor_t offs_t = quantkv_tensor_contiguous((void*)offs, QUANTKV_DTYPE_U32, 1, offs_shape);
  quantkv_tensor_t ft = quantkv_tensor_contiguous(freqs, QUANTKV_DTYPE_F32, 2, freqs_shape);
  quantkv_rope_options_t opt = {&ft, NULL, QUANTKV_ROPE_HALF_SPLIT, QUANTKV_ROPE_TRAILING};
  CHECK_OK(quantkv_fused_qk_rope_ragged(&qt, &offs_t, &view, &opt, 0, &ot, NULL));
  /* Token 1 sits at position 4; its pair 0 is (q[4], q[6]) = (5, 7), half-split over the last 4. */
  const float c = freqs[4][0], s = freqs[4][1];
  CHECK(fabsf(out[1][0][4] - (5.0f * c - 7.0f * s)) < 1e-5f);
  CHECK(fabsf(out[1][0][6] - (5.0f * s + 7.0f * c)) < 1e-5f);
  CHECK(out[1][0][0] == 1.0f && out[1][0][3] == 4.0f); /* the nope part is copied */
  CHECK_OK(quantkv_cache_set_cache_length(cache, 0, 3 + T)); /* the engine advances the length */
  float k_rot = 0;
  CHECK_OK(quantkv_cache_get(cache, 0, 4, 0, 0, 0, 4, &k_rot));
  CHECK(fabsf(k_rot - (c - s)) < 1e-5f); /* K of ones: (1, 1) -> (c - s, s + c) */
  float v = 0;
  CHECK_OK(quantkv_cache_get(cache, 0, 4, 1, 0, 0, 4, &v)); /* V untouched */
  CHECK(v == 1.0f);

  const int64_t odd_shape[2] = {MAX_SEQ, 3};
  quantkv_tensor_t odd = quantkv_tensor_contiguous(freqs, QUANTKV_DTYPE_F32, 2, odd_shape);
  quantkv_rope_options_t bad = {&odd, NULL, QUANTKV_ROPE_HALF_SPLIT, QUANTKV_ROPE_TRAILING};
  CHECK_FAILS(quantkv_fused_qk_rope_ragged(&qt, &offs_t, &view, &bad, 0, &ot, NULL), QUANTKV_INVALID_ARGUMENT,
              "options.freqs_cis: expected rope_dim");
  bad.freqs_cis = &ft;
  bad.layout = 7;
  CHECK_FAILS(quantkv_fused_qk_rope_ragged(&qt, &offs_t, &view, &bad, 0, &ot, NULL), QUANTKV_INVALID_ARGUMENT,
              "options.layout");
  quantkv_cache_destroy(cache);
}

static void test_front_end(void) {
  quantkv_cache_config_t cfg = quantkv_cache_config_default();
  cfg.dtype = QUANTKV_DTYPE_E4M3;
  cfg.num_blocks = 2;
  cfg.kv_dim = 1;
  cfg.page_size = 4;
  cfg.head_size = 128;
  cfg.scale_granularity = 128;
  quantkv_cache_t* cache = NULL;
  CHECK_OK(quantkv_cache_create(&cfg, 5, &cache));
  CHECK_OK(quantkv_cache_reserve(cache, 0, 1));
  quantkv_paged_kv_t view;
  CHECK_OK(quantkv_cache_view(cache, &view));
  float k[128] = {0};
  k[0] = 2.0f; /* one-hot: the Hadamard rotation spreads it to 2 / sqrt(128) everywhere */
  const uint32_t offs[2] = {0, 1};
  const int64_t k_shape[2] = {1, 128}, offs_shape[1] = {2};
  quantkv_tensor_t kt = quantkv_tensor_contiguous(k, QUANTKV_DTYPE_F32, 2, k_shape);
  quantkv_tensor_t offs_t = quantkv_tensor_contiguous((void*)offs, QUANTKV_DTYPE_U32, 1, offs_shape);
  quantkv_indexer_front_end_t fe;
  memset(&fe, 0, sizeof fe);
  fe.hadamard = QUANTKV_HADAMARD_WALSH;
  CHECK_OK(quantkv_indexer_k_store_front_end(&kt, &offs_t, &view, 0, QUANTKV_SCALE_FLOAT, &fe, NULL));
  CHECK_OK(quantkv_cache_set_cache_length(cache, 0, 1));
  for (int d = 0; d < 128; d += 31) {
    float x = 0, s = 0;
    CHECK_OK(quantkv_cache_get(cache, 0, 0, 0, 0, 0, d, &x));
    CHECK_OK(quantkv_cache_get_scale(cache, 0, 0, 0, 0, 0, d, &s));
    CHECK(fabsf(x * s - 2.0f / sqrtf(128.0f)) < 0.01f);
  }
  fe.hadamard = 5;
  CHECK_FAILS(quantkv_indexer_k_store_front_end(&kt, &offs_t, &view, 0, QUANTKV_SCALE_FLOAT, &fe, NULL),
              QUANTKV_INVALID_ARGUMENT, "front_end.hadamard");
  quantkv_cache_destroy(cache);
}

int main(void) {
  test_fused_qk_rope_ragged();
  test_front_end();
  return finish_test("c_api_rope_test");
}
