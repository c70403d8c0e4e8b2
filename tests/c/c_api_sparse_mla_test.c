/* C11 test of the C API's sparse MLA attention (quantkv/sparse_mla.hpp through quantkv.h):
 * both latent caches (bf16 and the FlashMLA fp8 row) against a double-precision reference of
 * the header's semantics, -1 slots, a token without any valid slot (out 0, lse -inf),
 * topk_length, lse optional, and the error paths naming the argument. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c_api_test_util.h"
#include "quantkv/quantkv.h"

enum { NS = 11, T = 5, H = 3, DV = 128, DR = 64, DQK = DV + DR, K = 6 };
enum { ROW = DV + 4 * (DV / 128) + 2 * DR };

static uint32_t g_state;
static float uniform(void) { /* [-1, 1) */
  g_state = g_state * 1664525u + 1013904223u;
  return (float)(g_state >> 8) / (float)(1u << 23) - 1.0f;
}

/* kv row s as floats (the fp8 row dequantised: code * scale of its 128, rope bf16). */
static void dequant_fp8_row(const uint8_t* row, float* dst) {
  float scales[DV / 128];
  memcpy(scales, row + DV, sizeof scales);
  for (int i = 0; i < DV; ++i) dst[i] = quantkv_e4m3_to_float(row[i]) * scales[i / 128];
  for (int i = 0; i < DR; ++i) {
    uint16_t b;
    memcpy(&b, row + DV + 4 * (DV / 128) + 2 * i, 2);
    dst[DV + i] = quantkv_bf16_to_float(b);
  }
}

/* The header's semantics in double over float rows kvf [NS][DQK]. */
static void reference(const uint16_t q[T][H][DQK], const float kvf[NS][DQK],
                      const int32_t idx[T][K], const int32_t* len, float sm_scale,
                      double out[T][H][DV], double lse[T][H]) {
  for (int t = 0; t < T; ++t) {
    const int n = len ? len[t] : K;
    for (int h = 0; h < H; ++h) {
      double score[K], m = -INFINITY, sum = 0.0;
      for (int j = 0; j < n; ++j) {
        score[j] = -INFINITY;
        if (idx[t][j] < 0) continue;
        double d = 0.0;
        for (int c = 0; c < DQK; ++c)
          d += (double)quantkv_bf16_to_float(q[t][h][c]) * kvf[idx[t][j]][c];
        score[j] = sm_scale * d;
        if (score[j] > m) m = score[j];
      }
      for (int c = 0; c < DV; ++c) out[t][h][c] = 0.0;
      if (m == -INFINITY) {
        lse[t][h] = -INFINITY;
        continue;
      }
      for (int j = 0; j < n; ++j) {
        if (idx[t][j] < 0) continue;
        const double p = exp(score[j] - m);
        sum += p;
        for (int c = 0; c < DV; ++c) out[t][h][c] += p * kvf[idx[t][j]][c];
      }
      for (int c = 0; c < DV; ++c) out[t][h][c] /= sum;
      lse[t][h] = m + log(sum);
    }
  }
}

/* out within bf16 rounding (plus fp32 accumulation) of the reference; lse close; -inf rows. */
static int matches(const uint16_t out[T][H][DV], const float lse[T][H], double ref[T][H][DV],
                   double ref_lse[T][H]) {
  int ok = 1;
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      if (isinf(ref_lse[t][h])) {
        ok &= isinf(lse[t][h]) && lse[t][h] < 0;
      } else {
        ok &= fabs(lse[t][h] - ref_lse[t][h]) <= 1e-5 * (1.0 + fabs(ref_lse[t][h]));
      }
      for (int c = 0; c < DV; ++c) {
        const double o = quantkv_bf16_to_float(out[t][h][c]), r = ref[t][h][c];
        if (!(fabs(o - r) <= fabs(r) / 256.0 + 1e-5)) {
          if (ok) fprintf(stderr, "t %d h %d c %d: got %g, expected %g\n", t, h, c, o, r);
          ok = 0;
        }
      }
    }
  }
  return ok;
}

static void test_sparse_mla(void) {
  static uint16_t q[T][H][DQK], kv[NS][DQK], out[T][H][DV];
  static uint8_t kv_fp8[NS][ROW];
  static float kvf[NS][DQK], kvf8[NS][DQK], lse[T][H];
  static double ref[T][H][DV], ref_lse[T][H];
  const char* env = getenv("QUANTKV_TEST_SEED");
  g_state = env ? (uint32_t)strtoul(env, NULL, 10) : (uint32_t)time(NULL);
  printf("c_api_sparse_mla_test: seed %u (QUANTKV_TEST_SEED=%u replays it)\n", g_state, g_state);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < DQK; ++c) q[t][h][c] = quantkv_float_to_bf16(uniform());
  memcpy(q[3], q[0], sizeof q[0]); /* token 3: token 0's query, its slots behind a -1 */
  for (int s = 0; s < NS; ++s) {
    for (int c = 0; c < DQK; ++c) {
      kv[s][c] = quantkv_float_to_bf16(uniform());
      kvf[s][c] = quantkv_bf16_to_float(kv[s][c]);
    }
    /* The fp8 row: one fp32 scale per 128 values (max / 448), codes RNE, rope as bf16. */
    for (int b = 0; b < DV / 128; ++b) {
      float amax = 0.0f;
      for (int c = 0; c < 128; ++c) amax = fmaxf(amax, fabsf(kvf[s][b * 128 + c]));
      const float scale = amax / 448.0f;
      memcpy(kv_fp8[s] + DV + 4 * b, &scale, 4);
      for (int c = 0; c < 128; ++c)
        kv_fp8[s][b * 128 + c] = quantkv_float_to_e4m3(kvf[s][b * 128 + c] / scale);
    }
    memcpy(kv_fp8[s] + DV + 4 * (DV / 128), &kv[s][DV], 2 * DR);
    dequant_fp8_row(kv_fp8[s], kvf8[s]);
  }
  /* Token 2 has no valid slot; token 3 repeats token 0 with a -1 in front; token 4 is cut by
   * topk_length below. */
  const int32_t idx[T][K] = {{0, 3, 7, -1, 10, 5},
                             {2, 4, 6, 8, 1, 9},
                             {-1, -1, -1, -1, -1, -1},
                             {-1, 0, 3, 7, 10, 5},
                             {9, 8, 7, 6, 5, 4}};
  const int32_t len[T] = {6, 6, 3, 0, 2};
  const float sm_scale = 0.0721687836f; /* 1 / sqrt(192) */
  const int64_t q_shape[3] = {T, H, DQK}, kv_shape[2] = {NS, DQK}, f8_shape[2] = {NS, ROW},
                i_shape[2] = {T, K}, l_shape[1] = {T}, o_shape[3] = {T, H, DV},
                lse_shape[2] = {T, H};
  quantkv_tensor_t tq = quantkv_tensor_contiguous(q, QUANTKV_DTYPE_BF16, 3, q_shape);
  quantkv_tensor_t tkv = quantkv_tensor_contiguous(kv, QUANTKV_DTYPE_BF16, 2, kv_shape);
  quantkv_tensor_t tf8 = quantkv_tensor_contiguous(kv_fp8, QUANTKV_DTYPE_U8, 2, f8_shape);
  quantkv_tensor_t tidx = quantkv_tensor_contiguous((void*)idx, QUANTKV_DTYPE_I32, 2, i_shape);
  quantkv_tensor_t tlen = quantkv_tensor_contiguous((void*)len, QUANTKV_DTYPE_I32, 1, l_shape);
  quantkv_tensor_t tout = quantkv_tensor_contiguous(out, QUANTKV_DTYPE_BF16, 3, o_shape);
  quantkv_tensor_t tlse = quantkv_tensor_contiguous(lse, QUANTKV_DTYPE_F32, 2, lse_shape);
  CHECK(quantkv_sparse_mla_fp8_row_bytes(512, 64) == 656);
  CHECK(quantkv_sparse_mla_fp8_row_bytes(DV, DR) == ROW);

  quantkv_sparse_mla_args_t a;
  memset(&a, 0, sizeof a);
  a.q = &tq;
  a.kv = &tkv;
  a.indices = &tidx;
  a.sm_scale = sm_scale;
  a.out = &tout;
  a.lse = &tlse;
  memset(out, 0xA5, sizeof out);
  memset(lse, 0xA5, sizeof lse);
  CHECK_OK(quantkv_sparse_mla_attention(&a, NULL));
  reference((const uint16_t(*)[H][DQK])q, (const float(*)[DQK])kvf, idx, NULL, sm_scale, ref, ref_lse);
  CHECK(matches((const uint16_t(*)[H][DV])out, (const float(*)[H])lse, ref, ref_lse));
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < DV; ++c) CHECK(out[2][h][c] == 0);
  /* A -1 in front changes nothing: same bits. */
  CHECK(memcmp(out[3], out[0], sizeof out[0]) == 0);

  /* topk_length, fp8 cache, no lse. */
  a.kv = NULL;
  a.kv_fp8 = &tf8;
  a.topk_length = &tlen;
  memset(out, 0xA5, sizeof out);
  memset(lse, 0xA5, sizeof lse);
  CHECK_OK(quantkv_sparse_mla_attention(&a, NULL));
  reference((const uint16_t(*)[H][DQK])q, (const float(*)[DQK])kvf8, idx, len, sm_scale, ref, ref_lse);
  CHECK(matches((const uint16_t(*)[H][DV])out, (const float(*)[H])lse, ref, ref_lse));
  const float lse_before = lse[0][0];
  a.lse = NULL;
  memset(out, 0xA5, sizeof out);
  CHECK_OK(quantkv_sparse_mla_attention(&a, NULL));
  CHECK(matches((const uint16_t(*)[H][DV])out, (const float(*)[H])lse, ref, ref_lse));
  CHECK(lse[0][0] == lse_before);

  /* Error paths: the argument is named. */
  CHECK_FAILS(quantkv_sparse_mla_attention(NULL, NULL), QUANTKV_INVALID_ARGUMENT,
              "args: pointer is null");
  quantkv_sparse_mla_args_t bad = a;
  bad.q = &tlse;
  CHECK_FAILS(quantkv_sparse_mla_attention(&bad, NULL), QUANTKV_INVALID_ARGUMENT,
              "q: expected dtype");
  bad = a;
  bad.kv_fp8 = &tlse;
  CHECK_FAILS(quantkv_sparse_mla_attention(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "kv_fp8:");
  bad = a;
  bad.kv = &tkv;
  CHECK_FAILS(quantkv_sparse_mla_attention(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "kv");
  bad = a;
  bad.kv_fp8 = NULL;
  CHECK_FAILS(quantkv_sparse_mla_attention(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "kv");
  bad = a;
  bad.indices = &tlen;
  CHECK_FAILS(quantkv_sparse_mla_attention(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "indices:");
  bad = a;
  bad.topk_length = &tidx;
  CHECK_FAILS(quantkv_sparse_mla_attention(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "topk_length:");
  bad = a;
  bad.out = NULL;
  CHECK_FAILS(quantkv_sparse_mla_attention(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "out:");
  bad = a;
  bad.lse = &tidx;
  CHECK_FAILS(quantkv_sparse_mla_attention(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "lse:");
  bad = a;
  bad.sm_scale = NAN;
  CHECK_FAILS(quantkv_sparse_mla_attention(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "sm_scale");
}

int main(void) {
  test_sparse_mla();
  return finish_test("c_api_sparse_mla_test");
}
