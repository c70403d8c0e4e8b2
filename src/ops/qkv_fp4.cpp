// generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4 (contract §4): validation, weight
// preparation, activation preparation and the dispatch of the per-ISA pair kernels
// (src/cpu/qkv_*_{scalar,avx2,avx512}.cpp).
#include "quantkv/qkv_fp4.hpp"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/out_of_memory.hpp"
#include "core/view_checks.hpp"
#include "cpu/kernels.hpp"
#include "ops/validate.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv {

namespace detail {
// The packer's write access to a prepared weight's buffers (read-only to users).
struct PreparedQkvAccess {
  static std::vector<uint8_t>& data(PreparedQkvWeights& w) { return w.data_; }
  static std::vector<uint16_t>& scales(PreparedQkvWeights& w) { return w.scales_; }
};
}  // namespace detail

namespace {

using cpu::kHalfCols;
using cpu::kPairCols;

std::string str(int64_t v) { return std::to_string(v); }

constexpr const char* kQkvName = "generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4";

// |scale| as a float: e4m3 scales are magnitudes (the sign bit is ignored, as MAX's reference
// does); e8m0 has no sign. NaN codes stay NaN.
float block_scale_magnitude(BlockFormat f, uint8_t code) {
  return has_e8m0_scales(f) ? e8m0_to_float(code) : e4m3_to_float(uint8_t(code & 0x7F));
}

Status validate_weight(TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> scale,
                       BlockFormat format, int64_t* k) {
  return ops::validate_qkv_weight(weight, scale, format, k);
}

// Q goes to `output` and K/V into the cache blocks while the activations, the metadata and
// (plain calls) `weight_ranges` are still being read: none of them may overlap the two.
// `hidden` and `input_scale` are the activations' ranges (input_scale empty for the
// weight-only call, whose activations are bf16).
Status check_written_ranges(const MemoryRange& hidden, TensorView<const uint32_t, 1> offs,
                            const MemoryRange& input_scale, const PagedKVCacheCollection& kv,
                            TensorView<bfloat16, 2> output,
                            std::initializer_list<MemoryRange> weight_ranges) {
  const MemoryRange blocks = memory_range("kv_collection.blocks", kv.blocks,
                                          kv.total_elements() * int64_t(dtype_size(kv.dtype)));
  const MemoryRange read[] = {hidden, input_scale, memory_range("input_row_offsets", offs),
                              memory_range("kv_collection.cache_lengths", kv.cache_lengths),
                              memory_range("kv_collection.lookup_table", kv.lookup_table)};
  for (const MemoryRange& written : {memory_range("output", output), blocks}) {
    QUANTKV_RETURN_IF_ERROR(
        check_no_overlap(written, {read[0], read[1], read[2], read[3], read[4]}));
    QUANTKV_RETURN_IF_ERROR(check_no_overlap(written, weight_ranges));
  }
  return check_no_overlap(memory_range("output", output), {blocks});
}

// The shared checks of everything but the weight, then one snapshot of the ragged metadata
// (validated, then the only copy read), then the aliasing of the written buffers.
Status validate_call(TensorView<const uint8_t, 2> hidden, TensorView<const uint32_t, 1> offs,
                     BlockFormat format, int64_t n, int64_t k,
                     TensorView<const uint8_t, 5> input_scale, const SectionScales& sf,
                     bool single_sf, const PagedKVCacheCollection& kv, uint32_t layer_idx,
                     TensorView<bfloat16, 2> output, CacheSnapshot* snap) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_qkv_call(hidden, format, n, k, input_scale, sf, single_sf,
                                                 kv, layer_idx, output));
  QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(kv, offs, hidden.shape[0], /*require_pages=*/false,
                                                "input_row_offsets", "kv_collection", snap));
  return check_written_ranges(memory_range("hidden_state", hidden), offs,
                              memory_range("input_scale", input_scale), kv, output, {});
}

// A prepared weight's buffers, read while the outputs are written.
MemoryRange prepared_data_range(const PreparedQkvWeights& w) {
  return memory_range("weight.data", w.data(), int64_t(w.data_bytes()));
}
MemoryRange prepared_scales_range(const PreparedQkvWeights& w) {
  return memory_range("weight.scales", w.scales(), int64_t(w.scale_count() * sizeof(uint16_t)));
}

// Element offsets of each row's K (and V) slot; -1 where the page is a sentinel.
void row_cache_bases(const PagedKVCacheCollection& kv, TensorView<const uint32_t, 1> offs,
                     uint32_t layer, std::vector<int64_t>* k_base, std::vector<int64_t>* v_base) {
  const int64_t batch = kv.batch_size();
  for (int64_t b = 0; b < batch; ++b) {
    for (uint32_t row = offs(b); row < offs(b + 1); ++row) {
      const int64_t pos = int64_t(kv.cache_lengths(b)) + (row - offs(b));
      const uint32_t page = kv.page_of(b, pos);
      const int64_t slot = pos % kv.page_size;
      const bool real = int64_t(page) < kv.num_blocks;
      (*k_base)[row] = real ? kv.element_offset(page, 0, layer, slot, 0, 0) : -1;
      if (kv.kv_dim == 2)
        (*v_base)[row] = real ? kv.element_offset(page, 1, layer, slot, 0, 0) : -1;
    }
  }
}

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};

// The activations in the kernels' form (see cpu::QkvActivations).
struct PreparedActivations {
  std::vector<uint32_t> units;
  std::vector<int32_t> corr;
  std::vector<float> scale;
  int groups = 0;
};

void prepare_activations(TensorView<const uint8_t, 2> hidden,
                         TensorView<const uint8_t, 5> input_scale, BlockFormat f, int64_t k,
                         int threads, PreparedActivations* a) {
  const int64_t m = hidden.shape[0];
  const int sfv = sf_vector_size(f);
  const int64_t kb_count = k / sfv;
  const bool fp4 = f != BlockFormat::kMXFP8;
  const int groups = fp4 ? sfv / 4 : sfv / 2;
  const int64_t tiles = (m + cpu::kRowTile - 1) / cpu::kRowTile;
  a->groups = groups;
  // Zero-filled: the padding rows of the last tile contribute 0 and are never stored.
  a->units.assign(std::size_t(tiles * kb_count * groups * cpu::kRowTile), 0);
  a->corr.assign(std::size_t(tiles * kb_count * cpu::kRowTile), 0);
  a->scale.assign(std::size_t(tiles * kb_count * cpu::kRowTile), 0.0f);
  const std::size_t row_units = std::size_t(k / (fp4 ? 4 : 2));  // a row's units in k order
  std::vector<uint32_t> rows(row_units *
                             std::size_t(threads));  // one per thread, before the region
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    uint32_t* row = rows.data() + row_units * std::size_t(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m; ++r) {
      const uint8_t* src = hidden.data + r * hidden.strides[0];
      if (fp4) {
        convert_e2m1_to_doubled_int8(src, reinterpret_cast<int8_t*>(row), k);
      } else {
        convert_e4m3_to_bf16(src, reinterpret_cast<uint16_t*>(row), k);
      }
      const int64_t tile_base = (r / cpu::kRowTile) * kb_count, lane = r % cpu::kRowTile;
      for (int64_t kb = 0; kb < kb_count; ++kb) {
        const int64_t block = (tile_base + kb) * cpu::kRowTile + lane;
        const uint8_t code = input_scale.data[swizzled_scale_offset(r, kb, kb_count)];
        const float mag = block_scale_magnitude(f, code);
        a->scale[block] = fp4 ? mag * 0.25f : mag;
        int32_t sum = 0;
        for (int g = 0; g < groups; ++g) {
          const uint32_t unit = row[kb * groups + g];
          a->units[((tile_base + kb) * groups + g) * cpu::kRowTile + lane] = unit;
          if (fp4) {
            int8_t c[4];
            std::memcpy(c, &unit, 4);
            sum += c[0] + c[1] + c[2] + c[3];
          }
        }
        a->corr[block] = -cpu::kFp4Bias * sum;
      }
    }
  }
}

// Weight-only activations: bf16 pairs as units (no block scale: sa' = 1), magnitudes below
// 2^-110 taken as zero so that no product with an e2m1 or e4m3 weight value, and no partial
// sum of such products, is subnormal (the bf16 dot product flushes those).
void prepare_bf16_activations(TensorView<const bfloat16, 2> hidden, int sfv, int threads,
                              PreparedActivations* a) {
  const int64_t m = hidden.shape[0], k = hidden.shape[1];
  const int64_t kb_count = k / sfv;
  const int groups = sfv / 2;
  const int64_t tiles = (m + cpu::kRowTile - 1) / cpu::kRowTile;
  a->groups = groups;
  a->units.assign(std::size_t(tiles * kb_count * groups * cpu::kRowTile), 0);
  a->corr.assign(std::size_t(tiles * kb_count * cpu::kRowTile), 0);
  a->scale.assign(std::size_t(tiles * kb_count * cpu::kRowTile), 0.0f);
  constexpr uint16_t kSmallest = 17 << 7;  // bf16 bits of 2^-110
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < m; ++r) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(hidden.data + r * hidden.strides[0]);
    const int64_t tile_base = (r / cpu::kRowTile) * kb_count, lane = r % cpu::kRowTile;
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      a->scale[(tile_base + kb) * cpu::kRowTile + lane] = 1.0f;
      for (int g = 0; g < groups; ++g) {
        uint16_t even = src[kb * sfv + 2 * g], odd = src[kb * sfv + 2 * g + 1];
        if ((even & 0x7FFF) < kSmallest) even = 0;
        if ((odd & 0x7FFF) < kSmallest) odd = 0;
        a->units[((tile_base + kb) * groups + g) * cpu::kRowTile + lane] =
            uint32_t(even) | (uint32_t(odd) << 16);
      }
    }
  }
}

// The GEMM's multiply-adds size its thread count.
int gemm_threads(const Context& ctx, int64_t m, const PreparedQkvWeights& w) {
  return threads_for_work(ctx, double(m) * double(w.n) * double(w.k), kMinMacsPerThread);
}

// One L2-sized panel per thread (32 K bytes for fp4, 64 K for bf16 panels).
std::size_t panel_bytes_for(BlockFormat panel_format, int64_t k) {
  return (cpu::qkv_panel_bytes(panel_format, k) + 63) / 64 * 64;
}

// The validated call on a prepared weight and prepared activations of m rows.
Status run_pairs(int64_t m, const PreparedActivations& acts, TensorView<const uint32_t, 1> offs,
                 const PreparedQkvWeights& w, const SectionScales& sf,
                 const PagedKVCacheCollection& kv, uint32_t layer, TensorView<bfloat16, 2> output,
                 cpu::QkvPairKernel kernel, std::size_t panel_bytes, int threads) {
  const int sfv = sf_vector_size(w.format);
  std::vector<int64_t> k_base(std::size_t(m), -1), v_base(kv.kv_dim == 2 ? std::size_t(m) : 0, -1);
  row_cache_bases(kv, offs, layer, &k_base, &v_base);

  cpu::QkvProblem p;
  p.format = w.format;
  p.m = m;
  p.k = w.k;
  p.sfv = sfv;
  p.kb_count = w.k / sfv;
  p.a = {acts.units.data(), acts.corr.data(), acts.scale.data(), acts.groups};
  p.w_data = w.data();
  p.w_scales = w.scales();
  p.epi.q_dim = output.shape[1];
  p.epi.kv_width = kv.num_heads * kv.head_size;
  p.epi.n = w.n;
  p.epi.sf_q = sf.q;
  p.epi.sf_k = sf.k;
  p.epi.sf_v = sf.v;
  p.epi.out = reinterpret_cast<uint16_t*>(output.data);
  p.epi.out_stride = output.strides[0];
  p.epi.cache = kv.blocks;
  p.epi.dtype = kv.dtype;
  p.epi.k_base = k_base.data();
  p.epi.v_base = kv.kv_dim == 2 ? v_base.data() : nullptr;

  // The panels are allocated before anything is written so a failed allocation leaves the
  // outputs untouched.
  std::unique_ptr<uint8_t, AlignedFree> panels(
      static_cast<uint8_t*>(std::aligned_alloc(64, panel_bytes * std::size_t(threads))));
  if (panels == nullptr) {
    return {StatusCode::kResourceExhausted,
            "workspace: cannot allocate " + str(int64_t(panel_bytes) * threads) + " bytes"};
  }
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    uint8_t* panel = panels.get() + panel_bytes * std::size_t(omp_get_thread_num());
    // Each pair is computed whole by whichever thread takes it, so dynamic scheduling keeps
    // the results independent of the thread count and absorbs uneven or preempted cores.
#pragma omp for schedule(dynamic, cpu::kPairsPerChunk)
    for (int64_t pair = 0; pair < w.n_pairs; ++pair) kernel(p, pair, panel);
  }
  return Status::Ok();
}

// The validated W4A4 / MXFP8 call on a prepared weight (`offs` and `kv`'s metadata are the
// snapshot's). Every allocation happens before the parallel regions.
Status run_prepared(TensorView<const uint8_t, 2> hidden, TensorView<const uint32_t, 1> offs,
                    const PreparedQkvWeights& w, TensorView<const uint8_t, 5> input_scale,
                    const SectionScales& sf, const PagedKVCacheCollection& kv, uint32_t layer,
                    TensorView<bfloat16, 2> output, const Context& ctx) {
  const int64_t m = hidden.shape[0];
  if (m == 0) return Status::Ok();
  // The activation unpacking streams the activations (its output, ~4 bytes per k, dominates
  // the traffic).
  PreparedActivations acts;
  prepare_activations(hidden, input_scale, w.format, w.k,
                      threads_for_work(ctx, double(m) * double(w.k) * 4.0, kMinBytesPerThread),
                      &acts);
  const cpu::QkvKernels& qkv = cpu::kernels().qkv;
  const cpu::QkvPairKernel kernel = w.format == BlockFormat::kMXFP8 ? qkv.mxfp8_pair : qkv.fp4_pair;
  return run_pairs(m, acts, offs, w, sf, kv, layer, output, kernel, panel_bytes_for(w.format, w.k),
                   gemm_threads(ctx, m, w));
}

Status repack_weights(TensorView<const uint8_t, 2> weight,
                      TensorView<const uint8_t, 5> weight_scale, BlockFormat format,
                      PreparedQkvWeights* out, const Context& ctx) {
  if (out == nullptr) return invalid_argument("out: pointer is null");
  int64_t k = 0;
  QUANTKV_RETURN_IF_ERROR(validate_weight(weight, weight_scale, format, &k));
  const int64_t n = weight.shape[0];
  const int sfv = sf_vector_size(format);
  const cpu::PreparedLayout layout(format, k);  // the one definition (src/cpu/qkv_kernels.hpp)
  const int64_t kb_count = layout.kb_count, block_bytes = layout.block_bytes;
  // Validated: from here on `out` is rewritten in place, reusing its buffers when they have
  // the size already (no page faults when a caller repacks into the same object again).
  PreparedQkvWeights& w = *out;
  std::vector<uint8_t>& packed = detail::PreparedQkvAccess::data(w);
  std::vector<uint16_t>& packed_scales = detail::PreparedQkvAccess::scales(w);
  const int64_t n_pairs = (n + kPairCols - 1) / kPairCols;
  try {
    packed.resize(std::size_t(n_pairs * layout.pair_data_bytes()));
    packed_scales.resize(std::size_t(n_pairs * layout.pair_scales()));
  } catch (const std::bad_alloc&) {
    w = PreparedQkvWeights{};  // a half-resized weight must not pass for a prepared one
    return resource_exhausted("out: cannot allocate the repacked weight of " + str(n) + " x " +
                              str(k));
  }
  w.format = format;
  w.n = n;
  w.k = k;
  w.n_pairs = n_pairs;
  const bool fp4 = format != BlockFormat::kMXFP8;
  // bf16 bits of |scale| for every code (exact: e4m3 and e8m0 values fit in bf16).
  uint16_t scale_bits[256];
  for (int c = 0; c < 256; ++c) {
    scale_bits[c] = uint16_t(detail::float_bits(block_scale_magnitude(format, uint8_t(c))) >> 16);
  }
  // Full halves: 64-byte spans of 16 rows at a time (AVX-512), the rest by the scalar loop
  // below.
  const cpu::QkvKernels& qkv = cpu::kernels().qkv;
  const cpu::RepackHalf repack = fp4 ? qkv.repack_fp4_half : qkv.repack_mxfp8_half;
  const int64_t span_bytes = repack != nullptr ? weight.shape[1] / 64 * 64 : 0;
  // Column by column: each weight row is read sequentially; the writes stay inside the pair's
  // region (32 K bytes for fp4), which is cache-resident.
  // Streaming: every weight byte is read once and written once.
  const int threads =
      threads_for_work(ctx, 2.0 * double(n) * double(row_bytes(format, k)), kMinBytesPerThread);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t pair = 0; pair < w.n_pairs; ++pair) {
    for (int half = 0; half < 2; ++half) {
      const int64_t col0 = pair * kPairCols + half * kHalfCols;
      int64_t kb_done = 0;  // blocks whose data the vector repack wrote
      if (span_bytes > 0 && col0 + kHalfCols <= n) {
        repack(weight.data + col0 * weight.strides[0], weight.strides[0], span_bytes,
               int(block_bytes), packed.data() + layout.data_offset(pair, 0, half),
               layout.kb_stride());
        kb_done = span_bytes / block_bytes;
      }
      for (int lane = 0; lane < kHalfCols; ++lane) {
        const int64_t col = col0 + lane;
        if (col >= n) {  // padding columns: zero codes and scales
          for (int64_t kb = 0; kb < kb_count; ++kb) {
            packed_scales[std::size_t(layout.scale_offset(pair, kb, half, lane))] = 0;
            uint8_t* dst = packed.data() + layout.data_offset(pair, kb, half);
            if (fp4) {
              for (int j = 0; j < sfv / 8; ++j)
                std::memset(dst + cpu::fp4_chunk_offset(j, lane), 0, 4);
            } else {
              for (int pv = 0; pv < sfv / 2; ++pv)
                std::memset(dst + cpu::mxfp8_vector_offset(pv, lane), 0, 2);
            }
          }
          continue;
        }
        const uint8_t* row = weight.data + col * weight.strides[0];
        // Scale (col, kb) sits at the row's base + (kb / 4) * 512 + kb % 4 (contract §4 layout).
        const uint8_t* scale_row = weight_scale.data + swizzled_scale_offset(col, 0, kb_count);
        for (int64_t kb = 0; kb < kb_count; ++kb, row += block_bytes) {
          packed_scales[std::size_t(layout.scale_offset(pair, kb, half, lane))] =
              scale_bits[scale_row[(kb >> 2) * 512 + (kb & 3)]];
          if (kb < kb_done) continue;
          uint8_t* dst = packed.data() + layout.data_offset(pair, kb, half);
          if (fp4) {
            // The 4 source bytes b0..b3 hold k 8j..8j+7 as (even low, odd high) nibbles.
            for (int j = 0; j < sfv / 8; ++j) {
              const uint8_t* b = row + 4 * j;
              uint8_t* o = dst + cpu::fp4_chunk_offset(j, lane);
              o[0] = uint8_t((b[0] & 0x0F) | (b[2] << 4));
              o[1] = uint8_t((b[0] >> 4) | (b[2] & 0xF0));
              o[2] = uint8_t((b[1] & 0x0F) | (b[3] << 4));
              o[3] = uint8_t((b[1] >> 4) | (b[3] & 0xF0));
            }
          } else {
            for (int pv = 0; pv < sfv / 2; ++pv)
              std::memcpy(dst + cpu::mxfp8_vector_offset(pv, lane), row + 2 * pv, 2);
          }
        }
      }
    }
  }
  return Status::Ok();
}

Status fused_prepared(TensorView<const uint8_t, 2> hidden_state,
                      TensorView<const uint32_t, 1> input_row_offsets,
                      const PreparedQkvWeights& weight, TensorView<const uint8_t, 5> input_scale,
                      SectionScales section_sf, const PagedKVCacheCollection& kv_collection,
                      uint32_t layer_idx, TensorView<bfloat16, 2> output, const Context& ctx) {
  if (weight.empty() || !ops::valid_block_format(weight.format) ||
      weight.data_bytes() !=
          std::size_t(weight.n_pairs *
                      cpu::PreparedLayout(weight.format, weight.k).pair_data_bytes())) {
    return invalid_argument("weight: not a prepared weight (call prepare_qkv_weights first)");
  }
  CacheSnapshot snap;
  QUANTKV_RETURN_IF_ERROR(validate_call(hidden_state, input_row_offsets, weight.format, weight.n,
                                        weight.k, input_scale, section_sf, false, kv_collection,
                                        layer_idx, output, &snap));
  QUANTKV_RETURN_IF_ERROR(
      check_written_ranges(memory_range("hidden_state", hidden_state), input_row_offsets,
                           memory_range("input_scale", input_scale), kv_collection, output,
                           {prepared_data_range(weight), prepared_scales_range(weight)}));
  return run_prepared(hidden_state, snap.offsets, weight, input_scale, section_sf, snap.cache,
                      layer_idx, output, ctx);
}

Status fused_plain(TensorView<const uint8_t, 2> hidden, TensorView<const uint32_t, 1> offs,
                   TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
                   TensorView<const uint8_t, 5> weight_scale, SectionScales sf, bool single_sf,
                   const PagedKVCacheCollection& kv, uint32_t layer, TensorView<bfloat16, 2> output,
                   BlockFormat format, const Context& ctx) {
  int64_t k = 0;
  QUANTKV_RETURN_IF_ERROR(validate_weight(weight, weight_scale, format, &k));
  CacheSnapshot snap;
  QUANTKV_RETURN_IF_ERROR(validate_call(hidden, offs, format, weight.shape[0], k, input_scale, sf,
                                        single_sf, kv, layer, output, &snap));
  QUANTKV_RETURN_IF_ERROR(check_written_ranges(
      memory_range("hidden_state", hidden), offs, memory_range("input_scale", input_scale), kv,
      output, {memory_range("weight", weight), memory_range("weight_scale", weight_scale)}));
  // Per calling thread, the repacked weight's buffer is kept between calls (its contents are
  // rewritten every time), so a repeated plain call does not page-fault a fresh copy.
  thread_local PreparedQkvWeights prepared;
  QUANTKV_RETURN_IF_ERROR(repack_weights(weight, weight_scale, format, &prepared, ctx));
  return run_prepared(hidden, snap.offsets, prepared, input_scale, sf, snap.cache, layer, output,
                      ctx);
}

}  // namespace

Status prepare_qkv_weights(TensorView<const uint8_t, 2> weight,
                           TensorView<const uint8_t, 5> weight_scale, BlockFormat format,
                           PreparedQkvWeights* out, const Context& ctx) {
  return run_entry_point("prepare_qkv_weights", ctx,
                         [&] { return repack_weights(weight, weight_scale, format, out, ctx); });
}

Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state, TensorView<const uint32_t, 1> input_row_offsets,
    const PreparedQkvWeights& weight, TensorView<const uint8_t, 5> input_scale,
    SectionScales section_sf, const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
    TensorView<bfloat16, 2> output, const Context& ctx) {
  return run_entry_point(kQkvName, ctx, [&] {
    return fused_prepared(hidden_state, input_row_offsets, weight, input_scale, section_sf,
                          kv_collection, layer_idx, output, ctx);
  });
}

Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state, TensorView<const uint32_t, 1> input_row_offsets,
    TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
    TensorView<const uint8_t, 5> weight_scale, float tensor_sf,
    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx, TensorView<bfloat16, 2> output,
    BlockFormat format, const Context& ctx) {
  return run_entry_point(kQkvName, ctx, [&] {
    return fused_plain(hidden_state, input_row_offsets, weight, input_scale, weight_scale,
                       SectionScales{tensor_sf, tensor_sf, tensor_sf}, true, kv_collection,
                       layer_idx, output, format, ctx);
  });
}

Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state, TensorView<const uint32_t, 1> input_row_offsets,
    TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
    TensorView<const uint8_t, 5> weight_scale, SectionScales section_sf,
    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx, TensorView<bfloat16, 2> output,
    BlockFormat format, const Context& ctx) {
  return run_entry_point(kQkvName, ctx, [&] {
    return fused_plain(hidden_state, input_row_offsets, weight, input_scale, weight_scale,
                       section_sf, false, kv_collection, layer_idx, output, format, ctx);
  });
}

Status fused_qkv_matmul_weight_only(TensorView<const bfloat16, 2> hidden_state,
                                    TensorView<const uint32_t, 1> input_row_offsets,
                                    const PreparedQkvWeights& weight, SectionScales section_sf,
                                    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
                                    TensorView<bfloat16, 2> output, const Context& ctx) {
  return run_entry_point("fused_qkv_matmul_weight_only", ctx, [&]() -> Status {
    if (weight.empty() || !ops::valid_block_format(weight.format) ||
        weight.data_bytes() !=
            std::size_t(weight.n_pairs *
                        cpu::PreparedLayout(weight.format, weight.k).pair_data_bytes())) {
      return invalid_argument("weight: not a prepared weight (call prepare_qkv_weights first)");
    }
    QUANTKV_RETURN_IF_ERROR(ops::validate_qkv_weight_only_call(
        hidden_state, weight.n, weight.k, section_sf, kv_collection, layer_idx, output));
    // One snapshot of the ragged metadata (validated, then the only copy read), then the
    // aliasing of the written output and cache blocks with the activations, the metadata and
    // the prepared weight.
    CacheSnapshot snap;
    QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(
        kv_collection, input_row_offsets, hidden_state.shape[0],
        /*require_pages=*/false, "input_row_offsets", "kv_collection", &snap));
    QUANTKV_RETURN_IF_ERROR(check_written_ranges(
        memory_range("hidden_state", hidden_state), input_row_offsets, MemoryRange{}, kv_collection,
        output, {prepared_data_range(weight), prepared_scales_range(weight)}));
    const int64_t m = hidden_state.shape[0];
    if (m == 0) return Status::Ok();
    PreparedActivations acts;
    prepare_bf16_activations(
        hidden_state, sf_vector_size(weight.format),
        threads_for_work(ctx, double(m) * double(weight.k) * 4.0, kMinBytesPerThread), &acts);
    // An MXFP8 weight runs the MXFP8 kernels on the bf16 units; fp4 weights widen to bf16.
    const cpu::QkvKernels& qkv = cpu::kernels().qkv;
    const cpu::QkvPairKernel kernel =
        weight.format == BlockFormat::kMXFP8 ? qkv.mxfp8_pair : qkv.fp4_bf16_pair;
    return run_pairs(m, acts, snap.offsets, weight, section_sf, snap.cache, layer_idx, output,
                     kernel, panel_bytes_for(BlockFormat::kMXFP8, weight.k),
                     gemm_threads(ctx, m, weight));
  });
}

}  // namespace quantkv
