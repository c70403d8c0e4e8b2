// The C API (include/quantkv/quantkv.h), part 1: status, version, ISA, tensors, the owning
// cache, codecs and the scale layout. The operations are in c_api_ops.cpp.
#include <cstring>
#include <memory>
#include <string>

#include "c_api_internal.hpp"
#include "quantkv/cpu_features.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/info.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/quantkv.h"
#include "quantkv/scale_layout.hpp"
#include "quantkv/version.hpp"

// The C enums mirror the C++ ones value for value; the casts below rely on it.
static_assert(QUANTKV_INVALID_ARGUMENT == int(quantkv::StatusCode::kInvalidArgument));
static_assert(QUANTKV_INTERNAL == int(quantkv::StatusCode::kInternal));
static_assert(QUANTKV_DTYPE_F32 == int(quantkv::DType::kF32));
static_assert(QUANTKV_DTYPE_BF16 == int(quantkv::DType::kBF16));
static_assert(QUANTKV_DTYPE_F16 == int(quantkv::DType::kF16));
static_assert(QUANTKV_DTYPE_E4M3 == int(quantkv::DType::kE4M3));
static_assert(QUANTKV_ISA_AVX512 == int(quantkv::IsaLevel::kAvx512));
static_assert(QUANTKV_ISA_NEON_BF16 == int(quantkv::IsaLevel::kNeonBf16));
static_assert(QUANTKV_MXFP8 == int(quantkv::BlockFormat::kMXFP8));
static_assert(QUANTKV_INDEX_K_MXFP4 == int(quantkv::IndexKFormat::kMxfp4));
static_assert(QUANTKV_INDEX_K_FP8 == int(quantkv::IndexKFormat::kFp8));
static_assert(QUANTKV_INDEX_K_NVFP4 == int(quantkv::IndexKFormat::kNvfp4));
static_assert(QUANTKV_NVFP4 == int(quantkv::BlockFormat::kNVFP4));

struct quantkv_cache {
  quantkv::PagedKVCache cache;
};

namespace quantkv::capi {

namespace {
thread_local std::string t_last_error;

std::string str(int64_t v) { return std::to_string(v); }

// Index checks for the element accessors: each index against its extent.
Status check_index(const char* name, int64_t value, int64_t extent) {
  if (value < 0 || value >= extent) {
    return out_of_range(std::string(name) + ": expected 0 <= " + name + " < " + str(extent) +
                        ", got " + str(value));
  }
  return Status::Ok();
}

Status check_element(const PagedKVCache& c, int64_t b, int64_t pos, int64_t kv, int64_t layer,
                     int64_t head, int64_t d) {
  const PagedKVCacheConfig& cfg = c.config();
  QUANTKV_RETURN_IF_ERROR(check_index("b", b, cfg.batch_size));
  QUANTKV_RETURN_IF_ERROR(check_index("pos", pos, c.pages_used(b) * cfg.page_size));
  QUANTKV_RETURN_IF_ERROR(check_index("kv", kv, cfg.kv_dim));
  QUANTKV_RETURN_IF_ERROR(check_index("layer", layer, cfg.num_layers));
  QUANTKV_RETURN_IF_ERROR(check_index("head", head, cfg.num_heads));
  return check_index("d", d, cfg.head_size);
}

Status check_cache(const quantkv_cache_t* cache) {
  return cache ? Status::Ok() : invalid_argument("cache: pointer is null");
}

Status check_out(const void* p, const char* name) {
  return p ? Status::Ok() : invalid_argument(std::string(name) + ": output pointer is null");
}

Status check_buffers(const void* src, const void* dst, int64_t n) {
  if (n < 0) return invalid_argument("n: expected >= 0, got " + str(n));
  if (n > 0 && src == nullptr) return invalid_argument("src: data pointer is null");
  if (n > 0 && dst == nullptr) return invalid_argument("dst: data pointer is null");
  return Status::Ok();
}
}  // namespace

quantkv_status_t finish(const Status& status) {
  if (status.ok()) {
    t_last_error.clear();
  } else {
    t_last_error = status.message();
  }
  return static_cast<quantkv_status_t>(status.code());
}

Status check_tensor(const quantkv_tensor_t* t, const char* name, const char* dims, int rank,
                    std::initializer_list<quantkv_dtype_t> accepted) {
  const std::string n(name);
  if (t == nullptr) return invalid_argument(n + ": tensor pointer is null");
  bool dtype_ok = false;
  std::string names;
  for (quantkv_dtype_t a : accepted) {
    dtype_ok = dtype_ok || a == t->dtype;
    names += (names.empty() ? "" : " or ") + std::string(quantkv_dtype_name(a));
  }
  if (!dtype_ok) {
    return invalid_argument(n + ": expected dtype " + names + ", got " +
                            quantkv_dtype_name(t->dtype));
  }
  if (t->rank != rank) {
    return invalid_argument(n + ": expected rank " + str(rank) + " " + dims + ", got rank " +
                            str(t->rank));
  }
  return Status::Ok();
}

Status to_collection(const quantkv_paged_kv_t* c, const char* name, PagedKVCacheCollection* out) {
  const std::string n(name);
  if (c == nullptr) return invalid_argument(n + ": pointer is null");
  if (c->dtype < QUANTKV_DTYPE_F32 || c->dtype > QUANTKV_DTYPE_E4M3) {
    return invalid_argument(n +
                            ".dtype: expected float32, bfloat16, float16 or float8_e4m3fn, got " +
                            quantkv_dtype_name(c->dtype));
  }
  if (c->batch_size < 0 || c->max_pages_per_seq < 0) {
    return invalid_argument(n + ": expected batch_size >= 0 and max_pages_per_seq >= 0, got " +
                            str(c->batch_size) + " and " + str(c->max_pages_per_seq));
  }
  const bool has_rows = c->batch_size > 0;
  if (has_rows && c->cache_lengths == nullptr) {
    return invalid_argument(n + ".cache_lengths: data pointer is null");
  }
  if (has_rows && c->max_pages_per_seq > 0 && c->lookup_table == nullptr) {
    return invalid_argument(n + ".lookup_table: data pointer is null");
  }
  out->blocks = c->blocks;
  out->dtype = static_cast<DType>(c->dtype);
  out->num_blocks = c->num_blocks;
  out->kv_dim = c->kv_dim;
  out->num_layers = c->num_layers;
  out->page_size = c->page_size;
  out->num_heads = c->num_heads;
  out->head_size = c->head_size;
  out->scales = c->scales;
  out->scale_granularity = c->scale_granularity;
  out->cache_lengths = make_view(c->cache_lengths, c->batch_size);
  out->lookup_table = make_view(c->lookup_table, c->batch_size, c->max_pages_per_seq);
  return Status::Ok();
}

Status to_ragged_cache(const quantkv_tensor_t* input_row_offsets, const quantkv_paged_kv_t* cache,
                       const char* cache_name, TensorView<const uint32_t, 1>* offsets,
                       PagedKVCacheCollection* out) {
  QUANTKV_RETURN_IF_ERROR(
      to_view(input_row_offsets, "input_row_offsets", "[B + 1]", {QUANTKV_DTYPE_U32}, offsets));
  return to_collection(cache, cache_name, out);
}

Context to_context(const quantkv_context_t* ctx) {
  Context out;
  if (ctx == nullptr) return out;
  out.num_threads = ctx->num_threads;
  if (ctx->scores_budget_bytes != 0)
    out.scores_budget_bytes = std::size_t(ctx->scores_budget_bytes);
  out.cuda_stream = ctx->cuda_stream;
  return out;
}

Status check_enum(const char* name, int value, int max_value) {
  if (value < 0 || value > max_value) {
    return invalid_argument(std::string(name) + ": expected 0.." + str(max_value) + ", got " +
                            str(value));
  }
  return Status::Ok();
}

}  // namespace quantkv::capi

using namespace quantkv;        // NOLINT: this file is the C boundary of the library
using namespace quantkv::capi;  // NOLINT

extern "C" {

// ------------------------------------------------------------------ status, version, ISA
const char* quantkv_status_name(quantkv_status_t status) {
  return status_code_name(static_cast<StatusCode>(status));
}
const char* quantkv_last_error_message(void) { return t_last_error.c_str(); }

const char* quantkv_version_string(void) { return QUANTKV_VERSION_STRING; }
void quantkv_version(int* major, int* minor, int* patch) {
  if (major) *major = QUANTKV_VERSION_MAJOR;
  if (minor) *minor = QUANTKV_VERSION_MINOR;
  if (patch) *patch = QUANTKV_VERSION_PATCH;
}

quantkv_isa_level_t quantkv_get_isa_level(void) {
  return static_cast<quantkv_isa_level_t>(active_isa());
}
quantkv_isa_level_t quantkv_max_supported_isa(void) {
  return static_cast<quantkv_isa_level_t>(max_supported_isa());
}
quantkv_status_t quantkv_set_isa_level(quantkv_isa_level_t level) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_enum("level", level, QUANTKV_ISA_NEON_BF16));
    return set_isa_level(static_cast<IsaLevel>(level));
  });
}
const char* quantkv_isa_level_name(quantkv_isa_level_t level) {
  if (level < QUANTKV_ISA_SCALAR || level > QUANTKV_ISA_NEON_BF16) return "unknown";
  return isa_level_name(static_cast<IsaLevel>(level));
}

// ------------------------------------------------------------------ tensors
const char* quantkv_dtype_name(quantkv_dtype_t dtype) {
  switch (dtype) {
    case QUANTKV_DTYPE_F32:
    case QUANTKV_DTYPE_BF16:
    case QUANTKV_DTYPE_F16:
    case QUANTKV_DTYPE_E4M3:
      return dtype_name(static_cast<DType>(dtype));
    case QUANTKV_DTYPE_U8:
      return "uint8";
    case QUANTKV_DTYPE_U32:
      return "uint32";
    case QUANTKV_DTYPE_I32:
      return "int32";
  }
  return "unknown";
}

size_t quantkv_dtype_size(quantkv_dtype_t dtype) {
  switch (dtype) {
    case QUANTKV_DTYPE_F32:
    case QUANTKV_DTYPE_U32:
    case QUANTKV_DTYPE_I32:
      return 4;
    case QUANTKV_DTYPE_BF16:
    case QUANTKV_DTYPE_F16:
      return 2;
    case QUANTKV_DTYPE_E4M3:
    case QUANTKV_DTYPE_U8:
      return 1;
  }
  return 0;
}

quantkv_tensor_t quantkv_tensor_contiguous(void* data, quantkv_dtype_t dtype, int32_t rank,
                                           const int64_t* shape) {
  quantkv_tensor_t t;
  std::memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dtype;
  // An invalid rank is kept as is: the operation taking the tensor reports it.
  t.rank = rank;
  if (rank < 1 || rank > QUANTKV_MAX_RANK || shape == nullptr) return t;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

// ------------------------------------------------------------------ owning cache
quantkv_cache_config_t quantkv_cache_config_default(void) {
  const PagedKVCacheConfig d;
  quantkv_cache_config_t c;
  c.dtype = static_cast<quantkv_dtype_t>(d.dtype);
  c.num_blocks = d.num_blocks;
  c.kv_dim = d.kv_dim;
  c.num_layers = d.num_layers;
  c.page_size = d.page_size;
  c.num_heads = d.num_heads;
  c.head_size = d.head_size;
  c.scale_granularity = d.scale_granularity;
  c.batch_size = d.batch_size;
  c.max_pages_per_seq = d.max_pages_per_seq;
  return c;
}

quantkv_status_t quantkv_cache_create(const quantkv_cache_config_t* config, uint64_t seed,
                                      quantkv_cache_t** out) {
  return guarded([&]() -> Status {
    QUANTKV_RETURN_IF_ERROR(check_out(out, "out"));
    *out = nullptr;
    if (config == nullptr) return invalid_argument("config: pointer is null");
    if (config->dtype < QUANTKV_DTYPE_F32 || config->dtype > QUANTKV_DTYPE_E4M3) {
      return invalid_argument(
          std::string("config.dtype: expected float32, bfloat16, float16 or float8_e4m3fn, got ") +
          quantkv_dtype_name(config->dtype));
    }
    PagedKVCacheConfig cfg;
    cfg.dtype = static_cast<DType>(config->dtype);
    cfg.num_blocks = config->num_blocks;
    cfg.kv_dim = config->kv_dim;
    cfg.num_layers = config->num_layers;
    cfg.page_size = config->page_size;
    cfg.num_heads = config->num_heads;
    cfg.head_size = config->head_size;
    cfg.scale_granularity = config->scale_granularity;
    cfg.batch_size = config->batch_size;
    cfg.max_pages_per_seq = config->max_pages_per_seq;
    auto holder = std::make_unique<quantkv_cache>();
    QUANTKV_RETURN_IF_ERROR(PagedKVCache::create(cfg, seed, &holder->cache));
    *out = holder.release();
    return Status::Ok();
  });
}

void quantkv_cache_destroy(quantkv_cache_t* cache) { delete cache; }

quantkv_status_t quantkv_cache_reserve(quantkv_cache_t* cache, int64_t b, int64_t num_positions) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_cache(cache));
    return cache->cache.reserve(b, num_positions);
  });
}

quantkv_status_t quantkv_cache_set_cache_length(quantkv_cache_t* cache, int64_t b, int64_t length) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_cache(cache));
    return cache->cache.set_cache_length(b, length);
  });
}

quantkv_status_t quantkv_cache_get_cache_length(const quantkv_cache_t* cache, int64_t b,
                                                uint32_t* length) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_cache(cache));
    QUANTKV_RETURN_IF_ERROR(check_out(length, "length"));
    QUANTKV_RETURN_IF_ERROR(check_index("b", b, cache->cache.config().batch_size));
    *length = cache->cache.cache_length(b);
    return Status::Ok();
  });
}

quantkv_status_t quantkv_cache_pages_used(const quantkv_cache_t* cache, int64_t b, int64_t* pages) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_cache(cache));
    QUANTKV_RETURN_IF_ERROR(check_out(pages, "pages"));
    QUANTKV_RETURN_IF_ERROR(check_index("b", b, cache->cache.config().batch_size));
    *pages = cache->cache.pages_used(b);
    return Status::Ok();
  });
}

int64_t quantkv_cache_free_pages(const quantkv_cache_t* cache) {
  return cache ? cache->cache.free_pages() : 0;
}

quantkv_status_t quantkv_cache_view(quantkv_cache_t* cache, quantkv_paged_kv_t* view) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_cache(cache));
    QUANTKV_RETURN_IF_ERROR(check_out(view, "view"));
    const PagedKVCacheCollection c = cache->cache.view();
    view->blocks = c.blocks;
    view->dtype = static_cast<quantkv_dtype_t>(c.dtype);
    view->num_blocks = c.num_blocks;
    view->kv_dim = c.kv_dim;
    view->num_layers = c.num_layers;
    view->page_size = c.page_size;
    view->num_heads = c.num_heads;
    view->head_size = c.head_size;
    view->scales = c.scales;
    view->scale_granularity = c.scale_granularity;
    view->cache_lengths = c.cache_lengths.data;
    view->lookup_table = c.lookup_table.data;
    view->batch_size = c.batch_size();
    view->max_pages_per_seq = c.max_pages_per_seq();
    return Status::Ok();
  });
}

quantkv_status_t quantkv_cache_get(const quantkv_cache_t* cache, int64_t b, int64_t pos, int64_t kv,
                                   int64_t layer, int64_t head, int64_t d, float* value) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_cache(cache));
    QUANTKV_RETURN_IF_ERROR(check_out(value, "value"));
    QUANTKV_RETURN_IF_ERROR(check_element(cache->cache, b, pos, kv, layer, head, d));
    *value = cache->cache.get(b, pos, kv, layer, head, d);
    return Status::Ok();
  });
}

quantkv_status_t quantkv_cache_get_scale(const quantkv_cache_t* cache, int64_t b, int64_t pos,
                                         int64_t kv, int64_t layer, int64_t head, int64_t d,
                                         float* scale) {
  return guarded([&]() -> Status {
    QUANTKV_RETURN_IF_ERROR(check_cache(cache));
    QUANTKV_RETURN_IF_ERROR(check_out(scale, "scale"));
    if (cache->cache.config().scale_granularity == 0) {
      return invalid_argument("cache: this cache has no scales (scale_granularity 0)");
    }
    QUANTKV_RETURN_IF_ERROR(check_element(cache->cache, b, pos, kv, layer, head, d));
    *scale = cache->cache.get_scale(b, pos, kv, layer, head, d);
    return Status::Ok();
  });
}

// ------------------------------------------------------------------ codecs
float quantkv_e4m3_to_float(uint8_t bits) { return e4m3_to_float(bits); }
uint8_t quantkv_float_to_e4m3(float x) { return float_to_e4m3(x); }
float quantkv_e8m0_to_float(uint8_t bits) { return e8m0_to_float(bits); }
uint8_t quantkv_float_to_e8m0(float x) { return float_to_e8m0(x); }
float quantkv_e2m1_to_float(uint8_t code) { return e2m1_to_float(code); }
uint8_t quantkv_float_to_e2m1(float x) { return float_to_e2m1(x); }
float quantkv_bf16_to_float(uint16_t bits) { return bf16_to_float(bits); }
uint16_t quantkv_float_to_bf16(float x) { return float_to_bf16(x); }
float quantkv_fp16_to_float(uint16_t bits) { return fp16_to_float(bits); }
uint16_t quantkv_float_to_fp16(float x) { return float_to_fp16(x); }

quantkv_status_t quantkv_encode_e4m3(const float* src, uint8_t* dst, int64_t n) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_buffers(src, dst, n));
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_e4m3(src[i]);
    return Status::Ok();
  });
}

quantkv_status_t quantkv_decode_e4m3(const uint8_t* src, float* dst, int64_t n) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_buffers(src, dst, n));
    convert_e4m3_to_f32(src, dst, n);
    return Status::Ok();
  });
}

quantkv_status_t quantkv_pack_e2m1(const float* src, uint8_t* dst, int64_t n) {
  return guarded([&]() -> Status {
    QUANTKV_RETURN_IF_ERROR(check_buffers(src, dst, n));
    if (n % 2 != 0) return invalid_argument("n: expected an even count, got " + str(n));
    for (int64_t c = 0; c < n / 2; ++c) {
      dst[c] = e2m1_pack(float_to_e2m1(src[2 * c]), float_to_e2m1(src[2 * c + 1]));
    }
    return Status::Ok();
  });
}

quantkv_status_t quantkv_unpack_e2m1(const uint8_t* src, float* dst, int64_t n) {
  return guarded([&]() -> Status {
    QUANTKV_RETURN_IF_ERROR(check_buffers(src, dst, n));
    if (n % 2 != 0) return invalid_argument("n: expected an even count, got " + str(n));
    for (int64_t i = 0; i < n; ++i) dst[i] = e2m1_to_float(e2m1_get(src, i));
    return Status::Ok();
  });
}

// ------------------------------------------------------------------ scale layout
quantkv_status_t quantkv_linear_to_swizzled_scales(const quantkv_tensor_t* linear,
                                                   const quantkv_tensor_t* swizzled) {
  return guarded([&] {
    TensorView<const uint8_t, 2> lin;
    TensorView<uint8_t, 5> swz;
    QUANTKV_RETURN_IF_ERROR(to_view(linear, "linear", "[R, Kb]", {QUANTKV_DTYPE_U8}, &lin));
    QUANTKV_RETURN_IF_ERROR(
        to_view(swizzled, "swizzled", "[R/128, Kb/4, 32, 4, 4]", {QUANTKV_DTYPE_U8}, &swz));
    return linear_to_swizzled_scales(lin, swz);
  });
}

quantkv_status_t quantkv_swizzled_to_linear_scales(const quantkv_tensor_t* swizzled,
                                                   const quantkv_tensor_t* linear) {
  return guarded([&] {
    TensorView<const uint8_t, 5> swz;
    TensorView<uint8_t, 2> lin;
    QUANTKV_RETURN_IF_ERROR(
        to_view(swizzled, "swizzled", "[R/128, Kb/4, 32, 4, 4]", {QUANTKV_DTYPE_U8}, &swz));
    QUANTKV_RETURN_IF_ERROR(to_view(linear, "linear", "[R, Kb]", {QUANTKV_DTYPE_U8}, &lin));
    return swizzled_to_linear_scales(swz, lin);
  });
}

int64_t quantkv_swizzled_scale_elements(int64_t rows, int64_t kb_count) {
  return swizzled_scale_elements(rows, kb_count);
}

// ------------------------------------------------------------------ block formats
int quantkv_sf_vector_size(quantkv_block_format_t format) {
  return sf_vector_size(static_cast<BlockFormat>(format));
}
int64_t quantkv_row_bytes(quantkv_block_format_t format, int64_t k) {
  return row_bytes(static_cast<BlockFormat>(format), k);
}

}  // extern "C"
