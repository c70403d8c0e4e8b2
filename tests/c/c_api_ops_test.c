/* C11 test of the C API's operations on small cases whose results are known exactly:
 * the quantiser, the indexer K store / Q prepare, the indexer (a hand-computed top-k) and the
 * fused QKV projection (both tensor_sf forms), plus their error paths. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "c_api_test_util.h"
#include "quantkv/quantkv.h"

static void test_quantize(void) {
  /* NVFP4, g = 1: block (0,0) = [6, -3, 0.5, 0...] has amax 6 -> sf 1.0; block (1,0) all 3 ->
   * sf 0.5 and values 6; blocks (0,1), (1,1) are zero -> sf 0 and codes 0. */
  float x[2][32];
  memset(x, 0, sizeof x);
  x[0][0] = 6.0f;
  x[0][1] = -3.0f;
  x[0][2] = 0.5f;
  for (int k = 0; k < 16; ++k) x[1][k] = 3.0f;
  uint8_t data[2][16], scales[512];
  memset(data, 0xAB, sizeof data);
  memset(scales, 0xAB, sizeof scales);
  const int64_t xs[2] = {2, 32}, ds[2] = {2, 16}, ss[5] = {1, 1, 32, 4, 4};
  quantkv_tensor_t xt = quantkv_tensor_contiguous(x, QUANTKV_DTYPE_F32, 2, xs);
  quantkv_tensor_t dt = quantkv_tensor_contiguous(data, QUANTKV_DTYPE_U8, 2, ds);
  quantkv_tensor_t st = quantkv_tensor_contiguous(scales, QUANTKV_DTYPE_U8, 5, ss);
  CHECK_OK(quantkv_quantize_dynamic_block_scaled(&xt, 1.0f, QUANTKV_NVFP4, &dt, &st, NULL));
  CHECK(data[0][0] == 0xD7 && data[0][1] == 0x01); /* codes 7, 0xD, 1, 0: low nibble first */
  CHECK(data[1][0] == 0x77 && data[1][7] == 0x77 && data[1][8] == 0x00);
  /* Row r, column kb at (r%32)*16 + kb%4 for r < 32, kb < 4. */
  CHECK(scales[0] == 0x38 && scales[1] == 0x00 && scales[16] == 0x30 && scales[17] == 0x00);
  CHECK(scales[2] == 0x00 && scales[511] == 0x00); /* padding written as zeros */

  const int64_t bad_ds[2] = {2, 32};
  quantkv_tensor_t bad = quantkv_tensor_contiguous(data, QUANTKV_DTYPE_U8, 2, bad_ds);
  CHECK(quantkv_quantize_dynamic_block_scaled(&xt, 1.0f, QUANTKV_NVFP4, &bad, &st, NULL) ==
        QUANTKV_INVALID_ARGUMENT);
  CHECK(strstr(quantkv_last_error_message(), "data") != NULL);
  CHECK_FAILS(quantkv_quantize_dynamic_block_scaled(&xt, 1.0f, (quantkv_block_format_t)9, &dt,
                                                    &st, NULL),
              QUANTKV_INVALID_ARGUMENT, "format: expected 0..2, got 9");
}

/* An e4m3 K cache of 1 sequence: 2 cached tokens + 3 new, D = 32, pages of 4. */
static quantkv_cache_t* make_k_cache(void) {
  quantkv_cache_config_t cfg = quantkv_cache_config_default();
  cfg.dtype = QUANTKV_DTYPE_E4M3;
  cfg.num_blocks = 4;
  cfg.kv_dim = 1;
  cfg.page_size = 4;
  cfg.head_size = 32;
  cfg.scale_granularity = 32;
  cfg.max_pages_per_seq = 2;
  quantkv_cache_t* cache = NULL;
  CHECK_OK(quantkv_cache_create(&cfg, 9, &cache));
  CHECK_OK(quantkv_cache_reserve(cache, 0, 5));
  CHECK_OK(quantkv_cache_set_cache_length(cache, 0, 2));
  return cache;
}

static void test_indexer_companions(void) {
  quantkv_cache_t* cache = make_k_cache();
  quantkv_paged_kv_t view;
  CHECK_OK(quantkv_cache_view(cache, &view));
  float k[3][32];
  for (int t = 0; t < 3; ++t)
    for (int d = 0; d < 32; ++d) k[t][d] = (float)((d * 7 + t * 3) % 11 - 5) * 0.37f;
  const int64_t ks[2] = {3, 32}, os[1] = {2};
  uint32_t offs[2] = {0, 3};
  quantkv_tensor_t kt = quantkv_tensor_contiguous(k, QUANTKV_DTYPE_F32, 2, ks);
  quantkv_tensor_t ot = quantkv_tensor_contiguous(offs, QUANTKV_DTYPE_U32, 1, os);
  CHECK_OK(quantkv_indexer_k_store(&kt, &ot, &view, 0, QUANTKV_SCALE_POWER_OF_TWO, NULL));
  for (int t = 0; t < 3; ++t) {
    float s = 0.0f;
    CHECK_OK(quantkv_cache_get_scale(cache, 0, 2 + t, 0, 0, 0, 0, &s));
    /* amax = 5 * 0.37: s = the power of two at or above amax / 448. */
    CHECK(s == ldexpf(1.0f, -7));
    for (int d = 0; d < 32; ++d) {
      float v = 0.0f;
      CHECK_OK(quantkv_cache_get(cache, 0, 2 + t, 0, 0, 0, d, &v));
      CHECK(v == quantkv_e4m3_to_float(quantkv_float_to_e4m3(k[t][d] / s)));
    }
  }
  float probe = 1.0f;
  CHECK_OK(quantkv_cache_get(cache, 0, 1, 0, 0, 0, 0, &probe));
  CHECK(probe == 0.0f); /* cached positions are not touched */

  /* Q prepare: q_s = w * H^-0.5 * D^-0.5 * s. */
  float q[1][4][32], w[1][4] = {{1.0f, -2.0f, 0.5f, 4.0f}}, q_s[1][4];
  uint8_t q8[1][4][32];
  for (int h = 0; h < 4; ++h)
    for (int d = 0; d < 32; ++d) q[0][h][d] = (float)(d - 16) * (float)(h + 1);
  const int64_t qs3[3] = {1, 4, 32}, qs2[2] = {1, 4};
  quantkv_tensor_t qt = quantkv_tensor_contiguous(q, QUANTKV_DTYPE_F32, 3, qs3);
  quantkv_tensor_t wt = quantkv_tensor_contiguous(w, QUANTKV_DTYPE_F32, 2, qs2);
  quantkv_tensor_t q8t = quantkv_tensor_contiguous(q8, QUANTKV_DTYPE_E4M3, 3, qs3);
  quantkv_tensor_t qst = quantkv_tensor_contiguous(q_s, QUANTKV_DTYPE_F32, 2, qs2);
  CHECK_OK(quantkv_indexer_q_prepare(&qt, &wt, &q8t, &qst, QUANTKV_SCALE_POWER_OF_TWO, NULL));
  for (int h = 0; h < 4; ++h) {
    const float s = quantkv_e8m0_to_float(quantkv_float_to_e8m0(16.0f * (float)(h + 1) / 448.0f));
    const float expected = w[0][h] * 0.5f / sqrtf(32.0f) * s;
    CHECK(fabsf(q_s[0][h] - expected) <= 1e-6f * fabsf(expected));
    CHECK(q8[0][h][0] == quantkv_float_to_e4m3(q[0][h][0] / s));
  }
  CHECK_FAILS(quantkv_indexer_q_prepare(&qt, &wt, &q8t, &qt, QUANTKV_SCALE_FLOAT, NULL),
              QUANTKV_INVALID_ARGUMENT, "q_s: expected rank 2 [T, H], got rank 3");

  /* The one call: the same bytes from fp32 q, and from the same values in bf16 (exact). */
  uint8_t q8_call[1][4][32];
  float q_s_call[1][4];
  uint16_t q16[1][4][32];
  for (int h = 0; h < 4; ++h)
    for (int d = 0; d < 32; ++d) q16[0][h][d] = quantkv_float_to_bf16(q[0][h][d]);
  quantkv_tensor_t q16t = quantkv_tensor_contiguous(q16, QUANTKV_DTYPE_BF16, 3, qs3);
  quantkv_tensor_t q8ct = quantkv_tensor_contiguous(q8_call, QUANTKV_DTYPE_E4M3, 3, qs3);
  quantkv_tensor_t qsct = quantkv_tensor_contiguous(q_s_call, QUANTKV_DTYPE_F32, 2, qs2);
  quantkv_indexer_q_prepare_args_t pa;
  memset(&pa, 0, sizeof pa);
  pa.weights = &wt;
  pa.q_fp8 = &q8ct;
  pa.q_s = &qsct;
  pa.scale_mode = QUANTKV_SCALE_POWER_OF_TWO;
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    pa.q = bf16 ? &q16t : &qt;
    memset(q8_call, 0x55, sizeof q8_call);
    memset(q_s_call, 0x55, sizeof q_s_call);
    CHECK_OK(quantkv_indexer_q_prepare_call(&pa, NULL));
    CHECK(memcmp(q8_call, q8, sizeof q8) == 0 && memcmp(q_s_call, q_s, sizeof q_s) == 0);
  }
  pa.scale_mode = (quantkv_scale_mode_t)2;
  CHECK_FAILS(quantkv_indexer_q_prepare_call(&pa, NULL), QUANTKV_INVALID_ARGUMENT,
              "scale_mode: expected 0..1, got 2");
  CHECK_FAILS(quantkv_indexer_q_prepare_call(NULL, NULL), QUANTKV_INVALID_ARGUMENT,
              "args: pointer is null");
  quantkv_cache_destroy(cache);
}

static void test_indexer(void) {
  /* Key j = (j + 1) in element 0, scale 1. Head 0 has q = 1 there, head 1 has q = -1 (ReLU
   * drops it), weights 1: score(j) = j + 1, so the best keys are the latest visible. */
  quantkv_cache_t* cache = make_k_cache();
  quantkv_paged_kv_t view;
  CHECK_OK(quantkv_cache_view(cache, &view));
  for (int j = 0; j < 5; ++j) {
    const int64_t row = (int64_t)view.lookup_table[j / 4] * 4 + j % 4; /* kv_dim 1, 1 layer */
    memset((uint8_t*)view.blocks + row * 32, 0, 32);
    ((uint8_t*)view.blocks)[row * 32] = quantkv_float_to_e4m3((float)(j + 1));
    view.scales[row] = 1.0f;
  }
  uint8_t q[3][2][32];
  memset(q, 0, sizeof q);
  float q_s[3][2];
  for (int t = 0; t < 3; ++t) {
    q[t][0][0] = quantkv_float_to_e4m3(1.0f);
    q[t][1][0] = quantkv_float_to_e4m3(-1.0f);
    q_s[t][0] = q_s[t][1] = 1.0f;
  }
  int32_t out[3][4];
  uint32_t offs[2] = {0, 3};
  const int64_t qs3[3] = {3, 2, 32}, qs2[2] = {3, 2}, os[2] = {3, 4}, offs_shape[1] = {2};
  quantkv_tensor_t qt = quantkv_tensor_contiguous(q, QUANTKV_DTYPE_U8, 3, qs3);
  quantkv_tensor_t qst = quantkv_tensor_contiguous(q_s, QUANTKV_DTYPE_F32, 2, qs2);
  quantkv_tensor_t outt = quantkv_tensor_contiguous(out, QUANTKV_DTYPE_I32, 2, os);
  quantkv_tensor_t ot = quantkv_tensor_contiguous(offs, QUANTKV_DTYPE_U32, 1, offs_shape);
  quantkv_mask_t mask;
  CHECK_OK(quantkv_parse_mask("causal", &mask));
  CHECK(mask == QUANTKV_MASK_CAUSAL);
  CHECK_OK(quantkv_mla_indexer_ragged_float8_paged(&outt, &qt, &qst, &ot, &view, 0, mask, NULL));
  /* Token i sits at position 2 + i and sees keys 0 .. 2 + i. */
  const int32_t causal[3][4] = {{2, 1, 0, -1}, {3, 2, 1, 0}, {4, 3, 2, 1}};
  CHECK(memcmp(out, causal, sizeof out) == 0);
  quantkv_context_t ctx = {1, 0, NULL};
  CHECK_OK(quantkv_mla_indexer_ragged_float8_paged(&outt, &qt, &qst, &ot, &view, 0,
                                                   QUANTKV_MASK_NULL, &ctx));
  for (int t = 0; t < 3; ++t) CHECK(out[t][0] == 4 && out[t][1] == 3 && out[t][3] == 1);

  /* Error paths: the C layer's checks and the library's validation. */
  quantkv_tensor_t wrong = qst;
  wrong.rank = 3;
  wrong.dtype = QUANTKV_DTYPE_F32;
  CHECK_FAILS(quantkv_mla_indexer_ragged_float8_paged(&outt, &wrong, &qst, &ot, &view, 0, mask, NULL),
              QUANTKV_INVALID_ARGUMENT, "q: expected dtype float8_e4m3fn or uint8, got float32");
  CHECK_FAILS(quantkv_mla_indexer_ragged_float8_paged(&outt, &qt, &qst, &ot, NULL, 0, mask, NULL),
              QUANTKV_INVALID_ARGUMENT, "k_collection: pointer is null");
  CHECK_FAILS(quantkv_mla_indexer_ragged_float8_paged(&outt, &qt, &qst, &ot, &view, 0,
                                                      (quantkv_mask_t)5, NULL),
              QUANTKV_INVALID_ARGUMENT, "mask: expected 0..1, got 5");
  offs[1] = 2; /* does not end at T = 3 */
  CHECK(quantkv_mla_indexer_ragged_float8_paged(&outt, &qt, &qst, &ot, &view, 0, mask, NULL) !=
        QUANTKV_OK);
  CHECK(strstr(quantkv_last_error_message(), "input_row_offsets") != NULL);
  CHECK(quantkv_parse_mask("sliding", &mask) == QUANTKV_INVALID_ARGUMENT);
  quantkv_cache_destroy(cache);
}

static void test_fused_qkv(void) {
  /* MXFP4, K = 32, scales 1: c[m][n] = tensor_sf * 32 * a_m * b_n. One sequence with 1 cached
   * token and 2 new rows; float32 cache, 1 KV head of 4: N = q_dim 4 + K 4 + V 4. */
  quantkv_cache_config_t cfg = quantkv_cache_config_default();
  cfg.dtype = QUANTKV_DTYPE_F32;
  cfg.num_blocks = 2;
  cfg.page_size = 4;
  cfg.head_size = 4;
  quantkv_cache_t* cache = NULL;
  CHECK_OK(quantkv_cache_create(&cfg, 1, &cache));
  CHECK_OK(quantkv_cache_reserve(cache, 0, 3));
  CHECK_OK(quantkv_cache_set_cache_length(cache, 0, 1));
  quantkv_paged_kv_t view;
  CHECK_OK(quantkv_cache_view(cache, &view));

  const float a[2] = {0.5f, 1.5f};
  float b[12];
  uint8_t hidden[2][16], weight[12][16], sa[512], sb[512];
  for (int m = 0; m < 2; ++m) memset(hidden[m], quantkv_float_to_e2m1(a[m]) * 0x11, 16);
  for (int n = 0; n < 12; ++n) {
    b[n] = (n % 3 == 0) ? -1.0f : (float)(n % 4) * 0.5f;
    memset(weight[n], quantkv_float_to_e2m1(b[n]) * 0x11, 16);
  }
  memset(sa, 0, sizeof sa);
  memset(sb, 0, sizeof sb);
  for (int r = 0; r < 12; ++r) {
    if (r < 2) sa[r * 16] = 127; /* e8m0 1.0 at (r, kb 0) */
    sb[r * 16] = 127;
  }
  uint16_t out[2][4];
  uint32_t offs[2] = {0, 2};
  const int64_t hs[2] = {2, 16}, ws[2] = {12, 16}, ss[5] = {1, 1, 32, 4, 4}, os[2] = {2, 4},
                offs_shape[1] = {2};
  quantkv_tensor_t ht = quantkv_tensor_contiguous(hidden, QUANTKV_DTYPE_U8, 2, hs);
  quantkv_tensor_t wt = quantkv_tensor_contiguous(weight, QUANTKV_DTYPE_U8, 2, ws);
  quantkv_tensor_t sat = quantkv_tensor_contiguous(sa, QUANTKV_DTYPE_U8, 5, ss);
  quantkv_tensor_t sbt = quantkv_tensor_contiguous(sb, QUANTKV_DTYPE_U8, 5, ss);
  quantkv_tensor_t outt = quantkv_tensor_contiguous(out, QUANTKV_DTYPE_BF16, 2, os);
  quantkv_tensor_t ot = quantkv_tensor_contiguous(offs, QUANTKV_DTYPE_U32, 1, offs_shape);
  CHECK_OK(quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
      &ht, &ot, &wt, &sat, &sbt, 0.25f, &view, 0, &outt, QUANTKV_MXFP4, NULL));
  for (int m = 0; m < 2; ++m) {
    for (int n = 0; n < 12; ++n) {
      const float c = 0.25f * 32.0f * a[m] * b[n];
      if (n < 4) {
        CHECK(out[m][n] == quantkv_float_to_bf16(c));
        continue;
      }
      float stored = 0.0f;
      CHECK_OK(quantkv_cache_get(cache, 0, 1 + m, (n - 4) / 4, 0, 0, (n - 4) % 4, &stored));
      CHECK(stored == c);
    }
  }
  float cached = 1.0f;
  CHECK_OK(quantkv_cache_get(cache, 0, 0, 0, 0, 0, 0, &cached));
  CHECK(cached == 0.0f); /* position 0 (already cached) untouched */

  /* Per-section factors. */
  const quantkv_section_scales_t sf = {2.0f, 0.5f, 4.0f};
  CHECK_OK(quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4_sections(
      &ht, &ot, &wt, &sat, &sbt, sf, &view, 0, &outt, QUANTKV_MXFP4, NULL));
  float k_val = 0.0f, v_val = 0.0f;
  CHECK_OK(quantkv_cache_get(cache, 0, 2, 0, 0, 0, 1, &k_val));
  CHECK_OK(quantkv_cache_get(cache, 0, 2, 1, 0, 0, 1, &v_val));
  CHECK(out[1][1] == quantkv_float_to_bf16(2.0f * 32.0f * a[1] * b[1]));
  CHECK(k_val == 0.5f * 32.0f * a[1] * b[5] && v_val == 4.0f * 32.0f * a[1] * b[9]);

  /* Prepared weights give the same bits. */
  quantkv_prepared_qkv_weights_t* prepared = NULL;
  CHECK_OK(quantkv_prepare_qkv_weights(&wt, &sbt, QUANTKV_MXFP4, NULL, &prepared));
  int64_t pn = 0, pk = 0;
  quantkv_block_format_t pf = -1;
  CHECK_OK(quantkv_prepared_qkv_weights_info(prepared, &pn, &pk, &pf));
  CHECK(pn == 12 && pk == 32 && pf == QUANTKV_MXFP4);
  uint16_t plain[2][4];
  memcpy(plain, out, sizeof out);
  memset(out, 0, sizeof out);
  CHECK_OK(quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4_prepared(
      &ht, &ot, prepared, &sat, sf, &view, 0, &outt, NULL));
  CHECK(memcmp(out, plain, sizeof out) == 0);
  CHECK_FAILS(quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4_prepared(
                  &ht, &ot, NULL, &sat, sf, &view, 0, &outt, NULL),
              QUANTKV_INVALID_ARGUMENT, "weight: prepared weights pointer is null");
  quantkv_prepared_qkv_weights_destroy(prepared);

  /* Error paths. */
  quantkv_tensor_t f32_out = outt;
  f32_out.dtype = QUANTKV_DTYPE_F32;
  CHECK_FAILS(quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                  &ht, &ot, &wt, &sat, &sbt, 1.0f, &view, 0, &f32_out, QUANTKV_MXFP4, NULL),
              QUANTKV_INVALID_ARGUMENT, "output: expected dtype bfloat16, got float32");
  const int64_t short_ws[2] = {11, 16};
  quantkv_tensor_t short_w = quantkv_tensor_contiguous(weight, QUANTKV_DTYPE_U8, 2, short_ws);
  CHECK(quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
            &ht, &ot, &short_w, &sat, &sbt, 1.0f, &view, 0, &outt, QUANTKV_MXFP4, NULL) ==
        QUANTKV_INVALID_ARGUMENT);
  CHECK(strlen(quantkv_last_error_message()) > 0);
  quantkv_cache_destroy(cache);
}

int main(void) {
  test_quantize();
  test_indexer_companions();
  test_indexer();
  test_fused_qkv();
  return finish_test("c_api_ops_test");
}
