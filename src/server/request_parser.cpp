#include "server/request_parser.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "server/request_fields.h"

namespace kvs {

using nlohmann::json;

namespace {

constexpr const char* kCompletionsRoute = "/v1/completions";
constexpr const char* kChatRoute = "/v1/chat/completions";

std::optional<ApiError> bad(const std::string& param, const std::string& message) {
  return ApiError{.status = 400, .message = message, .param = param};
}

// Field readers: absent or null -> nullopt; a wrong type or an out-of-range value -> ApiError.
std::optional<ApiError> read_number(const json& j, const char* key, std::optional<double>* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return bad(key, std::string("'") + key + "' must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v)) return bad(key, std::string("'") + key + "' must be finite");
  *out = v;
  return std::nullopt;
}

// An integer that fits int64 exactly. JSON numbers above INT64_MAX (nlohmann reads them as
// unsigned) and floats outside [-2^63, 2^63) are refused, never wrapped or cast with undefined
// behaviour.
std::optional<ApiError> read_int(const json& j, const char* key, std::optional<int64_t>* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  const json& v = *it;
  const std::string range = std::string("'") + key + "' is out of range";
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return bad(key, range);
    *out = static_cast<int64_t>(u);
    return std::nullopt;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return std::nullopt;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 is exactly representable; every double in [-2^63, 2^63) converts without UB.
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return bad(key, range);
    if (d == std::trunc(d)) {
      *out = static_cast<int64_t>(d);
      return std::nullopt;
    }
  }
  return bad(key, std::string("'") + key + "' must be an integer");
}

std::optional<ApiError> read_bool(const json& j, const char* key, bool* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad(key, std::string("'") + key + "' must be a boolean");
  *out = it->get<bool>();
  return std::nullopt;
}

// Logprobs, as each route asks for them: completions' "logprobs" is the number of top
// alternatives; chat's "logprobs" is a boolean and "top_logprobs" the number, which needs
// "logprobs": true (OpenAI's and vLLM's rule).
std::optional<ApiError> read_logprobs(const json& j, bool chat, uint32_t max_logprobs,
                                      std::optional<uint32_t>* out) {
  const auto in_range = [&](const char* key, int64_t v) -> std::optional<ApiError> {
    if (v < 0 || v > max_logprobs)
      return bad(key, std::string("'") + key + "' must be between 0 and " +
                          std::to_string(max_logprobs) + " (this server's --max-logprobs)");
    return std::nullopt;
  };
  std::optional<int64_t> top;
  if (!chat) {
    if (auto e = read_int(j, "logprobs", &top)) return e;
    if (!top) return std::nullopt;
    if (auto e = in_range("logprobs", *top)) return e;
    *out = static_cast<uint32_t>(*top);
    return std::nullopt;
  }
  bool wanted = false;
  if (auto e = read_bool(j, "logprobs", &wanted)) return e;
  if (auto e = read_int(j, "top_logprobs", &top)) return e;
  if (top) {
    if (auto e = in_range("top_logprobs", *top)) return e;
    if (*top > 0 && !wanted) return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  if (wanted) *out = static_cast<uint32_t>(top.value_or(0));
  return std::nullopt;
}

// A message's text: a string, or an array of {"type": "text", "text": "..."} parts.
std::optional<ApiError> message_text(const json& content, std::string* out) {
  if (content.is_null()) return std::nullopt;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array())
    return bad("messages", "a message 'content' must be a string or an array of parts");
  for (const json& part : content) {
    if (!part.is_object()) return bad("messages", "a content part must be an object");
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      return bad("messages", "a content part needs a string 'type'");
    if (type->get_ref<const std::string&>() != "text")
      return bad("messages", "content parts of type '" + type->get<std::string>() +
                                 "' are not supported (this model reads text only)");
    const auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      return bad("messages", "a text part needs a string 'text'");
    *out += text->get_ref<const std::string&>();
  }
  return std::nullopt;
}

// Roles a chat template renders; "developer" is OpenAI's newer name for "system".
std::optional<std::string> known_role(const std::string& role) {
  if (role == "system" || role == "developer") return "system";
  if (role == "user" || role == "assistant" || role == "tool") return role;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> RequestParser::parse_prompt(const json& j, bool chat,
                                                    GenerationRequest* g) const {
  const uint64_t max_bytes = limits_.max_prompt_bytes;
  const auto too_long = [&](const char* param) {
    return ApiError{.status = 400,
                    .message = "the prompt text is longer than " + std::to_string(max_bytes) +
                               " bytes, so it cannot fit in the maximum context length of " +
                               std::to_string(limits_.max_model_len) + " tokens",
                    .param = param,
                    .code = "context_length_exceeded"};
  };
  if (chat) {
    const auto msgs = j.find("messages");
    if (msgs == j.end() || !msgs->is_array() || msgs->empty())
      return bad("messages", "'messages' must be a non-empty array");
    if (chat_template_ == nullptr)
      return bad("messages",
                 "this model has no chat template: use /v1/completions with a text prompt");
    std::vector<ChatMessage> messages;
    uint64_t bytes = 0;
    for (const json& m : *msgs) {
      if (!m.is_object()) return bad("messages", "every message must be an object");
      const auto role = m.find("role");
      if (role == m.end() || !role->is_string())
        return bad("messages", "every message needs a string 'role'");
      const std::optional<std::string> r = known_role(role->get<std::string>());
      if (!r)
        return bad("messages", "unknown message role '" + role->get<std::string>() +
                                   "' (use system, developer, user, assistant or tool)");
      ChatMessage msg{.role = *r};
      const auto content = m.find("content");
      if (content != m.end()) {
        if (auto e = message_text(*content, &msg.content)) return e;
      }
      bytes += msg.content.size() + msg.role.size();
      if (bytes > max_bytes) return too_long("messages");
      messages.push_back(std::move(msg));
    }
    g->prompt = chat_template_->encode(tokenizer_, messages, /*add_generation_prompt=*/true,
                                       limits_.trust_message_special_tokens);
    return std::nullopt;
  }
  const auto p = j.find("prompt");
  if (p == j.end()) return bad("prompt", "'prompt' is required");
  const json* text = nullptr;
  if (p->is_string()) {
    text = &*p;
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    text = &(*p)[0];
  }
  if (text != nullptr) {
    const std::string& s = text->get_ref<const std::string&>();
    if (s.size() > max_bytes) return too_long("prompt");
    g->prompt = tokenizer_.encode(s, /*add_special=*/true, /*parse_special=*/true);
    return std::nullopt;
  }
  if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    if (p->size() > limits_.max_model_len)
      return ApiError{.status = 400,
                      .message = "the prompt has " + std::to_string(p->size()) +
                                 " tokens, more than the maximum context length of " +
                                 std::to_string(limits_.max_model_len),
                      .param = "prompt",
                      .code = "context_length_exceeded"};
    const int64_t vocab = tokenizer_.vocab_size();
    for (const json& t : *p) {
      if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<uint64_t>() > INT64_MAX))
        return bad("prompt", "token ids must be integers");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= vocab)
        return bad("prompt", "token id " + std::to_string(id) + " is outside the vocabulary");
      g->prompt.push_back(static_cast<int32_t>(id));
    }
    return std::nullopt;
  }
  return bad("prompt",
             "'prompt' must be a string, an array of one string or an array of token ids");
}

std::optional<ApiError> RequestParser::parse(const json& j, bool chat, ParsedRequest* out) const {
  if (!j.is_object()) return bad("", "the request body must be a JSON object");
  out->chat = chat;
  if (const std::optional<FieldProblem> f = check_request_fields(j, chat, &out->unknown_fields))
    return ApiError{.status = 400, .message = f->message, .param = f->field, .code = "unsupported"};
  if (const auto model = j.find("model"); model != j.end() && !model->is_null()) {
    if (!model->is_string()) return bad("model", "'model' must be a string");
    if (model->get_ref<const std::string&>() != limits_.served_model_name)
      return ApiError{.status = 404,
                      .message = "The model '" + model->get<std::string>() +
                                 "' does not exist (this server serves '" +
                                 limits_.served_model_name + "')",
                      .param = "model",
                      .code = "model_not_found"};
  }
  GenerationRequest& g = out->gen;
  g.route = chat ? kChatRoute : kCompletionsRoute;
  std::optional<double> temperature, top_p, presence, frequency, repetition;
  std::optional<int64_t> top_k, seed, max_tokens, n, priority, min_tokens;
  if (auto e = read_number(j, "temperature", &temperature)) return e;
  if (auto e = read_number(j, "presence_penalty", &presence)) return e;
  if (auto e = read_number(j, "frequency_penalty", &frequency)) return e;
  if (auto e = read_number(j, "repetition_penalty", &repetition)) return e;
  if (auto e = read_int(j, "min_tokens", &min_tokens)) return e;
  if (auto e = read_number(j, "top_p", &top_p)) return e;
  if (auto e = read_int(j, "top_k", &top_k)) return e;
  if (auto e = read_int(j, "seed", &seed)) return e;
  if (auto e = read_int(j, "max_tokens", &max_tokens)) return e;
  if (chat && !max_tokens) {
    if (auto e = read_int(j, "max_completion_tokens", &max_tokens)) return e;
  }
  if (auto e = read_logprobs(j, chat, limits_.max_logprobs, &g.sampling.logprobs)) return e;
  if (auto e = read_int(j, "n", &n)) return e;
  if (auto e = read_int(j, "priority", &priority)) return e;
  if (auto e = read_bool(j, "stream", &out->stream)) return e;
  if (auto e = read_bool(j, "ignore_eos", &g.ignore_eos)) return e;
  if (const auto so = j.find("stream_options"); so != j.end() && !so->is_null()) {
    if (!so->is_object()) return bad("stream_options", "'stream_options' must be an object");
    if (auto e = read_bool(*so, "include_usage", &out->include_usage)) return e;
  }
  if (temperature) {
    if (*temperature < 0 || *temperature > 2)
      return bad("temperature", "'temperature' must be between 0 and 2");
    g.sampling.temperature = static_cast<float>(*temperature);
  }
  if (top_p) {
    if (!(*top_p > 0 && *top_p <= 1)) return bad("top_p", "'top_p' must be in (0, 1]");
    g.sampling.top_p = static_cast<float>(*top_p);
  }
  if (top_k) {
    if (*top_k < -1 || *top_k > 1000000)
      return bad("top_k", "'top_k' must be -1 or 0 (no limit), or at most 1000000");
    g.sampling.top_k = *top_k == -1 ? 0 : static_cast<int32_t>(*top_k);
  }
  if (seed) g.sampling.seed = static_cast<uint64_t>(*seed);
  if (presence) {
    if (*presence < -2 || *presence > 2)
      return bad("presence_penalty", "'presence_penalty' must be between -2 and 2");
    g.sampling.presence_penalty = static_cast<float>(*presence);
  }
  if (frequency) {
    if (*frequency < -2 || *frequency > 2)
      return bad("frequency_penalty", "'frequency_penalty' must be between -2 and 2");
    g.sampling.frequency_penalty = static_cast<float>(*frequency);
  }
  if (repetition) {
    if (!(*repetition > 0 && *repetition <= 2))
      return bad("repetition_penalty", "'repetition_penalty' must be in (0, 2] (1 = off)");
    g.sampling.repetition_penalty = static_cast<float>(*repetition);
  }
  if (n) {
    if (*n < 1 || *n > kMaxSamplesPerRequest)
      return bad("n", "'n' must be between 1 and " + std::to_string(kMaxSamplesPerRequest));
    g.n = static_cast<uint32_t>(*n);
  }
  if (priority) {
    if (*priority < INT32_MIN || *priority > INT32_MAX)
      return bad("priority", "'priority' is out of range");
    g.priority = static_cast<int32_t>(*priority);
  }
  if (const auto salt = j.find("cache_salt"); salt != j.end() && !salt->is_null()) {
    if (!salt->is_string()) return bad("cache_salt", "'cache_salt' must be a string");
    g.cache_salt = salt->get<std::string>();
    if (g.cache_salt.size() > 256) return bad("cache_salt", "'cache_salt' is at most 256 bytes");
  }
  if (const auto stop = j.find("stop"); stop != j.end() && !stop->is_null()) {
    const json& s = *stop;
    if (s.is_string()) {
      g.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 16) {
      for (const json& x : s) {
        if (!x.is_string()) return bad("stop", "'stop' must be a string or an array of strings");
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      return bad("stop", "'stop' must be a string or an array of at most 16 strings");
    }
    for (const std::string& x : g.stop) {
      if (x.empty()) return bad("stop", "stop strings must not be empty");
      // The engine thread matches them against every sample's text: keep that cheap.
      if (x.size() > 256) return bad("stop", "stop strings must be at most 256 bytes");
    }
  }
  if (auto e = parse_prompt(j, chat, &g)) return e;
  if (g.prompt.empty()) return bad(chat ? "messages" : "prompt", "the prompt is empty");
  const uint64_t max_len = limits_.max_model_len;
  const uint64_t pool_tokens = limits_.pool_tokens;
  const uint64_t plen = g.prompt.size();
  if (plen > max_len || plen >= pool_tokens)
    return ApiError{.status = 400,
                    .message = "This model's maximum context length is " + std::to_string(max_len) +
                               " tokens (KV pool: " + std::to_string(pool_tokens) +
                               "); the prompt has " + std::to_string(plen) + " tokens",
                    .param = chat ? "messages" : "prompt",
                    .code = "context_length_exceeded"};
  const uint64_t room = std::min(max_len, pool_tokens) - plen;
  if (max_tokens) {
    if (*max_tokens < 1) return bad("max_tokens", "'max_tokens' must be at least 1");
    if (static_cast<uint64_t>(*max_tokens) > room)
      return ApiError{.status = 400,
                      .message = "max_tokens (" + std::to_string(*max_tokens) + ") + the prompt (" +
                                 std::to_string(plen) +
                                 " tokens) exceed what fits: " + std::to_string(room) +
                                 " tokens at most (--max-model-len " + std::to_string(max_len) +
                                 ", KV pool " + std::to_string(pool_tokens) + " tokens)",
                      .param = "max_tokens",
                      .code = "context_length_exceeded"};
    g.max_tokens = static_cast<uint32_t>(*max_tokens);
  } else {
    // OpenAI's completions default is 16; chat defaults to whatever fits (as vLLM).
    g.max_tokens = static_cast<uint32_t>(chat ? room : std::min<uint64_t>(16, room));
  }
  if (g.max_tokens == 0) return bad("max_tokens", "no room left for any output token");
  if (min_tokens) {
    if (*min_tokens < 0 || static_cast<uint64_t>(*min_tokens) > g.max_tokens)
      return bad("min_tokens", "'min_tokens' must be between 0 and max_tokens (" +
                                   std::to_string(g.max_tokens) + ")");
    g.sampling.min_tokens = static_cast<uint32_t>(*min_tokens);
  }
  const Status st = g.sampling.validate();
  if (!st.is_ok()) return bad("", st.message());
  return std::nullopt;
}

}  // namespace kvs
