// DiskTier and its extent format: round trips, warm restart (index rebuilt from the directory),
// foreign extents, corruption, forged extents (another secret), torn writes, capacity, write
// errors, a writer killed with SIGKILL mid-write (no torn extent is ever loaded after a restart),
// and the directory attacked by another local user: a directory writable by others or owned by
// someone else, planted links (to temporary names, to extents, dangling), a FIFO in place of an
// extent, a second server on the same directory.
#include "tiers/disk_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "tiers/kv_extent.h"

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
          .block_bytes = kBlockBytes,
          .secret_id = 77};
}

SecretKey test_key(uint8_t fill = 3) {
  SecretKey k;
  k.fill(fill);
  return k;
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
                                    uint64_t capacity = uint64_t{1} << 30, uint32_t extent = 4,
                                    SecretKey key = test_key()) {
  auto t = DiskTier::open(
      {.dir = dir, .capacity_bytes = capacity, .ns = ns, .mac_key = key, .extent_blocks = extent});
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

void add_blocks(DiskTier& t, uint64_t first, uint64_t n) {
  for (uint64_t k = first; k < first + n; ++k) {
    const std::vector<uint8_t> b = bytes_of(k);
    ASSERT_TRUE(t.add(meta_of(k), tokens_of(k), b.data()));
  }
}

// Reads a block the way the engine does: the loader thread reads and verifies its extent first.
DiskTier::Readiness wait_ready(DiskTier& t, uint64_t k) {
  t.prefetch(meta_of(k), tokens_of(k));
  for (int i = 0; i < 1000; ++i) {
    const DiskTier::Readiness r = t.readiness(meta_of(k), tokens_of(k));
    if (r != DiskTier::Readiness::kPending) return r;
    t.wait_for_reads(0.01);
  }
  return t.readiness(meta_of(k), tokens_of(k));
}

void expect_block(DiskTier& t, uint64_t k) {
  ASSERT_EQ(wait_ready(t, k), DiskTier::Readiness::kReady) << "block " << k;
  const Result<VerifiedBlock> b = t.verified_block(meta_of(k), tokens_of(k));
  ASSERT_TRUE(b.is_ok()) << "block " << k << ": " << b.status().to_string();
  ASSERT_EQ(b->bytes, kBlockBytes);
  EXPECT_EQ(std::vector<uint8_t>(b->data(), b->data() + b->bytes), bytes_of(k)) << "block " << k;
}

std::vector<std::string> extent_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".kvx") out.push_back(e.path().string());
  return out;
}

// The header's K and V format bytes (offsets 24 and 25) are read through the format table:
// every format round-trips, the first code past the table is refused.
TEST(KvExtentTest, FormatCodesComeFromTheFormatTable) {
  ExtentHeader h;
  h.ns = ns_f16();
  h.blocks.push_back(meta_of(0));
  const auto t = tokens_of(0);
  h.tokens.assign(t.begin(), t.end());
  for (const KvDtype d : all_kv_dtypes()) {
    h.ns.k_dtype = h.ns.v_dtype = d;
    auto back = decode_extent_header(encode_extent_header(h));
    ASSERT_TRUE(back.is_ok()) << kv_dtype_name(d) << ": " << back.status().to_string();
    EXPECT_EQ(back->ns.k_dtype, d);
    EXPECT_EQ(back->ns.v_dtype, d);
  }
  h.ns = ns_f16();
  for (size_t at : {24, 25}) {
    std::vector<uint8_t> bytes = encode_extent_header(h);
    bytes[at] = static_cast<uint8_t>(kNumKvDtypes);
    auto back = decode_extent_header(bytes);
    ASSERT_FALSE(back.is_ok()) << at;
    EXPECT_NE(back.status().message().find("unknown KV format"), std::string::npos)
        << back.status().message();
  }
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
  EXPECT_EQ(back->file_bytes(), bytes.size() + 3 * kBlockBytes + kExtentMacBytes);
  // Truncations and flipped bytes of the header: an error, never a crash or a wrong header.
  for (size_t n = 0; n < bytes.size(); n += 7)
    EXPECT_FALSE(decode_extent_header(std::span(bytes).first(n)).is_ok()) << n;
  for (size_t i : {0, 8, 12, 24, 28, 40}) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0x5a;
    EXPECT_FALSE(decode_extent_header(bad).is_ok()) << "byte " << i;
  }
  // The MAC: any changed byte, or another key, fails it.
  std::vector<uint8_t> payload(3 * kBlockBytes, 9);
  std::vector<uint8_t> file = encode_extent(test_key(), h, payload);
  EXPECT_TRUE(extent_mac_ok(test_key(), file));
  EXPECT_TRUE(decode_extent(test_key(), file).is_ok());
  EXPECT_FALSE(extent_mac_ok(test_key(4), file));
  EXPECT_EQ(decode_extent(test_key(4), file).status().code(), StatusCode::kDataLoss);
  for (size_t i : {size_t{5}, bytes.size() + 17, file.size() - 1}) {
    std::vector<uint8_t> bad = file;
    bad[i] ^= 1;
    EXPECT_FALSE(extent_mac_ok(test_key(), bad)) << "byte " << i;
  }
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

TEST(DiskTierTest, ACorruptExtentIsDroppedCountedAndNeverServed) {
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
  EXPECT_EQ(wait_ready(*t, 3), DiskTier::Readiness::kMissing);
  EXPECT_FALSE(t->verified_block(meta_of(3), tokens_of(3)).is_ok());
  EXPECT_EQ(t->counters().checksum_failures, 1u);
  EXPECT_FALSE(t->contains(meta_of(0), tokens_of(0)));  // the whole extent is gone
  EXPECT_TRUE(extent_files(dir.path).empty());
}

TEST(DiskTierTest, AnExtentForgedWithoutTheSecretIsDroppedAndCounted) {
  TempDir dir;
  {
    // Someone who can write the directory but lacks the secret writes a well-formed extent
    // (even naming the right secret id): the MAC fails on read.
    auto forger = open_tier(dir.path, ns_f16(), uint64_t{1} << 30, 4, test_key(9));
    add_blocks(*forger, 0, 4);
    EXPECT_TRUE(forger->flush(10));
  }
  auto t = open_tier(dir.path);
  ASSERT_TRUE(t->contains(meta_of(1), tokens_of(1)));
  EXPECT_EQ(wait_ready(*t, 1), DiskTier::Readiness::kMissing);
  EXPECT_EQ(t->counters().checksum_failures, 1u);
  EXPECT_TRUE(extent_files(dir.path).empty());
  // Under another secret id it is another server's extent: left alone, never read.
  TempDir other;
  {
    ExtentNamespace ns = ns_f16();
    ns.secret_id = 78;
    auto w = open_tier(other.path, ns, uint64_t{1} << 30, 4, test_key(9));
    add_blocks(*w, 0, 4);
    EXPECT_TRUE(w->flush(10));
  }
  auto r = open_tier(other.path);
  EXPECT_EQ(r->counters().foreign_extents, 1u);
  EXPECT_FALSE(r->contains(meta_of(1), tokens_of(1)));
}

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
                                    .mac_key = test_key(),
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

// ---- the directory, attacked by another local user ----

constexpr uid_t kOtherUid = 65534;  // nobody

TEST(DiskTierDirectoryTest, ADirectoryOthersCanWriteOrAnotherUserOwnsIsRefused) {
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path.c_str(), 0777), 0);
  auto t = DiskTier::open({.dir = dir.path, .ns = ns_f16(), .mac_key = test_key()});
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("writable by others"), std::string::npos)
      << t.status().message();
  EXPECT_NE(t.status().message().find("chmod go-w"), std::string::npos);
  ASSERT_EQ(::chmod(dir.path.c_str(), 0700), 0);
  if (::geteuid() == 0) {  // only root can give a directory away
    ASSERT_EQ(::chown(dir.path.c_str(), kOtherUid, kOtherUid), 0);
    auto u = DiskTier::open({.dir = dir.path, .ns = ns_f16(), .mac_key = test_key()});
    ASSERT_FALSE(u.is_ok());
    EXPECT_NE(u.status().message().find("owned by uid 65534"), std::string::npos)
        << u.status().message();
    ASSERT_EQ(::chown(dir.path.c_str(), 0, 0), 0);
  }
  // Through a symbolic link: refused, the link is not followed.
  const std::string link = dir.path + "-link";
  ASSERT_EQ(::symlink(dir.path.c_str(), link.c_str()), 0);
  auto l = DiskTier::open({.dir = link, .ns = ns_f16(), .mac_key = test_key()});
  ::unlink(link.c_str());
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.status().message().find("symbolic link"), std::string::npos);
  // A missing directory is created for this user only.
  const std::string fresh = dir.path + "/sub/kv";
  auto f = DiskTier::open({.dir = fresh, .ns = ns_f16(), .mac_key = test_key()});
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  struct stat st {};
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(DiskTierDirectoryTest, PlantedLinksToTemporaryNamesAreNeverFollowed) {
  TempDir dir, victim_dir;
  const std::string victim = victim_dir.path + "/precious";
  std::ofstream(victim) << "do not overwrite";
  // Links planted under temporary names, old style (sequential) and a few random-looking ones;
  // the start removes them (unlink never follows) and writes never open them.
  for (const char* name :
       {"0000000000000001.kvx.tmp", "bandwidth-probe.kvx.tmp", "deadbeefdeadbeefdeadbeef.kvx.tmp"})
    ASSERT_EQ(::symlink(victim.c_str(), (dir.path + "/" + name).c_str()), 0);
  {
    auto t = open_tier(dir.path);
    EXPECT_EQ(t->counters().torn_files_removed, 3u);
    // Plant more while it runs: writes use fresh random names created O_EXCL|O_NOFOLLOW.
    for (int i = 0; i < 32; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "/%016x.kvx.tmp", i);
      ::symlink(victim.c_str(), (dir.path + name).c_str());
    }
    add_blocks(*t, 0, 12);
    EXPECT_TRUE(t->flush(10));
    (void)t->measure_read_bandwidth(4096);
    EXPECT_EQ(t->counters().blocks_stored, 12u);
  }
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "do not overwrite");
}

TEST(DiskTierDirectoryTest, LinksFifosAndUnreadableEntriesAreSkippedNeverFatal) {
  TempDir dir, elsewhere;
  {
    auto w = open_tier(elsewhere.path);
    add_blocks(*w, 0, 4);
    EXPECT_TRUE(w->flush(10));
  }
  const std::string real = extent_files(elsewhere.path).at(0);
  ASSERT_EQ(::symlink(real.c_str(), (dir.path + "/linked.kvx").c_str()), 0);
  ASSERT_EQ(::symlink("/nonexistent/x", (dir.path + "/dangling.kvx").c_str()), 0);
  ASSERT_EQ(::mkfifo((dir.path + "/fifo.kvx").c_str(), 0600), 0);
  ASSERT_EQ(::mkdir((dir.path + "/adir.kvx").c_str(), 0700), 0);
  auto t = open_tier(dir.path);  // starts at once: nothing blocks on the FIFO
  EXPECT_EQ(t->counters().skipped_entries, 4u);
  EXPECT_EQ(t->counters().blocks, 0u);
  EXPECT_FALSE(t->contains(meta_of(0), tokens_of(0)));
}

TEST(DiskTierDirectoryTest, AFifoSwappedInForAnExtentNeitherBlocksNorServes) {
  TempDir dir;
  {
    auto w = open_tier(dir.path);
    add_blocks(*w, 0, 4);
    EXPECT_TRUE(w->flush(10));
  }
  auto t = open_tier(dir.path);
  ASSERT_TRUE(t->contains(meta_of(2), tokens_of(2)));
  // After indexing, the extent is replaced by a FIFO nobody writes: a blocking open would hang
  // the loader (and shutdown) forever.
  const std::string file = extent_files(dir.path).at(0);
  const std::string fifo = dir.path + "/fifo.tmp-swap";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::rename(fifo.c_str(), file.c_str()), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(wait_ready(*t, 2), DiskTier::Readiness::kMissing);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_FALSE(t->contains(meta_of(2), tokens_of(2)));  // dropped
}

TEST(DiskTierDirectoryTest, ASecondServerOnTheSameDirectoryGetsAClearError) {
  TempDir dir;
  auto first = open_tier(dir.path);
  auto second = DiskTier::open({.dir = dir.path, .ns = ns_f16(), .mac_key = test_key()});
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find("in use by another kvserve process"), std::string::npos)
      << second.status().message();
  first.reset();
  EXPECT_TRUE(DiskTier::open({.dir = dir.path, .ns = ns_f16(), .mac_key = test_key()}).is_ok());
}

TEST(DiskTierDirectoryTest, TheDirectorysSecretIsCreatedOnceAndPrivate) {
  TempDir dir;
  auto a = DiskTier::directory_secret(dir.path);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  auto b = DiskTier::directory_secret(dir.path);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(a->id(), b->id());
  struct stat st {};
  ASSERT_EQ(::stat((dir.path + "/tier.secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Made readable by others: refused, naming the fix.
  ASSERT_EQ(::chmod((dir.path + "/tier.secret").c_str(), 0644), 0);
  auto c = DiskTier::directory_secret(dir.path);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("chmod 600"), std::string::npos) << c.status().message();
  // Replaced by a link to another file: refused, never followed.
  ASSERT_EQ(::unlink((dir.path + "/tier.secret").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/hostname", (dir.path + "/tier.secret").c_str()), 0);
  EXPECT_FALSE(DiskTier::directory_secret(dir.path).is_ok());
}

}  // namespace
}  // namespace kvs
