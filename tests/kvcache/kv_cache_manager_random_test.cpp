// Randomized test of the KV cache manager against a reference model.
//
// The harness plays the engine: it keeps a shadow KV store (one 64-bit "content id" per slot),
// executes every BlockCopy, and writes the content id of each token it commits. The content id
// of position i is a hash of the tenant salt and tokens [0, i], i.e. exactly what the real KV of
// that position depends on. So "every committed position of every live sequence reads its own
// content id" proves that prefix hits, copy-on-write, eviction and collisions never hand a
// sequence wrong KV. The reference model (std::map of sequences and of every full-block prefix
// ever committed) bounds the cache hits, and predicts them exactly while nothing was evicted.
// check_integrity() runs after every operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kvcache/content_hash.h"
#include "kvcache/kv_cache_manager.h"

namespace kvs {
namespace {

using test::mix;

struct RandomConfig {
  KvCacheConfig cache;
  uint32_t num_ops = 0;
  uint32_t num_tenants = 1;
  uint32_t max_live = 12;
  uint32_t doc_len = 48;
  uint32_t max_suffix = 24;
  int32_t vocab = 5000;
  BlockHashFn hash = nullptr;  // null = default
  uint64_t seed = 1;
};

struct ModelSeq {
  uint32_t tenant = 0;
  std::vector<int32_t> tokens;    // every token known so far (prompt, then decoded)
  std::vector<uint64_t> content;  // content id of each position of `tokens`
  uint32_t prompt_len = 0;
  uint32_t appended = 0;
  uint32_t committed = 0;
};

class Harness {
 public:
  explicit Harness(const RandomConfig& rc)
      : rc_(rc), m_(rc.cache), rng_(rc.seed), bs_(rc.cache.block_size) {
    if (rc.hash != nullptr) m_.set_hash_function_for_testing(rc.hash);
    kv_.assign(size_t{rc.cache.num_blocks} * bs_, 0);
    for (int d = 0; d < 8; ++d) {
      std::vector<int32_t> doc(rc.doc_len);
      for (int32_t& t : doc) t = token();
      docs_.push_back(doc);
    }
    for (uint32_t t = 0; t < rc.num_tenants; ++t) {
      salts_.push_back(t == 0 ? std::string() : "tenant-" + std::to_string(t));
    }
  }

  void run() {
    for (uint32_t op = 0; op < rc_.num_ops; ++op) {
      const uint32_t r = uniform(100);
      if (r < 20) {
        do_admit();
      } else if (r < 65) {
        do_step();
      } else if (r < 73) {
        do_fork();
      } else if (r < 88) {
        do_free();
      } else {
        do_lookup();
      }
      const Status st = m_.check_integrity();
      ASSERT_TRUE(st.is_ok()) << "op " << op << ": " << st.to_string();
      if (op % 97 == 0) {
        for (const auto& [id, s] : seqs_) verify_content(id, s);
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
    finish();
  }

  uint64_t exact_checks() const { return exact_checks_; }
  const KvCacheManager& manager() const { return m_; }

 private:
  uint32_t uniform(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }
  int32_t token() { return 1 + static_cast<int32_t>(rng_() % static_cast<uint64_t>(rc_.vocab)); }

  uint64_t salt_root(uint32_t tenant) const { return mix(0x5a17, tenant); }
  uint64_t content_at(const ModelSeq& s, uint32_t pos) const {
    return pos == 0 ? mix(salt_root(s.tenant), static_cast<uint64_t>(s.tokens[0]))
                    : mix(s.content[pos - 1], static_cast<uint64_t>(s.tokens[pos]));
  }
  void extend_content(ModelSeq& s) const {
    while (s.content.size() < s.tokens.size()) {
      s.content.push_back(content_at(s, static_cast<uint32_t>(s.content.size())));
    }
  }

  std::vector<int32_t> make_prompt() {
    std::vector<int32_t> p;
    const auto& doc = docs_[uniform(static_cast<uint32_t>(docs_.size()))];
    const uint32_t take = uniform(rc_.doc_len + 1);
    p.assign(doc.begin(), doc.begin() + take);
    const uint32_t suffix = uniform(rc_.max_suffix + 1);
    for (uint32_t i = 0; i < suffix; ++i) p.push_back(token());
    if (p.empty()) p.push_back(token());
    return p;
  }

  // The id of the (virtual) parent of block k of a token list of tenant t: the content id of
  // its last token, or the tenant root for k == 0.
  uint64_t parent_id(uint32_t tenant, const std::vector<uint64_t>& content, uint32_t k) const {
    return k == 0 ? salt_root(tenant) : content[size_t{k} * bs_ - 1];
  }

  struct Expect {
    uint32_t full_upper = 0;     // cached full blocks are at most this many
    uint32_t partial_best = 0;   // best partial match among committed children
    bool partial_exact = false;  // few enough candidates that the cache must find the best
  };
  Expect expect(uint32_t tenant, const std::vector<int32_t>& prompt) const {
    Expect e;
    if (!rc_.cache.enable_prefix_caching) return e;
    ModelSeq tmp;
    tmp.tenant = tenant;
    tmp.tokens = prompt;
    extend_content(tmp);
    const uint32_t max_cached = static_cast<uint32_t>(prompt.size()) - 1;
    uint32_t k = 0;
    while ((k + 1) * bs_ <= max_cached) {
      const auto it = children_.find(parent_id(tenant, tmp.content, k));
      const std::vector<int32_t> blk(prompt.begin() + k * bs_, prompt.begin() + (k + 1) * bs_);
      if (it == children_.end() || !it->second.contains(blk)) break;
      ++k;
    }
    e.full_upper = k;
    const uint32_t limit = std::min(bs_ - 1, max_cached - k * bs_);
    const auto it = children_.find(parent_id(tenant, tmp.content, k));
    uint32_t same_first = 0;
    if (it != children_.end() && limit > 0) {
      for (const auto& child : it->second) {
        if (child[0] != prompt[k * bs_]) continue;
        ++same_first;
        uint32_t p = 0;
        while (p < limit && child[p] == prompt[k * bs_ + p]) ++p;
        e.partial_best = std::max(e.partial_best, p);
      }
    }
    // The cache looks at a bounded number of candidates per bucket; with a colliding hash the
    // bucket also holds other parents' children, so only the bound holds then.
    e.partial_exact = same_first <= PrefixCache::kMaxPartialCandidates && rc_.hash == nullptr;
    return e;
  }

  void apply_copies(const std::vector<BlockCopy>& copies) {
    for (const BlockCopy& c : copies) {
      ASSERT_LE(c.num_tokens, bs_);
      ASSERT_NE(c.src, c.dst);
      for (uint32_t t = 0; t < c.num_tokens; ++t) {
        kv_[size_t{c.dst.value} * bs_ + t] = kv_[size_t{c.src.value} * bs_ + t];
      }
    }
  }

  void verify_content(SeqId id, const ModelSeq& s) {
    ASSERT_EQ(m_.num_tokens(id), s.appended);
    ASSERT_EQ(m_.num_committed(id), s.committed);
    ASSERT_EQ(m_.block_table(id).size(), (s.appended + bs_ - 1) / bs_);
    for (uint32_t pos = 0; pos < s.committed; ++pos) {
      ASSERT_EQ(kv_[m_.slot(id, pos)], s.content[pos])
          << "sequence " << id.value << " position " << pos << " reads wrong KV";
    }
  }

  SeqId pick() {
    auto it = seqs_.begin();
    std::advance(it, uniform(static_cast<uint32_t>(seqs_.size())));
    return it->first;
  }

  void do_admit() {
    if (seqs_.size() >= rc_.max_live) return do_free();
    ModelSeq s;
    s.tenant = uniform(rc_.num_tenants);
    s.tokens = make_prompt();
    s.prompt_len = static_cast<uint32_t>(s.tokens.size());
    extend_content(s);
    const std::string& salt = salts_[s.tenant];
    const AdmitPlan plan = m_.plan_admit(s.tokens, salt);
    const Expect e = expect(s.tenant, s.tokens);
    const bool no_evictions = m_.stats().evictions == 0;
    std::vector<BlockCopy> copies;
    const SeqId id{next_id_++};
    Result<uint32_t> cached = m_.admit(id, s.tokens, salt, &copies);
    ASSERT_TRUE(cached.is_ok());
    const uint32_t c = *cached;
    const uint32_t full = static_cast<uint32_t>(plan.cached_tokens / bs_);
    ASSERT_LT(c, s.prompt_len);
    ASSERT_TRUE(c == plan.cached_tokens || (copies.empty() && c == full * bs_));
    ASSERT_LE(c / bs_, e.full_upper);
    if (no_evictions) {
      // Nothing was ever evicted: every committed prefix is still cached.
      ASSERT_EQ(c / bs_, e.full_upper);
      ASSERT_LE(c % bs_, e.partial_best);
      if (e.partial_exact) {
        ASSERT_EQ(c % bs_, e.partial_best);
      }
      ++exact_checks_;
    }
    ASSERT_EQ(copies.size(), c % bs_ != 0 ? 1u : 0u);
    apply_copies(copies);
    s.appended = s.committed = c;
    verify_content(id, s);
    seqs_.emplace(id, std::move(s));
  }

  void record_committed_blocks(const ModelSeq& s, uint32_t from, uint32_t to) {
    // Full blocks completed by committing positions [from, to).
    for (uint32_t k = from / bs_; (k + 1) * bs_ <= to; ++k) {
      if ((k + 1) * bs_ <= from) continue;
      children_[parent_id(s.tenant, s.content, k)].insert(
          std::vector<int32_t>(s.tokens.begin() + k * bs_, s.tokens.begin() + (k + 1) * bs_));
    }
  }

  void commit(SeqId id, ModelSeq& s, uint32_t n) {
    // The engine writes KV of the committed positions; their blocks must be private.
    for (uint32_t pos = s.committed; pos < s.committed + n; ++pos) {
      const BlockId b = m_.block_table(id)[pos / bs_];
      ASSERT_EQ(m_.refcount(b), 1u) << "write into a shared block";
      kv_[m_.slot(id, pos)] = s.content[pos];
    }
    m_.commit_tokens(id, std::span(s.tokens).subspan(s.committed, n));
    record_committed_blocks(s, s.committed, s.committed + n);
    s.committed += n;
  }

  void do_step() {
    if (seqs_.empty()) return do_admit();
    const SeqId id = pick();
    ModelSeq& s = seqs_.at(id);
    if (s.committed < s.appended) {
      return commit(id, s, 1 + uniform(s.appended - s.committed));
    }
    uint32_t n;
    if (s.appended < s.prompt_len) {
      n = 1 + uniform(std::min<uint32_t>(s.prompt_len - s.appended, 32));
    } else {
      n = 1 + (uniform(8) == 0 ? uniform(3) : 0);  // decode, sometimes a few speculative slots
    }
    while (s.tokens.size() < s.appended + n) s.tokens.push_back(token());
    extend_content(s);
    const uint32_t need = m_.blocks_needed_to_append(id, n);
    const bool can = m_.can_append(id, n);
    const std::vector<BlockId> before(m_.block_table(id).begin(), m_.block_table(id).end());
    std::vector<BlockCopy> copies;
    const Status st = m_.append_slots(id, n, &copies);
    ASSERT_EQ(st.is_ok(), can);
    if (!st.is_ok()) {
      ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
      ASSERT_TRUE(copies.empty());
      ASSERT_EQ(m_.num_tokens(id), s.appended);
      ASSERT_TRUE(std::ranges::equal(m_.block_table(id), before));
      ASSERT_GT(need, m_.available_blocks(salts_[s.tenant]));
      s.tokens.resize(s.appended);
      s.content.resize(s.appended);
      return;
    }
    const size_t grown = m_.block_table(id).size() - before.size();
    ASSERT_EQ(need, grown + copies.size());
    apply_copies(copies);
    s.appended += n;
    // Usually commit everything; sometimes leave KV pending across other operations.
    const uint32_t c = uniform(5) == 0 ? uniform(n + 1) : n;
    if (c > 0) commit(id, s, c);
  }

  void do_fork() {
    if (seqs_.empty() || seqs_.size() >= rc_.max_live) return;
    const SeqId parent = pick();
    const ModelSeq& p = seqs_.at(parent);
    const SeqId child{next_id_++};
    const Status st = m_.fork(parent, child);
    if (p.committed != p.appended) {
      ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
      return;
    }
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ModelSeq c = p;
    c.tokens.resize(c.appended);
    c.content.resize(c.appended);
    ASSERT_TRUE(std::ranges::equal(m_.block_table(child), m_.block_table(parent)));
    seqs_.emplace(child, std::move(c));
  }

  void do_free() {
    if (seqs_.empty()) return;
    const SeqId id = pick();
    verify_content(id, seqs_.at(id));
    m_.free(id);
    ASSERT_FALSE(m_.contains(id));
    seqs_.erase(id);
  }

  void do_lookup() {
    const uint32_t tenant = uniform(rc_.num_tenants);
    const std::vector<int32_t> prompt = make_prompt();
    const KvCacheStats before = m_.stats();
    const AdmitPlan plan = m_.plan_admit(prompt, salts_[tenant]);
    const KvCacheStats after = m_.stats();
    ASSERT_EQ(before.blocks_free, after.blocks_free);
    ASSERT_EQ(before.blocks_cached_free, after.blocks_cached_free);
    ASSERT_EQ(before.prefix_query_tokens, after.prefix_query_tokens);
    ASSERT_LT(plan.cached_tokens, prompt.size());
    ASSERT_LE(plan.cached_tokens / bs_, expect(tenant, prompt).full_upper);
    ASSERT_EQ(plan.blocks_needed, (prompt.size() + bs_ - 1) / bs_ - plan.cached_tokens / bs_);
  }

  void finish() {
    for (const auto& [id, s] : seqs_) verify_content(id, s);
    while (!seqs_.empty()) do_free();
    ASSERT_TRUE(m_.check_integrity().is_ok());
    const KvCacheStats st = m_.stats();
    EXPECT_EQ(st.blocks_in_use, 0u);
    EXPECT_EQ(st.blocks_free + st.blocks_cached_free, st.num_blocks);
    EXPECT_EQ(st.num_sequences, 0u);
    uint32_t held = 0;
    for (const TenantStats& t : m_.tenant_stats()) {
      EXPECT_EQ(t.blocks_held, t.blocks_cached_free) << t.cache_salt;
      held += t.blocks_held;
    }
    EXPECT_EQ(held, st.blocks_cached_free);
    if (!rc_.cache.enable_prefix_caching) {
      EXPECT_EQ(st.blocks_cached_free, 0u);
    }
  }

  RandomConfig rc_;
  KvCacheManager m_;
  std::mt19937_64 rng_;
  uint32_t bs_;
  std::vector<uint64_t> kv_;  // [num_blocks][block_size] content ids
  std::vector<std::vector<int32_t>> docs_;
  std::vector<std::string> salts_;
  std::map<SeqId, ModelSeq, bool (*)(SeqId, SeqId)> seqs_{
      [](SeqId a, SeqId b) { return a.value < b.value; }};
  // Every full block ever committed, by the content id of its parent prefix.
  std::map<uint64_t, std::set<std::vector<int32_t>>> children_;
  uint64_t next_id_ = 1;
  uint64_t exact_checks_ = 0;
};

TEST(KvCacheManagerRandom, TightPoolManyTenants) {
  // 100,000 operations on a pool far too small for the working set: constant eviction and
  // resource_exhausted answers.
  Harness h(RandomConfig{.cache = {.num_blocks = 64, .block_size = 4},
                         .num_ops = 100000,
                         .num_tenants = 3,
                         .seed = 11});
  h.run();
  EXPECT_GT(h.manager().stats().evictions, 1000u);
  EXPECT_GT(h.manager().stats().prefix_hit_tokens, 1000u);
  EXPECT_GT(h.manager().stats().cow_copies, 100u);
}

TEST(KvCacheManagerRandom, RoomyPoolHitsAreExact) {
  // No eviction: the reference model predicts every hit exactly.
  Harness h(RandomConfig{.cache = {.num_blocks = 8192, .block_size = 8},
                         .num_ops = 10000,
                         .num_tenants = 2,
                         .max_live = 16,
                         .seed = 12});
  h.run();
  EXPECT_EQ(h.manager().stats().evictions, 0u);
  EXPECT_GT(h.exact_checks(), 1000u);
  EXPECT_GT(h.manager().stats().prefix_hit_tokens, 10000u);
}

TEST(KvCacheManagerRandom, QuotaWithFairEviction) {
  Harness h(RandomConfig{.cache = {.num_blocks = 96, .block_size = 4, .tenant_quota_fraction = 0.4},
                         .num_ops = 40000,
                         .num_tenants = 4,
                         .seed = 13});
  h.run();
  for (const TenantStats& t : h.manager().tenant_stats()) EXPECT_LE(t.blocks_held, 38u);
  EXPECT_GT(h.manager().stats().evictions, 100u);
}

uint64_t constant_hash(uint64_t, std::span<const int32_t>) { return 7; }
uint64_t weak_hash(uint64_t parent, std::span<const int32_t> tokens) {
  return (parent + static_cast<uint64_t>(tokens[0])) % 5;  // collides constantly
}

TEST(KvCacheManagerRandom, ForcedCollisionsNeverReturnWrongBlocks) {
  // Small vocabulary: many blocks share tokens under different parents.
  Harness a(RandomConfig{.cache = {.num_blocks = 96, .block_size = 4},
                         .num_ops = 20000,
                         .num_tenants = 2,
                         .doc_len = 24,
                         .max_suffix = 12,
                         .vocab = 3,
                         .hash = &constant_hash,
                         .seed = 14});
  a.run();
  EXPECT_GT(a.manager().stats().prefix_hit_tokens, 1000u);
  Harness b(RandomConfig{.cache = {.num_blocks = 512, .block_size = 4},
                         .num_ops = 5000,
                         .num_tenants = 2,
                         .doc_len = 24,
                         .max_suffix = 12,
                         .vocab = 3,
                         .hash = &weak_hash,
                         .seed = 15});
  b.run();
  EXPECT_GT(b.exact_checks(), 100u);
}

TEST(KvCacheManagerRandom, PrefixCachingDisabled) {
  Harness h(
      RandomConfig{.cache = {.num_blocks = 64, .block_size = 16, .enable_prefix_caching = false},
                   .num_ops = 10000,
                   .num_tenants = 2,
                   .seed = 16});
  h.run();
  EXPECT_EQ(h.manager().stats().prefix_hit_tokens, 0u);
}

}  // namespace
}  // namespace kvs
