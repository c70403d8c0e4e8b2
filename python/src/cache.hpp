// The Python PagedKVCache: the library's owning cache, whose storage the module exposes as
// numpy arrays (zero-copy views kept alive by the Python object).
#pragma once

#include "quantkv/paged_kv.hpp"

namespace quantkv::python {

struct PyPagedKVCache {
  PagedKVCache cache;
};

}  // namespace quantkv::python
