// CircuitBreaker: stops calling a remote service that keeps failing, and probes it with backoff.
//
//   closed     calls go through; `failure_threshold` consecutive failures open the breaker
//   open       calls are refused (allow() is false) until the backoff has passed
//   half-open  one probe call goes through: success closes the breaker (and resets the backoff),
//              failure opens it again with the backoff doubled, up to max_backoff
//
// Time is passed in (seconds on any monotonic clock), so tests drive it without sleeping.
// Thread safety: none; the caller holds its lock.
#pragma once

#include <cstdint>

namespace kvs {

class CircuitBreaker {
 public:
  enum class State : uint8_t { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

  explicit CircuitBreaker(uint32_t failure_threshold = 3, double initial_backoff_s = 0.25,
                          double max_backoff_s = 8.0);

  // Whether a call may go now; in the open state past its backoff this moves to half-open and
  // lets exactly one probe through.
  [[nodiscard]] bool allow(double now);
  void on_success();
  void on_failure(double now);

  [[nodiscard]] State state() const { return state_; }
  // Whether calls are refused now (open, backoff not over); no state change.
  [[nodiscard]] bool refusing(double now) const {
    return (state_ == State::kOpen && now < open_until_) ||
           (state_ == State::kHalfOpen && probe_in_flight_);
  }
  [[nodiscard]] uint64_t times_opened() const { return times_opened_; }
  [[nodiscard]] double backoff_s() const { return backoff_s_; }

 private:
  void open(double now);

  uint32_t threshold_;
  double initial_backoff_s_, max_backoff_s_;
  State state_ = State::kClosed;
  uint32_t consecutive_failures_ = 0;
  double backoff_s_;
  double open_until_ = 0;
  bool probe_in_flight_ = false;
  uint64_t times_opened_ = 0;
};

[[nodiscard]] const char* breaker_state_name(CircuitBreaker::State s);

}  // namespace kvs
