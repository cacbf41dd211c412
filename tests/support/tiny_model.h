// A tiny synthetic llama model for tests that need an engine but not the default model's
// weights: 2 layers, embedding 128, 4 query heads and 2 KV heads of 32, F32 weights drawn from a
// fixed seed, and a byte-level vocabulary of the 256 bytes plus "<|im_end|>". Written as a real
// GGUF file (GgufWriter) and loaded through load_model(), the path every model takes; its output
// is deterministic but meaningless. Geometry, for hand counts in tests:
//   KV bytes per token (f16) = 2 layers x 2 x 2 KV heads x 32 x 2 B = 512 B.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "model/gguf_writer.h"
#include "model/loaded_model.h"
#include "model/tokenizer_test_util.h"  // byte_char

namespace kvs::test {

struct TinyModelShape {
  static constexpr uint32_t kLayers = 2;
  static constexpr uint32_t kEmbedding = 128;
  static constexpr uint32_t kHeads = 4;
  static constexpr uint32_t kKvHeads = 2;
  static constexpr uint32_t kHeadDim = kEmbedding / kHeads;  // 32
  static constexpr uint32_t kFfn = 256;
  static constexpr uint32_t kVocab = 257;  // 256 bytes + <|im_end|>
  static constexpr uint64_t kKvBytesPerTokenF16 = uint64_t{kLayers} * 2 * kKvHeads * kHeadDim * 2;
};

inline std::vector<uint8_t> tiny_model_gguf() {
  using S = TinyModelShape;
  constexpr uint32_t kF32 = 0;
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 0.08f);
  auto weights = [&](uint64_t n) {
    std::vector<uint8_t> bytes(n * sizeof(float));
    for (uint64_t i = 0; i < n; ++i) {
      const float v = dist(rng);
      std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof v);
    }
    return bytes;
  };
  auto ones = [](uint64_t n) {
    std::vector<uint8_t> bytes(n * sizeof(float));
    for (uint64_t i = 0; i < n; ++i) {
      const float v = 1.0f;
      std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof v);
    }
    return bytes;
  };
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "kvserve tiny test model");
  w.add_uint32("llama.block_count", S::kLayers);
  w.add_uint32("llama.embedding_length", S::kEmbedding);
  w.add_uint32("llama.context_length", 2048);
  w.add_uint32("llama.feed_forward_length", S::kFfn);
  w.add_uint32("llama.attention.head_count", S::kHeads);
  w.add_uint32("llama.attention.head_count_kv", S::kKvHeads);
  w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_float32("llama.rope.freq_base", 10000.0f);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_char(static_cast<uint8_t>(b)));
  tokens.push_back("<|im_end|>");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_string_array("tokenizer.ggml.merges", std::vector<std::string>{});
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;  // control
  w.add_int32_array("tokenizer.ggml.token_type", types);
  w.add_uint32("tokenizer.ggml.eos_token_id", S::kVocab - 1);
  const uint64_t E = S::kEmbedding, Dq = uint64_t{S::kHeads} * S::kHeadDim,
                 Dkv = uint64_t{S::kKvHeads} * S::kHeadDim, F = S::kFfn, V = S::kVocab;
  w.add_tensor("token_embd.weight", {E, V}, kF32, weights(E * V));
  w.add_tensor("output_norm.weight", {E}, kF32, ones(E));
  for (uint32_t l = 0; l < S::kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor(p + "attn_norm.weight", {E}, kF32, ones(E));
    w.add_tensor(p + "ffn_norm.weight", {E}, kF32, ones(E));
    w.add_tensor(p + "attn_q.weight", {E, Dq}, kF32, weights(E * Dq));
    w.add_tensor(p + "attn_k.weight", {E, Dkv}, kF32, weights(E * Dkv));
    w.add_tensor(p + "attn_v.weight", {E, Dkv}, kF32, weights(E * Dkv));
    w.add_tensor(p + "attn_output.weight", {Dq, E}, kF32, weights(Dq * E));
    w.add_tensor(p + "ffn_gate.weight", {E, F}, kF32, weights(E * F));
    w.add_tensor(p + "ffn_up.weight", {E, F}, kF32, weights(E * F));
    w.add_tensor(p + "ffn_down.weight", {F, E}, kF32, weights(F * E));
  }
  return w.finish();
}

// The tiny model, written once per test binary under the test temp dir and loaded.
inline LoadedModel* tiny_model() {
  static std::unique_ptr<LoadedModel> model = [] {
    const std::string path =
        ::testing::TempDir() + "kvserve-tiny-model-" + std::to_string(::getpid()) + ".gguf";
    const std::vector<uint8_t> bytes = tiny_model_gguf();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    auto m = load_model(path);
    std::remove(path.c_str());  // the mapping stays valid
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    return m.is_ok() ? std::make_unique<LoadedModel>(std::move(m).value()) : nullptr;
  }();
  return model.get();
}

}  // namespace kvs::test
