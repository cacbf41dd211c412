// model_config + catalog: config.json parsing (MHA/GQA/MQA, head_dim, K/V sizes, windows,
// layer_types, hybrid, MLA, MoE) and the built-in catalog's numbers.
#include "planner/model_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "planner/catalog.h"

namespace kvs {
namespace {

using nlohmann::json;

class Catalog : public ::testing::Test {
 protected:
  void SetUp() override {
    // The source tree's data/ (tests run from anywhere).
    ::setenv("KVSERVE_DATA_DIR", KVSERVE_TEST_DATA_DIR "/../../data", 1);
  }
  static uint64_t bpt(const std::string& name, KvDtype d = KvDtype::kBF16, uint32_t tp = 1) {
    auto m = load_catalog_model(name);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    if (!m.is_ok()) return 0;
    return kv_shape_bytes(m->kv_shape(d, d, tp)).bytes_per_token;
  }
};

TEST_F(Catalog, EveryEntryLoadsAndNamesItsSource) {
  auto names = catalog_names();
  ASSERT_TRUE(names.is_ok()) << names.status().to_string();
  EXPECT_GE(names->size(), 20u);
  for (const std::string& n : *names) {
    auto m = load_catalog_model(n);
    ASSERT_TRUE(m.is_ok()) << n << ": " << m.status().to_string();
    EXPECT_EQ(m->name, n);
    EXPECT_EQ(m->source.rfind("https://huggingface.co/", 0), 0u) << n;
    EXPECT_GT(m->num_parameters, 0u) << n;
    EXPECT_TRUE(validate_kv_shape(m->kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1)).is_ok()) << n;
  }
}

TEST_F(Catalog, LessonModels) {
  EXPECT_EQ(bpt("llama-3.1-8b"), 131'072u);
  EXPECT_EQ(bpt("Llama-3-8B"), 131'072u);  // alias, case-insensitive
  EXPECT_EQ(bpt("mistral-7b-v0.1"), 131'072u);
  EXPECT_EQ(bpt("mistral-7b-v0.3"), 131'072u);
  EXPECT_EQ(bpt("llama-3.3-70b"), 327'680u);
  EXPECT_EQ(bpt("llama-2-7b", KvDtype::kF16), 524'288u);
  EXPECT_EQ(bpt("mixtral-8x7b"), 131'072u);  // MoE: experts do not change KV
  EXPECT_EQ(bpt("qwen2.5-7b"), 57'344u);     // use_sliding_window false: full attention
  EXPECT_EQ(bpt("qwen2.5-72b"), 327'680u);
  EXPECT_EQ(bpt("qwen3-8b"), 147'456u);    // explicit head_dim 128
  EXPECT_EQ(bpt("deepseek-v3"), 70'272u);  // MLA
  EXPECT_EQ(bpt("falcon-7b"), 8'192u);     // multi_query: 1 KV head x 64
  EXPECT_EQ(bpt("smollm2-135m", KvDtype::kF16), 23'040u);
  EXPECT_EQ(bpt("gemma-3-27b"), 507'904u);        // text_config
  EXPECT_EQ(bpt("qwen3-next-80b-a3b"), 24'576u);  // 12 full-attention layers only
}

TEST_F(Catalog, VocabularyAndTiedEmbeddings) {
  auto llama = load_catalog_model("llama-3.1-8b");
  ASSERT_TRUE(llama.is_ok());
  EXPECT_EQ(llama->vocab_size, 128'256u);
  EXPECT_FALSE(llama->tied_embeddings);
  auto smol = load_catalog_model("smollm2-135m");
  ASSERT_TRUE(smol.is_ok());
  EXPECT_EQ(smol->vocab_size, 49'152u);
  EXPECT_TRUE(smol->tied_embeddings);
}

TEST_F(Catalog, SlidingAndHybridLayouts) {
  auto mistral = load_catalog_model("mistral-7b-v0.1");
  ASSERT_TRUE(mistral.is_ok());
  for (const KvLayer& l : mistral->layers) {
    EXPECT_EQ(l.kind, KvLayerKind::kSliding);
    EXPECT_EQ(l.window, 4096u);
  }
  auto gemma2 = load_catalog_model("gemma-2-9b");
  ASSERT_TRUE(gemma2.is_ok());
  ASSERT_EQ(gemma2->layers.size(), 42u);
  EXPECT_EQ(gemma2->layers[0].kind, KvLayerKind::kSliding);
  EXPECT_EQ(gemma2->layers[1].kind, KvLayerKind::kFull);
  auto gemma3 = load_catalog_model("gemma-3-27b");
  ASSERT_TRUE(gemma3.is_ok());
  const auto shape = gemma3->kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1);
  const KvShapeBytes b = kv_shape_bytes(shape);
  EXPECT_EQ(b.layers_by_kind[static_cast<int>(KvLayerKind::kFull)], 10u);  // layers 6, 12, ..
  EXPECT_EQ(b.layers_by_kind[static_cast<int>(KvLayerKind::kSliding)], 52u);
  EXPECT_EQ(gemma3->layers[5].kind, KvLayerKind::kFull);
  EXPECT_EQ(gemma3->layers[0].window, 1024u);
  // At 32K tokens the windowed layers hold 1,024 tokens each.
  EXPECT_EQ(kv_request_bytes(shape, 32768), 10u * 8192 * 32768 + 52u * 8192 * 1024);
  auto next = load_catalog_model("qwen3-next-80b-a3b");
  ASSERT_TRUE(next.is_ok());
  const KvShapeBytes nb = kv_shape_bytes(next->kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1));
  EXPECT_EQ(nb.layers_by_kind[static_cast<int>(KvLayerKind::kNoKv)], 36u);
  // (3 x (2 x 16 x 128 + 32 x 128) + 32 x 128 x 128) elements x 2 B per linear layer.
  EXPECT_EQ(nb.state_bytes_per_sequence, 36u * 1'097'728);
  EXPECT_EQ(next->num_experts, 512u);
}

TEST_F(Catalog, UnknownNameListsTheCatalog) {
  auto m = load_planner_model("no-such-model");
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("llama-3.1-8b"), std::string::npos);
}

TEST_F(Catalog, ConfigJsonFileAndDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / "kvserve_plan_cfg_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "num_hidden_layers": 16,
      "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
      "intermediate_size": 8192, "vocab_size": 128256, "torch_dtype": "bfloat16",
      "tie_word_embeddings": true, "max_position_embeddings": 131072})";
  auto by_dir = load_planner_model(dir.string());
  ASSERT_TRUE(by_dir.is_ok()) << by_dir.status().to_string();
  auto by_file = load_planner_model((dir / "config.json").string());
  ASSERT_TRUE(by_file.is_ok());
  // Llama 3.2 1B's shape: 16 x 2 x 8 x 64 x 2.
  EXPECT_EQ(kv_shape_bytes(by_dir->kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1)).bytes_per_token,
            32'768u);
  EXPECT_TRUE(by_dir->parameters_estimated);
  EXPECT_NEAR(static_cast<double>(by_dir->num_parameters), 1.236e9, 0.02e9);
  std::filesystem::remove_all(dir);
}

PlannerModel parse(const json& j) {
  auto m = model_from_hf_config(j, "test");
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? *m : PlannerModel{};
}

TEST(ModelConfig, MhaGqaMqaAndHeadDim) {
  const json base = {{"num_hidden_layers", 4}, {"hidden_size", 1024}, {"num_attention_heads", 16}};
  PlannerModel mha = parse(base);
  EXPECT_EQ(mha.kv_heads(), 16u);
  EXPECT_EQ(mha.layers[0].head_dim_k, 64u);
  json gqa = base;
  gqa["num_key_value_heads"] = 4;
  gqa["head_dim"] = 128;  // explicit head_dim wins over hidden / heads
  PlannerModel g = parse(gqa);
  EXPECT_EQ(g.kv_heads(), 4u);
  EXPECT_EQ(g.layers[0].head_dim_k, 128u);
  json mqa = base;
  mqa["multi_query"] = true;
  EXPECT_EQ(parse(mqa).kv_heads(), 1u);
  json kv = base;
  kv["k_head_dim"] = 192;
  kv["v_head_dim"] = 128;
  PlannerModel d = parse(kv);
  EXPECT_EQ(d.layers[0].head_dim_k, 192u);
  EXPECT_EQ(d.layers[0].head_dim_v, 128u);
}

TEST(ModelConfig, LayerTypesWindowsAndLinear) {
  json j = {{"num_hidden_layers", 4},
            {"hidden_size", 512},
            {"num_attention_heads", 8},
            {"num_key_value_heads", 2},
            {"sliding_window", 128},
            {"layer_types",
             {"sliding_attention", "full_attention", "linear_attention", "full_attention"}},
            {"linear_num_key_heads", 2},
            {"linear_num_value_heads", 4},
            {"linear_key_head_dim", 16},
            {"linear_value_head_dim", 16},
            {"linear_conv_kernel_dim", 4}};
  PlannerModel m = parse(j);
  ASSERT_EQ(m.layers.size(), 4u);
  EXPECT_EQ(m.layers[0], KvLayer::sliding(2, 64, 64, 128));
  EXPECT_EQ(m.layers[1], KvLayer::full(2, 64, 64));
  // (3 x (2 x 2 x 16 + 4 x 16) + 4 x 16 x 16) x 2 B (bf16 default).
  EXPECT_EQ(m.layers[2], KvLayer::no_kv((3 * (64 + 64) + 1024) * 2));
  j["layer_types"] = {"full_attention"};
  EXPECT_FALSE(model_from_hf_config(j, "test").is_ok());  // wrong length
  j["layer_types"] = {"mystery", "full_attention", "full_attention", "full_attention"};
  EXPECT_FALSE(model_from_hf_config(j, "test").is_ok());
}

TEST(ModelConfig, SlidingWindowPatternAndUseSlidingWindow) {
  json j = {{"num_hidden_layers", 12},
            {"hidden_size", 512},
            {"num_attention_heads", 8},
            {"sliding_window", 512},
            {"sliding_window_pattern", 6}};
  PlannerModel m = parse(j);
  int full = 0;
  for (const KvLayer& l : m.layers) full += l.kind == KvLayerKind::kFull;
  EXPECT_EQ(full, 2);
  EXPECT_EQ(m.layers[5].kind, KvLayerKind::kFull);
  EXPECT_EQ(m.layers[11].kind, KvLayerKind::kFull);
  json q = {{"num_hidden_layers", 2},
            {"hidden_size", 512},
            {"num_attention_heads", 8},
            {"sliding_window", 4096},
            {"use_sliding_window", false}};
  EXPECT_EQ(parse(q).layers[0].kind, KvLayerKind::kFull);
}

TEST(ModelConfig, MlaAndBadInput) {
  json j = {{"num_hidden_layers", 3},
            {"kv_lora_rank", 512},
            {"qk_rope_head_dim", 64},
            {"num_attention_heads", 16},
            {"hidden_size", 2048}};
  EXPECT_EQ(parse(j).layers[0], KvLayer::mla(512, 64));
  EXPECT_FALSE(model_from_hf_config(json{{"hidden_size", 10}}, "t").is_ok());
  EXPECT_FALSE(model_from_hf_config(json{{"num_hidden_layers", -1}}, "t").is_ok());
  EXPECT_FALSE(model_from_hf_config(json::array(), "t").is_ok());
  EXPECT_FALSE(model_from_hf_config(
                   json{{"num_hidden_layers", 2}, {"hidden_size", 100}, {"num_attention_heads", 3}},
                   "t")
                   .is_ok());  // head_dim not derivable
}

}  // namespace
}  // namespace kvs
