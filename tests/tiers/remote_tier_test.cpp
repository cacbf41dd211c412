// RemoteTier (Redis) and its client against a real redis-server started by the test on a free
// loopback port (skipped when redis-server is not installed): round trips, verification of every
// value (corrupted, foreign, wrong tokens), URL parsing, consistent hashing, the breaker on a dead
// endpoint, a full write queue, and a randomized run against a simple model.
#include "tiers/remote_tier.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "support/redis_process.h"

namespace kvs {
namespace {

constexpr uint32_t kBs = 4;
constexpr uint64_t kBlockBytes = 1000;

using test::RedisProcess;

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

const TierSecrets& secrets() {
  static const TierSecrets s = [] {
    TierSecrets t;
    t.root.fill(1);
    t.salt.fill(2);
    t.mac = test_key();
    t.id = 77;
    return t;
  }();
  return s;
}

struct Chain {
  std::vector<TierBlockMeta> metas;
  std::vector<int32_t> tokens;
  std::vector<std::vector<uint8_t>> bytes;
};

Chain make_chain(uint32_t n, uint32_t seed, std::string_view salt = "") {
  Chain c;
  uint64_t parent =
      tier_root_key(secrets(), tier_namespace(42, KvDtype::kF16, KvDtype::kF16, kBs), salt);
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<int32_t> t;
    for (uint32_t k = 0; k < kBs; ++k) t.push_back(static_cast<int32_t>(seed * 1000 + i * kBs + k));
    const uint64_t key = tier_block_key(parent, t);
    c.metas.push_back(
        {.key = key, .parent_key = parent, .salt_check = tier_salt_check(secrets(), salt)});
    c.tokens.insert(c.tokens.end(), t.begin(), t.end());
    std::vector<uint8_t> b(kBlockBytes);
    for (uint64_t k = 0; k < kBlockBytes; ++k) b[k] = static_cast<uint8_t>(key * 31 + k * 7);
    c.bytes.push_back(std::move(b));
    parent = key;
  }
  return c;
}

std::span<const int32_t> block_tokens(const Chain& c, size_t i) {
  return std::span<const int32_t>(c.tokens).subspan(i * kBs, kBs);
}

std::unique_ptr<RemoteTier> open_tier(std::vector<RedisEndpoint> eps, ExtentNamespace ns = ns_f16(),
                                      uint32_t max_queued = 512) {
  auto t = RemoteTier::create({.endpoints = std::move(eps),
                               .timeout_ms = 200,
                               .ns = ns,
                               .mac_key = test_key(),
                               .max_queued_writes = max_queued,
                               .missing_ttl_seconds = 0.0});
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t).value();
}

void store(RemoteTier& t, const Chain& c) {
  for (size_t i = 0; i < c.metas.size(); ++i)
    t.put(c.metas[i], block_tokens(c, i), c.bytes[i].data());
  ASSERT_TRUE(t.flush(5.0));
}

// Fetches the chain and waits for the answers; returns how many leading blocks are ready.
size_t fetch_run(RemoteTier& t, const Chain& c) {
  t.fetch(c.metas, c.tokens);
  for (int i = 0; i < 500; ++i) {
    bool pending = false;
    for (size_t k = 0; k < c.metas.size(); ++k)
      pending |= t.readiness(c.metas[k], block_tokens(c, k)) == RemoteTier::Readiness::kPending;
    if (!pending) break;
    t.wait_for_reads(0.01);
  }
  size_t n = 0;
  while (n < c.metas.size() &&
         t.readiness(c.metas[n], block_tokens(c, n)) == RemoteTier::Readiness::kReady)
    ++n;
  return n;
}

TEST(RedisUrlTest, ParsesAndRejects) {
  auto e = parse_redis_url("redis://cache.local:6380/3");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->host, "cache.local");
  EXPECT_EQ(e->port, 6380);
  EXPECT_EQ(e->db, 3u);
  EXPECT_EQ(e->url(), "redis://cache.local:6380/3");
  auto d = parse_redis_url("redis://127.0.0.1");
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->port, 6379);
  EXPECT_EQ(d->db, 0u);
  for (const char* bad : {"http://x:1", "redis://", "redis://:6379", "redis://h:0",
                          "redis://h:70000", "redis://h:12x", "redis://h:1/x", "redis://u:@h:1"})
    EXPECT_FALSE(parse_redis_url(bad).is_ok()) << bad;
  // Credentials: a password alone, or an ACL user and password; never printed back.
  auto p = parse_redis_url("redis://:s3cret@10.0.0.1:6390/2");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->password, "s3cret");
  EXPECT_EQ(p->user, "");
  EXPECT_EQ(p->port, 6390);
  auto u = parse_redis_url("redis://kv:pa:ss@h");
  ASSERT_TRUE(u.is_ok());
  EXPECT_EQ(u->user, "kv");
  EXPECT_EQ(u->password, "pa:ss");
  EXPECT_EQ(u->url().find("pa:ss"), std::string::npos) << u->url();
  EXPECT_NE(u->url().find("***"), std::string::npos);
  auto bad_port = parse_redis_url("redis://:s3cret@h:99999");
  ASSERT_FALSE(bad_port.is_ok());
  EXPECT_EQ(bad_port.status().message().find("s3cret"), std::string::npos);
}

TEST(RemoteTierTest, ConsistentHashingSpreadsAndMovesFewKeys) {
  std::vector<RedisEndpoint> three = {
      {.host = "a", .port = 1}, {.host = "b", .port = 1}, {.host = "c", .port = 1}};
  auto t3 = open_tier(three);
  std::vector<RedisEndpoint> four = three;
  four.push_back({.host = "d", .port = 1});
  auto t4 = open_tier(four);
  std::map<uint32_t, int> count;
  int moved = 0;
  const Chain c = make_chain(3000, 1);
  for (const TierBlockMeta& m : c.metas) {
    const uint32_t a = t3->instance_of(m.key), b = t4->instance_of(m.key);
    ++count[a];
    moved += b != a;
    EXPECT_TRUE(b == a || b == 3) << "a key moved between two old instances";
  }
  for (uint32_t i = 0; i < 3; ++i) EXPECT_GT(count[i], 600) << "instance " << i;
  EXPECT_LT(moved, 1300);  // about a quarter moves to the new instance, not all
  EXPECT_NE(t3->key_of(1), t3->key_of(2));
  EXPECT_EQ(t3->key_of(1).rfind("kvs:", 0), 0u);
}

TEST(RemoteTierTest, ABlockStoredIsFetchedVerifiedAndCopied) {
  RedisProcess redis;
  REQUIRE_REDIS(redis);
  const Chain c = make_chain(5, 2);
  {
    auto t = open_tier({redis.endpoint()});
    store(*t, c);
    EXPECT_EQ(t->counters().blocks_stored, 5u);
    EXPECT_GT(t->startup_bytes_per_s(), 0);
  }
  auto t = open_tier({redis.endpoint()});  // a second process: nothing in memory
  ASSERT_EQ(fetch_run(*t, c), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const Result<VerifiedBlock> b = t->verified_block(c.metas[i], block_tokens(c, i));
    ASSERT_TRUE(b.is_ok());
    EXPECT_EQ(std::vector<uint8_t>(b->data(), b->data() + b->bytes), c.bytes[i]);
  }
  // Other tokens under the same key (a collision, or a lie) never match.
  std::vector<int32_t> other(block_tokens(c, 0).begin(), block_tokens(c, 0).end());
  other[0] += 1;
  EXPECT_FALSE(t->verified_block(c.metas[0], other).is_ok());
  // A chain never stored is a miss.
  EXPECT_EQ(fetch_run(*t, make_chain(3, 99)), 0u);
  EXPECT_EQ(t->counters().missing, 3u);  // the whole chain was asked for at once
}

TEST(RemoteTierTest, CorruptedForeignAndMismatchedValuesAreNeverUsed) {
  RedisProcess redis;
  REQUIRE_REDIS(redis);
  const Chain c = make_chain(3, 3);
  auto t = open_tier({redis.endpoint()});
  store(*t, c);
  RedisClient cli(redis.endpoint(), 200);
  // Block 1: one payload byte flipped.
  const std::vector<std::string> k1 = {t->key_of(c.metas[1].key)};
  auto v = cli.get_many(k1);
  ASSERT_TRUE(v.is_ok() && (*v)[0].kind == RedisValue::Kind::kValue);
  std::vector<uint8_t> bad = (*v)[0].bytes;
  bad[bad.size() / 2] ^= 0x40;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> items = {{k1[0], bad}};
  ASSERT_TRUE(cli.set_many(items, 0).is_ok());
  auto fresh = open_tier({redis.endpoint()});
  EXPECT_EQ(fetch_run(*fresh, c), 1u);  // block 0 only: the chain breaks at the bad one
  EXPECT_EQ(fresh->counters().checksum_failures, 1u);
  // The bad value is deleted (so that the recomputed block is written again).
  auto gone = cli.get_many(k1);
  ASSERT_TRUE(gone.is_ok());
  EXPECT_EQ((*gone)[0].kind, RedisValue::Kind::kMissing);
  // Another format's tier (same chain keys) never even sees these values.
  ExtentNamespace int8 = ns_f16();
  int8.k_dtype = int8.v_dtype = KvDtype::kInt8;
  auto other = open_tier({redis.endpoint()}, int8);
  EXPECT_EQ(fetch_run(*other, c), 0u);
  EXPECT_EQ(other->counters().checksum_failures, 0u);
  // A value under the right key that holds another block's extent fails verification.
  const Chain d = make_chain(1, 4);
  auto w = open_tier({redis.endpoint()});
  store(*w, d);
  auto dv = cli.get_many(std::vector<std::string>{w->key_of(d.metas[0].key)});
  ASSERT_TRUE(dv.is_ok() && (*dv)[0].kind == RedisValue::Kind::kValue);
  items = {{w->key_of(c.metas[2].key), (*dv)[0].bytes}};
  ASSERT_TRUE(cli.set_many(items, 0).is_ok());
  auto fresh2 = open_tier({redis.endpoint()});
  const Chain tail = {{c.metas[2]}, {block_tokens(c, 2).begin(), block_tokens(c, 2).end()}, {}};
  EXPECT_EQ(fetch_run(*fresh2, tail), 0u);
  EXPECT_EQ(fresh2->counters().checksum_failures, 1u);
}

TEST(RemoteTierTest, ADeadEndpointOpensTheBreakerAndNeverBlocks) {
  const RedisEndpoint dead{.host = "127.0.0.1",
                           .port = test::free_loopback_port()};  // nothing listens
  auto t = open_tier({dead});
  EXPECT_EQ(t->startup_bytes_per_s(), 0);
  const Chain c = make_chain(4, 5);
  for (int i = 0; i < 5; ++i) fetch_run(*t, c);
  const RemoteTierCounters k = t->counters();
  EXPECT_GE(k.errors, 3u);
  ASSERT_EQ(k.instances.size(), 1u);
  EXPECT_NE(k.instances[0].breaker, CircuitBreaker::State::kClosed);
  EXPECT_GE(k.instances[0].times_opened, 1u);
  // While open, blocks are known misses and writes are dropped at once.
  EXPECT_EQ(t->readiness(c.metas[0], block_tokens(c, 0)), RemoteTier::Readiness::kMissing);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < c.metas.size(); ++i)
    EXPECT_FALSE(t->put(c.metas[i], block_tokens(c, i), c.bytes[i].data()));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.05);
  EXPECT_EQ(t->counters().dropped_writes, 4u);
}

TEST(RemoteTierTest, AFullWriteQueueDropsAndCounts) {
  const RedisEndpoint dead{.host = "127.0.0.1", .port = test::free_loopback_port()};
  auto t = open_tier({dead}, ns_f16(), /*max_queued=*/2);
  const Chain c = make_chain(200, 6);
  uint64_t accepted = 0;
  for (size_t i = 0; i < c.metas.size(); ++i)
    accepted += t->put(c.metas[i], block_tokens(c, i), c.bytes[i].data()) ? 1 : 0;
  t->flush(5.0);
  const RemoteTierCounters k = t->counters();
  EXPECT_EQ(k.blocks_stored, 0u);
  EXPECT_EQ(k.dropped_writes, 200u);  // queue full, breaker open, or the failed SETs
  EXPECT_LT(accepted, 200u);
}

// Random chains, some stored, some overwritten with garbage, over two instances; what the tier
// serves always equals a simple model: stored and intact -> the block's bytes; else a miss.
TEST(RemoteTierTest, MatchesASimpleModelOverTwoInstances) {
  RedisProcess r1, r2;
  REQUIRE_REDIS(r1);
  REQUIRE_REDIS(r2);
  std::mt19937 rng(11);
  auto writer = open_tier({r1.endpoint(), r2.endpoint()});
  std::vector<Chain> chains;
  std::vector<std::vector<int>> model;  // per block: 1 stored, 2 corrupted, 0 absent
  for (uint32_t i = 0; i < 12; ++i) {
    chains.push_back(make_chain(1 + rng() % 6, 100 + i, i % 3 == 0 ? "salt" : ""));
    const Chain& c = chains.back();
    model.emplace_back(c.metas.size(), 0);
    for (size_t b = 0; b < c.metas.size(); ++b) {
      if (rng() % 4 == 0) continue;
      ASSERT_TRUE(writer->put(c.metas[b], block_tokens(c, b), c.bytes[b].data()));
      model.back()[b] = 1;
    }
  }
  ASSERT_TRUE(writer->flush(5.0));
  for (size_t i = 0; i < chains.size(); ++i) {
    for (size_t b = 0; b < chains[i].metas.size(); ++b) {
      if (model[i][b] != 1 || rng() % 5 != 0) continue;
      const RedisEndpoint ep =
          writer->instance_of(chains[i].metas[b].key) == 0 ? r1.endpoint() : r2.endpoint();
      RedisClient cli(ep, 200);
      std::vector<std::pair<std::string, std::vector<uint8_t>>> items = {
          {writer->key_of(chains[i].metas[b].key), std::vector<uint8_t>(50, 7)}};
      ASSERT_TRUE(cli.set_many(items, 0).is_ok());
      model[i][b] = 2;
    }
  }
  auto reader = open_tier({r1.endpoint(), r2.endpoint()});
  for (size_t i = 0; i < chains.size(); ++i) {
    size_t expect = 0;
    while (expect < model[i].size() && model[i][expect] == 1) ++expect;
    EXPECT_EQ(fetch_run(*reader, chains[i]), expect) << "chain " << i;
    for (size_t b = 0; b < expect; ++b) {
      const Result<VerifiedBlock> v =
          reader->verified_block(chains[i].metas[b], block_tokens(chains[i], b));
      ASSERT_TRUE(v.is_ok());
      EXPECT_EQ(std::vector<uint8_t>(v->data(), v->data() + v->bytes), chains[i].bytes[b]);
    }
  }
}

TEST(RemoteTierTest, AValueForgedWithoutTheSecretIsRejectedDeletedAndCounted) {
  RedisProcess redis;
  REQUIRE_REDIS(redis);
  const Chain c = make_chain(3, 21);
  // Someone who can write to Redis computes the keys (say they learned the chain keys) and
  // writes well-formed extents with their own MAC key: the victim's tier rejects every one.
  auto forger = RemoteTier::create({.endpoints = {redis.endpoint()},
                                    .timeout_ms = 200,
                                    .ns = ns_f16(),
                                    .mac_key = test_key(99),
                                    .missing_ttl_seconds = 0.0});
  ASSERT_TRUE(forger.is_ok());
  store(**forger, c);
  auto t = open_tier({redis.endpoint()});
  EXPECT_EQ(fetch_run(*t, c), 0u);
  EXPECT_EQ(t->counters().checksum_failures, 3u);
  EXPECT_EQ(t->counters().found, 0u);
  RedisClient cli(redis.endpoint(), 200);
  auto v = cli.get_many(std::vector<std::string>{t->key_of(c.metas[0].key)});
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ((*v)[0].kind, RedisValue::Kind::kMissing);  // deleted
}

TEST(RemoteTierTest, AKeyOfAnotherTypeIsOneMissNotAFailedPipeline) {
  RedisProcess redis;
  REQUIRE_REDIS(redis);
  const Chain c = make_chain(6, 22);
  auto t = open_tier({redis.endpoint()});
  store(*t, c);
  // Block 4's key holds a list (WRONGTYPE for GET): blocks 0..3 still load in the same pipeline.
  RedisClient cli(redis.endpoint(), 200);
  ASSERT_TRUE(cli.del(t->key_of(c.metas[4].key)).is_ok());
  const std::string k4 = t->key_of(c.metas[4].key);
  const std::string cmd =
      "redis-cli -p " + std::to_string(redis.endpoint().port) + " RPUSH " + k4 + " x >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto fresh = open_tier({redis.endpoint()});
  EXPECT_EQ(fetch_run(*fresh, c), 4u);
  EXPECT_EQ(fresh->counters().errors, 0u);
  EXPECT_EQ(fresh->counters().checksum_failures, 1u);
  EXPECT_EQ(fresh->counters().instances[0].breaker, CircuitBreaker::State::kClosed);
}

TEST(RemoteTierTest, ALongRunIsFetchedInChunksEachWithItsOwnDeadline) {
  RedisProcess redis;
  REQUIRE_REDIS(redis);
  const Chain c = make_chain(120, 23);
  auto t = open_tier({redis.endpoint()});
  store(*t, c);
  // Chunks of about 10 values; a tiny base timeout that one pipeline of 120 values could miss
  // on a busy machine, while each chunk's deadline grows with its bytes.
  auto fresh = RemoteTier::create({.endpoints = {redis.endpoint()},
                                   .timeout_ms = 5,
                                   .ns = ns_f16(),
                                   .mac_key = test_key(),
                                   .fetch_chunk_bytes = 10 * (kBlockBytes + 200),
                                   .min_fetch_bytes_per_s = 1 << 20,
                                   .missing_ttl_seconds = 0.0});
  ASSERT_TRUE(fresh.is_ok());
  EXPECT_EQ(fetch_run(**fresh, c), 120u);
  const RemoteTierCounters k = (*fresh)->counters();
  EXPECT_GE(k.reads, 12u);  // one round trip per chunk
  EXPECT_EQ(k.found, 120u);
}

TEST(RemoteTierTest, APasswordProtectedRedisNeedsTheRightPassword) {
  RedisProcess redis({"--requirepass", "hunter2-long-enough"});
  REQUIRE_REDIS(redis);
  const Chain c = make_chain(2, 24);
  RedisEndpoint good = redis.endpoint();
  good.password = "hunter2-long-enough";
  {
    auto t = open_tier({good});
    store(*t, c);
    EXPECT_EQ(t->counters().blocks_stored, 2u);
  }
  auto fresh = open_tier({good});
  EXPECT_EQ(fetch_run(*fresh, c), 2u);
  // Without (or with a wrong) password: nothing is stored or found, nothing fails.
  RedisEndpoint wrong = redis.endpoint();
  wrong.password = "guess";
  for (const RedisEndpoint& e : {redis.endpoint(), wrong}) {
    auto w = open_tier({e});
    store(*w, make_chain(1, 25));
    EXPECT_EQ(w->counters().blocks_stored, 0u);
    EXPECT_EQ(fetch_run(*w, c), 0u);
  }
  RedisClient cli(wrong, 200);
  const Status st = cli.ping();
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("AUTH"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("guess"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kvs
