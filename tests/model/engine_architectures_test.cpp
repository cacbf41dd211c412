// The engine's architectures are one table (architecture.h): check_engine_support accepts
// exactly its rows, architecture_of describes each of them, and the messages list them.
#include <gtest/gtest.h>

#include "model/architecture.h"
#include "model/model_spec.h"

namespace kvs {
namespace {

// A small valid shape: 4 layers of 2 KV heads of 64, 8 query heads, embedding 512.
ModelSpec spec_of(const std::string& architecture, bool sliding) {
  ModelSpec s{.architecture = architecture,
              .n_layers = 4,
              .d_model = 512,
              .n_heads = 8,
              .n_kv_heads = 2,
              .head_dim = 64,
              .head_dim_v = 64,
              .ffn_dim = 1024,
              .vocab_size = 1000,
              .context_length = 2048,
              .rope_dim = 64,
              .query_pre_attn_scalar = 64};
  for (uint32_t i = 0; i < s.n_layers; ++i)
    s.kv_layers.push_back(sliding && i % 2 == 0 ? KvLayer::sliding(2, 64, 64, 128)
                                                : KvLayer::full(2, 64, 64));
  return s;
}

TEST(EngineArchitectures, TheListIsLlamaAndGemma3) {
  ASSERT_EQ(engine_architectures().size(), 2u);
  EXPECT_EQ(engine_architectures()[0].name, "llama");
  EXPECT_EQ(engine_architectures()[1].name, "gemma3");
  EXPECT_EQ(engine_architecture_names(), "llama and gemma3");
  EXPECT_EQ(find_engine_architecture("gemma2"), nullptr);
  EXPECT_EQ(find_engine_architecture("gemma3"), &engine_architectures()[1]);
}

TEST(EngineArchitectures, EveryRowIsSupportedAndDescribed) {
  for (const EngineArchitecture& row : engine_architectures()) {
    SCOPED_TRACE(std::string(row.name));
    const ModelSpec s = spec_of(std::string(row.name), false);
    EXPECT_TRUE(check_engine_support(s).is_ok()) << check_engine_support(s).to_string();
    const auto a = architecture_of(s);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    EXPECT_EQ(a->name, row.name);
    EXPECT_EQ(a->layers.size(), s.n_layers);
    // Sliding windows: run where the row says so, refused elsewhere.
    EXPECT_EQ(check_engine_support(spec_of(std::string(row.name), true)).is_ok(),
              row.sliding_windows);
  }
}

TEST(EngineArchitectures, OthersAreRefusedNamingTheList) {
  const ModelSpec s = spec_of("qwen2", false);
  const Status st = check_engine_support(s);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(st.message(),
            "model architecture 'qwen2' is not supported (kvserve runs llama and gemma3 models)");
  EXPECT_FALSE(architecture_of(s).is_ok());
  // llama: the head dimension is embedding / heads; gemma3 states key_length.
  ModelSpec wide = spec_of("llama", false);
  wide.d_model = 1024;
  EXPECT_EQ(check_engine_support(wide).message(),
            "attention.key_length != embedding/heads is not supported for llama");
  wide.architecture = "gemma3";
  EXPECT_TRUE(check_engine_support(wide).is_ok());
}

}  // namespace
}  // namespace kvs
