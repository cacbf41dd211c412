// The whole KV stack under the engine's own step (StepDriver), without a model: the scheduler, the
// cache manager, swap, the host tier, the disk tier and a real Redis, every tier sized from one
// block upward, checked byte for byte against a simple model of what KV must hold.
//
// The backend's "forward pass" writes, for every token position p of a sequence, bytes that are a
// function of the sequence's tenant salt and its token ids 0..p (what real KV depends on, plus the
// salt). Before every forward pass, every position a scheduled sequence has already computed is
// read back through its block table and compared with that function: a block loaded from any tier,
// swapped in, copied on write or shared through the prefix cache must hold exactly its own
// prefix's bytes. A block of another prompt (the wrong-KV bug of a small host tier), of another
// tenant, or one overwritten before its load read it, fails the comparison.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_driver.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"
#include "support/redis_process.h"
#include "tiers/host_block_pool.h"
#include "tiers/kv_offload.h"
#include "tiers/kv_transfer_executor.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kBs = 4;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kvs-stack-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The content model: position p of (salt, tokens) holds bytes derived from this fingerprint.
uint64_t prefix_fingerprint(const std::string& salt, std::span<const int32_t> tokens, size_t p) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ std::hash<std::string>()(salt);
  for (size_t i = 0; i <= p; ++i) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x9e3779b97f4a7c15ULL +
         (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
  }
  return h ^ (h >> 29);
}

uint8_t content_byte(uint64_t fp, uint32_t layer, uint32_t kv, uint32_t i) {
  return static_cast<uint8_t>((fp >> (8 * (i % 8))) ^ (layer * 37 + kv * 101 + i / 8 * 13));
}

// One secret for every stack of the test, as replicas that share a Redis would hold.
const ServerSecret& shared_secret() {
  static const ServerSecret s = ServerSecret::random();
  return s;
}

struct StackConfig {
  uint32_t pool_blocks = 12;
  uint32_t host_tier_blocks = 0;
  uint32_t swap_blocks = 0;
  PreemptionMode mode = PreemptionMode::kRecompute;
  bool disk = false;
  uint32_t disk_extents = 0;  // capacity in extents (0: ample)
  uint32_t extent_blocks = 1;
  bool remote = false;
  OffloadPolicy policy = OffloadPolicy::kWriteBack;
  uint32_t budget = 16;
  uint32_t max_seqs = 6;
  uint64_t fingerprint = 1;
};

// One engine-shaped stack: the pieces Engine::create wires, driven by the engine's own step
// (StepDriver) over a backend whose forward pass is the content model.
class Stack : public StepBackend {
 public:
  Stack(const StackConfig& c, const std::string& disk_dir, const RedisEndpoint* redis)
      : config_(c) {
    const KvUniformShape unit{.layers = 2,
                              .kv_heads = 1,
                              .head_dim_k = 4,
                              .head_dim_v = 4,
                              .k_dtype = KvDtype::kF16,
                              .v_dtype = KvDtype::kF16};
    const uint64_t block_bytes = kv_token_bytes(unit).bytes_per_token * kBs;
    KvPoolPlan pool = plan_kv_pool(unit, c.pool_blocks * block_bytes, kBs).value();
    shape_ = KvStorageShape::of(pool);
    device_ = std::make_unique<KvBlockStorage>(KvBlockStorage::create(shape_).value());
    const uint32_t host_blocks = c.swap_blocks + c.host_tier_blocks;
    if (host_blocks > 0) {
      KvStorageShape h = shape_;
      h.num_blocks = host_blocks;
      host_storage_ = std::make_unique<KvBlockStorage>(KvBlockStorage::create(h).value());
    }
    KvOffloadConfig oc{.host_bytes = uint64_t{c.host_tier_blocks} * device_->block_bytes(),
                       .policy = c.policy,
                       .disk_admit_hits = 0,
                       .extent_blocks = c.extent_blocks};
    if (c.disk) {
      oc.disk_dir = disk_dir;
      const uint64_t extent_bytes = uint64_t{c.extent_blocks} * device_->block_bytes() + 4096;
      oc.disk_bytes = c.disk_extents > 0 ? c.disk_extents * extent_bytes : uint64_t{64} << 20;
    }
    if (c.remote && redis != nullptr) {
      oc.remote_urls = {redis->url()};
      oc.remote_timeout_ms = 2000;
    }
    KvCacheConfig cache = pool_cache_config(pool, true, c.fingerprint, 77);
    cache.tier_keys = true;
    cache.log_completed_blocks = c.policy == OffloadPolicy::kWriteThrough || c.remote;
    cache.tier_secrets = secrets_;
    driver_ = std::make_unique<StepDriver>(
        StepDriverConfig{.pool = pool,
                         .cache = cache,
                         .scheduler = {.max_num_batched_tokens = c.budget,
                                       .max_num_seqs = c.max_seqs,
                                       .preemption_mode = c.mode},
                         .host_blocks = host_blocks,
                         .max_model_len = 1 << 20});
    if (oc.enabled()) {
      auto o = KvOffload::create(oc, shape_, c.fingerprint, secrets_, driver_->host_area(),
                                 host_storage_.get(), c.host_tier_blocks);
      EXPECT_TRUE(o.is_ok()) << o.status().to_string();
      offload_ = std::move(o).value();
    }
    executor_ = std::make_unique<KvTransferExecutor>(*device_, host_storage_.get(),
                                                     offload_ ? &offload_->stores() : nullptr);
    if (offload_) driver_->scheduler().attach_tiers(&offload_->policy());
  }

  void add(std::vector<int32_t> prompt, std::string salt, uint32_t max_tokens) {
    const Result<SeqId> id = driver_->add(SequenceRequest{
        .prompt = std::move(prompt), .max_tokens = max_tokens, .cache_salt = std::move(salt)});
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    ids_.push_back(*id);
  }

  [[nodiscard]] bool busy() const { return driver_->has_unfinished(); }

  // One step of the engine's driver over this backend.
  void step() {
    for (const StepOutput& o : driver_->step(*this))
      if (o.finished) {
        outputs_[o.seq.value] = driver_->sequence(o.seq).tokens;
        cached_ += driver_->sequence(o.seq).cached_tokens;
        ++finished_;
      }
  }

  // ---- the backend: bytes move through the engine's executor; the forward pass checks every
  // computed position of each scheduled sequence, then writes its new positions ----
  double now() override { return static_cast<double>(steps_); }
  void transfer(const KvTransferPlan& plan) override { executor_->run(plan); }
  void transfers_done() override {
    if (offload_) offload_->policy().end_step();
  }
  void idle(size_t) override {
    if (offload_) offload_->policy().wait_for_tier_reads(0.01);
  }
  void forward(const StepPlan& plan) override {
    ++steps_;
    for (const ScheduledChunk& ch : plan.chunks) check_computed(*ch.seq);
    for (const ScheduledChunk& ch : plan.chunks)
      for (uint32_t p = ch.seq->num_computed; p < ch.seq->num_computed + ch.num_tokens; ++p)
        write_position(*ch.seq, p);
  }
  // "Greedy sampling": the next token is a function of the prefix, as a model's would be.
  int32_t sample(size_t, Sequence& s) override {
    const uint64_t fp = prefix_fingerprint(s.cache_salt, s.tokens, s.tokens.size() - 1);
    return static_cast<int32_t>(fp % 5);
  }

  void check_integrity() const {
    const Status c = driver_->cache().check_integrity();
    ASSERT_TRUE(c.is_ok()) << c.to_string();
    ASSERT_TRUE(driver_->host_area().check_integrity().is_ok());
    if (offload_) {
      const Status o = offload_->check_integrity();
      ASSERT_TRUE(o.is_ok()) << o.to_string();
    }
  }

  [[nodiscard]] uint64_t positions_checked() const { return checked_; }
  [[nodiscard]] uint32_t finished() const { return finished_; }
  [[nodiscard]] KvOffloadStats stats() const {
    return offload_ ? offload_->stats() : KvOffloadStats{};
  }
  [[nodiscard]] uint64_t preemptions() const { return driver_->scheduler().num_preemptions(); }
  // Every sequence's tokens (prompt and generated), in submission order.
  [[nodiscard]] std::vector<std::vector<int32_t>> outputs() const {
    std::vector<std::vector<int32_t>> out;
    for (SeqId id : ids_) out.push_back(outputs_.at(id.value));
    return out;
  }
  void shut_down() { executor_->persist_tiers(driver_->cache(), 10.0); }

 private:
  uint8_t* vector_at(const Sequence& s, uint32_t p, uint32_t layer, uint32_t kv) const {
    const BlockId b = driver_->cache().block_table(s.id)[p / kBs];
    const PagedKvLayout& l = device_->layout();
    uint8_t* head = kv == 0 ? l.k_head(b.value, layer, 0) : l.v_head(b.value, layer, 0);
    return head + (p % kBs) * (kv == 0 ? l.k_vector_bytes : l.v_vector_bytes);
  }

  void write_position(const Sequence& s, uint32_t p) {
    const uint64_t fp = prefix_fingerprint(s.cache_salt, s.tokens, p);
    const PagedKvLayout& l = device_->layout();
    for (uint32_t layer = 0; layer < shape_.layers; ++layer)
      for (uint32_t kv = 0; kv < 2; ++kv) {
        uint8_t* v = vector_at(s, p, layer, kv);
        const uint64_t n = kv == 0 ? l.k_vector_bytes : l.v_vector_bytes;
        for (uint32_t i = 0; i < n; ++i) v[i] = content_byte(fp, layer, kv, i);
      }
  }

  void check_computed(const Sequence& s) {
    const PagedKvLayout& l = device_->layout();
    for (uint32_t p = 0; p < s.num_computed; ++p) {
      const uint64_t fp = prefix_fingerprint(s.cache_salt, s.tokens, p);
      for (uint32_t layer = 0; layer < shape_.layers; ++layer)
        for (uint32_t kv = 0; kv < 2; ++kv) {
          const uint8_t* v = vector_at(s, p, layer, kv);
          const uint64_t n = kv == 0 ? l.k_vector_bytes : l.v_vector_bytes;
          for (uint32_t i = 0; i < n; ++i)
            ASSERT_EQ(v[i], content_byte(fp, layer, kv, i))
                << "sequence " << s.id.value << " (salt '" << s.cache_salt << "') position " << p
                << " of " << s.num_computed << ", layer " << layer << (kv ? " V" : " K") << " byte "
                << i << ", step " << steps_;
        }
      ++checked_;
    }
  }

  StackConfig config_;
  TierSecrets secrets_ = TierSecrets::of(shared_secret());
  KvStorageShape shape_;
  std::unique_ptr<KvBlockStorage> device_, host_storage_;
  std::unique_ptr<StepDriver> driver_;
  std::unique_ptr<KvOffload> offload_;
  std::unique_ptr<KvTransferExecutor> executor_;
  std::vector<SeqId> ids_;
  std::unordered_map<uint64_t, std::vector<int32_t>> outputs_;
  uint64_t steps_ = 0, checked_ = 0, cached_ = 0;
  uint32_t finished_ = 0;
};

// A workload with shared prefixes: a few documents, each prompt one of them (whole or cut) plus
// a short private tail, under one of three tenant salts.
struct Request {
  std::vector<int32_t> prompt;
  std::string salt;
  uint32_t max_tokens;
};

std::vector<Request> workload(std::mt19937_64& rng, size_t n) {
  std::vector<std::vector<int32_t>> docs(4);
  for (auto& d : docs) {
    d.resize(6 + rng() % 22);
    for (int32_t& t : d) t = static_cast<int32_t>(5 + rng() % 40);
  }
  static const char* kSalts[] = {"", "tenant-a", "tenant-b"};
  std::vector<Request> out;
  for (size_t i = 0; i < n; ++i) {
    Request r;
    const auto& d = docs[rng() % docs.size()];
    r.prompt.assign(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(1 + rng() % d.size()));
    for (uint64_t k = rng() % 6; k > 0; --k)
      r.prompt.push_back(static_cast<int32_t>(5 + rng() % 40));
    r.salt = kSalts[rng() % 3];
    r.max_tokens = 1 + static_cast<uint32_t>(rng() % 6);
    out.push_back(std::move(r));
  }
  return out;
}

// Runs the requests, a few arriving per step, to the end; checks integrity after every step.
void run(Stack& s, const std::vector<Request>& reqs, std::mt19937_64& rng) {
  size_t next = 0;
  uint64_t guard = 0;
  while (next < reqs.size() || s.busy()) {
    for (uint64_t k = rng() % 3; k > 0 && next < reqs.size(); --k, ++next)
      s.add(reqs[next].prompt, reqs[next].salt, reqs[next].max_tokens);
    s.step();
    s.check_integrity();
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_LT(++guard, 200000u) << "the stack stopped making progress";
  }
}

StackConfig random_config(std::mt19937_64& rng, bool with_redis, uint64_t fingerprint) {
  StackConfig c;
  c.pool_blocks = 10 + static_cast<uint32_t>(rng() % 8);
  c.host_tier_blocks = static_cast<uint32_t>(rng() % 7);  // 0 = no host tier, else 1..6
  c.mode = rng() % 2 ? PreemptionMode::kSwap : PreemptionMode::kRecompute;
  c.swap_blocks = c.mode == PreemptionMode::kSwap ? static_cast<uint32_t>(rng() % 6) : 0;
  c.disk = rng() % 2 == 0;
  c.disk_extents = static_cast<uint32_t>(rng() % 5);  // 1..4 extents, or ample
  c.extent_blocks = 1 + static_cast<uint32_t>(rng() % 3);
  c.remote = with_redis && rng() % 2 == 0;
  c.policy = rng() % 3 == 0 ? OffloadPolicy::kWriteThrough : OffloadPolicy::kWriteBack;
  c.budget = 4 + static_cast<uint32_t>(rng() % 16);
  c.max_seqs = 2 + static_cast<uint32_t>(rng() % 6);
  c.fingerprint = fingerprint;
  return c;
}

std::string describe(const StackConfig& c) {
  return "pool " + std::to_string(c.pool_blocks) + ", host tier " +
         std::to_string(c.host_tier_blocks) + ", swap " + std::to_string(c.swap_blocks) + " (" +
         preemption_mode_name(c.mode) + "), disk " +
         (c.disk ? std::to_string(c.disk_extents) + " extents of " + std::to_string(c.extent_blocks)
                 : "off") +
         ", remote " + (c.remote ? "on" : "off") + ", " + offload_policy_name(c.policy) +
         ", budget " + std::to_string(c.budget) + ", max seqs " + std::to_string(c.max_seqs);
}

TEST(TierStackRandomTest, EveryComputedPositionHoldsItsOwnPrefixesBytes) {
  test::RedisProcess redis;
  REQUIRE_REDIS(redis);
  const RedisEndpoint ep = redis.endpoint();
  std::mt19937_64 rng(20261202);
  uint64_t checked = 0, tier_hits = 0, preemptions = 0;
  for (int round = 0; round < 60; ++round) {
    TempDir dir;
    const StackConfig c = random_config(rng, true, 1000 + round);
    SCOPED_TRACE("round " + std::to_string(round) + ": " + describe(c));
    const std::vector<Request> reqs = workload(rng, 40);
    {
      Stack s(c, dir.path, &ep);
      run(s, reqs, rng);
      if (HasFatalFailure()) return;
      EXPECT_EQ(s.finished(), reqs.size());
      checked += s.positions_checked();
      const KvOffloadStats st = s.stats();
      tier_hits += st.host.hit_tokens + st.disk.hit_tokens + st.remote.hit_tokens;
      EXPECT_EQ(st.host.checksum_failures + st.disk.checksum_failures + st.remote.checksum_failures,
                0u);
      preemptions += s.preemptions();
      s.shut_down();
    }
    if (c.disk || c.remote) {
      // A restart onto the same directory and Redis: what the first stack left is found again,
      // and is still its own prefix's bytes.
      Stack again(c, dir.path, &ep);
      run(again, reqs, rng);
      if (HasFatalFailure()) return;
      checked += again.positions_checked();
      const KvOffloadStats st = again.stats();
      tier_hits += st.disk.hit_tokens + st.remote.hit_tokens;
    }
  }
  // The run exercised what it claims to: many positions checked, tier loads and preemptions.
  EXPECT_GT(checked, 20000u);
  EXPECT_GT(tier_hits, 500u);
  EXPECT_GT(preemptions, 20u);
}

// The same workload with every tier on (tiny) gives exactly the outputs of a stack without tiers:
// what comes back from the tiers is what would have been computed.
TEST(TierStackRandomTest, TinyTiersGiveTheOutputsOfNoTiers) {
  test::RedisProcess redis;
  REQUIRE_REDIS(redis);
  const RedisEndpoint ep = redis.endpoint();
  std::mt19937_64 rng(99);
  for (int round = 0; round < 8; ++round) {
    const std::vector<Request> reqs = workload(rng, 30);
    StackConfig plain{.pool_blocks = 12,
                      .budget = 8,
                      .max_seqs = 4,
                      .fingerprint = 5000 + static_cast<uint64_t>(round)};
    std::mt19937_64 arrivals(round);
    Stack off(plain, "", nullptr);
    run(off, reqs, arrivals);
    if (HasFatalFailure()) return;
    TempDir dir;
    StackConfig tiny = plain;
    tiny.host_tier_blocks = 1;
    tiny.disk = true;
    tiny.disk_extents = 1;
    tiny.extent_blocks = 1;
    tiny.remote = true;
    tiny.mode = round % 2 ? PreemptionMode::kSwap : PreemptionMode::kRecompute;
    tiny.swap_blocks = round % 2 ? 2 : 0;
    arrivals.seed(round);
    Stack on(tiny, dir.path, &ep);
    run(on, reqs, arrivals);
    if (HasFatalFailure()) return;
    EXPECT_EQ(on.outputs(), off.outputs()) << "round " << round;
  }
}

}  // namespace
}  // namespace kvs
