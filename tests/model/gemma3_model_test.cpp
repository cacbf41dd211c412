// Gemma 3 270M (scripts/fetch-model gemma3-270m) vs golden logits from Hugging Face transformers
// (tools/gen_gemma3_golden.py: the same GGUF dequantized by gguf-py, float32, eager attention).
// The forward pass runs over a paged pool with one table per layer group (3 full layers, 15
// sliding layers with a 512-token window -> 6 groups of 3), in scrambled physical blocks.
// Skipped when the model has not been downloaded (a failure under CI=true).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/thread_pool.h"
#include "kvcache/kv_block_storage.h"
#include "model/gguf_file.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"
#include "model/tokenizer.h"
#include "model/transformer_model.h"
#include "support/prerequisites.h"

namespace kvs {
namespace {

constexpr uint32_t kBlocksPerGroup = 64;  // 1,024 positions per group at block size 16
constexpr uint32_t kBlockSize = 16;

std::string gemma_path() { return default_model_dir() + "/gemma-3-270m-q4_k_m.gguf"; }

nlohmann::json load_golden() {
  std::ifstream in(std::string(KVSERVE_TEST_DATA_DIR) + "/gemma3_golden.json");
  return nlohmann::json::parse(in);
}

struct Harness {
  GgufFile file;
  ModelSpec spec;
  TransformerModel model;
  KvBlockStorage storage;
  uint32_t groups = 0;
  ThreadPool pool{2};
};

std::unique_ptr<Harness> open_gemma(KvDtype dtype) {
  auto file = GgufFile::open(gemma_path());
  if (!file.is_ok()) return nullptr;
  auto spec = model_spec_from_gguf(*file);
  EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
  if (!spec.is_ok()) return nullptr;
  auto model = TransformerModel::load(*file, *spec);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  if (!model.is_ok()) return nullptr;
  const KvCacheGroups& g = model->kv_groups();
  auto storage = KvBlockStorage::create({.num_blocks = kBlocksPerGroup * g.num_groups(),
                                         .block_size = kBlockSize,
                                         .layers = g.layers_per_group,
                                         .kv_heads = spec->n_kv_heads,
                                         .head_dim = spec->head_dim,
                                         .k_dtype = dtype,
                                         .v_dtype = dtype});
  EXPECT_TRUE(storage.is_ok());
  const uint32_t groups = g.num_groups();
  return std::unique_ptr<Harness>(new Harness{std::move(file).value(), *spec,
                                              std::move(model).value(), std::move(storage).value(),
                                              groups});
}

// Logical block i of group g lives in physical block g * 64 + (63 - i), interleaved with the
// other groups' blocks and reversed, so any mix-up of groups or tables shows.
uint32_t physical_block(uint32_t group, uint32_t logical) {
  return group * kBlocksPerGroup + (kBlocksPerGroup - 1 - logical);
}

// Runs tokens [start, start + n) of `ids` as one chunk; returns the logits of the tokens at
// `want` (positions in the sequence, each inside the chunk), in that order.
std::vector<float> run_chunk(Harness& h, const std::vector<int32_t>& ids, int64_t start, int64_t n,
                             const std::vector<int32_t>& want) {
  std::vector<std::vector<uint32_t>> tables(h.groups, std::vector<uint32_t>(kBlocksPerGroup));
  for (uint32_t g = 0; g < h.groups; ++g)
    for (uint32_t i = 0; i < kBlocksPerGroup; ++i) tables[g][i] = physical_block(g, i);
  std::vector<int32_t> pos(n), ctx(n), rows;
  std::vector<int64_t> slots(h.groups * n);
  std::vector<const uint32_t*> tabs(h.groups * n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = start + i;
    pos[i] = static_cast<int32_t>(t);
    ctx[i] = static_cast<int32_t>(t + 1);
    for (uint32_t g = 0; g < h.groups; ++g) {
      slots[g * n + i] = int64_t{tables[g][t / kBlockSize]} * kBlockSize + t % kBlockSize;
      tabs[g * n + i] = tables[g].data();
    }
  }
  for (int32_t p : want) rows.push_back(static_cast<int32_t>(p - start));
  std::vector<float> logits(rows.size() * h.spec.vocab_size);
  ForwardBatch b{.num_tokens = n,
                 .tokens = ids.data() + start,
                 .positions = pos.data(),
                 .num_groups = h.groups,
                 .slot_mapping = slots.data(),
                 .context_len = ctx.data(),
                 .block_table = tabs.data(),
                 .num_logits = static_cast<int64_t>(rows.size()),
                 .logits_rows = rows.data()};
  h.model.forward(b, h.storage.layout(), h.pool, logits.data());
  return logits;
}

// Prefill in chunks of `chunk` tokens (the window edge falls inside a chunk for 607 tokens);
// returns the logits at positions `want` (ascending), in that order.
std::vector<float> prefill(Harness& h, const std::vector<int32_t>& ids, int64_t chunk,
                           const std::vector<int32_t>& want) {
  std::vector<float> all;
  for (int64_t s = 0; s < static_cast<int64_t>(ids.size()); s += chunk) {
    const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(ids.size()) - s);
    std::vector<int32_t> here;
    for (int32_t p : want)
      if (p >= s && p < s + n) here.push_back(p);
    const std::vector<float> part = run_chunk(h, ids, s, n, here);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// Greedy continuation: prefill, then one decode step per token.
std::vector<int32_t> greedy(Harness& h, std::vector<int32_t> ids, int steps) {
  const int64_t V = h.spec.vocab_size;
  std::vector<float> last = prefill(h, ids, 256, {static_cast<int32_t>(ids.size()) - 1});
  std::vector<int32_t> out;
  for (int s = 0; s < steps; ++s) {
    out.push_back(argmax(last.data(), V));
    ids.push_back(out.back());
    const int32_t p = static_cast<int32_t>(ids.size()) - 1;
    last = run_chunk(h, ids, p, 1, {p});
  }
  return out;
}

// The golden greedy continuation is only determined while the golden top-1 is clearly ahead:
// the number of leading steps whose margin (top-1 minus top-2) exceeds `margin`.
size_t decided_steps(const nlohmann::json& p, double margin) {
  const auto m = p["greedy_margins"].get<std::vector<double>>();
  size_t n = 0;
  while (n < m.size() && m[n] > margin) ++n;
  return n;
}

struct Drift {
  double max_rel = 0;  // max |logit - golden| / max |golden logit| of that position
  double max_abs = 0, sum_sq = 0;
  int64_t count = 0, clear = 0, clear_agree = 0;
};

Drift compare(Harness& h, const nlohmann::json& g, int64_t chunk) {
  const auto probe = g["probe_ids"].get<std::vector<int>>();
  const int64_t V = h.spec.vocab_size;
  Drift d;
  for (const auto& p : g["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> want;
    for (const auto& pos : p["positions"]) want.push_back(pos["pos"].get<int32_t>());
    const std::vector<float> logits = prefill(h, ids, chunk, want);
    for (size_t k = 0; k < want.size(); ++k) {
      const auto& pos = p["positions"][k];
      const float* row = logits.data() + k * V;
      const auto top_ids = pos["top_ids"].get<std::vector<int>>();
      const auto top = pos["top_logits"].get<std::vector<double>>();
      const auto probes = pos["probe_logits"].get<std::vector<double>>();
      double scale = 0;
      for (double v : top) scale = std::max(scale, std::abs(v));
      for (double v : probes) scale = std::max(scale, std::abs(v));
      auto add = [&](int id, double golden) {
        const double diff = std::abs(row[id] - golden);
        d.max_abs = std::max(d.max_abs, diff);
        d.max_rel = std::max(d.max_rel, diff / scale);
        d.sum_sq += diff * diff;
        ++d.count;
      };
      for (size_t i = 0; i < top_ids.size(); ++i) add(top_ids[i], top[i]);
      for (size_t i = 0; i < probe.size(); ++i) add(probe[i], probes[i]);
      if (top[0] - top[1] > 0.5) {
        ++d.clear;
        d.clear_agree += argmax(row, V) == top_ids[0];
      }
    }
  }
  std::printf(
      "max |d| %.5f (relative %.2e), rms %.5f, argmax agrees at %lld/%lld clear positions\n",
      d.max_abs, d.max_rel, std::sqrt(d.sum_sq / static_cast<double>(d.count)),
      static_cast<long long>(d.clear_agree), static_cast<long long>(d.clear));
  return d;
}

TEST(Gemma3ModelTest, SpecReadFromTheGguf) {
  auto h = open_gemma(KvDtype::kF16);
  if (!h)
    SKIP_OR_FAIL_IN_CI() << "run scripts/fetch-model gemma3-270m (looked at " << gemma_path()
                         << ")";
  const nlohmann::json g = load_golden();
  const auto& c = g["config"];
  EXPECT_EQ(h->spec.n_layers, c["num_hidden_layers"].get<uint32_t>());
  EXPECT_EQ(h->spec.n_kv_heads, c["num_key_value_heads"].get<uint32_t>());
  EXPECT_EQ(h->spec.head_dim, c["head_dim"].get<uint32_t>());
  // transformers' layer_types: every 6th layer full, the rest sliding; the engine groups them
  // into one full group and five sliding groups of three layers.
  const KvCacheGroups& groups = h->model.kv_groups();
  EXPECT_EQ(groups.layers_per_group, 3u);
  ASSERT_EQ(groups.num_groups(), 6u);
  EXPECT_EQ(groups.windows[0], 0u);
  for (uint32_t i = 1; i < 6; ++i) EXPECT_EQ(groups.windows[i], 512u);
  const auto types = c["layer_types"].get<std::vector<std::string>>();
  for (size_t l = 0; l < types.size(); ++l) {
    const uint32_t w = groups.windows[groups.layer_slots[l].group];
    EXPECT_EQ(w == 0, types[l] == "full_attention") << "layer " << l;
  }
}

// Exact arithmetic (reference matmul, f32 KV): the architecture itself — (1 + w) norms before and
// after attention and MLP, QK-norm, two RoPE bases, the 512-token window over paged blocks,
// GeGLU, the scaled embedding, the tied output — must reproduce transformers.
TEST(Gemma3ModelTest, ReferenceKernelsMatchTransformers) {
  auto h = open_gemma(KvDtype::kF32);
  if (!h) SKIP_OR_FAIL_IN_CI() << "run scripts/fetch-model gemma3-270m";
  h->model.set_reference_matmul(true);
  const nlohmann::json g = load_golden();
  // Chunks of 97: the short prompts run in one chunk, the 607-token one in chunks, one of them
  // straddling the window edge at 512.
  const Drift d = compare(*h, g, 97);
  EXPECT_LT(d.max_rel, 1e-3);
  EXPECT_EQ(d.clear_agree, d.clear);
  for (const auto& p : g["prompts"]) {
    if (p["ids"].size() > 100) continue;  // the long prompt's greedy run is the fast test's
    const auto want = p["greedy"].get<std::vector<int32_t>>();
    const size_t n = decided_steps(p, 0.05);
    const auto got = greedy(*h, p["ids"].get<std::vector<int32_t>>(), static_cast<int>(n));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()))
        << p["name"] << ": greedy differs within the first " << n << " decided steps";
  }
}

// The fast kernels quantize activations to int8 (as llama.cpp does); bound the drift and require
// the golden argmax wherever it is clear. llama.cpp itself measures rms 0.35-0.43, max 1.96-2.56
// against the same golden file.
TEST(Gemma3ModelTest, FastKernelsStayCloseToTransformers) {
  auto h = open_gemma(KvDtype::kF16);
  if (!h) SKIP_OR_FAIL_IN_CI() << "run scripts/fetch-model gemma3-270m";
  const nlohmann::json g = load_golden();
  const int64_t V = h->spec.vocab_size;
  const Drift d = compare(*h, g, 256);
  // Measured (AVX2, Q5_0 through the 8-bit GEMM): rms 0.25, max 1.43, 9/9 (with Q5_0 exact:
  // rms 0.16, max 0.77; llama.cpp against the same file: rms 0.35-0.43, max 1.96-2.56, 8-9/9).
  EXPECT_LT(std::sqrt(d.sum_sq / static_cast<double>(d.count)), 0.35);
  EXPECT_LT(d.max_abs, 2.0);
  EXPECT_EQ(d.clear_agree, d.clear);
  // The golden greedy continuation, teacher-forced (one prefill of prompt + continuation): the
  // fast path's argmax must be the golden token wherever the golden top-1 leads by more than
  // twice the largest drift allowed above (a flip needs one logit up and one down); where it
  // leads by more than 0.5, at least 90% of the time. (Free-running greedy can part ways at the
  // first near-tie and never meet again: measured, "kjv" flips at a 0.63 margin.)
  int64_t firm = 0, firm_agree = 0, loose = 0, loose_agree = 0;
  for (const auto& p : g["prompts"]) {
    std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    const auto cont = p["greedy"].get<std::vector<int32_t>>();
    const auto margins = p["greedy_margins"].get<std::vector<double>>();
    const int32_t first = static_cast<int32_t>(ids.size()) - 1;
    ids.insert(ids.end(), cont.begin(), cont.end() - 1);
    std::vector<int32_t> want;
    for (size_t i = 0; i < cont.size(); ++i) want.push_back(first + static_cast<int32_t>(i));
    const std::vector<float> logits = prefill(*h, ids, 256, want);
    for (size_t i = 0; i < cont.size(); ++i) {
      const bool agree = argmax(logits.data() + i * V, V) == cont[i];
      if (margins[i] > 3.0) {
        ++firm;
        firm_agree += agree;
        EXPECT_TRUE(agree) << p["name"] << " step " << i << " margin " << margins[i];
      }
      if (margins[i] > 0.5) {
        ++loose;
        loose_agree += agree;
      }
    }
  }
  std::printf("teacher-forced greedy: %lld/%lld steps with margin > 3, %lld/%lld with > 0.5\n",
              static_cast<long long>(firm_agree), static_cast<long long>(firm),
              static_cast<long long>(loose_agree), static_cast<long long>(loose));
  EXPECT_GT(firm, 20);
  EXPECT_GE(loose_agree * 10, loose * 9);
  // The weights this ran on were packed at load: Q5_0, Q6_K and Q8_0 in their file bytes, Q4_K
  // in 148 bytes per 144 (kernels/packed_layout.h), so at most 1.1x the file's weights.
  if (h->model.weight_pack_seconds() > 0) {
    EXPECT_GT(h->model.resident_weight_bytes(), h->model.weight_bytes());
    EXPECT_LE(h->model.resident_weight_bytes() * 10, h->model.weight_bytes() * 11);
  }
}

// The tokenizer the GGUF declares (SentencePiece-style, byte fallback, no space prefix) gives
// transformers' ids for every golden case, and the prompts' ids with BOS.
TEST(Gemma3ModelTest, TokenizerMatchesTransformers) {
  auto file = GgufFile::open(gemma_path());
  if (!file.is_ok()) SKIP_OR_FAIL_IN_CI() << "run scripts/fetch-model gemma3-270m";
  auto config = tokenizer_config_from_gguf(*file);
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  auto tok = Tokenizer::create(std::move(config).value());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const nlohmann::json g = load_golden();
  for (const auto& c : g["tokenizer"]) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const bool special = c["parse_special"].get<bool>();
    const auto got = tok->encode(text, /*add_special=*/false, special);
    EXPECT_EQ(got, want) << "text: " << text;
    if (!special) {
      EXPECT_EQ(tok->decode(got), text);
    }
  }
  for (const auto& p : g["prompts"]) {
    const auto got = tok->encode(p["text"].get<std::string>(), /*add_special=*/true, false);
    EXPECT_EQ(got, p["ids"].get<std::vector<int32_t>>()) << p["name"];
  }
}

}  // namespace
}  // namespace kvs
