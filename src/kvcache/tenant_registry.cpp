#include "kvcache/tenant_registry.h"

#include "kvcache/block_hash.h"

namespace kvs {

std::optional<TenantId> TenantRegistry::find(std::string_view salt) const {
  const auto it = index_.find(salt);
  if (it == index_.end()) return std::nullopt;
  return TenantId{it->second};
}

TenantId TenantRegistry::get_or_add(std::string_view salt) {
  if (const std::optional<TenantId> t = find(salt)) return *t;
  uint32_t slot = 0;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    pool_.reset_tenant(TenantId{slot});
  } else {
    slot = static_cast<uint32_t>(tenants_.size());
    tenants_.emplace_back();
    pool_.add_tenant();
  }
  tenants_[slot] = Tenant{.salt = std::string(salt), .root_key = root_block_key(extra_key_, salt)};
  index_.emplace(std::string(salt), slot);
  return TenantId{slot};
}

void TenantRegistry::count_lookup(TenantId t, uint64_t query, uint64_t hit, uint64_t hit_blocks) {
  for (TenantCounters* c : {&tenants_[t.value].counters, &totals_}) {
    c->query_tokens += query;
    c->hit_tokens += hit;
    c->hit_block_tokens += hit_blocks;
  }
}

uint32_t TenantRegistry::forget_idle(double now, double idle_seconds) {
  uint32_t forgotten = 0;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    Tenant& ten = tenants_[t];
    if (!ten.live) continue;
    if (ten.sequences != 0 || pool_.tenant_held(TenantId{t}) != 0) {
      ten.idle_since = -1;
      continue;
    }
    if (ten.idle_since < 0) {
      ten.idle_since = now;
      continue;
    }
    if (now - ten.idle_since < idle_seconds) continue;
    index_.erase(ten.salt);
    ten = Tenant{.live = false};
    free_slots_.push_back(t);
    ++forgotten;
  }
  return forgotten;
}

uint32_t TenantRegistry::size() const {
  return static_cast<uint32_t>(tenants_.size() - free_slots_.size());
}

Status TenantRegistry::check_integrity(const std::vector<uint32_t>& sequences) const {
  size_t live = 0;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    const Tenant& ten = tenants_[t];
    const uint32_t recount = t < sequences.size() ? sequences[t] : 0;
    if (ten.sequences != recount)
      return internal_error("tenant " + std::to_string(t) + ": sequence count");
    if (!ten.live) {
      if (pool_.tenant_held(TenantId{t}) != 0)
        return internal_error("forgotten tenant " + std::to_string(t) + " holds blocks");
      continue;
    }
    ++live;
    const auto it = index_.find(ten.salt);
    if (it == index_.end() || it->second != t)
      return internal_error("tenant " + std::to_string(t) + " is not indexed by its salt");
  }
  if (live != index_.size() || live + free_slots_.size() != tenants_.size())
    return internal_error("tenant slots and the salt index disagree");
  return Status::ok();
}

}  // namespace kvs
