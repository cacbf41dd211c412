// CircuitBreaker: closed -> open after the threshold, refusing until the backoff passes, one
// probe when half-open, backoff doubling to its cap, reset on success; against a simple model
// under random outcomes.
#include "tiers/circuit_breaker.h"

#include <gtest/gtest.h>

#include <random>

namespace kvs {
namespace {

using State = CircuitBreaker::State;

TEST(CircuitBreakerTest, OpensAfterTheThresholdAndProbesAfterTheBackoff) {
  CircuitBreaker b(3, 1.0, 4.0);
  EXPECT_TRUE(b.allow(0));
  b.on_failure(0);
  b.on_failure(0);
  EXPECT_EQ(b.state(), State::kClosed);
  b.on_success();  // a success in between resets the count
  b.on_failure(0);
  b.on_failure(0);
  EXPECT_EQ(b.state(), State::kClosed);
  b.on_failure(0);
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_EQ(b.times_opened(), 1u);
  EXPECT_FALSE(b.allow(0.5));
  EXPECT_TRUE(b.refusing(0.5));
  EXPECT_TRUE(b.allow(1.0));  // the probe
  EXPECT_EQ(b.state(), State::kHalfOpen);
  EXPECT_FALSE(b.allow(1.0));  // only one at a time
  b.on_failure(1.0);           // the probe failed: open, backoff doubled
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_DOUBLE_EQ(b.backoff_s(), 2.0);
  EXPECT_FALSE(b.allow(2.9));
  EXPECT_TRUE(b.allow(3.0));
  b.on_failure(3.0);
  EXPECT_DOUBLE_EQ(b.backoff_s(), 4.0);
  EXPECT_TRUE(b.allow(7.0));
  b.on_failure(7.0);
  EXPECT_DOUBLE_EQ(b.backoff_s(), 4.0);  // capped
  EXPECT_TRUE(b.allow(11.0));
  b.on_success();
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_DOUBLE_EQ(b.backoff_s(), 1.0);
  EXPECT_TRUE(b.allow(11.0));
  EXPECT_EQ(b.times_opened(), 4u);
}

// A model of the rules, checked step by step under random outcomes and clock moves.
TEST(CircuitBreakerTest, MatchesASimpleModelUnderRandomOutcomes) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    CircuitBreaker b(2, 0.5, 4.0);
    State st = State::kClosed;
    int fails = 0;
    double backoff = 0.5, until = 0, now = 0;
    bool probing = false;
    for (int i = 0; i < 400; ++i) {
      now += std::uniform_real_distribution<double>(0, 0.4)(rng);
      bool expect_allow = false;
      if (st == State::kClosed) {
        expect_allow = true;
      } else if (st == State::kOpen && now >= until) {
        st = State::kHalfOpen;
        probing = true;
        expect_allow = true;
      } else if (st == State::kHalfOpen && !probing) {
        probing = true;
        expect_allow = true;
      }
      ASSERT_EQ(b.allow(now), expect_allow) << "round " << round << " step " << i;
      if (!expect_allow) continue;
      if (rng() % 3 == 0) {
        b.on_success();
        st = State::kClosed;
        fails = 0;
        backoff = 0.5;
        probing = false;
      } else {
        b.on_failure(now);
        probing = false;
        if (st == State::kHalfOpen) {
          backoff = std::min(4.0, backoff * 2);
          st = State::kOpen;
          until = now + backoff;
        } else if (++fails >= 2) {
          st = State::kOpen;
          until = now + backoff;
          fails = 0;
        }
      }
      ASSERT_EQ(b.state(), st);
    }
  }
}

}  // namespace
}  // namespace kvs
