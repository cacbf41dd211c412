#include "kvcache/prefix_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "kvcache/block_hash.h"

namespace kvs {

// ---- FlatIndex ----

FlatIndex::FlatIndex(uint32_t max_entries) {
  // Load factor <= 1/2 keeps linear probe sequences short.
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, size_t{max_entries} * 2));
  keys_.assign(capacity, 0);
  values_.assign(capacity, kEmpty);
  mask_ = capacity - 1;
}

size_t FlatIndex::home(uint64_t key) const {
  // Keys are hashes already, but the test hook may supply poor ones: mix before masking.
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return static_cast<size_t>(key) & mask_;
}

std::optional<uint32_t> FlatIndex::find(uint64_t key) const {
  for (size_t i = home(key);; i = (i + 1) & mask_) {
    if (values_[i] == kEmpty) return std::nullopt;
    if (keys_[i] == key) return values_[i];
  }
}

void FlatIndex::set(uint64_t key, uint32_t value) {
  KVS_DCHECK(value != kEmpty);
  size_t i = home(key);
  for (; values_[i] != kEmpty; i = (i + 1) & mask_) {
    if (keys_[i] == key) {
      values_[i] = value;
      return;
    }
  }
  KVS_CHECK(size_ + 1 <= mask_ / 2 + 1);  // never above half full
  keys_[i] = key;
  values_[i] = value;
  ++size_;
}

void FlatIndex::erase(uint64_t key) {
  size_t i = home(key);
  while (keys_[i] != key || values_[i] == kEmpty) {
    KVS_CHECK(values_[i] != kEmpty);  // precondition: present
    i = (i + 1) & mask_;
  }
  // Backward-shift deletion: pull later entries of the probe run into the hole unless their
  // home lies cyclically in (hole, j].
  for (size_t j = (i + 1) & mask_; values_[j] != kEmpty; j = (j + 1) & mask_) {
    const size_t h = home(keys_[j]);
    if (((j - h) & mask_) >= ((j - i) & mask_)) {
      keys_[i] = keys_[j];
      values_[i] = values_[j];
      i = j;
    }
  }
  values_[i] = kEmpty;
  --size_;
}

// ---- PrefixCache ----

PrefixCache::PrefixCache(uint32_t num_blocks, uint32_t block_size)
    : block_size_(block_size),
      cached_(num_blocks, 0),
      generation_(num_blocks, 0),
      key_(num_blocks, 0),
      child_key_(num_blocks, 0),
      parent_(num_blocks),
      tenant_(num_blocks, 0),
      tokens_(size_t{num_blocks} * block_size, 0),
      key_index_(num_blocks),
      child_index_(num_blocks),
      key_links_(num_blocks),
      child_links_(num_blocks) {}

std::optional<BlockId> PrefixCache::find(uint64_t key, BlockRef parent, TenantId tenant,
                                         std::span<const int32_t> tokens) const {
  KVS_DCHECK(tokens.size() == block_size_);
  const std::optional<uint32_t> head = key_index_.find(key);
  if (!head) return std::nullopt;
  for (uint32_t b = *head; b != kNil; b = key_links_[b].next) {
    // The key only narrows the search; identity is parent + tenant + token ids.
    if (parent_[b] == parent && tenant_[b] == tenant.value &&
        std::memcmp(tokens_.data() + size_t{b} * block_size_, tokens.data(),
                    size_t{block_size_} * sizeof(int32_t)) == 0) {
      return BlockId{b};
    }
  }
  return std::nullopt;
}

std::optional<PrefixCache::PartialMatch> PrefixCache::find_partial(uint64_t parent_key,
                                                                   BlockRef parent, TenantId tenant,
                                                                   std::span<const int32_t> tokens,
                                                                   uint32_t max_tokens) const {
  const uint32_t limit = std::min({max_tokens, block_size_, static_cast<uint32_t>(tokens.size())});
  if (limit == 0) return std::nullopt;
  const std::optional<uint32_t> head = child_index_.find(child_bucket_key(parent_key, tokens[0]));
  if (!head) return std::nullopt;
  std::optional<PartialMatch> best;
  uint32_t seen = 0;
  for (uint32_t b = *head; b != kNil && seen < kMaxPartialCandidates;
       b = child_links_[b].next, ++seen) {
    if (!(parent_[b] == parent) || tenant_[b] != tenant.value) continue;
    const int32_t* stored = tokens_.data() + size_t{b} * block_size_;
    uint32_t p = 0;
    while (p < limit && stored[p] == tokens[p]) ++p;
    if (p > 0 && (!best || p > best->num_tokens)) {
      best = PartialMatch{BlockId{b}, p};
      if (p == limit) break;
    }
  }
  return best;
}

void PrefixCache::link(FlatIndex& index, std::vector<Links>& links, uint64_t k, uint32_t b) {
  // Push front: the newest entry is looked at first.
  const std::optional<uint32_t> head = index.find(k);
  links[b] = Links{kNil, head ? *head : kNil};
  if (head) links[*head].prev = b;
  index.set(k, b);
}

void PrefixCache::unlink(FlatIndex& index, std::vector<Links>& links, uint64_t k, uint32_t b) {
  const Links l = links[b];
  if (l.prev != kNil) {
    links[l.prev].next = l.next;
  } else if (l.next != kNil) {
    index.set(k, l.next);
  } else {
    index.erase(k);
  }
  if (l.next != kNil) links[l.next].prev = l.prev;
  links[b] = Links{};
}

std::optional<BlockId> PrefixCache::insert(BlockId b, uint64_t key, uint64_t parent_key,
                                           BlockRef parent, TenantId tenant,
                                           std::span<const int32_t> tokens) {
  KVS_CHECK(!contains(b) && tokens.size() == block_size_);
  if (std::optional<BlockId> existing = find(key, parent, tenant, tokens)) return existing;
  const uint32_t i = b.value;
  cached_[i] = 1;
  key_[i] = key;
  child_key_[i] = child_bucket_key(parent_key, tokens[0]);
  parent_[i] = parent;
  tenant_[i] = tenant.value;
  std::memcpy(tokens_.data() + size_t{i} * block_size_, tokens.data(),
              size_t{block_size_} * sizeof(int32_t));
  link(key_index_, key_links_, key, i);
  link(child_index_, child_links_, child_key_[i], i);
  ++size_;
  return std::nullopt;
}

void PrefixCache::erase(BlockId b) {
  KVS_CHECK(contains(b));
  const uint32_t i = b.value;
  if (bridge_ != nullptr) bridge_->on_erased(b, tokens(b));
  unlink(key_index_, key_links_, key_[i], i);
  unlink(child_index_, child_links_, child_key_[i], i);
  cached_[i] = 0;
  ++generation_[i];
  --size_;
}

namespace {
Status fail(const std::string& what) { return internal_error("prefix cache: " + what); }
}  // namespace

Status PrefixCache::check_integrity() const {
  const uint32_t n = static_cast<uint32_t>(cached_.size());
  uint32_t count = 0;
  for (uint32_t b = 0; b < n; ++b) count += cached_[b];
  if (count != size_) return fail("size counter " + std::to_string(size_) + " != recount");
  // Each index: every cached block is in the chain under its own key, chains are consistent
  // doubly linked lists whose heads are exactly the index entries.
  struct Idx {
    const FlatIndex* index;
    const std::vector<Links>* links;
    const std::vector<uint64_t>* keys;
    const char* name;
  };
  for (const Idx& x : {Idx{&key_index_, &key_links_, &key_, "key index"},
                       Idx{&child_index_, &child_links_, &child_key_, "child index"}}) {
    uint32_t heads = 0;
    uint32_t walked = 0;
    for (uint32_t b = 0; b < n; ++b) {
      const Links l = (*x.links)[b];
      if (!cached_[b]) {
        if (l.prev != kNil || l.next != kNil) return fail(std::string(x.name) + ": stale links");
        continue;
      }
      const uint64_t k = (*x.keys)[b];
      if (l.next != kNil &&
          (!cached_[l.next] || (*x.links)[l.next].prev != b || (*x.keys)[l.next] != k)) {
        return fail(std::string(x.name) + ": broken next link of block " + std::to_string(b));
      }
      if (l.prev != kNil) continue;
      // b heads its chain: the index maps its key to it.
      ++heads;
      const std::optional<uint32_t> head = x.index->find(k);
      if (!head || *head != b) {
        return fail(std::string(x.name) + ": block " + std::to_string(b) + " not indexed");
      }
      for (uint32_t c = b; c != kNil && walked <= n; c = (*x.links)[c].next) ++walked;
    }
    if (heads != x.index->size()) return fail(std::string(x.name) + ": stray entries");
    if (walked != size_) return fail(std::string(x.name) + ": chains do not cover the cache");
  }
  return Status::ok();
}

}  // namespace kvs
