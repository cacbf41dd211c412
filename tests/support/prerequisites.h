// Tests that need something the checkout may lack (the default model, Gemma 3 270M, a
// redis-server, the shared traces next to the checkout) skip without it on a developer's machine,
// and FAIL under CI (CI=true, as CI services set it): there the thing is installed by
// scripts/test, and a test that skipped would read as a pass that checked nothing.
//
// Use SKIP_OR_FAIL_IN_CI() where GTEST_SKIP() would go, with the same streamed message:
//   if (!std::filesystem::exists(path)) SKIP_OR_FAIL_IN_CI() << path << " missing";
// It returns from the enclosing function (a test body, SetUp, or a void helper), as GTEST_SKIP()
// does. Skips that depend on the CPU (an ISA it lacks) stay GTEST_SKIP(): CI cannot fix those.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

namespace kvs::test {

// True when $CI is set to anything but "", "0" or "false" (CI services set CI=true).
inline bool running_in_ci() {
  const char* ci = std::getenv("CI");
  if (ci == nullptr) return false;
  const std::string_view v(ci);
  return !v.empty() && v != "0" && v != "false";
}

inline ::testing::TestPartResult::Type missing_prerequisite_result() {
  return running_in_ci() ? ::testing::TestPartResult::kFatalFailure
                         : ::testing::TestPartResult::kSkip;
}

inline const char* missing_prerequisite_prefix() {
  return running_in_ci() ? "missing prerequisite (a failure because CI is set)"
                         : "missing prerequisite: skipped (a failure under CI=true)";
}

}  // namespace kvs::test

// GTEST_SKIP() locally, FAIL() under CI; stream the reason into it.
#define SKIP_OR_FAIL_IN_CI()                                        \
  return GTEST_MESSAGE_(::kvs::test::missing_prerequisite_prefix(), \
                        ::kvs::test::missing_prerequisite_result())
