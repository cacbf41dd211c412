// gguf_window_pattern: GGUF files that store a window but no pattern get llama.cpp's layout for
// their architecture (src/llama-model.cpp: swa_type and set_swa_pattern per architecture), which
// the engine's reader (model_spec_from_gguf) and so the planner use.
#include "model/gguf_window_pattern.h"

#include <gtest/gtest.h>

#include <string>

#include "model/gguf_file.h"
#include "model/gguf_writer.h"
#include "planner/layer_role.h"
#include "planner/model_config.h"

namespace kvs {
namespace {

struct Shape {
  std::string arch;
  uint32_t layers = 0, embedding = 0, heads = 0, kv_heads = 0, head_dim = 0;
  uint32_t window = 0;  // 0: no sliding_window key
  bool store_window = true;
};

GgufWriter writer(const Shape& s) {
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.add_string("general.architecture", s.arch);
  w.add_uint32(a + "block_count", s.layers);
  w.add_uint32(a + "context_length", 131072);
  w.add_uint32(a + "embedding_length", s.embedding);
  w.add_uint32(a + "attention.head_count", s.heads);
  w.add_uint32(a + "attention.head_count_kv", s.kv_heads);
  w.add_uint32(a + "attention.key_length", s.head_dim);
  w.add_uint32(a + "attention.value_length", s.head_dim);
  if (s.store_window) w.add_uint32(a + "attention.sliding_window", s.window);
  w.add_tensor("t", {32}, 0, std::vector<uint8_t>(128));
  return w;
}

PlannerModel load(const GgufWriter& w) {
  auto f = GgufFile::parse_bytes(w.finish());
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  if (!f.is_ok()) return {};
  auto m = model_from_gguf(*f, "test.gguf");
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? *m : PlannerModel{};
}

// "S" for a windowed layer, "F" for a full one, "-" for one without KV.
std::string layout(const PlannerModel& m) {
  std::string s;
  for (const KvLayer& l : m.layers)
    s += l.kind == KvLayerKind::kSliding ? 'S' : l.kind == KvLayerKind::kFull ? 'F' : '-';
  return s;
}

TEST(GgufWindowPattern, GptOssAlternatesSlidingAndFullStartingWithSliding) {
  // openai/gpt-oss-20b's shape (config.json: 24 layers, hidden 2880, 64 heads, 8 KV heads of 64,
  // sliding_window 128, layer_types sliding/full alternating from layer 0); its GGUF stores
  // gpt-oss.attention.sliding_window but no pattern: llama.cpp's set_swa_pattern(2).
  const PlannerModel m = load(writer({.arch = "gpt-oss",
                                      .layers = 24,
                                      .embedding = 2880,
                                      .heads = 64,
                                      .kv_heads = 8,
                                      .head_dim = 64,
                                      .window = 128}));
  EXPECT_EQ(layout(m), "SFSFSFSFSFSFSFSFSFSFSFSF");
  // f16 KV, per layer and token 2 x 8 x 64 x 2 B = 2,048 B. 32K: 12 full x 2,048 x 32,768 =
  // 805,306,368 + 12 windowed x 2,048 x 128 = 3,145,728 -> 808,452,096 B. Every layer windowed
  // (the old reading) was 24 x 2,048 x 128 = 6,291,456 B: 128x too little.
  const KvModelShape s = m.kv_shape(KvDtype::kF16, KvDtype::kF16, 1);
  EXPECT_EQ(kv_request_bytes(s, 32768), 808'452'096u);
}

TEST(GgufWindowPattern, Cohere2OneFullLayerInFour) {
  // CohereLabs/c4ai-command-r7b-12-2024 (config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads,
  // sliding_window 4096, sliding_window_pattern 4): llama.cpp's set_swa_pattern(4).
  const PlannerModel m = load(writer({.arch = "cohere2",
                                      .layers = 32,
                                      .embedding = 4096,
                                      .heads = 32,
                                      .kv_heads = 8,
                                      .head_dim = 128,
                                      .window = 4096}));
  EXPECT_EQ(layout(m), "SSSFSSSFSSSFSSSFSSSFSSSFSSSFSSSF");
}

TEST(GgufWindowPattern, TheTableRowByRow) {
  // gemma2: period 2, window 4096 when the file stores none.
  PlannerModel m = load(writer({.arch = "gemma2",
                                .layers = 4,
                                .embedding = 2304,
                                .heads = 8,
                                .kv_heads = 4,
                                .head_dim = 256,
                                .store_window = false}));
  EXPECT_EQ(layout(m), "SFSF");
  EXPECT_EQ(m.layers[0].window, 4096u);
  // gemma3: period 6 when a window is stored, none without.
  m = load(writer({.arch = "gemma3",
                   .layers = 12,
                   .embedding = 640,
                   .heads = 4,
                   .kv_heads = 1,
                   .head_dim = 256,
                   .window = 512}));
  EXPECT_EQ(layout(m), "SSSSSFSSSSSF");
  m = load(writer({.arch = "gemma3",
                   .layers = 6,
                   .embedding = 640,
                   .heads = 4,
                   .kv_heads = 1,
                   .head_dim = 256,
                   .store_window = false}));
  EXPECT_EQ(layout(m), "FFFFFF");
  // gemma3n: period 5, and from layer 20 on the KV of earlier layers (n_layer_kv_from_start 20).
  m = load(writer({.arch = "gemma3n",
                   .layers = 35,
                   .embedding = 2048,
                   .heads = 8,
                   .kv_heads = 2,
                   .head_dim = 256,
                   .window = 512}));
  EXPECT_EQ(layout(m), "SSSSFSSSSFSSSSFSSSSF---------------");
  // llama4: chunks of 8192 on three layers of four, whatever window the file stores...
  m = load(writer({.arch = "llama4",
                   .layers = 8,
                   .embedding = 5120,
                   .heads = 40,
                   .kv_heads = 8,
                   .head_dim = 128,
                   .store_window = false}));
  EXPECT_EQ(layout(m), "SSSFSSSF");
  EXPECT_EQ(m.layers[0].window, 8192u);
  // ... and none when it stores 0.
  m = load(writer({.arch = "llama4",
                   .layers = 4,
                   .embedding = 5120,
                   .heads = 40,
                   .kv_heads = 8,
                   .head_dim = 128,
                   .window = 0}));
  EXPECT_EQ(layout(m), "FFFF");
  // olmo2: period 4 only with a window (OLMo 3); OLMo 2 files store none.
  m = load(writer({.arch = "olmo2",
                   .layers = 8,
                   .embedding = 4096,
                   .heads = 32,
                   .kv_heads = 32,
                   .head_dim = 128,
                   .window = 4096}));
  EXPECT_EQ(layout(m), "SSSFSSSF");
  // exaone4: period 4 on the 64-layer model only.
  m = load(writer({.arch = "exaone4",
                   .layers = 64,
                   .embedding = 5120,
                   .heads = 40,
                   .kv_heads = 8,
                   .head_dim = 128,
                   .store_window = false}));
  EXPECT_EQ(layout(m).substr(0, 8), "SSSFSSSF");
  EXPECT_EQ(m.layers[0].window, 4096u);
  m = load(writer({.arch = "exaone4",
                   .layers = 30,
                   .embedding = 2048,
                   .heads = 32,
                   .kv_heads = 8,
                   .head_dim = 64,
                   .window = 4096}));
  EXPECT_EQ(layout(m), std::string(30, 'F'));
  // phi3: llama.cpp turns the stored window off.
  m = load(writer({.arch = "phi3",
                   .layers = 4,
                   .embedding = 3072,
                   .heads = 32,
                   .kv_heads = 32,
                   .head_dim = 96,
                   .window = 2047}));
  EXPECT_EQ(layout(m), "FFFF");
  // An architecture llama.cpp has no layout for, with a stored window: every layer windowed.
  m = load(writer({.arch = "mistral-like",
                   .layers = 3,
                   .embedding = 4096,
                   .heads = 32,
                   .kv_heads = 8,
                   .head_dim = 128,
                   .window = 4096}));
  EXPECT_EQ(layout(m), "SSS");
}

TEST(GgufWindowPattern, TheFilesOwnPatternWins) {
  GgufWriter w = writer({.arch = "gpt-oss",
                         .layers = 6,
                         .embedding = 2880,
                         .heads = 64,
                         .kv_heads = 8,
                         .head_dim = 64,
                         .window = 128});
  w.add_uint32("gpt-oss.attention.sliding_window_pattern", 3);
  EXPECT_EQ(layout(load(w)), "SSFSSF");
}

}  // namespace
}  // namespace kvs
