#include "model/chat_template.h"

#include <utility>

#include "model/tokenizer.h"

namespace kvs {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

// Undoes the escapes a Jinja string literal may use (\n, \t, \', \", \\).
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char next = s[++i];
    out += next == 'n' ? '\n' : next == 't' ? '\t' : next;
  }
  return out;
}

// The default system message of a ChatML template: a string literal
// '<|im_start|>system\n{text}<|im_end|>...' with no Jinja in {text}, in a template that tests
// the first message's role. nullopt when there is none (the system turn is then only rendered
// when the caller sends one).
std::optional<std::string> find_default_system(std::string_view t) {
  const bool tests_role = t.find("!= 'system'") != std::string_view::npos ||
                          t.find("!= \"system\"") != std::string_view::npos ||
                          t.find("== 'system'") != std::string_view::npos ||
                          t.find("== \"system\"") != std::string_view::npos;
  if (!tests_role) return std::nullopt;
  const std::string marker = std::string(kImStart) + "system";
  for (size_t at = t.find(marker); at != std::string_view::npos; at = t.find(marker, at + 1)) {
    if (at == 0 || (t[at - 1] != '\'' && t[at - 1] != '"')) continue;  // not a literal's start
    const char quote = t[at - 1];
    size_t body = at + marker.size();
    if (t.substr(body).starts_with("\n")) {
      body += 1;
    } else if (t.substr(body).starts_with("\\n")) {
      body += 2;
    } else {
      continue;
    }
    const size_t end = t.find(kImEnd, body);
    if (end == std::string_view::npos) continue;
    const std::string_view text = t.substr(body, end - body);
    bool literal = !text.empty();
    for (size_t i = 0; literal && i < text.size(); ++i) {
      const char c = text[i];
      if (c == '{' || c == '}' || (c == quote && (i == 0 || text[i - 1] != '\\'))) literal = false;
    }
    if (literal) return unescape(text);
  }
  return std::nullopt;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_template_string(std::string_view jinja) {
  if (jinja.empty()) return invalid_argument("empty chat template");
  if (jinja.find(kImStart) != std::string_view::npos) {
    return ChatTemplate(Kind::kChatMl, find_default_system(jinja));
  }
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) {
    return ChatTemplate(Kind::kLlama3, std::nullopt);
  }
  return ChatTemplate(Kind::kPlain, std::nullopt);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  std::string out;
  for (const ChatPiece& p : render_pieces(messages, add_generation_prompt)) out += p.text;
  return out;
}

std::vector<ChatPiece> ChatTemplate::render_pieces(std::span<const ChatMessage> messages,
                                                   bool add_generation_prompt) const {
  std::vector<ChatPiece> out;
  const auto scaffold = [&](std::string_view text) {
    if (text.empty()) return;
    if (!out.empty() && !out.back().is_content) {
      out.back().text += text;
    } else {
      out.push_back({std::string(text), false});
    }
  };
  const auto content = [&](std::string_view text) {
    if (!text.empty()) out.push_back({std::string(text), true});
  };
  switch (kind_) {
    case Kind::kChatMl: {
      const auto turn = [&](std::string_view role, std::string_view text, bool is_content) {
        scaffold(std::string(kImStart) + std::string(role) + "\n");
        if (is_content) {
          content(text);
        } else {
          scaffold(text);
        }
        scaffold(std::string(kImEnd) + "\n");
      };
      // Like the Jinja loop: the default system turn comes with the first message, so an empty
      // conversation gets none. It is the template's own text, not content.
      if (!messages.empty() && messages.front().role != "system" && default_system_) {
        turn("system", *default_system_, false);
      }
      for (const ChatMessage& m : messages) turn(m.role, m.content, true);
      if (add_generation_prompt) scaffold(std::string(kImStart) + "assistant\n");
      break;
    }
    case Kind::kLlama3:
      for (const ChatMessage& m : messages) {
        scaffold("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
        content(trim(m.content));
        scaffold("<|eot_id|>");
      }
      if (add_generation_prompt) scaffold("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case Kind::kPlain:
      for (const ChatMessage& m : messages) {
        scaffold(m.role + ": ");
        content(m.content);
        scaffold("\n");
      }
      if (add_generation_prompt) scaffold("assistant:");
      break;
  }
  return out;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer,
                                          std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, bool trust_content) const {
  std::string text;
  std::vector<std::pair<size_t, size_t>> content_ranges;
  for (const ChatPiece& p : render_pieces(messages, add_generation_prompt)) {
    if (p.is_content) content_ranges.emplace_back(text.size(), text.size() + p.text.size());
    text += p.text;
  }
  if (trust_content) return tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true);
  return tokenizer.encode_template(text, /*add_special=*/true, content_ranges);
}

}  // namespace kvs
