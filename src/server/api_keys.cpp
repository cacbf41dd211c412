#include "server/api_keys.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unordered_set>

namespace kvs {

namespace {

bool valid_key(std::string_view key) {
  if (key.empty() || key.size() > 512) return false;
  for (char c : key)
    if (c <= ' ' || c > '~') return false;
  return true;
}

}  // namespace

bool ApiKeys::valid_tenant_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Result<ApiKeys> ApiKeys::create(std::vector<ApiKeyEntry> entries) {
  ApiKeys keys;
  keys.mac_key_ = SipKey::random();
  std::unordered_set<std::string> seen;
  for (ApiKeyEntry& e : entries) {
    if (!valid_key(e.key))
      return invalid_argument(
          "an API key must be 1-512 printable ASCII characters without spaces (tenant '" +
          e.tenant + "')");
    const bool derived = e.tenant.size() == 20 && e.tenant.rfind("key:", 0) == 0 &&
                         e.tenant.find_first_not_of("0123456789abcdef", 4) == std::string::npos;
    if (!derived && !valid_tenant_name(e.tenant))
      return invalid_argument("tenant name '" + e.tenant +
                              "' must be 1-64 characters of A-Z a-z 0-9 . _ -");
    if (!seen.insert(e.key).second)
      return invalid_argument("the same API key is given twice (tenant '" + e.tenant + "')");
    keys.entries_.push_back({.mac = siphash24(keys.mac_key_, e.key),
                             .key = std::move(e.key),
                             .tenant = e.tenant,
                             .admin = e.admin});
  }
  return keys;
}

std::string ApiKeys::derived_tenant(std::string_view key, const ServerSecret& secret) {
  char hex[17];
  std::snprintf(
      hex, sizeof hex, "%016llx",
      static_cast<unsigned long long>(keyed_hash64(secret.derive("kvsapik1"), {as_bytes(key)})));
  return std::string("key:") + hex;
}

std::vector<ApiKeyEntry> ApiKeys::from_flags(const std::vector<std::string>& keys,
                                             const ServerSecret& secret) {
  std::vector<ApiKeyEntry> out;
  for (const std::string& k : keys) out.push_back({.key = k, .tenant = derived_tenant(k, secret)});
  return out;
}

Result<std::vector<ApiKeyEntry>> ApiKeys::parse_file_text(std::string_view text) {
  std::vector<ApiKeyEntry> out;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream words(line);
    std::string tenant, key, role, extra;
    if (!(words >> tenant) || tenant.starts_with("#")) continue;
    if (!(words >> key) || ((words >> role) && role != "admin") || (words >> extra))
      return invalid_argument("--api-keys line " + std::to_string(n) +
                              ": expected 'TENANT KEY' or 'TENANT KEY admin'");
    if (!valid_tenant_name(tenant))
      return invalid_argument("--api-keys line " + std::to_string(n) + ": tenant name '" + tenant +
                              "' must be 1-64 characters of A-Z a-z 0-9 . _ -");
    out.push_back({.key = key, .tenant = tenant, .admin = role == "admin"});
  }
  if (out.empty()) return invalid_argument("--api-keys: the file lists no key");
  return out;
}

Result<std::vector<ApiKeyEntry>> ApiKeys::read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("--api-keys: cannot read '" + path + "'");
  std::ostringstream text;
  text << f.rdbuf();
  if (text.str().size() > (1u << 20)) return invalid_argument("--api-keys: file over 1 MiB");
  return parse_file_text(text.str());
}

std::optional<Caller> ApiKeys::caller_of_header(std::string_view authorization) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (!authorization.starts_with(kBearer)) return std::nullopt;
  const std::string_view presented = authorization.substr(kBearer.size());
  const uint64_t mac = siphash24(mac_key_, presented);
  // Visit every entry; the MACs differ in about half their bits for any two different keys,
  // and comparing them says nothing about the keys' bytes.
  const Entry* match = nullptr;
  for (const Entry& e : entries_) {
    const bool same = ((e.mac ^ mac) == 0);
    if (same && match == nullptr) match = &e;
  }
  if (match == nullptr || !constant_time_equal(match->key, presented)) return std::nullopt;
  return Caller{.tenant = match->tenant, .admin = match->admin};
}

std::vector<std::string> ApiKeys::tenants() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_)
    if (std::find(out.begin(), out.end(), e.tenant) == out.end()) out.push_back(e.tenant);
  return out;
}

std::string cache_namespace(std::string_view tenant, std::string_view cache_salt) {
  std::string ns;
  ns.reserve(tenant.size() + 1 + cache_salt.size());
  ns.append(tenant).append(1, '\x1f').append(cache_salt);
  return ns;
}

std::string_view namespace_tenant(std::string_view ns) {
  const size_t sep = ns.find('\x1f');
  return sep == std::string_view::npos ? std::string_view() : ns.substr(0, sep);
}

}  // namespace kvs
