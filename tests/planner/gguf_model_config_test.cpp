// model_from_gguf: the planner reads a GGUF's metadata (never its weights) into layers.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/gguf_file.h"
#include "model/gguf_writer.h"
#include "model/model_paths.h"
#include "model/model_spec.h"
#include "planner/catalog.h"
#include "planner/model_config.h"
#include "support/prerequisites.h"

namespace kvs {
namespace {

Result<PlannerModel> from_writer(const GgufWriter& w) {
  auto f = GgufFile::parse_bytes(w.finish());
  if (!f.is_ok()) return f.status();
  return model_from_gguf(*f, "test.gguf");
}

TEST(GgufModelConfig, DefaultModel) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path))
    SKIP_OR_FAIL_IN_CI() << "run scripts/fetch-model for " << path;
  auto m = load_planner_model(path);  // detected as GGUF by its magic
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->architecture, "llama");
  EXPECT_EQ(m->layers.size(), 30u);
  EXPECT_EQ(m->kv_heads(), 3u);
  EXPECT_EQ(kv_shape_bytes(m->kv_shape(KvDtype::kF16, KvDtype::kF16, 1)).bytes_per_token, 23'040u);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok());
  ASSERT_TRUE(m->weight_bytes.has_value());
  EXPECT_EQ(*m->weight_bytes, f->total_tensor_bytes());
  EXPECT_NEAR(static_cast<double>(m->num_parameters), 134.5e6, 1e6);
  EXPECT_EQ(m->vocab_size, 49'152u);
  EXPECT_TRUE(m->tied_embeddings);  // no output.weight: the LM head is the embedding
}

TEST(GgufModelConfig, SlidingWindowGemma2AndKvLengths) {
  GgufWriter w;
  w.add_string("general.architecture", "gemma2");
  w.add_uint32("gemma2.block_count", 4);
  w.add_uint32("gemma2.embedding_length", 2304);
  w.add_uint32("gemma2.attention.head_count", 8);
  w.add_uint32("gemma2.attention.head_count_kv", 4);
  w.add_uint32("gemma2.attention.key_length", 256);
  w.add_uint32("gemma2.attention.value_length", 256);
  w.add_uint32("gemma2.attention.sliding_window", 4096);
  w.add_tensor("t", {32}, 0, std::vector<uint8_t>(128));  // f32
  auto m = from_writer(w);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->layers[0], KvLayer::sliding(4, 256, 256, 4096));
  EXPECT_EQ(m->layers[1], KvLayer::full(4, 256, 256));
  EXPECT_EQ(*m->weight_bytes, 128u);
  EXPECT_EQ(m->num_parameters, 32u);
}

TEST(GgufModelConfig, NoHeadCountKvMeansMultiHeadAttention) {
  // llama.cpp's convert_hf_to_gguf.py writes no head_count_kv for GPT-2 (GPT2Model's
  // set_gguf_parameters: block_count, context_length, embedding_length, feed_forward_length,
  // head_count, layer_norm_eps), and llama.cpp then uses n_head_kv = n_head. The values are
  // openai-community/gpt2's config.json (n_layer 12, n_head 12, n_embd 768, n_ctx 1024,
  // layer_norm_epsilon 1e-5). Loading must not fail: 12 KV heads of 768 / 12 = 64.
  GgufWriter w;
  w.add_string("general.architecture", "gpt2");
  w.add_uint32("gpt2.block_count", 12);
  w.add_uint32("gpt2.context_length", 1024);
  w.add_uint32("gpt2.embedding_length", 768);
  w.add_uint32("gpt2.feed_forward_length", 4 * 768);
  w.add_uint32("gpt2.attention.head_count", 12);
  w.add_float32("gpt2.attention.layer_norm_epsilon", 1e-5f);
  auto f = GgufFile::parse_bytes(w.finish());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto spec = model_spec_from_gguf(*f);  // the engine's reader
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->n_kv_heads, 12u);
  EXPECT_EQ(spec->head_dim, 64u);
  EXPECT_TRUE(spec->uniform_full_attention());
  auto m = model_from_gguf(*f, "gpt2.gguf");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  ASSERT_EQ(m->layers.size(), 12u);
  EXPECT_EQ(m->layers[0], KvLayer::full(12, 64, 64));
  EXPECT_EQ(m->max_context, 1024u);
  // 12 x 2 x 12 x 64 x 2 = 36,864 B per token in f16.
  EXPECT_EQ(kv_shape_bytes(m->kv_shape(KvDtype::kF16, KvDtype::kF16, 1)).bytes_per_token, 36'864u);
  // The same for a llama-architecture file without the key: the engine's own checks pass it.
  GgufWriter l;
  l.add_string("general.architecture", "llama");
  l.add_uint32("llama.block_count", 2);
  l.add_uint32("llama.context_length", 2048);
  l.add_uint32("llama.embedding_length", 256);
  l.add_uint32("llama.feed_forward_length", 512);
  l.add_uint32("llama.attention.head_count", 4);
  l.add_uint32("llama.vocab_size", 100);
  auto lf = GgufFile::parse_bytes(l.finish());
  ASSERT_TRUE(lf.is_ok());
  auto ls = model_spec_from_gguf(*lf);
  ASSERT_TRUE(ls.is_ok()) << ls.status().to_string();
  EXPECT_EQ(ls->n_kv_heads, 4u);
  EXPECT_TRUE(check_engine_support(*ls).is_ok()) << check_engine_support(*ls).to_string();
}

TEST(GgufModelConfig, PerLayerKvHeadsAndDifferentKv) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 3);
  w.add_uint32("llama.embedding_length", 512);
  w.add_uint32("llama.attention.head_count", 8);
  const int32_t kv[] = {2, 4, 0};  // the last layer has no attention
  w.add_int32_array("llama.attention.head_count_kv", kv);
  w.add_uint32("llama.attention.key_length", 96);
  w.add_uint32("llama.attention.value_length", 64);
  auto m = from_writer(w);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->layers[0], KvLayer::full(2, 96, 64));
  EXPECT_EQ(m->layers[1], KvLayer::full(4, 96, 64));
  EXPECT_EQ(m->layers[2].kind, KvLayerKind::kNoKv);
}

TEST(GgufModelConfig, MlaDeepseek2) {
  GgufWriter w;
  w.add_string("general.architecture", "deepseek2");
  w.add_uint32("deepseek2.block_count", 61);
  w.add_uint32("deepseek2.embedding_length", 7168);
  w.add_uint32("deepseek2.attention.head_count", 128);
  w.add_uint32("deepseek2.attention.kv_lora_rank", 512);
  w.add_uint32("deepseek2.rope.dimension_count", 64);
  w.add_uint32("deepseek2.expert_count", 256);
  auto m = from_writer(w);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->num_experts, 256u);
  EXPECT_EQ(kv_shape_bytes(m->kv_shape(KvDtype::kBF16, KvDtype::kBF16, 8)).bytes_per_token,
            70'272u);
}

TEST(GgufModelConfig, HybridFullAttentionInterval) {
  GgufWriter w;
  w.add_string("general.architecture", "qwen3next");
  w.add_uint32("qwen3next.block_count", 8);
  w.add_uint32("qwen3next.embedding_length", 2048);
  w.add_uint32("qwen3next.attention.head_count", 16);
  w.add_uint32("qwen3next.attention.head_count_kv", 2);
  w.add_uint32("qwen3next.attention.key_length", 256);
  w.add_uint32("qwen3next.full_attention_interval", 4);
  w.add_uint32("qwen3next.ssm.conv_kernel", 4);
  w.add_uint32("qwen3next.ssm.inner_size", 4096);
  w.add_uint32("qwen3next.ssm.state_size", 128);
  w.add_uint32("qwen3next.ssm.group_count", 16);
  auto m = from_writer(w);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const KvShapeBytes b = kv_shape_bytes(m->kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1));
  EXPECT_EQ(b.layers_by_kind[static_cast<int>(KvLayerKind::kFull)], 2u);
  EXPECT_EQ(b.bytes_per_token, 2u * 2 * 2 * 256 * 2);
  // f32 state: (3 x (2 x 16 x 128 + 4096) + 128 x 4096) x 4 B per linear layer.
  EXPECT_EQ(b.state_bytes_per_sequence, 6u * (3 * 8192 + 128 * 4096) * 4);
}

TEST(GgufModelConfig, MissingKeysAreErrorsNamingTheFile) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  auto m = from_writer(w);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("test.gguf"), std::string::npos);
  EXPECT_NE(m.status().message().find("block_count"), std::string::npos);
}

}  // namespace
}  // namespace kvs
