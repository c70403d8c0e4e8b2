// The caches the Python operations take: PagedKVCache, the library's owning cache whose
// storage the module exposes as numpy arrays, and PagedCacheView, a view of an engine's own
// arrays (blocks, cache lengths, page table, scales: numpy, ml_dtypes or torch, no copy).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "quantkv/paged_kv.hpp"

namespace quantkv::python {

struct PyPagedKVCache {
  PagedKVCache cache;
};

// An engine-owned cache: the collection points into the caller's arrays, which the view keeps
// alive (the objects as passed, and the numpy arrays imported from them).
struct PyCacheView {
  PagedKVCacheCollection view;
  pybind11::object blocks, cache_lengths, lookup_table, scales;  // as passed by the caller
  pybind11::list imported;                                       // keeps the imports alive
};

// The collection of a PagedKVCache or a PagedCacheView argument; TypeError names `name`
// otherwise. The caller keeps `obj` alive while the collection is used.
PagedKVCacheCollection cache_collection(pybind11::handle obj, const char* name);

}  // namespace quantkv::python
