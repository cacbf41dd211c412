// Views scoped to who asks (kv_view.h): a tenant sees its own sequences and blocks, every other
// tenant's blocks only as the anonymous "other" (no owner count, fill or hash), the other tenants'
// counters summed, and no hash at all; an admin sees the view as it is. Checked exactly, and on
// random views against a simple model.
#include <gtest/gtest.h>

#include <random>

#include "server/api_keys.h"
#include "server/kv_frame.h"
#include "server/kv_stream.h"
#include "server/kv_view.h"
#include "server/kv_view_json.h"
#include "server/metrics.h"

namespace kvs {
namespace {

KvView three_tenants() {
  KvView v;
  v.tenants = {{.id = 0, .cache_salt = cache_namespace("alice", ""), .blocks_held = 2},
               {.id = 1, .cache_salt = cache_namespace("bob", ""), .blocks_held = 1},
               {.id = 2, .cache_salt = cache_namespace("carol", "s"), .blocks_held = 1}};
  v.blocks = {
      {.state = BlockState::kInUse, .refcount = 2, .tenant = 0, .filled = 16, .tier_key = 11},
      {.state = BlockState::kCachedFree, .refcount = 0, .tenant = 0, .filled = 16, .tier_key = 12},
      {.state = BlockState::kInUse, .refcount = 3, .tenant = 1, .filled = 5, .tier_key = 13},
      {.state = BlockState::kFree},
      {.state = BlockState::kInUse, .refcount = 1, .tenant = 2, .filled = 7, .tier_key = 14}};
  v.sequences = {
      {.seq = 1,
       .request = 1,
       .cache_salt = cache_namespace("alice", ""),
       .tables = {{BlockId{0}, BlockId{1}}}},
      {.seq = 2, .request = 2, .cache_salt = cache_namespace("bob", ""), .tables = {{BlockId{2}}}},
      {.seq = 3,
       .request = 3,
       .cache_salt = cache_namespace("carol", "s"),
       .tables = {{BlockId{4}}}}};
  v.host_block_hashes = {21, 22};
  return v;
}

TEST(KvViewScopeTest, ATenantSeesItsOwnAndEveryoneElseAsOther) {
  const KvView v = three_tenants();
  const KvView bob = scoped_kv_view(v, {.tenant = "bob"});
  ASSERT_EQ(bob.sequences.size(), 1u);
  EXPECT_EQ(bob.sequences[0].seq, 2u);
  ASSERT_EQ(bob.tenants.size(), 2u);
  EXPECT_EQ(bob.tenants[0].cache_salt, cache_namespace("bob", ""));
  EXPECT_EQ(bob.tenants[1].id, kOtherTenantsSlot);
  EXPECT_EQ(bob.tenants[1].blocks_held, 3u);  // alice's 2 + carol's 1
  EXPECT_EQ(bob.blocks[2].tenant, 1u);
  EXPECT_EQ(bob.blocks[2].refcount, 3u);
  EXPECT_EQ(bob.blocks[2].filled, 5u);
  for (uint32_t b : {0u, 1u, 4u}) {
    EXPECT_EQ(bob.blocks[b].tenant, kOtherTenantsSlot) << b;
    EXPECT_EQ(bob.blocks[b].refcount, 1u) << b;
    EXPECT_EQ(bob.blocks[b].filled, 0u) << b;
    EXPECT_EQ(bob.blocks[b].state, v.blocks[b].state) << b;  // occupancy stays visible
  }
  for (const BlockInfo& b : bob.blocks) EXPECT_EQ(b.tier_key, 0u);
  EXPECT_TRUE(bob.host_block_hashes.empty());
  // The anonymous tenant of a keyless caller is nobody's keyed tenant.
  EXPECT_TRUE(scoped_kv_view(v, {.tenant = ""}).sequences.empty());
  // An admin sees the view itself.
  const KvView admin = scoped_kv_view(v, {.tenant = "", .admin = true});
  EXPECT_EQ(admin.sequences.size(), 3u);
  EXPECT_EQ(admin.blocks[0].tier_key, 11u);
}

TEST(KvViewScopeTest, TheJsonOfAScopedViewNamesNoOtherTenantAndNoHash) {
  const TenantLabeler labeler;
  const KvCacheGroups groups = KvCacheGroups::single(30);
  const KvView v = three_tenants();
  const std::string bob =
      kv_view_json(scoped_kv_view(v, {.tenant = "bob"}), groups, labeler, false).dump();
  EXPECT_EQ(bob.find("alice"), std::string::npos) << bob;
  EXPECT_EQ(bob.find("carol"), std::string::npos) << bob;
  EXPECT_NE(bob.find("\"other\""), std::string::npos) << bob;
  EXPECT_EQ(bob.find("block_hashes"), std::string::npos) << bob;
  const nlohmann::json j = nlohmann::json::parse(bob);
  for (const auto& b : j["blocks"]) EXPECT_TRUE(b["hash"].is_null()) << b;
  EXPECT_TRUE(j["blocks"][0]["owners"].is_null());
  EXPECT_TRUE(j["blocks"][0]["fill"].is_null());
  const nlohmann::json admin = kv_view_json(v, groups, labeler, true);
  EXPECT_EQ(admin["blocks"][0]["hash"], 11u);
  EXPECT_EQ(admin["sequences"].size(), 3u);
}

TEST(KvViewScopeTest, RandomViewsAgainstAModel) {
  std::mt19937 rng(5);
  const std::vector<std::string> names = {"a", "b", "c", ""};
  for (int round = 0; round < 200; ++round) {
    KvView v;
    const uint32_t nt = 1 + rng() % 4;
    for (uint32_t t = 0; t < nt; ++t)
      v.tenants.push_back(
          {.id = t * 3 + 1,
           .cache_salt = cache_namespace(names[rng() % names.size()], rng() % 2 ? "" : "salt"),
           .blocks_held = static_cast<uint32_t>(rng() % 9)});
    const uint32_t nb = 1 + rng() % 40;
    for (uint32_t b = 0; b < nb; ++b) {
      const auto& t = v.tenants[rng() % nt];
      v.blocks.push_back({.state = static_cast<BlockState>(rng() % 3),
                          .refcount = static_cast<uint32_t>(rng() % 4),
                          .tenant = t.id,
                          .filled = static_cast<uint32_t>(rng() % 17),
                          .tier_key = rng()});
    }
    for (uint64_t s = 0; s < rng() % 6; ++s)
      v.sequences.push_back({.seq = s, .cache_salt = v.tenants[rng() % nt].cache_salt});
    const std::string who = names[rng() % names.size()];
    const KvView got = scoped_kv_view(v, {.tenant = who});
    uint64_t others_held = 0;
    for (const auto& t : v.tenants)
      if (namespace_tenant(t.cache_salt) != who) others_held += t.blocks_held;
    for (const auto& t : got.tenants) {
      if (t.id == kOtherTenantsSlot) {
        EXPECT_EQ(t.blocks_held, others_held);
      } else {
        EXPECT_EQ(namespace_tenant(t.cache_salt), who);
      }
    }
    for (const auto& s : got.sequences) EXPECT_EQ(namespace_tenant(s.cache_salt), who);
    ASSERT_EQ(got.blocks.size(), v.blocks.size());
    for (size_t b = 0; b < v.blocks.size(); ++b) {
      EXPECT_EQ(got.blocks[b].state, v.blocks[b].state);
      EXPECT_EQ(got.blocks[b].tier_key, 0u);
      if (v.blocks[b].state == BlockState::kFree) continue;
      std::string_view owner;
      for (const auto& t : v.tenants)
        if (t.id == v.blocks[b].tenant) owner = namespace_tenant(t.cache_salt);
      if (owner == who) {
        EXPECT_EQ(got.blocks[b].tenant, v.blocks[b].tenant);
      } else {
        EXPECT_EQ(got.blocks[b].tenant, kOtherTenantsSlot);
      }
    }
  }
}

TEST(KvViewScopeTest, EachTenantsStreamIsEncodedFromItsOwnScope) {
  const TenantLabeler labeler;
  const KvView v = three_tenants();
  KvStreamHub hub(labeler,
                  {.take_view = [&] { return std::make_shared<const KvView>(v); },
                   .metrics_fields = [](const KvView&) { return std::string(); },
                   .config_fields = "\"config\":{}"},
                  {.max_subscribers = 4, .own_clock = false});
  auto admin = hub.subscribe({.tenant = "", .admin = true});
  auto bob = hub.subscribe({.tenant = "bob"});
  auto alice = hub.subscribe({.tenant = "alice"});
  hub.tick();
  std::vector<std::shared_ptr<const std::string>> a, b, c;
  ASSERT_TRUE(admin->wait(&a, std::chrono::milliseconds(0)));
  ASSERT_TRUE(bob->wait(&b, std::chrono::milliseconds(0)));
  ASSERT_TRUE(alice->wait(&c, std::chrono::milliseconds(0)));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(a[0]->find("alice"), std::string::npos);
  EXPECT_NE(a[0]->find("bob"), std::string::npos);
  EXPECT_EQ(b[0]->find("alice"), std::string::npos) << *b[0];
  EXPECT_NE(b[0]->find("\"other\""), std::string::npos) << *b[0];
  EXPECT_EQ(c[0]->find("bob"), std::string::npos) << *c[0];
  EXPECT_EQ(c[0]->find("carol"), std::string::npos) << *c[0];
}

}  // namespace
}  // namespace kvs
