// TokenSynthesizer: token ids for a trace that has lengths and block hashes but no text, chosen so
// that the engine's prefix cache hits exactly where the trace says prompts are shared and nowhere
// else.
//
// Position p of request r's prompt lies in hash block j = p / B (B = Trace::block_tokens) at
// offset o = p % B. With V the vocabulary bound and F = V / 2:
//   o == 0, j < ids:  first(parent, id) = the index of `id` among the distinct children of
//                     `parent` (the previous id, or the root) in trace order, in [0, F)
//   o > 0,  j < ids:  body(id, o) = a fixed mix of (id, o), in [0, V)
//   j >= ids:         own(r) = F + r mod (V - F)   (a prompt the trace says nothing about)
//   outputs:          own(r)
// Equal ids give equal tokens, so shared prefixes are shared token for token. Two different
// children of one parent differ in their first token, so neither a whole engine block nor the
// partial-block match (which needs the block's first token to agree) can cross from one to the
// other, whatever the engine's block size; a block past that point hangs from a different parent
// and cannot match either. A request without ids counts as its own child of the root. Outputs
// and untraced prompt tails are in [F, V), disjoint from every first token, and differ between
// requests (up to V - F requests apart), so they match nothing but themselves.
//
// The one bound: a parent with more than F distinct children reuses first tokens
// (first_token_wraps() counts the children past F; each may then match an unrelated sibling's
// first tokens). The Mooncake conversation trace's busiest parent has 7,373 children; F = 64,128
// for the default bound of 128,256 (Llama 3's vocabulary).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/trace.h"

namespace kvs {

inline constexpr uint32_t kDefaultSimVocab = 128256;

class TokenSynthesizer {
 public:
  // `trace` must outlive the synthesizer. vocab_size >= 64. O(total hash ids).
  TokenSynthesizer(const Trace& trace, uint32_t vocab_size = kDefaultSimVocab);

  // Request `index`'s prompt (input_tokens ids, each < vocab_size) into *out (replaced).
  void prompt(size_t index, std::vector<int32_t>* out) const;
  // The token request `index` generates at every position.
  [[nodiscard]] int32_t output_token(size_t index) const;

  [[nodiscard]] uint32_t vocab_size() const { return vocab_; }
  [[nodiscard]] uint64_t first_token_wraps() const { return wraps_; }

 private:
  const Trace& trace_;
  uint32_t vocab_;
  uint32_t first_range_;               // F
  std::vector<uint32_t> first_;        // first token of every (request, hash block), flattened
  std::vector<uint64_t> first_begin_;  // [requests + 1] offsets into first_
  std::vector<uint32_t> own_first_;    // first token of a request without ids (its own root child)
  uint64_t wraps_ = 0;
};

}  // namespace kvs
