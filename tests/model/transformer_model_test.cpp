// The llama forward pass over the paged KV cache vs golden logits from an independent numpy
// implementation (tools/gen_model_golden.py, float64, unpaged attention).
#include "model/transformer_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "kernels/int8_isa.h"
#include "kvcache/kv_block_storage.h"
#include "model/gguf_file.h"
#include "model/model_paths.h"
#include "support/prerequisites.h"

namespace kvs {
namespace {

nlohmann::json load_golden() {
  std::ifstream in(std::string(KVSERVE_TEST_DATA_DIR) + "/model_golden.json");
  return nlohmann::json::parse(in);
}

struct Harness {
  GgufFile file;
  ModelSpec spec;
  TransformerModel model;
  KvBlockStorage storage;
  ThreadPool pool{2};
};

std::unique_ptr<Harness> open_default(KvDtype dtype, uint32_t block_size, uint32_t blocks) {
  auto file = GgufFile::open(default_model_path());
  if (!file.is_ok()) return nullptr;
  auto spec = model_spec_from_gguf(*file);
  EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto model = TransformerModel::load(*file, *spec);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  auto storage = KvBlockStorage::create({.num_blocks = blocks,
                                         .block_size = block_size,
                                         .layers = spec->n_layers,
                                         .kv_heads = spec->n_kv_heads,
                                         .head_dim = spec->head_dim,
                                         .k_dtype = dtype,
                                         .v_dtype = dtype});
  EXPECT_TRUE(storage.is_ok());
  return std::unique_ptr<Harness>(new Harness{
      std::move(file).value(), *spec, std::move(model).value(), std::move(storage).value()});
}

// Logical block i of the test sequence lives in physical block 63 - i (a reversed, non-contiguous
// layout); the harness's pool has 64 blocks.
uint32_t physical_block(uint32_t logical) { return 63 - logical; }

// Runs tokens [start, start + n) of `ids` as one chunk; returns logits for each of them.
std::vector<float> run_chunk(Harness& h, const std::vector<int32_t>& ids, int64_t start, int64_t n,
                             uint32_t block_size) {
  std::vector<uint32_t> table(64);
  for (uint32_t i = 0; i < 64; ++i) table[i] = physical_block(i);
  std::vector<int32_t> pos(n), ctx(n), rows(n);
  std::vector<int64_t> slots(n);
  std::vector<const uint32_t*> tabs(n, table.data());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = start + i;
    pos[i] = static_cast<int32_t>(t);
    ctx[i] = static_cast<int32_t>(t + 1);
    rows[i] = static_cast<int32_t>(i);
    slots[i] = int64_t{table[t / block_size]} * block_size + t % block_size;
  }
  std::vector<float> logits(n * h.spec.vocab_size);
  ForwardBatch b{.num_tokens = n,
                 .tokens = ids.data() + start,
                 .positions = pos.data(),
                 .slot_mapping = slots.data(),
                 .context_len = ctx.data(),
                 .block_table = tabs.data(),
                 .num_logits = n,
                 .logits_rows = rows.data()};
  h.model.forward(b, h.storage.layout(), h.pool, logits.data());
  return logits;
}

std::vector<float> prefill_all(Harness& h, const std::vector<int32_t>& ids, uint32_t block_size) {
  return run_chunk(h, ids, 0, static_cast<int64_t>(ids.size()), block_size);
}

// Greedy continuation of `ids` by `steps` tokens: one prefill, then one decode step per token.
std::vector<int32_t> greedy(Harness& h, std::vector<int32_t> ids, int steps) {
  const int64_t V = h.spec.vocab_size;
  std::vector<float> logits = prefill_all(h, ids, 16);
  std::vector<float> last(logits.end() - V, logits.end());
  std::vector<int32_t> out;
  for (int s = 0; s < steps; ++s) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    out.push_back(next);
    ids.push_back(next);
    last = run_chunk(h, ids, static_cast<int64_t>(ids.size()) - 1, 1, 16);
  }
  return out;
}

struct GoldenStats {
  double max_diff = 0, sum_sq = 0;
  int64_t count = 0, argmax_agree = 0, positions = 0;
  int64_t clear_positions = 0, clear_agree = 0;  // golden top-1 ahead of top-2 by > 0.5
};

GoldenStats compare_with_golden(Harness& h, const nlohmann::json& g) {
  const std::vector<int> probe = g["probe_ids"].get<std::vector<int>>();
  GoldenStats st;
  for (const auto& c : g["cases"]) {
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    const std::vector<float> logits = prefill_all(h, ids, 16);
    const int64_t V = h.spec.vocab_size;
    for (size_t t = 0; t < ids.size(); ++t) {
      const auto& pos = c["positions"][t];
      const float* row = logits.data() + t * V;
      const auto top_ids = pos["top_ids"].get<std::vector<int>>();
      const auto top_logits = pos["top_logits"].get<std::vector<double>>();
      const auto probe_logits = pos["probe_logits"].get<std::vector<double>>();
      ++st.positions;
      const bool agree = (std::max_element(row, row + V) - row) == top_ids[0];
      st.argmax_agree += agree;
      if (top_logits[0] - top_logits[1] > 0.5) {
        ++st.clear_positions;
        st.clear_agree += agree;
      }
      auto add = [&](int id, double golden) {
        const double d = std::abs(row[id] - golden);
        st.max_diff = std::max(st.max_diff, d);
        st.sum_sq += d * d;
        ++st.count;
      };
      for (size_t i = 0; i < top_ids.size(); ++i) add(top_ids[i], top_logits[i]);
      for (size_t i = 0; i < probe.size(); ++i) add(probe[i], probe_logits[i]);
    }
  }
  std::printf("max |logit - golden| = %.4f, rms = %.4f, argmax agrees at %lld/%lld positions\n",
              st.max_diff, std::sqrt(st.sum_sq / st.count), static_cast<long long>(st.argmax_agree),
              static_cast<long long>(st.positions));
  return st;
}

// Exact arithmetic (reference matmul): the forward pass itself (embedding, RMSNorm, RoPE layout,
// GQA over the paged cache with f32 K/V, SwiGLU, tied output) must reproduce the independent
// float64 implementation to float32 rounding, and its greedy continuations token for token.
TEST(TransformerModelTest, ReferenceKernelsMatchIndependentNumpyImplementation) {
  auto h = open_default(KvDtype::kF32, 16, 64);
  if (!h) SKIP_OR_FAIL_IN_CI() << "default model not found at " << default_model_path();
  h->model.set_reference_matmul(true);
  const nlohmann::json g = load_golden();
  const GoldenStats st = compare_with_golden(*h, g);
  EXPECT_LT(st.max_diff, 0.02);
  EXPECT_EQ(st.argmax_agree, st.positions);
  for (const auto& c : g["cases"])
    EXPECT_EQ(greedy(*h, c["ids"].get<std::vector<int32_t>>(), 16),
              c["greedy"].get<std::vector<int32_t>>())
        << c["name"];
}

// The fast kernels quantize activations to int8 per 32 elements (llama.cpp's approach; see
// kernels/matmul.h for the per-product bound), which perturbs logits by a few tenths. Bound the
// drift statistically and require the same argmax wherever the golden top-1 is clear.
TEST(TransformerModelTest, FastKernelsStayCloseToIndependentImplementation) {
  auto h = open_default(KvDtype::kF16, 16, 64);
  if (!h) SKIP_OR_FAIL_IN_CI() << "default model not found at " << default_model_path();
  const nlohmann::json g = load_golden();
  const GoldenStats st = compare_with_golden(*h, g);
  // Measured: rms 0.24, max 1.19, argmax 35/38 (the 3 misses are near-ties).
  EXPECT_LT(std::sqrt(st.sum_sq / st.count), 0.35);
  EXPECT_LT(st.max_diff, 1.6);
  EXPECT_EQ(st.clear_agree, st.clear_positions);
}

TEST(TransformerModelTest, BlockSizesGiveTheSameLogits) {
  const std::vector<int32_t> ids = {504,   3575, 282,  4649, 314,  253, 2240, 338, 553, 719, 253,
                                    37257, 282,  5922, 284,  6168, 327, 5034, 30,  657, 506, 253};
  std::vector<float> base;
  for (uint32_t bs : {1u, 16u, 256u}) {
    auto h = open_default(KvDtype::kF16, bs, 64);
    if (!h) SKIP_OR_FAIL_IN_CI() << "default model not found";
    const std::vector<float> logits = prefill_all(*h, ids, bs);
    if (base.empty()) {
      base = logits;
      continue;
    }
    ASSERT_EQ(logits.size(), base.size());
    for (size_t i = 0; i < logits.size(); ++i) ASSERT_EQ(logits[i], base[i]) << "block size " << bs;
  }
}

// The weights are packed at load (kernels/packed_layout.h) where the integer GEMM runs, and the
// file's pages under them are released. The packed model must give the logits of one whose
// weights were left in the file (the GEMM then packs each group as it goes), bit for bit, over a
// prefill and decode steps (the embedding rows come back out of the packed copy), and hold no
// more weight bytes than the file. The reference path still reads the released pages.
TEST(TransformerModelTest, WeightsPackedAtLoadGiveTheSameLogitsInTheFilesBytes) {
  if (int8_isa_active() == Int8Isa::kNone) GTEST_SKIP() << "no integer GEMM on this CPU";
  auto packed = open_default(KvDtype::kF16, 16, 64);
  if (!packed) SKIP_OR_FAIL_IN_CI() << "default model not found";
  set_int8_isa_for_test(Int8Isa::kNone);  // load() packs nothing
  auto unpacked = open_default(KvDtype::kF16, 16, 64);
  set_int8_isa_for_test(std::nullopt);
  ASSERT_TRUE(unpacked);
  EXPECT_EQ(unpacked->model.resident_weight_bytes(), unpacked->model.weight_bytes());
  EXPECT_EQ(unpacked->model.weight_pack_seconds(), 0.0);
  // SmolLM2's Q4_1 and Q8_0 pack into exactly their file bytes.
  EXPECT_EQ(packed->model.resident_weight_bytes(), packed->model.weight_bytes());
  EXPECT_GT(packed->model.weight_pack_seconds(), 0.0);
  const std::vector<int32_t> ids = {504, 3575, 282, 4649, 314, 253, 2240, 338, 553, 719, 253};
  EXPECT_EQ(prefill_all(*packed, ids, 16), prefill_all(*unpacked, ids, 16));
  EXPECT_EQ(greedy(*packed, ids, 6), greedy(*unpacked, ids, 6));
  for (int64_t t = 0; t < static_cast<int64_t>(ids.size()); ++t)
    ASSERT_EQ(run_chunk(*packed, ids, t, 1, 16), run_chunk(*unpacked, ids, t, 1, 16)) << t;
  packed->model.set_reference_matmul(true);
  unpacked->model.set_reference_matmul(true);
  EXPECT_EQ(prefill_all(*packed, ids, 16), prefill_all(*unpacked, ids, 16));
}

}  // namespace
}  // namespace kvs
