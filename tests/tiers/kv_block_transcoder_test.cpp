// KvBlockTranscoder: a block re-encoded to a tier format and back equals, element by element,
// what the scalar codecs give for each vector (kernels/kv_vector.h), for every format pair the
// flags allow; sizes follow kv_geometry.
#include "tiers/kv_block_transcoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/kv_vector.h"
#include "quant/kv_channel_groups.h"

namespace kvs {
namespace {

KvStorageShape shape(KvDtype k, KvDtype v) {
  return {.num_blocks = 1,
          .block_size = 4,
          .layers = 3,
          .kv_heads = 2,
          .head_dim = 64,
          .k_dtype = k,
          .v_dtype = v};
}

TEST(KvBlockTranscoderTest, RoundTripEqualsTheScalarCodecsVectorByVector) {
  for (KvDtype pool : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt8Had}) {
    for (KvDtype tier : {KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4Had, KvDtype::kQ4_0,
                         KvDtype::kF16, KvDtype::kInt3Had, KvDtype::kInt2Had, KvDtype::kInt8Had,
                         KvDtype::kInt2Had64, KvDtype::kInt2Tcq64, KvDtype::kQ8_0Had}) {
      SCOPED_TRACE(std::string(kv_dtype_name(pool)) + " -> " + kv_dtype_name(tier));
      auto t = KvBlockTranscoder::create(shape(pool, pool), tier, tier);
      ASSERT_TRUE(t.is_ok()) << t.status().to_string();
      auto pl = KvBlockStorage::layout_of(shape(pool, pool));
      auto tl = KvBlockStorage::layout_of(shape(tier, tier));
      ASSERT_TRUE(pl.is_ok() && tl.is_ok());
      EXPECT_EQ(t->pool_block_bytes(), pl->block_bytes);
      EXPECT_EQ(t->tier_block_bytes(), tl->block_bytes);
      // A pool block of random vectors, written by the pool's own codec.
      std::mt19937 rng(3);
      std::normal_distribution<float> nd(0, 2);
      std::vector<uint8_t> block(pl->block_bytes);
      const uint32_t vectors = 3 * 2 * 4 * 2;  // layers x heads x tokens x (K, V)
      const uint64_t vb = pl->k_vector_bytes;
      ASSERT_EQ(block.size(), vectors * vb);
      std::vector<float> x(64), y(64), want(64);
      for (uint32_t i = 0; i < vectors; ++i) {
        for (float& e : x) e = nd(rng);
        kv_vector_from_f32(pool, x.data(), 64, block.data() + i * vb);
      }
      std::vector<uint8_t> tier_block(t->tier_block_bytes()), back(pl->block_bytes);
      t->encode(block.data(), tier_block.data());
      t->decode(tier_block.data(), back.data());
      std::vector<uint8_t> tmp_tier(tl->k_vector_bytes), tmp_pool(vb);
      // Same layout order in both formats: vector i of the pool block is vector i of the tier's.
      for (uint32_t i = 0; i < vectors; ++i) {
        kv_vector_to_f32(pool, block.data() + i * vb, 64, x.data(), 0);
        kv_vector_from_f32(tier, x.data(), 64, tmp_tier.data());
        ASSERT_EQ(0, std::memcmp(tmp_tier.data(), tier_block.data() + i * tl->k_vector_bytes,
                                 tl->k_vector_bytes))
            << "vector " << i;
        kv_vector_to_f32(tier, tmp_tier.data(), 64, y.data(), 0);
        kv_vector_from_f32(pool, y.data(), 64, tmp_pool.data());
        ASSERT_EQ(0, std::memcmp(tmp_pool.data(), back.data() + i * vb, vb)) << "vector " << i;
      }
    }
  }
}

TEST(KvBlockTranscoderTest, AFormatTheHeadDimCannotHoldIsAClearError) {
  KvStorageShape s = shape(KvDtype::kF16, KvDtype::kF16);
  s.head_dim = 48;  // not a multiple of the 32-element groups of q4_0
  auto t = KvBlockTranscoder::create(s, KvDtype::kQ4_0, KvDtype::kQ4_0);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("--kv-offload-dtype"), std::string::npos);
}

// A pool with per-channel keys offloads to a per-vector tier and back: the keys come back within
// two 4-bit steps of what the pool held (one rounding by the tier, one by re-sealing; for
// int2mix_chan64, half of a 2-bit step and the tier's rounding), V exactly through int8 -> int8;
// and a per-channel tier format is refused as V.
TEST(KvBlockTranscoderTest, PerChannelKeysGoThroughATierAGroupAtATime) {
  for (const KvDtype kd : {KvDtype::kInt4Chan, KvDtype::kInt4Chan64, KvDtype::kInt2MixChan64}) {
    SCOPED_TRACE(kv_dtype_name(kd));
    const uint32_t G = kv_channel_group_tokens(kd), bs = 2 * G;  // two groups per block
    KvStorageShape s = shape(kd, KvDtype::kInt8);
    s.block_size = bs;
    auto t = KvBlockTranscoder::create(s, KvDtype::kInt8, KvDtype::kInt8);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    auto pl = KvBlockStorage::layout_of(s);
    ASSERT_TRUE(pl.is_ok());
    // Fill the pool block through write_kv's codec: seal every group from random keys.
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0, 2);
    std::vector<uint8_t> block(pl->block_bytes);
    std::vector<float> keys(uint64_t{bs} * 64), v(64);
    for (uint32_t layer = 0; layer < 3; ++layer)
      for (uint32_t h = 0; h < 2; ++h) {
        for (float& e : keys) e = nd(rng);
        uint8_t* region = block.data() + layer * pl->layer_bytes + h * bs * pl->k_vector_bytes;
        for (uint32_t g = 0; g < 2; ++g)
          quantize_channel_group(channel_bits(kd), keys.data() + g * G * 64, 64, G, 64,
                                 region + g * channel_group_bytes(channel_bits(kd), G, 64));
        for (uint32_t tok = 0; tok < bs; ++tok) {
          for (float& e : v) e = nd(rng);
          kv_vector_from_f32(KvDtype::kInt8, v.data(), 64,
                             block.data() + layer * pl->layer_bytes + pl->v_offset +
                                 (h * bs + tok) * pl->v_vector_bytes);
        }
      }
    std::vector<uint8_t> tier_block(t->tier_block_bytes()), back(pl->block_bytes);
    t->encode(block.data(), tier_block.data());
    t->decode(tier_block.data(), back.data());
    PagedKvLayout a = *pl, b = *pl;
    a.base = block.data();
    b.base = back.data();
    std::vector<float> x(64), y(64);
    for (uint32_t layer = 0; layer < 3; ++layer)
      for (uint32_t h = 0; h < 2; ++h)
        for (uint32_t tok = 0; tok < bs; ++tok) {
          kv_key_to_f32(a, 0, layer, h, tok, x.data());
          kv_key_to_f32(b, 0, layer, h, tok, y.data());
          // N(0, 2) over 16 tokens spans about 10 (64 tokens: about 13): a 4-bit step of 0.7-0.9,
          // a 2-bit step of about 4.4 (3 bits: 1.9).
          const double bound = kv_dtype_wide_channels(kd) ? 2.5 : 1.8;
          for (uint32_t i = 0; i < 64; ++i) ASSERT_NEAR(x[i], y[i], bound) << layer << " " << h;
        }
    for (uint32_t layer = 0; layer < 3; ++layer)
      ASSERT_EQ(0, std::memcmp(block.data() + layer * pl->layer_bytes + pl->v_offset,
                               back.data() + layer * pl->layer_bytes + pl->v_offset,
                               2 * bs * pl->v_vector_bytes));
    auto keys_only = KvBlockTranscoder::create(s, kd, kd);
    ASSERT_FALSE(keys_only.is_ok());
    EXPECT_NE(keys_only.status().message().find("keys only"), std::string::npos);
  }
}

// A pool with per-layer formats goes to a tier in one format for every layer and comes back
// into each layer's own: vector by vector, the scalar codecs of that layer's formats.
TEST(KvBlockTranscoderTest, PerLayerFormatsConvertEachLayerFromItsOwnFormats) {
  KvStorageShape s = shape(KvDtype::kF16, KvDtype::kF16);
  s.layer_formats = {.k = {{1, KvDtype::kInt8}}, .v = {{2, KvDtype::kInt4Had}}};
  const KvDtype tier = KvDtype::kInt8Had;
  auto t = KvBlockTranscoder::create(s, tier, tier);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  auto pl = KvBlockStorage::layout_of(s);
  auto tl = KvBlockStorage::layout_of(shape(tier, tier));
  ASSERT_TRUE(pl.is_ok() && tl.is_ok());
  EXPECT_EQ(t->pool_block_bytes(), pl->block_bytes);
  EXPECT_EQ(t->tier_block_bytes(), tl->block_bytes);
  std::vector<uint8_t> block(pl->block_bytes), tier_block(t->tier_block_bytes()),
      back(pl->block_bytes);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 2);
  std::vector<float> x(64), y(64);
  // Every (layer, head, token, K or V) vector: where it is and in which format, in a layout.
  struct Vec {
    uint64_t offset;
    KvDtype dtype;
    uint64_t bytes;
  };
  auto vectors = [](const PagedKvLayout& layout) {
    std::vector<Vec> out;
    for (uint32_t layer = 0; layer < 3; ++layer) {
      const PagedKvLayout v = layout.layer_view(layer);
      for (uint32_t h = 0; h < 2; ++h)
        for (uint64_t tok = 0; tok < 4; ++tok) {
          out.push_back(
              {v.k_head_offset(layer, h) + tok * v.k_vector_bytes, v.k_dtype, v.k_vector_bytes});
          out.push_back(
              {v.v_head_offset(layer, h) + tok * v.v_vector_bytes, v.v_dtype, v.v_vector_bytes});
        }
    }
    return out;
  };
  const std::vector<Vec> pv = vectors(*pl), tv = vectors(*tl);
  ASSERT_EQ(pv.size(), tv.size());
  uint64_t total = 0;
  for (const Vec& v : pv) {
    for (float& e : x) e = nd(rng);
    kv_vector_from_f32(v.dtype, x.data(), 64, block.data() + v.offset);
    total += v.bytes;
  }
  EXPECT_EQ(total, pl->block_bytes);  // the slices cover the block exactly
  t->encode(block.data(), tier_block.data());
  t->decode(tier_block.data(), back.data());
  std::vector<uint8_t> want(t->tier_block_bytes());
  for (size_t i = 0; i < pv.size(); ++i) {
    kv_vector_to_f32(pv[i].dtype, block.data() + pv[i].offset, 64, x.data(), 0);
    kv_vector_from_f32(tier, x.data(), 64, want.data());
    ASSERT_EQ(0, std::memcmp(want.data(), tier_block.data() + tv[i].offset, tv[i].bytes)) << i;
    kv_vector_to_f32(tier, want.data(), 64, y.data(), 0);
    kv_vector_from_f32(pv[i].dtype, y.data(), 64, want.data());
    ASSERT_EQ(0, std::memcmp(want.data(), back.data() + pv[i].offset, pv[i].bytes)) << i;
  }
}

}  // namespace
}  // namespace kvs
