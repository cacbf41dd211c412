// run_plan + report/JSON/SVG: the lessons' unit-convention cases end to end, the inputs'
// parsers (sizes, GPU presets, length distributions) and the levers.
#include <gtest/gtest.h>

#include <tuple>

#include <nlohmann/json.hpp>

#include "planner/gpu_presets.h"
#include "planner/plan_json.h"
#include "planner/plan_report.h"
#include "planner/plan_request.h"
#include "planner/plan_svg.h"
#include "planner/size_input.h"

namespace kvs {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

PlannerModel llama(uint32_t layers, uint32_t kv_heads) {
  PlannerModel m;
  m.name = "test-llama";
  m.display_name = "Test Llama";
  m.source = "test";
  m.num_attention_heads = 32;
  m.layers.assign(layers, KvLayer::full(kv_heads, 128, 128));
  return m;
}

SizeInput size(const char* text) {
  auto s = parse_size_input(text);
  EXPECT_TRUE(s.is_ok()) << text;
  return *s;
}

PlanRequest h100_lesson() {
  PlanRequest r;
  r.model = llama(32, 8);
  r.gpu_memory = size("80GB");
  r.utilization = 0.9;
  r.weights = size("16GB");
  r.weights_origin = "--weights";
  r.workspace = size("4GB");
  r.workload.context = 8192;
  return r;
}

TEST(PlanReport, H100LessonShowsBothUnitConventions) {
  auto out = run_plan(h100_lesson());
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out->plan.c_max_worst, 48u);
  ASSERT_TRUE(out->other_units.has_value());
  EXPECT_EQ(out->other_units->c_max_worst, 52u);
  const std::string note = unit_convention_note(*out);
  EXPECT_NE(note.find("C_max = 48 (48.43)"), std::string::npos) << note;
  EXPECT_NE(note.find("C_max = 52 (52.00)"), std::string::npos) << note;
  EXPECT_NE(note.find("1 GiB = 1.0737 GB"), std::string::npos) << note;
  const std::string report = render_plan_report(*out);
  EXPECT_NE(report.find("32 x 2 x 8 x 128 x 2 = 131,072 B"), std::string::npos);
  EXPECT_NE(report.find("= floor(52,000,000,000 / 1,073,741,824) = 48"), std::string::npos);
  EXPECT_NE(report.find("GB = 10^9 B, GiB = 2^30 B"), std::string::npos);
  EXPECT_NE(report.find(note), std::string::npos);
}

TEST(PlanReport, TwoH200sBothConventions) {
  PlanRequest r;
  r.model = llama(80, 8);
  r.tp = 2;
  r.gpu_memory = size("141GiB");
  r.utilization = 1.0;
  r.weights = size("141GiB");
  r.workspace = size("0");
  r.workload.context = 32768;
  auto out = run_plan(r);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(out->plan.c_max_worst, 14u);
  EXPECT_EQ(out->plan.total_gpu_memory, 282 * kGiB);
  EXPECT_EQ(out->other_units->c_max_worst, 13u);
  const std::string report = render_plan_report(*out);
  EXPECT_NE(report.find("Tensor parallel: 2 GPUs"), std::string::npos);
  EXPECT_NE(report.find("80 x 2 x 4 x 128 x 2 = 163,840 B"), std::string::npos);
}

TEST(PlanReport, TensorParallelMustDivideTheQueryHeads) {
  // vLLM refuses tp that does not divide the attention heads (verify_with_parallel_config). Qwen2.5
  // 7B (Qwen/Qwen2.5-7B config.json: 28 layers, 28 heads, 4 KV heads of 128) over 8 GPUs: the KV
  // heads replicate (8 is a multiple of 4), but 28 / 8 is not whole. Falcon 7B (tiiuae/falcon-7b:
  // 32 layers, 71 heads, one KV head of 64) likewise.
  for (const auto& [layers, heads, kv_heads, head_dim] :
       {std::tuple{28u, 28u, 4u, 128u}, std::tuple{32u, 71u, 1u, 64u}}) {
    PlanRequest r = h100_lesson();
    r.model = llama(layers, kv_heads);
    r.model.num_attention_heads = heads;
    r.model.layers.assign(layers, KvLayer::full(kv_heads, head_dim, head_dim));
    r.tp = 8;
    auto out = run_plan(r);
    ASSERT_FALSE(out.is_ok()) << heads;
    EXPECT_NE(out.status().message().find(std::to_string(heads) +
                                          " attention heads cannot be split over tp 8"),
              std::string::npos)
        << out.status().message();
    // tp 1 plans, and the "2x GPUs" lever says why tp 2 is no choice for 71 heads (28 / 2 works).
    r.tp = 1;
    out = run_plan(r);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    for (const Lever& l : out->levers) {
      if (l.name.rfind("more memory", 0) != 0) continue;
      EXPECT_EQ(l.applicable, heads % 2 == 0) << heads;
      if (!l.applicable) {
        EXPECT_NE(l.why_not.find("71 attention heads cannot be split over tp 2"), std::string::npos)
            << l.why_not;
      }
    }
  }
  // tp 4 on 28 heads (7 per GPU) and 4 KV heads (1 per GPU) is fine: 28 x 2 x 1 x 128 x 2 B.
  PlanRequest r = h100_lesson();
  r.model = llama(28, 4);
  r.model.num_attention_heads = 28;
  r.model.layers.assign(28, KvLayer::full(4, 128, 128));
  r.tp = 4;
  auto out = run_plan(r);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out->plan.per_token.bytes_per_token, 14'336u);
}

TEST(PlanReport, TensorParallelSplitsThatDoNotDivideAreRefused) {
  // Llama 3.1 70B's 8 KV heads (meta-llama/Llama-3.1-70B config.json) over 3 GPUs: vLLM refuses
  // it, and so does the plan, instead of counting 8 / 3 = 2 heads per GPU.
  PlanRequest r = h100_lesson();
  r.model = llama(80, 8);
  r.tp = 3;
  auto out = run_plan(r);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("8 KV heads cannot be split over tp 3"), std::string::npos)
      << out.status().message();
  // SmolLM2-135M (HuggingFaceTB/SmolLM2-135M config.json: 30 layers, 3 KV heads of 64): tp 1
  // plans, and the "2x GPUs" lever says why tp 2 is not a choice.
  r.model = llama(30, 3);
  r.model.num_attention_heads = 9;
  r.model.layers.assign(30, KvLayer::full(3, 64, 64));
  r.tp = 1;
  out = run_plan(r);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  bool seen = false;
  for (const Lever& l : out->levers) {
    if (l.name.rfind("more memory", 0) != 0) continue;
    seen = true;
    EXPECT_FALSE(l.applicable);
    EXPECT_NE(l.why_not.find("3 KV heads cannot be split over tp 2"), std::string::npos)
        << l.why_not;
  }
  EXPECT_TRUE(seen);
}

TEST(PlanReport, ChunkAwareWindowsOnlyWithMaxNumBatchedTokens) {
  // Mistral 7B v0.1 (mistralai/Mistral-7B-v0.1 config.json: 32 layers, 8 KV heads of 128,
  // sliding_window 4096) at 32K tokens.
  PlanRequest r = h100_lesson();
  r.model.layers.assign(32, KvLayer::sliding(8, 128, 128, 4096));
  r.workload.context = 32768;
  auto out = run_plan(r);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out->plan.request_paged, 4096u * 131'072);  // the default count: unchanged
  std::string report = render_plan_report(*out);
  EXPECT_EQ(report.find("windowed layers as held"), std::string::npos);
  EXPECT_FALSE(
      nlohmann::json::parse(render_plan_json(*out))["per_request"].contains("window_step_tokens"));
  // With the engine's 512-token steps a step ending at m holds [m - 4607, m): 4,607 tokens,
  // 288 blocks of 16 at m = 32,768 ([28161, 32768)) but 289 at m = 32,753 ([28146, 32753),
  // blocks 1759..2047), a step the request passed on its way: the plan counts 289.
  r.workload.window_chunk_tokens = 512;
  out = run_plan(r);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out->plan.request.total, 4607u * 131'072);
  EXPECT_EQ(out->plan.request_paged, 289u * 16 * 131'072);
  report = render_plan_report(*out);
  EXPECT_NE(report.find("windowed layers as held during a step of 512 tokens"), std::string::npos)
      << report;
  EXPECT_EQ(nlohmann::json::parse(render_plan_json(*out))["per_request"]["window_step_tokens"],
            512);
}

TEST(PlanReport, JsonHasExactBytes) {
  PlanRequest r = h100_lesson();
  r.workload.concurrency = 64;
  r.workload.avg_tokens = 2000;
  r.workload.shared_prefix = 1000;
  auto out = run_plan(r);
  ASSERT_TRUE(out.is_ok());
  const auto j = nlohmann::json::parse(render_plan_json(*out));
  EXPECT_EQ(j["per_token"]["bytes"].get<uint64_t>(), 131'072u);
  EXPECT_EQ(j["per_request"]["bytes"].get<uint64_t>(), kGiB);
  EXPECT_EQ(j["capacity"]["kv_budget_bytes"].get<uint64_t>(), 52'000'000'000u);
  EXPECT_EQ(j["capacity"]["c_max_worst"].get<uint64_t>(), 48u);
  EXPECT_EQ(j["other_unit_convention"]["c_max_worst"].get<uint64_t>(), 52u);
  EXPECT_FALSE(j["verdict"]["fits"].get<bool>());
  EXPECT_EQ(j["verdict"]["total_bytes"].get<uint64_t>(), 64 * kGiB);
  EXPECT_EQ(j["capacity"]["prefix_sharing"]["shared_tokens"].get<uint64_t>(), 992u);
  EXPECT_EQ(j["memory"]["gpu_memory"]["as_given"], "80GB");
  EXPECT_EQ(j["levers"][0]["name"], "as planned");
}

TEST(PlanReport, LeversBuyWhatTheyShould) {
  auto out = run_plan(h100_lesson());
  ASSERT_TRUE(out.is_ok());
  auto find = [&](const std::string& prefix) -> const Lever& {
    for (const Lever& l : out->levers)
      if (l.name.rfind(prefix, 0) == 0) return l;
    ADD_FAILURE() << prefix;
    return out->levers.front();
  };
  EXPECT_EQ(find("as planned").c_max, 48u);
  EXPECT_EQ(find("KV fp8").bytes_per_token, 65'536u);
  EXPECT_EQ(find("KV fp8").c_max, 96u);
  EXPECT_EQ(find("KV int4").bytes_per_token, 32u * 2 * 8 * 72);
  EXPECT_EQ(find("half the KV heads").c_max, 96u);
  EXPECT_EQ(find("half the context").c_max, 96u);
  // tp 2: 8 GB of weights and 4 KV heads per GPU: (72 - 8 - 4) GB / 0.5 GiB.
  EXPECT_EQ(find("more memory").c_max, 111u);
  EXPECT_TRUE(find("prefix sharing").applicable);
}

TEST(PlanReport, SvgIsAStandaloneDocument) {
  PlanRequest r = h100_lesson();
  r.workload.concurrency = 64;
  auto out = run_plan(r);
  ASSERT_TRUE(out.is_ok());
  const std::string svg = render_plan_svg(*out);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("C_max = 48"), std::string::npos);
  EXPECT_NE(svg.find("64 requests: does not fit"), std::string::npos);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST(PlanInputs, SizeConventions) {
  const SizeInput gb = size("80GB");
  EXPECT_EQ(gb.bytes, 80'000'000'000u);
  EXPECT_EQ(gb.convention, UnitConvention::kDecimal);
  EXPECT_EQ(gb.other_convention_bytes, 80 * kGiB);
  const SizeInput gib = size("75GiB");
  EXPECT_EQ(gib.bytes, 75 * kGiB);
  EXPECT_EQ(gib.convention, UnitConvention::kBinary);
  EXPECT_EQ(gib.other_convention_bytes, 75'000'000'000u);
  const SizeInput bare = size("4096");
  EXPECT_EQ(bare.convention, UnitConvention::kBytes);
  EXPECT_EQ(bare.other_convention_bytes, 4096u);
  EXPECT_EQ(size("1.5 TB").other_convention_bytes, 3 * (uint64_t{1} << 40) / 2);
  EXPECT_FALSE(parse_size_input("80 GX").is_ok());
  EXPECT_EQ(size_from_bytes(141 * kGiB, UnitConvention::kBinary, "").other_convention_bytes,
            141'000'000'000u);
}

TEST(PlanInputs, GpuPresets) {
  for (const char* name : {"H100-80GB", "h100", "H100 NVL", "H200", "A100-40GB", "A100-80GB", "L4",
                           "RTX-4090", "MI300X", "B200"})
    EXPECT_TRUE(find_gpu_preset(name).is_ok()) << name;
  // The totals the devices report (nvidia-smi / cudaMemGetInfo), not the marketed sizes read as
  // GiB: an H100 SXM reports 81,559 MiB (79.65 GiB, not 80), an H200 143,771 MiB (140.40 GiB,
  // not 141). The A100s report exactly 40 and 80 GiB.
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  EXPECT_EQ(find_gpu_preset("h100")->memory_bytes, 81'559 * kMiB);
  EXPECT_EQ(find_gpu_preset("h100")->memory_bytes, 85'520'809'984u);
  EXPECT_EQ(find_gpu_preset("H200")->memory_bytes, 143'771 * kMiB);
  EXPECT_EQ(find_gpu_preset("H200")->memory_bytes, 150'754'820'096u);
  EXPECT_EQ(find_gpu_preset("a100-40gb")->memory_bytes, 40 * kGiB);
  EXPECT_EQ(find_gpu_preset("a100-80gb")->memory_bytes, 80 * kGiB);
  EXPECT_EQ(find_gpu_preset("MI300X")->memory_bytes, 205'822'885'888u);  // rocm-smi's total
  for (const GpuPreset& p : gpu_presets()) {
    EXPECT_GT(std::string(p.source).size(), 10u) << p.name;  // every preset says where from
    EXPECT_NE(std::string(p.note).find('"'), std::string::npos) << p.name;  // the marketed size
  }
  auto bad = find_gpu_preset("tpu");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("H100-80GB"), std::string::npos);
}

TEST(PlanInputs, LengthDistributionAndWeights) {
  auto d = parse_length_distribution("# tokens weight\n100, 3\n1000 1\n\n5000\n");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  ASSERT_EQ(d->size(), 3u);
  EXPECT_EQ((*d)[0], (std::pair<uint64_t, double>{100, 3}));
  EXPECT_EQ((*d)[2], (std::pair<uint64_t, double>{5000, 1}));
  EXPECT_FALSE(parse_length_distribution("abc").is_ok());
  EXPECT_FALSE(parse_length_distribution("100 -1").is_ok());
  EXPECT_FALSE(parse_length_distribution("# nothing\n").is_ok());
  PlannerModel m = llama(32, 8);
  m.num_parameters = 8'030'261'248;
  m.weight_dtype = "bf16";
  auto w = default_weights(m, "");
  ASSERT_TRUE(w.is_ok());
  EXPECT_EQ(w->first.bytes, 16'060'522'496u);
  EXPECT_EQ(default_weights(m, "fp8")->first.bytes, 8'030'261'248u);
  m.num_parameters = 0;
  EXPECT_FALSE(default_weights(m, "").is_ok());
}

}  // namespace
}  // namespace kvs
