/* The experts checkpoint loader from C: a hand-written gpt-oss layer (Hugging Face names,
 * stacked MXFP4, gate/up interleaved, fp32 biases; E = 2, H = I = 32) loaded by
 * quantkv_load_experts_checkpoint, its info checked (format, layout, shapes, activation, the
 * biases as written), then the fused experts on the loaded handle equal, bit for bit, the same
 * bytes prepared by quantkv_prepare_experts with the biases passed by hand; and the error
 * paths. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "c_api_test_util.h"

enum { E = 2, H = 32, I = 32, T = 3, K = 2 };

static uint8_t w13[E][2 * I][H / 2], s13[E][2 * I], w2[E][H][I / 2], s2[E][H];
static float b13[E][2 * I], b2[E][H];

static void fill(void) {
  for (int e = 0; e < E; ++e) {
    for (int r = 0; r < 2 * I; ++r) {
      for (int c = 0; c < H / 2; ++c) w13[e][r][c] = (uint8_t)(e * 91 + r * 37 + c * 11);
      s13[e][r] = (uint8_t)(124 + (e + r) % 4); /* e8m0 2^-3 .. 2^0 */
      b13[e][r] = 0.125f * (float)((e * 7 + r) % 9) - 0.5f;
    }
    for (int r = 0; r < H; ++r) {
      for (int c = 0; c < I / 2; ++c) w2[e][r][c] = (uint8_t)(e * 13 + r * 53 + c * 7);
      s2[e][r] = (uint8_t)(123 + (e + 2 * r) % 4);
      b2[e][r] = 0.25f * (float)((e + 3 * r) % 5) - 0.5f;
    }
  }
}

/* PREFIX.gate_up_proj_{blocks,scales,bias} and PREFIX.down_proj_* in one file. */
static int write_checkpoint(const char* path) {
  const char* p = "model.layers.0.mlp.experts";
  const size_t sizes[6] = {sizeof w13, sizeof s13, sizeof b13, sizeof w2, sizeof s2, sizeof b2};
  const void* data[6] = {w13, s13, b13, w2, s2, b2};
  char header[2048];
  size_t o[7] = {0};
  for (int i = 0; i < 6; ++i) o[i + 1] = o[i] + sizes[i];
  snprintf(
      header, sizeof header,
      "{\"%s.gate_up_proj_blocks\":{\"dtype\":\"U8\",\"shape\":[%d,%d,1,16],"
      "\"data_offsets\":[%zu,%zu]},"
      "\"%s.gate_up_proj_scales\":{\"dtype\":\"U8\",\"shape\":[%d,%d,1],\"data_offsets\":[%zu,"
      "%zu]},"
      "\"%s.gate_up_proj_bias\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
      "\"%s.down_proj_blocks\":{\"dtype\":\"U8\",\"shape\":[%d,%d,1,16],\"data_offsets\":[%zu,"
      "%zu]},"
      "\"%s.down_proj_scales\":{\"dtype\":\"U8\",\"shape\":[%d,%d,1],\"data_offsets\":[%zu,%zu]},"
      "\"%s.down_proj_bias\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}}",
      p, E, 2 * I, o[0], o[1], p, E, 2 * I, o[1], o[2], p, E, 2 * I, o[2], o[3], p, E, H, o[3],
      o[4], p, E, H, o[4], o[5], p, E, H, o[5], o[6]);
  FILE* f = fopen(path, "wb");
  if (!f) return 0;
  const uint64_t len = strlen(header);
  for (int i = 0; i < 8; ++i) fputc((int)((len >> (8 * i)) & 0xFF), f);
  fwrite(header, 1, len, f);
  for (int i = 0; i < 6; ++i) fwrite(data[i], 1, sizes[i], f);
  fclose(f);
  return 1;
}

/* The fused experts (gpt-oss activation, interleaved, quantised or not) into y. */
static void run(const quantkv_prepared_experts_t* ex, const float* bias13, const float* bias2,
                int quantised, float y[T][H]) {
  static uint16_t x[T][H];
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < H; ++c)
      x[t][c] = quantkv_float_to_bf16(0.25f * (float)((t * 5 + c) % 9) - 1.0f);
  const int32_t ids[T][K] = {{0, 1}, {1, 1}, {1, 0}};
  const float wts[T][K] = {{0.75f, 0.25f}, {0.5f, 0.5f}, {1.0f, 0.0f}};
  const int64_t xs[2] = {T, H}, ks[2] = {T, K}, b13s[2] = {E, 2 * I}, b2s[2] = {E, H};
  quantkv_tensor_t tx = quantkv_tensor_contiguous(x, QUANTKV_DTYPE_BF16, 2, xs);
  quantkv_tensor_t tid = quantkv_tensor_contiguous((void*)ids, QUANTKV_DTYPE_I32, 2, ks);
  quantkv_tensor_t tw = quantkv_tensor_contiguous((void*)wts, QUANTKV_DTYPE_F32, 2, ks);
  quantkv_tensor_t tb13 = quantkv_tensor_contiguous((void*)bias13, QUANTKV_DTYPE_F32, 2, b13s);
  quantkv_tensor_t tb2 = quantkv_tensor_contiguous((void*)bias2, QUANTKV_DTYPE_F32, 2, b2s);
  quantkv_tensor_t ty = quantkv_tensor_contiguous(y, QUANTKV_DTYPE_F32, 2, xs);
  quantkv_fused_experts_args_t a = gpt_oss_experts_args(&tx, &tid, &tw, ex, &ty);
  a.quantize_activations = quantised;
  a.w13_bias = &tb13;
  a.w2_bias = &tb2;
  memset(y, 0xFF, sizeof(float) * T * H); /* NaN poison */
  CHECK_OK(quantkv_fused_experts(&a, NULL));
}

int main(void) {
  fill();
  char path[] = "/tmp/quantkv_c_experts_XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK(write_checkpoint(path));

  quantkv_prepared_experts_t* loaded = NULL;
  quantkv_experts_checkpoint_info_t info;
  memset(&info, 0, sizeof info);
  CHECK_OK(quantkv_load_experts_checkpoint(path, "model.layers.0.mlp.experts", QUANTKV_EXPERTS_AUTO,
                                           NULL, &loaded, &info));
  CHECK(loaded != NULL);
  CHECK(info.format == QUANTKV_CHECKPOINT_MXFP4 && info.layout == QUANTKV_EXPERTS_GPT_OSS);
  CHECK(info.num_experts == E && info.hidden == H && info.intermediate == I);
  CHECK(info.gate_up == QUANTKV_GATE_UP_INTERLEAVED && info.activation == QUANTKV_MOE_SWIGLU_OAI);
  CHECK(info.w13_bias != NULL && info.w2_bias != NULL);
  if (loaded == NULL || info.w13_bias == NULL || info.w2_bias == NULL)
    return finish_test("c_api_experts_checkpoint_test");
  CHECK(memcmp(info.w13_bias, b13, sizeof b13) == 0 && memcmp(info.w2_bias, b2, sizeof b2) == 0);

  /* The same bytes through quantkv_prepare_experts (row-major scales, MXFP4). */
  const int64_t w13s[3] = {E, 2 * I, H / 2}, s13s[3] = {E, 2 * I, 1}, w2s[3] = {E, H, I / 2},
                s2s[3] = {E, H, 1};
  quantkv_tensor_t tw13 = quantkv_tensor_contiguous(w13, QUANTKV_DTYPE_U8, 3, w13s);
  quantkv_tensor_t ts13 = quantkv_tensor_contiguous(s13, QUANTKV_DTYPE_U8, 3, s13s);
  quantkv_tensor_t tw2 = quantkv_tensor_contiguous(w2, QUANTKV_DTYPE_U8, 3, w2s);
  quantkv_tensor_t ts2 = quantkv_tensor_contiguous(s2, QUANTKV_DTYPE_U8, 3, s2s);
  quantkv_experts_source_t src;
  memset(&src, 0, sizeof src);
  src.w13 = &tw13;
  src.w13_scale = &ts13;
  src.w2 = &tw2;
  src.w2_scale = &ts2;
  src.format = QUANTKV_MXFP4;
  quantkv_prepared_experts_t* manual = NULL;
  CHECK_OK(quantkv_prepare_experts(&src, NULL, &manual));
  for (int quantised = 0; quantised < 2; ++quantised) {
    static float y_loaded[T][H], y_manual[T][H];
    run(loaded, info.w13_bias, info.w2_bias, quantised, y_loaded);
    run(manual, &b13[0][0], &b2[0][0], quantised, y_manual);
    CHECK(memcmp(y_loaded, y_manual, sizeof y_loaded) == 0);
    int live = 0;
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < H; ++c)
        live += y_loaded[t][c] == y_loaded[t][c] && y_loaded[t][c] != 0.0f;
    CHECK(live > T * H / 2); /* finite (no NaN poison left) and mostly non-zero */
  }
  quantkv_prepared_experts_destroy(manual);
  quantkv_prepared_experts_destroy(loaded);

  /* Errors: *experts is NULL after each. */
  quantkv_prepared_experts_t* none = (quantkv_prepared_experts_t*)&info;
  CHECK_FAILS(quantkv_load_experts_checkpoint(path, "model.layers.1.mlp.experts",
                                              QUANTKV_EXPERTS_AUTO, NULL, &none, &info),
              QUANTKV_INVALID_ARGUMENT, "model.layers.1.mlp.experts");
  CHECK(none == NULL);
  CHECK_FAILS(quantkv_load_experts_checkpoint(path, "model.layers.0.mlp.experts",
                                              QUANTKV_EXPERTS_PER_EXPERT, NULL, &none, NULL),
              QUANTKV_INVALID_ARGUMENT, "model.layers.0.mlp.experts");
  CHECK_FAILS(quantkv_load_experts_checkpoint(path, "model.layers.0.mlp.experts",
                                              (quantkv_experts_layout_t)3, NULL, &none, NULL),
              QUANTKV_INVALID_ARGUMENT, "layout: expected 0..2, got 3");
  CHECK_FAILS(quantkv_load_experts_checkpoint(NULL, "p", QUANTKV_EXPERTS_AUTO, NULL, &none, NULL),
              QUANTKV_INVALID_ARGUMENT, "path: pointer is null");
  CHECK_FAILS(quantkv_load_experts_checkpoint(path, NULL, QUANTKV_EXPERTS_AUTO, NULL, &none, NULL),
              QUANTKV_INVALID_ARGUMENT, "prefix: pointer is null");
  CHECK_FAILS(quantkv_load_experts_checkpoint(path, "p", QUANTKV_EXPERTS_AUTO, NULL, NULL, NULL),
              QUANTKV_INVALID_ARGUMENT, "experts: output pointer is null");
  CHECK_FAILS(quantkv_load_experts_checkpoint("/nonexistent/x.safetensors", "p",
                                              QUANTKV_EXPERTS_AUTO, NULL, &none, NULL),
              QUANTKV_INVALID_ARGUMENT, "x.safetensors");
  remove(path);
  return finish_test("c_api_experts_checkpoint_test");
}
