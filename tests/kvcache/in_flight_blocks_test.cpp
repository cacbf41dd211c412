// InFlightBlocks against a plain model: random sequences register prompt chains (often sharing
// keys), commit blocks in chain order, and leave; after every operation the registry's answers
// must equal the model's and the integrity check must pass. Then each invariant is broken once.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "kvcache/in_flight_blocks.h"

namespace kvs {
namespace {

// The model: key -> owner, and per sequence its owned keys in chain order.
struct Model {
  std::map<uint64_t, uint64_t> owner;
  std::map<uint64_t, std::vector<uint64_t>> pending;
};

TEST(InFlightBlocks, FirstRegistrantOwnsAndCommitsReleaseInChainOrder) {
  InFlightBlocks f;
  const std::vector<uint64_t> chain = {11, 12, 13};
  f.register_chain(SeqId{1}, chain);
  f.register_chain(SeqId{2}, std::vector<uint64_t>{12, 13, 14});  // 12 and 13 are taken
  EXPECT_EQ(f.size(), 4u);
  EXPECT_EQ(std::vector<uint64_t>(f.pending(SeqId{2}).begin(), f.pending(SeqId{2}).end()),
            std::vector<uint64_t>{14});
  // Committing out of chain order releases nothing; sequence 2 committing 12 neither (not its).
  f.on_committed(SeqId{1}, 12);
  f.on_committed(SeqId{2}, 12);
  EXPECT_TRUE(f.contains(12));
  f.on_committed(SeqId{1}, 11);
  f.on_committed(SeqId{1}, 12);
  EXPECT_FALSE(f.contains(11));
  EXPECT_FALSE(f.contains(12));
  // Sequence 1 leaves: its last key goes; sequence 2's stays.
  f.drop(SeqId{1});
  EXPECT_FALSE(f.contains(13));
  EXPECT_TRUE(f.contains(14));
  const std::vector<SeqId> live = {SeqId{2}};
  EXPECT_TRUE(f.check_integrity(live).is_ok());
  f.drop(SeqId{2});
  EXPECT_TRUE(f.empty());
  EXPECT_TRUE(f.check_integrity({}).is_ok());
}

TEST(InFlightBlocks, RandomRegisterCommitDropMatchTheModel) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed);
    InFlightBlocks f;
    Model m;
    std::map<uint64_t, std::vector<uint64_t>> chains;  // live sequences' full chains
    uint64_t next_seq = 1;
    for (int op = 0; op < 1500; ++op) {
      const uint32_t kind = rng() % 3;
      if (kind == 0 || chains.empty()) {
        // A prompt of 0..5 new blocks along one of a few shared chains, from a random depth.
        const uint64_t seq = next_seq++;
        const uint64_t base = 1000 * (1 + rng() % 3);
        const uint64_t from = rng() % 4;
        const uint64_t len = rng() % 6;
        std::vector<uint64_t> keys;
        for (uint64_t i = from; i < from + len; ++i) keys.push_back(base + i);
        f.register_chain(SeqId{seq}, keys);
        chains[seq] = keys;
        for (uint64_t k : keys) {
          if (m.owner.emplace(k, seq).second) m.pending[seq].push_back(k);
        }
      } else {
        auto it = chains.begin();
        std::advance(it, static_cast<long>(rng() % chains.size()));
        const uint64_t seq = it->first;
        if (kind == 1 && !it->second.empty()) {
          // The next block of its chain is committed.
          const uint64_t k = it->second.front();
          it->second.erase(it->second.begin());
          f.on_committed(SeqId{seq}, k);
          std::vector<uint64_t>& p = m.pending[seq];
          if (!p.empty() && p.front() == k) {
            m.owner.erase(k);
            p.erase(p.begin());
          }
        } else {
          f.drop(SeqId{seq});
          for (uint64_t k : m.pending[seq]) m.owner.erase(k);
          m.pending.erase(seq);
          chains.erase(it);
        }
      }
      ASSERT_EQ(f.size(), m.owner.size()) << "seed " << seed << " op " << op;
      for (uint64_t k = 1000; k < 4010; ++k) ASSERT_EQ(f.contains(k), m.owner.contains(k));
      std::vector<SeqId> live;
      for (const auto& [seq, chain] : chains) {
        live.push_back(SeqId{seq});
        const std::span<const uint64_t> p = f.pending(SeqId{seq});
        const std::vector<uint64_t>& want = m.pending[seq];
        ASSERT_EQ(std::vector<uint64_t>(p.begin(), p.end()), want);
      }
      const Status st = f.check_integrity(live);
      ASSERT_TRUE(st.is_ok()) << "seed " << seed << " op " << op << ": " << st.message();
    }
  }
}

TEST(InFlightBlocks, IntegrityNamesEachBrokenInvariant) {
  InFlightBlocks f;
  f.register_chain(SeqId{1}, std::vector<uint64_t>{5, 6});
  // The owner is not a live sequence any more (freed without drop).
  Status st = f.check_integrity({});
  EXPECT_NE(st.message().find("the sequence is gone"), std::string::npos) << st.message();
  const std::vector<SeqId> live = {SeqId{1}};
  EXPECT_TRUE(f.check_integrity(live).is_ok());
}

}  // namespace
}  // namespace kvs
