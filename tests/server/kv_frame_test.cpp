// The frames of /v1/kv/stream (kv_frame.h): a page that applies a key frame and then only deltas
// holds exactly what a fresh key frame of the latest view says, over long random runs; tenant
// labels never carry a salt; unchanged tables are not resent; every layer group's table and the
// group of each block travel.
#include "server/kv_frame.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "server/kv_delta.h"

namespace kvs {
namespace {

using nlohmann::json;

constexpr uint32_t kGroups = 3;  // a full group and two sliding ones

// What the page keeps (kv_state.js), rebuilt from frames.
struct PageModel {
  std::vector<uint32_t> cells, groups;
  struct Seq {
    uint64_t request = 0;
    uint32_t sample = 0, tokens = 0;
    std::string label;
    std::vector<std::vector<uint32_t>> tables;
    bool operator==(const Seq&) const = default;
  };
  std::map<uint64_t, Seq> seqs;
  std::map<uint32_t, std::string> tenants;
  json occ;

  void apply(const json& f, size_t num_blocks) {
    if (f["key"].get<bool>()) {
      cells.assign(num_blocks, 0);
      groups.assign(num_blocks, 0);
      seqs.clear();
      tenants.clear();
    }
    const auto runs = f["cells"].get<std::vector<uint32_t>>();
    ASSERT_TRUE(apply_cell_runs(runs, cells).is_ok());
    ASSERT_TRUE(apply_cell_runs(f["groups"].get<std::vector<uint32_t>>(), groups).is_ok());
    for (const json& t : f["tenants"]) tenants[t[0].get<uint32_t>()] = t[1].get<std::string>();
    for (const json& s : f["seqs"]) {
      Seq& q = seqs[s[0].get<uint64_t>()];
      q.request = s[1].get<uint64_t>();
      q.sample = s[2].get<uint32_t>();
      q.tokens = s[3].get<uint32_t>();
      q.label = s[4].get<std::string>();
      if (!s[5].is_null()) q.tables = s[5].get<std::vector<std::vector<uint32_t>>>();
    }
    for (const json& g : f["gone"]) seqs.erase(g.get<uint64_t>());
    occ = f["occ"];
  }
};

// A random but self-consistent-enough view: the encoder does not check engine invariants.
KvView random_view(std::mt19937& rng, uint32_t n, uint64_t* next_seq,
                   std::vector<KvViewSequence>* live) {
  KvView v;
  v.unix_ms = 1000;
  v.blocks.resize(n);
  const std::vector<std::string> salts = {"", "alice\x1f", "alice\x1fsecret-salt", "bob\x1f"};
  for (uint32_t i = 0; i < salts.size(); ++i)
    v.tenants.push_back({.id = i, .cache_salt = salts[i], .blocks_held = 1});
  for (uint32_t b = 0; b < n; ++b) {
    const uint32_t r = rng() % 5;
    BlockInfo& i = v.blocks[b];
    i.state = r == 0 ? BlockState::kFree : r == 1 ? BlockState::kCachedFree : BlockState::kInUse;
    i.refcount = i.state == BlockState::kInUse ? 1 + rng() % 3 : 0;
    i.tenant = rng() % 4;
    i.filled = rng() % 17;
    i.group = rng() % kGroups;
  }
  // Sequences come and go; survivors keep or grow their tables.
  std::vector<KvViewSequence> next;
  for (KvViewSequence& s : *live) {
    if (rng() % 6 == 0) continue;  // finished
    const uint32_t g = rng() % kGroups;
    if (rng() % 3 == 0) s.tables[g].push_back(BlockId{static_cast<uint32_t>(rng() % n)});
    // A sliding group releases its first held block.
    if (g > 0 && rng() % 4 == 0)
      for (auto& b : s.tables[g])
        if (b.is_valid()) {
          b = BlockId::invalid();
          break;
        }
    s.num_tokens += rng() % 3;
    next.push_back(s);
  }
  for (int k = static_cast<int>(rng() % 3); k > 0; --k) {
    KvViewSequence s{.seq = (*next_seq)++,
                     .sample = 0,
                     .num_tokens = static_cast<uint32_t>(1 + rng() % 40),
                     .cache_salt = salts[rng() % salts.size()]};
    s.request = s.seq;
    s.tables.resize(kGroups);
    for (auto& t : s.tables) {
      const uint32_t first = rng() % n;
      for (uint32_t b = 0; b < 1 + rng() % 6; ++b) t.push_back(BlockId{(first + b) % n});
    }
    next.push_back(s);
  }
  *live = next;
  v.sequences = next;
  v.engine.cache.blocks_free = static_cast<uint32_t>(rng() % n);
  v.engine.preemptions_recompute = rng() % 10;
  return v;
}

TEST(DashboardFrames, DeltasApplyToTheSameStateAsAFreshKeyFrame) {
  const TenantLabeler labeler;
  KvFrameEncoder encoder(labeler);
  std::mt19937 rng(11);
  const uint32_t n = 64;
  uint64_t next_seq = 1;
  std::vector<KvViewSequence> live;
  PageModel page;
  for (int step = 0; step < 300; ++step) {
    const KvView view = random_view(rng, n, &next_seq, &live);
    const KvFrames f = encoder.encode(view, /*want_key=*/true, "\"extra\":1", "\"config\":{}");
    const json delta = json::parse(f.delta), key = json::parse(f.key);
    EXPECT_EQ(delta["frame"], key["frame"]);
    EXPECT_FALSE(delta["key"].get<bool>());
    EXPECT_TRUE(key["key"].get<bool>());
    EXPECT_EQ(delta["extra"], 1);
    EXPECT_TRUE(key.contains("config"));
    EXPECT_FALSE(delta.contains("config"));
    if (step == 0) {
      page.apply(key, n);
    } else {
      page.apply(delta, n);
    }
    PageModel fresh;
    fresh.apply(key, n);
    ASSERT_EQ(page.cells, fresh.cells) << "step " << step;
    ASSERT_EQ(page.seqs, fresh.seqs) << "step " << step;
    for (const auto& [slot, label] : fresh.tenants) ASSERT_EQ(page.tenants[slot], label);
    ASSERT_EQ(page.occ, fresh.occ);
    ASSERT_EQ(page.seqs.size(), view.sequences.size());
    for (const KvViewSequence& s : view.sequences) {
      const auto& tables = page.seqs.at(s.seq).tables;
      ASSERT_EQ(tables.size(), kGroups);
      for (uint32_t g = 0; g < kGroups; ++g) {
        std::vector<uint32_t> ranges;
        block_ranges(s.tables[g], &ranges);
        ASSERT_EQ(tables[g], ranges);
      }
    }
    for (uint32_t b = 0; b < n; ++b) {
      const BlockInfo& i = view.blocks[b];
      ASSERT_EQ(page.cells[b], pack_cell(i.state, i.refcount, i.filled, i.tenant));
      ASSERT_EQ(page.groups[b], i.state == BlockState::kFree ? 0u : i.group);
    }
  }
}

TEST(DashboardFrames, LabelsNeverCarryASaltAndUnchangedTablesAreNotResent) {
  const TenantLabeler labeler;
  KvFrameEncoder encoder(labeler);
  KvView v;
  v.blocks.resize(8);
  v.blocks[2] = {.state = BlockState::kInUse, .refcount = 1, .tenant = 1, .filled = 3};
  v.tenants.push_back({.id = 1, .cache_salt = "alice\x1fsecret-salt"});
  v.sequences.push_back({.seq = 5,
                         .request = 5,
                         .num_tokens = 3,
                         .cache_salt = "alice\x1fsecret-salt",
                         .tables = {{BlockId{2}}}});
  const KvFrames first = encoder.encode(v, false, "", "");
  EXPECT_TRUE(first.key.empty());
  EXPECT_EQ(first.delta.find("secret"), std::string::npos) << first.delta;
  const json f1 = json::parse(first.delta);
  EXPECT_EQ(f1["tenants"][0][1], labeler.label("alice\x1fsecret-salt"));
  EXPECT_EQ(f1["seqs"][0][4], labeler.label("alice\x1fsecret-salt"));
  EXPECT_EQ(f1["seqs"][0][5], json::array({json::array({0, 2, 1})}));
  EXPECT_TRUE(f1["groups"].empty());  // one layer group: the plane stays zero
  EXPECT_EQ(f1["cells"], json::array({2, 1, pack_cell(CellState::kInUse, false, 3, 1)}));

  // One more token in the same block: the sequence is resent without its ranges, the cell's fill
  // changed, the tenant label is not resent.
  v.sequences[0].num_tokens = 4;
  v.blocks[2].filled = 4;
  const json f2 = json::parse(encoder.encode(v, false, "", "").delta);
  EXPECT_EQ(f2["seqs"][0][3], 4);
  EXPECT_TRUE(f2["seqs"][0][5].is_null());
  EXPECT_TRUE(f2["tenants"].empty());
  EXPECT_EQ(f2["cells"], json::array({2, 1, pack_cell(CellState::kInUse, false, 4, 1)}));

  // Nothing changed: an empty delta (the counters still come).
  const json f3 = json::parse(encoder.encode(v, false, "", "").delta);
  EXPECT_TRUE(f3["cells"].empty());
  EXPECT_TRUE(f3["seqs"].empty());
  EXPECT_TRUE(f3.contains("occ"));

  // The sequence finished and its block went cached-free.
  v.sequences.clear();
  v.blocks[2] = {.state = BlockState::kCachedFree, .refcount = 0, .tenant = 1, .filled = 16};
  const json f4 = json::parse(encoder.encode(v, false, "", "").delta);
  EXPECT_EQ(f4["gone"], json::array({5}));
  EXPECT_EQ(encoder.frames(), 4u);
}

}  // namespace
}  // namespace kvs
