// The config dialects of issue 27, each from the public config.json of a real model (trimmed to
// the keys that size the cache, real values; tests/data/configs/README.md names each source).
// Every expectation is counted by hand in the comment above it: bf16 (2 B per element), one GPU,
// a 32K-token request unless said otherwise.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/layer_role.h"
#include "planner/model_config.h"
#include "planner/plan_hardware.h"
#include "planner/plan_json.h"
#include "planner/plan_report.h"
#include "planner/plan_request.h"
#include "planner/size_input.h"

namespace kvs {
namespace {

constexpr uint64_t k32K = 32768;

PlannerModel fixture(const std::string& name) {
  auto m = model_from_json_file(std::string(KVSERVE_TEST_DATA_DIR) + "/configs/" + name + ".json");
  EXPECT_TRUE(m.is_ok()) << name << ": " << m.status().to_string();
  return m.is_ok() ? *m : PlannerModel{};
}

KvModelShape bf16(const PlannerModel& m) { return m.kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1); }

// Layers per role, e.g. {{"full_attention", 4}, {"mamba1", 28}}.
std::map<std::string, uint32_t> role_counts(const PlannerModel& m) {
  std::map<std::string, uint32_t> out;
  for (const LayerRoleBytes& b : layer_role_breakdown(m.layer_roles(), bf16(m), k32K))
    out[layer_role_key(b.role)] = b.layers;
  return out;
}

uint64_t per_token(const PlannerModel& m) { return kv_shape_bytes(bf16(m)).bytes_per_token; }
uint64_t state(const PlannerModel& m) { return kv_shape_bytes(bf16(m)).state_bytes_per_sequence; }
uint64_t request(const PlannerModel& m, uint64_t n = k32K) { return kv_request_bytes(bf16(m), n); }

using Counts = std::map<std::string, uint32_t>;

TEST(HybridConfigs, Jamba15MiniAttentionEveryEighthLayerTheRestMamba1) {
  const PlannerModel m = fixture("jamba-1.5-mini");
  // attn_layer_period 8, attn_layer_offset 4: layers 4, 12, 20, 28 attend; 28 are Mamba1.
  EXPECT_EQ(role_counts(m), (Counts{{"full_attention", 4}, {"mamba1", 28}}));
  EXPECT_EQ(m.layer_count(), 32u);
  // KV: 4 layers x 2 x 8 KV heads x 128 (4096 / 32) x 2 B = 16,384 B/token.
  EXPECT_EQ(per_token(m), 16'384u);
  // Mamba1, d_inner = mamba_expand 2 x 4096 = 8192: conv (4 - 1) x 8192 x 2 B = 49,152 B, SSM
  // 8192 x 16 x 2 B = 262,144 B; 311,296 B per layer x 28 = 8,716,288 B per sequence.
  EXPECT_EQ(state(m), 8'716'288u);
  // 32K: 16,384 x 32,768 = 536,870,912 + 8,716,288 = 545,587,200 B (all 32 as attention, the
  // old count, was 32 x 4,096 x 32,768 = 4,294,967,296 B).
  EXPECT_EQ(request(m), 545'587'200u);
}

TEST(HybridConfigs, NemotronHNano30BReadsInfinityAndThePattern) {
  // The real file has "time_step_limit": [0.0, Infinity]: it must load.
  const PlannerModel m = fixture("nemotron-3-nano-30b-a3b");
  // MEMEM*EMEMEM*...: 23 M (Mamba2), 6 * (attention), 23 E (MoE only: nothing held).
  EXPECT_EQ(role_counts(m), (Counts{{"full_attention", 6}, {"mamba2", 23}, {"mlp_only", 23}}));
  // KV: 6 x 2 x 2 KV heads x 128 x 2 B = 6,144 B/token.
  EXPECT_EQ(per_token(m), 6'144u);
  // Mamba2, d_inner = 64 heads x 64 = 4096: conv 3 x (4096 + 2 x 8 groups x 128) = 18,432 x 2 B
  // = 36,864 B; SSM 64 x 64 x 128 = 524,288 x 2 B = 1,048,576 B; 1,085,440 B x 23 = 24,965,120.
  EXPECT_EQ(state(m), 24'965'120u);
  // 32K: 6,144 x 32,768 = 201,326,592 + 24,965,120 = 226,291,712 B.
  EXPECT_EQ(request(m), 226'291'712u);
}

TEST(HybridConfigs, NemotronH56BAttentionHeadDimAndPattern) {
  const PlannerModel m = fixture("nemotron-h-56b-base-8k");
  // 118 characters: 54 M, 10 *, 54 -.
  EXPECT_EQ(role_counts(m), (Counts{{"full_attention", 10}, {"mamba2", 54}, {"mlp_only", 54}}));
  // KV: 10 x 2 x 8 x 128 (attention_head_dim) x 2 B = 40,960 B/token.
  EXPECT_EQ(per_token(m), 40'960u);
  // Mamba2, d_inner = 256 x 64 = 16,384: conv 3 x (16,384 + 2 x 8 x 256) = 61,440 x 2 B =
  // 122,880 B; SSM 256 x 64 x 256 = 4,194,304 x 2 B = 8,388,608 B; 8,511,488 B x 54 =
  // 459,620,352 B.
  EXPECT_EQ(state(m), 459'620'352u);
}

TEST(HybridConfigs, Granite40HSmallLayerTypesMamba) {
  const PlannerModel m = fixture("granite-4.0-h-small");
  // layer_types: 36 "mamba" (Mamba2: mamba_n_heads is set), 4 "attention".
  EXPECT_EQ(role_counts(m), (Counts{{"full_attention", 4}, {"mamba2", 36}}));
  // KV: 4 x 2 x 8 x 128 x 2 B = 16,384 B/token.
  EXPECT_EQ(per_token(m), 16'384u);
  // Mamba2, d_inner = 128 x 64 = 8192: conv 3 x (8192 + 2 x 1 x 128) = 25,344 x 2 B = 50,688 B;
  // SSM 128 x 64 x 128 = 1,048,576 x 2 B = 2,097,152 B; 2,147,840 B x 36 = 77,322,240 B.
  EXPECT_EQ(state(m), 77'322'240u);
  // 32K: 16,384 x 32,768 = 536,870,912 + 77,322,240 = 614,193,152 B.
  EXPECT_EQ(request(m), 614'193'152u);
}

TEST(HybridConfigs, FalconH1AttentionAndMamba2InEveryLayer) {
  const PlannerModel m = fixture("falcon-h1-1.5b-base");
  // 24 layers, each attention + Mamba2 side by side: 24 geometry entries of each.
  EXPECT_EQ(role_counts(m), (Counts{{"full_attention", 24}, {"mamba2_parallel", 24}}));
  EXPECT_EQ(m.layer_count(), 24u);
  // KV: 24 x 2 x 2 x 128 x 2 B = 24,576 B/token (this part was right before).
  EXPECT_EQ(per_token(m), 24'576u);
  // Mamba2, d_inner = mamba_d_ssm 3072: conv 3 x (3072 + 2 x 1 x 256) = 10,752 x 2 B = 21,504 B;
  // SSM 48 x 64 x 256 = 786,432 x 2 B = 1,572,864 B; 1,594,368 B x 24 = 38,264,832 B.
  EXPECT_EQ(state(m), 38'264'832u);
  // 32K: 24,576 x 32,768 = 805,306,368 + 38,264,832 = 843,571,200 B.
  EXPECT_EQ(request(m), 843'571'200u);
}

TEST(HybridConfigs, MiniMaxText01LightningAttention) {
  const PlannerModel m = fixture("minimax-text-01");
  // attn_type_list: [0 x 7, 1] x 10: 10 softmax attention layers, 70 lightning.
  EXPECT_EQ(role_counts(m), (Counts{{"full_attention", 10}, {"lightning_attention", 70}}));
  // KV: 10 x 2 x 8 x 128 x 2 B = 40,960 B/token.
  EXPECT_EQ(per_token(m), 40'960u);
  // Lightning state: 64 heads x 128 x 128 x 2 B = 2,097,152 B per layer x 70 = 146,800,640 B.
  EXPECT_EQ(state(m), 146'800'640u);
  // 32K: 40,960 x 32,768 = 1,342,177,280 + 146,800,640 = 1,488,977,920 B (not 80 full layers:
  // 80 x 4,096 x 32,768 = 10,737,418,240 B).
  EXPECT_EQ(request(m), 1'488'977'920u);
}

TEST(HybridConfigs, Gemma3nLastFifteenLayersShareKv) {
  const PlannerModel m = fixture("gemma-3n-e4b");
  // 35 layers, [4 sliding, 1 full] x 7, the last 15 (20..34) shared: of layers 0..19, 16 slide
  // and 4 (4, 9, 14, 19) are full.
  EXPECT_EQ(role_counts(m),
            (Counts{{"full_attention", 4}, {"sliding_window", 16}, {"kv_shared", 15}}));
  // Per layer and token: 2 x 2 KV heads x 256 x 2 B = 2,048 B; 20 layers hold KV: 40,960 B/token.
  EXPECT_EQ(per_token(m), 40'960u);
  EXPECT_EQ(state(m), 0u);
  // 32K: 4 full x 2,048 x 32,768 = 268,435,456 + 16 sliding x 2,048 x 512 = 16,777,216
  // = 285,212,672 B (all 35 holding KV: 7 x 2,048 x 32,768 + 28 x 2,048 x 512 = 499,122,176 B).
  EXPECT_EQ(request(m), 285'212'672u);
}

TEST(HybridConfigs, Llama4ScoutThreeOfFourLayersChunked) {
  const PlannerModel m = fixture("llama-4-scout-17b-16e");
  // No layer_types, no_rope_layers [] -> every 4th layer (3, 7, ..., 47) NoPE and global: 12 full,
  // 36 chunked in chunks of attention_chunk_size 8192.
  EXPECT_EQ(role_counts(m), (Counts{{"full_attention", 12}, {"chunked_attention", 36}}));
  // Per layer and token: 2 x 8 x 128 x 2 B = 4,096 B.
  // 32K: 12 x 4,096 x 32,768 = 1,610,612,736 + 36 x 4,096 x 8,192 = 1,207,959,552
  // = 2,818,572,288 B; all 48 full would be 6,442,450,944 B, 2.29x as much.
  EXPECT_EQ(request(m), 2'818'572'288u);
}

TEST(HybridConfigs, StarCoderGptBigCodeKeys) {
  const PlannerModel m = fixture("starcoder");
  // n_layer 40, n_head 48, n_embd 6144 -> head_dim 128; multi_query: 1 KV head.
  EXPECT_EQ(m.layer_count(), 40u);
  EXPECT_EQ(m.hidden_size, 6'144u);
  EXPECT_EQ(m.kv_heads(), 1u);
  EXPECT_EQ(m.max_context, 8'192u);  // n_positions
  // 40 x 2 x 1 x 128 x 2 B = 20,480 B/token; 8K: x 8,192 = 167,772,160 B.
  EXPECT_EQ(per_token(m), 20'480u);
  EXPECT_EQ(request(m, 8192), 167'772'160u);
}

TEST(HybridConfigs, Falcon40BRefinedWebNHeadKv) {
  const PlannerModel m = fixture("falcon-40b-refinedweb");
  // n_head 128, n_head_kv 8, hidden 8192 -> head_dim 64; 60 layers.
  EXPECT_EQ(m.kv_heads(), 8u);
  // 60 x 2 x 8 x 64 x 2 B = 122,880 B/token (128 heads would be 16x: 1,966,080).
  EXPECT_EQ(per_token(m), 122'880u);
}

TEST(HybridConfigs, Olmo2Float32CheckpointHoldsWeightsAndKvIn16Bits) {
  const PlannerModel m = fixture("olmo-2-1124-7b");
  // Weights as an engine holds them (vLLM --dtype auto loads float32 in 16 bits): 2 B/parameter.
  EXPECT_EQ(m.weight_dtype, "bf16");
  auto per_param = weight_dtype_bytes(m.weight_dtype);
  ASSERT_TRUE(per_param.is_ok());
  EXPECT_EQ(*per_param, 2.0);
  // --kv-dtype auto: bf16, as vLLM runs a float32 checkpoint (--dtype auto).
  auto d = resolve_kv_dtype("auto", m);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(*d, KvDtype::kBF16);
  // 32 x 2 x 32 x 128 x 2 B = 524,288 B/token (f32 would be 1,048,576).
  EXPECT_EQ(kv_shape_bytes(m.kv_shape(*d, *d, 1)).bytes_per_token, 524'288u);
}

TEST(HybridConfigs, ReportNamesEveryLayerKindWithItsBytes) {
  PlanRequest r;
  r.model = fixture("jamba-1.5-mini");
  r.gpu_memory = size_from_bytes(80'000'000'000, UnitConvention::kBytes, "");
  r.weights = size_from_bytes(0, UnitConvention::kBytes, "");
  r.workspace = size_from_bytes(0, UnitConvention::kBytes, "");
  r.workload.context = k32K;
  r.workload.block_size = 0;
  auto out = run_plan(r);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const std::string text = render_plan_report(*out);
  EXPECT_NE(text.find("jamba, 32 layers: 4 full attention, 28 Mamba1"), std::string::npos) << text;
  EXPECT_NE(text.find("16,384 B/token"), std::string::npos) << text;
  EXPECT_NE(text.find("8,716,288 B per sequence"), std::string::npos) << text;
  EXPECT_NE(text.find("Mamba1 state per layer and sequence: conv (4 - 1) x 8,192 x 2 B (bf16)"),
            std::string::npos)
      << text;
  const auto j = nlohmann::json::parse(render_plan_json(*out));
  const auto& roles = j["per_token"]["by_layer_role"];
  EXPECT_EQ(roles["mamba1"]["layers"], 28);
  EXPECT_EQ(roles["mamba1"]["state_bytes_per_sequence"], 8'716'288);
  EXPECT_EQ(roles["full_attention"]["bytes_per_token"], 16'384);
  EXPECT_EQ(roles["full_attention"]["request_bytes"], 536'870'912);
  EXPECT_EQ(j["model"]["layers"], 32);
}

}  // namespace
}  // namespace kvs
