// Exact per-row top-k: sample threshold filter, radix select, radix sort of the selected n
// (see topk.hpp).
#include "cpu/topk.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "cpu/kernels.hpp"

namespace quantkv::cpu {
namespace {

constexpr int64_t kSample = 1024;
// The filter pays off when the row is long and n a small part of it.
constexpr int64_t kFilterMinLen = 8192;
constexpr int64_t kFilterMaxShare = 8;  // n <= len / 8
constexpr int64_t kInsertionSortMax = 32;

// The float whose key is `key` (key != 0, i.e. not the NaN level).
float key_to_float(uint32_t key) {
  const uint32_t bits = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
  return detail::bits_float(bits);
}

// A threshold that, judged by a strided sample, a little more than n scores reach; false
// when the sample says the filter would not help.
bool sample_threshold(const float* scores, int64_t len, int64_t n, float* threshold) {
  uint32_t sample[kSample];
  for (int64_t i = 0; i < kSample; ++i) sample[i] = score_order_key(scores[i * len / kSample]);
  // Expected sample hits above the n-th score, plus a margin of ~3 standard deviations.
  const double expected = double(n) * kSample / double(len);
  const int64_t rank =
      std::min<int64_t>(kSample - 1, int64_t(1.5 * expected + 3.0 * std::sqrt(expected) + 8));
  std::nth_element(sample, sample + rank, sample + kSample, std::greater<uint32_t>());
  if (sample[rank] == 0) return false;  // NaN level: everything would pass
  *threshold = key_to_float(sample[rank]);
  return true;
}

struct Threshold {
  uint32_t prefix = 0, mask = 0;  // keys with (key & mask) > prefix are in
  int64_t need = 0;               // and the first `need` with (key & mask) == prefix
};

// MSD radix select of the n-th largest of keys[0, m), 0 < n < m.
Threshold radix_threshold(const uint32_t* keys, int64_t m, int64_t n,
                          std::vector<uint32_t>& narrow) {
  Threshold th;
  th.need = n;
  const uint32_t* cur = keys;
  int64_t count = m;
  for (int shift = 24; shift >= 0; shift -= 8) {
    uint32_t hist[256] = {};
    for (int64_t i = 0; i < count; ++i) ++hist[(cur[i] >> shift) & 0xFFu];
    int b = 255;
    for (; b > 0 && int64_t(hist[b]) < th.need; --b) th.need -= hist[b];
    th.prefix |= uint32_t(b) << shift;
    th.mask |= 0xFFu << shift;
    if (int64_t(hist[b]) == th.need || shift == 0) break;
    // Keep only the boundary bucket (in place once `cur` is the narrow buffer: w <= i).
    if (narrow.size() < hist[b]) narrow.resize(hist[b]);
    int64_t w = 0;
    for (int64_t i = 0; i < count; ++i) {
      if (((cur[i] >> shift) & 0xFFu) == uint32_t(b)) narrow[w++] = cur[i];
    }
    cur = narrow.data();
    count = w;
  }
  return th;
}

// Stable sort of (key << 32 | position) by key descending: equal keys keep position order.
void sort_selected(std::vector<uint64_t>& v, std::vector<uint64_t>& tmp, int64_t n) {
  if (n <= kInsertionSortMax) {
    for (int64_t i = 1; i < n; ++i) {
      const uint64_t x = v[i];
      int64_t j = i;
      for (; j > 0 && (v[j - 1] >> 32) < (x >> 32); --j) v[j] = v[j - 1];
      v[j] = x;
    }
    return;
  }
  if (int64_t(tmp.size()) < n) tmp.resize(n);
  // The four digit histograms of the key in one read pass, then one scatter per digit.
  uint32_t hist[4][256] = {};
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = uint32_t(v[i] >> 32);
    ++hist[0][key & 0xFFu];
    ++hist[1][(key >> 8) & 0xFFu];
    ++hist[2][(key >> 16) & 0xFFu];
    ++hist[3][key >> 24];
  }
  uint64_t* src = v.data();
  uint64_t* dst = tmp.data();
  for (int digit = 0; digit < 4; ++digit) {
    const int shift = 32 + 8 * digit;
    if (hist[digit][(src[0] >> shift) & 0xFFu] == uint32_t(n))
      continue;  // one value: nothing moves
    uint32_t offset[256];
    uint32_t pos = 0;
    for (int b = 255; b >= 0; --b) {  // descending
      offset[b] = pos;
      pos += hist[digit][b];
    }
    for (int64_t i = 0; i < n; ++i) dst[offset[(src[i] >> shift) & 0xFFu]++] = src[i];
    std::swap(src, dst);
  }
  if (src != v.data()) std::copy(src, src + n, v.data());
}

}  // namespace

void TopkScratch::reserve(int64_t len, int64_t top_k) {
  const std::size_t n = std::size_t(std::min(len, top_k));
  keys.resize(std::size_t(len));
  positions.resize(std::size_t(len) + 16);
  narrow.resize(std::size_t(len));
  selected.resize(n);
  sorted.resize(n);
}

std::size_t topk_scratch_bytes(int64_t len, int64_t top_k) {
  const int64_t n = std::min(len, top_k);
  return std::size_t(len) * (4 + 4 + 4) + 16 * 4 + std::size_t(n) * 16;
}

int64_t filter_at_least_scalar(const float* scores, int64_t len, float threshold, int32_t* out) {
  int64_t count = 0;
  for (int64_t j = 0; j < len; ++j) {
    out[count] = int32_t(j);
    count += scores[j] >= threshold;  // branch-free; NaN never passes
  }
  return count;
}

void topk_row(const float* scores, int64_t len, int64_t top_k, int32_t* out, TopkScratch* s) {
  const int64_t n = std::min(len, top_k);
  // 1. Candidates: a filtered list of positions, or the whole row.
  const int32_t* positions = nullptr;
  int64_t m = len;
  float threshold;
  if (n < len && len >= kFilterMinLen && n * kFilterMaxShare <= len &&
      sample_threshold(scores, len, n, &threshold)) {
    if (int64_t(s->positions.size()) < len + 16) s->positions.resize(len + 16);
    const FilterFn filter = kernels().indexer.filter_at_least;
    const int64_t passed = filter(scores, len, threshold, s->positions.data());
    if (passed >= n) {  // else the sample misled us: use the whole row
      positions = s->positions.data();
      m = passed;
    }
  }
  if (int64_t(s->keys.size()) < m) s->keys.resize(m);
  uint32_t* keys = s->keys.data();
  if (positions) {
    for (int64_t i = 0; i < m; ++i) keys[i] = score_order_key(scores[positions[i]]);
  } else {
    for (int64_t i = 0; i < m; ++i) keys[i] = score_order_key(scores[i]);
  }
  // 2. Select n of the m candidates, in position order.
  if (int64_t(s->selected.size()) < n) s->selected.resize(n);
  uint64_t* sel = s->selected.data();
  Threshold th{0, 0, m};  // n == m: everything is in
  if (n < m) th = radix_threshold(keys, m, n, s->narrow);
  int64_t k = 0;
  for (int64_t i = 0; i < m && k < n; ++i) {
    const uint32_t masked = keys[i] & th.mask;
    bool take = masked > th.prefix;
    if (!take && masked == th.prefix && th.need > 0) {
      take = true;
      --th.need;
    }
    if (take)
      sel[k++] = (uint64_t(keys[i]) << 32) | uint32_t(positions ? positions[i] : int32_t(i));
  }
  // 3. Order them and write the row.
  sort_selected(s->selected, s->sorted, n);
  for (int64_t i = 0; i < n; ++i) out[i] = int32_t(uint32_t(sel[i]));
  for (int64_t i = n; i < top_k; ++i) out[i] = -1;
}

}  // namespace quantkv::cpu
