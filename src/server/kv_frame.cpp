#include "server/kv_frame.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>

#include "server/kv_delta.h"
#include "server/response_json.h"

namespace kvs {

namespace {

void append_uint(std::string* out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, r.ptr);
}

void append_uints(std::string* out, const std::vector<uint32_t>& values) {
  out->push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out->push_back(',');
    append_uint(out, values[i]);
  }
  out->push_back(']');
}

void append_string(std::string* out, const std::string& s) { *out += json_text(s); }

void append_tables(std::string* out, const std::vector<std::vector<uint32_t>>& tables) {
  out->push_back('[');
  for (size_t g = 0; g < tables.size(); ++g) {
    if (g > 0) out->push_back(',');
    append_uints(out, tables[g]);
  }
  out->push_back(']');
}

void append_field(std::string* out, const char* name, uint64_t v, bool comma = true) {
  if (comma) out->push_back(',');
  out->push_back('"');
  *out += name;
  *out += "\":";
  append_uint(out, v);
}

}  // namespace

const std::string& KvFrameEncoder::tenant_label(uint32_t slot) const {
  static const std::string kNone;
  const auto it = tenants_.find(slot);
  return it == tenants_.end() ? kNone : it->second.label;
}

void KvFrameEncoder::append_seq(uint64_t id, const SeqState& s, bool with_ranges,
                                std::string* out) const {
  if (out->size() > 1) out->push_back(',');
  out->push_back('[');
  append_uint(out, id);
  out->push_back(',');
  append_uint(out, s.request);
  out->push_back(',');
  append_uint(out, s.sample);
  out->push_back(',');
  append_uint(out, s.num_tokens);
  out->push_back(',');
  append_string(out, s.label);
  out->push_back(',');
  if (with_ranges) {
    append_tables(out, s.ranges);
  } else {
    *out += "null";
  }
  out->push_back(']');
}

KvFrames KvFrameEncoder::encode(const KvView& view, bool want_key, std::string_view fields,
                                std::string_view key_fields) {
  const auto start = std::chrono::steady_clock::now();
  ++frame_;
  const size_t n = view.blocks.size();
  std::vector<uint32_t> cells(n), groups(n);
  for (size_t b = 0; b < n; ++b) {
    const BlockInfo& i = view.blocks[b];
    cells[b] = pack_cell(i.state, i.refcount, i.filled, i.tenant);
    groups[b] = i.state == BlockState::kFree ? 0 : i.group;
  }
  if (cells_.size() != n) cells_.assign(n, 0);
  if (groups_.size() != n) groups_.assign(n, 0);

  // Tenants: label a slot again only when its namespace changed (slots are reused).
  std::unordered_map<uint32_t, TenantLabel> tenants;
  std::vector<uint32_t> relabelled;
  for (const TenantStats& t : view.tenants) {
    const auto it = tenants_.find(t.id);
    if (it != tenants_.end() && it->second.salt == t.cache_salt) {
      tenants.emplace(t.id, std::move(it->second));
    } else {
      tenants.emplace(t.id, TenantLabel{t.cache_salt, labeler_.label(t.cache_salt)});
      relabelled.push_back(t.id);
    }
  }
  tenants_ = std::move(tenants);
  std::sort(relabelled.begin(), relabelled.end());
  std::unordered_map<std::string_view, const std::string*> label_of_salt;
  for (const auto& [slot, t] : tenants_) label_of_salt.emplace(t.salt, &t.label);

  // Sequences: new or changed ones; ranges only when the table changed.
  std::string seqs_delta = "[", seqs_key = "[";
  std::unordered_map<uint64_t, SeqState> seqs;
  for (const KvViewSequence& s : view.sequences) {
    SeqState st{.request = s.request, .sample = s.sample, .num_tokens = s.num_tokens};
    const auto label = label_of_salt.find(s.cache_salt);
    st.label = label != label_of_salt.end() ? *label->second : labeler_.label(s.cache_salt);
    st.ranges.resize(s.tables.size());
    for (size_t g = 0; g < s.tables.size(); ++g) block_ranges(s.tables[g], &st.ranges[g]);
    const auto old = seqs_.find(s.seq);
    const bool new_table = old == seqs_.end() || old->second.ranges != st.ranges;
    if (new_table || old->second.num_tokens != st.num_tokens || old->second.label != st.label)
      append_seq(s.seq, st, new_table, &seqs_delta);
    if (want_key) append_seq(s.seq, st, true, &seqs_key);
    seqs.emplace(s.seq, std::move(st));
  }
  std::vector<uint64_t> gone;
  for (const auto& [id, s] : seqs_)
    if (!seqs.contains(id)) gone.push_back(id);
  std::sort(gone.begin(), gone.end());
  seqs_ = std::move(seqs);
  seqs_delta += "]";
  seqs_key += "]";

  std::string occ = ",\"occ\":{";
  const KvCacheCounters& c = view.engine.cache;
  append_field(&occ, "free", c.blocks_free, false);
  append_field(&occ, "cached_free", c.blocks_cached_free);
  append_field(&occ, "in_use", c.blocks_in_use);
  append_field(&occ, "running", view.engine.running);
  append_field(&occ, "waiting", view.engine.waiting);
  append_field(&occ, "swapped", view.engine.swapped);
  append_field(&occ, "preempt_recompute", view.engine.preemptions_recompute);
  append_field(&occ, "preempt_swap", view.engine.preemptions_swap);
  append_field(&occ, "evictions", c.evictions);
  append_field(&occ, "steps", view.steps);
  occ += "},\"cost_us\":{";
  append_field(&occ, "view", view.take_us, false);
  append_field(&occ, "encode", encode_us_);
  occ += "}";

  const auto frame = [&](bool key, const std::vector<uint32_t>& runs,
                         const std::vector<uint32_t>& group_runs,
                         const std::vector<uint32_t>& tenant_slots, const std::string& seq_list,
                         const std::vector<uint64_t>& gone_ids, std::string_view extra) {
    std::string f = "{";
    append_field(&f, "frame", frame_, false);
    f += key ? ",\"key\":true" : ",\"key\":false";
    f += ",\"ms\":" + std::to_string(view.unix_ms);
    f += ",\"cells\":";
    append_uints(&f, runs);
    f += ",\"groups\":";
    append_uints(&f, group_runs);
    f += ",\"tenants\":[";
    for (size_t i = 0; i < tenant_slots.size(); ++i) {
      if (i > 0) f.push_back(',');
      f.push_back('[');
      append_uint(&f, tenant_slots[i]);
      f.push_back(',');
      append_string(&f, tenants_.at(tenant_slots[i]).label);
      f.push_back(']');
    }
    f += "],\"seqs\":" + seq_list + ",\"gone\":[";
    for (size_t i = 0; i < gone_ids.size(); ++i) {
      if (i > 0) f.push_back(',');
      append_uint(&f, gone_ids[i]);
    }
    f += "]" + occ;
    if (!fields.empty()) {
      f += ",";
      f += fields;
    }
    if (!extra.empty()) {
      f += ",";
      f += extra;
    }
    f += "}";
    return f;
  };

  KvFrames out;
  std::vector<uint32_t> group_runs;
  scratch_.clear();
  diff_cells(cells_, cells, &scratch_);
  diff_cells(groups_, groups, &group_runs);
  out.delta = frame(false, scratch_, group_runs, relabelled, seqs_delta, gone, {});
  if (want_key) {
    std::vector<uint32_t> slots;
    for (const auto& [slot, t] : tenants_) slots.push_back(slot);
    std::sort(slots.begin(), slots.end());
    const std::vector<uint32_t> zeros(n, 0);
    scratch_.clear();
    diff_cells(zeros, cells, &scratch_);
    group_runs.clear();
    diff_cells(zeros, groups, &group_runs);
    out.key = frame(true, scratch_, group_runs, slots, seqs_key, {}, key_fields);
  }
  cells_ = std::move(cells);
  groups_ = std::move(groups);
  encode_us_ = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                         std::chrono::steady_clock::now() - start)
                                         .count());
  return out;
}

}  // namespace kvs
