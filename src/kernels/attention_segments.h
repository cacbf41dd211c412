// How paged attention cuts a token's context into segments, and which segments several tokens
// of one call read from the same physical blocks (shared-prefix, or "cascade", attention).
//
// A token's keys are cut into segments of kAttentionSegment keys counted from its first visible
// key. The cut depends only on the token itself (its context length and the window), never on
// the batch or the thread count, so a token's output is the same bit for bit whether it runs
// alone, in a batch, in a prefill chunk of any size, or on any number of threads.
//
// When tokens of one call see the same key positions through the same physical block ids (the
// tokens of one prefill chunk, or sequences whose prompts share cached prefix blocks), those
// keys hold the same bytes for all of them: the kernel then reads the segment once for every
// query head of every sharing token. Each head's arithmetic is unchanged, so outputs stay
// bit-identical to attending each token on its own; only the reads are shared.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/paged_attention_args.h"

namespace kvs {

constexpr int32_t kAttentionSegment = 256;

// Keys [first, end) of one segment; `recent`: read in f16 from the recent-token window
// (quant/recent_window.h) or the attention sink, not from the pool.
struct KeyRange {
  int32_t first = 0;
  int32_t end = 0;
  bool recent = false;
};

// The first key token t sees: 0, or the start of its sliding window.
int32_t attention_first_key(const PagedAttentionArgs& a, int64_t t);
// The first key token t reads from the recent-token window (its context length when none): the
// pool's keys end there and the window's segments (kAttentionSegment keys each) follow.
int32_t attention_recent_key(const PagedAttentionArgs& a, int64_t t);
// Whether token t reads position 0 from the attention sink (quant/attention_sink.h): its first
// segment is then that one key, read like the window, and the pool's keys start at 1.
bool attention_reads_sink(const PagedAttentionArgs& a, int64_t t);
// How many segments token t's keys are cut into (at least 1, even for an empty context).
int32_t attention_segments(const PagedAttentionArgs& a, int64_t t);
// The keys of token t's segment `seg`.
KeyRange attention_segment_keys(const PagedAttentionArgs& a, int64_t t, int32_t seg);

// Segments read by more than one token of a call, in groups of at most kMaxSharers tokens (a
// longer list is split, so that the groups spread over the threads).
//
// A group is exact (every member reads the group's keys) or causal: tokens of one sequence in
// one call (a prefill chunk) whose segments of the same index start within kCausalSpread keys of
// each other and end at their own positions, which plain sharing never groups because no two
// ranges are equal (each token's end, and with a sliding window its first key, is its own). A
// causal group's keys are its members' union; each member reads its own segment's keys
// (attention_segment_keys) within it, so its arithmetic is still its own.
struct SharedSegmentPlan {
  static constexpr uint32_t kMaxSharers = 8;
  static constexpr int32_t kCausalSpread = 32;
  struct Group {
    KeyRange keys;
    uint32_t first = 0;  // into tokens / segments
    uint32_t count = 0;  // 2..kMaxSharers
    bool causal = false;
  };
  std::vector<Group> groups;
  std::vector<int64_t> tokens;    // the members of each group, ascending
  std::vector<int32_t> segments;  // each member's segment index (its own cut)
  // Per (token, segment), indexed by first_segment[t] + seg: read by a group.
  std::vector<uint8_t> shared;
  // Scratch of plan_shared_segments, kept to avoid reallocating per call.
  struct Candidate {
    uint64_t hash;
    int64_t token;
    int32_t segment;
    KeyRange keys;
  };
  std::vector<Candidate> candidates;
  std::vector<const uint32_t*> tables;  // the call's block tables, sorted (causal groups)

  bool empty() const { return groups.empty(); }
  // Checks the plan's structure against the call (tests): every member's segment has the
  // group's keys through the same block ids (a causal member: keys within the group's, the table
  // of the group's first member, and the group's keys its members' union), appears in exactly one
  // group and is flagged.
  bool integrity_ok(const PagedAttentionArgs& a, const std::vector<int64_t>& first_segment) const;
};

// Plans the call's shared segments. first_segment[t] = sum of attention_segments over tokens
// before t (size num_tokens + 1). Exact groups: only tokens with more than one segment take part.
// `causal`: then also causal groups, from every segment left unshared (one-segment tokens
// included) that is neither empty nor the recent window: by (block table, segment index) in token
// order, a run of members whose first keys are within kCausalSpread of its first member's split
// into groups of near-equal size. The kernel sets it where it reads such groups (f16 key tiles).
// Clears the plan first.
void plan_shared_segments(const PagedAttentionArgs& a, const std::vector<int64_t>& first_segment,
                          bool causal, SharedSegmentPlan* plan);

}  // namespace kvs
