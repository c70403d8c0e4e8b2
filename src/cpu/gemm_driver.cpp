// The CPU driver of the block-scaled GEMM core (see gemm_driver.hpp): activation preparation,
// the weight packer and the parallel loop over 32-column pairs that calls the per-ISA pair
// kernels of the active kernel table.
#include "cpu/gemm_driver.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "core/out_of_memory.hpp"
#include "core/threads.hpp"
#include "cpu/kernels.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv {

namespace detail {
// The packer's write access to a prepared weight's buffers (read-only to users).
struct PreparedWeightsAccess {
  static std::vector<uint8_t>& data(PreparedWeights& w) { return w.data_; }
  static std::vector<uint16_t>& scales(PreparedWeights& w) { return w.scales_; }
};
}  // namespace detail

namespace cpu {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// |scale| as a float: e4m3 scales are magnitudes (the sign bit is ignored, as MAX's reference
// does); e8m0 has no sign. NaN codes stay NaN.
float block_scale_magnitude(BlockFormat f, uint8_t code) {
  return has_e8m0_scales(f) ? e8m0_to_float(code) : e4m3_to_float(uint8_t(code & 0x7F));
}

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};

// One L2-sized panel per thread (32 K bytes for fp4, 64 K for bf16 panels).
std::size_t panel_bytes_for(BlockFormat panel_format, int64_t k) {
  return (qkv_panel_bytes(panel_format, k) + 63) / 64 * 64;
}

void size_activations(int64_t m, int64_t kb_count, int groups, GemmActivations* a) {
  const int64_t tiles = (m + kRowTile - 1) / kRowTile;
  a->groups = groups;
  // Zero-filled: the padding rows of the last tile contribute 0 and are never stored.
  a->units.assign(std::size_t(tiles * kb_count * groups * kRowTile), 0);
  a->corr.assign(std::size_t(tiles * kb_count * kRowTile), 0);
  a->scale.assign(std::size_t(tiles * kb_count * kRowTile), 0.0f);
}

}  // namespace

bool is_prepared(const PreparedWeights& w) {
  return !w.empty() &&
         (w.format == BlockFormat::kNVFP4 || w.format == BlockFormat::kMXFP4 ||
          w.format == BlockFormat::kMXFP8) &&
         w.k > 0 && w.k % sf_vector_size(w.format) == 0 &&
         w.n_pairs == (w.n + kPairCols - 1) / kPairCols &&
         w.data_bytes() == std::size_t(w.n_pairs * PreparedLayout(w.format, w.k).pair_data_bytes());
}

void prepare_block_activations(TensorView<const uint8_t, 2> x, TensorView<const uint8_t, 5> x_scale,
                               BlockFormat f, int64_t k, const Context& ctx, GemmActivations* a) {
  const int64_t m = x.shape[0];
  const int sfv = sf_vector_size(f);
  const int64_t kb_count = k / sfv;
  const bool fp4 = f != BlockFormat::kMXFP8;
  const int groups = fp4 ? sfv / 4 : sfv / 2;
  size_activations(m, kb_count, groups, a);
  a->bf16 = false;
  // The unpacking streams the activations (its output, ~4 bytes per k, dominates the traffic).
  const int threads = threads_for_work(ctx, double(m) * double(k) * 4.0, kMinBytesPerThread);
  const std::size_t row_units = std::size_t(k / (fp4 ? 4 : 2));  // a row's units in k order
  std::vector<uint32_t> rows(row_units *
                             std::size_t(threads));  // one per thread, before the region
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    uint32_t* row = rows.data() + row_units * std::size_t(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m; ++r) {
      const uint8_t* src = x.data + r * x.strides[0];
      if (fp4) {
        convert_e2m1_to_doubled_int8(src, reinterpret_cast<int8_t*>(row), k);
      } else {
        convert_e4m3_to_bf16(src, reinterpret_cast<uint16_t*>(row), k);
      }
      const int64_t tile_base = (r / kRowTile) * kb_count, lane = r % kRowTile;
      for (int64_t kb = 0; kb < kb_count; ++kb) {
        const int64_t block = (tile_base + kb) * kRowTile + lane;
        const uint8_t code = x_scale.data[swizzled_scale_offset(r, kb, kb_count)];
        const float mag = block_scale_magnitude(f, code);
        a->scale[block] = fp4 ? mag * 0.25f : mag;
        int32_t sum = 0;
        for (int g = 0; g < groups; ++g) {
          const uint32_t unit = row[kb * groups + g];
          a->units[((tile_base + kb) * groups + g) * kRowTile + lane] = unit;
          if (fp4) {
            int8_t c[4];
            std::memcpy(c, &unit, 4);
            sum += c[0] + c[1] + c[2] + c[3];
          }
        }
        a->corr[block] = -kFp4Bias * sum;
      }
    }
  }
}

namespace {
// The exact form of one (row, block) of bf16 units (QkvActivations::exact_units): with e the
// biased exponents of its nonzero values (all normal: prepare_bf16_activations flushes smaller ones
// to 0), e_min <= e <= e_max, a value is s * m * 2^(e - 134) with m = 128 + its mantissa bits <
// 256, and an fp4 weight w = c / 2 with c = kE2M1Doubled (|c| <= 12; the fp4 kernels are the only
// readers: an MXFP8 weight's kernels ignore this form), so each product is
// (s * m * 2^(e - e_min)) * c * 2^(e_min - 135). Where e_max - e_min <= 7 the first factor is
// an int16 (|.| <= 255 * 2^7 = 32640), and every partial sum of a block (SFV <= 32 products) is
// an integer multiple of 2^(e_min - 135) below 32 * 32640 * 12 < 2^24 times it: exactly
// representable in fp32 (normal or 0: e_min >= 17; finite: e_max < 240). So each fma of the
// canonical order rounds nothing, its t is the exact sum (+0 if the sum is 0: t starts at +0),
// and an int32 sum of the same products times 2^(e_min - 135) gives the same bits. A block
// with an Inf or NaN (e = 255) or a wider exponent range keeps exact_scale 0.
inline constexpr int kExactMaxExponentSpan = 7;
inline constexpr int kExactExponentLimit = 240;

void exact_block(GemmActivations* a, int64_t block, int64_t lane, int groups) {
  const uint32_t* units = a->units.data() + block * groups * kRowTile + lane;
  int e_min = 255, e_max = 0;
  for (int i = 0; i < 2 * groups; ++i) {
    const uint16_t b = uint16_t(units[(i / 2) * kRowTile] >> (16 * (i % 2)));
    if ((b & 0x7FFF) == 0) continue;
    const int e = (b >> 7) & 0xFF;
    e_min = std::min(e_min, e);
    e_max = std::max(e_max, e);
  }
  if (e_max >= kExactExponentLimit || e_max - e_min > kExactMaxExponentSpan) return;
  const int e0 = e_max == 0 ? 135 : e_min;  // all zero: any power of two
  uint32_t* out = a->exact_units.data() + block * groups * kRowTile + lane;
  for (int g = 0; g < groups; ++g) {
    uint32_t pair = 0;
    for (int h = 0; h < 2; ++h) {
      const uint16_t b = uint16_t(units[g * kRowTile] >> (16 * h));
      int32_t v = 0;
      if ((b & 0x7FFF) != 0) {
        v = int32_t((b & 0x7F) | 0x80) << (((b >> 7) & 0xFF) - e0);
        if (b & 0x8000) v = -v;
      }
      pair |= uint32_t(uint16_t(int16_t(v))) << (16 * h);
    }
    out[g * kRowTile] = pair;
  }
  a->exact_scale[std::size_t(block * kRowTile + lane)] = std::ldexp(1.0f, e0 - 135);
}
}  // namespace

// bf16 pairs as units (no block scale: sa' = 1), magnitudes below 2^-110 taken as zero so that
// no product with an e2m1 or e4m3 weight value, and no partial sum of such products, is
// subnormal (the bf16 dot product flushes those).
void prepare_bf16_activations(TensorView<const bfloat16, 2> x, int sfv, const Context& ctx,
                              GemmActivations* a) {
  const int64_t m = x.shape[0], k = x.shape[1];
  const int64_t kb_count = k / sfv;
  const int groups = sfv / 2;
  size_activations(m, kb_count, groups, a);
  a->bf16 = true;
  const bool exact_form = m <= kExactMaxRows;
  if (exact_form) {
    a->exact_units.assign(a->units.size(), 0);
    a->exact_scale.assign(a->scale.size(), 0.0f);
  } else {
    a->exact_units.clear();
    a->exact_scale.clear();
  }
  constexpr uint16_t kSmallest = 17 << 7;  // bf16 bits of 2^-110
  constexpr uint16_t kInf = 0x7F80;
  uint16_t largest = 0;  // the largest finite magnitude's bits
  const int threads = threads_for_work(ctx, double(m) * double(k) * 4.0, kMinBytesPerThread);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1) \
    reduction(max                                                               \
              : largest)
  for (int64_t r = 0; r < m; ++r) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(x.data + r * x.strides[0]);
    const int64_t tile_base = (r / kRowTile) * kb_count, lane = r % kRowTile;
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      a->scale[(tile_base + kb) * kRowTile + lane] = 1.0f;
      for (int g = 0; g < groups; ++g) {
        uint16_t even = src[kb * sfv + 2 * g], odd = src[kb * sfv + 2 * g + 1];
        for (const uint16_t v : {uint16_t(even & 0x7FFF), uint16_t(odd & 0x7FFF)}) {
          if (v < kInf) largest = std::max(largest, v);
        }
        if ((even & 0x7FFF) < kSmallest) even = 0;
        if ((odd & 0x7FFF) < kSmallest) odd = 0;
        a->units[((tile_base + kb) * groups + g) * kRowTile + lane] =
            uint32_t(even) | (uint32_t(odd) << 16);
      }
      if (exact_form) exact_block(a, tile_base + kb, lane, groups);
    }
  }
  a->max_exponent = largest >> 7;
}

namespace {
// The smallest biased exponent of a bf16 activation whose product with one of the weight's
// values can overflow fp32 (|a| * the largest value >= 2^128: e2m1's 6, e4m3's 448).
int overflow_exponent(BlockFormat f) { return 127 + (f == BlockFormat::kMXFP8 ? 119 : 125); }
}  // namespace

Status run_gemm(int64_t m, const GemmActivations& a, const PreparedWeights& w, GemmEpilogue epi,
                const Context& ctx) {
  return run_gemm_batch({GemmJob{m, &a, &w, epi}}, ctx);
}

Status run_gemm_batch(const std::vector<GemmJob>& jobs, const Context& ctx) {
  // Per job: its problem, kernel and first chunk; the chunks of all jobs are numbered in order.
  struct Planned {
    QkvProblem p;
    QkvPairKernel kernel = nullptr;
    int64_t first_chunk = 0, n_pairs = 0;
  };
  std::vector<Planned> plan;
  plan.reserve(jobs.size());
  int64_t chunks = 0, total_pairs = 0;
  double macs = 0;
  std::size_t panel_bytes = 0;
  const QkvKernels& active = kernels().qkv;
  for (const GemmJob& job : jobs) {
    if (job.m == 0) continue;
    const GemmActivations& a = *job.a;
    const PreparedWeights& w = *job.w;
    Planned j;
    QkvProblem& p = j.p;
    p.format = w.format;
    p.m = job.m;
    p.k = w.k;
    p.n = w.n;
    p.sfv = sf_vector_size(w.format);
    p.kb_count = w.k / p.sfv;
    p.a = {a.units.data(),
           a.corr.data(),
           a.scale.data(),
           a.groups,
           a.bf16,
           a.exact_units.empty() ? nullptr : a.exact_units.data(),
           a.exact_scale.empty() ? nullptr : a.exact_scale.data()};
    p.w_data = w.data();
    p.w_scales = w.scales();
    p.epi = job.epi;
    // The canonical order rounds each product of the bf16 dot to fp32 (an overflowing one to
    // +-Inf, so opposite ones sum to NaN); the SIMD kernels' fma keeps it exact. Where a
    // product can overflow, the scalar kernels, which round it, take the job (same bits; such
    // activations are far beyond any model's).
    const QkvKernels& qkv = a.bf16 && a.max_exponent >= overflow_exponent(w.format)
                                ? kernels_for(IsaLevel::kScalar).qkv
                                : active;
    // An MXFP8 weight runs the MXFP8 kernels on bf16 or e4m3-widened units alike; an fp4
    // weight runs the int8 kernels on quantised activations and widens to bf16 for bf16
    // activations.
    j.kernel = w.format == BlockFormat::kMXFP8 ? qkv.mxfp8_pair
               : a.bf16                        ? qkv.fp4_bf16_pair
                                               : qkv.fp4_pair;
    j.n_pairs = w.n_pairs;
    total_pairs += w.n_pairs;
    macs += double(job.m) * double(w.n) * double(w.k);
    panel_bytes =
        std::max(panel_bytes, panel_bytes_for(a.bf16 ? BlockFormat::kMXFP8 : w.format, w.k));
    plan.push_back(j);
  }
  if (plan.empty()) return Status::Ok();
  // The GEMMs' multiply-adds size the thread count, and the pairs per thread the chunks.
  const int threads = threads_for_work(ctx, macs, kMinMacsPerThread);
  // One thread takes every job whole: its prefetches then run on to the end of each job.
  int64_t chunk_pairs = std::clamp<int64_t>(total_pairs / (int64_t(threads) * kChunksPerThread),
                                            kMinPairsPerChunk, kMaxPairsPerChunk);
  if (threads == 1) {
    for (const Planned& j : plan) chunk_pairs = std::max(chunk_pairs, j.n_pairs);
  }
  for (Planned& j : plan) {
    j.p.chunk_pairs = chunk_pairs;
    j.first_chunk = chunks;
    chunks += (j.n_pairs + chunk_pairs - 1) / chunk_pairs;
  }
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
    // Each pair is computed whole by whichever thread takes its chunk (chunk_pairs pairs of
    // one job, as NextPair's and DirectPrefetch's prefetches expect), so dynamic scheduling
    // keeps the results independent of the thread count and absorbs uneven or preempted cores.
#pragma omp for schedule(dynamic, 1)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      // The chunk's job: the last whose first chunk is <= chunk.
      const Planned& j =
          *(std::upper_bound(plan.begin(), plan.end(), chunk,
                             [](int64_t c, const Planned& x) { return c < x.first_chunk; }) -
            1);
      const int64_t pair0 = (chunk - j.first_chunk) * chunk_pairs;
      const int64_t pair1 = std::min(pair0 + chunk_pairs, j.n_pairs);
      for (int64_t pair = pair0; pair < pair1; ++pair) j.kernel(j.p, pair, panel);
    }
  }
  return Status::Ok();
}

Status pack_weights(TensorView<const uint8_t, 2> weight, WeightScaleSource scale,
                    BlockFormat format, int64_t k, PreparedWeights* out, const Context& ctx) {
  const int64_t n = weight.shape[0];
  const int sfv = sf_vector_size(format);
  const PreparedLayout layout(format, k);  // the one definition (qkv_kernels.hpp)
  const int64_t kb_count = layout.kb_count, block_bytes = layout.block_bytes;
  // From here on `out` is rewritten in place, reusing its buffers when they have the size
  // already (no page faults when a caller repacks into the same object again).
  PreparedWeights& w = *out;
  std::vector<uint8_t>& packed = detail::PreparedWeightsAccess::data(w);
  std::vector<uint16_t>& packed_scales = detail::PreparedWeightsAccess::scales(w);
  const int64_t n_pairs = (n + kPairCols - 1) / kPairCols;
  try {
    packed.resize(std::size_t(n_pairs * layout.pair_data_bytes()));
    packed_scales.resize(std::size_t(n_pairs * layout.pair_scales()));
  } catch (const std::bad_alloc&) {
    w = PreparedWeights{};  // a half-resized weight must not pass for a prepared one
    return resource_exhausted("out: cannot allocate the repacked weight of " + str(n) + " x " +
                              str(k));
  }
  // The sizes are set last: until the packing is done (anything before the loop may still run
  // out of memory) `out` is empty, never a prepared-looking weight.
  w.n = 0;
  const bool fp4 = format != BlockFormat::kMXFP8;
  // bf16 bits of |scale| for every code (exact: e4m3 and e8m0 values fit in bf16).
  uint16_t scale_bits[256];
  for (int c = 0; c < 256; ++c) {
    scale_bits[c] = uint16_t(detail::float_bits(block_scale_magnitude(format, uint8_t(c))) >> 16);
  }
  // Full halves: 64-byte spans of 16 rows at a time (AVX-512), the rest by the scalar loop
  // below.
  const QkvKernels& qkv = kernels().qkv;
  const RepackHalf repack = fp4 ? qkv.repack_fp4_half : qkv.repack_mxfp8_half;
  const int64_t span_bytes = repack != nullptr ? weight.shape[1] / 64 * 64 : 0;
  // Streaming: every weight byte is read once and written once.
  const int threads =
      threads_for_work(ctx, 2.0 * double(n) * double(row_bytes(format, k)), kMinBytesPerThread);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t pair = 0; pair < n_pairs; ++pair) {
    for (int half = 0; half < 2; ++half) {
      const int64_t col0 = pair * kPairCols + half * kHalfCols;
      int64_t kb_done = 0;  // blocks whose data the vector repack wrote
      if (span_bytes > 0 && col0 + kHalfCols <= n) {
        repack(weight.data + col0 * weight.strides[0], weight.strides[0], span_bytes,
               int(block_bytes), packed.data() + layout.data_offset(pair, 0, half),
               layout.kb_stride());
        kb_done = span_bytes / block_bytes;
      }
      // Column by column: each weight row is read sequentially; the writes stay inside the
      // pair's region (32 K bytes for fp4), which is cache-resident.
      for (int lane = 0; lane < kHalfCols; ++lane) {
        const int64_t col = col0 + lane;
        if (col >= n) {  // padding columns: zero codes and scales
          for (int64_t kb = 0; kb < kb_count; ++kb) {
            packed_scales[std::size_t(layout.scale_offset(pair, kb, half, lane))] = 0;
            uint8_t* dst = packed.data() + layout.data_offset(pair, kb, half);
            if (fp4) {
              for (int j = 0; j < sfv / 8; ++j) std::memset(dst + fp4_chunk_offset(j, lane), 0, 4);
            } else {
              for (int pv = 0; pv < sfv / 2; ++pv)
                std::memset(dst + mxfp8_vector_offset(pv, lane), 0, 2);
            }
          }
          continue;
        }
        const uint8_t* row = weight.data + col * weight.strides[0];
        for (int64_t kb = 0; kb < kb_count; ++kb, row += block_bytes) {
          // Swizzled: scale (col, kb) at the row's base + (kb / 4) * 512 + kb % 4 (contract §4).
          const uint8_t code =
              scale.swizzled
                  ? scale.data[swizzled_scale_offset(col, 0, kb_count) + (kb >> 2) * 512 + (kb & 3)]
                  : scale.data[col * scale.row_stride + kb];
          packed_scales[std::size_t(layout.scale_offset(pair, kb, half, lane))] = scale_bits[code];
          if (kb < kb_done) continue;
          uint8_t* dst = packed.data() + layout.data_offset(pair, kb, half);
          if (fp4) {
            // The 4 source bytes b0..b3 hold k 8j..8j+7 as (even low, odd high) nibbles.
            for (int j = 0; j < sfv / 8; ++j) {
              const uint8_t* b = row + 4 * j;
              uint8_t* o = dst + fp4_chunk_offset(j, lane);
              o[0] = uint8_t((b[0] & 0x0F) | (b[2] << 4));
              o[1] = uint8_t((b[0] >> 4) | (b[2] & 0xF0));
              o[2] = uint8_t((b[1] & 0x0F) | (b[3] << 4));
              o[3] = uint8_t((b[1] >> 4) | (b[3] & 0xF0));
            }
          } else {
            for (int pv = 0; pv < sfv / 2; ++pv)
              std::memcpy(dst + mxfp8_vector_offset(pv, lane), row + 2 * pv, 2);
          }
        }
      }
    }
  }
  w.format = format;
  w.k = k;
  w.n_pairs = n_pairs;
  w.n = n;
  return Status::Ok();
}

}  // namespace cpu
}  // namespace quantkv
