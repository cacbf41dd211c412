// ApiKeys: who may call the server, which tenant each key belongs to, and who is an admin.
//
// A tenant is a namespace of the prefix cache and of every tier under it: requests of one tenant
// can reuse each other's cached KV, requests of different tenants never do (not even the length
// of a shared prefix can be observed across tenants), on this server or through a shared Redis.
// A tenant is an identity, never a position in a list:
//   --api-keys FILE        one "TENANT KEY [admin]" line per key (# comments, blank lines
//                          allowed): the tenant is the name. Several keys may name the same
//                          tenant (key rotation: removing one key leaves the tenant as it was).
//                          "admin" keys see every tenant in /v1/kv, its stream and /metrics.
//   --api-key KEY          (repeatable) a key whose tenant is derived from the key itself through
//                          the server secret: "key:" + 16 hex digits of a keyed hash. The same key
//                          under the same secret is the same tenant on every replica; a key of
//                          another server (another secret) or another key never is.
// Tenant names are 1-64 characters of [A-Za-z0-9._-], so a name never equals a derived identity
// (those contain ':'), and never contains the separator of cache_namespace. Keys are 1-512
// printable ASCII characters without spaces. A key appears once.
//
// Without keys, every request is the anonymous tenant "" (and sees everything: a keyless server
// trusts whoever can reach it). The anonymous tenant is never a keyed tenant: see
// cache_namespace.
//
// Matching a presented key takes the same time whatever its bytes: each configured key is
// compared through a keyed hash (SipHash, per-process key), every entry is visited, and the
// comparison does not stop at the first differing byte.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/server_secret.h"
#include "core/siphash.h"
#include "core/status.h"

namespace kvs {

struct ApiKeyEntry {
  std::string key;
  std::string tenant;
  bool admin = false;
};

// Who sent a request: its tenant identity ("" = anonymous) and whether it may see all tenants.
struct Caller {
  std::string tenant;
  bool admin = false;
};

class ApiKeys {
 public:
  ApiKeys() = default;  // no keys: every request is accepted, all in tenant ""
  static Result<ApiKeys> create(std::vector<ApiKeyEntry> entries);
  // Entries for repeated --api-key flags: each key's tenant is derived from the key through the
  // secret (the header comment).
  static std::vector<ApiKeyEntry> from_flags(const std::vector<std::string>& keys,
                                             const ServerSecret& secret);
  // The tenant identity of a bare key under a secret.
  [[nodiscard]] static std::string derived_tenant(std::string_view key, const ServerSecret& secret);
  // Parses an --api-keys file; errors name the line.
  static Result<std::vector<ApiKeyEntry>> parse_file_text(std::string_view text);
  static Result<std::vector<ApiKeyEntry>> read_file(const std::string& path);

  [[nodiscard]] bool enabled() const { return !entries_.empty(); }
  // The caller of an "Authorization: Bearer KEY" header value; nullopt when no key matches.
  [[nodiscard]] std::optional<Caller> caller_of_header(std::string_view authorization) const;
  // The distinct tenant names, in first-seen order.
  [[nodiscard]] std::vector<std::string> tenants() const;

  [[nodiscard]] static bool valid_tenant_name(std::string_view name);

 private:
  struct Entry {
    uint64_t mac = 0;  // siphash24(mac_key_, key)
    std::string key;
    std::string tenant;
    bool admin = false;
  };
  SipKey mac_key_;
  std::vector<Entry> entries_;
};

// The engine's prefix-cache namespace of a request, "<tenant>\x1f<cache_salt>": the tenant's
// identity ("" for the anonymous one) and the client's cache_salt, which narrows its own tenant
// and never names another. Tenant identities never contain \x1f and keyed ones are never empty,
// so two different pairs never give the same namespace: no salt a keyless client sends can
// reach a keyed tenant's KV.
[[nodiscard]] std::string cache_namespace(std::string_view tenant, std::string_view cache_salt);
// The tenant part of a namespace ("" for the anonymous tenant).
[[nodiscard]] std::string_view namespace_tenant(std::string_view cache_namespace);

}  // namespace kvs
