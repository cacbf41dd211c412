// Runs a test body once per SIMD target compiled into the binary that this CPU supports (e.g.
// AVX3_DL, AVX3, AVX2, EMU128), so that every Highway code path is tested, not just the best one.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>

namespace kvs::test {

template <class F>
void for_each_target(F&& f) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    f();
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace kvs::test
