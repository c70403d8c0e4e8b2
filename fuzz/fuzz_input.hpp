// Shared helpers of the libFuzzer targets: turn the fuzzer's bytes into shapes, strides,
// offsets, cache lengths, lookup tables (with sentinel and out-of-range pages), layer indices,
// top_k values and the numbers inside the tensors, all backed by small real buffers that carry
// canaries around them.
//
// Every target follows the same protocol:
//   1. build the arguments from the bytes, usually consistent, sometimes with one defect that
//      the target itself records in an `Expectation` (it knows the rules of contract §6);
//   2. snapshot every output (and the cache) after filling it with a pattern;
//   3. call the entry point;
//   4. an ok status for a defective call, or an error for a consistent one, is a finding
//      (abort, so libFuzzer saves the input); after an error nothing may have changed;
//      after success only the elements the op owns may have changed.
// ASan + UBSan catch the out-of-bounds accesses and the undefined behaviour on the way.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/cpu_features.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv::fuzz {

// A finding: print what went wrong and abort, so libFuzzer writes the crashing input.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}
inline void check(bool cond, const std::string& what) {
  if (!cond) fail(what);
}

// The defects a target put into its arguments: empty means the call must succeed.
struct Expectation {
  std::vector<std::string> defects;
  void defect(bool cond, const std::string& why) {
    if (cond) defects.push_back(why);
  }
  bool ok() const { return defects.empty(); }
  std::string describe() const {
    std::string s;
    for (const auto& d : defects) s += (s.empty() ? "" : "; ") + d;
    return s.empty() ? "(consistent arguments)" : s;
  }
};

// Accepted / rejected call counts, printed at exit when QUANTKV_FUZZ_STATS is set (to see that
// a target reaches the op's body often, not only its validation).
struct CallStats {
  long accepted = 0, rejected = 0;
  ~CallStats() {
    if (std::getenv("QUANTKV_FUZZ_STATS"))
      std::fprintf(stderr, "calls: %ld accepted, %ld rejected\n", accepted, rejected);
  }
};
inline CallStats& call_stats() {
  static CallStats stats;
  return stats;
}

// Checks the status against the expectation; returns whether the call succeeded.
// `accepted_rejections` are message fragments of errors a consistent call may still get
// (e.g. "contiguous" when an op requires row-major views and the target built strided ones).
inline bool verify_status(const Status& st, const Expectation& ex, const char* op,
                          std::initializer_list<const char*> accepted_rejections = {}) {
  if (ex.ok() && !st.ok()) {
    for (const char* frag : accepted_rejections) {
      if (st.message().find(frag) != std::string::npos) return false;
    }
    fail(std::string(op) + " rejected consistent arguments: " + st.to_string());
  }
  if (!ex.ok() && st.ok()) {
    fail(std::string(op) + " returned ok for inconsistent arguments: " + ex.describe());
  }
  ++(st.ok() ? call_stats().accepted : call_stats().rejected);
  if (!st.ok()) {
    check(!st.message().empty(), std::string(op) + ": error without a message");
    check(st.code() != StatusCode::kInternal,
          std::string(op) + ": internal error " + st.to_string());
  }
  return st.ok();
}

// ----------------------------------------------------------------- the byte source
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : p_(data, size) {}

  int64_t int_in(int64_t lo, int64_t hi) { return p_.ConsumeIntegralInRange<int64_t>(lo, hi); }
  bool coin() { return p_.ConsumeBool(); }
  // True with probability about 1/n (never when the input is exhausted, so short inputs
  // describe consistent calls).
  bool one_in(int n) { return p_.remaining_bytes() > 0 && int_in(0, n - 1) == 0; }
  uint8_t byte() { return p_.ConsumeIntegral<uint8_t>(); }
  uint32_t u32() { return p_.ConsumeIntegral<uint32_t>(); }
  template <typename T>
  T pick(std::initializer_list<T> values) {
    return *(values.begin() + int_in(0, int64_t(values.size()) - 1));
  }
  size_t remaining() { return p_.remaining_bytes(); }

  // Any float bit pattern (NaN, inf, subnormals, huge values included).
  float any_float() {
    const uint32_t u = u32();
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // Mostly ordinary values of either sign around 1, sometimes a special one.
  float value() {
    switch (int_in(0, 15)) {
      case 0:
        return any_float();
      case 1:
        return pick<float>({0.0f, -0.0f, 448.0f, -448.0f, 6.0f, 1e-30f, 1e30f, 0x1p-140f,
                            __builtin_inff(), -__builtin_inff(), __builtin_nanf("")});
      default:
        return float(int_in(-4000, 4000)) / 256.0f;
    }
  }
  // A value that is almost always finite and moderate (for inputs whose NaN cases a target
  // chooses explicitly).
  float finite_value() { return float(int_in(-4000, 4000)) / 256.0f; }

  // Sets a random ISA level this CPU supports (every path must behave the same).
  void pick_isa() {
    const int best = int(max_supported_isa());
    (void)set_isa_level(IsaLevel(int_in(0, best)));
  }
  Context context() {
    Context ctx;
    ctx.num_threads = int(int_in(1, 3));
    return ctx;
  }

 private:
  FuzzedDataProvider p_;
};

// The library's contiguity rule (check_contiguous): every dimension of extent > 1 has the
// row-major stride (the product of the inner extents); a view without elements (an extent 0)
// is contiguous whatever its strides (numpy gives empty arrays stride 0).
template <typename T, int Rank>
bool row_major(const TensorView<T, Rank>& v) {
  for (int d = 0; d < Rank; ++d) {
    if (v.shape[d] == 0) return true;
  }
  int64_t expected = 1;
  for (int d = Rank - 1; d >= 0; --d) {
    if (v.shape[d] > 1 && v.strides[d] != expected) return false;
    expected *= v.shape[d];
  }
  return true;
}

// ----------------------------------------------------------------- tensors with canaries
// Storage for a view of `Rank` dims with optional padding in the strides, surrounded by
// canary elements (`kGuard` before and after); the bytes outside the view's elements are the
// pattern, so a write to them shows.
template <typename T, int Rank>
class Buffer {
 public:
  static constexpr int64_t kGuard = 16;

  Buffer() = default;
  // Builds the view for `shape`; with `padded`, each stride may have slack.
  Buffer(FuzzInput& in, const std::array<int64_t, Rank>& shape, bool padded) {
    build(in, shape, padded);
  }

  void build(FuzzInput& in, const std::array<int64_t, Rank>& shape, bool padded) {
    view_.shape = shape;
    int64_t s = 1;
    for (int d = Rank - 1; d >= 0; --d) {
      view_.strides[d] = s;
      const int64_t pad = padded && in.one_in(3) ? in.int_in(1, 3) : 0;
      s = s * shape[d] + pad * (d == Rank - 1 ? 1 : s);
      if (shape[d] == 0) s = std::max<int64_t>(s, 1);
    }
    int64_t max_offset = 0;
    bool empty = false;
    for (int d = 0; d < Rank; ++d) {
      if (shape[d] == 0)
        empty = true;
      else
        max_offset += (shape[d] - 1) * view_.strides[d];
    }
    storage_.assign(size_t((empty ? 0 : max_offset + 1) + 2 * kGuard), T{});
    view_.data = storage_.data() + kGuard;
  }
  // Fills every element (and the padding and guards) with the byte pattern.
  void fill_pattern(uint8_t pattern) {
    std::memset(static_cast<void*>(storage_.data()), pattern, storage_.size() * sizeof(T));
  }
  void snapshot() { saved_ = bytes(); }
  bool unchanged() const { return bytes() == saved_; }
  // Whether only in-view elements changed since the snapshot (padding and guards intact).
  bool outside_unchanged() const {
    std::vector<uint8_t> mask(storage_.size(), 0);
    mark_view(mask);
    const auto now = bytes();
    for (size_t i = 0; i < storage_.size(); ++i) {
      if (mask[i]) continue;
      if (std::memcmp(&now[i * sizeof(T)], &saved_[i * sizeof(T)], sizeof(T)) != 0) return false;
    }
    return true;
  }
  TensorView<T, Rank>& view() { return view_; }
  TensorView<const T, Rank> cview() const { return {view_.data, view_.shape, view_.strides}; }
  std::vector<T>& storage() { return storage_; }
  // Where the view's first element lives (past the leading guard), even after a target
  // replaced view().data: an output aimed here overlaps the view whenever both are non-empty
  // (aimed at storage().data(), a small output would fit inside the guard and overlap nothing).
  T* view_begin() { return storage_.data() + kGuard; }
  // Element at a multi-index (for reading results).
  T& at(const std::array<int64_t, Rank>& idx) {
    int64_t off = 0;
    for (int d = 0; d < Rank; ++d) off += idx[d] * view_.strides[d];
    return view_.data[off];
  }
  // Calls fn(index array) for every element of the view.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    if (view_.numel() == 0) return;
    std::array<int64_t, Rank> idx{};
    while (true) {
      fn(idx);
      int d = Rank - 1;
      while (d >= 0 && ++idx[d] == view_.shape[d]) idx[d--] = 0;
      if (d < 0) return;
    }
  }

 private:
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> b(storage_.size() * sizeof(T));
    if (!b.empty()) std::memcpy(b.data(), storage_.data(), b.size());
    return b;
  }
  void mark_view(std::vector<uint8_t>& mask) const {
    for_each([&](const std::array<int64_t, Rank>& idx) {
      int64_t off = kGuard;
      for (int d = 0; d < Rank; ++d) off += idx[d] * view_.strides[d];
      mask[size_t(off)] = 1;
    });
  }

  std::vector<T> storage_;
  std::vector<uint8_t> saved_;
  TensorView<T, Rank> view_;
};

// ----------------------------------------------------------------- ragged batches
// Row offsets [B + 1] for sequence lengths; `broken` names the defect put in (or is empty).
struct RowOffsets {
  std::vector<uint32_t> offs;
  int64_t total = 0;  // T: what the other tensors are sized for
  // A defect in the offsets themselves (offs[0] != 0, a decrease). A last offset that
  // disagrees with T is not recorded here: targets compare their row counts with offs[B].
  std::string defect;
  int64_t last() const { return int64_t(offs.back()); }
  TensorView<const uint32_t, 1> view() const {
    return make_view<const uint32_t>(offs.data(), int64_t(offs.size()));
  }
  int64_t seq_len(int64_t b) const { return int64_t(offs[b + 1]) - int64_t(offs[b]); }
};

// B sequences of 0..max_len new tokens; sometimes a defect (offs[0] != 0, a decrease, a last
// offset that disagrees with T).
inline RowOffsets make_row_offsets(FuzzInput& in, int64_t batch, int64_t max_len,
                                   bool allow_defect) {
  RowOffsets r;
  r.offs.assign(size_t(batch + 1), 0);
  for (int64_t b = 0; b < batch; ++b) {
    r.offs[b + 1] = r.offs[b] + uint32_t(in.int_in(0, max_len));
  }
  r.total = r.offs[batch];
  if (!allow_defect || !in.one_in(8)) return r;
  switch (in.int_in(0, 2)) {
    case 0:
      r.offs[0] = uint32_t(in.int_in(1, 5));
      r.defect = "input_row_offsets[0] != 0";
      break;
    case 1:
      if (batch >= 2 && r.offs[1] > 0) {
        r.offs[1] = r.offs[2] + uint32_t(in.int_in(1, 3));
        r.defect = "input_row_offsets decreasing";
        r.total = r.offs[batch];
      }
      break;
    default:
      r.total = r.offs[batch] + in.pick<int64_t>({-1, 1, 2});
      if (r.total < 0) r.total = 1;
      break;
  }
  return r;
}

// ----------------------------------------------------------------- paged caches
// A small paged cache with real storage, shuffled pages, sentinel entries and (as a defect)
// page ids beyond the sentinel, short lookup tables, or wrong layer counts.
struct FuzzCache {
  PagedKVCacheCollection c;
  std::vector<uint8_t> blocks;  // raw bytes, dtype-sized elements
  std::vector<float> scales;
  std::vector<uint32_t> cache_lengths;
  std::vector<uint32_t> lookup;
  std::vector<uint8_t> saved_blocks;
  std::vector<float> saved_scales;
  std::string defect;  // what make_cache broke ("" for nothing)
  bool page_defect =
      false;  // the defect is a needed page >= num_blocks (ops that skip such rows accept it)

  void fill_pattern(uint8_t pattern) {
    std::memset(blocks.data(), pattern, blocks.size());
    for (auto& s : scales) s = -777.0f;
  }
  void snapshot() {
    saved_blocks = blocks;
    saved_scales = scales;
  }
  bool unchanged() const {
    // Bytes, not floats: NaN patterns compare too.
    return blocks == saved_blocks && scales.size() == saved_scales.size() &&
           (scales.empty() ||
            std::memcmp(scales.data(), saved_scales.data(), scales.size() * sizeof(float)) == 0);
  }
  void refresh_view() {
    c.blocks = blocks.data();
    c.scales = scales.empty() ? nullptr : scales.data();
    c.cache_lengths =
        make_view<const uint32_t>(cache_lengths.data(), int64_t(cache_lengths.size()));
    c.lookup_table = make_view<const uint32_t>(lookup.data(), int64_t(cache_lengths.size()),
                                               cache_lengths.empty()
                                                   ? int64_t(lookup.size())
                                                   : int64_t(lookup.size() / cache_lengths.size()));
  }
  // Byte offset of element (page, kv, layer, slot, head, d).
  size_t byte_offset(int64_t page, int64_t kv, int64_t layer, int64_t slot, int64_t head,
                     int64_t d) const {
    return size_t(c.element_offset(page, kv, layer, slot, head, d)) * dtype_size(c.dtype);
  }
};

struct CacheShape {
  DType dtype = DType::kBF16;
  int64_t kv_dim = 2, num_layers = 1, page_size = 4, num_heads = 1, head_size = 8;
  int64_t scale_granularity = 0;  // 0: no scales
  int64_t num_blocks = 8;
  int64_t max_cached = -1;  // longest cache_length drawn; -1: 3 pages
};

// Builds a cache of `shape` for B sequences that need `needed[b]` new positions after their
// cached tokens. Lookup tables are long enough and backed by real pages unless the target asks
// for a defect; `*defect` receives what was broken ("" for none).
inline FuzzCache make_cache(FuzzInput& in, const CacheShape& shape,
                            const std::vector<int64_t>& new_tokens, bool allow_defect,
                            std::string* defect) {
  FuzzCache fc;
  const int64_t batch = int64_t(new_tokens.size());
  PagedKVCacheCollection& c = fc.c;
  c.dtype = shape.dtype;
  c.kv_dim = shape.kv_dim;
  c.num_layers = shape.num_layers;
  c.page_size = shape.page_size;
  c.num_heads = shape.num_heads;
  c.head_size = shape.head_size;
  c.scale_granularity = shape.scale_granularity;
  // Cache lengths and the pages each sequence needs.
  fc.cache_lengths.resize(size_t(batch));
  int64_t max_pages = 1, total_pages = 0;
  std::vector<int64_t> pages_needed(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    fc.cache_lengths[b] =
        uint32_t(in.int_in(0, shape.max_cached >= 0 ? shape.max_cached : 3 * shape.page_size));
    const int64_t end = fc.cache_lengths[b] + new_tokens[b];
    pages_needed[b] = (end + shape.page_size - 1) / shape.page_size;
    max_pages = std::max(max_pages, pages_needed[b] + in.int_in(0, 1));
    total_pages += pages_needed[b];
  }
  c.num_blocks = std::max<int64_t>(total_pages + in.int_in(0, 2), 1);
  // Shuffled page pool; sentinels (num_blocks) in the unused entries.
  std::vector<uint32_t> pool(size_t(c.num_blocks));
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = uint32_t(i);
  for (size_t i = pool.size(); i > 1; --i)
    std::swap(pool[i - 1], pool[size_t(in.int_in(0, int64_t(i) - 1))]);
  fc.lookup.assign(size_t(batch * max_pages), uint32_t(c.num_blocks));
  size_t next = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t p = 0; p < pages_needed[b]; ++p) fc.lookup[b * max_pages + p] = pool[next++];
    // Unused entries: the sentinel, or any id at or past it (never read).
    for (int64_t p = pages_needed[b]; p < max_pages; ++p) {
      if (in.one_in(3)) fc.lookup[b * max_pages + p] = uint32_t(c.num_blocks + in.int_in(0, 1000));
    }
  }
  std::string d;
  if (allow_defect && batch > 0 && in.one_in(6)) {
    const int64_t b = in.int_in(0, batch - 1);
    switch (in.int_in(0, 2)) {
      case 0:  // a needed page is a sentinel or beyond
        if (pages_needed[b] > 0) {
          const int64_t p = in.int_in(0, pages_needed[b] - 1);
          fc.lookup[b * max_pages + p] = uint32_t(c.num_blocks + in.pick<int64_t>({0, 1, 99999}));
          d = "lookup_table: a needed page of sequence " + std::to_string(b) + " is out of range";
          fc.page_defect = true;
        }
        break;
      case 1: {  // the cache length overflows the lookup table
        const int64_t capacity = max_pages * shape.page_size;
        fc.cache_lengths[b] = uint32_t(capacity - new_tokens[b] + in.int_in(1, 5));
        d = "cache_lengths: sequence " + std::to_string(b) + " does not fit in the lookup table";
        break;
      }
      default:  // a huge cache length (uint32 arithmetic must not wrap)
        fc.cache_lengths[b] = uint32_t(0xFFFFFFFFu - uint32_t(in.int_in(0, 3)));
        d = "cache_lengths: huge value for sequence " + std::to_string(b);
        break;
    }
  }
  *defect = d;
  fc.defect = d;
  const int64_t elements =
      c.num_blocks * c.kv_dim * c.num_layers * c.page_size * c.num_heads * c.head_size;
  fc.blocks.assign(size_t(elements) * dtype_size(c.dtype), 0);
  if (shape.scale_granularity > 0) {
    fc.scales.assign(
        size_t(c.num_blocks * c.kv_dim * c.num_layers * c.page_size * c.num_heads * c.scale_cols()),
        0.0f);
  }
  fc.refresh_view();
  // An empty batch keeps a [0, max_pages] lookup table.
  if (batch == 0) c.lookup_table.shape = {0, max_pages};
  return fc;
}

}  // namespace quantkv::fuzz
