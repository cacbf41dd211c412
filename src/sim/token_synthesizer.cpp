#include "sim/token_synthesizer.h"

#include <algorithm>
#include <unordered_map>

namespace kvs {

namespace {

constexpr uint64_t kRoot = UINT64_MAX;

struct PairHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& p) const noexcept {
    uint64_t x = p.first * 0x9e3779b97f4a7c15ULL ^ (p.second + 0x632be59bd9b4e019ULL);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ULL;
    return static_cast<size_t>(x ^ (x >> 32));
  }
};

// A fixed mix of (id, offset) into [0, vocab).
uint32_t body(uint64_t id, uint32_t offset, uint32_t vocab) {
  uint64_t x = id * 0x9e3779b97f4a7c15ULL + offset * 0xd1b54a32d192ed03ULL + 0x8cb92ba72f3d8dd7ULL;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  return static_cast<uint32_t>(x % vocab);
}

}  // namespace

TokenSynthesizer::TokenSynthesizer(const Trace& trace, uint32_t vocab_size)
    : trace_(trace), vocab_(vocab_size), first_range_(vocab_size / 2) {
  KVS_CHECK_MSG(vocab_size >= 64, "TokenSynthesizer needs a vocabulary of at least 64 ids");
  std::unordered_map<uint64_t, uint32_t> children;  // parent -> distinct children so far
  std::unordered_map<std::pair<uint64_t, uint64_t>, uint32_t, PairHash> index;
  auto child_index = [&](uint64_t parent, uint64_t id) {
    const auto [it, inserted] = index.try_emplace({parent, id}, 0);
    if (inserted) {
      it->second = children[parent]++;
      if (it->second >= first_range_) ++wraps_;
    }
    return it->second % first_range_;
  };
  const size_t n = trace.requests.size();
  first_begin_.reserve(n + 1);
  own_first_.assign(n, 0);
  for (size_t r = 0; r < n; ++r) {
    first_begin_.push_back(first_.size());
    const std::vector<uint64_t>& ids = trace.requests[r].hash_ids;
    if (ids.empty()) {
      // Its own child of the root: ids past every real one cannot collide with a traced id.
      const uint32_t k = children[kRoot]++;
      if (k >= first_range_) ++wraps_;
      own_first_[r] = k % first_range_;
      continue;
    }
    uint64_t parent = kRoot;
    for (uint64_t id : ids) {
      first_.push_back(child_index(parent, id));
      parent = id;
    }
  }
  first_begin_.push_back(first_.size());
}

int32_t TokenSynthesizer::output_token(size_t index) const {
  return static_cast<int32_t>(first_range_ + index % (vocab_ - first_range_));
}

void TokenSynthesizer::prompt(size_t index, std::vector<int32_t>* out) const {
  const TraceRequest& r = trace_.requests[index];
  const uint32_t bs = trace_.block_tokens;
  const int32_t own = output_token(index);
  out->resize(r.input_tokens);
  int32_t* p = out->data();
  if (r.hash_ids.empty()) {
    std::fill(p, p + r.input_tokens, own);
    p[0] = static_cast<int32_t>(own_first_[index]);
    return;
  }
  const uint32_t* first = first_.data() + first_begin_[index];
  uint32_t pos = 0;
  for (size_t j = 0; j < r.hash_ids.size() && pos < r.input_tokens; ++j) {
    const uint64_t id = r.hash_ids[j];
    const uint32_t end = std::min<uint64_t>(r.input_tokens, uint64_t{pos} + bs);
    p[pos] = static_cast<int32_t>(first[j]);
    for (uint32_t q = pos + 1; q < end; ++q) p[q] = static_cast<int32_t>(body(id, q - pos, vocab_));
    pos = end;
  }
  std::fill(p + pos, p + r.input_tokens, own);
}

}  // namespace kvs
