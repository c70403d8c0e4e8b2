/* C11 test of the C API's infrastructure: status and messages, version, ISA, codecs, tensors,
 * the scale layout converters and the owning paged cache, including their error paths.
 * The operations are tested by c_api_ops_test.c. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_api_test_util.h"
#include "quantkv/quantkv.h"

static void test_version_and_status(void) {
  int major = -1, minor = -1, patch = -1;
  quantkv_version(&major, &minor, &patch);
  char expected[64];
  snprintf(expected, sizeof expected, "%d.%d.%d", major, minor, patch);
  CHECK(major >= 0 && minor >= 0 && patch >= 0);
  CHECK(strcmp(quantkv_version_string(), expected) == 0);
  CHECK(strcmp(quantkv_status_name(QUANTKV_OK), "ok") == 0);
  CHECK(strcmp(quantkv_status_name(QUANTKV_OUT_OF_RANGE), "out of range") == 0);
}

static void test_isa(void) {
  const quantkv_isa_level_t before = quantkv_get_isa_level();
  CHECK(quantkv_max_supported_isa() >= QUANTKV_ISA_SCALAR);
  CHECK_OK(quantkv_set_isa_level(QUANTKV_ISA_SCALAR));
  CHECK(quantkv_get_isa_level() == QUANTKV_ISA_SCALAR);
  CHECK(strcmp(quantkv_isa_level_name(QUANTKV_ISA_SCALAR), "scalar") == 0);
  CHECK(strcmp(quantkv_last_error_message(), "") == 0);
  /* An enum value outside the C enum: an error, not undefined behaviour. */
  CHECK_FAILS(quantkv_set_isa_level((quantkv_isa_level_t)7), QUANTKV_INVALID_ARGUMENT,
              "level: expected 0..5, got 7");
  CHECK_OK(quantkv_set_isa_level(before));
  CHECK(strcmp(quantkv_last_error_message(), "") == 0); /* success clears the message */
}

static void test_scalar_codecs(void) {
  CHECK(quantkv_float_to_e4m3(448.0f) == 0x7E);
  CHECK(quantkv_float_to_e4m3(1e9f) == 0x7E);
  CHECK(quantkv_float_to_e4m3(-INFINITY) == 0xFE);
  CHECK(quantkv_float_to_e4m3(NAN) == 0x7F);
  CHECK(quantkv_float_to_e4m3(-1e-9f) == 0x80);
  CHECK(quantkv_e4m3_to_float(0x01) == ldexpf(1.0f, -9));
  CHECK(isnan(quantkv_e4m3_to_float(0xFF)));
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue; /* NaN */
    CHECK(quantkv_float_to_e4m3(quantkv_e4m3_to_float((uint8_t)code)) == code);
  }
  CHECK(quantkv_float_to_e8m0(3.0f) == 129);  /* rounds up to 4 = 2^2 */
  CHECK(quantkv_float_to_e8m0(2.0f) == 128);
  CHECK(quantkv_float_to_e8m0(4.0f) == 129);
  CHECK(quantkv_e8m0_to_float(127) == 1.0f);
  CHECK(quantkv_float_to_e2m1(0.25f) == 0 && quantkv_float_to_e2m1(0.75f) == 2);
  CHECK(quantkv_float_to_e2m1(2.5f) == 4 && quantkv_float_to_e2m1(5.0f) == 6);
  CHECK(quantkv_float_to_e2m1(-100.0f) == 0xF && quantkv_float_to_e2m1(-0.1f) == 0x8);
  CHECK(quantkv_e2m1_to_float(0xD) == -3.0f);
  CHECK(quantkv_float_to_bf16(1.0f + ldexpf(1.0f, -8)) == 0x3F80); /* tie to even */
  CHECK(quantkv_bf16_to_float(0x4040) == 3.0f);
  CHECK(quantkv_float_to_fp16(65520.0f) == 0x7C00);
  CHECK(quantkv_fp16_to_float(0x3C00) == 1.0f);
}

static void test_bulk_codecs(void) {
  float x[8] = {0.5f, -6.0f, 1.25f, 7.0f, -0.0f, 3.5f, 100.0f, -2.0f};
  uint8_t packed[4], e4m3[8];
  float back[8];
  CHECK_OK(quantkv_pack_e2m1(x, packed, 8));
  CHECK(packed[0] == (uint8_t)(0x1 | (0xF << 4))); /* low nibble = even element */
  CHECK_OK(quantkv_unpack_e2m1(packed, back, 8));
  const float expected[8] = {0.5f, -6.0f, 1.0f, 6.0f, -0.0f, 4.0f, 6.0f, -2.0f};
  for (int i = 0; i < 8; ++i) CHECK(back[i] == expected[i]);
  CHECK_OK(quantkv_encode_e4m3(x, e4m3, 8));
  CHECK_OK(quantkv_decode_e4m3(e4m3, back, 8));
  for (int i = 0; i < 8; ++i) CHECK(back[i] == quantkv_e4m3_to_float(quantkv_float_to_e4m3(x[i])));
  CHECK_FAILS(quantkv_pack_e2m1(x, packed, 7), QUANTKV_INVALID_ARGUMENT, "expected an even count");
  CHECK_FAILS(quantkv_decode_e4m3(NULL, back, 4), QUANTKV_INVALID_ARGUMENT, "src: data pointer is null");
  CHECK_OK(quantkv_decode_e4m3(NULL, NULL, 0)); /* empty is fine */
}

static void test_scale_layout(void) {
  enum { R = 130, KB = 5 };
  uint8_t linear[R * KB], back[R * KB];
  for (int i = 0; i < R * KB; ++i) linear[i] = (uint8_t)(1 + (i * 37) % 254);
  const int64_t n = quantkv_swizzled_scale_elements(R, KB);
  CHECK(n == 2 * 2 * 512);
  uint8_t* swizzled = malloc((size_t)n);
  memset(swizzled, 0xAB, (size_t)n);
  const int64_t lin_shape[2] = {R, KB};
  const int64_t swz_shape[5] = {2, 2, 32, 4, 4};
  quantkv_tensor_t lin = quantkv_tensor_contiguous(linear, QUANTKV_DTYPE_U8, 2, lin_shape);
  quantkv_tensor_t swz = quantkv_tensor_contiguous(swizzled, QUANTKV_DTYPE_U8, 5, swz_shape);
  CHECK_OK(quantkv_linear_to_swizzled_scales(&lin, &swz));
  /* Row 129, column 4 sits at [1, 1, 1, 0, 0] (contract §4). */
  CHECK(swizzled[1 * 1024 + 1 * 512 + 1 * 16 + 0 * 4 + 0] == linear[129 * KB + 4]);
  int64_t nonzero = 0;
  for (int64_t i = 0; i < n; ++i) nonzero += swizzled[i] != 0;
  CHECK(nonzero == R * KB); /* padding written as zeros */
  quantkv_tensor_t out = quantkv_tensor_contiguous(back, QUANTKV_DTYPE_U8, 2, lin_shape);
  CHECK_OK(quantkv_swizzled_to_linear_scales(&swz, &out));
  CHECK(memcmp(linear, back, sizeof linear) == 0);

  /* Error paths: the library's messages name the argument, expected and actual values. */
  const int64_t bad_shape[5] = {1, 2, 32, 4, 4};
  quantkv_tensor_t bad = quantkv_tensor_contiguous(swizzled, QUANTKV_DTYPE_U8, 5, bad_shape);
  CHECK_FAILS(quantkv_linear_to_swizzled_scales(&lin, &bad), QUANTKV_INVALID_ARGUMENT,
              "swizzled: expected shape [2, 2, 32, 4, 4] for R = 130, Kb = 5, got shape [1, 2, 32, 4, 4]");
  quantkv_tensor_t wrong_dtype = lin;
  wrong_dtype.dtype = QUANTKV_DTYPE_F32;
  CHECK_FAILS(quantkv_linear_to_swizzled_scales(&wrong_dtype, &swz), QUANTKV_INVALID_ARGUMENT,
              "linear: expected dtype uint8, got float32");
  quantkv_tensor_t wrong_rank = quantkv_tensor_contiguous(linear, QUANTKV_DTYPE_U8, 1, lin_shape);
  CHECK_FAILS(quantkv_linear_to_swizzled_scales(&wrong_rank, &swz), QUANTKV_INVALID_ARGUMENT,
              "linear: expected rank 2 [R, Kb], got rank 1");
  CHECK_FAILS(quantkv_linear_to_swizzled_scales(NULL, &swz), QUANTKV_INVALID_ARGUMENT,
              "linear: tensor pointer is null");
  free(swizzled);
}

static void test_cache(void) {
  quantkv_cache_config_t cfg = quantkv_cache_config_default();
  CHECK(cfg.dtype == QUANTKV_DTYPE_BF16 && cfg.kv_dim == 2 && cfg.page_size == 16);
  quantkv_cache_t* cache = NULL;
  /* num_blocks 0 (the default) is rejected with a message. */
  CHECK_FAILS(quantkv_cache_create(&cfg, 1, &cache), QUANTKV_INVALID_ARGUMENT,
              "config.num_blocks: expected >= 1, got 0");
  CHECK(cache == NULL);
  CHECK_FAILS(quantkv_cache_create(NULL, 1, &cache), QUANTKV_INVALID_ARGUMENT, "config");
  /* Sizes whose product overflows int64: an error, never a tiny allocation (issue 15). */
  cfg.num_blocks = 0xFFFFFFFF;
  cfg.head_size = (int64_t)1 << 40;
  CHECK_FAILS(quantkv_cache_create(&cfg, 1, &cache), QUANTKV_INVALID_ARGUMENT,
              "do not fit in 2^63-1 bytes");
  CHECK(cache == NULL);
  cfg = quantkv_cache_config_default();

  cfg.dtype = QUANTKV_DTYPE_E4M3;
  cfg.num_blocks = 5;
  cfg.kv_dim = 1;
  cfg.page_size = 4;
  cfg.head_size = 32;
  cfg.scale_granularity = 32;
  cfg.batch_size = 2;
  cfg.max_pages_per_seq = 3;
  CHECK_OK(quantkv_cache_create(&cfg, 42, &cache));
  CHECK(cache != NULL && quantkv_cache_free_pages(cache) == 5);
  CHECK_OK(quantkv_cache_reserve(cache, 0, 9)); /* 3 pages */
  CHECK_OK(quantkv_cache_reserve(cache, 1, 2)); /* 1 page */
  int64_t pages = 0;
  CHECK_OK(quantkv_cache_pages_used(cache, 0, &pages));
  CHECK(pages == 3 && quantkv_cache_free_pages(cache) == 1);
  CHECK_OK(quantkv_cache_set_cache_length(cache, 0, 9));
  uint32_t length = 0;
  CHECK_OK(quantkv_cache_get_cache_length(cache, 0, &length));
  CHECK(length == 9);
  CHECK_FAILS(quantkv_cache_set_cache_length(cache, 1, 5), QUANTKV_OUT_OF_RANGE,
              "length: 5 exceeds the 4 reserved positions of sequence 1");
  CHECK_FAILS(quantkv_cache_reserve(cache, 2, 1), QUANTKV_OUT_OF_RANGE, "b: expected 0 <= b < 2, got 2");
  CHECK_FAILS(quantkv_cache_reserve(cache, 1, 12), QUANTKV_RESOURCE_EXHAUSTED, "more pages needed");

  quantkv_paged_kv_t view;
  CHECK_OK(quantkv_cache_view(cache, &view));
  CHECK(view.dtype == QUANTKV_DTYPE_E4M3 && view.num_blocks == 5 && view.scales != NULL);
  CHECK(view.batch_size == 2 && view.max_pages_per_seq == 3 && view.cache_lengths[0] == 9);
  /* Write position 5 of sequence 0 (page entry 1, slot 1) through the view; read it back. */
  const uint32_t page = view.lookup_table[0 * 3 + 1];
  CHECK(page < 5);
  uint8_t* blocks = view.blocks;
  const int64_t row = ((int64_t)page * 1 * 1 + 0) * 4 + 1; /* (page, kv, layer, slot) */
  blocks[row * 32 + 7] = quantkv_float_to_e4m3(-2.5f);
  view.scales[row] = 0.125f;
  float value = 0.0f, scale = 0.0f;
  CHECK_OK(quantkv_cache_get(cache, 0, 5, 0, 0, 0, 7, &value));
  CHECK(value == -2.5f);
  CHECK_OK(quantkv_cache_get_scale(cache, 0, 5, 0, 0, 0, 7, &scale));
  CHECK(scale == 0.125f);
  /* Sequence 1 has one page: position 4 is not backed. */
  CHECK_FAILS(quantkv_cache_get(cache, 1, 4, 0, 0, 0, 0, &value), QUANTKV_OUT_OF_RANGE,
              "pos: expected 0 <= pos < 4, got 4");
  CHECK_FAILS(quantkv_cache_get(cache, 0, 0, 1, 0, 0, 0, &value), QUANTKV_OUT_OF_RANGE,
              "kv: expected 0 <= kv < 1, got 1");
  CHECK_FAILS(quantkv_cache_get(NULL, 0, 0, 0, 0, 0, 0, &value), QUANTKV_INVALID_ARGUMENT,
              "cache: pointer is null");
  quantkv_cache_destroy(cache);
  quantkv_cache_destroy(NULL);
}

static void test_tensor_helpers(void) {
  const int64_t shape[3] = {2, 3, 4};
  quantkv_tensor_t t = quantkv_tensor_contiguous(NULL, QUANTKV_DTYPE_F32, 3, shape);
  CHECK(t.strides[0] == 12 && t.strides[1] == 4 && t.strides[2] == 1);
  CHECK(quantkv_dtype_size(QUANTKV_DTYPE_BF16) == 2 && quantkv_dtype_size(QUANTKV_DTYPE_I32) == 4);
  CHECK(strcmp(quantkv_dtype_name(QUANTKV_DTYPE_E4M3), "float8_e4m3fn") == 0);
  CHECK(quantkv_sf_vector_size(QUANTKV_NVFP4) == 16 && quantkv_sf_vector_size(QUANTKV_MXFP4) == 32);
  CHECK(quantkv_row_bytes(QUANTKV_NVFP4, 64) == 32 && quantkv_row_bytes(QUANTKV_MXFP8, 64) == 64);
}

int main(void) {
  test_version_and_status();
  test_isa();
  test_scalar_codecs();
  test_bulk_codecs();
  test_scale_layout();
  test_cache();
  test_tensor_helpers();
  return finish_test("c_api_test");
}
