// Error reporting: every public function returns a Status; no exception crosses the API.
#pragma once

#include <string>
#include <utility>

namespace quantkv {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,    // a shape, dtype, stride, value or pointer is wrong
  kOutOfRange = 2,         // an index (page id, layer, position) is outside its tensor
  kResourceExhausted = 3,  // a memory budget cannot be met
  kUnimplemented = 4,      // valid, but not supported by this build or backend
  kInternal = 5,           // a bug: please report it
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: q: expected rank 3 [T, H, D], got shape [5, 64]"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
inline Status out_of_range(std::string message) {
  return {StatusCode::kOutOfRange, std::move(message)};
}

}  // namespace quantkv

// Returns early from the enclosing function when `expr` yields an error status.
#define QUANTKV_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::quantkv::Status quantkv_status_ = (expr);        \
    if (!quantkv_status_.ok()) return quantkv_status_; \
  } while (0)
