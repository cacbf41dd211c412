// kv_geometry's general per-layer description: MLA, sliding windows, hybrid layers, tensor
// parallelism and quantized formats with their scales. The uniform engine path must stay a
// special case of it.
#include "kvcache/kv_geometry.h"

#include <gtest/gtest.h>

namespace kvs {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

KvModelShape shape_of(std::vector<KvLayer> layers, KvDtype k = KvDtype::kBF16,
                      KvDtype v = KvDtype::kBF16, uint32_t tp = 1) {
  return {.layers = std::move(layers), .k_dtype = k, .v_dtype = v, .tp = tp};
}

TEST(KvGeometry, UniformFormulaUnchanged) {
  // The engine's default model: 30 layers, 3 KV heads, head_dim 64, f16.
  const KvTokenBytes t =
      kv_token_bytes({.layers = 30, .kv_heads = 3, .head_dim_k = 64, .head_dim_v = 64});
  EXPECT_EQ(t.bytes_per_token, 23'040u);
  EXPECT_EQ(t.k_bytes_per_layer, 384u);
  EXPECT_EQ(t.v_bytes_per_layer, 384u);
  EXPECT_EQ(t.formula, "30 x 2 x 3 x 64 x 2 = 23,040 B");
  // K and V in different formats: the split form.
  const KvTokenBytes q = kv_token_bytes({.layers = 32,
                                         .kv_heads = 8,
                                         .head_dim_k = 128,
                                         .head_dim_v = 128,
                                         .k_dtype = KvDtype::kQ8_0,
                                         .v_dtype = KvDtype::kQ4_0});
  EXPECT_EQ(q.k_bytes_per_layer, 8u * 136);
  EXPECT_EQ(q.v_bytes_per_layer, 8u * 72);
  EXPECT_EQ(q.bytes_per_token, 32u * 8 * (136 + 72));
  EXPECT_EQ(q.formula, "32 x 8 x (128 x (136/128) + 128 x (72/128)) = 53,248 B");
}

TEST(KvGeometry, QuantizedFormatsCountScales) {
  auto per_token = [](KvDtype d) {
    return kv_shape_bytes(shape_of({KvLayer::full(8, 128, 128)}, d, d)).bytes_per_token;
  };
  EXPECT_EQ(per_token(KvDtype::kF32), 8u * 2 * 128 * 4);
  EXPECT_EQ(per_token(KvDtype::kF16), 8u * 2 * 128 * 2);
  EXPECT_EQ(per_token(KvDtype::kBF16), 8u * 2 * 128 * 2);
  EXPECT_EQ(per_token(KvDtype::kFp8E4M3), 8u * 2 * 128);  // per-tensor scale: no per-token bytes
  EXPECT_EQ(per_token(KvDtype::kFp8E5M2), 8u * 2 * 128);
  EXPECT_EQ(per_token(KvDtype::kInt8), 8u * 2 * (128 + 2));        // + one f16 scale per vector
  EXPECT_EQ(per_token(KvDtype::kInt4), 8u * 2 * (4 * 18));         // 4 groups of (16 B + f16)
  EXPECT_EQ(per_token(KvDtype::kQ8_0), 8u * 2 * (128 / 32 * 34));  // 34 B per 32 elements
  EXPECT_EQ(per_token(KvDtype::kQ4_0), 8u * 2 * (128 / 32 * 18));  // 18 B per 32 elements
  // A grouped format needs a multiple of its group: head_dim 80 is not a multiple of 32.
  EXPECT_FALSE(
      validate_kv_shape(shape_of({KvLayer::full(8, 80, 80)}, KvDtype::kQ4_0, KvDtype::kQ4_0))
          .is_ok());
  EXPECT_TRUE(
      validate_kv_shape(shape_of({KvLayer::full(8, 80, 80)}, KvDtype::kInt8, KvDtype::kInt8))
          .is_ok());
}

TEST(KvGeometry, DifferentKAndVHeadSizes) {
  const KvModelShape s = shape_of(std::vector<KvLayer>(10, KvLayer::full(4, 192, 128)));
  const KvShapeBytes b = kv_shape_bytes(s);
  EXPECT_EQ(b.bytes_per_token, 10u * 4 * (192 + 128) * 2);
  EXPECT_EQ(b.formula, "10 x 4 x (192 x 2 + 128 x 2) = 25,600 B");
}

TEST(KvGeometry, MlaLatentNoFactorTwoNoHeads) {
  // DeepSeek-V3: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64, bf16.
  const KvModelShape s = shape_of(std::vector<KvLayer>(61, KvLayer::mla(512, 64)));
  const KvShapeBytes b = kv_shape_bytes(s);
  EXPECT_EQ(b.bytes_per_token, 61u * 576 * 2);
  EXPECT_EQ(b.bytes_per_token, 70'272u);
  EXPECT_EQ(b.formula, "61 x (512 + 64) x 2 [MLA] = 70,272 B");
  EXPECT_EQ(b.layers_by_kind[static_cast<int>(KvLayerKind::kMla)], 61u);
  // Replicated under tensor parallelism: every rank holds the whole latent.
  KvModelShape tp8 = s;
  tp8.tp = 8;
  EXPECT_EQ(kv_shape_bytes(tp8).bytes_per_token, 70'272u);
  // fp8 latents: 576 bytes per layer.
  KvModelShape fp8 = s;
  fp8.k_dtype = fp8.v_dtype = KvDtype::kFp8E4M3;
  EXPECT_EQ(kv_shape_bytes(fp8).bytes_per_token, 61u * 576);
}

TEST(KvGeometry, SlidingWindowAllLayers) {
  // Mistral 7B v0.1: 32 layers, window 4096 on all of them.
  const KvModelShape s = shape_of(std::vector<KvLayer>(32, KvLayer::sliding(8, 128, 128, 4096)));
  const KvShapeBytes b = kv_shape_bytes(s);
  EXPECT_EQ(b.bytes_per_token, 131'072u);
  EXPECT_EQ(b.formula, "32 x 2 x 8 x 128 x 2 [window 4096] = 131,072 B");
  EXPECT_EQ(kv_request_bytes(s, 2000), 2000u * 131'072);
  EXPECT_EQ(kv_request_bytes(s, 4096), 512 * kMiB);
  EXPECT_EQ(kv_request_bytes(s, 32768), 512 * kMiB);  // a windowed layer holds <= 4096 tokens
}

TEST(KvGeometry, WindowHeldTokensAndBlocksSpanned) {
  // Mistral 7B v0.1 (https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json:
  // sliding_window 4096). A query at position p sees [p - 4095, p]; a step computing [s, e)
  // needs [max(0, s - 4095), e).
  constexpr uint32_t kW = 4096;
  EXPECT_EQ(kv_window_first_needed(kW, 0), 0u);
  EXPECT_EQ(kv_window_first_needed(kW, 4095), 0u);
  EXPECT_EQ(kv_window_first_needed(kW, 4096), 1u);
  EXPECT_EQ(kv_window_first_needed(kW, 10000), 5905u);
  // A decode step (1 token) holds min(n, window): the planner's default count.
  EXPECT_EQ(kv_window_held_tokens(kW, 2000, 1), 2000u);
  EXPECT_EQ(kv_window_held_tokens(kW, 10000, 1), 4096u);
  // A 512-token prefill chunk ending at n holds window - 1 + 512.
  EXPECT_EQ(kv_window_held_tokens(kW, 10000, 512), 4607u);
  EXPECT_EQ(kv_window_held_tokens(kW, 3000, 512), 3000u);
  EXPECT_EQ(kv_window_held_tokens(kW, 300, 512), 300u);  // a chunk longer than the request
  // Blocks spanning [first, end).
  EXPECT_EQ(kv_blocks_spanned(0, 16, 16), 1u);
  EXPECT_EQ(kv_blocks_spanned(15, 17, 16), 2u);
  EXPECT_EQ(kv_blocks_spanned(16, 16, 16), 0u);
  EXPECT_EQ(kv_blocks_spanned(5905, 10001, 16), 257u);  // 4,096 tokens straddling 257 blocks

  const KvLayer win = KvLayer::sliding(8, 128, 128, kW);
  // Default: min(n, window) rounded up, as if the window started on a block boundary.
  EXPECT_EQ(kv_layer_held_slots(win, 10001, 16), 4096u);
  EXPECT_EQ(kv_layer_held_slots(win, 10001, 0), 4096u);
  // The engine's count for a decode step: the 257 blocks spanning [5905, 10001).
  EXPECT_EQ(kv_layer_held_slots(win, 10001, 16, 1), 257u * 16);
  EXPECT_EQ(kv_layer_held_slots(win, 10000, 16, 1), 256u * 16);  // aligned: no extra block
  // A 512-token step ending at 10,001 needs [5394, 10001): blocks 337..625, 289 blocks. vLLM
  // reserves cdiv(4096 - 1 + 512, 16) + 1 = 289 blocks for any alignment.
  EXPECT_EQ(kv_layer_held_slots(win, 10001, 16, 512), 289u * 16);
  EXPECT_EQ(kv_layer_held_slots(win, 10001, 0, 512), 4607u);
  // Full attention ignores the chunk.
  EXPECT_EQ(kv_layer_held_slots(KvLayer::full(8, 128, 128), 10001, 16, 512), 10016u);

  // Per request (32 layers, 131,072 B per token): the default is unchanged; chunk-aware is more.
  const KvModelShape s = shape_of(std::vector<KvLayer>(32, win));
  EXPECT_EQ(kv_request_bytes(s, 32768), 512 * kMiB);
  EXPECT_EQ(kv_request_bytes(s, 32768, 1), 512 * kMiB);
  EXPECT_EQ(kv_request_bytes(s, 32768, 512), 4607u * 131'072);
}

TEST(KvGeometry, SlidingWindowInterleaved) {
  // Gemma 2 9B: 42 layers alternating local (window 4096) / global, 8 KV heads, head_dim 256.
  std::vector<KvLayer> layers;
  for (int i = 0; i < 42; ++i)
    layers.push_back(i % 2 == 0 ? KvLayer::sliding(8, 256, 256, 4096) : KvLayer::full(8, 256, 256));
  const KvModelShape s = shape_of(layers);
  const KvShapeBytes b = kv_shape_bytes(s);
  EXPECT_EQ(b.bytes_per_token, 42u * 8192);
  EXPECT_EQ(b.token_bytes_by_kind[static_cast<int>(KvLayerKind::kSliding)], 21u * 8192);
  EXPECT_EQ(b.token_bytes_by_kind[static_cast<int>(KvLayerKind::kFull)], 21u * 8192);
  EXPECT_EQ(b.formula,
            "21 x 2 x 8 x 256 x 2 [window 4096] + 21 x 2 x 8 x 256 x 2 [full] = 344,064 B");
  const KvRequestBytes r = kv_request_breakdown(s, 8192);
  EXPECT_EQ(r.by_kind[static_cast<int>(KvLayerKind::kFull)], 21u * 8192 * 8192);
  EXPECT_EQ(r.by_kind[static_cast<int>(KvLayerKind::kSliding)], 21u * 8192 * 4096);
  EXPECT_EQ(r.total, 2'113'929'216u);
}

// Per-layer formats: the bytes per token are the sum over layers in their own formats, the
// formula one term per layer group in the same formats; a request, a paged pool and a sliding
// layer count the same per-layer bytes; MLA and no-KV layers take none.
TEST(KvGeometry, PerLayerFormatsSumOverLayers) {
  KvModelShape s = shape_of(std::vector<KvLayer>(30, KvLayer::full(3, 64, 64)), KvDtype::kInt2Chan,
                            KvDtype::kInt2Had);
  s.layer_formats = {.k = {{18, KvDtype::kInt4Chan}, {20, KvDtype::kInt4Chan}},
                     .v = {{1, KvDtype::kInt4Had}}};
  ASSERT_TRUE(validate_kv_shape(s).is_ok());
  const KvShapeBytes b = kv_shape_bytes(s);
  // Keys 32 B (2 bits) or 48 B (4 bits) per head, values 20 B or 36 B.
  EXPECT_EQ(b.bytes_per_token, 3u * (28 * 32 + 2 * 48 + 29 * 20 + 36));
  EXPECT_EQ(b.formula,
            "27 x 3 x (64 x (32/64) + 64 x (20/64)) [K int2_chan, V int2_had] + "
            "1 x 3 x (64 x (32/64) + 64 x (36/64)) [K int2_chan, V int4_had] + "
            "2 x 3 x (64 x (48/64) + 64 x (20/64)) [K int4_chan, V int2_had] = 4,824 B");
  EXPECT_EQ(kv_layer_token_bytes(s, 18), 3u * (48 + 20));
  // A request: its tokens, and the f16 keys of its partly filled group in every layer.
  EXPECT_EQ(kv_request_bytes(s, 100), 100u * b.bytes_per_token + 30u * 3 * 16 * 64 * 2);
  // The uniform description carries them too.
  KvUniformShape u{.layers = 30,
                   .kv_heads = 3,
                   .head_dim_k = 64,
                   .head_dim_v = 64,
                   .k_dtype = KvDtype::kInt2Chan,
                   .v_dtype = KvDtype::kInt2Had};
  u.layer_formats = s.layer_formats;
  EXPECT_EQ(kv_token_bytes(u).bytes_per_token, b.bytes_per_token);
  EXPECT_EQ(kv_token_bytes(u).formula, b.formula);
  // A sliding layer holds its window in its own format; an MLA or no-KV layer takes none.
  KvModelShape w = shape_of({KvLayer::sliding(8, 128, 128, 4096), KvLayer::full(8, 128, 128)},
                            KvDtype::kF16, KvDtype::kF16);
  w.layer_formats.k = {{0, KvDtype::kInt8}};
  EXPECT_EQ(kv_request_bytes(w, 8192), 4096u * 8 * (130 + 256) + 8192u * 8 * 512);
  EXPECT_EQ(kv_shape_bytes(w).formula,
            "1 x 8 x (128 x (130/128) + 128 x 2) [window 4096, K int8, V f16] + "
            "1 x 2 x 8 x 128 x 2 [full, K f16, V f16] = 7,184 B");
  KvModelShape m = shape_of({KvLayer::mla(512, 64), KvLayer::no_kv(100)});
  m.layer_formats.k = {{0, KvDtype::kInt8}};
  EXPECT_NE(validate_kv_shape(m).message().find("MLA latent has none"), std::string::npos);
  m.layer_formats.k = {{1, KvDtype::kInt8}};
  EXPECT_NE(validate_kv_shape(m).message().find("no K or V"), std::string::npos);
  m.layer_formats.k = {{2, KvDtype::kInt8}};
  EXPECT_NE(validate_kv_shape(m).message().find("layer 2: the model has 2 layers"),
            std::string::npos);
}

TEST(KvGeometry, HybridLinearAttentionStateReportedSeparately) {
  // Qwen3-Next style: 48 layers, every 4th full attention (2 KV heads x 256), the others linear
  // attention with a fixed state per sequence.
  constexpr uint64_t kState = 1'097'728;  // bytes per layer per sequence
  std::vector<KvLayer> layers;
  for (int i = 0; i < 48; ++i)
    layers.push_back((i + 1) % 4 == 0 ? KvLayer::full(2, 256, 256) : KvLayer::no_kv(kState));
  KvModelShape s = shape_of(layers);
  const KvShapeBytes b = kv_shape_bytes(s);
  EXPECT_EQ(b.bytes_per_token, 12u * 2 * 2 * 256 * 2);
  EXPECT_EQ(b.state_bytes_per_sequence, 36 * kState);
  EXPECT_EQ(b.layers_by_kind[static_cast<int>(KvLayerKind::kNoKv)], 36u);
  EXPECT_EQ(b.formula, "12 x 2 x 2 x 256 x 2 [full] = 24,576 B");
  const KvRequestBytes r = kv_request_breakdown(s, 1000);
  EXPECT_EQ(r.by_kind[static_cast<int>(KvLayerKind::kNoKv)], 36 * kState);
  EXPECT_EQ(r.total, 1000u * 24'576 + 36 * kState);
  EXPECT_EQ(kv_request_bytes(s, 0), 36 * kState);  // the state exists from the first token
  // The state is split across TP ranks by heads.
  s.tp = 2;
  EXPECT_EQ(kv_shape_bytes(s).state_bytes_per_sequence, 36 * kState / 2);
}

TEST(KvGeometry, GatedDeltaNetStateConvAndRecurrent) {
  // Qwen3-Next-80B-A3B (https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/
  // config.json): linear_num_key_heads 16, linear_num_value_heads 32, linear_key_head_dim 128,
  // linear_value_head_dim 128, linear_conv_kernel_dim 4. Shapes as vLLM's
  // gated_delta_net_state_shape: conv (4 - 1) x (2 x 16 x 128 + 32 x 128), recurrent 32 x 128 x
  // 128.
  const GatedDeltaNetShape g{
      .key_heads = 16, .value_heads = 32, .key_dim = 128, .value_dim = 128, .conv_kernel = 4};
  const LinearStateBytes bf16 = gated_delta_net_state_bytes(g, 2, 2);
  EXPECT_EQ(bf16.conv, 3u * 8192 * 2);
  EXPECT_EQ(bf16.recurrent, 32u * 128 * 128 * 2);
  EXPECT_EQ(bf16.total(), 1'097'728u);
  // An f32 recurrent state (mamba_ssm_dtype float32) leaves the conv state in the model dtype.
  const LinearStateBytes mixed = gated_delta_net_state_bytes(g, 2, 4);
  EXPECT_EQ(mixed.conv, bf16.conv);
  EXPECT_EQ(mixed.recurrent, 2 * bf16.recurrent);
  EXPECT_EQ(gated_delta_net_state_bytes({.conv_kernel = 0}, 2, 2).total(), 0u);
}

TEST(KvGeometry, TensorParallelHeadsPerRank) {
  EXPECT_EQ(kv_heads_per_rank(8, 1), 8u);
  EXPECT_EQ(kv_heads_per_rank(8, 2), 4u);
  EXPECT_EQ(kv_heads_per_rank(8, 8), 1u);
  EXPECT_EQ(kv_heads_per_rank(8, 16), 1u);  // replicated when tp > kv_heads
  EXPECT_EQ(kv_heads_per_rank(1, 4), 1u);   // MQA: every rank holds the one head
  const KvModelShape s = shape_of(std::vector<KvLayer>(80, KvLayer::full(8, 128, 128)),
                                  KvDtype::kBF16, KvDtype::kBF16, 4);
  const KvShapeBytes b = kv_shape_bytes(s);
  EXPECT_EQ(b.bytes_per_token, 327'680u / 4);
  EXPECT_EQ(b.formula, "80 x 2 x 2 x 128 x 2 = 81,920 B");
  KvModelShape s16 = s;
  s16.tp = 16;
  EXPECT_EQ(kv_shape_bytes(s16).bytes_per_token, 327'680u / 8);  // 1 head per rank
}

TEST(KvGeometry, TensorParallelNeverRoundsHeadsDown) {
  // Llama 3.1 70B (https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json:
  // num_hidden_layers 80, num_attention_heads 64, num_key_value_heads 8, head_dim 128). vLLM's
  // QKVParallelLinear (vllm/model_executor/layers/linear.py) gives each rank
  // divide(total_num_kv_heads, tp) heads, or one head replicated divide(tp, total_num_kv_heads)
  // times when tp >= the KV heads; divide() asserts, so tp 3 or 6 is refused there. Here too.
  const std::vector<KvLayer> layers(80, KvLayer::full(8, 128, 128));
  EXPECT_EQ(kv_heads_per_rank(8, 3), 3u);  // ceil(8 / 3): never 2, which would under-count
  EXPECT_EQ(kv_heads_per_rank(8, 6), 2u);
  EXPECT_EQ(kv_heads_per_rank(8, 12), 1u);
  EXPECT_TRUE(check_kv_heads_split(8, 4).is_ok());
  EXPECT_TRUE(check_kv_heads_split(8, 16).is_ok());  // replicated twice
  EXPECT_TRUE(check_kv_heads_split(1, 7).is_ok());   // MQA: any tp replicates the one head
  for (uint32_t tp : {3u, 5u, 6u, 12u}) {
    const Status st = check_kv_heads_split(8, tp);
    ASSERT_FALSE(st.is_ok()) << tp;
    EXPECT_NE(st.message().find("8 KV heads cannot be split over tp " + std::to_string(tp)),
              std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("(1, 2, 4, 8)"), std::string::npos) << st.message();
    const Status v = validate_kv_shape(shape_of(layers, KvDtype::kBF16, KvDtype::kBF16, tp));
    ASSERT_FALSE(v.is_ok()) << tp;
    EXPECT_NE(v.message().find("layer 0 (full attention)"), std::string::npos) << v.message();
  }
  // Windowed layers split the same way; MLA latents and linear states have no KV heads.
  EXPECT_FALSE(validate_kv_shape(shape_of({KvLayer::sliding(8, 128, 128, 4096)}, KvDtype::kBF16,
                                          KvDtype::kBF16, 3))
                   .is_ok());
  EXPECT_TRUE(validate_kv_shape(shape_of({KvLayer::mla(512, 64), KvLayer::no_kv(100)},
                                         KvDtype::kBF16, KvDtype::kBF16, 3))
                  .is_ok());
  // tp 16 replicates: 80 x 2 x 1 x 128 x 2 B per rank.
  const KvModelShape tp16 = shape_of(layers, KvDtype::kBF16, KvDtype::kBF16, 16);
  EXPECT_TRUE(validate_kv_shape(tp16).is_ok());
  EXPECT_EQ(kv_shape_bytes(tp16).bytes_per_token, 40'960u);
}

TEST(KvGeometry, ValidateRejectsBrokenShapes) {
  EXPECT_FALSE(validate_kv_shape(shape_of({})).is_ok());
  EXPECT_FALSE(validate_kv_shape(shape_of({KvLayer::full(0, 128, 128)})).is_ok());
  EXPECT_FALSE(validate_kv_shape(shape_of({KvLayer::sliding(8, 128, 128, 0)})).is_ok());
  EXPECT_FALSE(validate_kv_shape(shape_of({KvLayer::mla(0, 64)})).is_ok());
  EXPECT_FALSE(
      validate_kv_shape(shape_of({KvLayer::full(8, 128, 128)}, KvDtype::kF16, KvDtype::kF16, 0))
          .is_ok());
  EXPECT_TRUE(validate_kv_shape(shape_of({KvLayer::no_kv(100), KvLayer::mla(512, 64)})).is_ok());
}

}  // namespace
}  // namespace kvs
