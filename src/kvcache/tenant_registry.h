// TenantRegistry: the cache namespaces (tenants) the cache manager has seen. A tenant is one
// cache_salt (the server composes it from the API key's tenant and the request's salt); its
// dense TenantId indexes the block pool's per-tenant accounting. Each tenant has the root key of
// its block chains (salt mixed with the manager's extra keys) and prefix-cache counters.
//
// Forgetting: a tenant that holds no block and runs no sequence for `idle_seconds` is dropped
// and its slot reused, so the table is bounded by the tenants that hold blocks or ran recently,
// whatever the number of distinct salts a client invents. Totals survive forgetting.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kvcache/block_pool.h"

namespace kvs {

struct TenantCounters {
  uint64_t query_tokens = 0;      // prompt tokens looked up
  uint64_t hit_tokens = 0;        // of those, reused (whole blocks and partial copies)
  uint64_t hit_block_tokens = 0;  // of those, in whole cached blocks
};

class TenantRegistry {
 public:
  // `pool` gets a tenant record per slot (add_tenant / reset_tenant).
  TenantRegistry(uint64_t extra_key, BlockPool& pool) : extra_key_(extra_key), pool_(pool) {}

  [[nodiscard]] std::optional<TenantId> find(std::string_view salt) const;
  // The tenant of `salt`, registered (in a free slot if there is one) when new.
  TenantId get_or_add(std::string_view salt);

  [[nodiscard]] uint64_t root_key(TenantId t) const { return tenants_[t.value].root_key; }
  [[nodiscard]] const std::string& salt(TenantId t) const { return tenants_[t.value].salt; }
  [[nodiscard]] const TenantCounters& counters(TenantId t) const {
    return tenants_[t.value].counters;
  }
  [[nodiscard]] const TenantCounters& totals() const { return totals_; }
  void count_lookup(TenantId t, uint64_t query, uint64_t hit, uint64_t hit_blocks);
  void add_sequence(TenantId t) { ++tenants_[t.value].sequences; }
  void remove_sequence(TenantId t) { --tenants_[t.value].sequences; }

  // See the header comment; `now` is seconds on any monotonic clock. Returns how many.
  uint32_t forget_idle(double now, double idle_seconds);

  [[nodiscard]] uint32_t size() const;  // live tenants
  // Slots (live or free), for iteration with is_live().
  [[nodiscard]] uint32_t num_slots() const { return static_cast<uint32_t>(tenants_.size()); }
  [[nodiscard]] bool is_live(uint32_t slot) const { return tenants_[slot].live; }

  // Live sequences per tenant equal `sequences` (the manager's recount), the salt index lists
  // exactly the live tenants, forgotten slots hold no block.
  [[nodiscard]] Status check_integrity(const std::vector<uint32_t>& sequences) const;

 private:
  struct Tenant {
    std::string salt;
    uint64_t root_key = 0;
    TenantCounters counters;
    uint32_t sequences = 0;  // live sequences of the tenant
    double idle_since = -1;  // forget_idle's time when first seen idle; -1 = busy
    bool live = true;        // false: a forgotten slot waiting in free_slots_
  };
  struct SaltHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>()(s);
    }
  };

  uint64_t extra_key_;
  BlockPool& pool_;
  std::vector<Tenant> tenants_;  // index = TenantId
  std::vector<uint32_t> free_slots_;
  std::unordered_map<std::string, uint32_t, SaltHash, std::equal_to<>> index_;
  TenantCounters totals_;
};

}  // namespace kvs
