// ResponseJson: the JSON bodies of the OpenAI-compatible API (completion objects, stream
// chunks, usage, error objects) and the mapping of a failure's StatusCode to its HTTP status.
// Pure functions: the routes (openai_server.cpp) decide when to send what.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "kvcache/kv_cache_groups.h"
#include "server/engine_worker.h"
#include "server/request_parser.h"

namespace kvs {

// Serializes without ever throwing: invalid UTF-8 (e.g. echoed from a bad request body in a parse
// error message) becomes U+FFFD.
[[nodiscard]] std::string json_text(const nlohmann::json& j);

// {"error": {message, type, param, code}}
[[nodiscard]] nlohmann::json error_body(const ApiError& e);

// The ApiError of an engine-side failure: invalid_argument / out_of_range -> 400,
// resource_exhausted -> 429, unavailable -> 503, cancelled -> 499 (client closed request),
// anything else -> 500.
[[nodiscard]] ApiError api_error_of(const Status& status);

[[nodiscard]] nlohmann::json usage_json(const Usage& u);

// The KV offload tiers' summary (/v1/kv "tiers", generate --json "kv_offload"): per tier its
// capacity, use, blocks stored/loaded/evicted, hit tokens, failures and load-or-recompute
// decisions; null when no tier is on.
[[nodiscard]] nlohmann::json offload_json(const KvOffloadStats& s);

struct CompletionIds {
  std::string id;  // "cmpl-N" or "chatcmpl-N"
  int64_t created = 0;
  std::string model;
  bool chat = false;
  bool logprobs = false;  // the request asked for logprobs: choices carry them (logprobs_json.h)
};

// A whole (non-streaming) response: one choice per sample (logprobs[i]: choice i's entries,
// read when ids.logprobs).
[[nodiscard]] nlohmann::json completion_json(
    const CompletionIds& ids, const std::vector<std::string>& texts,
    const std::vector<std::string>& finish_reasons,
    const std::vector<std::vector<TokenLogprobText>>& logprobs, const Usage& usage);

// One SSE chunk carrying `delta` for its choice; `first_of_choice` adds the assistant role
// (chat). With include_usage the chunk carries "usage": null, as OpenAI's do.
[[nodiscard]] nlohmann::json chunk_json(const CompletionIds& ids, const ChoiceDelta& delta,
                                        bool first_of_choice, bool include_usage);
// The final usage chunk of a stream with include_usage (no choices).
[[nodiscard]] nlohmann::json usage_chunk_json(const CompletionIds& ids, const Usage& usage);

// A pool's layer groups as /v1/kv and the dashboard's config give them:
// [{"group": g, "layers": n, "window": w (0 = full attention)}, ...].
[[nodiscard]] nlohmann::json layer_groups_json(const KvCacheGroups& groups);

}  // namespace kvs
