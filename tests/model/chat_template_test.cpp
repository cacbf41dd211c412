#include "model/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/gguf_file.h"
#include "model/model_paths.h"
#include "support/prerequisites.h"

namespace kvs {
namespace {

// SmolLM2-135M-Instruct's tokenizer.chat_template, byte for byte (checked against the GGUF below).
// Expected renders were checked with Python's jinja2 on the real template.
constexpr std::string_view kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

// Qwen2.5's template (abridged to its system-message logic): escaped newlines, a default in the
// else branch, and a tools branch whose system turn is not a literal.
constexpr std::string_view kQwenLikeTemplate =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- endif %}{%- else %}{%- if messages[0]['role'] == 'system' "
    "%}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}{%- endif %}{%- endif %}"
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content "
    "+ '<|im_end|>' + '\\n' }}{%- endfor %}";

constexpr std::string_view kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

ChatTemplate parse(std::string_view t) {
  auto r = ChatTemplate::from_template_string(t);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(r).value();
}

TEST(ChatTemplateTest, SmolLm2AddsItsDefaultSystemMessage) {
  const ChatTemplate t = parse(kSmolLm2Template);
  EXPECT_EQ(t.kind(), ChatTemplate::Kind::kChatMl);
  ASSERT_TRUE(t.default_system_message().has_value());
  EXPECT_EQ(*t.default_system_message(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const std::vector<ChatMessage> msgs = {{"user", "What is 2+2?"}};
  EXPECT_EQ(t.render(msgs, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.render(msgs, false),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
}

TEST(ChatTemplateTest, SmolLm2KeepsTheCallersSystemMessage) {
  const ChatTemplate t = parse(kSmolLm2Template);
  const std::vector<ChatMessage> msgs = {
      {"system", "Be brief."}, {"user", "hi"}, {"assistant", "Hello!"}, {"user", "bye"}};
  EXPECT_EQ(t.render(msgs, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, EmptyConversationGetsOnlyTheGenerationPrompt) {
  // The Jinja loop never runs, so not even the default system turn is rendered.
  const ChatTemplate t = parse(kSmolLm2Template);
  EXPECT_EQ(t.render({}, true), "<|im_start|>assistant\n");
  EXPECT_EQ(t.render({}, false), "");
}

TEST(ChatTemplateTest, ChatMlReadsEscapedDefaultsAndSkipsNonLiterals) {
  const ChatTemplate t = parse(kQwenLikeTemplate);
  EXPECT_EQ(t.kind(), ChatTemplate::Kind::kChatMl);
  EXPECT_EQ(t.default_system_message().value_or("<none>"),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  const std::vector<ChatMessage> msgs = {{"user", "hi"}};
  EXPECT_EQ(t.render(msgs, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, PlainChatMlHasNoDefaultSystemMessage) {
  const ChatTemplate t = parse(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}");
  EXPECT_FALSE(t.default_system_message().has_value());
  const std::vector<ChatMessage> msgs = {{"user", "hi"}};
  EXPECT_EQ(t.render(msgs, true), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Llama3) {
  const ChatTemplate t = parse(kLlama3Template);
  EXPECT_EQ(t.kind(), ChatTemplate::Kind::kLlama3);
  const std::vector<ChatMessage> msgs = {{"system", "Be brief. "}, {"user", "\n hi \n"}};
  EXPECT_EQ(t.render(msgs, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, UnknownTemplatesFallBackToPlainText) {
  const ChatTemplate t = parse("{{ messages | tojson }}");
  EXPECT_EQ(t.kind(), ChatTemplate::Kind::kPlain);
  const std::vector<ChatMessage> msgs = {{"user", "hi"}, {"assistant", "yo"}};
  EXPECT_EQ(t.render(msgs, true), "user: hi\nassistant: yo\nassistant:");
  EXPECT_EQ(ChatTemplate::from_template_string("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ChatTemplate::of_kind(ChatTemplate::Kind::kChatMl).render(msgs, false),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n");
}

TEST(ChatTemplateTest, DefaultModelCarriesTheSmolLm2Template) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path))
    SKIP_OR_FAIL_IN_CI() << "model missing; run scripts/fetch-model";
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto jinja = file->get_string("tokenizer.chat_template");
  ASSERT_TRUE(jinja.is_ok()) << jinja.status().to_string();
  EXPECT_EQ(*jinja, kSmolLm2Template);
}

}  // namespace
}  // namespace kvs
