#include "server/response_json.h"

namespace kvs {

using nlohmann::json;

std::string json_text(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error_body(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return {{"error", err}};
}

ApiError api_error_of(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return ApiError{.status = 400, .message = status.message()};
    case StatusCode::kResourceExhausted:
      return ApiError{.status = 429,
                      .message = status.message(),
                      .type = "rate_limit_error",
                      .code = "rate_limit_exceeded"};
    case StatusCode::kUnavailable:
      return ApiError{.status = 503, .message = status.message(), .type = "service_unavailable"};
    case StatusCode::kCancelled:
      return ApiError{.status = 499, .message = status.message(), .type = "cancelled"};
    default: return ApiError{.status = 500, .message = status.message(), .type = "internal_error"};
  }
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {
json choice_logprobs(const CompletionIds& ids, std::span<const TokenLogprobText> entries) {
  if (!ids.logprobs) return nullptr;
  return ids.chat ? chat_logprobs_json(entries) : completion_logprobs_json(entries);
}
}  // namespace

json completion_json(const CompletionIds& ids, const std::vector<std::string>& texts,
                     const std::vector<std::string>& finish_reasons,
                     const std::vector<std::vector<TokenLogprobText>>& logprobs,
                     const Usage& usage) {
  json choices = json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    json c = {{"index", i},
              {"logprobs",
               i < logprobs.size() ? choice_logprobs(ids, logprobs[i]) : choice_logprobs(ids, {})},
              {"finish_reason", finish_reasons[i]}};
    if (ids.chat) {
      c["message"] = {{"role", "assistant"}, {"content", texts[i]}};
    } else {
      c["text"] = texts[i];
    }
    choices.push_back(std::move(c));
  }
  return {{"id", ids.id},
          {"object", ids.chat ? "chat.completion" : "text_completion"},
          {"created", ids.created},
          {"model", ids.model},
          {"choices", std::move(choices)},
          {"usage", usage_json(usage)}};
}

namespace {
json chunk_envelope(const CompletionIds& ids, json choices) {
  return {{"id", ids.id},
          {"object", ids.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", ids.created},
          {"model", ids.model},
          {"choices", std::move(choices)}};
}
}  // namespace

json chunk_json(const CompletionIds& ids, const ChoiceDelta& d, bool first_of_choice,
                bool include_usage) {
  json c = {{"index", d.index},
            {"logprobs", choice_logprobs(ids, d.logprobs)},
            {"finish_reason", d.finish_reason ? json(d.finish_reason) : json(nullptr)}};
  if (ids.chat) {
    json delta = json::object();
    if (first_of_choice) delta["role"] = "assistant";
    if (!d.text.empty() || d.finish_reason == nullptr) delta["content"] = d.text;
    c["delta"] = std::move(delta);
  } else {
    c["text"] = d.text;
  }
  json chunk = chunk_envelope(ids, json::array({std::move(c)}));
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json usage_chunk_json(const CompletionIds& ids, const Usage& usage) {
  json chunk = chunk_envelope(ids, json::array());
  chunk["usage"] = usage_json(usage);
  return chunk;
}

nlohmann::json layer_groups_json(const KvCacheGroups& groups) {
  nlohmann::json out = nlohmann::json::array();
  for (uint32_t g = 0; g < groups.num_groups(); ++g)
    out.push_back(
        {{"group", g}, {"layers", groups.layers_per_group}, {"window", groups.windows[g]}});
  return out;
}

nlohmann::json offload_json(const KvOffloadStats& s) {
  if (!s.enabled) return nullptr;
  const auto tier = [](const TierStats& t) {
    return nlohmann::json{{"capacity_bytes", t.capacity_bytes},
                          {"used_bytes", t.used_bytes},
                          {"blocks", t.blocks},
                          {"blocks_stored", t.blocks_stored},
                          {"blocks_loaded", t.blocks_loaded},
                          {"blocks_evicted", t.blocks_evicted},
                          {"hit_tokens", t.hit_tokens},
                          {"checksum_failures", t.checksum_failures},
                          {"errors", t.errors},
                          {"load_decisions", t.load_decisions},
                          {"recompute_decisions", t.recompute_decisions},
                          {"load_bytes_per_s", t.load_bytes_per_s}};
  };
  nlohmann::json j = {{"policy", offload_policy_name(s.policy)},
                      {"dtype", s.tier_dtype ? kv_dtype_name(*s.tier_dtype) : "same"},
                      {"disk_admit_hits", s.disk_admit_hits},
                      {"host", s.host_enabled ? tier(s.host) : nlohmann::json(nullptr)},
                      {"disk", s.disk_enabled ? tier(s.disk) : nlohmann::json(nullptr)},
                      {"remote", s.remote_enabled ? tier(s.remote) : nlohmann::json(nullptr)}};
  if (s.disk_enabled) {
    j["disk"]["foreign_extents"] = s.disk_foreign_extents;
    j["disk"]["torn_files_removed"] = s.disk_torn_files_removed;
    j["disk"]["skipped_entries"] = s.disk_skipped_entries;
    j["disk"]["pending_blocks"] = s.disk_pending_blocks;
    j["disk"]["admitting"] = s.disk_admitting;
  }
  if (s.remote_enabled) {
    nlohmann::json& r = j["remote"];
    r["dropped_writes"] = s.remote_dropped_writes;
    r["queued_writes"] = s.remote_queued_writes;
    r["bytes_written"] = s.remote_bytes_written;
    r["bytes_read"] = s.remote_bytes_read;
    r["instances"] = nlohmann::json::array();
    for (const RemoteInstanceState& i : s.remote_instances)
      r["instances"].push_back({{"url", i.url},
                                {"breaker", breaker_state_name(i.breaker)},
                                {"times_opened", i.times_opened}});
  }
  return j;
}

}  // namespace kvs
