// plan_engine_pool: the engine's pool sizing for the default model (needs scripts/fetch-model;
// skipped when the file is absent). The project's engine-agreement test compares these numbers
// with what `kvserve generate` reports at startup.
#include "planner/engine_pool.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "model/gguf_file.h"
#include "model/model_paths.h"
#include "model/model_spec.h"
#include "planner/plan_request.h"

namespace kvs {
namespace {

TEST(EnginePool, DefaultModelF16) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "run scripts/fetch-model for " << path;
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto spec = model_spec_from_gguf(*file);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->n_layers, 30u);
  EXPECT_EQ(spec->n_kv_heads, 3u);
  EXPECT_EQ(spec->head_dim, 64u);
  auto pool = plan_engine_pool(*spec, 64u << 20, 16, KvDtype::kF16, KvDtype::kF16);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  EXPECT_EQ(pool->bytes_per_token, 23'040u);
  EXPECT_EQ(pool->formula, "30 x 2 x 3 x 64 x 2 = 23,040 B");
  EXPECT_EQ(pool->block_bytes, 368'640u);
  EXPECT_EQ(pool->num_blocks, 182u);  // floor(67,108,864 / 368,640)
  EXPECT_EQ(pool->num_tokens, 2'912u);
  EXPECT_EQ(pool->pool_bytes, 67'092'480u);
}

TEST(EnginePool, SyntheticSpecAndErrors) {
  ModelSpec spec;
  spec.n_layers = 32;
  spec.n_kv_heads = 8;
  spec.head_dim = 128;
  auto pool = plan_engine_pool(spec, 1u << 30, 16, KvDtype::kQ8_0, KvDtype::kQ8_0);
  ASSERT_TRUE(pool.is_ok());
  EXPECT_EQ(pool->bytes_per_token, 32u * 2 * 8 * 136);
  EXPECT_EQ(pool->num_blocks, (uint64_t{1} << 30) / (16 * pool->bytes_per_token));
  EXPECT_FALSE(plan_engine_pool(spec, 1000, 16, KvDtype::kF16, KvDtype::kF16).is_ok());
  EXPECT_FALSE(plan_engine_pool(spec, 1u << 30, 0, KvDtype::kF16, KvDtype::kF16).is_ok());
  EXPECT_FALSE(plan_engine_pool(spec, 1u << 30, 257, KvDtype::kF16, KvDtype::kF16).is_ok());
  spec.head_dim = 80;
  EXPECT_FALSE(plan_engine_pool(spec, 1u << 30, 16, KvDtype::kQ4_0, KvDtype::kQ4_0).is_ok());
}

TEST(EnginePool, FromPlannerModelAndThroughRunPlan) {
  PlannerModel m;
  m.name = "smol";
  m.num_attention_heads = 9;
  m.hidden_size = 576;
  m.layers.assign(30, KvLayer::full(3, 64, 64));
  auto spec = engine_spec_from_planner_model(m);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->n_layers, 30u);
  EXPECT_EQ(spec->n_kv_heads, 3u);
  EXPECT_EQ(spec->head_dim, 64u);
  PlanRequest r;
  r.model = m;
  r.k_dtype = r.v_dtype = KvDtype::kF16;
  r.gpu_memory = *parse_size_input("8GiB");
  r.workload.context = 2048;
  r.kv_cache_memory = *parse_size_input("64MiB");
  r.engine_spec = *spec;
  auto out = run_plan(r);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  ASSERT_TRUE(out->engine_pool.has_value());
  EXPECT_EQ(out->engine_pool->num_blocks, 182u);
  EXPECT_EQ(out->plan.per_token.bytes_per_token, out->engine_pool->bytes_per_token);
  // Shapes the engine cannot run are refused, naming why.
  m.layers[3] = KvLayer::sliding(3, 64, 64, 512);
  EXPECT_EQ(engine_spec_from_planner_model(m).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kvs
