/* C11 test of the C API's fused experts (quantkv/moe.hpp through quantkv.h): prepare_experts
 * from stacked NVFP4 experts, fused_experts with bf16 and fp32 outputs (the bf16 output is the
 * fp32 one rounded), a duplicated route with half weights equals the single route (exact), a
 * token without a local route is 0, and the error paths. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "c_api_test_util.h"
#include "quantkv/quantkv.h"

enum { E = 2, H = 32, I = 16, T = 4, K = 2 };

static uint16_t bf16_rne(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static void test_fused_experts(void) {
  static uint8_t w13[E][2 * I][H / 2], s13[E][2 * I][H / 16], w2[E][H][I / 2], s2[E][H][I / 16];
  for (int e = 0; e < E; ++e) {
    for (int r = 0; r < 2 * I; ++r) {
      for (int c = 0; c < H / 2; ++c) w13[e][r][c] = (uint8_t)(e * 91 + r * 37 + c * 11);
      for (int c = 0; c < H / 16; ++c) s13[e][r][c] = 0x30;
    }
    for (int r = 0; r < H; ++r) {
      for (int c = 0; c < I / 2; ++c) w2[e][r][c] = (uint8_t)(e * 13 + r * 53 + c * 7);
      for (int c = 0; c < I / 16; ++c) s2[e][r][c] = 0x30;
    }
  }
  const int64_t w13_shape[3] = {E, 2 * I, H / 2}, s13_shape[3] = {E, 2 * I, H / 16},
                w2_shape[3] = {E, H, I / 2}, s2_shape[3] = {E, H, I / 16}, e_shape[1] = {E};
  float w13_alpha[E] = {0.25f, 0.5f};
  quantkv_tensor_t tw13 = quantkv_tensor_contiguous(w13, QUANTKV_DTYPE_U8, 3, w13_shape);
  quantkv_tensor_t ts13 = quantkv_tensor_contiguous(s13, QUANTKV_DTYPE_U8, 3, s13_shape);
  quantkv_tensor_t tw2 = quantkv_tensor_contiguous(w2, QUANTKV_DTYPE_U8, 3, w2_shape);
  quantkv_tensor_t ts2 = quantkv_tensor_contiguous(s2, QUANTKV_DTYPE_U8, 3, s2_shape);
  quantkv_tensor_t talpha = quantkv_tensor_contiguous(w13_alpha, QUANTKV_DTYPE_F32, 1, e_shape);
  quantkv_experts_source_t src;
  memset(&src, 0, sizeof src);
  src.w13 = &tw13;
  src.w13_scale = &ts13;
  src.w2 = &tw2;
  src.w2_scale = &ts2;
  src.format = QUANTKV_NVFP4;
  src.w13_alpha = &talpha;
  quantkv_prepared_experts_t* experts = NULL;
  CHECK_OK(quantkv_prepare_experts(&src, NULL, &experts));
  CHECK(experts != NULL);

  uint16_t x[T][H];
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) x[t][h] = bf16_rne((float)((t * 7 + h * 3) % 11) / 4.0f - 1.25f);
  /* Token 2 is token 0 with the route doubled at half weight; token 3 has no local route. */
  memcpy(x[2], x[0], sizeof x[0]);
  int32_t ids[T][K] = {{0, 1}, {1, 1}, {0, 0}, {5, -1}};
  float weights[T][K] = {{1.0f, 0.0f}, {0.75f, 0.25f}, {0.5f, 0.5f}, {1.0f, 1.0f}};
  float y32[T][H];
  uint16_t y16[T][H];
  memset(y32, 0xA5, sizeof y32);
  memset(y16, 0xA5, sizeof y16);
  const int64_t x_shape[2] = {T, H}, r_shape[2] = {T, K};
  quantkv_tensor_t tx = quantkv_tensor_contiguous(x, QUANTKV_DTYPE_BF16, 2, x_shape);
  quantkv_tensor_t tids = quantkv_tensor_contiguous(ids, QUANTKV_DTYPE_I32, 2, r_shape);
  quantkv_tensor_t tw = quantkv_tensor_contiguous(weights, QUANTKV_DTYPE_F32, 2, r_shape);
  quantkv_tensor_t ty32 = quantkv_tensor_contiguous(y32, QUANTKV_DTYPE_F32, 2, x_shape);
  quantkv_tensor_t ty16 = quantkv_tensor_contiguous(y16, QUANTKV_DTYPE_BF16, 2, x_shape);
  quantkv_fused_experts_args_t a = gpt_oss_experts_args(&tx, &tids, &tw, experts, &ty32);
  CHECK_OK(quantkv_fused_experts(&a, NULL));
  a.y = &ty16;
  CHECK_OK(quantkv_fused_experts(&a, NULL));
  int nonzero = 0, rounded = 1;
  for (int h = 0; h < H; ++h) {
    nonzero += y32[0][h] != 0.0f;
    for (int t = 0; t < T; ++t) rounded &= isfinite(y32[t][h]) && y16[t][h] == bf16_rne(y32[t][h]);
  }
  CHECK(nonzero > H / 2);
  CHECK(rounded);
  CHECK(memcmp(y32[2], y32[0], sizeof y32[0]) == 0);
  for (int h = 0; h < H; ++h) CHECK(y32[3][h] == 0.0f);

  /* Up's own factor (w3_alpha): equal to w13_alpha, the same bits; twice it, other outputs. */
  float w3_same[E] = {0.25f, 0.5f}, w3_twice[E] = {0.5f, 1.0f};
  float y3[T][H];
  quantkv_tensor_t ty3 = quantkv_tensor_contiguous(y3, QUANTKV_DTYPE_F32, 2, x_shape);
  quantkv_tensor_t tw3 = quantkv_tensor_contiguous(w3_same, QUANTKV_DTYPE_F32, 1, e_shape);
  for (int twice = 0; twice < 2; ++twice) {
    tw3.data = twice ? (void*)w3_twice : (void*)w3_same;
    src.w3_alpha = &tw3;
    quantkv_prepared_experts_t* ex3 = NULL;
    CHECK_OK(quantkv_prepare_experts(&src, NULL, &ex3));
    quantkv_fused_experts_args_t a3 = a;
    a3.experts = ex3;
    a3.y = &ty3;
    CHECK_OK(quantkv_fused_experts(&a3, NULL));
    CHECK((memcmp(y3, y32, sizeof y3) == 0) == !twice);
    quantkv_prepared_experts_destroy(ex3);
  }
  src.w3_alpha = &tx;
  quantkv_prepared_experts_t* no3 = NULL;
  CHECK_FAILS(quantkv_prepare_experts(&src, NULL, &no3), QUANTKV_INVALID_ARGUMENT,
              "source.w3_alpha");
  CHECK(no3 == NULL);
  src.w3_alpha = NULL;

  /* Error paths. */
  quantkv_fused_experts_args_t bad = a;
  bad.experts = NULL;
  CHECK_FAILS(quantkv_fused_experts(&bad, NULL), QUANTKV_INVALID_ARGUMENT,
              "experts: pointer is null");
  bad = a;
  bad.gate_up = 7;
  CHECK_FAILS(quantkv_fused_experts(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "gate_up: expected");
  bad = a;
  bad.topk_ids = &tw;
  CHECK_FAILS(quantkv_fused_experts(&bad, NULL), QUANTKV_INVALID_ARGUMENT,
              "topk_ids: expected dtype int32");
  bad = a;
  bad.y = &tx;
  CHECK_FAILS(quantkv_fused_experts(&bad, NULL), QUANTKV_INVALID_ARGUMENT, "y: overlaps x");
  quantkv_prepared_experts_t* none = NULL;
  src.w2 = &tw13;
  CHECK_FAILS(quantkv_prepare_experts(&src, NULL, &none), QUANTKV_INVALID_ARGUMENT, "source.w2");
  CHECK(none == NULL);
  quantkv_prepared_experts_destroy(experts);
  quantkv_prepared_experts_destroy(NULL);
}

int main(void) {
  test_fused_experts();
  return finish_test("c_api_moe_test");
}
