// The robustness fixtures of the indexer and its K store over the engines' layout: the MAX
// fixtures (robustness_fixtures.hpp) plus a copy of their layer in the engines' layout, and
// int32 views of the block table and the row offsets, which the tests may break.
#pragma once

#include <cstdint>
#include <vector>

#include "engine_layout_util.hpp"
#include "quantkv/engine_layout.hpp"
#include "robustness_fixtures.hpp"

namespace quantkv::testing {

// int32 copies of the fixture's block table and offsets, read through as_uint32_view.
struct Int32Tables {
  std::vector<int32_t> table, offs;
  void copy_from(const PagedKVCacheCollection& c, const std::vector<uint32_t>& offsets) {
    table.assign(c.lookup_table.data, c.lookup_table.data + c.lookup_table.numel());
    offs.assign(offsets.begin(), offsets.end());
  }
  TensorView<const uint32_t, 2> table_view(const PagedKVCacheCollection& c) const {
    return as_uint32_view(
        make_view<const int32_t>(table.data(), c.lookup_table.shape[0], c.lookup_table.shape[1]));
  }
  TensorView<const uint32_t, 1> offs_view() const {
    return as_uint32_view(make_view<const int32_t>(offs.data(), int64_t(offs.size())));
  }
};

struct EngineIndexerFixture : IndexerFixture {
  EngineCopy engine;
  Int32Tables int32;
  IndexOutput output = IndexOutput::kPositions;
  void build(uint64_t seed) {
    IndexerFixture::build(seed);
    engine = make_engine_copy(kc, layer);
    int32.copy_from(kc, offs);
    engine.view.lookup_table = int32.table_view(kc);
  }
  Status run(const Context& ctx = {}) {
    return mla_indexer_ragged_float8_paged(out_view(), q_view(), qs_view(), int32.offs_view(),
                                           engine.view, mask, ctx, IndexerOptions{output, nullptr});
  }
};

struct EngineKStoreFixture : KStoreFixture {
  EngineCopy engine;
  Int32Tables int32;
  void build(uint64_t seed) {
    KStoreFixture::build(seed);
    engine = make_engine_copy(kc, layer);
    int32.copy_from(kc, offs);
    engine.view.lookup_table = int32.table_view(kc);
  }
  Status run(const Context& ctx = {}) {
    return indexer_k_store(k_view(), int32.offs_view(), engine.view, mode, ctx);
  }
};

}  // namespace quantkv::testing
