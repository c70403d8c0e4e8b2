/* quantkv C API: every public operation of the library behind a C11-compatible ABI.
 *
 * Conventions
 *  - Every fallible function returns a quantkv_status_t; QUANTKV_OK is 0. On failure,
 *    quantkv_last_error_message() gives the library's message for the calling thread
 *    ("q: expected rank 3 [T, H, D], got shape [5, 64]"); a successful call clears it.
 *  - No exception crosses this boundary: a C++ exception inside becomes QUANTKV_INTERNAL (or
 *    QUANTKV_RESOURCE_EXHAUSTED for an allocation failure) with its text as the message.
 *  - Tensors are plain structs (quantkv_tensor_t): data pointer, dtype, rank, shape and strides
 *    in elements. quantkv_tensor_contiguous() fills the row-major strides.
 *  - fp8 data may be given as QUANTKV_DTYPE_E4M3 or QUANTKV_DTYPE_U8; packed fp4 data and
 *    block scales are QUANTKV_DTYPE_U8 (two e2m1 values per byte, low nibble = even element).
 *  - A NULL context pointer means the defaults (all threads, 512 MiB scores budget).
 *  - Enumerations travel as int32_t (a fixed ABI width); a value outside its enum is rejected
 *    with QUANTKV_INVALID_ARGUMENT.
 * The C++ headers (quantkv/<op>.hpp) document the semantics; the contract gives the formulas.
 */
#ifndef QUANTKV_QUANTKV_H_
#define QUANTKV_QUANTKV_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ status */
typedef int32_t quantkv_status_t;
enum quantkv_status {
  QUANTKV_OK = 0,
  QUANTKV_INVALID_ARGUMENT = 1,   /* a shape, dtype, stride, value or pointer is wrong */
  QUANTKV_OUT_OF_RANGE = 2,       /* an index (page id, layer, position) is outside its tensor */
  QUANTKV_RESOURCE_EXHAUSTED = 3, /* a memory budget or allocation cannot be met */
  QUANTKV_UNIMPLEMENTED = 4,      /* valid, but not supported by this build or backend */
  QUANTKV_INTERNAL = 5            /* a bug or an unexpected exception: please report it */
};

/* "ok", "invalid argument", ... (static storage). */
const char* quantkv_status_name(quantkv_status_t status);
/* Message of the last failed call on this thread ("" when the last call succeeded). The
 * pointer stays valid until the next quantkv call on the same thread. */
const char* quantkv_last_error_message(void);

/* ------------------------------------------------------------------ version, ISA */
const char* quantkv_version_string(void); /* "0.1.0" */
void quantkv_version(int* major, int* minor, int* patch);

typedef int32_t quantkv_isa_level_t;
enum quantkv_isa_level {
  QUANTKV_ISA_SCALAR = 0,
  QUANTKV_ISA_AVX2 = 1,         /* x86-64: AVX2 + FMA + F16C */
  QUANTKV_ISA_AVX512 = 2,       /* x86-64: AVX-512 F/BW/VL/DQ + VNNI + BF16 */
  QUANTKV_ISA_NEON = 3,         /* aarch64: Advanced SIMD */
  QUANTKV_ISA_NEON_DOTPROD = 4, /* aarch64: + ARMv8.2 dotprod */
  QUANTKV_ISA_NEON_BF16 = 5     /* aarch64: + dotprod + BF16 */
};

quantkv_isa_level_t quantkv_get_isa_level(void);
quantkv_isa_level_t quantkv_max_supported_isa(void);
/* Fails with QUANTKV_INVALID_ARGUMENT when the CPU lacks the level. */
quantkv_status_t quantkv_set_isa_level(quantkv_isa_level_t level);
const char* quantkv_isa_level_name(quantkv_isa_level_t level);

/* ------------------------------------------------------------------ tensors */
#define QUANTKV_MAX_RANK 8

typedef int32_t quantkv_dtype_t;
enum quantkv_dtype {
  QUANTKV_DTYPE_F32 = 0,
  QUANTKV_DTYPE_BF16 = 1, /* uint16 bits */
  QUANTKV_DTYPE_F16 = 2,  /* uint16 bits, IEEE binary16 */
  QUANTKV_DTYPE_E4M3 = 3, /* float8_e4m3fn, one byte */
  QUANTKV_DTYPE_U8 = 4,   /* bytes: packed fp4, block scales, raw fp8 */
  QUANTKV_DTYPE_U32 = 5,
  QUANTKV_DTYPE_I32 = 6
};

const char* quantkv_dtype_name(quantkv_dtype_t dtype);
size_t quantkv_dtype_size(quantkv_dtype_t dtype); /* 0 for an unknown dtype */

/* A non-owning strided view; strides are in elements (not bytes). */
typedef struct quantkv_tensor {
  void* data;
  quantkv_dtype_t dtype;
  int32_t rank;
  int64_t shape[QUANTKV_MAX_RANK];
  int64_t strides[QUANTKV_MAX_RANK];
} quantkv_tensor_t;

/* A row-major contiguous view of `rank` (1..8) dimensions. */
quantkv_tensor_t quantkv_tensor_contiguous(void* data, quantkv_dtype_t dtype, int32_t rank,
                                           const int64_t* shape);

/* ------------------------------------------------------------------ context */
typedef struct quantkv_context {
  int32_t num_threads;          /* 0 = all available */
  uint64_t scores_budget_bytes; /* indexer score workspace bound; 0 = the default 512 MiB */
  void* cuda_stream;            /* cudaStream_t, NULL = default stream */
} quantkv_context_t;

/* ------------------------------------------------------------------ paged KV cache view */
/* The contract §2 layout, row-major:
 *   blocks        [num_blocks, kv_dim, num_layers, page_size, num_heads, head_size] of dtype
 *   scales        float32 [..., num_heads, ceil(head_size / scale_granularity)] or NULL
 *   cache_lengths uint32 [batch_size]
 *   lookup_table  uint32 [batch_size, max_pages_per_seq]; entries >= num_blocks: no page */
typedef struct quantkv_paged_kv {
  void* blocks;
  quantkv_dtype_t dtype; /* F32, BF16, F16 or E4M3 */
  int64_t num_blocks;
  int64_t kv_dim; /* 2: K and V, 1: K only */
  int64_t num_layers;
  int64_t page_size;
  int64_t num_heads;
  int64_t head_size;
  float* scales;
  int64_t scale_granularity; /* elements per scale along head_size (when scales != NULL) */
  const uint32_t* cache_lengths;
  const uint32_t* lookup_table;
  int64_t batch_size;
  int64_t max_pages_per_seq;
} quantkv_paged_kv_t;

/* ------------------------------------------------------------------ owning paged KV cache */
typedef struct quantkv_cache quantkv_cache_t; /* opaque */

typedef struct quantkv_cache_config {
  quantkv_dtype_t dtype;
  int64_t num_blocks;
  int64_t kv_dim;
  int64_t num_layers;
  int64_t page_size;
  int64_t num_heads;
  int64_t head_size;
  int64_t scale_granularity; /* 0: no scales tensor */
  int64_t batch_size;
  int64_t max_pages_per_seq;
} quantkv_cache_config_t;

/* The C++ defaults: bf16, kv_dim 2, 1 layer, page 16, 1 head of 128, batch 1, 1 page/seq,
 * num_blocks 0 (must be set). */
quantkv_cache_config_t quantkv_cache_config_default(void);
/* Allocates zeroed storage; pages are handed out from a pool shuffled with `seed`. */
quantkv_status_t quantkv_cache_create(const quantkv_cache_config_t* config, uint64_t seed,
                                      quantkv_cache_t** out);
void quantkv_cache_destroy(quantkv_cache_t* cache); /* NULL is a no-op */
/* Gives sequence b pages so that positions [0, num_positions) are backed. */
quantkv_status_t quantkv_cache_reserve(quantkv_cache_t* cache, int64_t b, int64_t num_positions);
/* Marks `length` tokens of sequence b as cached (they must be reserved). */
quantkv_status_t quantkv_cache_set_cache_length(quantkv_cache_t* cache, int64_t b, int64_t length);
quantkv_status_t quantkv_cache_get_cache_length(const quantkv_cache_t* cache, int64_t b,
                                                uint32_t* length);
quantkv_status_t quantkv_cache_pages_used(const quantkv_cache_t* cache, int64_t b, int64_t* pages);
int64_t quantkv_cache_free_pages(const quantkv_cache_t* cache);
/* The view the operations take; valid while the cache lives. */
quantkv_status_t quantkv_cache_view(quantkv_cache_t* cache, quantkv_paged_kv_t* view);
/* Element (b, pos, kv, layer, head, d) decoded to float; its page must be assigned. */
quantkv_status_t quantkv_cache_get(const quantkv_cache_t* cache, int64_t b, int64_t pos, int64_t kv,
                                   int64_t layer, int64_t head, int64_t d, float* value);
/* Scale of that element (caches with scales). */
quantkv_status_t quantkv_cache_get_scale(const quantkv_cache_t* cache, int64_t b, int64_t pos,
                                         int64_t kv, int64_t layer, int64_t head, int64_t d,
                                         float* scale);

/* ------------------------------------------------------------------ codecs (contract §1) */
/* Scalar conversions, bit-exact with CUDA's host conversions. */
float quantkv_e4m3_to_float(uint8_t bits);
uint8_t quantkv_float_to_e4m3(float x); /* RNE, saturating to ±448, NaN -> 0x7F */
float quantkv_e8m0_to_float(uint8_t bits);
uint8_t quantkv_float_to_e8m0(float x); /* rounds up to a power of two */
float quantkv_e2m1_to_float(uint8_t code);
uint8_t quantkv_float_to_e2m1(float x); /* RNE, saturating to ±6, one 4-bit code */
float quantkv_bf16_to_float(uint16_t bits);
uint16_t quantkv_float_to_bf16(float x);
float quantkv_fp16_to_float(uint16_t bits);
uint16_t quantkv_float_to_fp16(float x);
/* Bulk: n values. pack_e2m1 needs n even and writes n/2 bytes (low nibble = even element). */
quantkv_status_t quantkv_encode_e4m3(const float* src, uint8_t* dst, int64_t n);
quantkv_status_t quantkv_decode_e4m3(const uint8_t* src, float* dst, int64_t n);
quantkv_status_t quantkv_pack_e2m1(const float* src, uint8_t* dst, int64_t n);
quantkv_status_t quantkv_unpack_e2m1(const uint8_t* src, float* dst, int64_t n);

/* ------------------------------------------------------------------ scale layout (contract §4) */
/* linear U8 [R, Kb] (any strides) -> swizzled U8 [ceil(R/128), ceil(Kb/4), 32, 4, 4]
 * (contiguous; padding written as zeros). */
quantkv_status_t quantkv_linear_to_swizzled_scales(const quantkv_tensor_t* linear,
                                                   const quantkv_tensor_t* swizzled);
/* swizzled 5-D (contiguous) -> linear [R, Kb]; padding is not read. */
quantkv_status_t quantkv_swizzled_to_linear_scales(const quantkv_tensor_t* swizzled,
                                                   const quantkv_tensor_t* linear);
/* Elements of the swizzled tensor for R rows and Kb scale columns. */
int64_t quantkv_swizzled_scale_elements(int64_t rows, int64_t kb_count);
/* The 5-D swizzled shape for R rows and Kb scale columns:
 * shape = {ceil(R/128), ceil(Kb/4), 32, 4, 4}. INVALID_ARGUMENT (shape untouched) for a null
 * shape or a negative count. */
quantkv_status_t quantkv_swizzled_scale_shape(int64_t rows, int64_t kb_count, int64_t shape[5]);

/* ------------------------------------------------------------------ quantisation (contract §5) */
typedef int32_t quantkv_block_format_t;
enum quantkv_block_format {
  QUANTKV_NVFP4 = 0, /* packed e2m1, e4m3 scales, 16 values per scale */
  QUANTKV_MXFP4 = 1, /* packed e2m1, e8m0 scales, 32 values per scale */
  QUANTKV_MXFP8 = 2  /* e4m3 (one byte per value), e8m0 scales, 32 values per scale */
};

/* Values per scale (16 or 32); bytes of a row of k values (k/2 for fp4, k for MXFP8). */
int quantkv_sf_vector_size(quantkv_block_format_t format);
int64_t quantkv_row_bytes(quantkv_block_format_t format, int64_t k);

/* x F32 or BF16 [M, K] -> data U8 [M, row_bytes(K)] and scales U8 5-D swizzled (R = M,
 * Kb = K / SFV). global_scale: the global multiplier g = 448*6 / amax (NVFP4 only). */
quantkv_status_t quantkv_quantize_dynamic_block_scaled(
    const quantkv_tensor_t* x, float global_scale, quantkv_block_format_t format,
    const quantkv_tensor_t* data, const quantkv_tensor_t* scales, const quantkv_context_t* ctx);

/* ------------------------------------------------------------------ indexer (contract §3, §5) */
typedef int32_t quantkv_mask_t;
enum quantkv_mask { QUANTKV_MASK_NULL = 0, QUANTKV_MASK_CAUSAL = 1 };

/* "null", "causal", "MaskName.CAUSAL", "no_mask", "none" (case-insensitive). */
quantkv_status_t quantkv_parse_mask(const char* text, quantkv_mask_t* mask);

typedef int32_t quantkv_scale_mode_t;
enum quantkv_scale_mode {
  QUANTKV_SCALE_FLOAT = 0,       /* s = amax / 448 */
  QUANTKV_SCALE_POWER_OF_TWO = 1 /* s rounded up to a power of two (DeepSeek-V3.2) */
};

/* output_indices I32 [T, top_k]; q E4M3/U8 [T, H, D]; q_s F32 [T, H];
 * input_row_offsets U32 [B + 1]; k_collection: e4m3 cache, 1 head, one scale per token. */
quantkv_status_t quantkv_mla_indexer_ragged_float8_paged(
    const quantkv_tensor_t* output_indices, const quantkv_tensor_t* q, const quantkv_tensor_t* q_s,
    const quantkv_tensor_t* input_row_offsets, const quantkv_paged_kv_t* k_collection,
    uint32_t layer_idx, quantkv_mask_t mask, const quantkv_context_t* ctx);

/* k F32 or BF16 [T, D] quantised per token and stored at cache_len[b] + i. */
quantkv_status_t quantkv_indexer_k_store(const quantkv_tensor_t* k,
                                         const quantkv_tensor_t* input_row_offsets,
                                         const quantkv_paged_kv_t* k_collection, uint32_t layer_idx,
                                         quantkv_scale_mode_t scale_mode,
                                         const quantkv_context_t* ctx);

/* q F32 [T, H, D], weights F32 [T, H] -> q_fp8 E4M3/U8 [T, H, D], q_s F32 [T, H]. */
quantkv_status_t quantkv_indexer_q_prepare(
    const quantkv_tensor_t* q, const quantkv_tensor_t* weights, const quantkv_tensor_t* q_fp8,
    const quantkv_tensor_t* q_s, quantkv_scale_mode_t scale_mode, const quantkv_context_t* ctx);

/* ------------------------------------------------------------------ fused QKV (contract §4) */
/* hidden_state U8 [M, row_bytes(K)]; input_row_offsets U32 [B + 1]; weight U8 [N, row_bytes(K)];
 * input_scale / weight_scale U8 5-D swizzled; output BF16 [M, q_dim].
 * tensor_sf: the GEMM factor 1 / (g_a * g_w) (the inverse of the quantiser's global_scale
 * product); MXFP8 requires 1. */
quantkv_status_t quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    const quantkv_tensor_t* hidden_state, const quantkv_tensor_t* input_row_offsets,
    const quantkv_tensor_t* weight, const quantkv_tensor_t* input_scale,
    const quantkv_tensor_t* weight_scale, float tensor_sf, const quantkv_paged_kv_t* kv_collection,
    uint32_t layer_idx, const quantkv_tensor_t* output, quantkv_block_format_t format,
    const quantkv_context_t* ctx);

/* One GEMM factor per column section (q, k, v). */
typedef struct quantkv_section_scales {
  float q, k, v;
} quantkv_section_scales_t;

quantkv_status_t quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4_sections(
    const quantkv_tensor_t* hidden_state, const quantkv_tensor_t* input_row_offsets,
    const quantkv_tensor_t* weight, const quantkv_tensor_t* input_scale,
    const quantkv_tensor_t* weight_scale, quantkv_section_scales_t section_sf,
    const quantkv_paged_kv_t* kv_collection, uint32_t layer_idx, const quantkv_tensor_t* output,
    quantkv_block_format_t format, const quantkv_context_t* ctx);

/* Prepared weights: the weight and its scales repacked once into the layout the CPU kernels
 * stream (internal, version-specific), for models that run the projection many times. */
typedef struct quantkv_prepared_qkv_weights quantkv_prepared_qkv_weights_t; /* opaque */

/* weight U8 [N, row_bytes(K)], weight_scale U8 5-D swizzled (R = N) -> *out (owned by the
 * caller: quantkv_prepared_qkv_weights_destroy). */
quantkv_status_t quantkv_prepare_qkv_weights(const quantkv_tensor_t* weight,
                                             const quantkv_tensor_t* weight_scale,
                                             quantkv_block_format_t format,
                                             const quantkv_context_t* ctx,
                                             quantkv_prepared_qkv_weights_t** out);
void quantkv_prepared_qkv_weights_destroy(quantkv_prepared_qkv_weights_t* weights); /* NULL ok */
/* N, K and the format of prepared weights. */
quantkv_status_t quantkv_prepared_qkv_weights_info(const quantkv_prepared_qkv_weights_t* weights,
                                                   int64_t* n, int64_t* k,
                                                   quantkv_block_format_t* format);

/* The fused projection on prepared weights (their format is the prepared one); the result is
 * bit-identical to the plain entry points. */
quantkv_status_t quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4_prepared(
    const quantkv_tensor_t* hidden_state, const quantkv_tensor_t* input_row_offsets,
    const quantkv_prepared_qkv_weights_t* weight, const quantkv_tensor_t* input_scale,
    quantkv_section_scales_t section_sf, const quantkv_paged_kv_t* kv_collection,
    uint32_t layer_idx, const quantkv_tensor_t* output, const quantkv_context_t* ctx);

/* Weight-only (bf16 activations) fused projection on prepared weights (docs/checkpoints.md):
 * hidden_state BF16 [M, K]; section_sf holds the weight's own factors (1 / g_w per section). */
quantkv_status_t quantkv_fused_qkv_matmul_weight_only(
    const quantkv_tensor_t* hidden_state, const quantkv_tensor_t* input_row_offsets,
    const quantkv_prepared_qkv_weights_t* weight, quantkv_section_scales_t section_sf,
    const quantkv_paged_kv_t* kv_collection, uint32_t layer_idx, const quantkv_tensor_t* output,
    const quantkv_context_t* ctx);

/* ------------------------------------------------------------------ linear layers */
/* The plain block-scaled linear layer y = x . W^T (+ bias) of quantkv/linear.hpp on prepared
 * weights (the same opaque type as the fused QKV's: one GEMM core; docs/linear.md). */
typedef quantkv_prepared_qkv_weights_t quantkv_prepared_weights_t;

/* A weight as checkpoints hold it: data U8/E4M3 [N, row_bytes(K)] and exactly one of scale (U8
 * 5-D swizzled, R = N) and scale_rows (U8 [N, K / SF_VECTOR_SIZE], row-major). */
typedef struct quantkv_weight_source {
  const quantkv_tensor_t* data;
  const quantkv_tensor_t* scale;      /* or NULL */
  const quantkv_tensor_t* scale_rows; /* or NULL */
  quantkv_block_format_t format;
} quantkv_weight_source_t;
/* -> *out (owned by the caller: quantkv_prepared_qkv_weights_destroy). */
quantkv_status_t quantkv_prepare_weights(const quantkv_weight_source_t* source,
                                         const quantkv_context_t* ctx,
                                         quantkv_prepared_weights_t** out);

/* One call per layer; NULL for a part not used. Activations: x U8/E4M3 [M, row_bytes(K)] with
 * x_scale U8 5-D swizzled (W4A4 NVFP4 / MXFP4, MXFP8), or x_bf16 BF16 [M, K] (weight-only).
 * alpha: every column's factor (1 / (g_x g_w) W4A4 NVFP4, 1 / g_w weight-only NVFP4, 1 for MX),
 * unless column_alpha F32 [N] gives one per column. bias F32 or BF16 [N]. y BF16 or F32 [M, N]:
 * its dtype chooses the output. */
typedef struct quantkv_linear_args {
  const quantkv_tensor_t* x;
  const quantkv_tensor_t* x_scale;
  const quantkv_tensor_t* x_bf16;
  const quantkv_prepared_weights_t* weight;
  float alpha;
  const quantkv_tensor_t* column_alpha;
  const quantkv_tensor_t* bias;
  const quantkv_tensor_t* y;
} quantkv_linear_args_t;
quantkv_status_t quantkv_linear(const quantkv_linear_args_t* args, const quantkv_context_t* ctx);

/* ------------------------------------------------------------------ fused experts */
/* The mixture-of-experts layer of quantkv/moe.hpp (docs/moe.md): per token its top-k experts'
 * gated MLPs on prepared block-scaled weights, combined with the router's weights. */
typedef struct quantkv_prepared_experts quantkv_prepared_experts_t; /* opaque */

/* Stacked experts: w13 U8/E4M3 [E, 2I, row_bytes(H)] (gate and up), w13_scale U8
 * [E, 2I, H / SF_VECTOR_SIZE] row-major, w2 U8/E4M3 [E, H, row_bytes(I)], w2_scale U8
 * [E, H, I / SF_VECTOR_SIZE]. The factors F32 [E] or NULL (1 each): w13_alpha, w2_alpha the
 * weights' own factors (1 / g_w NVFP4, 1 MX), x_global, h_global the NVFP4 activation global
 * scales of the quantised mode (1 for MX); w3_alpha up's own factor where gate and up were
 * quantised with different global scales (NULL: w13_alpha for both halves). */
typedef struct quantkv_experts_source {
  const quantkv_tensor_t* w13;
  const quantkv_tensor_t* w13_scale;
  const quantkv_tensor_t* w2;
  const quantkv_tensor_t* w2_scale;
  quantkv_block_format_t format;
  const quantkv_tensor_t* w13_alpha; /* or NULL */
  const quantkv_tensor_t* w2_alpha;  /* or NULL */
  const quantkv_tensor_t* x_global;  /* or NULL */
  const quantkv_tensor_t* h_global;  /* or NULL */
  const quantkv_tensor_t* w3_alpha;  /* or NULL */
} quantkv_experts_source_t;
/* -> *out (owned by the caller: quantkv_prepared_experts_destroy). */
quantkv_status_t quantkv_prepare_experts(const quantkv_experts_source_t* source,
                                         const quantkv_context_t* ctx,
                                         quantkv_prepared_experts_t** out);
void quantkv_prepared_experts_destroy(quantkv_prepared_experts_t* experts);

typedef int32_t quantkv_gate_up_layout_t;
enum quantkv_gate_up_layout {
  QUANTKV_GATE_UP_HALVES = 0,     /* rows [0, I) gate, [I, 2I) up */
  QUANTKV_GATE_UP_INTERLEAVED = 1 /* gate and up alternate row by row (gpt-oss) */
};
typedef int32_t quantkv_moe_activation_t;
enum quantkv_moe_activation {
  QUANTKV_MOE_SILU_GATED = 0, /* silu(gate) * up */
  QUANTKV_MOE_SWIGLU_OAI = 1  /* gpt-oss: swiglu_alpha 1.702, swiglu_limit 7 */
};
/* x BF16 [T, H], topk_ids I32 [T, k], topk_weights F32 [T, k]; ids outside
 * [expert_offset, expert_offset + E) are skipped. quantize_activations != 0: W4A4 / W8A8 (x and
 * h quantised per routed row), else weight-only. swiglu_alpha / swiglu_limit are read by
 * QUANTKV_MOE_SWIGLU_OAI only. w13_bias F32 [E, 2I], w2_bias F32 [E, H] or NULL. y BF16 or F32
 * [T, H]: its dtype chooses the output. */
typedef struct quantkv_fused_experts_args {
  const quantkv_tensor_t* x;
  const quantkv_tensor_t* topk_ids;
  const quantkv_tensor_t* topk_weights;
  const quantkv_prepared_experts_t* experts;
  int64_t expert_offset;
  int32_t quantize_activations;
  quantkv_gate_up_layout_t gate_up;
  quantkv_moe_activation_t activation;
  float swiglu_alpha;
  float swiglu_limit;
  const quantkv_tensor_t* w13_bias; /* or NULL */
  const quantkv_tensor_t* w2_bias;  /* or NULL */
  const quantkv_tensor_t* y;
} quantkv_fused_experts_args_t;
quantkv_status_t quantkv_fused_experts(const quantkv_fused_experts_args_t* args,
                                       const quantkv_context_t* ctx);

/* Checkpoint layouts (docs/checkpoints.md). */
typedef int32_t quantkv_checkpoint_format_t;
enum quantkv_checkpoint_format {
  QUANTKV_CHECKPOINT_NVFP4_COMPRESSED_TENSORS = 0,
  QUANTKV_CHECKPOINT_NVFP4_MODELOPT = 1,
  QUANTKV_CHECKPOINT_MXFP4 = 2,
  QUANTKV_CHECKPOINT_MXFP8 = 3,
  QUANTKV_CHECKPOINT_MXFP4_COMPRESSED_TENSORS = 4, /* weight_packed + e8m0 weight_scale */
};

typedef struct quantkv_qkv_checkpoint_info {
  quantkv_checkpoint_format_t format;
  int64_t q_rows, k_rows, v_rows;
  quantkv_section_scales_t weight_factor; /* the weight-only section_sf */
  quantkv_section_scales_t gemm_scales;   /* the W4A4 section_sf: weight_factor / input_global */
  float input_global;                     /* the activation quantiser's global_scale */
} quantkv_qkv_checkpoint_info_t;

/* Loads PREFIX.q_proj/.k_proj/.v_proj of a checkpoint into prepared weights (owned by the
 * caller: quantkv_prepared_qkv_weights_destroy) and `info` (NULL ok). PATH is a .safetensors
 * file (memory-mapped), a sharded checkpoint's index (*.json: its weight_map names each
 * tensor's file) or a directory holding either (docs/checkpoints.md). */
quantkv_status_t quantkv_load_qkv_checkpoint(const char* path, const char* prefix,
                                             const quantkv_context_t* ctx,
                                             quantkv_prepared_qkv_weights_t** weights,
                                             quantkv_qkv_checkpoint_info_t* info);
/* The same from one fused projection PROJECTION (e.g. "model.layers.0.self_attn.qkv_proj"),
 * rows [q; k; v] of q_rows, k_rows, v_rows (each >= 1, summing to its N); global scales of
 * shape [] / [1] (the whole tensor) or [3] (per section). */
quantkv_status_t quantkv_load_fused_qkv_checkpoint(const char* path, const char* projection,
                                                   int64_t q_rows, int64_t k_rows, int64_t v_rows,
                                                   const quantkv_context_t* ctx,
                                                   quantkv_prepared_qkv_weights_t** weights,
                                                   quantkv_qkv_checkpoint_info_t* info);
/* How one layer's experts are stored (quantkv/checkpoint.hpp's ExpertsCheckpointLayout). */
typedef int32_t quantkv_experts_layout_t;
enum quantkv_experts_layout {
  QUANTKV_EXPERTS_AUTO = 0,      /* detect from the tensor names (stacked first, then per expert) */
  QUANTKV_EXPERTS_GPT_OSS = 1,   /* MXFP4 stacked, gate/up interleaved: PREFIX.gate_up_proj_blocks
                                    ... (Hugging Face) or PREFIX.mlp1_weight.* (gpt-oss) */
  QUANTKV_EXPERTS_PER_EXPERT = 2 /* PREFIX.{e}.gate_proj / up_proj / down_proj (or w1 / w3 / w2) */
};

/* What a loaded layer needs besides the prepared experts. w13_bias ([E, 2I]) and w2_bias
 * ([E, H]) point into the prepared experts' handle (fp32, row-major; NULL when the checkpoint
 * has none) and live as long as it. */
typedef struct quantkv_experts_checkpoint_info {
  quantkv_checkpoint_format_t format;
  quantkv_experts_layout_t layout; /* the layout found */
  int64_t num_experts, hidden, intermediate;
  quantkv_gate_up_layout_t gate_up;
  quantkv_moe_activation_t activation; /* the layout's convention (gpt-oss: SWIGLU_OAI) */
  const float* w13_bias;
  const float* w2_bias;
} quantkv_experts_checkpoint_info_t;

/* Loads the experts under PREFIX ("model.layers.0.mlp.experts", "block.0.mlp": the names
 * `quantkv inspect` lists) of the checkpoint at PATH (a file, an index or a directory, as
 * quantkv_load_qkv_checkpoint) in LAYOUT into prepared experts (owned by the caller:
 * quantkv_prepared_experts_destroy) and `info` (NULL ok). Nothing is written on failure but
 * *experts = NULL. */
quantkv_status_t quantkv_load_experts_checkpoint(const char* path, const char* prefix,
                                                 quantkv_experts_layout_t layout,
                                                 const quantkv_context_t* ctx,
                                                 quantkv_prepared_experts_t** experts,
                                                 quantkv_experts_checkpoint_info_t* info);

/* ------------------------------------------------------------------ RoPE and the indexer front end
 */
typedef int32_t quantkv_rope_layout_t;
enum quantkv_rope_layout {
  QUANTKV_ROPE_INTERLEAVED = 0, /* pairs (x[2i], x[2i+1]) */
  QUANTKV_ROPE_HALF_SPLIT = 1   /* pairs (x[i], x[i + rope_dim/2]) */
};
typedef int32_t quantkv_rope_placement_t;
enum quantkv_rope_placement {
  QUANTKV_ROPE_TRAILING = 0, /* the last rope_dim elements of a row (MAX, DeepSeek's MLA) */
  QUANTKV_ROPE_LEADING = 1   /* the first rope_dim (DeepSeek-V3.2's indexer) */
};
/* freqs_cis F32 [max_seq_len, rope_dim]: (cos, sin) of pair i at columns 2i, 2i+1;
 * position_ids U32 [T] or NULL (positions cache_len[b] + i). */
typedef struct quantkv_rope_options {
  const quantkv_tensor_t* freqs_cis;
  const quantkv_tensor_t* position_ids;
  quantkv_rope_layout_t layout;
  quantkv_rope_placement_t placement;
} quantkv_rope_options_t;

/* MAX's fused_qk_rope_ragged: q_proj F32 or BF16 [T, Hq, D] -> output (same dtype) [T, Hq, D]
 * with the rope part rotated; the rope part of K at cache_len[b] + i rotated in place (any cache
 * dtype). */
quantkv_status_t quantkv_fused_qk_rope_ragged(const quantkv_tensor_t* q_proj,
                                              const quantkv_tensor_t* input_row_offsets,
                                              const quantkv_paged_kv_t* kv_collection,
                                              const quantkv_rope_options_t* options,
                                              uint32_t layer_idx, const quantkv_tensor_t* output,
                                              const quantkv_context_t* ctx);

typedef int32_t quantkv_hadamard_t;
enum quantkv_hadamard {
  QUANTKV_HADAMARD_NONE = 0,
  QUANTKV_HADAMARD_WALSH = 1 /* x -> H_D x * D^-0.5, D a power of two */
};
typedef int32_t quantkv_front_end_rounding_t;
enum quantkv_front_end_rounding {
  QUANTKV_ROUND_BF16_STEPS = 0, /* each step's output rounded to bf16, as the reference */
  QUANTKV_ROUND_FLOAT32 = 1
};
/* DeepSeek-V3.2's indexer front end (docs/rope.md): RoPE, the Hadamard rotation, roundings. */
typedef struct quantkv_indexer_front_end {
  int32_t apply_rope; /* 0 or 1 */
  quantkv_rope_options_t rope;
  quantkv_hadamard_t hadamard;
  quantkv_front_end_rounding_t rounding;
} quantkv_indexer_front_end_t;

/* quantkv_indexer_k_store with the front end applied to each row first. */
quantkv_status_t quantkv_indexer_k_store_front_end(
    const quantkv_tensor_t* k, const quantkv_tensor_t* input_row_offsets,
    const quantkv_paged_kv_t* k_collection, uint32_t layer_idx, quantkv_scale_mode_t scale_mode,
    const quantkv_indexer_front_end_t* front_end, const quantkv_context_t* ctx);
/* quantkv_indexer_q_prepare with the front end (q F32 or BF16; RoPE needs position_ids). */
quantkv_status_t quantkv_indexer_q_prepare_front_end(
    const quantkv_tensor_t* q, const quantkv_tensor_t* weights, const quantkv_tensor_t* q_fp8,
    const quantkv_tensor_t* q_s, quantkv_scale_mode_t scale_mode,
    const quantkv_indexer_front_end_t* front_end, const quantkv_context_t* ctx);
/* ------------------------------------------------------------------ engine layout, global slots */
typedef int32_t quantkv_index_k_format_t;
enum quantkv_index_k_format {
  QUANTKV_INDEX_K_FP8 = 0,   /* e4m3 row of D bytes + one float32 scale per token */
  QUANTKV_INDEX_K_MXFP4 = 1, /* D/2 e2m1 bytes + D/32 ue8m0 bytes per token (DeepSeek-V4) */
  QUANTKV_INDEX_K_NVFP4 = 2  /* D/2 e2m1 bytes + D/16 e4m3 bytes per token, global_scale */
};

/* One layer's indexer K cache as vLLM / SGLang / DeepGEMM (fp8_paged_mqa_logits) keep it: one
 * paged byte buffer, 4-byte aligned, each page holding its page_size e4m3 key rows (head_size
 * bytes each), then their page_size float32 scales (at byte page_size * head_size + 4 * slot).
 * With format QUANTKV_INDEX_K_MXFP4 (zero-initialised structs get fp8) the rows are
 * head_size / 2 bytes of e2m1 codes and the scales head_size / 32 ue8m0 bytes per slot; with
 * QUANTKV_INDEX_K_NVFP4 the same codes and head_size / 16 e4m3 bytes, and global_scale; no
 * alignment needed (docs/indexer.md, "MXFP4 K cache", "NVFP4 K cache").
 *   data          uint8 [num_blocks, page_stride_bytes]; page_stride_bytes 0: packed,
 *                 page_size * (head_size + 4), or page_size * (head_size / 2 + head_size / 32
 *                 or head_size / 16)
 *   cache_lengths uint32 [batch_size]
 *   block_table   [batch_size, max_pages_per_seq] of U32 or I32 (block_table_dtype); entries
 *                 >= num_blocks, or negative int32 (e.g. -1), mean no page */
typedef struct quantkv_engine_k_cache {
  uint8_t* data;
  int64_t num_blocks;
  int64_t page_size;
  int64_t head_size;
  int64_t page_stride_bytes;
  const uint32_t* cache_lengths;
  const void* block_table;
  quantkv_dtype_t block_table_dtype; /* QUANTKV_DTYPE_U32 or QUANTKV_DTYPE_I32 */
  int64_t batch_size;
  int64_t max_pages_per_seq;
  quantkv_index_k_format_t format; /* QUANTKV_INDEX_K_FP8 (0), _MXFP4 or _NVFP4 */
  float global_scale;              /* QUANTKV_INDEX_K_NVFP4 only: the per-tensor scale g > 0 */
} quantkv_engine_k_cache_t;

typedef int32_t quantkv_index_output_t;
enum quantkv_index_output {
  QUANTKV_INDEX_POSITIONS = 0, /* positions within the sequence (contract §3) */
  QUANTKV_INDEX_GLOBAL_SLOTS =
      1 /* page id * page_size + slot (FlashMLA sparse attention); -1 tail kept */
};

/* The indexer over MAX's collection with a choice of output. input_row_offsets U32 or I32. */
quantkv_status_t quantkv_mla_indexer_ragged_float8_paged_output(
    const quantkv_tensor_t* output_indices, const quantkv_tensor_t* q, const quantkv_tensor_t* q_s,
    const quantkv_tensor_t* input_row_offsets, const quantkv_paged_kv_t* k_collection,
    uint32_t layer_idx, quantkv_mask_t mask, quantkv_index_output_t index_output,
    const quantkv_context_t* ctx);

/* The indexer over the engines' layout, read in place: the same indices as over a MAX
 * collection holding the same keys. input_row_offsets U32 or I32. */
quantkv_status_t quantkv_mla_indexer_ragged_float8_paged_engine(
    const quantkv_tensor_t* output_indices, const quantkv_tensor_t* q, const quantkv_tensor_t* q_s,
    const quantkv_tensor_t* input_row_offsets, const quantkv_engine_k_cache_t* k_cache,
    quantkv_mask_t mask, quantkv_index_output_t index_output, const quantkv_context_t* ctx);

/* The K store into the engines' layout (bit-identical to quantkv_indexer_k_store). k F32 or
 * BF16 [T, D]; input_row_offsets U32 or I32. */
quantkv_status_t quantkv_indexer_k_store_engine(const quantkv_tensor_t* k,
                                                const quantkv_tensor_t* input_row_offsets,
                                                const quantkv_engine_k_cache_t* k_cache,
                                                quantkv_scale_mode_t scale_mode,
                                                const quantkv_context_t* ctx);

/* ------------------------------------------------------------------ the K store as one call */
/* quantkv::indexer_k_store(IndexerKStoreArgs): every form of the K store in one call, including
 * the front end over the engines' layout, which the functions above lack. Exactly one of
 * k_collection (MAX's cache, layer layer_idx) and k_cache (the engines' layout) is set; k F32 or
 * BF16 [T, D]; input_row_offsets U32 or I32 [B + 1]; front_end NULL or DeepSeek-V3.2's steps. */
typedef struct quantkv_indexer_k_store_args {
  const quantkv_tensor_t* k;
  const quantkv_tensor_t* input_row_offsets;
  const quantkv_paged_kv_t* k_collection; /* or NULL */
  uint32_t layer_idx;
  const quantkv_engine_k_cache_t* k_cache; /* or NULL */
  quantkv_scale_mode_t scale_mode;
  const quantkv_indexer_front_end_t* front_end; /* or NULL */
} quantkv_indexer_k_store_args_t;
quantkv_status_t quantkv_indexer_k_store_call(const quantkv_indexer_k_store_args_t* args,
                                              const quantkv_context_t* ctx);

/* ------------------------------------------------------------------ the Q prepare as one call */
/* quantkv::indexer_q_prepare(IndexerQPrepareArgs): q F32 or BF16 [T, H, D], weights F32 [T, H]
 * -> q_fp8 E4M3/U8 [T, H, D], q_s F32 [T, H]; front_end NULL or DeepSeek-V3.2's steps (RoPE
 * needs rope.position_ids). The same bytes as quantkv_indexer_q_prepare(_front_end). */
typedef struct quantkv_indexer_q_prepare_args {
  const quantkv_tensor_t* q;
  const quantkv_tensor_t* weights;
  const quantkv_tensor_t* q_fp8;
  const quantkv_tensor_t* q_s;
  quantkv_scale_mode_t scale_mode;
  const quantkv_indexer_front_end_t* front_end; /* or NULL */
} quantkv_indexer_q_prepare_args_t;
quantkv_status_t quantkv_indexer_q_prepare_call(const quantkv_indexer_q_prepare_args_t* args,
                                                const quantkv_context_t* ctx);

/* ------------------------------------------------------------------ the indexer as one call */
/* What one indexer call took (quantkv::IndexerTimings). */
typedef struct quantkv_indexer_timings {
  double score_seconds;    /* staging q, repacking K, computing the scores */
  double topk_seconds;     /* selecting and ordering the top_k of every row */
  int64_t chunks;          /* token chunks the scores budget required */
  int64_t workspace_bytes; /* extra memory used */
} quantkv_indexer_timings_t;
/* quantkv::mla_indexer(MlaIndexerArgs): every form of the indexer in one call. output_indices
 * I32 [T, top_k]; q E4M3/U8 [T, H, D]; q_s F32 [T, H]; input_row_offsets U32 or I32 [B + 1];
 * exactly one of k_collection (MAX's cache, layer layer_idx) and k_cache (the engines' layout);
 * index_output positions or global slots; timings NULL or filled. The same indices as
 * quantkv_mla_indexer_ragged_float8_paged_output / _engine. */
typedef struct quantkv_mla_indexer_args {
  const quantkv_tensor_t* output_indices;
  const quantkv_tensor_t* q;
  const quantkv_tensor_t* q_s;
  const quantkv_tensor_t* input_row_offsets;
  const quantkv_paged_kv_t* k_collection; /* or NULL */
  uint32_t layer_idx;
  const quantkv_engine_k_cache_t* k_cache; /* or NULL */
  quantkv_mask_t mask;
  quantkv_index_output_t index_output;
  quantkv_indexer_timings_t* timings; /* or NULL */
} quantkv_mla_indexer_args_t;
quantkv_status_t quantkv_mla_indexer_call(const quantkv_mla_indexer_args_t* args,
                                          const quantkv_context_t* ctx);

/* ------------------------------------------------------------------ sparse MLA attention */
/* quantkv::sparse_mla_attention (quantkv/sparse_mla.hpp, docs/sparse_mla.md): DeepSeek-V3.2's
 * attention over the top-k cache slots the indexer picked (QUANTKV_INDEX_GLOBAL_SLOTS), with
 * FlashMLA's sparse semantics. One shared latent head per slot of d_qk = d_v + d_rope values,
 * the first d_v of which are also the value. Per token t and head h, over the slots
 * s = indices[t, j], j < top_k (or j < topk_length[t]), s == -1 skipped:
 *   score_j = sm_scale * dot(q[t, h, :], kv[s, :]),  out[t, h, :] = softmax(score) . kv[s, :d_v],
 *   lse[t, h] = log(sum_j exp(score_j)); a token without a valid slot: out 0, lse -inf.
 * q BF16 [T, H, d_qk]; exactly one of kv BF16 [num_slots, d_qk] and kv_fp8 U8/E4M3
 * [num_slots, quantkv_sparse_mla_fp8_row_bytes(d_v, d_rope)] (FlashMLA's "fp8_ds_mla" row: d_v
 * e4m3 codes, d_v / 128 F32 scales, d_rope BF16 values; a paged cache [pages, page_size, row]
 * viewed as [pages * page_size, row]); indices I32 [T, top_k]; topk_length I32 [T] or NULL;
 * sm_scale finite; out BF16 [T, H, d_v] (sets d_v, hence d_rope = d_qk - d_v); lse F32 [T, H]
 * or NULL. */
typedef struct quantkv_sparse_mla_args {
  const quantkv_tensor_t* q;
  const quantkv_tensor_t* kv;     /* or NULL */
  const quantkv_tensor_t* kv_fp8; /* or NULL */
  const quantkv_tensor_t* indices;
  const quantkv_tensor_t* topk_length; /* or NULL */
  float sm_scale;
  const quantkv_tensor_t* out;
  const quantkv_tensor_t* lse; /* or NULL */
} quantkv_sparse_mla_args_t;
quantkv_status_t quantkv_sparse_mla_attention(const quantkv_sparse_mla_args_t* args,
                                              const quantkv_context_t* ctx);
/* Bytes of one fp8 latent-cache row: d_v + 4 * (d_v / 128) + 2 * d_rope (656 for 512 + 64). */
int64_t quantkv_sparse_mla_fp8_row_bytes(int64_t d_v, int64_t d_rope);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QUANTKV_QUANTKV_H_ */
