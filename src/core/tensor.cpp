#include "quantkv/tensor.hpp"

#include <algorithm>
#include <sstream>

#include "core/checked_math.hpp"
#include "core/view_checks.hpp"

namespace quantkv {

std::string format_shape(const int64_t* shape, int rank) {
  std::ostringstream os;
  os << '[';
  for (int d = 0; d < rank; ++d) os << (d ? ", " : "") << shape[d];
  os << ']';
  return os.str();
}

namespace detail {

static std::string expected_shape(const char* dims, const int64_t* expected, int rank) {
  // "[T=5, H, D]" style is hard to derive from free text; print the dims text and the values.
  std::ostringstream os;
  os << dims << " = [";
  for (int d = 0; d < rank; ++d) {
    os << (d ? ", " : "");
    if (expected[d] == kAnyExtent)
      os << '*';
    else
      os << expected[d];
  }
  os << ']';
  return os.str();
}

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The largest element offset of a view with non-negative extents and strides, and its bytes;
// false when either overflows.
bool checked_span(const int64_t* shape, const int64_t* strides, int rank, std::size_t element_size,
                  int64_t* bytes) {
  int64_t last = 0;  // offset of the last element
  for (int d = 0; d < rank; ++d) {
    int64_t step;
    if (!checked::mul(shape[d] - 1, strides[d], &step) || !checked::add(last, step, &last)) {
      return false;
    }
  }
  return checked::add(last, 1, &last) && checked::bytes(last, element_size, bytes);
}

}  // namespace

Status check_view(const char* name, const char* dims, const void* data, const int64_t* shape,
                  const int64_t* strides, int rank, const int64_t* expected,
                  bool require_contiguous, std::size_t element_size) {
  // Built only for a message: validation allocates nothing when the view is fine.
  const auto got = [&] { return format_shape(shape, rank); };
  for (int d = 0; d < rank; ++d) {
    if (shape[d] < 0) {
      return invalid_argument(std::string(name) + ": negative extent in shape " + got());
    }
  }
  for (int d = 0; d < rank; ++d) {
    if (expected[d] != kAnyExtent && shape[d] != expected[d]) {
      return invalid_argument(std::string(name) + ": expected shape " +
                              expected_shape(dims, expected, rank) + ", got shape " + got());
    }
  }
  int64_t numel = 0;
  if (!checked::product(shape, rank, &numel)) {
    return invalid_argument(std::string(name) + ": the element count of shape " + got() +
                            " overflows int64");
  }
  if (numel > 0 && data == nullptr) {
    return invalid_argument(std::string(name) + ": data pointer is null for shape " + got());
  }
  int64_t contiguous = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (strides[d] < 0) {
      return invalid_argument(std::string(name) + ": negative stride " + str(strides[d]) +
                              " in dimension " + str(d));
    }
    if (require_contiguous && numel > 0 && shape[d] > 1 && strides[d] != contiguous) {
      return invalid_argument(std::string(name) + ": expected a contiguous row-major tensor, " +
                              "dimension " + str(d) + " has stride " + str(strides[d]) +
                              ", expected " + str(contiguous));
    }
    // Saturates: with an empty dimension the other extents' product may not fit.
    if (!checked::mul(contiguous, shape[d], &contiguous)) contiguous = INT64_MAX;
  }
  int64_t bytes = 0;
  if (numel > 0 && !checked_span(shape, strides, rank, element_size, &bytes)) {
    return invalid_argument(std::string(name) + ": shape " + got() + " with strides " +
                            format_shape(strides, rank) + " spans more than 2^63-1 bytes");
  }
  return Status::Ok();
}

Status check_distinct_elements(const char* name, const int64_t* shape, const int64_t* strides,
                               int rank) {
  // Dimensions with more than one index, innermost (smallest stride) first; each must step
  // past everything the dimensions inside it span.
  int order[8];
  int n = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return Status::Ok();  // no elements
    if (shape[d] > 1) order[n++] = d;
  }
  std::stable_sort(order, order + n, [&](int a, int b) { return strides[a] < strides[b]; });
  int64_t inner_span = 1;  // elements spanned by the dimensions already visited
  for (int i = 0; i < n; ++i) {
    const int d = order[i];
    if (strides[d] < inner_span) {
      return invalid_argument(std::string(name) + ": elements overlap (dimension " + str(d) +
                              " has stride " + str(strides[d]) +
                              " but the dimensions inside it span " + str(inner_span) +
                              " elements); an output needs distinct memory " + "per element");
    }
    inner_span = strides[d] * (shape[d] - 1) + inner_span;  // fits: the view was validated
  }
  return Status::Ok();
}

int64_t span_bytes(const int64_t* shape, const int64_t* strides, int rank,
                   std::size_t element_size) {
  int64_t bytes = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return 0;
  }
  return checked_span(shape, strides, rank, element_size, &bytes) ? bytes : checked::kMaxBytes;
}

}  // namespace detail

Status check_no_overlap(const MemoryRange& written, std::initializer_list<MemoryRange> others) {
  for (const MemoryRange& o : others) {
    const bool empty = written.begin == written.end || o.begin == o.end;
    if (!empty && written.begin < o.end && o.begin < written.end) {
      return invalid_argument(std::string(written.name) + ": overlaps " + o.name +
                              " in memory; outputs must not alias the call's other buffers");
    }
  }
  return Status::Ok();
}

}  // namespace quantkv
