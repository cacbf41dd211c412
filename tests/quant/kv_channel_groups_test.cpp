// Per-channel key groups (quant/kv_channel_groups.h) against their stated bound, and the tails
// cache (quant/key_tails.h) against a plain model of it.
#include "quant/kv_channel_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "core/half.h"
#include "quant/key_tails.h"
#include "support/simd_targets.h"

namespace kvs {
namespace {

// Keys with a few large channels that keep their offset from token to token (what per-channel
// quantization is for) plus token noise.
std::vector<float> keys_with_outlier_channels(uint32_t n, uint32_t dim, std::mt19937& rng) {
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> offset(dim), spread(dim);
  for (uint32_t c = 0; c < dim; ++c) {
    offset[c] = c % 13 == 0 ? 20.0f * noise(rng) : 0.5f * noise(rng);
    spread[c] = c % 7 == 0 ? 4.0f : 0.3f;
  }
  std::vector<float> x(uint64_t{n} * dim);
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t c = 0; c < dim; ++c) x[t * dim + c] = offset[c] + spread[c] * noise(rng);
  return x;
}

// Channel c's smallest and largest key over rows [0, n), rounded to f16 as a group seals them.
struct ChannelSpan {
  float lo = INFINITY, hi = -INFINITY;
};
ChannelSpan f16_span(const std::vector<float>& x, uint32_t n, uint32_t dim, uint32_t c) {
  ChannelSpan s;
  for (uint32_t u = 0; u < n; ++u) {
    const float v = f16_to_f32(f32_to_f16(x[u * dim + c]));
    s.lo = std::min(s.lo, v);
    s.hi = std::max(s.hi, v);
  }
  return s;
}

TEST(ChannelGroupTest, EveryElementWithinHalfItsChannelsStep) {
  std::mt19937 rng(7);
  for (const uint32_t bits : {2u, 3u, 4u})
    for (const uint32_t dim : {bits == 4 ? 32u : 8u, 64u, 256u})  // 4-bit rows: 32s
      for (uint32_t n = 1; n <= kMaxChannelGroupTokens; ++n) {    // up to the *_chan64 groups
        const std::vector<float> x = keys_with_outlier_channels(n, dim, rng);
        std::vector<uint8_t> group(channel_group_bytes(bits, kMaxChannelGroupTokens, dim), 0xAB);
        quantize_channel_group(bits, x.data(), dim, n, dim, group.data());
        const float qmax = float((1u << bits) - 1);
        std::vector<float> y(dim);
        for (uint32_t t = 0; t < n; ++t) {
          dequantize_channel_row(bits, group.data(), t, dim, y.data());
          for (uint32_t c = 0; c < dim; ++c) {
            const auto [lo, hi] = f16_span(x, n, dim, c);
            const float step = (hi - lo) / qmax * (1 + 1.0f / 512) + 6e-8f + std::abs(lo) / 1024;
            ASSERT_LE(std::abs(x[t * dim + c] - y[c]), step / 2 + std::abs(x[t * dim + c]) / 2048)
                << "bits " << bits << " dim " << dim << " n " << n << " t " << t << " c " << c;
          }
        }
      }
}

// int2mix_chan64's groups: exactly a quarter of the channels marked wide, those of widest range
// (the lower channel first among equals), each element within half its channel's step (range / 7
// wide, range / 3 otherwise), and the codes where the header puts them.
TEST(ChannelGroupTest, TheWidestQuarterOfTheChannelsTakesAThirdBit) {
  std::mt19937 rng(23);
  const ChannelBits code(2, true);
  for (const uint32_t dim : {32u, 64u, 256u})
    for (const uint32_t n : {1u, 2u, 17u, 63u, 64u}) {
      std::vector<float> x = keys_with_outlier_channels(n, dim, rng);
      if (n > 2) x[dim + 5] = x[5] + 1e4f;  // one channel far wider than any other
      std::vector<uint8_t> group(channel_group_bytes(code, kMaxChannelGroupTokens, dim), 0xAB);
      ASSERT_EQ(group.size(), 4 * dim + 64 * (dim / 4 + dim / 32));
      quantize_channel_group(code, x.data(), dim, n, dim, group.data());
      std::vector<float> range(dim), low(dim);
      for (uint32_t c = 0; c < dim; ++c) {
        const auto [lo, hi] = f16_span(x, n, dim, c);
        range[c] = hi - lo;
        low[c] = lo;
      }
      std::vector<uint32_t> order(dim);
      for (uint32_t c = 0; c < dim; ++c) order[c] = c;
      std::stable_sort(order.begin(), order.end(),
                       [&](uint32_t a, uint32_t b) { return range[a] > range[b]; });
      std::vector<bool> wide(dim, false);
      for (uint32_t i = 0; i < dim / 4; ++i) wide[order[i]] = true;
      if (n > 2) {
        EXPECT_TRUE(wide[5]);
      }
      std::vector<float> y(dim), q(dim);
      for (uint32_t c = 0; c < dim; ++c) {
        uint16_t s16;
        std::memcpy(&s16, channel_group_steps(group.data(), dim) + 2 * c, 2);
        ASSERT_EQ(channel_step_wide(s16), wide[c]) << "dim " << dim << " n " << n << " c " << c;
      }
      for (uint32_t t = 0; t < n; ++t) {
        dequantize_channel_row(code, group.data(), t, dim, y.data());
        channel_row_codes(code, group.data(), t, dim, q.data());
        for (uint32_t c = 0; c < dim; ++c) {
          const float levels = wide[c] ? 7.0f : 3.0f;
          ASSERT_LE(q[c], levels);
          const float step = range[c] / levels * (1 + 1.0f / 512) + 6e-8f + std::abs(low[c]) / 1024;
          ASSERT_LE(std::abs(x[t * dim + c] - y[c]), step / 2 + std::abs(x[t * dim + c]) / 2048)
              << "dim " << dim << " n " << n << " t " << t << " c " << c;
          // The low two bits in int2_chan64's row, the third after the 64 rows.
          EXPECT_EQ(channel_code(channel_group_codes(group.data(), 2, t, dim), 2, c),
                    uint32_t(q[c]) & 3u);
        }
        uint32_t k = 0;
        const uint8_t* third = channel_group_wide_bits(group.data(), t, dim);
        for (uint32_t c = 0; c < dim; ++c)
          if (wide[c]) {
            EXPECT_EQ((third[k / 8] >> (k % 8)) & 1u, uint32_t(q[c]) >> 2);
            ++k;
          }
      }
    }
}

// The bytes against the format's definition, written out plainly: each key rounded to f16
// (NaN -> 0, clamped to +-65504); per channel over rows [range_from, n) the minimum as the
// largest f16 <= it and the step as the smallest f16 >= range / qmax; each code
// nearbyint((key - min) x (1 / step)) clamped to [0, qmax]. Keys on a grid put (key - min) / step
// on exact halves, the ties that round to even.
TEST(ChannelGroupTest, TheBytesFollowTheDefinition) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const auto f16_floor = [](float v) {
    float best = -INFINITY;
    for (uint32_t h = 0; h < 0x10000u; ++h) {
      const float f = f16_to_f32(static_cast<uint16_t>(h));
      if (std::isfinite(f) && f <= v && f >= best) best = f;
    }
    return best;
  };
  for (const uint32_t bits : {2u, 3u, 4u})
    for (int trial = 0; trial < 8; ++trial) {
      // Head dims below, at and past the SIMD widths (the codes are coded in lanes).
      const uint32_t dim = trial < 6 ? (bits == 4 ? 32 : 16) : (bits == 4 ? 96 : 72);
      const uint32_t n = 1 + static_cast<uint32_t>(rng() % 64);
      const uint32_t range_from = trial % 3 == 2 && n > 1 ? 1 : 0;
      const float qmax = float((1u << bits) - 1);
      std::vector<float> x(uint64_t{n} * dim);
      for (uint32_t t = 0; t < n; ++t)
        for (uint32_t c = 0; c < dim; ++c) {
          float v = nd(rng) * (c % 5 == 0 ? 30.0f : 1.0f);
          if (trial % 3 == 1) v = 0.5f * static_cast<float>(static_cast<int>(rng() % 31));  // ties
          if (c == 3 && t == n / 2) v = -0.0f;
          if (c == 5 && t == 0) v = trial == 4 ? NAN : 1e6f;  // NaN -> 0; beyond f16 -> 65504
          x[t * dim + c] = v;
        }
      std::vector<uint8_t> group(channel_group_bytes(bits, kMaxChannelGroupTokens, dim), 0);
      std::vector<uint16_t> keys_f16(uint64_t{n} * dim);
      quantize_channel_group(bits, x.data(), dim, n, dim, group.data(), range_from,
                             keys_f16.data());
      for (size_t i = 0; i < x.size(); ++i)  // the keys handed back: each one's channel_key_f16
        ASSERT_EQ(keys_f16[i], channel_key_f16(x[i])) << "element " << i;
      for (uint32_t c = 0; c < dim; ++c) {
        std::vector<float> key(n);
        for (uint32_t t = 0; t < n; ++t) {
          const float v = x[t * dim + c];
          key[t] =
              std::isnan(v) ? 0.0f : f16_to_f32(f32_to_f16(std::clamp(v, -65504.0f, 65504.0f)));
        }
        float lo = key[range_from], hi = key[range_from];
        for (uint32_t t = range_from + 1; t < n; ++t) {
          lo = std::min(lo, key[t]);
          hi = std::max(hi, key[t]);
        }
        const float mn = f16_floor(lo);
        const float want_step_min = std::min((hi - mn) / qmax, 65504.0f);
        uint16_t m16, s16;
        std::memcpy(&m16, channel_group_minimums(group.data()) + 2 * c, 2);
        std::memcpy(&s16, channel_group_steps(group.data(), dim) + 2 * c, 2);
        ASSERT_EQ(f16_to_f32(m16), mn) << "bits " << bits << " trial " << trial << " c " << c;
        const float step = f16_to_f32(s16);
        // The smallest f16 >= range / qmax: it is >= that, and the f16 below it is not.
        ASSERT_GE(step, want_step_min) << "c " << c;
        ASSERT_LT(s16 == 0 ? -1.0f : f16_to_f32(static_cast<uint16_t>(s16 - 1)), want_step_min)
            << "c " << c;
        const float inv = step > 0 ? 1.0f / step : 0.0f;
        for (uint32_t t = 0; t < n; ++t) {
          const float q = std::clamp(std::nearbyint((key[t] - mn) * inv), 0.0f, qmax);
          ASSERT_EQ(channel_code(channel_group_codes(group.data(), bits, t, dim), bits, c),
                    static_cast<uint32_t>(q))
              << "bits " << bits << " trial " << trial << " t " << t << " c " << c;
        }
      }
    }
}

// Per channel beats one scale per token on keys with outlier channels: the reason for the format.
TEST(ChannelGroupTest, BeatsAPerTokenScaleOnOutlierChannels) {
  std::mt19937 rng(11);
  const uint32_t dim = 64, n = 16;
  const std::vector<float> x = keys_with_outlier_channels(n, dim, rng);
  std::vector<uint8_t> group(channel_group_bytes(4, kChannelGroupTokens, dim));
  quantize_channel_group(4, x.data(), dim, n, dim, group.data());
  double err_channel = 0, err_token = 0;
  std::vector<float> y(dim);
  for (uint32_t t = 0; t < n; ++t) {
    dequantize_channel_row(4, group.data(), t, dim, y.data());
    float amax = 0;
    for (uint32_t c = 0; c < dim; ++c) amax = std::max(amax, std::abs(x[t * dim + c]));
    const float s = amax / 7;  // symmetric 4-bit, one scale per token
    for (uint32_t c = 0; c < dim; ++c) {
      const float v = x[t * dim + c];
      err_channel += double(v - y[c]) * (v - y[c]);
      const float q = s * std::clamp(std::nearbyint(v / s), -8.0f, 7.0f);
      err_token += double(v - q) * (v - q);
    }
  }
  EXPECT_LT(err_channel, err_token / 4);
}

// The attention sink's row 0 (read from f16 rows, never from the group) is left out of the range:
// a far-off first key no longer widens every other row's step, and the other rows' error bound
// is their own range's.
TEST(ChannelGroupTest, ARangeFromRowOneLeavesRowZeroOut) {
  std::mt19937 rng(5);
  const uint32_t dim = 64, n = 16;
  std::vector<float> x = keys_with_outlier_channels(n, dim, rng);
  for (uint32_t c = 0; c < dim; ++c) x[c] = 40.0f * (c % 2 ? 1.0f : -1.0f);  // a sink-like key
  std::vector<uint8_t> all(channel_group_bytes(2, kChannelGroupTokens, dim)), rest(all.size());
  quantize_channel_group(2, x.data(), dim, n, dim, all.data());
  quantize_channel_group(2, x.data(), dim, n, dim, rest.data(), 1);
  std::vector<float> y(dim);
  double err_all = 0, err_rest = 0;
  for (uint32_t t = 1; t < n; ++t) {
    dequantize_channel_row(2, rest.data(), t, dim, y.data());
    for (uint32_t c = 0; c < dim; ++c) {
      float lo = x[dim + c], hi = lo;
      for (uint32_t u = 1; u < n; ++u) {
        lo = std::min(lo, x[u * dim + c]);
        hi = std::max(hi, x[u * dim + c]);
      }
      // step/2 of rows 1.. alone, with f16's rounding of the parameters
      ASSERT_LE(std::abs(y[c] - x[t * dim + c]), (hi - lo) / 3 * (1 + 1.0 / 256) / 2 + 0.01)
          << "t " << t << " c " << c;
      err_rest += double(y[c] - x[t * dim + c]) * (y[c] - x[t * dim + c]);
    }
    dequantize_channel_row(2, all.data(), t, dim, y.data());
    for (uint32_t c = 0; c < dim; ++c)
      err_all += double(y[c] - x[t * dim + c]) * (y[c] - x[t * dim + c]);
  }
  EXPECT_LT(err_rest, err_all / 4);
  // Row 0 is clamped into the others' range; a range_from past the rows means all rows.
  dequantize_channel_row(2, rest.data(), 0, dim, y.data());
  for (float v : y) EXPECT_LT(std::abs(v), 40.0f);
  std::vector<uint8_t> again(all.size());
  quantize_channel_group(2, x.data(), dim, 1, dim, again.data(), 1);
  rest.assign(rest.size(), 0);
  quantize_channel_group(2, x.data(), dim, 1, dim, rest.data());
  EXPECT_EQ(again, rest);
}

// A group filled a few rows at a time and resealed over its earlier seal has, after every
// write, the bytes of one seal over all its rows: with ranges that grow and stay, a range_from
// of 1 (the sink) that takes effect at the second row, signed zeros, repeated values (ties of
// the minimum), non-finite keys, and runs of 1-5 rows.
TEST(ChannelGroupTest, ResealingOverAnEarlierSealGivesTheWholeSealsBytes) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pick(0, 9), run(1, 5);
  for (const ChannelBits code : {ChannelBits(2), ChannelBits(3), ChannelBits(4),
                                 ChannelBits(2, true)})  // and int2mix_chan64's
    for (const uint32_t dim :
         {code.bits == 4 || code.wide ? 32u : 8u, 64u, code.bits == 4 || code.wide ? 96u : 72u})
      for (const uint32_t G : {kChannelGroupTokens, kMaxChannelGroupTokens})
        for (const uint32_t range_from : {0u, 1u})
          for (int trial = 0; trial < 4; ++trial) {
            if (code.wide && G != kMaxChannelGroupTokens) continue;
            const uint32_t bits = code.bits;
            std::vector<float> x = keys_with_outlier_channels(G, dim, rng);
            for (float& v : x) {
              const int p = pick(rng);
              if (p == 0) v = 0.0f;
              if (p == 1) v = -0.0f;
              if (p == 2) v = std::round(v);  // ties with other rows
            }
            if (trial == 3) {
              x[dim + 1] = NAN;
              x[2 * dim + 2] = INFINITY;
              x[3 * dim + 3] = -1e9f;
            }
            // The earlier rows reach a reseal as a tail holds them, f16 keys.
            std::vector<uint16_t> tail(x.size());
            for (size_t i = 0; i < x.size(); ++i) tail[i] = channel_key_f16(x[i]);
            const uint64_t bytes = channel_group_bytes(code, G, dim);
            const uint64_t row_bytes = uint64_t{dim} * bits / 8;
            // On every SIMD target (the lanes and their scalar tails at dims past a vector);
            // trial 0 adds one row, one row, then two at a time: the sink's range taking effect
            // at row 1 and then continued.
            test::for_each_target([&] {
              std::vector<uint8_t> group(bytes, 0x5A), whole(bytes);
              for (uint32_t sealed = 0; sealed < G;) {
                const uint32_t n = std::min<uint32_t>(
                    G, sealed + (trial == 0 ? (sealed < 2 ? 1u : 2u) : uint32_t(run(rng))));
                // rows [0, sealed) from the tail, the new ones raw, the keys handed back
                std::vector<uint16_t> added_f16(uint64_t{n - sealed} * dim);
                reseal_channel_group(code, tail.data(), x.data() + sealed * dim, dim, n, dim,
                                     group.data(), range_from, sealed, added_f16.data());
                ASSERT_TRUE(
                    std::equal(added_f16.begin(), added_f16.end(), tail.begin() + sealed * dim));
                whole.assign(bytes, 0xA5);
                quantize_channel_group(code, x.data(), dim, n, dim, whole.data(), range_from);
                const uint64_t used = 4 * uint64_t{dim} + n * row_bytes;
                // int2mix_chan64: and the third bits of rows [0, n), after the 64 rows
                const uint64_t third = 4 * uint64_t{dim} + uint64_t{G} * row_bytes;
                if (code.wide) {
                  ASSERT_TRUE(std::equal(group.begin() + third,
                                         group.begin() + third + n * (dim / 32),
                                         whole.begin() + third));
                }
                ASSERT_TRUE(std::equal(group.begin(), group.begin() + used, whole.begin()))
                    << "bits " << bits << (code.wide ? " wide" : "") << " dim " << dim << " G " << G
                    << " range_from " << range_from << " trial " << trial << " rows " << sealed
                    << " -> " << n;
                sealed = n;
              }
            });
          }
}

TEST(ChannelGroupTest, NonFiniteKeysDecodeFinite) {
  const uint32_t dim = 8;
  std::vector<float> x(2 * dim, 1.0f);
  x[0] = NAN;
  x[1] = INFINITY;
  x[dim + 2] = -INFINITY;
  std::vector<uint8_t> group(channel_group_bytes(3, kChannelGroupTokens, dim));
  quantize_channel_group(3, x.data(), dim, 2, dim, group.data());
  std::vector<float> y(dim);
  for (uint32_t t = 0; t < 2; ++t) {
    dequantize_channel_row(3, group.data(), t, dim, y.data());
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
  }
  dequantize_channel_row(3, group.data(), 0, dim, y.data());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], 65504.0f, 65504.0f / 7);
}

// The tails against a plain model (a map of (chunk, layer) -> rows and last write, at most
// `slots` chunks per layer, the layer's least recently written dropped first, a lookup that hits
// counting as a write): random writes, full groups, invalidations, copies and lookups; every
// lookup answers as the model does.
TEST(KeyTailsTest, RandomOperationsAgreeWithAModel) {
  const uint32_t slots = 4, layers = 3, heads = 2, dim = 8;
  const uint64_t chunks = 12;
  KeyTails tails = KeyTails::create(slots, layers, heads, dim, 16, chunks).value();
  EXPECT_EQ(KeyTails::bytes(slots, layers, heads, dim, 16),
            uint64_t{slots} * layers * heads * 16 * dim * 2);
  struct Entry {
    int rows = -1;  // -1: a slot taken, no rows recorded yet
    uint64_t stamp = 0;
    bool copied = false;  // rows copied from another chunk (tagged with that chunk)
  };
  std::map<std::pair<uint64_t, uint32_t>, Entry> model;  // (chunk, layer)
  uint64_t clock = 0;
  // Takes a slot of `layer` for the key (the layer's oldest dropped when all are taken).
  auto take = [&](std::pair<uint64_t, uint32_t> key) {
    if (model.count(key)) return;
    uint32_t taken = 0;
    auto oldest = model.end();
    for (auto it = model.begin(); it != model.end(); ++it) {
      if (it->first.second != key.second) continue;
      ++taken;
      if (oldest == model.end() || it->second.stamp < oldest->second.stamp) oldest = it;
    }
    if (taken == slots) model.erase(oldest);
    model[key] = Entry{};
  };
  std::mt19937 rng(3);
  for (int step = 0; step < 20000; ++step) {
    const uint64_t c = rng() % chunks;
    const uint32_t l = rng() % layers;
    const uint32_t rows = 1 + rng() % 16;
    switch (rng() % 4) {
      case 0:
      case 1: {  // a write of `rows` rows into (c, l): every head's first row tagged
        for (uint32_t h = 0; h < heads; ++h) {
          uint16_t* r = tails.acquire(c, l, h);
          ASSERT_NE(r, nullptr);
          r[0] = static_cast<uint16_t>(1000 * c + 10 * l + h);
        }
        take({c, l});
        model[{c, l}].stamp = ++clock;
        model[{c, l}].copied = false;
        tails.set_rows(c, l, rows);
        if (rows == 16)
          model.erase({c, l});
        else
          model[{c, l}].rows = int(rows);
        break;
      }
      case 2:
        if (rng() % 2 == 0) {
          tails.invalidate(c, c + 1);
          for (uint32_t k = 0; k < layers; ++k) model.erase({c, k});
        } else {  // a copy-on-write from chunk c to chunk d
          const uint64_t d = rng() % chunks;
          tails.copy(c, d);
          if (d == c) break;
          for (uint32_t k = 0; k < layers; ++k) {
            model.erase({d, k});
            if (!model.count({c, k})) continue;
            model[{c, k}].stamp = ++clock;
            const int held = model[{c, k}].rows;
            take({d, k});
            model[{d, k}] = Entry{held, ++clock, true};
          }
        }
        break;
      default: {
        const uint32_t h = rng() % heads;
        const uint16_t* found = tails.find(c, l, h, rows);
        const bool want = model.count({c, l}) && model[{c, l}].rows == int(rows);
        ASSERT_EQ(found != nullptr, want) << "step " << step;
        if (found != nullptr && !model[{c, l}].copied) {  // its own rows, no other slot's
          ASSERT_EQ(found[0], 1000 * c + 10 * l + h) << "step " << step;
        }
        if (want) model[{c, l}].stamp = ++clock;
        break;
      }
    }
    ASSERT_TRUE(tails.check_integrity());
    ASSERT_EQ(tails.in_use(), model.size());
  }
}

// A copy holds the source's rows of every layer and head, under the source's counts, and the
// source keeps its own.
TEST(KeyTailsTest, CopyTakesEveryLayersRows) {
  KeyTails tails = KeyTails::create(3, 2, 2, 8, 16, 10).value();
  for (uint32_t l = 0; l < 2; ++l)
    for (uint32_t h = 0; h < 2; ++h) {
      uint16_t* rows = tails.acquire(4, l, h);
      ASSERT_NE(rows, nullptr);
      for (uint32_t i = 0; i < 16 * 8; ++i) rows[i] = static_cast<uint16_t>(1000 * l + 100 * h + i);
    }
  tails.set_rows(4, 0, 5);
  tails.set_rows(4, 1, 4);
  tails.copy(4, 7);
  for (uint32_t h = 0; h < 2; ++h) {
    const uint16_t* a = tails.find(7, 0, h, 5);
    const uint16_t* b = tails.find(7, 1, h, 4);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    for (uint32_t i = 0; i < 16 * 8; ++i) {
      EXPECT_EQ(a[i], 100 * h + i);
      EXPECT_EQ(b[i], 1000 + 100 * h + i);
    }
    EXPECT_NE(tails.find(4, 0, h, 5), nullptr);
  }
  // No tail to copy: the destination's old one is dropped.
  tails.copy(2, 7);
  EXPECT_EQ(tails.find(7, 0, 0, 5), nullptr);
  EXPECT_TRUE(tails.check_integrity());
}

TEST(KeyTailsTest, FullGroupsFreeTheirSlotAndTheOldestIsReusedFirst) {
  KeyTails tails = KeyTails::create(2, 2, 1, 8, 16, 10).value();
  ASSERT_NE(tails.acquire(1, 0, 0), nullptr);
  tails.set_rows(1, 0, 5);
  ASSERT_NE(tails.acquire(2, 0, 0), nullptr);
  tails.set_rows(2, 0, 3);
  EXPECT_EQ(tails.in_use(), 2u);
  EXPECT_NE(tails.find(1, 0, 0, 5), nullptr);  // a write that finds its tail: written last now
  EXPECT_EQ(tails.find(1, 0, 0, 4), nullptr);  // not the rows the writer expects
  EXPECT_EQ(tails.find(1, 1, 0, 5), nullptr);  // another layer
  ASSERT_NE(tails.acquire(3, 0, 0), nullptr);  // evicts chunk 2, the least recently written
  tails.set_rows(3, 0, 1);
  EXPECT_EQ(tails.find(2, 0, 0, 3), nullptr);
  EXPECT_NE(tails.find(1, 0, 0, 5), nullptr);
  tails.set_rows(1, 0, 16);  // a full group frees its slot in that layer
  EXPECT_EQ(tails.in_use(), 1u);
  // Each layer has its own slots: two chunks in layer 1 leave layer 0's tail alone.
  ASSERT_NE(tails.acquire(4, 1, 0), nullptr);
  tails.set_rows(4, 1, 2);
  ASSERT_NE(tails.acquire(5, 1, 0), nullptr);
  tails.set_rows(5, 1, 2);
  EXPECT_NE(tails.find(3, 0, 0, 1), nullptr);
  EXPECT_EQ(tails.in_use(), 3u);
  tails.invalidate(0, 10);
  EXPECT_EQ(tails.in_use(), 0u);
  EXPECT_TRUE(tails.check_integrity());
}

}  // namespace
}  // namespace kvs
