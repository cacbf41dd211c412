// The llama forward pass over the paged KV cache vs golden logits from an independent numpy
// implementation (tools/gen_model_golden.py, float64, unpaged attention).
#include "model/llama_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "model/gguf_file.h"
#include "model/model_paths.h"

namespace kvs {
namespace {

nlohmann::json load_golden() {
  std::ifstream in(std::string(KVSERVE_TEST_DATA_DIR) + "/model_golden.json");
  return nlohmann::json::parse(in);
}

struct Harness {
  GgufFile file;
  ModelSpec spec;
  LlamaModel model;
  KvBlockStorage storage;
  ThreadPool pool{2};
};

std::unique_ptr<Harness> open_default(KvDtype dtype, uint32_t block_size, uint32_t blocks) {
  auto file = GgufFile::open(default_model_path());
  if (!file.is_ok()) return nullptr;
  auto spec = model_spec_from_gguf(*file);
  EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto model = LlamaModel::load(*file, *spec);
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

// Runs `ids` as one prefill through a shuffled block table; returns logits for every position.
std::vector<float> prefill_all(Harness& h, const std::vector<int32_t>& ids, uint32_t block_size) {
  const int64_t T = static_cast<int64_t>(ids.size());
  const uint32_t nb = static_cast<uint32_t>((T + block_size - 1) / block_size);
  std::vector<uint32_t> table(nb);
  // Reverse order: logical block i lives in physical block nb - 1 - i.
  for (uint32_t i = 0; i < nb; ++i) table[i] = nb - 1 - i;
  std::vector<int32_t> pos(T), ctx(T), rows(T);
  std::vector<int64_t> slots(T);
  std::vector<const uint32_t*> tabs(T, table.data());
  for (int64_t t = 0; t < T; ++t) {
    pos[t] = static_cast<int32_t>(t);
    ctx[t] = static_cast<int32_t>(t + 1);
    rows[t] = static_cast<int32_t>(t);
    slots[t] = int64_t{table[t / block_size]} * block_size + t % block_size;
  }
  std::vector<float> logits(T * h.spec.vocab_size);
  ForwardBatch b{.num_tokens = T,
                 .tokens = ids.data(),
                 .positions = pos.data(),
                 .slot_mapping = slots.data(),
                 .context_len = ctx.data(),
                 .block_table = tabs.data(),
                 .num_logits = T,
                 .logits_rows = rows.data()};
  h.model.forward(b, h.storage.layout(), h.pool, logits.data());
  return logits;
}

TEST(LlamaModelTest, LogitsMatchIndependentNumpyImplementation) {
  auto h = open_default(KvDtype::kF32, 16, 64);
  if (!h) GTEST_SKIP() << "default model not found at " << default_model_path();
  const nlohmann::json g = load_golden();
  const std::vector<int> probe = g["probe_ids"].get<std::vector<int>>();
  double worst = 0;
  for (const auto& c : g["cases"]) {
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    const std::vector<float> logits = prefill_all(*h, ids, 16);
    const int64_t V = h->spec.vocab_size;
    for (size_t t = 0; t < ids.size(); ++t) {
      const auto& pos = c["positions"][t];
      const float* row = logits.data() + t * V;
      // Same argmax, and the golden top-20 and 64 probe logits within the bound.
      const int top = static_cast<int>(std::max_element(row, row + V) - row);
      const auto top_ids = pos["top_ids"].get<std::vector<int>>();
      const auto top_logits = pos["top_logits"].get<std::vector<double>>();
      // Ties within the error bound may swap the argmax; require it to be a near-top token.
      EXPECT_LE(top_logits[0] - row[top_ids[0]], 0.35)
          << c["name"] << " pos " << t << " argmax " << top;
      for (size_t i = 0; i < top_ids.size(); ++i) {
        const double d = std::abs(row[top_ids[i]] - top_logits[i]);
        worst = std::max(worst, d);
        EXPECT_LT(d, 0.35) << c["name"] << " pos " << t << " token " << top_ids[i];
      }
      const auto probe_logits = pos["probe_logits"].get<std::vector<double>>();
      for (size_t i = 0; i < probe.size(); ++i) {
        const double d = std::abs(row[probe[i]] - probe_logits[i]);
        worst = std::max(worst, d);
        EXPECT_LT(d, 0.35) << c["name"] << " pos " << t << " probe " << probe[i];
      }
    }
  }
  std::printf("worst |logit - golden| = %.4f\n", worst);
}

TEST(LlamaModelTest, BlockSizesGiveTheSameLogits) {
  const std::vector<int32_t> ids = {504,   3575, 282,  4649, 314,  253, 2240, 338, 553, 719, 253,
                                    37257, 282,  5922, 284,  6168, 327, 5034, 30,  657, 506, 253};
  std::vector<float> base;
  for (uint32_t bs : {1u, 16u, 256u}) {
    auto h = open_default(KvDtype::kF16, bs, 64);
    if (!h) GTEST_SKIP() << "default model not found";
    const std::vector<float> logits = prefill_all(*h, ids, bs);
    if (base.empty()) {
      base = logits;
      continue;
    }
    ASSERT_EQ(logits.size(), base.size());
    for (size_t i = 0; i < logits.size(); ++i) ASSERT_EQ(logits[i], base[i]) << "block size " << bs;
  }
}

}  // namespace
}  // namespace kvs
