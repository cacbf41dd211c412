#include "kvcache/in_flight_blocks.h"

#include <string>
#include <unordered_set>

namespace kvs {

void InFlightBlocks::register_chain(SeqId seq, std::span<const uint64_t> keys) {
  Pending& p = pending_[seq];
  KVS_CHECK_MSG(p.done == p.keys.size(), "in-flight blocks registered twice for one sequence");
  p.keys.clear();
  p.done = 0;
  for (uint64_t key : keys)
    if (owner_.emplace(key, seq).second) p.keys.push_back(key);
  if (p.keys.empty()) pending_.erase(seq);
}

void InFlightBlocks::on_committed(SeqId seq, uint64_t key) {
  const auto it = pending_.find(seq);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (p.done < p.keys.size() && p.keys[p.done] == key) {
    owner_.erase(key);
    if (++p.done == p.keys.size()) pending_.erase(it);
  }
}

void InFlightBlocks::drop(SeqId seq) {
  const auto it = pending_.find(seq);
  if (it == pending_.end()) return;
  const Pending& p = it->second;
  for (size_t i = p.done; i < p.keys.size(); ++i) {
    const auto o = owner_.find(p.keys[i]);
    if (o != owner_.end() && o->second == seq) owner_.erase(o);
  }
  pending_.erase(it);
}

std::span<const uint64_t> InFlightBlocks::pending(SeqId seq) const {
  const auto it = pending_.find(seq);
  if (it == pending_.end()) return {};
  return std::span<const uint64_t>(it->second.keys).subspan(it->second.done);
}

Status InFlightBlocks::check_integrity(std::span<const SeqId> live) const {
  const std::unordered_set<SeqId> alive(live.begin(), live.end());
  size_t owned = 0;
  for (const auto& [seq, p] : pending_) {
    const std::string name = "in-flight blocks of sequence " + std::to_string(seq.value);
    if (!alive.contains(seq)) return internal_error(name + ": the sequence is gone");
    if (p.done >= p.keys.size()) return internal_error(name + ": nothing pending but listed");
    std::unordered_set<uint64_t> seen;
    for (size_t i = p.done; i < p.keys.size(); ++i) {
      if (!seen.insert(p.keys[i]).second) return internal_error(name + ": a key listed twice");
      const auto o = owner_.find(p.keys[i]);
      if (o == owner_.end() || !(o->second == seq))
        return internal_error(name + ": a pending key is not registered to it");
      ++owned;
    }
  }
  if (owned != owner_.size()) return internal_error("in-flight block keys owned by no sequence");
  return Status::ok();
}

}  // namespace kvs
