// The KV offload tiers seen through the engine: greedy outputs are identical with tiers on and
// off (in every preemption mode, under a pool too small for the working set); a second engine
// over the same disk directory finds what the first one stored (warm restart); a corrupted
// extent is counted and recomputed to the same output; salts never share tier hits.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine_test_util.h"
#include "support/redis_process.h"
#include "support/tiny_model.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;
using test::make_engine;
using test::tokens_of;

constexpr uint64_t kBlockBytes = 16 * 23040;  // SmolLM2-135M, f16, 16-token blocks

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kvs-offload-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Distinct documents of about 133 tokens (9 blocks) each.
std::vector<std::vector<int32_t>> documents(LoadedModel& m, int n) {
  static const char* kTopics[] = {"rivers", "mountains", "compilers", "bread",
                                  "comets", "violins",   "glaciers",  "databases"};
  std::vector<std::vector<int32_t>> out;
  for (int d = 0; d < n; ++d) {
    std::string text = "Document " + std::to_string(d) + " is about " + kTopics[d % 8] + ".";
    for (int s = 0; s < 9; ++s)
      text += " Sentence " + std::to_string(s) + " says something new about " + kTopics[d % 8] +
              " and the number " + std::to_string(d * 10 + s) + ".";
    out.push_back(tokens_of(m, text));
  }
  return out;
}

struct RunResult {
  std::vector<std::vector<int32_t>> outputs;
  std::vector<uint32_t> cached;
};

// Runs the prompts one wave at a time (`wave` at once), greedy, checking integrity every step.
RunResult run_waves(Engine& e, const std::vector<std::vector<int32_t>>& prompts, size_t wave,
                    const std::string& salt = "", uint32_t max_tokens = 6) {
  RunResult r;
  for (size_t first = 0; first < prompts.size(); first += wave) {
    std::vector<SeqId> ids;
    for (size_t i = first; i < std::min(prompts.size(), first + wave); ++i) {
      auto id = e.add_request({.prompt = prompts[i],
                               .sampling = {},
                               .max_tokens = max_tokens,
                               .cache_salt = salt,
                               .ignore_eos = true});
      EXPECT_TRUE(id.is_ok()) << id.status().to_string();
      ids.push_back(*id);
    }
    while (e.has_unfinished()) {
      (void)e.step();
      const Status st = e.check_integrity();
      EXPECT_TRUE(st.is_ok()) << st.to_string();
    }
    for (SeqId id : ids) {
      const Sequence& s = e.sequence(id);
      r.outputs.emplace_back(s.tokens.begin() + s.prompt_len, s.tokens.end());
      r.cached.push_back(s.cached_tokens);
      e.release(id);
    }
  }
  return r;
}

EngineConfig tight_config(PreemptionMode mode) {
  EngineConfig c{.kv_cache_memory = 19 * kBlockBytes, .block_size = 16};
  c.preemption_mode = mode;
  if (mode == PreemptionMode::kSwap) c.swap_space = 16 * kBlockBytes;
  return c;
}

TEST(KvOffloadTest, OutputsAreIdenticalWithTiersOnAndOffInEveryPreemptionMode) {
  REQUIRE_MODEL();
  // 6 documents (133 tokens, 9 blocks each) cycled twice through a 19-block pool: two run at
  // once and grow to 10 blocks each while they decode 20 tokens (preemptions).
  std::vector<std::vector<int32_t>> prompts = documents(*model, 6);
  const size_t n = prompts.size();
  for (size_t i = 0; i < n; ++i) prompts.push_back(prompts[i]);
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    SCOPED_TRACE(preemption_mode_name(mode));
    auto off = make_engine(*model, tight_config(mode));
    const RunResult expect = run_waves(*off, prompts, 3, "", 20);
    EXPECT_GT(off->num_preemptions(mode), 0u);
    for (int variant = 0; variant < 4; ++variant) {
      SCOPED_TRACE("variant " + std::to_string(variant));
      TempDir dir;
      EngineConfig c = tight_config(mode);
      if (variant != 2) c.offload.host_bytes = (variant == 3 ? 8 : 64) * kBlockBytes;
      if (variant >= 1) c.offload.disk_dir = dir.path;
      c.offload.disk_admit_hits = 0;
      if (variant == 3) c.offload.policy = OffloadPolicy::kWriteThrough;
      auto on = make_engine(*model, c);
      const RunResult got = run_waves(*on, prompts, 3, "", 20);
      EXPECT_EQ(got.outputs, expect.outputs);
      const KvOffloadStats s = on->snapshot().offload;
      ASSERT_TRUE(s.enabled);
      // The second pass finds the documents below L1.
      EXPECT_GT(s.host.hit_tokens + s.disk.hit_tokens, 0u);
      uint64_t cached_off = 0, cached_on = 0;
      for (uint32_t x : expect.cached) cached_off += x;
      for (uint32_t x : got.cached) cached_on += x;
      EXPECT_GT(cached_on, cached_off);
      EXPECT_EQ(s.host.checksum_failures + s.disk.checksum_failures, 0u);
    }
  }
}

// The soak: every tier on (host RAM, disk, a real Redis) at its smallest (one host block, one
// disk extent of two blocks), under a pool too small for the working set, in both preemption
// modes and both write policies: greedy outputs are the outputs without tiers, every step's
// integrity check passes, and the tiers served hits (what came back is what would have been
// computed).
TEST(KvOffloadTest, ASoakWithEveryTierTinyGivesTheOutputsOfNoTiers) {
  REQUIRE_MODEL();
  test::RedisProcess redis;
  REQUIRE_REDIS(redis);
  std::vector<std::vector<int32_t>> prompts = documents(*model, 4);
  // Shared prefixes too: each document again with another ending.
  for (size_t i = 0; i < 4; ++i) {
    std::vector<int32_t> p = prompts[i];
    p.resize(p.size() - 20);
    const std::vector<int32_t> tail =
        tokens_of(*model, " A different ending, number " + std::to_string(i) + ", follows here.");
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(std::move(p));
  }
  const size_t n = prompts.size();
  for (size_t i = 0; i < n; ++i) prompts.push_back(prompts[i]);
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    for (OffloadPolicy policy : {OffloadPolicy::kWriteBack, OffloadPolicy::kWriteThrough}) {
      SCOPED_TRACE(std::string(preemption_mode_name(mode)) + ", " + offload_policy_name(policy));
      auto off = make_engine(*model, tight_config(mode));
      const RunResult expect = run_waves(*off, prompts, 3, "", 12);
      off.reset();
      TempDir dir;
      EngineConfig c = tight_config(mode);
      c.offload.host_bytes = kBlockBytes;  // one block
      c.offload.disk_dir = dir.path;
      c.offload.extent_blocks = 2;
      c.offload.disk_bytes = 2 * kBlockBytes + 8192;  // one extent of two blocks
      c.offload.disk_admit_hits = 0;
      c.offload.policy = policy;
      c.offload.remote_urls = {redis.endpoint().url()};
      c.offload.remote_timeout_ms = 2000;
      c.secret = ServerSecret::random();  // a secret per round: each starts with Redis cold
      auto on = make_engine(*model, c);
      const RunResult got = run_waves(*on, prompts, 3, "", 12);
      EXPECT_EQ(got.outputs, expect.outputs);
      const KvOffloadStats s = on->snapshot().offload;
      EXPECT_GT(s.host.hit_tokens + s.disk.hit_tokens + s.remote.hit_tokens, 0u);
      EXPECT_EQ(s.host.checksum_failures + s.disk.checksum_failures + s.remote.checksum_failures,
                0u);
      EXPECT_LE(s.disk.used_bytes, c.offload.disk_bytes);
    }
  }
}

// A roomy pool over a disk tier in `dir`.
EngineConfig disk_config(const std::string& dir) {
  EngineConfig c{.kv_cache_memory = 64 * kBlockBytes};
  c.offload.disk_dir = dir;
  c.offload.disk_admit_hits = 0;
  return c;
}

// Runs the prompts on an engine that is then shut down (which writes what its pool caches to
// the disk tier); returns what they produced.
RunResult run_and_shut_down(LoadedModel& model, const EngineConfig& c,
                            const std::vector<std::vector<int32_t>>& prompts) {
  auto e = make_engine(model, c);
  return run_waves(*e, prompts, prompts.size());
}

TEST(KvOffloadTest, ASecondEngineFindsWhatTheFirstStoredOnDisk) {
  REQUIRE_MODEL();
  TempDir dir;
  const std::vector<std::vector<int32_t>> prompts = documents(*model, 3);
  const EngineConfig c = disk_config(dir.path);
  const RunResult cold = run_and_shut_down(*model, c, prompts);
  auto second = make_engine(*model, c);
  const RunResult warm = run_waves(*second, prompts, 3);
  EXPECT_EQ(warm.outputs, cold.outputs);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(cold.cached[i], 0u);
    EXPECT_EQ(warm.cached[i], (prompts[i].size() - 1) / 16 * 16) << i;
  }
  EXPECT_GT(second->snapshot().offload.disk.hit_tokens, 0u);

  // Another salt never sees those blocks (one engine at a time: the directory is locked).
  second.reset();
  auto third = make_engine(*model, c);
  const RunResult other = run_waves(*third, prompts, 3, "tenant-b");
  for (uint32_t x : other.cached) EXPECT_EQ(x, 0u);
  EXPECT_EQ(other.outputs, cold.outputs);
}

TEST(KvOffloadTest, ACorruptedExtentIsRecomputedToTheSameOutput) {
  REQUIRE_MODEL();
  TempDir dir;
  const std::vector<std::vector<int32_t>> prompts = documents(*model, 1);
  const EngineConfig c = disk_config(dir.path);
  const RunResult cold = run_and_shut_down(*model, c, prompts);
  int corrupted = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    if (e.path().extension() != ".kvx") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1000, std::ios::end);
    const char was = static_cast<char>(f.get());
    f.seekp(-1000, std::ios::end);
    f.put(static_cast<char>(was ^ 0x55));  // a changed byte, whatever was there
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0);
  auto second = make_engine(*model, c);
  const RunResult again = run_waves(*second, prompts, 1);
  EXPECT_EQ(again.outputs, cold.outputs);
  EXPECT_EQ(again.cached[0], 0u);
  EXPECT_GE(second->snapshot().offload.disk.checksum_failures, 1u);
}

TEST(KvOffloadTest, DemotedTiersHoldMoreBlocksAndLoadThemBackIntoThePoolFormat) {
  REQUIRE_MODEL();
  TempDir dir;
  std::vector<std::vector<int32_t>> prompts = documents(*model, 4);
  for (size_t i = 0; i < 4; ++i) prompts.push_back(prompts[i]);
  EngineConfig c = tight_config(PreemptionMode::kRecompute);
  c.offload.host_bytes = 8 * kBlockBytes;
  c.offload.tier_dtype = KvDtype::kInt4Had;
  c.offload.disk_dir = dir.path;
  c.offload.disk_admit_hits = 0;
  {
    auto e = make_engine(*model, c);
    const KvOffloadStats before = e->snapshot().offload;
    // 6,480 B/token in int4_had vs 23,040 in f16: three demoted entries per host block.
    EXPECT_EQ(before.host.capacity_bytes, 24u * 16 * 6480);
    ASSERT_TRUE(before.tier_dtype.has_value());
    const RunResult r = run_waves(*e, prompts, 2);
    const KvOffloadStats s = e->snapshot().offload;
    EXPECT_GT(s.host.hit_tokens + s.disk.hit_tokens, 0u);
    EXPECT_LE(s.host_blocks_held, 8u);
    for (const auto& out : r.outputs) EXPECT_EQ(out.size(), 6u);
  }
  // The extents hold int4_had blocks: a restart with the same flags loads them; one with
  // another tier format counts them as foreign and recomputes.
  auto again = make_engine(*model, c);
  const RunResult warm = run_waves(*again, std::vector(prompts.begin(), prompts.begin() + 1), 1);
  EXPECT_GT(warm.cached[0], 0u);
  again.reset();
  c.offload.tier_dtype = KvDtype::kInt8;
  auto other = make_engine(*model, c);
  EXPECT_GE(other->snapshot().offload.disk_foreign_extents, 1u);
  const RunResult cold = run_waves(*other, std::vector(prompts.begin(), prompts.begin() + 1), 1);
  EXPECT_EQ(cold.cached[0], 0u);
}

// Configuration errors need an engine but no real weights: the tiny synthetic model.
TEST(KvOffloadTest, BadConfigurationsAreClearErrors) {
  LoadedModel* model = test::tiny_model();
  ASSERT_NE(model, nullptr);
  constexpr uint64_t kBlockBytes = 16 * test::TinyModelShape::kKvBytesPerTokenF16;
  EngineConfig c{.kv_cache_memory = 64 * kBlockBytes};
  c.offload.host_bytes = 100;  // less than one block
  auto e = Engine::create(*model->model, c);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("--kv-offload-memory"), std::string::npos);
  c.offload.host_bytes = 8 * kBlockBytes;
  c.enable_prefix_caching = false;
  e = Engine::create(*model->model, c);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("prefix caching"), std::string::npos);
  c.enable_prefix_caching = true;
  c.offload.disk_dir = "/proc/kvserve-cannot-create-this";
  e = Engine::create(*model->model, c);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("--kv-offload-dir"), std::string::npos);
}

}  // namespace
}  // namespace kvs
