#include "server/request_fields.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvs {

using nlohmann::json;

namespace {

enum class Route { kBoth, kCompletions, kChat };

struct Supported {
  std::string_view name;
  Route route;
};

constexpr std::array kSupported = {
    Supported{"model", Route::kBoth},
    Supported{"prompt", Route::kCompletions},
    Supported{"messages", Route::kChat},
    Supported{"max_tokens", Route::kBoth},
    Supported{"max_completion_tokens", Route::kChat},
    Supported{"temperature", Route::kBoth},
    Supported{"top_p", Route::kBoth},
    Supported{"top_k", Route::kBoth},
    Supported{"seed", Route::kBoth},
    Supported{"n", Route::kBoth},
    Supported{"stream", Route::kBoth},
    Supported{"stream_options", Route::kBoth},
    Supported{"stop", Route::kBoth},
    Supported{"ignore_eos", Route::kBoth},
    Supported{"priority", Route::kBoth},
    Supported{"cache_salt", Route::kBoth},
    Supported{"presence_penalty", Route::kBoth},
    Supported{"frequency_penalty", Route::kBoth},
    Supported{"repetition_penalty", Route::kBoth},
    Supported{"min_tokens", Route::kBoth},
    Supported{"logprobs", Route::kBoth},
    Supported{"top_logprobs", Route::kChat},
};

// Metadata that changes no output.
constexpr std::array<std::string_view, 4> kIgnored = {"user", "metadata", "store", "service_tier"};

// A value that asks for nothing: null, false, 0, "", [] or {}.
bool is_empty_value(const json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v.get<double>() == 0.0;
  if (v.is_string() || v.is_array() || v.is_object()) return v.empty();
  return false;
}

struct Unsupported {
  std::string_view name;
  std::string_view what;  // the feature, for the message
  // The value that asks for nothing besides the empty ones (e.g. best_of 1), as JSON text.
  std::string_view neutral;
};

constexpr std::array kUnsupported = {
    Unsupported{"tools", "tool calling", ""},
    Unsupported{"tool_choice", "tool calling", "\"none\""},
    Unsupported{"functions", "function calling", ""},
    Unsupported{"function_call", "function calling", "\"none\""},
    Unsupported{"parallel_tool_calls", "tool calling", ""},
    Unsupported{"response_format", "structured output", "{\"type\":\"text\"}"},
    Unsupported{"guided_json", "guided decoding", ""},
    Unsupported{"guided_regex", "guided decoding", ""},
    Unsupported{"guided_choice", "guided decoding", ""},
    Unsupported{"guided_grammar", "guided decoding", ""},
    Unsupported{"structured_outputs", "structured output", ""},
    Unsupported{"prompt_logprobs", "prompt logprobs", ""},
    Unsupported{"logit_bias", "logit bias", ""},
    Unsupported{"echo", "echoing the prompt", ""},
    Unsupported{"best_of", "best_of", "1"},
    Unsupported{"suffix", "suffix (insertion)", ""},
    Unsupported{"use_beam_search", "beam search", ""},
    Unsupported{"length_penalty", "beam search", "1"},
    Unsupported{"min_p", "min_p sampling", ""},
    Unsupported{"stop_token_ids", "stop token ids", ""},
    Unsupported{"bad_words", "bad words", ""},
    Unsupported{"allowed_token_ids", "allowed token ids", ""},
    Unsupported{"include_stop_str_in_output", "including the stop string", ""},
    Unsupported{"skip_special_tokens", "keeping special tokens", "true"},
    Unsupported{"spaces_between_special_tokens", "keeping special tokens", "true"},
    Unsupported{"add_generation_prompt", "a chat prompt without the assistant turn", "true"},
    Unsupported{"continue_final_message", "continuing the final message", ""},
    Unsupported{"chat_template", "a request's own chat template", ""},
    Unsupported{"chat_template_kwargs", "chat template arguments", ""},
    Unsupported{"documents", "documents in the chat template", ""},
    Unsupported{"audio", "audio output", ""},
    Unsupported{"modalities", "output modalities other than text", "[\"text\"]"},
    Unsupported{"prediction", "predicted outputs", ""},
    Unsupported{"web_search_options", "web search", ""},
};

bool asks_for_nothing(const Unsupported& u, const json& v) {
  if (is_empty_value(v)) return true;
  if (u.neutral.empty()) return false;
  const json neutral = json::parse(u.neutral);
  return v == neutral;
}

}  // namespace

std::optional<FieldProblem> check_request_fields(const json& body, bool chat,
                                                 std::vector<std::string>* unknown) {
  const Route route = chat ? Route::kChat : Route::kCompletions;
  for (const auto& [name, value] : body.items()) {
    const auto s = std::find_if(kSupported.begin(), kSupported.end(),
                                [&](const Supported& x) { return x.name == name; });
    if (s != kSupported.end()) {
      if (s->route == Route::kBoth || s->route == route) continue;
      unknown->push_back(name);  // the other route's field (e.g. messages on completions)
      continue;
    }
    if (std::find(kIgnored.begin(), kIgnored.end(), name) != kIgnored.end()) continue;
    const auto u = std::find_if(kUnsupported.begin(), kUnsupported.end(),
                                [&](const Unsupported& x) { return x.name == name; });
    if (u == kUnsupported.end()) {
      unknown->push_back(name);
      continue;
    }
    if (asks_for_nothing(*u, value)) continue;
    return FieldProblem{.field = name,
                        .message = "'" + name + "' is not supported: kvserve does not do " +
                                   std::string(u->what) + " (leave it out, or null)"};
  }
  return std::nullopt;
}

std::string UnknownFieldLog::printable(const std::string& name) {
  constexpr size_t kMaxBytes = 64;
  std::string out;
  for (size_t i = 0; i < name.size() && i < kMaxBytes; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (name.size() > kMaxBytes) out += "...";
  return out;
}

void UnknownFieldLog::note(const std::vector<std::string>& names) {
  if (names.empty()) return;
  std::lock_guard lock(mu_);
  for (const std::string& n : names) {
    const std::string shown = printable(n);  // bounded: what is remembered too
    if (full_ || seen_.contains(shown)) continue;
    if (seen_.size() == kMaxNames) {
      full_ = true;
      sink_(std::to_string(kMaxNames) + " unknown request fields logged; later ones are not");
      continue;
    }
    seen_.insert(shown);
    sink_("request field '" + shown + "' is not known to kvserve; ignored");
  }
}

}  // namespace kvs
