// ApiKeys: who may call the server, and which tenant each key belongs to.
//
// A tenant is a namespace of the prefix cache: requests of one tenant can reuse each other's
// cached KV, requests of different tenants never do (not even the length of a shared prefix can
// be observed across tenants). Each API key belongs to one tenant; a request's optional
// `cache_salt` partitions further inside its tenant.
//   --api-key KEY          (repeatable) key i is tenant "key-i" (1-based, in flag order)
//   --api-keys FILE        one "TENANT KEY" pair per line (# comments, blank lines allowed);
//                          several keys may name the same tenant (key rotation)
// Tenant names are 1-64 characters of [A-Za-z0-9._-]; keys are 1-512 printable ASCII
// characters without spaces. A key appears once.
//
// Matching a presented key takes the same time whatever its bytes: each configured key is
// compared through a keyed hash (SipHash, per-process key), every entry is visited, and the
// comparison does not stop at the first differing byte.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/siphash.h"
#include "core/status.h"

namespace kvs {

struct ApiKeyEntry {
  std::string key;
  std::string tenant;
};

class ApiKeys {
 public:
  ApiKeys() = default;  // no keys: every request is accepted, all in tenant ""
  static Result<ApiKeys> create(std::vector<ApiKeyEntry> entries);
  // Entries for repeated --api-key flags: tenants "key-1", "key-2", ...
  static std::vector<ApiKeyEntry> from_flags(const std::vector<std::string>& keys);
  // Parses an --api-keys file; errors name the line.
  static Result<std::vector<ApiKeyEntry>> parse_file_text(std::string_view text);
  static Result<std::vector<ApiKeyEntry>> read_file(const std::string& path);

  [[nodiscard]] bool enabled() const { return !entries_.empty(); }
  // The tenant of an "Authorization: Bearer KEY" header value; nullopt when no key matches.
  [[nodiscard]] std::optional<std::string> tenant_of_header(std::string_view authorization) const;
  // The distinct tenant names, in first-seen order.
  [[nodiscard]] std::vector<std::string> tenants() const;

  [[nodiscard]] static bool valid_tenant_name(std::string_view name);

 private:
  struct Entry {
    uint64_t mac = 0;  // siphash24(mac_key_, key)
    std::string key;
    std::string tenant;
  };
  SipKey mac_key_;
  std::vector<Entry> entries_;
};

// The engine's prefix-cache namespace of a request: its tenant and its cache_salt. Without
// tenants (no API keys) it is the cache_salt itself. With one, "<tenant>\x1f<cache_salt>": tenant
// names cannot contain \x1f, so two different pairs never give the same namespace.
[[nodiscard]] std::string cache_namespace(std::string_view tenant, std::string_view cache_salt);

}  // namespace kvs
