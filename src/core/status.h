// Status and Result<T>: the one way expected failures travel (bad input, missing file, out of
// blocks). Bugs are CHECKs (core/check.h), never Status.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace kvs {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller's input is wrong (flag value, request field)
  kNotFound,           // a file, tensor or key that should exist does not
  kDataLoss,           // a file is truncated or corrupt
  kOutOfRange,         // an index or size beyond a limit
  kResourceExhausted,  // out of KV blocks, queue full, memory budget too small
  kUnimplemented,      // a valid input this build does not support (e.g. unknown tensor type)
  kIoError,            // the operating system refused (open, mmap, read)
  kInternal,
  kUnavailable,  // the service cannot take this now (shutting down); retrying later may work
  kCancelled,    // the caller went away or asked to stop
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  [[nodiscard]] bool is_ok() const { return code_ == StatusCode::kOk; }
  [[nodiscard]] StatusCode code() const { return code_; }
  [[nodiscard]] const std::string& message() const { return message_; }
  // "invalid argument: <message>"
  [[nodiscard]] std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

// Result<T>: a T or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    KVS_CHECK_MSG(!std::get<Status>(v_).is_ok(), "Result built from an OK status");
  }

  [[nodiscard]] bool is_ok() const { return std::holds_alternative<T>(v_); }
  [[nodiscard]] const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    KVS_CHECK_MSG(is_ok(), "value() on a failed Result");
    return std::get<T>(v_);
  }
  const T& value() const& {
    KVS_CHECK_MSG(is_ok(), "value() on a failed Result");
    return std::get<T>(v_);
  }
  T&& value() && {
    KVS_CHECK_MSG(is_ok(), "value() on a failed Result");
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvs

// Propagate a failed Status / Result from the current function.
#define KVS_RETURN_IF_ERROR(expr)                 \
  do {                                            \
    ::kvs::Status kvs_status_ = (expr);           \
    if (!kvs_status_.is_ok()) return kvs_status_; \
  } while (0)

#define KVS_CONCAT_INNER(a, b) a##b
#define KVS_CONCAT(a, b) KVS_CONCAT_INNER(a, b)
// KVS_ASSIGN_OR_RETURN(auto x, make_x()); returns the Status on failure.
#define KVS_ASSIGN_OR_RETURN(lhs, expr) \
  KVS_ASSIGN_OR_RETURN_IMPL(KVS_CONCAT(kvs_result_, __LINE__), lhs, expr)
#define KVS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.is_ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
