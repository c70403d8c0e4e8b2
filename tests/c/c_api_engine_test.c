/* C11 test of the C API's engine layout (quantkv_engine_k_cache_t), global slots and int32
 * block tables / offsets, on a hand-computed case: one sequence, 2 cached + 3 new tokens,
 * D = 32, pages of 4, block table {2, 0, -1} (int32): positions 0..3 in page 2, 4 in page 0. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "c_api_test_util.h"
#include "quantkv/quantkv.h"

enum { kPages = 3, kP = 4, kD = 32, kPageBytes = kP * (kD + 4) };

static float g_storage[kPages * kPageBytes / 4]; /* floats: 4-byte aligned */
static uint32_t g_lengths[1] = {2};
static int32_t g_table[3] = {2, 0, -1};

static quantkv_engine_k_cache_t engine_cache(void) {
  quantkv_engine_k_cache_t c;
  memset(&c, 0, sizeof c);
  c.data = (uint8_t*)g_storage;
  c.num_blocks = kPages;
  c.page_size = kP;
  c.head_size = kD;
  c.page_stride_bytes = 0;
  c.cache_lengths = g_lengths;
  c.block_table = g_table;
  c.block_table_dtype = QUANTKV_DTYPE_I32;
  c.batch_size = 1;
  c.max_pages_per_seq = 3;
  return c;
}

/* The documented byte offsets (DeepGEMM / vLLM): key row, then the page's float scales. */
static uint8_t* key_row(int pos) {
  const int page = g_table[pos / kP], slot = pos % kP;
  return (uint8_t*)g_storage + page * kPageBytes + slot * kD;
}
static float scale_at(int pos) {
  const int page = g_table[pos / kP], slot = pos % kP;
  float s;
  memcpy(&s, (uint8_t*)g_storage + page * kPageBytes + kP * kD + 4 * slot, 4);
  return s;
}

static void test_k_store(void) {
  quantkv_engine_k_cache_t c = engine_cache();
  memset(g_storage, 0, sizeof g_storage);
  float k[3][kD];
  for (int t = 0; t < 3; ++t)
    for (int d = 0; d < kD; ++d) k[t][d] = (float)((d * 7 + t * 3) % 11 - 5) * 0.37f;
  const int64_t ks[2] = {3, kD}, os[1] = {2};
  int32_t offs[2] = {0, 3};
  quantkv_tensor_t kt = quantkv_tensor_contiguous(k, QUANTKV_DTYPE_F32, 2, ks);
  quantkv_tensor_t ot = quantkv_tensor_contiguous(offs, QUANTKV_DTYPE_I32, 1, os);
  CHECK_OK(quantkv_indexer_k_store_engine(&kt, &ot, &c, QUANTKV_SCALE_POWER_OF_TWO, NULL));
  for (int t = 0; t < 3; ++t) {
    const float s = scale_at(2 + t);
    CHECK(s == ldexpf(1.0f, -7)); /* amax = 5 * 0.37: the power of two at or above amax / 448 */
    for (int d = 0; d < kD; ++d) CHECK(key_row(2 + t)[d] == quantkv_float_to_e4m3(k[t][d] / s));
  }
  CHECK(scale_at(0) == 0.0f && scale_at(1) == 0.0f && key_row(1)[0] == 0); /* cached: untouched */

  offs[1] = -1; /* reads as 0xFFFFFFFF */
  CHECK_FAILS(quantkv_indexer_k_store_engine(&kt, &ot, &c, QUANTKV_SCALE_FLOAT, NULL), QUANTKV_INVALID_ARGUMENT,
              "input_row_offsets");
  offs[1] = 3;
  c.block_table_dtype = QUANTKV_DTYPE_F32;
  CHECK_FAILS(quantkv_indexer_k_store_engine(&kt, &ot, &c, QUANTKV_SCALE_FLOAT, NULL), QUANTKV_INVALID_ARGUMENT,
              "k_cache.block_table_dtype: expected uint32 or int32, got float32");
  CHECK_FAILS(quantkv_indexer_k_store_engine(&kt, &ot, NULL, QUANTKV_SCALE_FLOAT, NULL), QUANTKV_INVALID_ARGUMENT,
              "k_cache: pointer is null");
}

/* quantkv_indexer_k_store_call: without a front end, the bytes of quantkv_indexer_k_store_engine;
 * with the Hadamard front end over the engine layout (a combination only the one call has), the
 * codes and scales it writes into a MAX cache (quantkv_cache_create) holding the same tokens;
 * the "exactly one cache" error. */
static void test_k_store_call(void) {
  quantkv_engine_k_cache_t c = engine_cache();
  float k[3][kD];
  for (int t = 0; t < 3; ++t)
    for (int d = 0; d < kD; ++d) k[t][d] = (float)((d * 5 + t * 7) % 13 - 6) * 0.29f;
  const int64_t ks[2] = {3, kD}, os[1] = {2};
  int32_t offs[2] = {0, 3};
  quantkv_tensor_t kt = quantkv_tensor_contiguous(k, QUANTKV_DTYPE_F32, 2, ks);
  quantkv_tensor_t ot = quantkv_tensor_contiguous(offs, QUANTKV_DTYPE_I32, 1, os);

  static float fixed[sizeof g_storage / sizeof(float)];
  memset(g_storage, 0, sizeof g_storage);
  CHECK_OK(quantkv_indexer_k_store_engine(&kt, &ot, &c, QUANTKV_SCALE_POWER_OF_TWO, NULL));
  memcpy(fixed, g_storage, sizeof g_storage);
  memset(g_storage, 0, sizeof g_storage);
  quantkv_indexer_k_store_args_t a;
  memset(&a, 0, sizeof a);
  a.k = &kt;
  a.input_row_offsets = &ot;
  a.k_cache = &c;
  a.scale_mode = QUANTKV_SCALE_POWER_OF_TWO;
  CHECK_OK(quantkv_indexer_k_store_call(&a, NULL));
  CHECK(memcmp(fixed, g_storage, sizeof g_storage) == 0);

  quantkv_indexer_front_end_t fe;
  memset(&fe, 0, sizeof fe);
  fe.hadamard = QUANTKV_HADAMARD_WALSH;
  fe.rounding = QUANTKV_ROUND_BF16_STEPS;
  a.front_end = &fe;
  memset(g_storage, 0, sizeof g_storage);
  CHECK_OK(quantkv_indexer_k_store_call(&a, NULL));
  CHECK(memcmp(fixed, g_storage, sizeof g_storage) != 0); /* the rotation changed the codes */

  quantkv_cache_config_t cfg = quantkv_cache_config_default();
  cfg.dtype = QUANTKV_DTYPE_E4M3;
  cfg.num_blocks = kPages;
  cfg.kv_dim = 1;
  cfg.page_size = kP;
  cfg.head_size = kD;
  cfg.scale_granularity = kD;
  cfg.max_pages_per_seq = 3;
  quantkv_cache_t* cache = NULL;
  CHECK_OK(quantkv_cache_create(&cfg, 7, &cache));
  CHECK_OK(quantkv_cache_reserve(cache, 0, 5));
  CHECK_OK(quantkv_cache_set_cache_length(cache, 0, 2));
  quantkv_paged_kv_t view;
  CHECK_OK(quantkv_cache_view(cache, &view));
  quantkv_indexer_k_store_args_t m = a;
  m.k_cache = NULL;
  m.k_collection = &view;
  int32_t offs32[2] = {0, 3};
  quantkv_tensor_t ot32 = quantkv_tensor_contiguous(offs32, QUANTKV_DTYPE_I32, 1, os);
  m.input_row_offsets = &ot32;
  CHECK_OK(quantkv_indexer_k_store_call(&m, NULL));
  for (int t = 0; t < 3; ++t) {
    float s = 0.0f;
    CHECK_OK(quantkv_cache_get_scale(cache, 0, 2 + t, 0, 0, 0, 0, &s));
    CHECK(s == scale_at(2 + t));
    for (int d = 0; d < kD; ++d) {
      float v = 0.0f;
      CHECK_OK(quantkv_cache_get(cache, 0, 2 + t, 0, 0, 0, d, &v));
      CHECK(v == quantkv_e4m3_to_float(key_row(2 + t)[d]));
    }
  }

  m.k_cache = &c; /* both caches */
  CHECK_FAILS(quantkv_indexer_k_store_call(&m, NULL), QUANTKV_INVALID_ARGUMENT,
              "k_collection, k_cache: expected exactly one of MAX's cache collection and the engines' cache, got both");
  m.k_cache = NULL;
  m.k_collection = NULL;
  CHECK_FAILS(quantkv_indexer_k_store_call(&m, NULL), QUANTKV_INVALID_ARGUMENT, "got neither");
  CHECK_FAILS(quantkv_indexer_k_store_call(NULL, NULL), QUANTKV_INVALID_ARGUMENT, "args: pointer is null");
  quantkv_cache_destroy(cache);
}

static void test_indexer(void) {
  /* Key j = (j + 1) in element 0, scale 1; head 0 has q = 1 there, head 1 has q = -1 (ReLU
   * drops it): score(j) = j + 1, the best keys are the latest visible. */
  quantkv_engine_k_cache_t c = engine_cache();
  memset(g_storage, 0, sizeof g_storage);
  for (int j = 0; j < 5; ++j) {
    key_row(j)[0] = quantkv_float_to_e4m3((float)(j + 1));
    const float one = 1.0f;
    memcpy((uint8_t*)g_storage + g_table[j / kP] * kPageBytes + kP * kD + 4 * (j % kP), &one, 4);
  }
  uint8_t q[3][2][kD];
  memset(q, 0, sizeof q);
  float q_s[3][2];
  for (int t = 0; t < 3; ++t) {
    q[t][0][0] = quantkv_float_to_e4m3(1.0f);
    q[t][1][0] = quantkv_float_to_e4m3(-1.0f);
    q_s[t][0] = q_s[t][1] = 1.0f;
  }
  int32_t out[3][4];
  int32_t offs[2] = {0, 3};
  const int64_t qs3[3] = {3, 2, kD}, qs2[2] = {3, 2}, os[2] = {3, 4}, offs_shape[1] = {2};
  quantkv_tensor_t qt = quantkv_tensor_contiguous(q, QUANTKV_DTYPE_U8, 3, qs3);
  quantkv_tensor_t qst = quantkv_tensor_contiguous(q_s, QUANTKV_DTYPE_F32, 2, qs2);
  quantkv_tensor_t outt = quantkv_tensor_contiguous(out, QUANTKV_DTYPE_I32, 2, os);
  quantkv_tensor_t ot = quantkv_tensor_contiguous(offs, QUANTKV_DTYPE_I32, 1, offs_shape);
  CHECK_OK(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                          QUANTKV_INDEX_POSITIONS, NULL));
  const int32_t positions[3][4] = {{2, 1, 0, -1}, {3, 2, 1, 0}, {4, 3, 2, 1}};
  CHECK(memcmp(out, positions, sizeof out) == 0);
  /* Global slots: page * 4 + slot; positions 0..3 are slots 8..11, position 4 is slot 0. */
  CHECK_OK(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                          QUANTKV_INDEX_GLOBAL_SLOTS, NULL));
  const int32_t slots[3][4] = {{10, 9, 8, -1}, {11, 10, 9, 8}, {0, 11, 10, 9}};
  CHECK(memcmp(out, slots, sizeof out) == 0);

  /* quantkv_mla_indexer_call over the engines' layout: the same indices, and the timings. */
  quantkv_mla_indexer_args_t ia;
  memset(&ia, 0, sizeof ia);
  ia.output_indices = &outt;
  ia.q = &qt;
  ia.q_s = &qst;
  ia.input_row_offsets = &ot;
  ia.k_cache = &c;
  ia.mask = QUANTKV_MASK_CAUSAL;
  quantkv_indexer_timings_t timings;
  memset(&timings, 0, sizeof timings);
  ia.timings = &timings;
  for (int global = 0; global < 2; ++global) {
    ia.index_output = global ? QUANTKV_INDEX_GLOBAL_SLOTS : QUANTKV_INDEX_POSITIONS;
    memset(out, 0x55, sizeof out);
    CHECK_OK(quantkv_mla_indexer_call(&ia, NULL));
    CHECK(memcmp(out, global ? (const void*)slots : (const void*)positions, sizeof out) == 0);
  }
  CHECK(timings.chunks >= 1 && timings.score_seconds >= 0.0 && timings.workspace_bytes > 0);
  quantkv_paged_kv_t dummy;
  memset(&dummy, 0, sizeof dummy);
  ia.k_collection = &dummy;
  CHECK_FAILS(quantkv_mla_indexer_call(&ia, NULL), QUANTKV_INVALID_ARGUMENT, "got both");
  ia.k_collection = NULL;
  ia.k_cache = NULL;
  CHECK_FAILS(quantkv_mla_indexer_call(&ia, NULL), QUANTKV_INVALID_ARGUMENT, "got neither");
  ia.k_cache = &c;
  ia.mask = (quantkv_mask_t)2;
  CHECK_FAILS(quantkv_mla_indexer_call(&ia, NULL), QUANTKV_INVALID_ARGUMENT,
              "mask: expected 0..1, got 2");
  ia.mask = QUANTKV_MASK_CAUSAL;
  CHECK_FAILS(quantkv_mla_indexer_call(NULL, NULL), QUANTKV_INVALID_ARGUMENT,
              "args: pointer is null");

  CHECK_FAILS(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                             (quantkv_index_output_t)5, NULL),
              QUANTKV_INVALID_ARGUMENT, "index_output: expected 0..1, got 5");
  g_table[1] = -1; /* position 4 loses its page */
  CHECK_FAILS(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                             QUANTKV_INDEX_POSITIONS, NULL),
              QUANTKV_OUT_OF_RANGE, "k_cache.lookup_table: sequence 0 page entry 1");
  g_table[1] = 0;
  c.data += 2;
  CHECK_FAILS(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                             QUANTKV_INDEX_POSITIONS, NULL),
              QUANTKV_INVALID_ARGUMENT, "k_cache.data: expected 4-byte alignment");

  /* MAX's collection with global slots: the same mapping through its own lookup table. */
  quantkv_cache_config_t cfg = quantkv_cache_config_default();
  cfg.dtype = QUANTKV_DTYPE_E4M3;
  cfg.num_blocks = 4;
  cfg.kv_dim = 1;
  cfg.page_size = kP;
  cfg.head_size = kD;
  cfg.scale_granularity = kD;
  cfg.max_pages_per_seq = 2;
  quantkv_cache_t* cache = NULL;
  CHECK_OK(quantkv_cache_create(&cfg, 9, &cache));
  CHECK_OK(quantkv_cache_reserve(cache, 0, 5));
  CHECK_OK(quantkv_cache_set_cache_length(cache, 0, 2));
  quantkv_paged_kv_t view;
  CHECK_OK(quantkv_cache_view(cache, &view));
  for (int j = 0; j < 5; ++j) {
    const int64_t row = (int64_t)view.lookup_table[j / kP] * kP + j % kP;
    ((uint8_t*)view.blocks)[row * kD] = quantkv_float_to_e4m3((float)(j + 1));
    view.scales[row] = 1.0f;
  }
  CHECK_OK(quantkv_mla_indexer_ragged_float8_paged_output(&outt, &qt, &qst, &ot, &view, 0, QUANTKV_MASK_CAUSAL,
                                                          QUANTKV_INDEX_GLOBAL_SLOTS, NULL));
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 4; ++i) {
      const int32_t p = positions[t][i];
      CHECK(out[t][i] == (p < 0 ? -1 : (int32_t)view.lookup_table[p / kP] * kP + p % kP));
    }
  }
  /* The one call over the collection: the same indices. */
  int32_t expected[3][4];
  memcpy(expected, out, sizeof out);
  memset(out, 0x55, sizeof out);
  ia.k_cache = NULL;
  ia.k_collection = &view;
  ia.layer_idx = 0;
  ia.index_output = QUANTKV_INDEX_GLOBAL_SLOTS;
  ia.timings = NULL;
  CHECK_OK(quantkv_mla_indexer_call(&ia, NULL));
  CHECK(memcmp(out, expected, sizeof out) == 0);
  quantkv_cache_destroy(cache);
}

/* The MXFP4 form (QUANTKV_INDEX_K_MXFP4): pages of 4 slots x (16 code bytes + 1 ue8m0 byte). */
enum { kFp4PageBytes = kP * (kD / 2 + kD / 32) };
static uint8_t* fp4_codes(int pos) {
  return (uint8_t*)g_storage + g_table[pos / kP] * kFp4PageBytes + (pos % kP) * (kD / 2);
}
static uint8_t* fp4_scale(int pos) {
  return (uint8_t*)g_storage + g_table[pos / kP] * kFp4PageBytes + kP * (kD / 2) + pos % kP;
}

static void test_mxfp4(void) {
  quantkv_engine_k_cache_t c = engine_cache();
  c.format = QUANTKV_INDEX_K_MXFP4;
  memset(g_storage, 0, sizeof g_storage);
  /* K store: amax = 5 * 0.37 = 1.85, 1.85 / 6 = 0.308 -> 2^-1 (byte 126), codes e2m1(2 x). */
  float k[3][kD];
  for (int t = 0; t < 3; ++t)
    for (int d = 0; d < kD; ++d) k[t][d] = (float)((d * 7 + t * 3) % 11 - 5) * 0.37f;
  const int64_t ks[2] = {3, kD}, os[1] = {2};
  int32_t offs[2] = {0, 3};
  quantkv_tensor_t kt = quantkv_tensor_contiguous(k, QUANTKV_DTYPE_F32, 2, ks);
  quantkv_tensor_t ot = quantkv_tensor_contiguous(offs, QUANTKV_DTYPE_I32, 1, os);
  CHECK_OK(quantkv_indexer_k_store_engine(&kt, &ot, &c, QUANTKV_SCALE_POWER_OF_TWO, NULL));
  for (int t = 0; t < 3; ++t) {
    CHECK(*fp4_scale(2 + t) == 126);
    for (int d = 0; d < kD; d += 2) {
      const uint8_t want = (uint8_t)(quantkv_float_to_e2m1(2.0f * k[t][d]) |
                                     (quantkv_float_to_e2m1(2.0f * k[t][d + 1]) << 4));
      CHECK(fp4_codes(2 + t)[d / 2] == want);
    }
  }
  CHECK(*fp4_scale(0) == 0 && fp4_codes(1)[0] == 0); /* cached: untouched */
  CHECK_FAILS(quantkv_indexer_k_store_engine(&kt, &ot, &c, QUANTKV_SCALE_FLOAT, NULL), QUANTKV_INVALID_ARGUMENT,
              "scale_mode");

  /* Indexer: key j = 1.0 in element 0 with block scale 2^j, so score(j) = 2^j: the latest first. */
  memset(g_storage, 0, sizeof g_storage);
  for (int j = 0; j < 5; ++j) {
    fp4_codes(j)[0] = quantkv_float_to_e2m1(1.0f);
    *fp4_scale(j) = (uint8_t)(127 + j);
  }
  uint8_t q[3][1][kD];
  memset(q, 0, sizeof q);
  float q_s[3][1] = {{1.0f}, {1.0f}, {1.0f}};
  for (int t = 0; t < 3; ++t) q[t][0][0] = quantkv_float_to_e4m3(1.0f);
  int32_t out[3][4];
  const int64_t qs3[3] = {3, 1, kD}, qs2[2] = {3, 1}, outs[2] = {3, 4};
  quantkv_tensor_t qt = quantkv_tensor_contiguous(q, QUANTKV_DTYPE_U8, 3, qs3);
  quantkv_tensor_t qst = quantkv_tensor_contiguous(q_s, QUANTKV_DTYPE_F32, 2, qs2);
  quantkv_tensor_t outt = quantkv_tensor_contiguous(out, QUANTKV_DTYPE_I32, 2, outs);
  CHECK_OK(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                          QUANTKV_INDEX_POSITIONS, NULL));
  const int32_t positions[3][4] = {{2, 1, 0, -1}, {3, 2, 1, 0}, {4, 3, 2, 1}};
  CHECK(memcmp(out, positions, sizeof out) == 0);
  c.data += 1; /* byte rows need no alignment */
  CHECK_OK(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                          QUANTKV_INDEX_POSITIONS, NULL));
  c.data -= 1;
  c.format = 9;
  CHECK_FAILS(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                             QUANTKV_INDEX_POSITIONS, NULL),
              QUANTKV_INVALID_ARGUMENT, "k_cache.format");

  /* NVFP4 (pages of 4 x (16 + 2) bytes): key j = 1.0 in element 0 with block scale e4m3(j + 1),
   * global scale 2: score(j) = (j + 1) / 2, the latest first; a zero global scale is named. */
  c.format = QUANTKV_INDEX_K_NVFP4;
  c.global_scale = 0.0f;
  CHECK_FAILS(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                             QUANTKV_INDEX_POSITIONS, NULL),
              QUANTKV_INVALID_ARGUMENT, "k_cache.global_scale");
  c.global_scale = 2.0f;
  memset(g_storage, 0, sizeof g_storage);
  enum { kNvPage = kP * (kD / 2 + kD / 16) };
  for (int j = 0; j < 5; ++j) {
    uint8_t* page = (uint8_t*)g_storage + g_table[j / kP] * kNvPage;
    page[(j % kP) * (kD / 2)] = quantkv_float_to_e2m1(1.0f);
    page[kP * (kD / 2) + (j % kP) * (kD / 16)] = quantkv_float_to_e4m3((float)(j + 1));
  }
  CHECK_OK(quantkv_mla_indexer_ragged_float8_paged_engine(&outt, &qt, &qst, &ot, &c, QUANTKV_MASK_CAUSAL,
                                                          QUANTKV_INDEX_POSITIONS, NULL));
  CHECK(memcmp(out, positions, sizeof out) == 0);
}

int main(void) {
  test_k_store();
  test_mxfp4();
  test_k_store_call();
  test_indexer();
  return finish_test("c_api_engine_test");
}
