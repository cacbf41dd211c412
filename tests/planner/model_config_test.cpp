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

TEST(ModelConfig, MambaSsmDtypeAppliesToTheRecurrentStateOnly) {
  // Qwen3.5-27B's text_config (https://huggingface.co/Qwen/Qwen3.5-27B/blob/main/config.json):
  // 64 layers, every 4th full attention (24 heads, 4 KV heads of 256), the others Gated DeltaNet
  // with 16 key heads, 48 value heads, head dims 128, conv kernel 4; dtype bfloat16 and
  // mamba_ssm_dtype float32. vLLM holds the conv state in the model dtype and only the recurrent
  // state in mamba_ssm_dtype (MambaStateDtypeCalculator, vllm/model_executor/layers/mamba/
  // mamba_utils.py; Qwen3.5's verify_and_update_config copies mamba_ssm_dtype into
  // --mamba-ssm-cache-dtype).
  json text = {{"model_type", "qwen3_5_text"},
               {"num_hidden_layers", 64},
               {"hidden_size", 5120},
               {"num_attention_heads", 24},
               {"num_key_value_heads", 4},
               {"head_dim", 256},
               {"full_attention_interval", 4},
               {"linear_conv_kernel_dim", 4},
               {"linear_key_head_dim", 128},
               {"linear_num_key_heads", 16},
               {"linear_num_value_heads", 48},
               {"linear_value_head_dim", 128},
               {"max_position_embeddings", 262144},
               {"dtype", "bfloat16"},
               {"mamba_ssm_dtype", "float32"}};
  json types = json::array();
  for (int i = 0; i < 64; ++i)
    types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  text["layer_types"] = types;
  const json cfg = {{"model_type", "qwen3_5"}, {"text_config", text}};
  PlannerModel m = parse(cfg);
  ASSERT_EQ(m.layers.size(), 64u);
  // conv: 3 x (2 x 16 x 128 + 48 x 128) x 2 B (bf16) = 61,440 B;
  // recurrent: 48 x 128 x 128 x 4 B (f32) = 3,145,728 B. Before: both in f32, 3,268,608 B.
  constexpr uint64_t kConv = 3 * (2 * 16 * 128 + 48 * 128) * 2;
  constexpr uint64_t kRecurrent = 48 * 128 * 128 * 4;
  EXPECT_EQ(kConv, 61'440u);
  EXPECT_EQ(m.layers[0], KvLayer::no_kv(kConv + kRecurrent));
  EXPECT_EQ(m.layers[3], KvLayer::full(4, 256, 256));
  const KvShapeBytes b = kv_shape_bytes(m.kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1));
  EXPECT_EQ(b.state_bytes_per_sequence, 48u * 3'207'168);
  EXPECT_EQ(b.bytes_per_token, 16u * 2 * 4 * 256 * 2);
  bool noted = false;
  for (const std::string& n : m.notes)
    noted |= n.find("conv 61440 B (bf16) + recurrent 3145728 B (f32)") != std::string::npos;
  EXPECT_TRUE(noted);
  // Without mamba_ssm_dtype (Qwen3-Next-80B-A3B's config has none) both states are in the model
  // dtype: 61,440 + 48 x 128 x 128 x 2 = 61,440 + 1,572,864 B.
  text.erase("mamba_ssm_dtype");
  EXPECT_EQ(parse({{"text_config", text}}).layers[0], KvLayer::no_kv(kConv + kRecurrent / 2));
  text["mamba_ssm_dtype"] = "float8";
  EXPECT_FALSE(model_from_hf_config({{"text_config", text}}, "t").is_ok());
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

TEST(ModelConfig, Gemma3WithoutPatternUsesTransformersDefaults) {
  // google/gemma-3-27b-it config.json as published
  // (https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json; the same text_config is
  // in TensorRT-LLM's tests/unittest/_torch/modeling/test_modeling_gemma3.py): no layer_types, no
  // sliding_window_pattern, no max_position_embeddings. Gemma3TextConfig
  // (transformers/models/gemma3/configuration_gemma3.py) reads sliding_window_pattern with a
  // default of 6 and slides layer i unless (i + 1) % 6 == 0. Before issue 14 the planner windowed
  // all 62 layers (a request held 1,024 tokens in every layer).
  const json text = {{"head_dim", 128},
                     {"hidden_size", 5376},
                     {"intermediate_size", 21504},
                     {"model_type", "gemma3_text"},
                     {"num_attention_heads", 32},
                     {"num_hidden_layers", 62},
                     {"num_key_value_heads", 16},
                     {"query_pre_attn_scalar", 168},
                     {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                     {"sliding_window", 1024}};
  const json cfg = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                    {"model_type", "gemma3"},
                    {"text_config", text},
                    {"torch_dtype", "bfloat16"},
                    {"transformers_version", "4.50.0.dev0"}};
  PlannerModel m = parse(cfg);
  ASSERT_EQ(m.layers.size(), 62u);
  const KvModelShape shape = m.kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1);
  const KvShapeBytes b = kv_shape_bytes(shape);
  EXPECT_EQ(b.layers_by_kind[static_cast<int>(KvLayerKind::kFull)], 10u);  // layers 5, 11, .., 59
  EXPECT_EQ(b.layers_by_kind[static_cast<int>(KvLayerKind::kSliding)], 52u);
  EXPECT_EQ(m.layers[5], KvLayer::full(16, 128, 128));
  EXPECT_EQ(m.layers[60], KvLayer::sliding(16, 128, 128, 1024));
  EXPECT_EQ(m.max_context, 131072u);  // Gemma3TextConfig's max_position_embeddings
  EXPECT_EQ(kv_request_bytes(shape, 32768), 10u * 8192 * 32768 + 52u * 8192 * 1024);
  // The catalog's entry (which spells the pattern out) agrees.
  ::setenv("KVSERVE_DATA_DIR", KVSERVE_TEST_DATA_DIR "/../../data", 1);
  auto catalog = load_catalog_model("gemma-3-27b");
  ASSERT_TRUE(catalog.is_ok()) << catalog.status().to_string();
  EXPECT_EQ(catalog->layers, m.layers);

  // google/gemma-3-4b-it's text_config states only hidden_size 2560, intermediate_size 10240,
  // num_hidden_layers 34, rope_scaling and sliding_window 1024: the 8 query heads, 4 KV heads
  // and head_dim 256 are Gemma3TextConfig's defaults (hidden / heads would give 320).
  const json small = {{"model_type", "gemma3"},
                      {"text_config",
                       {{"hidden_size", 2560},
                        {"intermediate_size", 10240},
                        {"model_type", "gemma3_text"},
                        {"num_hidden_layers", 34},
                        {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                        {"sliding_window", 1024}}},
                      {"torch_dtype", "bfloat16"}};
  PlannerModel s = parse(small);
  ASSERT_EQ(s.layers.size(), 34u);
  EXPECT_EQ(s.num_attention_heads, 8u);
  EXPECT_EQ(s.layers[0], KvLayer::sliding(4, 256, 256, 1024));
  EXPECT_EQ(s.layers[5], KvLayer::full(4, 256, 256));
  // A config that states its own layer_types keeps them.
  json listed = text;
  listed["num_hidden_layers"] = 2;
  listed["layer_types"] = {"full_attention", "sliding_attention"};
  PlannerModel l = parse({{"text_config", listed}});
  EXPECT_EQ(l.layers[0].kind, KvLayerKind::kFull);
  EXPECT_EQ(l.layers[1].kind, KvLayerKind::kSliding);
}

TEST(ModelConfig, FalconMultiQueryIgnoresNumKvHeads) {
  // tiiuae/falcon-7b's config.json (https://huggingface.co/tiiuae/falcon-7b) as transformers
  // writes it: FalconConfig (transformers/models/falcon/configuration_falcon.py) sets
  // num_kv_heads = num_attention_heads when absent, so a saved config says 71 next to
  // multi_query true and new_decoder_architecture false. FalconAttention
  // (transformers/models/falcon/modeling_falcon.py) uses config.num_kv_heads only "if
  // (self.new_decoder_architecture or not self.multi_query) else 1": one KV head of 4544 / 71 = 64.
  json falcon7b = {{"model_type", "falcon"},
                   {"hidden_size", 4544},
                   {"num_attention_heads", 71},
                   {"num_hidden_layers", 32},
                   {"num_kv_heads", 71},
                   {"multi_query", true},
                   {"new_decoder_architecture", false},
                   {"parallel_attn", true},
                   {"torch_dtype", "bfloat16"},
                   {"vocab_size", 65024}};
  PlannerModel m = parse(falcon7b);
  EXPECT_EQ(m.kv_heads(), 1u);
  EXPECT_EQ(kv_shape_bytes(m.kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1)).bytes_per_token,
            32u * 2 * 1 * 64 * 2);  // 8,192 B, not 71 x that
  // FalconConfig's default is multi_query True: a falcon config without the key is MQA too.
  falcon7b.erase("multi_query");
  EXPECT_EQ(parse(falcon7b).kv_heads(), 1u);
  // new_decoder_architecture true (the Falcon 40B / 180B layout): num_kv_heads applies.
  const json falcon40b = {
      {"model_type", "falcon"},          {"hidden_size", 8192}, {"num_attention_heads", 128},
      {"num_hidden_layers", 60},         {"num_kv_heads", 8},   {"multi_query", true},
      {"new_decoder_architecture", true}};
  EXPECT_EQ(parse(falcon40b).kv_heads(), 8u);
  falcon7b["multi_query"] = false;  // a non-MQA config keeps num_kv_heads
  EXPECT_EQ(parse(falcon7b).kv_heads(), 71u);
}

TEST(ModelConfig, Qwen2WindowsOnlyFromMaxWindowLayersAndOnlyWhenAskedTo) {
  // Qwen/Qwen2.5-7B-Instruct config.json
  // (https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json): 28 layers,
  // max_window_layers 28, sliding_window 131072, use_sliding_window false. transformers'
  // Qwen2Config (transformers/models/qwen2/configuration_qwen2.py) defaults use_sliding_window to
  // False and builds layer_types as "sliding_attention" if sliding_window is not None and
  // i >= max_window_layers (sliding_window is set to None unless use_sliding_window).
  json q = {{"model_type", "qwen2"},       {"hidden_size", 3584},
            {"num_attention_heads", 28},   {"num_hidden_layers", 28},
            {"num_key_value_heads", 4},    {"max_position_embeddings", 32768},
            {"max_window_layers", 28},     {"sliding_window", 131072},
            {"use_sliding_window", false}, {"torch_dtype", "bfloat16"}};
  auto windowed = [](const PlannerModel& m) {
    int n = 0;
    for (const KvLayer& l : m.layers) n += l.kind == KvLayerKind::kSliding;
    return n;
  };
  EXPECT_EQ(windowed(parse(q)), 0);
  // The same config with transformers' sliding_window default (4096) and no use_sliding_window:
  // still no window (the planner used to window all 28 layers here).
  q["sliding_window"] = 4096;
  q.erase("use_sliding_window");
  EXPECT_EQ(windowed(parse(q)), 0);
  // use_sliding_window true with max_window_layers 28 = num_hidden_layers: still none.
  q["use_sliding_window"] = true;
  EXPECT_EQ(windowed(parse(q)), 0);
  // max_window_layers 21: layers 21..27 slide, 0..20 stay full.
  q["max_window_layers"] = 21;
  PlannerModel m = parse(q);
  EXPECT_EQ(windowed(m), 7);
  EXPECT_EQ(m.layers[20], KvLayer::full(4, 128, 128));
  EXPECT_EQ(m.layers[21], KvLayer::sliding(4, 128, 128, 4096));
  // Qwen3 has the same rule and defaults (Qwen3Config): Qwen/Qwen3-8B states sliding_window
  // null and use_sliding_window false; without max_window_layers its default 28 applies.
  const json qwen3 = {{"model_type", "qwen3"},     {"hidden_size", 4096},
                      {"num_attention_heads", 32}, {"num_hidden_layers", 36},
                      {"num_key_value_heads", 8},  {"head_dim", 128},
                      {"sliding_window", 4096},    {"use_sliding_window", true}};
  EXPECT_EQ(windowed(parse(qwen3)), 36 - 28);
  // Mistral keeps its rule: sliding_window on every layer.
  const json mistral = {{"model_type", "mistral"},         {"hidden_size", 4096},
                        {"num_attention_heads", 32},       {"num_hidden_layers", 32},
                        {"num_key_value_heads", 8},        {"sliding_window", 4096},
                        {"max_position_embeddings", 32768}};
  EXPECT_EQ(windowed(parse(mistral)), 32);
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
