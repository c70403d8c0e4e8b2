// The lightning indexer written for clarity (see indexer_reference.hpp).
#include "reference/indexer_reference.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace quantkv::reference {
namespace {

float k_value(const PagedKVCacheCollection& c, int64_t b, int64_t j, uint32_t layer, int64_t d) {
  const int64_t page = c.lookup_table(b, j / c.page_size);
  const auto* blocks = static_cast<const uint8_t*>(c.blocks);
  return e4m3_to_float(blocks[c.element_offset(page, 0, layer, j % c.page_size, 0, d)]);
}

float k_scale(const PagedKVCacheCollection& c, int64_t b, int64_t j, uint32_t layer) {
  const int64_t page = c.lookup_table(b, j / c.page_size);
  return c.scales[c.scale_offset(page, 0, layer, j % c.page_size, 0, 0)];
}

// fp32, canonical order: per head a sequential chain over d-pairs, odd element first (one
// vdpbf16ps lane), then the heads in ascending order, then the key scale.
float score_canonical(const float* q, const float* w, const float* k, float ks, int64_t H,
                      int64_t D) {
  float s = 0.0f;
  for (int64_t h = 0; h < H; ++h) {
    float dot = 0.0f;
    for (int64_t p = 0; p < D / 2; ++p) {
      dot = std::fma(q[h * D + 2 * p + 1], k[2 * p + 1], dot);
      dot = std::fma(q[h * D + 2 * p], k[2 * p], dot);
    }
    const float relu = std::isnan(dot) ? dot : std::max(dot, 0.0f);
    s = std::fma(relu, w[h], s);
  }
  return s * ks;
}

double score_double(const float* q, const float* w, const float* k, float ks, int64_t H, int64_t D,
                    double* magnitude) {
  double s = 0, mag = 0;
  for (int64_t h = 0; h < H; ++h) {
    double dot = 0, abs_dot = 0;
    for (int64_t d = 0; d < D; ++d) {
      dot += double(q[h * D + d]) * double(k[d]);
      abs_dot += std::fabs(double(q[h * D + d]) * double(k[d]));
    }
    s += (std::isnan(dot) ? dot : std::max(dot, 0.0)) * double(w[h]);
    mag += abs_dot * std::fabs(double(w[h]));
  }
  *magnitude = mag * std::fabs(double(ks));
  return s * double(ks);
}

}  // namespace

std::vector<IndexerReferenceRow> indexer_scores_reference(TensorView<const float8_e4m3fn, 3> q,
                                                          TensorView<const float, 2> q_s,
                                                          TensorView<const uint32_t, 1> offs,
                                                          const PagedKVCacheCollection& c,
                                                          uint32_t layer, MaskType mask,
                                                          ScorePrecision precision) {
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  std::vector<IndexerReferenceRow> rows(static_cast<std::size_t>(T));
  std::vector<float> qf(static_cast<std::size_t>(H * D)), w(static_cast<std::size_t>(H)),
      k(static_cast<std::size_t>(D));
  for (int64_t b = 0; b + 1 < offs.shape[0]; ++b) {
    const int64_t cache_len = c.cache_lengths(b), seq_len = int64_t(offs(b + 1)) - int64_t(offs(b));
    for (int64_t i = 0; i < seq_len; ++i) {
      const int64_t t = int64_t(offs(b)) + i;
      const int64_t bound = mask == MaskType::kCausal ? cache_len + i + 1 : cache_len + seq_len;
      for (int64_t h = 0; h < H; ++h) {
        w[h] = q_s(t, h);
        for (int64_t d = 0; d < D; ++d) qf[h * D + d] = e4m3_to_float(q(t, h, d).bits);
      }
      IndexerReferenceRow& row = rows[t];
      row.scores.resize(static_cast<std::size_t>(bound));
      for (int64_t j = 0; j < bound; ++j) {
        for (int64_t d = 0; d < D; ++d) k[d] = k_value(c, b, j, layer, d);
        const float ks = k_scale(c, b, j, layer);
        double mag = 0;
        if (precision == ScorePrecision::kCanonical) {
          row.scores[j] = score_canonical(qf.data(), w.data(), k.data(), ks, H, D);
        } else {
          row.scores[j] = score_double(qf.data(), w.data(), k.data(), ks, H, D, &mag);
        }
        row.magnitude = std::max(row.magnitude, mag);
      }
    }
  }
  return rows;
}

void topk_reference(const std::vector<double>& scores, int64_t top_k, int32_t* out) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  // Better = larger; every number beats NaN; equal scores (and NaNs) keep position order.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const double x = scores[a], y = scores[b];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x > y;
  });
  const int64_t n = std::min<int64_t>(top_k, int64_t(scores.size()));
  for (int64_t i = 0; i < top_k; ++i) out[i] = i < n ? order[i] : -1;
}

void mla_indexer_reference(TensorView<int32_t, 2> out, TensorView<const float8_e4m3fn, 3> q,
                           TensorView<const float, 2> q_s, TensorView<const uint32_t, 1> offs,
                           const PagedKVCacheCollection& c, uint32_t layer, MaskType mask,
                           ScorePrecision precision) {
  const std::vector<IndexerReferenceRow> rows =
      indexer_scores_reference(q, q_s, offs, c, layer, mask, precision);
  const int64_t top_k = out.shape[1];
  std::vector<int32_t> row_out(static_cast<std::size_t>(top_k));
  for (int64_t t = 0; t < int64_t(rows.size()); ++t) {
    topk_reference(rows[t].scores, top_k, row_out.data());
    for (int64_t i = 0; i < top_k; ++i) out(t, i) = row_out[i];
  }
}

float quantize_row_reference(const float* x, int64_t n, ScaleMode mode, uint8_t* codes) {
  float amax = 1e-4f;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isnan(x[i])) amax = std::max(amax, std::fabs(x[i]));
  }
  float s = amax / 448.0f;
  if (mode == ScaleMode::kPowerOfTwo && std::isfinite(s)) {
    int e = 0;
    const float m = std::frexp(s, &e);  // s = m * 2^e, m in [0.5, 1)
    s = m == 0.5f ? s : std::ldexp(1.0f, e);
  }
  for (int64_t i = 0; i < n; ++i) codes[i] = float_to_e4m3(x[i] / s);
  return s;
}

}  // namespace quantkv::reference
