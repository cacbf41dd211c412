// ApiKeys: tenants per key, the --api-keys file format, and cache namespaces that keep tenants
// and their salts apart.
#include "server/api_keys.h"

#include <gtest/gtest.h>

namespace kvs {
namespace {

TEST(ApiKeysTest, EachKeyMapsToItsTenant) {
  auto keys = ApiKeys::create({{"k-alice", "alice"}, {"k-bob", "bob"}, {"k-alice2", "alice"}});
  ASSERT_TRUE(keys.is_ok()) << keys.status().to_string();
  EXPECT_TRUE(keys->enabled());
  EXPECT_EQ(keys->tenant_of_header("Bearer k-alice"), "alice");
  EXPECT_EQ(keys->tenant_of_header("Bearer k-alice2"), "alice");
  EXPECT_EQ(keys->tenant_of_header("Bearer k-bob"), "bob");
  EXPECT_EQ(keys->tenant_of_header("Bearer k-bo"), std::nullopt);
  EXPECT_EQ(keys->tenant_of_header("Bearer k-bobb"), std::nullopt);
  EXPECT_EQ(keys->tenant_of_header("k-bob"), std::nullopt);
  EXPECT_EQ(keys->tenant_of_header(""), std::nullopt);
  EXPECT_EQ(keys->tenants(), (std::vector<std::string>{"alice", "bob"}));
  EXPECT_FALSE(ApiKeys().enabled());
}

TEST(ApiKeysTest, FlagKeysAreNumberedTenants) {
  const auto entries = ApiKeys::from_flags({"one", "two"});
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].tenant, "key-2");
}

TEST(ApiKeysTest, RejectsBadEntries) {
  EXPECT_FALSE(ApiKeys::create({{"same", "a"}, {"same", "b"}}).is_ok());
  EXPECT_FALSE(ApiKeys::create({{"has space", "a"}}).is_ok());
  EXPECT_FALSE(ApiKeys::create({{"", "a"}}).is_ok());
  EXPECT_FALSE(ApiKeys::create({{"k", "bad\x1fname"}}).is_ok());
  EXPECT_FALSE(ApiKeys::create({{"k", ""}}).is_ok());
}

TEST(ApiKeysTest, ParsesTheKeysFile) {
  auto e = ApiKeys::parse_file_text("# tenants\nalice sk-1\n\n  bob   sk-2  \r\nalice sk-3\n");
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  ASSERT_EQ(e->size(), 3u);
  EXPECT_EQ((*e)[1].tenant, "bob");
  EXPECT_EQ((*e)[1].key, "sk-2");
  const auto bad = ApiKeys::parse_file_text("alice sk-1\nbob\n");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
  EXPECT_FALSE(ApiKeys::parse_file_text("a b c\n").is_ok());
  EXPECT_FALSE(ApiKeys::parse_file_text("# nothing\n").is_ok());
  EXPECT_FALSE(ApiKeys::read_file("/nonexistent/keys").is_ok());
}

TEST(ApiKeysTest, CacheNamespacesNeverCollide) {
  EXPECT_EQ(cache_namespace("", "salt"), "salt");
  EXPECT_NE(cache_namespace("a", ""), cache_namespace("", "a"));
  EXPECT_NE(cache_namespace("a", "b"), cache_namespace("b", "a"));
  EXPECT_NE(cache_namespace("alice", ""), cache_namespace("bob", ""));
}

}  // namespace
}  // namespace kvs
