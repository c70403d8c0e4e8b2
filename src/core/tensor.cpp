#include "quantkv/tensor.hpp"

#include <sstream>

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
    if (expected[d] == kAnyExtent) os << '*'; else os << expected[d];
  }
  os << ']';
  return os.str();
}

Status check_view(const char* name, const char* dims, const void* data, const int64_t* shape,
                  const int64_t* strides, int rank, const int64_t* expected,
                  bool require_contiguous) {
  const std::string got = format_shape(shape, rank);
  int64_t numel = 1;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] < 0) {
      return invalid_argument(std::string(name) + ": negative extent in shape " + got);
    }
    numel *= shape[d];
  }
  for (int d = 0; d < rank; ++d) {
    if (expected[d] != kAnyExtent && shape[d] != expected[d]) {
      return invalid_argument(std::string(name) + ": expected shape " +
                              expected_shape(dims, expected, rank) + ", got shape " + got);
    }
  }
  if (numel > 0 && data == nullptr) {
    return invalid_argument(std::string(name) + ": data pointer is null for shape " + got);
  }
  int64_t contiguous = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (strides[d] < 0) {
      return invalid_argument(std::string(name) + ": negative stride " +
                              std::to_string(strides[d]) + " in dimension " + std::to_string(d));
    }
    if (require_contiguous && shape[d] > 1 && strides[d] != contiguous) {
      return invalid_argument(std::string(name) + ": expected a contiguous row-major tensor, " +
                              "dimension " + std::to_string(d) + " has stride " +
                              std::to_string(strides[d]) + ", expected " +
                              std::to_string(contiguous));
    }
    contiguous *= shape[d];
  }
  return Status::Ok();
}

}  // namespace detail
}  // namespace quantkv
