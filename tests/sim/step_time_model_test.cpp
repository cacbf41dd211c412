// The step-time model: the roofline's regimes for Llama 3.1 8B on an H100 (decode memory-bound,
// long prefill compute-bound), what tp, fp8 KV and swaps add, and the setup that feeds it (pool
// per rank as the planner computes it, refusals with clear messages, the CPU device file).
#include "sim/step_time_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "planner/capacity_plan.h"
#include "sim/sim_request.h"
#include "sim/sim_test_util.h"

namespace kvs {
namespace {

class StepTime : public ::testing::Test {
 protected:
  void SetUp() override { test::use_source_data_dir(); }
};

TEST_F(StepTime, DecodeIsMemoryBoundAndPrefillComputeBound) {
  const SimSetup s = test::resolve_or_die(test::llama_h100_args());
  const ModelCost& c = s.cost;
  // 2 x (8.03e9 - 2 x 128,256 x 4,096) FLOPs per token; the LM head per sampled row.
  EXPECT_NEAR(c.flops_per_token, 2 * (8'030'261'248.0 - 2 * 128'256.0 * 4096), 1);
  EXPECT_NEAR(c.flops_per_sampled_row, 2 * 128'256.0 * 4096, 1);
  EXPECT_NEAR(c.attention_flops_per_pair, 4.0 * 32 * 32 * 128, 1e-9);
  EXPECT_EQ(c.kv_bytes_per_token, 131072.0);

  StepWork decode;
  for (int i = 0; i < 8; ++i) decode.add_chunk(1000, 1, true);
  const kvs::StepTime d = step_time(s.device, c, decode, s.pool.block_bytes);
  EXPECT_GT(d.memory_s, d.compute_s);
  const double weights_s = c.weights_read_bytes / (3.35e12 * 0.85);
  const double kv_s = 8 * 1002 * 131072.0 / (3.35e12 * 0.85);
  EXPECT_NEAR(d.memory_s, weights_s + kv_s, 1e-12);
  EXPECT_NEAR(d.total_s, d.memory_s + 1.5e-3 + 8 * 20e-6, 1e-12);

  StepWork prefill;
  prefill.add_chunk(0, 8192, true);
  const kvs::StepTime p = step_time(s.device, c, prefill, s.pool.block_bytes);
  EXPECT_GT(p.compute_s, p.memory_s);
  const double pairs = 8192.0 * 8193 / 2;
  EXPECT_NEAR(prefill.attention_pairs, pairs, 1e-6);
  EXPECT_NEAR(
      p.compute_s,
      (c.flops_per_token * 8192 + c.flops_per_sampled_row + c.attention_flops_per_pair * pairs) /
          (989e12 * 0.65),
      1e-12);
  EXPECT_EQ(p.comm_s, 0);
}

// The roofline's terms are functions of their own (bench/sim_calibrate fits with them): the
// memory term counts copied KV twice (read and written), step_time divides by the effective
// bandwidth.
TEST_F(StepTime, TermsAreTheOnesStepTimeUses) {
  const SimSetup s = test::resolve_or_die(test::llama_h100_args());
  const ModelCost& c = s.cost;
  StepWork w;
  w.add_chunk(1000, 1, true);
  w.add_chunk(0, 64, false);
  const double plain = step_memory_bytes(c, w);
  EXPECT_NEAR(plain, c.weights_read_bytes + (1001 + 64 + 65) * 131072.0, 1e-3);
  w.copied_tokens = 10;
  EXPECT_NEAR(step_memory_bytes(c, w), plain + 20 * 131072.0, 1e-3);
  EXPECT_NEAR(step_linear_flops(c, w), c.flops_per_token * 65 + c.flops_per_sampled_row, 1);
  EXPECT_NEAR(step_attention_flops(c, w), c.attention_flops_per_pair * w.attention_pairs, 1);
  const kvs::StepTime t = step_time(s.device, c, w, s.pool.block_bytes);
  EXPECT_NEAR(t.memory_s,
              step_memory_bytes(c, w) / (s.device.memory_bandwidth * s.device.memory_efficiency),
              1e-15);
}

TEST_F(StepTime, TensorParallelismFp8KvAndSwaps) {
  SimArgs a = test::llama_h100_args();
  a.hw.tp = 2;
  const SimSetup tp2 = test::resolve_or_die(a);
  const SimSetup tp1 = test::resolve_or_die(test::llama_h100_args());
  EXPECT_NEAR(tp2.cost.flops_per_token, tp1.cost.flops_per_token / 2, 1);
  EXPECT_EQ(tp2.pool.bytes_per_token, 65536u);              // 4 of 8 KV heads per rank
  EXPECT_GT(tp2.pool.num_blocks, 2 * tp1.pool.num_blocks);  // and half the weights per rank
  StepWork w;
  w.add_chunk(0, 1024, true);
  EXPECT_GT(step_time(tp2.device, tp2.cost, w, tp2.pool.block_bytes).comm_s, 0);

  a = test::llama_h100_args();
  a.hw.kv_dtype = "fp8";
  const SimSetup fp8 = test::resolve_or_die(a);
  EXPECT_EQ(fp8.cost.kv_bytes_per_token, 65536.0);
  w = StepWork{};
  w.swapped_blocks = 10;
  EXPECT_NEAR(step_time(fp8.device, fp8.cost, w, fp8.pool.block_bytes).transfer_s,
              10.0 * fp8.pool.block_bytes / 50e9, 1e-12);
}

TEST_F(StepTime, PoolPerRankIsThePlannersBudget) {
  const SimSetup s = test::resolve_or_die(test::llama_h100_args());
  PlanInputs in;
  in.shape = s.plan.model.kv_shape(KvDtype::kBF16, KvDtype::kBF16, 1);
  in.gpu_memory_bytes = s.plan.gpu_memory.bytes;  // the preset's reported total
  in.weights_bytes = 8'030'261'248ull * 2;
  in.workload.context = 8192;
  auto plan = plan_capacity(in);
  ASSERT_TRUE(plan.is_ok());
  ASSERT_TRUE(s.kv_budget.has_value());
  EXPECT_EQ(*s.kv_budget, plan->kv_budget);
  EXPECT_EQ(s.pool.num_blocks, plan->kv_budget / (16 * 131072));
  EXPECT_EQ(s.max_model_len, 131072u);
  EXPECT_EQ(s.scheduler.max_num_seqs, 256u);
  EXPECT_EQ(s.vocab_size, 128256u);
}

TEST_F(StepTime, RefusalsNameTheProblem) {
  auto expect_error = [](SimArgs a, const char* text) {
    auto s = resolve_sim(a);
    ASSERT_FALSE(s.is_ok()) << text;
    EXPECT_NE(s.status().message().find(text), std::string::npos) << s.status().message();
  };
  SimArgs a = test::llama_h100_args();
  a.hw.model = "deepseek-v3";  // MLA latents: not K/V heads the engine's pool pages
  expect_error(a, "a model the engine can run");
  a = test::llama_h100_args();
  a.gpus = 3;
  a.hw.tp = 2;
  expect_error(a, "--gpus 3 is not a multiple of --tp 2");
  a = test::llama_h100_args();
  a.hw.gpu = "L4";  // 24 GiB: 16 GB of weights leave ~5.5 GB
  a.hw.workspace = "8GB";
  expect_error(a, "no memory left for the KV cache");
  a = test::llama_h100_args();
  a.preemption_mode = "swap";
  expect_error(a, "--preemption-mode swap needs --swap-space");
  a = test::llama_h100_args();
  a.device = "tpu";
  expect_error(a, "--device must be gpu or cpu");
  a = test::llama_h100_args();
  a.device = "cpu";
  expect_error(a, "--device cpu needs --kv-cache-memory");
}

TEST_F(StepTime, CpuDeviceFile) {
  const auto dir = std::filesystem::temp_directory_path() / "kvserve_sim_device_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "cpu.json").string();
  DeviceModel d;
  d.name = "cpu";
  d.description = "test";
  d.peak_flops = 40e9;
  d.attention_flops = 10e9;
  d.memory_bandwidth = 12e9;
  d.step_overhead_s = 1e-3;
  d.sequence_overhead_s = 5e-5;
  std::ofstream(path) << device_model_json(d, R"({"cpu_model": "test cpu"})");
  auto back = read_device_file(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->peak_flops, 40e9);
  EXPECT_EQ(back->attention_flops, 10e9);
  EXPECT_EQ(back->sequence_overhead_s, 5e-5);
  EXPECT_EQ(back->compute_efficiency, 1.0);
  std::ofstream(path) << R"({"linear_flops_per_s": -1, "memory_bandwidth_bytes_per_s": 1})";
  EXPECT_FALSE(read_device_file(path).is_ok());
  EXPECT_FALSE(read_device_file((dir / "missing.json").string()).is_ok());
  EXPECT_FALSE(parse_device_json("[]", "x").is_ok());
  std::filesystem::remove_all(dir);
}

// The calibrated CPU's linear rate by tokens in the step: interpolated in log(tokens), flat beyond
// the ends, used by step_time, written and read back, and malformed curves refused.
TEST_F(StepTime, LinearRateCurve) {
  DeviceModel d;
  d.peak_flops = 80e9;
  d.memory_bandwidth = 1e15;  // never memory-bound here
  d.linear_flops_by_tokens = {{2, 20e9}, {8, 60e9}, {64, 80e9}};
  EXPECT_EQ(linear_flops_at(d, 1, false), 20e9);
  EXPECT_EQ(linear_flops_at(d, 2, false), 20e9);
  EXPECT_NEAR(linear_flops_at(d, 4, false), 40e9, 1e3);  // halfway in log(tokens)
  EXPECT_EQ(linear_flops_at(d, 8, false), 60e9);
  EXPECT_NEAR(linear_flops_at(d, 16, false), 60e9 + 20e9 / 3, 1e3);
  EXPECT_EQ(linear_flops_at(d, 4096, false), 80e9);
  DeviceModel flat = d;
  flat.linear_flops_by_tokens.clear();
  flat.compute_efficiency = 0.5;
  EXPECT_EQ(linear_flops_at(flat, 4, false), 40e9);

  ModelCost c;
  c.flops_per_token = 1e9;
  StepWork two, many;
  two.add_chunk(0, 2, true);
  many.add_chunk(0, 64, true);
  // 2 GFLOP at 20 GFLOP/s; 64 GFLOP at 80 GFLOP/s.
  EXPECT_NEAR(step_time(d, c, two, 0).compute_s, 0.1, 1e-9);
  EXPECT_NEAR(step_time(d, c, many, 0).compute_s, 0.8, 1e-9);

  auto back = parse_device_json(device_model_json(d, ""), "round trip");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->linear_flops_by_tokens, d.linear_flops_by_tokens);
  const std::string head = R"({"linear_flops_per_s": 1e9, "memory_bandwidth_bytes_per_s": 1e9, )";
  for (const char* bad :
       {R"("linear_flops_by_tokens": 5})", R"("linear_flops_by_tokens": [[1, 2, 3]]})",
        R"("linear_flops_by_tokens": [[4, 1e9], [2, 1e9]]})",
        R"("linear_flops_by_tokens": [[1, 0]]})", R"("linear_flops_by_tokens": [[0.5, 1e9]]})"}) {
    auto r = parse_device_json(head + bad, "curve");
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("linear_flops_by_tokens"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvs
