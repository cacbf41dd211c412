// ZeroPages (core/zero_pages.h): zero, page-aligned, committed only where written, and a clear
// error when the system refuses.
#include "core/zero_pages.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

namespace kvs {
namespace {

// Resident bytes of this process (/proc/self/statm, second field, in pages).
uint64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? uint64_t{resident} * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

TEST(ZeroPages, ZeroAlignedAndWritable) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  ZeroPages z = ZeroPages::map(3 * page + 5, "a test").value();
  ASSERT_NE(z.data(), nullptr);
  EXPECT_EQ(z.size(), 3 * page + 5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z.data()) % page, 0u);
  for (uint64_t i = 0; i < z.size(); ++i) ASSERT_EQ(z.data()[i], 0) << i;
  z.data()[z.size() - 1] = 7;
  ZeroPages moved = std::move(z);
  EXPECT_EQ(z.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(moved.data()[moved.size() - 1], 7);
}

TEST(ZeroPages, NothingForZeroBytes) {
  const ZeroPages z = ZeroPages::map(0, "nothing").value();
  EXPECT_EQ(z.data(), nullptr);
  EXPECT_EQ(z.size(), 0u);
}

// A buffer sized for the worst case costs memory only where it is written.
TEST(ZeroPages, CommittedOnlyWhereWritten) {
  const uint64_t before = resident_bytes();
  if (before == 0) GTEST_SKIP() << "no /proc/self/statm";
  const uint64_t mib = uint64_t{1} << 20;
  ZeroPages z = ZeroPages::map(256 * mib, "a large buffer").value();
  EXPECT_LT(resident_bytes(), before + 8 * mib);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (uint64_t i = 0; i < 32 * mib; i += page) z.data()[i] = 1;
  const uint64_t written = resident_bytes();
  EXPECT_GE(written, before + 30 * mib);
  EXPECT_LT(written, before + 64 * mib);
}

TEST(ZeroPages, RefusedSaysWhatAndHowMuch) {
  const Result<ZeroPages> z = ZeroPages::map(uint64_t{1} << 62, "the KV pool");
  ASSERT_FALSE(z.is_ok());
  EXPECT_EQ(z.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(z.status().message(), "could not allocate 4611686018427387904 bytes for the KV pool");
}

}  // namespace
}  // namespace kvs
