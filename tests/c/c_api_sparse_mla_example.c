/* docs/c_api.md's sparse MLA example, compiled and run by ctest (c_api_sparse_mla_example);
 * c_api_docs_example checks that the page shows this file as it is. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "quantkv/quantkv.h"

enum { SLOTS = 32, T = 2, H = 4, D_V = 128, D_ROPE = 64, D_QK = D_V + D_ROPE, TOP_K = 3 };

int main(void) {
  static uint16_t q[T][H][D_QK], kv[SLOTS][D_QK], out[T][H][D_V]; /* bf16 bits */
  static float lse[T][H];
  for (int s = 0; s < SLOTS; ++s)
    for (int d = 0; d < D_QK; ++d) kv[s][d] = quantkv_float_to_bf16((float)((s + d) % 7) - 3.0f);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D_QK; ++d) q[t][h][d] = quantkv_float_to_bf16(0.01f * (float)(h - d % 3));
  /* Global slots (page id * page_size + slot), as the indexer's QUANTKV_INDEX_GLOBAL_SLOTS
   * gives them; -1 is skipped. */
  const int32_t indices[T][TOP_K] = {{5, 17, -1}, {30, 2, 9}};
  const int64_t q_shape[3] = {T, H, D_QK}, kv_shape[2] = {SLOTS, D_QK}, i_shape[2] = {T, TOP_K},
                o_shape[3] = {T, H, D_V}, l_shape[2] = {T, H};
  const quantkv_tensor_t tq = quantkv_tensor_contiguous(q, QUANTKV_DTYPE_BF16, 3, q_shape);
  const quantkv_tensor_t tkv = quantkv_tensor_contiguous(kv, QUANTKV_DTYPE_BF16, 2, kv_shape);
  const quantkv_tensor_t ti =
      quantkv_tensor_contiguous((void*)indices, QUANTKV_DTYPE_I32, 2, i_shape);
  const quantkv_tensor_t tout = quantkv_tensor_contiguous(out, QUANTKV_DTYPE_BF16, 3, o_shape);
  const quantkv_tensor_t tlse = quantkv_tensor_contiguous(lse, QUANTKV_DTYPE_F32, 2, l_shape);

  quantkv_sparse_mla_args_t args;
  memset(&args, 0, sizeof args); /* kv_fp8, topk_length: NULL */
  args.q = &tq;
  args.kv = &tkv; /* or args.kv_fp8: U8 [SLOTS, quantkv_sparse_mla_fp8_row_bytes(D_V, D_ROPE)] */
  args.indices = &ti;
  args.sm_scale = 1.0f / sqrtf((float)D_QK);
  args.out = &tout;
  args.lse = &tlse; /* optional */
  if (quantkv_sparse_mla_attention(&args, NULL) != QUANTKV_OK) {
    fprintf(stderr, "quantkv: %s\n", quantkv_last_error_message());
    return 1;
  }
  printf("out[0][0][0..3] = %g %g %g %g, lse[0][0] = %g\n", quantkv_bf16_to_float(out[0][0][0]),
         quantkv_bf16_to_float(out[0][0][1]), quantkv_bf16_to_float(out[0][0][2]),
         quantkv_bf16_to_float(out[0][0][3]), lse[0][0]);

  args.indices = NULL; /* bad input: the argument is named, nothing is written */
  if (quantkv_sparse_mla_attention(&args, NULL) == QUANTKV_OK) return 1;
  printf("error: %s\n", quantkv_last_error_message());
  return 0;
}
