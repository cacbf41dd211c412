// KvFrameEncoder: turns successive KvViews (kv_view.h) into the frames of GET /v1/kv/stream,
// each one JSON object sent as one server-sent event:
//
//   {"frame": N, "key": bool, "ms": unix ms when the view was taken,
//    "cells": [first, count, value, ...],   runs of changed cells (kv_delta.h)
//    "groups": [first, count, value, ...],  runs of changed entries of the group plane: the
//                                           layer group each block holds (kv_delta.h)
//    "tenants": [[slot, "label"], ...],     tenant slots whose label is new or changed
//    "seqs": [[seq, request, sample, tokens, "tenant label", tables or null], ...]
//                                           new or changed sequences; tables = one block
//                                           table per layer group, each as [released, first,
//                                           count, ...] (kv_delta.h), null = unchanged
//    "gone": [seq, ...],                    sequences that no longer hold blocks
//    "occ": {free, cached_free, in_use, running, waiting, swapped, preempt_recompute,
//            preempt_swap, evictions, steps}     steps: engine steps so far
//    "cost_us": {view, encode}            what the server spent: taking this view on the engine
//                                           thread, encoding the previous frame
//    ...caller's fields}                    (config on key frames, metrics now and then)
//
// A key frame is the delta against an empty pool (all cells 0, no sequence, no tenant), so a
// page that applies it to a fresh state has the whole picture; a delta frame applies to the
// state after the previous frame. Tenant labels are TenantLabeler's (never a salt).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/kv_view.h"
#include "server/metrics.h"

namespace kvs {

struct KvFrames {
  std::string delta;  // against the previous view (against nothing for the first view)
  std::string key;    // only when asked for
};

class KvFrameEncoder {
 public:
  explicit KvFrameEncoder(const TenantLabeler& labeler) : labeler_(labeler) {}

  // Encodes `view`; then it becomes the previous view. `fields` ("" or `"name":value,...`) is
  // added to both frames, `key_fields` to the key frame only.
  [[nodiscard]] KvFrames encode(const KvView& view, bool want_key, std::string_view fields,
                                std::string_view key_fields);

  // The label of a tenant slot of the last encoded view ("" if unknown).
  [[nodiscard]] const std::string& tenant_label(uint32_t slot) const;
  [[nodiscard]] uint64_t frames() const { return frame_; }

 private:
  struct SeqState {
    uint64_t request = 0;
    uint32_t sample = 0;
    uint32_t num_tokens = 0;
    std::string label;
    std::vector<std::vector<uint32_t>> ranges;  // per layer group (block_ranges)
  };
  struct TenantLabel {
    std::string salt;
    std::string label;
  };
  void append_seq(uint64_t id, const SeqState& s, bool with_ranges, std::string* out) const;

  const TenantLabeler& labeler_;
  uint64_t frame_ = 0;
  uint32_t encode_us_ = 0;        // of the previous encode()
  std::vector<uint32_t> cells_;   // of the previous view
  std::vector<uint32_t> groups_;  // the previous view's group plane
  std::vector<uint32_t> scratch_;
  std::unordered_map<uint64_t, SeqState> seqs_;
  std::unordered_map<uint32_t, TenantLabel> tenants_;
};

}  // namespace kvs
