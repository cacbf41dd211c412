// DiskTier and its extent format: round trips, warm restart (index rebuilt from the directory),
// foreign extents, corruption, torn writes, capacity, write errors, and a writer killed with
// SIGKILL mid-write (no torn extent is ever loaded after a restart).
#include "kvcache/disk_tier.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "kvcache/kv_extent.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kBs = 4;
constexpr uint64_t kBlockBytes = 1000;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kvs-disk-tier-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

ExtentNamespace ns_f16() {
  return {.model_fingerprint = 42,
          .k_dtype = KvDtype::kF16,
          .v_dtype = KvDtype::kF16,
          .block_size = kBs,
          .block_bytes = kBlockBytes};
}

// Block k of a chain: deterministic identity, tokens and bytes.
TierBlockMeta meta_of(uint64_t k) {
  return {.key = 1000 + k, .parent_key = k == 0 ? 7 : 1000 + k - 1, .salt_check = 5, .hits = 0};
}
std::vector<int32_t> tokens_of(uint64_t k) {
  return {static_cast<int32_t>(k), 11, 12, static_cast<int32_t>(k * 3)};
}
std::vector<uint8_t> bytes_of(uint64_t k) {
  std::vector<uint8_t> b(kBlockBytes);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(k * 13 + i);
  return b;
}

std::unique_ptr<DiskTier> open_tier(const std::string& dir, ExtentNamespace ns = ns_f16(),
                                    uint64_t capacity = uint64_t{1} << 30, uint32_t extent = 4) {
  auto t =
      DiskTier::open({.dir = dir, .capacity_bytes = capacity, .ns = ns, .extent_blocks = extent});
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

void add_blocks(DiskTier& t, uint64_t first, uint64_t n) {
  for (uint64_t k = first; k < first + n; ++k) {
    const std::vector<uint8_t> b = bytes_of(k);
    ASSERT_TRUE(t.add(meta_of(k), tokens_of(k), b.data()));
  }
}

void expect_block(DiskTier& t, uint64_t k) {
  std::vector<uint8_t> out(kBlockBytes);
  const Status st = t.read_block(meta_of(k), tokens_of(k), out.data());
  ASSERT_TRUE(st.is_ok()) << "block " << k << ": " << st.to_string();
  EXPECT_EQ(out, bytes_of(k)) << "block " << k;
}

std::vector<std::string> extent_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".kvx") out.push_back(e.path().string());
  return out;
}

TEST(KvExtentTest, HeaderRoundTripsAndRejectsGarbage) {
  ExtentHeader h;
  h.ns = ns_f16();
  for (uint64_t k = 0; k < 3; ++k) {
    h.blocks.push_back(meta_of(k));
    const auto t = tokens_of(k);
    h.tokens.insert(h.tokens.end(), t.begin(), t.end());
  }
  const std::vector<uint8_t> bytes = encode_extent_header(h);
  auto back = decode_extent_header(bytes);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->ns, h.ns);
  EXPECT_EQ(back->tokens, h.tokens);
  ASSERT_EQ(back->blocks.size(), 3u);
  EXPECT_EQ(back->blocks[2].key, meta_of(2).key);
  EXPECT_EQ(back->blocks[2].parent_key, meta_of(2).parent_key);
  EXPECT_EQ(back->file_bytes(), bytes.size() + 3 * kBlockBytes + kExtentChecksumBytes);
  // Truncations and flipped bytes of the header: an error, never a crash or a wrong header.
  for (size_t n = 0; n < bytes.size(); n += 7)
    EXPECT_FALSE(decode_extent_header(std::span(bytes).first(n)).is_ok()) << n;
  for (size_t i : {0, 8, 12, 24, 28, 40}) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0x5a;
    EXPECT_FALSE(decode_extent_header(bad).is_ok()) << "byte " << i;
  }
  std::vector<uint8_t> file = bytes;
  file.resize(file.size() + kExtentChecksumBytes);
  extent_checksum(std::span(file).first(bytes.size()), file.data() + bytes.size());
  EXPECT_TRUE(extent_checksum_ok(file));
  file[5] ^= 1;
  EXPECT_FALSE(extent_checksum_ok(file));
}

TEST(DiskTierTest, WarmRestartFindsWhatAnEarlierInstanceWrote) {
  TempDir dir;
  {
    auto t = open_tier(dir.path);
    add_blocks(*t, 0, 10);  // extents of 4, 4 and 2 blocks
    EXPECT_TRUE(t->flush(10));
    EXPECT_EQ(t->counters().blocks_stored, 10u);
    for (uint64_t k = 0; k < 10; ++k) expect_block(*t, k);
  }
  EXPECT_EQ(extent_files(dir.path).size(), 3u);
  auto t = open_tier(dir.path);
  EXPECT_EQ(t->counters().blocks, 10u);
  for (uint64_t k = 0; k < 10; ++k) expect_block(*t, k);
  EXPECT_FALSE(t->contains(meta_of(10), tokens_of(10)));
  // The tokens are part of the identity.
  std::vector<int32_t> other = tokens_of(3);
  other[1] = 99;
  EXPECT_FALSE(t->contains(meta_of(3), other));
}

TEST(DiskTierTest, PrefetchReadsAndVerifiesInTheBackground) {
  TempDir dir;
  {
    auto t = open_tier(dir.path);
    add_blocks(*t, 0, 8);
    EXPECT_TRUE(t->flush(10));
  }
  auto t = open_tier(dir.path);
  EXPECT_EQ(t->readiness(meta_of(5), tokens_of(5)), DiskTier::Readiness::kMissing);
  EXPECT_EQ(t->readiness(meta_of(99), tokens_of(99)), DiskTier::Readiness::kMissing);
  EXPECT_FALSE(t->wait_for_reads(0.01));  // nothing queued
  t->prefetch(meta_of(5), tokens_of(5));
  for (int i = 0; i < 500 && t->readiness(meta_of(5), tokens_of(5)) != DiskTier::Readiness::kReady;
       ++i)
    t->wait_for_reads(0.01);
  EXPECT_EQ(t->readiness(meta_of(5), tokens_of(5)), DiskTier::Readiness::kReady);
  EXPECT_EQ(t->readiness(meta_of(4), tokens_of(4)), DiskTier::Readiness::kReady);  // same extent
  EXPECT_EQ(t->readiness(meta_of(0), tokens_of(0)), DiskTier::Readiness::kMissing);
  const uint64_t read_before = t->counters().bytes_read;
  expect_block(*t, 6);  // a copy, no I/O
  EXPECT_EQ(t->counters().bytes_read, read_before);
}

TEST(DiskTierTest, ExtentsOfAnotherFormatAreIgnoredAndCounted) {
  TempDir dir;
  {
    auto t = open_tier(dir.path);
    add_blocks(*t, 0, 4);
    EXPECT_TRUE(t->flush(10));
  }
  for (auto change : {0, 1, 2}) {
    ExtentNamespace ns = ns_f16();
    if (change == 0) ns.k_dtype = KvDtype::kInt8;
    if (change == 1) ns.block_size = 8;
    if (change == 2) ns.model_fingerprint = 43;
    auto t = open_tier(dir.path, ns);
    EXPECT_EQ(t->counters().foreign_extents, 1u);
    EXPECT_EQ(t->counters().blocks, 0u);
    EXPECT_FALSE(t->contains(meta_of(0), tokens_of(0)));
  }
  EXPECT_EQ(extent_files(dir.path).size(), 1u);  // left alone for the model that wrote it
}

class DiskTierCorruptionTest : public ::testing::TestWithParam<bool> {};

TEST_P(DiskTierCorruptionTest, ACorruptExtentIsDroppedCountedAndNeverServed) {
  TempDir dir;
  {
    auto t = open_tier(dir.path);
    add_blocks(*t, 0, 4);
    EXPECT_TRUE(t->flush(10));
  }
  const auto files = extent_files(dir.path);
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);  // inside the last block's payload
    f.put('\x7f');
  }
  auto t = open_tier(dir.path);
  ASSERT_TRUE(t->contains(meta_of(3), tokens_of(3)));  // the header is intact
  if (GetParam()) {  // through the loader thread: the extent is dropped there
    t->prefetch(meta_of(3), tokens_of(3));
    for (int i = 0; i < 500 && t->contains(meta_of(3), tokens_of(3)); ++i) t->wait_for_reads(0.01);
    EXPECT_EQ(t->readiness(meta_of(3), tokens_of(3)), DiskTier::Readiness::kMissing);
    EXPECT_EQ(t->counters().checksum_failures, 1u);
    EXPECT_FALSE(t->contains(meta_of(0), tokens_of(0)));
    return;
  }
  std::vector<uint8_t> out(kBlockBytes, 0);
  const Status st = t->read_block(meta_of(3), tokens_of(3), out.data());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(t->counters().checksum_failures, 1u);
  EXPECT_FALSE(t->contains(meta_of(0), tokens_of(0)));  // the whole extent is gone
  EXPECT_TRUE(extent_files(dir.path).empty());
}

INSTANTIATE_TEST_SUITE_P(SyncAndPrefetch, DiskTierCorruptionTest, ::testing::Bool());

TEST(DiskTierTest, TornTemporaryFilesAreRemovedAtStart) {
  TempDir dir;
  std::ofstream(dir.path + "/0123456789abcdef.kvx.tmp") << "half an extent";
  std::ofstream(dir.path + "/junk.kvx") << "not an extent at all";
  auto t = open_tier(dir.path);
  EXPECT_EQ(t->counters().torn_files_removed, 1u);
  EXPECT_EQ(t->counters().checksum_failures, 1u);  // the bad final-named file
  EXPECT_EQ(t->counters().blocks, 0u);
  EXPECT_TRUE(extent_files(dir.path).empty());
}

TEST(DiskTierTest, CapacityDeletesLeastRecentlyUsedExtents) {
  TempDir dir;
  // One 4-block extent is a bit over 4000 bytes: room for two.
  auto t = open_tier(dir.path, ns_f16(), 9000);
  add_blocks(*t, 0, 4);
  EXPECT_TRUE(t->flush(10));
  add_blocks(*t, 4, 4);
  EXPECT_TRUE(t->flush(10));
  expect_block(*t, 0);  // the first extent becomes the most recently used
  add_blocks(*t, 8, 4);
  EXPECT_TRUE(t->flush(10));
  const DiskTierCounters c = t->counters();
  EXPECT_LE(c.used_bytes, 9000u);
  EXPECT_EQ(c.blocks_evicted, 4u);
  EXPECT_TRUE(t->contains(meta_of(0), tokens_of(0)));
  EXPECT_FALSE(t->contains(meta_of(4), tokens_of(4)));
  EXPECT_TRUE(t->contains(meta_of(8), tokens_of(8)));
  EXPECT_EQ(extent_files(dir.path).size(), 2u);
}

TEST(DiskTierTest, AWriteErrorIsCountedOnceAndStopsAdmission) {
  TempDir dir;
  auto t = open_tier(dir.path);
  add_blocks(*t, 0, 4);
  EXPECT_TRUE(t->flush(10));
  fs::remove_all(dir.path);  // every later write fails
  add_blocks(*t, 4, 4);
  EXPECT_TRUE(t->flush(10));
  const DiskTierCounters c = t->counters();
  EXPECT_EQ(c.io_errors, 1u);
  EXPECT_FALSE(c.admitting);
  const std::vector<uint8_t> b = bytes_of(9);
  EXPECT_FALSE(t->add(meta_of(9), tokens_of(9), b.data()));
}

TEST(DiskTierTest, AWriterKilledMidWriteNeverLeavesATornExtentToLoad) {
  TempDir dir;
  std::mt19937 rng(11);
  uint64_t next = 0;
  for (int round = 0; round < 6; ++round) {
    const uint64_t first = next;
    next += 400;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child writes one-block extents as fast as it can until it is killed.
      auto opened = DiskTier::open({.dir = dir.path,
                                    .capacity_bytes = uint64_t{1} << 30,
                                    .ns = ns_f16(),
                                    .extent_blocks = 1});
      if (!opened.is_ok()) ::_exit(2);
      for (uint64_t k = first; k < first + 400; ++k) {
        const std::vector<uint8_t> b = bytes_of(k);
        (*opened)->add(meta_of(k), tokens_of(k), b.data());
      }
      (*opened)->flush(60);
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 40));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  // Whatever the kills interrupted: every indexed block reads back verified and exact.
  auto t = open_tier(dir.path);
  const DiskTierCounters c = t->counters();
  uint64_t found = 0;
  for (uint64_t k = 0; k < next; ++k) {
    if (!t->contains(meta_of(k), tokens_of(k))) continue;
    ++found;
    expect_block(*t, k);
  }
  EXPECT_GT(found, 0u);
  EXPECT_EQ(found, c.blocks);
  EXPECT_EQ(t->counters().checksum_failures, 0u);
  for (const auto& e : fs::directory_iterator(dir.path))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
}

}  // namespace
}  // namespace kvs
