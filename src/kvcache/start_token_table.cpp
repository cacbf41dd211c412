#include "kvcache/start_token_table.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "core/check.h"

namespace kvs {

StartTokenTable::StartTokenTable(uint32_t entries)
    : token_(entries, -1), used_(entries, 0), pending_(entries, 0) {}

int32_t StartTokenTable::entry_of(int32_t token) const {
  if (token < 0) return -1;  // -1 marks an empty entry
  for (size_t e = 0; e < token_.size(); ++e)
    if (token_[e] == token) return static_cast<int32_t>(e);
  return -1;
}

bool StartTokenTable::knows(int32_t token) const {
  const int32_t e = entry_of(token);
  return e >= 0 && pending_[static_cast<size_t>(e)] == 0;
}

uint32_t StartTokenTable::adopt(int32_t token) {
  KVS_CHECK(knows(token));
  const auto e = static_cast<uint32_t>(entry_of(token));
  used_[e] = ++clock_;
  return e;
}

std::optional<uint32_t> StartTokenTable::publish(int32_t token) {
  KVS_CHECK(token >= 0);
  if (const int32_t e = entry_of(token); e >= 0) {  // known, or written this step already
    used_[static_cast<size_t>(e)] = ++clock_;
    return std::nullopt;
  }
  // An empty entry (use 0), else the least recently used one not being written this step.
  uint32_t victim = num_entries();
  for (uint32_t e = 0; e < num_entries(); ++e)
    if (pending_[e] == 0 && (victim == num_entries() || used_[e] < used_[victim])) victim = e;
  // The sink has as many entries as sequences run at once, each publishing at most once a step.
  KVS_CHECK(victim < num_entries());
  token_[victim] = token;
  used_[victim] = ++clock_;
  pending_[victim] = 1;
  return victim;
}

void StartTokenTable::rows_written() { std::fill(pending_.begin(), pending_.end(), uint8_t{0}); }

std::vector<int32_t> StartTokenTable::tokens_by_use() const {
  std::vector<uint32_t> order(num_entries());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return used_[a] < used_[b]; });
  std::vector<int32_t> out;
  for (const uint32_t e : order)
    if (token_[e] >= 0 && pending_[e] == 0) out.push_back(token_[e]);
  return out;
}

bool StartTokenTable::check_integrity() const {
  std::set<int32_t> tokens;
  std::set<uint64_t> stamps;
  for (uint32_t e = 0; e < num_entries(); ++e) {
    if (token_[e] < 0) {
      if (used_[e] != 0 || pending_[e] != 0) return false;
      continue;
    }
    if (!tokens.insert(token_[e]).second || used_[e] == 0 || used_[e] > clock_ ||
        !stamps.insert(used_[e]).second)
      return false;
  }
  return true;
}

}  // namespace kvs
