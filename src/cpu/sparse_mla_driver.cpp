// The CPU loop of sparse MLA attention (see sparse_mla_driver.hpp; the order is
// docs/sparse_mla.md's). Compiled with -ffp-contract=off (CMakeLists.txt): the dequantisation,
// the softmax and the final division round every step on their own, as the scalar reference.
#include "cpu/sparse_mla_driver.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "core/checked_math.hpp"
#include "core/out_of_memory.hpp"
#include "core/threads.hpp"
#include "cpu/kernels.hpp"

namespace quantkv::cpu {
namespace {

constexpr int64_t kKeyBlock = 64;      // keys gathered and scored per kernel call
constexpr int64_t kMaxHeadBlock = 64;  // heads of one work item
constexpr int64_t kPrefetchRows = 4;   // rows prefetched ahead of the one dequantised

int thread_index() {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

int team_size() {
#if defined(_OPENMP)
  return omp_get_num_threads();
#else
  return 1;
#endif
}

// The shape of a validated call.
struct Geometry {
  int64_t t = 0, h = 0, d_qk = 0, d_v = 0, top_k = 0;
  bool fp8 = false;
};

// Rows `slots[0 .. n)` dequantised to fp32, their values [d0, d1): dst[i * (d1 - d0) + d - d0]
// (d0 a multiple of 128 with the fp8 cache). bf16: the value widened (exact). fp8: fl(float(e4m3)
// * scale) for d < d_v (the codes widened by the kernel table's e4m3 -> f32 row convert, exact,
// then one multiply each), the rope values (bf16) widened. The rows are random slots of a cache
// far larger than the caches: each row's bytes are prefetched (into L2) kPrefetchRows rows
// ahead, from slots[n .. avail) too (the next block's).
void gather_rows(const SparseMlaArgs& a, const Geometry& g, const ConvertKernels& convert,
                 const int32_t* slots, int64_t n, int64_t avail, int64_t d0, int64_t d1,
                 float* dst) {
  const int64_t width = d1 - d0;
  const int64_t row_bytes = g.fp8 ? a.kv_fp8.shape[1] : a.kv.shape[1] * int64_t(sizeof(bfloat16));
  // (The prefetch is written out in each loop: GCC 12 drops it as dead code in a lambda.)
  const char* base = g.fp8 ? reinterpret_cast<const char*>(a.kv_fp8.data)
                           : reinterpret_cast<const char*>(a.kv.data);
  const int64_t stride_bytes = g.fp8 ? a.kv_fp8.strides[0] : a.kv.strides[0] * 2;
  if (!g.fp8) {
    for (int64_t i = 0; i < n; ++i) {
      if (i + kPrefetchRows < avail) {
        const char* next = base + slots[i + kPrefetchRows] * stride_bytes;
        for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(next + b, 0, 2);
      }
      const uint16_t* row = &a.kv(slots[i], d0).bits;
      float* out = dst + i * width;
      for (int64_t d = 0; d < width; ++d) out[d] = bf16_to_float(row[d]);
    }
    return;
  }
  const int64_t nope_end = std::min(d1, g.d_v);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchRows < avail) {
      const char* next = base + slots[i + kPrefetchRows] * stride_bytes;
      for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(next + b, 0, 2);
    }
    const uint8_t* row = &a.kv_fp8(slots[i], 0);
    float* out = dst + i * width - d0;  // out[d] for d in [d0, d1)
    if (d0 < nope_end) convert.e4m3_to_f32(row + d0, out + d0, nope_end - d0);
    for (int64_t b = d0 / 128; b * 128 < nope_end; ++b) {
      float scale;  // little-endian fp32 (the engines' layout; x86-64 and aarch64 hosts)
      std::memcpy(&scale, row + g.d_v + 4 * b, sizeof scale);
      float* o = out + b * 128;
      const int64_t len = std::min<int64_t>(128, nope_end - b * 128);
      for (int64_t d = 0; d < len; ++d) o[d] = o[d] * scale;
    }
    const uint8_t* rope = row + g.d_v + 4 * (g.d_v / 128);
    for (int64_t d = std::max(d0, g.d_v); d < d1; ++d) {
      uint16_t bits;
      std::memcpy(&bits, rope + 2 * (d - g.d_v), sizeof bits);
      out[d] = bf16_to_float(bits);
    }
  }
}

// One thread's scratch, sized for the largest work item. In split mode (one item, every thread)
// slots, q_t, s, p and acc are thread 0's, shared by the team; rows, m and l each thread's own.
struct Scratch {
  std::vector<int32_t> slots;  // [top_k] the valid slots of the token, in j order
  std::vector<float> q_t;      // [d_qk, hp] the item's queries, transposed, zero-padded heads
  std::vector<float> rows;     // [kKeyBlock, d_qk] dequantised rows
  std::vector<float> s;        // [top_k, hp] scores (one thread: then the softmax numerators)
  std::vector<float> p;        // [top_k, hp] the softmax numerators (split mode only)
  std::vector<float> acc;      // [hb, d_v] the PV chains, value chunk after value chunk
  std::vector<float> m, l;     // [hp] max and sum per head
};

// The threads that share one item: thread `id` of `count`; sync() is a barrier of the team (an
// OpenMP barrier in split mode, nothing for a team of one). Key blocks and value chunks are
// handed out round robin; which thread computes one never changes its bits, and the reductions
// over j (max, sum) run whole, in j order, on every thread that needs them.
struct Team {
  int id = 0, count = 1;
  void sync() const {
    if (count > 1) {
#pragma omp barrier
    }
  }
  bool mine(int64_t chunk) const { return chunk % count == id; }
};

// Value chunks of a team of several threads (a multiple of 128: the fp8 scale blocks); a team
// of one takes all of d_v at once.
constexpr int64_t kValueChunk = 128;

// One token's heads [h0, h0 + hb), by `team`: sh is the team's shared scratch (slots, q_t, s,
// acc), own this thread's (rows, m, l), p the numerators (sh.s itself for a team of one).
void run_item(const SparseMlaArgs& a, const Geometry& g, const KernelTable& kt, int64_t t,
              int64_t h0, int64_t hb, int64_t n, Scratch& sh, Scratch& own, float* p,
              const Team& team) {
  const int64_t hp = (hb + kSparseMlaHeadPad - 1) / kSparseMlaHeadPad * kSparseMlaHeadPad;
  const float* q_t = sh.q_t.data();
  float* s = sh.s.data();
  float* rows = own.rows.data();
  const int64_t key_blocks = (n + kKeyBlock - 1) / kKeyBlock;
  for (int64_t kb = 0; kb < key_blocks; ++kb) {  // scores
    if (!team.mine(kb)) continue;
    const int64_t j0 = kb * kKeyBlock, nk = std::min(kKeyBlock, n - j0);
    gather_rows(a, g, kt.convert, sh.slots.data() + j0, nk, n - j0, 0, g.d_qk, rows);
    kt.sparse_mla.score(q_t, hp, rows, g.d_qk, nk, g.d_qk, a.sm_scale, s + j0 * hp);
  }
  team.sync();
  // Softmax per head: m = max over j in j order, p_j = exp_f32(s_j - m) (the level's vector
  // kernel, the same bits as the scalar function), l = sum of p_j in j order.
  float* m = own.m.data();
  float* l = own.l.data();
  for (int64_t h = 0; h < hp; ++h) m[h] = s[h];
  for (int64_t j = 1; j < n; ++j) {
    for (int64_t h = 0; h < hp; ++h) m[h] = s[j * hp + h] > m[h] ? s[j * hp + h] : m[h];
  }
  for (int64_t kb = 0; kb < key_blocks; ++kb) {
    if (!team.mine(kb)) continue;
    const int64_t j1 = std::min(n, (kb + 1) * kKeyBlock);
    for (int64_t j = kb * kKeyBlock; j < j1; ++j) {
      kt.math.exp_diff(s + j * hp, m, hp, p + j * hp);
    }
  }
  team.sync();
  for (int64_t h = 0; h < hp; ++h) l[h] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t h = 0; h < hp; ++h) l[h] = l[h] + p[j * hp + h];
  }
  // PV per value chunk [v0, v1) (acc chunk [hb, v1 - v0] at acc + hb * v0), then its outputs.
  const int64_t chunk = team.count > 1 ? kValueChunk : g.d_v;
  const int64_t value_chunks = (g.d_v + chunk - 1) / chunk;
  for (int64_t c = 0; c < value_chunks; ++c) {
    if (!team.mine(c)) continue;
    const int64_t v0 = c * chunk, w = std::min(chunk, g.d_v - v0);
    float* acc = sh.acc.data() + hb * v0;
    std::fill(acc, acc + hb * w, 0.0f);
    for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, n - j0);
      gather_rows(a, g, kt.convert, sh.slots.data() + j0, nk, n - j0, v0, v0 + w, rows);
      kt.sparse_mla.pv(p + j0 * hp, hp, hb, rows, w, nk, w, acc);
    }
    for (int64_t h = 0; h < hb; ++h) {
      for (int64_t v = 0; v < w; ++v) {
        a.out(t, h0 + h, v0 + v) = bfloat16{float_to_bf16(acc[h * w + v] / l[h])};
      }
    }
  }
  if (a.lse.data != nullptr && team.id == 0) {
    for (int64_t h = 0; h < hb; ++h) a.lse(t, h0 + h) = m[h] + std::log(l[h]);
  }
}

// The item's valid slots (into sc.slots, in j order; returns their count) and its transposed
// queries; with no valid slot, writes out = 0 and lse = -inf instead.
int64_t prepare_item(const SparseMlaArgs& a, const Geometry& g, int64_t t, int64_t h0, int64_t hb,
                     Scratch& sc) {
  const int64_t hp = (hb + kSparseMlaHeadPad - 1) / kSparseMlaHeadPad * kSparseMlaHeadPad;
  const int64_t len = a.topk_length.data != nullptr ? int64_t(a.topk_length(t)) : g.top_k;
  int64_t n = 0;
  for (int64_t j = 0; j < len; ++j) {
    const int32_t slot = a.indices(t, j);
    if (slot >= 0) sc.slots[std::size_t(n++)] = slot;
  }
  if (n == 0) {  // no valid slot: out = 0, lse = -inf
    for (int64_t h = 0; h < hb; ++h) {
      for (int64_t v = 0; v < g.d_v; ++v) a.out(t, h0 + h, v) = bfloat16{0};
      if (a.lse.data != nullptr) a.lse(t, h0 + h) = -std::numeric_limits<float>::infinity();
    }
    return 0;
  }
  float* q_t = sc.q_t.data();
  for (int64_t d = 0; d < g.d_qk; ++d) {
    for (int64_t h = 0; h < hp; ++h) {
      q_t[d * hp + h] = h < hb ? bf16_to_float(a.q(t, h0 + h, d).bits) : 0.0f;
    }
  }
  return n;
}

// Heads per work item: up to kMaxHeadBlock, fewer (multiples of the padding) when the tokens
// alone give the threads too few items. The results do not depend on it.
int64_t head_block(const Geometry& g, int threads) {
  int64_t hb = std::min(g.h, kMaxHeadBlock);
  const int64_t blocks = (g.h + hb - 1) / hb;
  if (g.t * blocks < threads) {
    const int64_t want = (threads + g.t - 1) / g.t;  // blocks per token
    hb = (g.h + want - 1) / want;
    hb = std::max<int64_t>(kSparseMlaHeadPad,
                           (hb + kSparseMlaHeadPad - 1) / kSparseMlaHeadPad * kSparseMlaHeadPad);
    hb = std::min(hb, std::min(g.h, kMaxHeadBlock));
  }
  return hb;
}

}  // namespace

Status run_sparse_mla(const SparseMlaArgs& a, const Context& ctx) {
  Geometry g;
  g.t = a.q.shape[0];
  g.h = a.q.shape[1];
  g.d_qk = a.q.shape[2];
  g.d_v = a.out.shape[2];
  g.top_k = a.indices.shape[1];
  g.fp8 = a.kv_fp8.data != nullptr;
  if (g.t == 0 || g.h == 0) return Status::Ok();
  const double macs = double(g.t) * double(g.h) * double(g.top_k) * double(g.d_qk + g.d_v);
  const int threads = threads_for_work(ctx, macs, kMinMacsPerThread);
  const int64_t hb = head_block(g, threads);
  const int64_t blocks = (g.h + hb - 1) / hb;
  const int64_t items = g.t * blocks;
  const int64_t hp = (hb + kSparseMlaHeadPad - 1) / kSparseMlaHeadPad * kSparseMlaHeadPad;
  // Every scratch size fits (the views' extents were checked; top_k * hp may still not).
  int64_t s_len = 0, q_len = 0, row_len = 0, acc_len = 0;
  if (!checked::mul(std::max<int64_t>(g.top_k, 1), hp, &s_len) ||
      !checked::mul(s_len, int64_t(sizeof(float)) * threads, &s_len) ||
      !checked::mul(g.d_qk, hp, &q_len) || !checked::mul(kKeyBlock, g.d_qk, &row_len) ||
      !checked::mul(hb, g.d_v, &acc_len)) {
    return resource_exhausted("indices: top_k = " + std::to_string(g.top_k) +
                              " needs a score scratch larger than the address space");
  }
  s_len /= int64_t(sizeof(float)) * threads;
  std::vector<Scratch> scratch(static_cast<std::size_t>(threads));
  const bool split = items < threads && threads > 1;
  if (split) scratch[0].p.resize(std::size_t(s_len));
  for (Scratch& sc : scratch) {
    if (!split || &sc == &scratch[0]) {  // in split mode the others need only rows, m and l
      sc.slots.resize(std::size_t(std::max<int64_t>(g.top_k, 1)));
      sc.q_t.resize(std::size_t(q_len));
      sc.s.resize(std::size_t(s_len));
      sc.acc.resize(std::size_t(acc_len));
    }
    sc.rows.resize(std::size_t(row_len));
    sc.m.resize(std::size_t(hp));
    sc.l.resize(std::size_t(hp));
  }
  const KernelTable& kt = kernels();
  if (!split) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t t = it / blocks, h0 = (it % blocks) * hb, hb_it = std::min(hb, g.h - h0);
      Scratch& sc = scratch[std::size_t(thread_index())];
      const int64_t n = prepare_item(a, g, t, h0, hb_it, sc);
      if (n > 0) run_item(a, g, kt, t, h0, hb_it, n, sc, sc, sc.s.data(), Team{});
    }
    return Status::Ok();
  }
  // Split mode: fewer items than threads (a decode step of one token with few heads); each item
  // in turn by every thread, its key blocks and value chunks split between them.
  for (int64_t it = 0; it < items; ++it) {
    const int64_t t = it / blocks, h0 = (it % blocks) * hb, hb_it = std::min(hb, g.h - h0);
    Scratch& sc = scratch[0];
    const int64_t n = prepare_item(a, g, t, h0, hb_it, sc);
    if (n == 0) continue;
#pragma omp parallel num_threads(threads)
    {
      Team team;
      team.id = thread_index();
      team.count = team_size();
      run_item(a, g, kt, t, h0, hb_it, n, sc, scratch[std::size_t(team.id)], sc.p.data(), team);
    }
  }
  return Status::Ok();
}

}  // namespace quantkv::cpu
