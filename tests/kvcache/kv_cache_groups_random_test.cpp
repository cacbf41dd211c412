// Randomized test of the KV cache manager with several layer groups (full + sliding windows),
// against a reference of what every layer must be able to read.
//
// The harness plays the engine for a model whose layers fall into groups with different windows.
// Each group has its own shadow KV store (one content id per slot); a step writes the content id
// of every computed position into every group, and every BlockCopy / swap restore is executed.
// The content id of position i hashes the tenant and tokens [0, i]: exactly what real KV depends
// on. After every operation:
//   - a full group reads the right content at every committed position;
//   - a sliding group reads the right content at every position the sequence's last step could
//     attend to (from first - window + 1, first = the step's first position), including right
//     after a prefix hit (the hit must bring the window before the hit point) and a swap-in;
//   - a sliding group holds at most the window's blocks plus the last step's blocks plus one;
//   - check_integrity() passes.
// Prefix hits, evictions, forks (CoW), swap-out/in (resident_blocks + admit_restored) and
// resource_exhausted answers all happen many times.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kvcache/content_hash.h"
#include "kvcache/kv_cache_manager.h"

namespace kvs {
namespace {

using test::mix;

struct Seq {
  uint32_t tenant = 0;
  std::vector<int32_t> tokens;
  std::vector<uint64_t> content;
  uint32_t prompt_len = 0;
  uint32_t appended = 0;
  uint32_t committed = 0;
  uint32_t last_first = 0;  // first position of the last step (what the window hangs off)
  uint32_t last_n = 0;      // its token count
};

class GroupHarness {
 public:
  GroupHarness(KvCacheConfig cfg, uint64_t seed, uint32_t tenants)
      : m_(cfg), cfg_(cfg), rng_(seed), bs_(cfg.block_size) {
    kv_.assign(cfg.group_windows.size(), std::vector<uint64_t>(size_t{cfg.num_blocks} * bs_, 0));
    for (int d = 0; d < 6; ++d) {
      std::vector<int32_t> doc(80);
      for (int32_t& t : doc) t = token();
      docs_.push_back(doc);
    }
    for (uint32_t t = 0; t < tenants; ++t) salts_.push_back(t == 0 ? "" : "t" + std::to_string(t));
  }

  void run(uint32_t ops) {
    for (uint32_t op = 0; op < ops; ++op) {
      const uint32_t r = uniform(100);
      SCOPED_TRACE("op " + std::to_string(op) + " kind " + std::to_string(r));
      if (r < 18)
        admit();
      else if (r < 70)
        step();
      else if (r < 77)
        fork();
      else if (r < 84)
        swap();
      else
        free_one();
      const Status st = m_.check_integrity();
      ASSERT_TRUE(st.is_ok()) << "op " << op << ": " << st.to_string();
      for (const auto& [id, s] : seqs_) verify(SeqId{id}, s);
      if (::testing::Test::HasFatalFailure()) return;
    }
    while (!seqs_.empty()) free_one();
    const KvCacheStats st = m_.stats();
    EXPECT_EQ(st.blocks_in_use, 0u);
    EXPECT_EQ(st.blocks_free + st.blocks_cached_free, st.num_blocks);
  }

  uint64_t hit_admits = 0, swaps = 0, forks = 0, refusals = 0, max_sliding_held = 0;
  const KvCacheManager& manager() const { return m_; }

 private:
  uint32_t uniform(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }
  int32_t token() { return 1 + static_cast<int32_t>(rng_() % 3000); }
  uint32_t groups() const { return static_cast<uint32_t>(cfg_.group_windows.size()); }

  void extend(Seq& s) const {
    while (s.content.size() < s.tokens.size()) {
      const size_t i = s.content.size();
      const uint64_t prev = i == 0 ? mix(0x5a17, s.tenant) : s.content[i - 1];
      s.content.push_back(mix(prev, static_cast<uint64_t>(s.tokens[i])));
    }
  }

  uint64_t& cell(SeqId id, uint32_t g, uint32_t pos) {
    const BlockId b = m_.block_table(id, g)[pos / bs_];
    EXPECT_TRUE(b.is_valid()) << "group " << g << " position " << pos << " not held";
    return kv_[g][size_t{b.value} * bs_ + pos % bs_];
  }

  // The first position group g must hold for a sequence whose last step started at `first`.
  uint32_t first_needed(uint32_t g, uint32_t first) const {
    const uint32_t w = cfg_.group_windows[g];
    return w == 0 || first < w ? 0 : first - w + 1;
  }

  void verify(SeqId id, const Seq& s) {
    ASSERT_EQ(m_.num_tokens(id), s.appended);
    ASSERT_EQ(m_.num_committed(id), s.committed);
    for (uint32_t g = 0; g < groups(); ++g) {
      const auto table = m_.block_table(id, g);
      SCOPED_TRACE("seq " + std::to_string(id.value) + " first " + std::to_string(s.last_first) +
                   " n " + std::to_string(s.last_n) + " appended " + std::to_string(s.appended) +
                   " committed " + std::to_string(s.committed));
      ASSERT_EQ(table.size(), (s.appended + bs_ - 1) / bs_);
      for (uint32_t pos = first_needed(g, s.last_first); pos < s.committed; ++pos) {
        ASSERT_EQ(cell(id, g, pos), s.content[pos])
            << "seq " << id.value << " group " << g << " reads wrong KV at " << pos;
      }
      const uint32_t w = cfg_.group_windows[g];
      if (w == 0) continue;
      uint32_t held = 0;
      for (BlockId b : table) held += b.is_valid() ? 1 : 0;
      max_sliding_held = std::max<uint64_t>(max_sliding_held, held);
      ASSERT_LE(held, (w + bs_ - 1) / bs_ + 1 + (s.last_n + bs_ - 1) / bs_)
          << "sliding group " << g << " holds blocks outside its window";
    }
  }

  void apply(const std::vector<BlockCopy>& copies) {
    for (const BlockCopy& c : copies)
      for (auto& store : kv_)
        for (uint32_t t = 0; t < c.num_tokens; ++t)
          store[size_t{c.dst.value} * bs_ + t] = store[size_t{c.src.value} * bs_ + t];
  }

  void commit(SeqId id, Seq& s, uint32_t n) {
    for (uint32_t pos = s.committed; pos < s.committed + n; ++pos) {
      for (uint32_t g = 0; g < groups(); ++g) {
        ASSERT_EQ(m_.refcount(m_.block_table(id, g)[pos / bs_]), 1u) << "write into shared block";
        cell(id, g, pos) = s.content[pos];
      }
    }
    m_.commit_tokens(id, std::span(s.tokens).subspan(s.committed, n));
    s.committed += n;
    // All written: the manager releases what the next step (from `appended`) cannot read.
    if (s.committed == s.appended) s.last_first = s.appended;
  }

  void admit() {
    if (seqs_.size() >= 10) return free_one();
    Seq s;
    s.tenant = uniform(static_cast<uint32_t>(salts_.size()));
    const auto& doc = docs_[uniform(static_cast<uint32_t>(docs_.size()))];
    s.tokens.assign(doc.begin(), doc.begin() + uniform(81));
    for (uint32_t i = uniform(20); i > 0; --i) s.tokens.push_back(token());
    if (s.tokens.empty()) s.tokens.push_back(token());
    s.prompt_len = static_cast<uint32_t>(s.tokens.size());
    extend(s);
    const uint32_t chunk = 1 + uniform(24);
    const AdmitPlan plan = m_.plan_admit(s.tokens, salts_[s.tenant]);
    std::vector<BlockCopy> copies;
    const SeqId id{next_++};
    Result<uint32_t> c = m_.admit(id, s.tokens, salts_[s.tenant], &copies, chunk);
    if (!c.is_ok()) {
      ASSERT_EQ(c.status().code(), StatusCode::kResourceExhausted);
      ASSERT_FALSE(m_.contains(id));
      ++refusals;
      return;
    }
    ASSERT_EQ(*c, plan.cached_tokens);
    ASSERT_LT(*c, s.prompt_len);
    apply(copies);
    if (*c > 0) ++hit_admits;
    s.committed = *c;
    s.appended = m_.num_tokens(id);
    ASSERT_EQ(s.appended, *c + std::min(chunk, s.prompt_len - *c));
    s.last_first = *c;
    s.last_n = s.appended - *c;
    verify(id, s);  // the hit's window blocks are there before the first step reads them
    seqs_.emplace(id.value, std::move(s));
    commit_pending(id);
  }

  void commit_pending(SeqId id) {
    Seq& s = seqs_.at(id.value);
    if (s.committed < s.appended) commit(id, s, s.appended - s.committed);
  }

  void step() {
    if (seqs_.empty()) return admit();
    auto it = seqs_.begin();
    std::advance(it, uniform(static_cast<uint32_t>(seqs_.size())));
    const SeqId id{it->first};
    Seq& s = it->second;
    const uint32_t n = s.appended < s.prompt_len
                           ? 1 + uniform(std::min<uint32_t>(s.prompt_len - s.appended, 24))
                           : 1;
    while (s.tokens.size() < s.appended + n) s.tokens.push_back(token());
    extend(s);
    const bool can = m_.can_append(id, n);
    std::vector<BlockCopy> copies;
    const Status st = m_.append_slots(id, n, &copies);
    ASSERT_EQ(st.is_ok(), can);
    if (!st.is_ok()) {
      ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
      ++refusals;
      s.tokens.resize(s.appended);
      s.content.resize(s.appended);
      // The blocks no step from `appended` on can read were released all the same.
      s.last_first = s.appended;
      s.last_n = 0;
      return;
    }
    apply(copies);
    s.last_first = s.appended;
    s.last_n = n;
    s.appended += n;
    commit(id, s, n);
  }

  void fork() {
    if (seqs_.empty() || seqs_.size() >= 10) return;
    auto it = seqs_.begin();
    std::advance(it, uniform(static_cast<uint32_t>(seqs_.size())));
    const SeqId child{next_++};
    ASSERT_TRUE(m_.fork(SeqId{it->first}, child).is_ok());
    Seq c = it->second;
    c.tokens.resize(c.appended);
    c.content.resize(c.appended);
    seqs_.emplace(child.value, std::move(c));
    ++forks;
  }

  // Swap-out then swap-in, as the scheduler does: copy the resident blocks aside, free, restore.
  void swap() {
    if (seqs_.empty()) return;
    auto it = seqs_.begin();
    std::advance(it, uniform(static_cast<uint32_t>(seqs_.size())));
    const SeqId id{it->first};
    Seq s = it->second;
    m_.release_out_of_window(id);
    std::vector<std::vector<uint64_t>> saved;
    for (uint32_t g = 0; g < groups(); ++g)
      for (BlockId b : m_.block_table(id, g))
        if (b.is_valid())
          saved.emplace_back(kv_[g].begin() + size_t{b.value} * bs_,
                             kv_[g].begin() + size_t{b.value + 1} * bs_);
    ASSERT_EQ(saved.size(), m_.resident_blocks(id).size());
    m_.free(id);
    seqs_.erase(it);
    const std::span<const int32_t> tokens(s.tokens.data(), s.committed);
    Result<std::vector<BlockId>> restored = m_.admit_restored(id, tokens, salts_[s.tenant]);
    if (!restored.is_ok()) {
      ASSERT_EQ(restored.status().code(), StatusCode::kResourceExhausted);
      ++refusals;
      return;  // dropped, as a swap that cannot come back would be recomputed
    }
    ASSERT_EQ(restored->size(), saved.size());
    // resident_blocks order: group by group, position order; the restored set covers at least
    // the window of the next step, so the saved blocks are the tail of each group's old set.
    size_t k = 0;
    for (uint32_t g = 0; g < groups(); ++g) {
      for (BlockId b : m_.block_table(id, g)) {
        if (!b.is_valid()) continue;
        std::copy(saved[k].begin(), saved[k].end(), kv_[g].begin() + size_t{b.value} * bs_);
        ++k;
      }
    }
    s.appended = s.committed;
    s.tokens.resize(s.committed);
    s.content.resize(s.committed);
    s.last_first = s.committed;
    s.last_n = 0;
    seqs_.emplace(id.value, std::move(s));
    ++swaps;
  }

  void free_one() {
    if (seqs_.empty()) return;
    auto it = seqs_.begin();
    std::advance(it, uniform(static_cast<uint32_t>(seqs_.size())));
    m_.free(SeqId{it->first});
    seqs_.erase(it);
  }

  KvCacheManager m_;
  KvCacheConfig cfg_;
  std::mt19937_64 rng_;
  uint32_t bs_;
  std::vector<std::vector<uint64_t>> kv_;  // [group][num_blocks * block_size]
  std::vector<std::vector<int32_t>> docs_;
  std::vector<std::string> salts_;
  std::map<uint64_t, Seq> seqs_;
  uint64_t next_ = 1;
};

// A sliding group's blocks released behind the window stay cached-free (keyed), so a shorter
// prompt sharing the prefix still gets a hit that needs them.
TEST(KvCacheGroups, ReleasedSlidingBlocksServeShorterPrompts) {
  KvCacheManager m({.num_blocks = 64, .block_size = 4, .group_windows = {0, 8}});
  std::vector<int32_t> a(40);
  for (int i = 0; i < 40; ++i) a[i] = 100 + i;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.admit(SeqId{1}, a, "", &copies, 8).is_ok());
  std::vector<BlockId> sliding_before;
  for (uint32_t done = 0; done < 40;) {
    const uint32_t n = m.num_tokens(SeqId{1}) - done;
    m.commit_tokens(SeqId{1}, std::span(a).subspan(done, n));
    done += n;
    if (done == 8) {
      sliding_before.assign(m.block_table(SeqId{1}, 1).begin(), m.block_table(SeqId{1}, 1).end());
    }
    if (done < 40) {
      ASSERT_TRUE(m.append_slots(SeqId{1}, 8, &copies).is_ok());
    }
  }
  // The last chunk [32, 40) reads from position 25 on: blocks 0..5 of the sliding group are gone.
  const auto table = m.block_table(SeqId{1}, 1);
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(table[i].is_valid()) << i;
  ASSERT_EQ(sliding_before.size(), 2u);
  EXPECT_EQ(m.block_state(sliding_before[1]), BlockState::kCachedFree);
  // B shares 20 tokens (21 with its own last one): a hit of 5 blocks (20 tokens) needs sliding
  // blocks 3 and 4 (positions from 20 - 8 + 1 = 13 on), both released by A and cached-free.
  std::vector<int32_t> b(a.begin(), a.begin() + 20);
  b.push_back(7);
  Result<uint32_t> hit = m.admit(SeqId{2}, b, "", &copies, 64);
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(*hit, 20u);
  EXPECT_FALSE(m.block_table(SeqId{2}, 1)[2].is_valid());
  EXPECT_TRUE(m.block_table(SeqId{2}, 1)[3].is_valid());
  EXPECT_TRUE(m.block_table(SeqId{2}, 1)[4].is_valid());
  EXPECT_TRUE(m.check_integrity().is_ok());
}

TEST(KvCacheGroupsRandom, OneFullTwoSlidingTightPool) {
  GroupHarness h({.num_blocks = 150, .block_size = 4, .group_windows = {0, 10, 10}}, 21, 2);
  h.run(20000);
  EXPECT_GT(h.hit_admits, 200u);
  EXPECT_GT(h.swaps, 200u);
  EXPECT_GT(h.forks, 200u);
  EXPECT_GT(h.refusals, 10u);
  EXPECT_GT(h.manager().stats().evictions, 100u);
}

TEST(KvCacheGroupsRandom, GemmaShapeRoomyPool) {
  // Gemma 3's grouping (one full group, five sliding), window smaller than a block multiple.
  GroupHarness h({.num_blocks = 2000, .block_size = 4, .group_windows = {0, 7, 7, 7, 7, 7}}, 22, 3);
  h.run(8000);
  EXPECT_GT(h.hit_admits, 200u);
  EXPECT_GT(h.swaps, 100u);
  // A 7-token window with blocks of 4 needs at most 2 blocks before a step plus its own.
  EXPECT_GE(h.max_sliding_held, 3u);
}

TEST(KvCacheGroupsRandom, TwoFullGroupsNoPrefixCaching) {
  GroupHarness h({.num_blocks = 150,
                  .block_size = 8,
                  .group_windows = {0, 0, 16},
                  .enable_prefix_caching = false},
                 23, 1);
  h.run(8000);
  EXPECT_EQ(h.hit_admits, 0u);
  EXPECT_GT(h.swaps, 100u);
}

}  // namespace
}  // namespace kvs
