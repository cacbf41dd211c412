// PrefixCache (the prefix index) against a plain model: random full blocks are cached and erased
// under a few keys (so that key collisions are common), several tenants, and parents that are
// live, stale (their block was erased and maybe reused) or the root. After every operation each
// lookup must equal the model's: find() returns the one entry matching key, parent (id and
// generation), tenant and tokens, or none; find_partial() returns a child sharing the longest
// prefix. The integrity check must pass throughout.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <vector>

#include "kvcache/prefix_cache.h"

namespace kvs {
namespace {

constexpr uint32_t kBs = 4;
constexpr uint32_t kBlocks = 24;  // below kMaxPartialCandidates: partial lookups see every child

struct Entry {
  bool cached = false;
  uint64_t key = 0;
  uint64_t parent_key = 0;
  BlockRef parent;
  uint32_t tenant = 0;
  std::vector<int32_t> tokens;
};

uint32_t shared_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                       uint32_t limit) {
  uint32_t p = 0;
  while (p < limit && a[p] == b[p]) ++p;
  return p;
}

TEST(PrefixCache, RandomInsertEraseLookupMatchTheModel) {
  for (uint64_t seed = 1; seed <= 25; ++seed) {
    std::mt19937_64 rng(seed);
    PrefixCache cache(kBlocks, kBs);
    std::vector<Entry> model(kBlocks);
    std::vector<uint32_t> generation(kBlocks, 0);
    // Refs seen so far (live or stale), to be used as parents.
    std::vector<BlockRef> refs = {BlockRef{}};
    auto random_tokens = [&] {
      std::vector<int32_t> t(kBs);
      for (int32_t& x : t) x = static_cast<int32_t>(rng() % 3);  // few values: shared prefixes
      return t;
    };
    auto random_query = [&] {
      const BlockRef parent = refs[rng() % refs.size()];
      return std::make_tuple(uint64_t{rng() % 5}, parent,
                             TenantId{static_cast<uint32_t>(rng() % 2)}, random_tokens());
    };
    auto model_find = [&](uint64_t key, BlockRef parent, TenantId t,
                          const std::vector<int32_t>& tokens) -> std::optional<BlockId> {
      for (uint32_t b = 0; b < kBlocks; ++b) {
        const Entry& e = model[b];
        if (e.cached && e.key == key && e.parent == parent && e.tenant == t.value &&
            e.tokens == tokens)
          return BlockId{b};
      }
      return std::nullopt;
    };
    for (int op = 0; op < 3000; ++op) {
      const BlockId b{static_cast<uint32_t>(rng() % kBlocks)};
      if (!model[b.value].cached) {
        auto [key, parent, tenant, tokens] = random_query();
        const uint64_t parent_key = rng() % 3;
        const std::optional<BlockId> want = model_find(key, parent, tenant, tokens);
        const std::optional<BlockId> got = cache.insert(b, key, parent_key, parent, tenant, tokens);
        ASSERT_EQ(got, want) << "seed " << seed << " op " << op;
        if (!got) {
          model[b.value] = {true, key, parent_key, parent, tenant.value, tokens};
          refs.push_back(BlockRef{b, generation[b.value]});
        }
      } else {
        cache.erase(b);
        model[b.value].cached = false;
        ++generation[b.value];
      }
      // Lookups: exact, then partial.
      for (int q = 0; q < 4; ++q) {
        auto [key, parent, tenant, tokens] = random_query();
        ASSERT_EQ(cache.find(key, parent, tenant, tokens), model_find(key, parent, tenant, tokens))
            << "seed " << seed << " op " << op;
        const uint64_t parent_key = rng() % 3;
        const uint32_t max_tokens = 1 + static_cast<uint32_t>(rng() % kBs);
        uint32_t best = 0;
        for (const Entry& e : model) {
          if (e.cached && e.parent_key == parent_key && e.parent == parent &&
              e.tenant == tenant.value && e.tokens[0] == tokens[0])
            best = std::max(best, shared_prefix(e.tokens, tokens, max_tokens));
        }
        const std::optional<PrefixCache::PartialMatch> pm =
            cache.find_partial(parent_key, parent, tenant, tokens, max_tokens);
        ASSERT_EQ(pm ? pm->num_tokens : 0u, best) << "seed " << seed << " op " << op;
        if (pm) {
          const Entry& e = model[pm->block.value];
          ASSERT_TRUE(e.cached && e.parent == parent && e.tenant == tenant.value);
          ASSERT_EQ(shared_prefix(e.tokens, tokens, max_tokens), best);
        }
      }
      ASSERT_EQ(cache.size(),
                static_cast<uint32_t>(std::count_if(model.begin(), model.end(),
                                                    [](const Entry& e) { return e.cached; })));
      for (uint32_t i = 0; i < kBlocks; ++i) {
        ASSERT_EQ(cache.contains(BlockId{i}), model[i].cached);
        if (model[i].cached) {
          ASSERT_EQ(cache.ref(BlockId{i}).generation, generation[i]);
        }
      }
      const Status st = cache.check_integrity();
      ASSERT_TRUE(st.is_ok()) << "seed " << seed << " op " << op << ": " << st.message();
    }
  }
}

}  // namespace
}  // namespace kvs
