// ApiKeys: tenants per key (named in the keys file, or derived from a bare key through the server
// secret, never numbered by position), admins, the --api-keys file format, and cache namespaces
// that keep tenants, the anonymous tenant and their salts apart.
#include "server/api_keys.h"

#include <gtest/gtest.h>

namespace kvs {
namespace {

std::optional<std::string> tenant_of(const ApiKeys& keys, std::string_view header) {
  const std::optional<Caller> c = keys.caller_of_header(header);
  if (!c) return std::nullopt;
  return c->tenant;
}

TEST(ApiKeysTest, EachKeyMapsToItsTenant) {
  auto keys = ApiKeys::create({{"k-alice", "alice"}, {"k-bob", "bob"}, {"k-alice2", "alice"}});
  ASSERT_TRUE(keys.is_ok()) << keys.status().to_string();
  EXPECT_TRUE(keys->enabled());
  EXPECT_EQ(tenant_of(*keys, "Bearer k-alice"), "alice");
  EXPECT_EQ(tenant_of(*keys, "Bearer k-alice2"), "alice");
  EXPECT_EQ(tenant_of(*keys, "Bearer k-bob"), "bob");
  EXPECT_EQ(tenant_of(*keys, "Bearer k-bo"), std::nullopt);
  EXPECT_EQ(tenant_of(*keys, "Bearer k-bobb"), std::nullopt);
  EXPECT_EQ(tenant_of(*keys, "k-bob"), std::nullopt);
  EXPECT_EQ(tenant_of(*keys, ""), std::nullopt);
  EXPECT_EQ(keys->tenants(), (std::vector<std::string>{"alice", "bob"}));
  EXPECT_FALSE(keys->caller_of_header("Bearer k-bob")->admin);
  EXPECT_FALSE(ApiKeys().enabled());
}

TEST(ApiKeysTest, ABareKeysTenantComesFromTheKeyAndTheSecretNeverItsPosition) {
  const ServerSecret s1 = ServerSecret::random(), s2 = ServerSecret::random();
  const auto a = ApiKeys::from_flags({"alice-secret", "bob-secret"}, s1);
  const auto b = ApiKeys::from_flags({"bob-secret"}, s1);
  ASSERT_EQ(a.size(), 2u);
  // The first key of two servers is not the same tenant; the same key is, under one secret.
  EXPECT_NE(a[0].tenant, b[0].tenant);
  EXPECT_EQ(a[1].tenant, b[0].tenant);
  // Under another secret the same key is another tenant: nothing shared across secrets.
  EXPECT_NE(ApiKeys::from_flags({"bob-secret"}, s2)[0].tenant, b[0].tenant);
  // A derived identity is never a name a keys file can give (it holds ':').
  EXPECT_EQ(a[0].tenant.rfind("key:", 0), 0u);
  EXPECT_EQ(a[0].tenant.size(), 4u + 16u);
  EXPECT_FALSE(ApiKeys::valid_tenant_name(a[0].tenant));
  // Key rotation: with two keys of one named tenant, dropping either leaves the tenant.
  auto both = ApiKeys::create({{"old", "team"}, {"new", "team"}});
  auto rotated = ApiKeys::create({{"new", "team"}});
  EXPECT_EQ(tenant_of(*both, "Bearer new"), tenant_of(*rotated, "Bearer new"));
}

TEST(ApiKeysTest, RejectsBadEntries) {
  EXPECT_FALSE(ApiKeys::create({{"same", "a"}, {"same", "b"}}).is_ok());
  EXPECT_FALSE(ApiKeys::create({{"has space", "a"}}).is_ok());
  EXPECT_FALSE(ApiKeys::create({{"", "a"}}).is_ok());
  EXPECT_FALSE(ApiKeys::create({{"k", "bad\x1fname"}}).is_ok());
  EXPECT_FALSE(ApiKeys::create({{"k", ""}}).is_ok());
}

TEST(ApiKeysTest, ParsesTheKeysFileWithAdmins) {
  auto e = ApiKeys::parse_file_text(
      "# tenants\nalice sk-1\n\n  bob   sk-2  \r\nalice sk-3\nops sk-4 admin\n");
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  ASSERT_EQ(e->size(), 4u);
  EXPECT_EQ((*e)[1].tenant, "bob");
  EXPECT_EQ((*e)[1].key, "sk-2");
  EXPECT_FALSE((*e)[1].admin);
  EXPECT_TRUE((*e)[3].admin);
  auto keys = ApiKeys::create(*e);
  ASSERT_TRUE(keys.is_ok());
  EXPECT_TRUE(keys->caller_of_header("Bearer sk-4")->admin);
  EXPECT_FALSE(keys->caller_of_header("Bearer sk-1")->admin);
  const auto bad = ApiKeys::parse_file_text("alice sk-1\nbob\n");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
  EXPECT_FALSE(ApiKeys::parse_file_text("a b c\n").is_ok());  // only "admin" may follow
  EXPECT_FALSE(ApiKeys::parse_file_text("a b admin x\n").is_ok());
  EXPECT_FALSE(ApiKeys::parse_file_text("# nothing\n").is_ok());
  EXPECT_FALSE(ApiKeys::read_file("/nonexistent/keys").is_ok());
}

TEST(ApiKeysTest, CacheNamespacesNeverCollide) {
  EXPECT_NE(cache_namespace("a", ""), cache_namespace("", "a"));
  EXPECT_NE(cache_namespace("a", "b"), cache_namespace("b", "a"));
  EXPECT_NE(cache_namespace("alice", ""), cache_namespace("bob", ""));
  // No salt of the anonymous tenant reaches a keyed tenant's namespace (the old attack: a
  // keyless client sending cache_salt "key-1\x1f").
  const std::string keyed = cache_namespace("key:0123456789abcdef", "");
  EXPECT_NE(cache_namespace("", "key:0123456789abcdef\x1f"), keyed);
  EXPECT_NE(cache_namespace("", "key:0123456789abcdef"), keyed);
  EXPECT_EQ(namespace_tenant(keyed), "key:0123456789abcdef");
  EXPECT_EQ(namespace_tenant(cache_namespace("", "key:0123456789abcdef\x1f")), "");
}

}  // namespace
}  // namespace kvs
