// The planner's engine pool is the engine's pool: both come from kvcache's plan_kv_pool, and the
// planner's model of a GGUF comes from the engine's own reader. Checked on the default model
// (scripts/fetch-model; skipped when absent, a failure under CI=true) against an Engine built
// with the same budget: what used to take four full `kvserve generate` runs, one with a 1 GiB
// f32 pool.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "engine/engine.h"
#include "model/gguf_file.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"
#include "planner/model_config.h"
#include "planner/plan_request.h"
#include "support/prerequisites.h"

namespace kvs {
namespace {

// The default model as the engine loads it and as the planner reads it (the engine's own reader);
// the test is skipped (failed under CI=true) when it is absent.
class EnginePool : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = default_model_path();
    if (!std::filesystem::exists(path))
      SKIP_OR_FAIL_IN_CI() << "run scripts/fetch-model for " << path;
    auto engine = load_model(path);
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.is_ok());
    auto planner = model_from_gguf(*file, path);
    ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
    loaded_ = std::make_unique<LoadedModel>(std::move(engine).value());
    model_ = std::make_unique<PlannerModel>(std::move(planner).value());
    loaded = loaded_.get();
    model = model_.get();
  }
  LoadedModel* loaded = nullptr;
  const PlannerModel* model = nullptr;

 private:
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<PlannerModel> model_;
};

TEST_F(EnginePool, PlannerPoolEqualsTheEnginesToTheByte) {
  struct Case {
    const char* memory;
    uint32_t block_size;
    KvDtype dtype;
  };
  for (const Case& c :
       {Case{"64MiB", 16, KvDtype::kF16}, Case{"100MB", 7, KvDtype::kF16},
        Case{"1GiB", 256, KvDtype::kF32}, Case{"5MiB", 1, KvDtype::kBF16},
        Case{"64MiB", 16, KvDtype::kInt8Had}, Case{"64MiB", 16, KvDtype::kQ8_0Had}}) {
    SCOPED_TRACE(std::string(c.memory) + " bs " + std::to_string(c.block_size) + " " +
                 kv_dtype_name(c.dtype));
    PlanRequest r;
    r.model = *model;
    r.k_dtype = r.v_dtype = c.dtype;
    r.gpu_memory = *parse_size_input("8GiB");
    r.workload.context = 2048;
    r.workload.block_size = c.block_size;
    r.kv_cache_memory = *parse_size_input(c.memory);
    auto shape = engine_kv_shape(*model, c.dtype, c.dtype);
    ASSERT_TRUE(shape.is_ok()) << shape.status().to_string();
    r.engine_kv_shape = *shape;
    auto out = run_plan(r);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    ASSERT_TRUE(out->engine_pool.has_value());
    auto engine = Engine::create(*loaded->model, {.kv_cache_memory = r.kv_cache_memory->bytes,
                                                  .block_size = c.block_size,
                                                  .k_dtype = c.dtype,
                                                  .v_dtype = c.dtype,
                                                  .threads = 1});
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    const KvPoolPlan& e = (*engine)->kv_pool();
    const KvPoolPlan& p = *out->engine_pool;
    EXPECT_EQ(p.bytes_per_token, e.bytes_per_token);
    EXPECT_EQ(p.formula, e.formula);
    EXPECT_EQ(p.block_bytes, e.block_bytes);
    EXPECT_EQ(p.num_blocks, e.num_blocks);
    EXPECT_EQ(p.num_tokens, e.num_tokens);
    EXPECT_EQ(p.pool_bytes, e.pool_bytes);
    EXPECT_EQ(out->plan.per_token.bytes_per_token, e.bytes_per_token);
  }
}

// With per-layer formats (and the window and sink): the planner's pool, its capacity plan and the
// engine's pool agree to the byte.
TEST_F(EnginePool, PerLayerFormatsAgreeToTheByte) {
  const KvLayerFormats layers{.k = {{18, KvDtype::kInt4Chan}, {20, KvDtype::kInt4Chan}},
                              .v = {{1, KvDtype::kInt4Had}}};
  PlanRequest r;
  r.model = *model;
  r.k_dtype = KvDtype::kInt2Chan;
  r.v_dtype = KvDtype::kInt2Had;
  r.layer_formats = layers;
  r.gpu_memory = *parse_size_input("8GiB");
  r.workload.context = 2048;
  r.workload.block_size = 16;
  r.kv_cache_memory = *parse_size_input("100MB");
  r.engine_max_num_seqs = 8;
  r.engine_recent_window = 128;
  r.engine_attention_sink = true;
  auto shape = engine_kv_shape(*model, r.k_dtype, r.v_dtype);
  ASSERT_TRUE(shape.is_ok()) << shape.status().to_string();
  r.engine_kv_shape = *shape;
  auto out = run_plan(r);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  ASSERT_TRUE(out->engine_pool.has_value());
  EngineConfig c{.kv_cache_memory = r.kv_cache_memory->bytes,
                 .k_dtype = r.k_dtype,
                 .v_dtype = r.v_dtype,
                 .layer_formats = layers,
                 .threads = 1,
                 .max_num_seqs = 8,
                 .recent_window = 128,
                 .attention_sink = true};
  auto engine = Engine::create(*loaded->model, c);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const KvPoolPlan& e = (*engine)->kv_pool();
  const KvPoolPlan& p = *out->engine_pool;
  EXPECT_EQ(e.bytes_per_token, 3u * (28 * 32 + 2 * 48 + 29 * 20 + 36));
  EXPECT_EQ(p.bytes_per_token, e.bytes_per_token);
  EXPECT_EQ(p.formula, e.formula);
  EXPECT_EQ(p.block_bytes, e.block_bytes);
  EXPECT_EQ(p.num_blocks, e.num_blocks);
  EXPECT_EQ(p.pool_bytes, e.pool_bytes);
  EXPECT_EQ(p.recent_window_bytes + p.key_tail_bytes, e.recent_window_bytes + e.key_tail_bytes);
  EXPECT_EQ(out->plan.per_token.bytes_per_token, e.bytes_per_token);
}

TEST(EngineKvShape, DefaultModelNumbers) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path))
    SKIP_OR_FAIL_IN_CI() << "run scripts/fetch-model for " << path;
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok());
  auto model = model_from_gguf(*file, path);
  ASSERT_TRUE(model.is_ok());
  auto shape = engine_kv_shape(*model, KvDtype::kF16, KvDtype::kF16);
  ASSERT_TRUE(shape.is_ok());
  auto pool = plan_kv_pool(*shape, 64u << 20, 16);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  EXPECT_EQ(pool->bytes_per_token, 23'040u);
  EXPECT_EQ(pool->formula, "30 x 2 x 3 x 64 x 2 = 23,040 B");
  EXPECT_EQ(pool->block_bytes, 368'640u);
  EXPECT_EQ(pool->num_blocks, 182u);  // floor(67,108,864 / 368,640)
  EXPECT_EQ(pool->num_tokens, 2'912u);
  EXPECT_EQ(pool->pool_bytes, 67'092'480u);
}

TEST(EngineKvShape, SyntheticShapesAndErrors) {
  const KvUniformShape s{.layers = 32,
                         .kv_heads = 8,
                         .head_dim_k = 128,
                         .head_dim_v = 128,
                         .k_dtype = KvDtype::kQ8_0,
                         .v_dtype = KvDtype::kQ8_0};
  auto pool = plan_kv_pool(s, 1u << 30, 16);
  ASSERT_TRUE(pool.is_ok());
  EXPECT_EQ(pool->bytes_per_token, 32u * 2 * 8 * 136);
  EXPECT_EQ(pool->num_blocks, (uint64_t{1} << 30) / (16 * pool->bytes_per_token));
  EXPECT_FALSE(plan_kv_pool(s, 1000, 16).is_ok());
  EXPECT_FALSE(plan_kv_pool(s, 1u << 30, 0).is_ok());
  EXPECT_FALSE(plan_kv_pool(s, 1u << 30, 257).is_ok());
  KvUniformShape odd = s;
  odd.head_dim_k = odd.head_dim_v = 80;
  odd.k_dtype = odd.v_dtype = KvDtype::kQ4_0;
  EXPECT_FALSE(plan_kv_pool(odd, 1u << 30, 16).is_ok());

  PlannerModel m;
  m.name = "smol";
  m.layers.assign(30, KvLayer::full(3, 64, 64));
  ASSERT_TRUE(engine_kv_shape(m, KvDtype::kF16, KvDtype::kF16).is_ok());
  // Sliding layers with the same heads are paged in their own groups.
  m.layers[3] = KvLayer::sliding(3, 64, 64, 512);
  EXPECT_TRUE(engine_kv_shape(m, KvDtype::kF16, KvDtype::kF16).is_ok());
  // Shapes the engine cannot run are refused, naming why.
  m.layers[4] = KvLayer::full(4, 64, 64);
  EXPECT_EQ(engine_kv_shape(m, KvDtype::kF16, KvDtype::kF16).status().code(),
            StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kvs
