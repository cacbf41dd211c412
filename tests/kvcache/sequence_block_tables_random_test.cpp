// SequenceBlockTables against a plain model: random sequences grow, commit, release the blocks
// before their sliding window, fork and leave; after every operation the tables' queries, the
// step inputs of a random batch and the reference counts must equal what the model says, and
// the integrity check must pass. Then each invariant is broken once and must be named.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "kvcache/kv_cache_groups.h"
#include "kvcache/sequence_block_tables.h"

namespace kvs {
namespace {

constexpr uint32_t kBs = 4;
constexpr uint32_t kNumBlocks = 100000;  // ids are never reused here: a fresh id per block
const std::vector<uint32_t> kWindows = {0, 9};

struct ModelSeq {
  std::vector<std::vector<int64_t>> blocks;  // [group][position]: id, or -1 released
  uint32_t tokens = 0, committed = 0;
};

class Harness {
 public:
  explicit Harness(uint64_t seed) : rng_(seed), tables_(kBs, kWindows) {}

  void step() {
    const int op = pick(0, 9);
    if (model_.empty() || op == 0) return add();
    const uint64_t id = any_seq();
    if (op <= 5) return grow(id);
    if (op <= 7) return commit(id);
    if (op == 8) return fork(id);
    tables_.erase(SeqId{id});
    model_.erase(id);
  }

  void verify() {
    ASSERT_EQ(tables_.size(), model_.size());
    std::vector<uint32_t> refs(kNumBlocks, 0), expect_refs(kNumBlocks, 0);
    ASSERT_TRUE(tables_.check_integrity(kNumBlocks, &refs).is_ok())
        << tables_.check_integrity(kNumBlocks, nullptr).to_string();
    for (const auto& [id, m] : model_) {
      const SeqId s{id};
      ASSERT_EQ(tables_.num_tokens(s), m.tokens);
      ASSERT_EQ(tables_.num_committed(s), m.committed);
      std::vector<BlockId> resident;
      for (uint32_t g = 0; g < kWindows.size(); ++g) {
        const std::span<const BlockId> t = tables_.block_table(s, g);
        ASSERT_EQ(t.size(), m.blocks[g].size());
        for (size_t j = 0; j < t.size(); ++j) {
          ASSERT_EQ(t[j].is_valid(), m.blocks[g][j] >= 0);
          if (m.blocks[g][j] < 0) continue;
          ASSERT_EQ(t[j].value, m.blocks[g][j]);
          resident.push_back(t[j]);
          ++expect_refs[m.blocks[g][j]];
        }
      }
      ASSERT_EQ(tables_.resident_blocks(s), resident);
      for (uint32_t pos = 0; pos < m.tokens; ++pos)
        ASSERT_EQ(tables_.slot(s, pos), m.blocks[0][pos / kBs] * kBs + pos % kBs);
    }
    ASSERT_EQ(refs, expect_refs);
    verify_step_inputs();
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  uint64_t any_seq() {
    auto it = model_.begin();
    std::advance(it, pick(0, static_cast<int>(model_.size()) - 1));
    return it->first;
  }

  void add() {
    const uint64_t id = next_seq_++;
    tables_.insert(SeqId{id}, SeqBlocks(TenantId{0}, kBs, static_cast<uint32_t>(kWindows.size())));
    model_[id].blocks.resize(kWindows.size());
  }

  // Appends n slots in every group, then releases what a step from the new end cannot read.
  void grow(uint64_t id) {
    const uint32_t n = static_cast<uint32_t>(pick(1, 11));
    SeqBlocks& s = tables_.at(SeqId{id});
    ModelSeq& m = model_[id];
    for (uint32_t g = 0; g < kWindows.size(); ++g) {
      BlockTable& t = s.tables[g];
      for (uint32_t k = t.blocks_to_add(n); k > 0; --k) {
        const uint32_t b = next_block_++;
        t.push_block(BlockId{b});
        m.blocks[g].push_back(b);
      }
      t.add_tokens(n);
    }
    m.tokens += n;
    for (uint32_t g = 0; g < kWindows.size(); ++g) {
      if (kWindows[g] == 0) continue;
      const uint32_t first = first_held_block(kWindows[g], m.tokens, kBs);
      for (uint32_t j = 0; j < first && j < m.blocks[g].size(); ++j) {
        if (m.blocks[g][j] < 0) continue;
        s.tables[g].set_block(j, BlockId::invalid());
        m.blocks[g][j] = -1;
      }
    }
  }

  void commit(uint64_t id) {
    SeqBlocks& s = tables_.at(SeqId{id});
    ModelSeq& m = model_[id];
    while (m.committed < m.tokens) {
      ++m.committed;
      if (m.committed % kBs == 0)
        s.partial_tokens.clear();
      else
        s.partial_tokens.push_back(static_cast<int32_t>(m.committed));
    }
    s.num_committed = m.committed;
  }

  void fork(uint64_t id) {
    const uint64_t child = next_seq_++;
    tables_.insert(SeqId{child}, tables_.at(SeqId{id}));
    model_[child] = model_[id];
  }

  // A random batch of rows (each: a suffix of its appended slots) against a plain computation.
  void verify_step_inputs() {
    std::vector<StepRow> rows;
    for (const auto& [id, m] : model_) {
      if (m.tokens == 0 || pick(0, 2) == 0) continue;
      const uint32_t n = static_cast<uint32_t>(pick(1, static_cast<int>(std::min(m.tokens, 8u))));
      rows.push_back({.seq = SeqId{id}, .first_pos = m.tokens - n, .num_tokens = n});
    }
    StepInputs in;
    tables_.build_step_inputs(rows, &in);
    uint32_t max_blocks = 0, tokens = 0;
    for (const StepRow& r : rows) {
      max_blocks = std::max(max_blocks, (r.first_pos + r.num_tokens + kBs - 1) / kBs);
      tokens += r.num_tokens;
    }
    ASSERT_EQ(in.num_tokens, tokens);
    ASSERT_EQ(in.max_blocks_per_seq, max_blocks);
    for (uint32_t g = 0; g < kWindows.size(); ++g) {
      size_t k = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        const ModelSeq& m = model_.at(rows[i].seq.value);
        ASSERT_EQ(in.context_lens[i], rows[i].first_pos + rows[i].num_tokens);
        for (uint32_t j = 0; j < max_blocks; ++j) {
          const bool used = j < (in.context_lens[i] + kBs - 1) / kBs;
          const int64_t want = used && m.blocks[g][j] >= 0 ? m.blocks[g][j] : 0;
          ASSERT_EQ(in.table(g, i)[j], want) << "group " << g << " row " << i << " block " << j;
        }
        for (uint32_t p = rows[i].first_pos; p < rows[i].first_pos + rows[i].num_tokens; ++p)
          ASSERT_EQ(in.slots(g)[k++], m.blocks[g][p / kBs] * kBs + p % kBs);
      }
    }
  }

  std::mt19937_64 rng_;
  SequenceBlockTables tables_;
  std::map<uint64_t, ModelSeq> model_;
  uint64_t next_seq_ = 1;
  uint32_t next_block_ = 0;
};

TEST(SequenceBlockTablesRandomTest, QueriesAndStepInputsMatchAPlainModel) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Harness h(seed);
    for (int i = 0; i < 300; ++i) {
      h.step();
      h.verify();
      if (testing::Test::HasFatalFailure()) {
        ADD_FAILURE() << "seed " << seed << ", operation " << i;
        return;
      }
    }
  }
}

// One sequence of 3 blocks in both groups; `corrupt` breaks it; the check must name the fault.
void expect_broken(void (*corrupt)(SeqBlocks&), const std::string& fault) {
  SequenceBlockTables t(kBs, kWindows);
  SeqBlocks s(TenantId{0}, kBs, 2);
  uint32_t next = 0;
  for (BlockTable& table : s.tables) {
    for (int i = 0; i < 3; ++i) table.push_block(BlockId{next++});
    table.add_tokens(10);
  }
  s.num_committed = 10;
  s.partial_tokens = {1, 2};
  corrupt(s);
  t.insert(SeqId{7}, s);
  const Status st = t.check_integrity(kNumBlocks, nullptr);
  ASSERT_FALSE(st.is_ok()) << fault;
  EXPECT_NE(st.message().find(fault), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("sequence 7"), std::string::npos) << st.to_string();
}

TEST(SequenceBlockTablesTest, EachBrokenInvariantIsNamed) {
  expect_broken([](SeqBlocks& s) { s.num_committed = 11; }, "more tokens committed");
  expect_broken([](SeqBlocks& s) { s.partial_tokens.push_back(3); }, "staged token ids");
  expect_broken([](SeqBlocks& s) { s.tables[1].add_tokens(1); }, "token count differs");
  expect_broken([](SeqBlocks& s) { s.tables[0].set_block(0, BlockId::invalid()); },
                "a full group released a block");
  expect_broken([](SeqBlocks& s) { s.tables[1].set_block(1, BlockId::invalid()); },
                "a released block after a held one");
  // Window 9 at 10 tokens: the next step reads positions from 2 on, block 0 included.
  expect_broken([](SeqBlocks& s) { s.tables[1].set_block(0, BlockId::invalid()); },
                "inside the window");
  expect_broken([](SeqBlocks& s) { s.tables[0].set_block(2, BlockId{kNumBlocks}); },
                "invalid block id");
}

}  // namespace
}  // namespace kvs
