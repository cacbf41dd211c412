#include "tiers/circuit_breaker.h"

#include <algorithm>

namespace kvs {

CircuitBreaker::CircuitBreaker(uint32_t failure_threshold, double initial_backoff_s,
                               double max_backoff_s)
    : threshold_(std::max<uint32_t>(1, failure_threshold)),
      initial_backoff_s_(initial_backoff_s),
      max_backoff_s_(std::max(initial_backoff_s, max_backoff_s)),
      backoff_s_(initial_backoff_s) {}

bool CircuitBreaker::allow(double now) {
  switch (state_) {
    case State::kClosed: return true;
    case State::kOpen:
      if (now < open_until_) return false;
      state_ = State::kHalfOpen;
      probe_in_flight_ = true;
      return true;
    case State::kHalfOpen:
      if (probe_in_flight_) return false;
      probe_in_flight_ = true;
      return true;
  }
  return false;
}

void CircuitBreaker::on_success() {
  state_ = State::kClosed;
  consecutive_failures_ = 0;
  probe_in_flight_ = false;
  backoff_s_ = initial_backoff_s_;
}

void CircuitBreaker::on_failure(double now) {
  probe_in_flight_ = false;
  if (state_ == State::kHalfOpen) {
    backoff_s_ = std::min(max_backoff_s_, backoff_s_ * 2);
    open(now);
    return;
  }
  if (state_ == State::kClosed && ++consecutive_failures_ >= threshold_) open(now);
}

void CircuitBreaker::open(double now) {
  state_ = State::kOpen;
  open_until_ = now + backoff_s_;
  consecutive_failures_ = 0;
  ++times_opened_;
}

const char* breaker_state_name(CircuitBreaker::State s) {
  switch (s) {
    case CircuitBreaker::State::kClosed: return "closed";
    case CircuitBreaker::State::kOpen: return "open";
    case CircuitBreaker::State::kHalfOpen: return "half_open";
  }
  return "?";
}

}  // namespace kvs
