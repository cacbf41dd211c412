// channel_codes (quant/channel_codes.h) against its scalar definition, bit for bit, on every SIMD
// target this CPU runs: ties at every half step, values far outside the range on both sides, a
// zero step, each bit width's top code, and head dims around the vector widths.
#include "quant/channel_codes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/half.h"
#include "support/simd_targets.h"

namespace kvs {
namespace {

TEST(ChannelCodesTest, TheScalarDefinitionsBitsOnEveryTarget) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const uint32_t qmax : {3u, 7u, 15u})
    for (const uint32_t dim : {8u, 24u, 64u, 72u, 256u})
      for (const uint32_t n : {1u, 5u, 64u}) {
        std::vector<float> minimum(dim), inverse_step(dim), data(uint64_t{n} * dim);
        for (uint32_t c = 0; c < dim; ++c) {
          // The parameters as a group stores them: f16 minimum and step, the step possibly 0
          // or an f16 subnormal (a channel whose keys are all but equal: 1 / step up to 2^24).
          const float step = c % 11 == 5   ? 0.0f
                             : c % 11 == 7 ? f16_to_f32(static_cast<uint16_t>(1 + rng() % 1023))
                                           : f16_to_f32(f32_to_f16(0.01f + std::fabs(nd(rng))));
          minimum[c] = f16_to_f32(f32_to_f16(4.0f * nd(rng)));
          inverse_step[c] = step > 0 ? 1.0f / step : 0.0f;
          for (uint32_t t = 0; t < n; ++t) {
            const uint32_t kind = static_cast<uint32_t>(rng() % 5);
            const float level = static_cast<float>(rng() % (qmax + 3)) - 1.0f;
            // The inputs are f16 keys, as a seal rounds them.
            float v = minimum[c] + step * qmax * (0.5f + 0.7f * nd(rng));
            if (kind == 1) v = minimum[c] + step * (level + 0.5f);  // a tie (when exact)
            if (kind == 2) v = minimum[c] + step * level;
            if (kind == 3) v = (rng() % 2 ? 1.0f : -1.0f) * 65504.0f;  // far outside the range
            data[uint64_t{t} * dim + c] = kind == 4 ? f16_to_f32(f32_to_f16(v)) : v;
          }
        }
        std::vector<const float*> rows(n);
        for (uint32_t t = 0; t < n; ++t) rows[t] = data.data() + uint64_t{t} * dim;
        std::vector<uint8_t> want(uint64_t{n} * dim);
        for (uint32_t t = 0; t < n; ++t)
          for (uint32_t c = 0; c < dim; ++c) {
            want[uint64_t{t} * dim + c] = static_cast<uint8_t>(
                channel_code_of(rows[t][c], minimum[c], inverse_step[c], qmax));
            ASSERT_LE(want[uint64_t{t} * dim + c], qmax);
            // The definition rounds to nearest, ties to even, and clamps.
            const float exact = std::clamp(
                std::nearbyint((rows[t][c] - minimum[c]) * inverse_step[c]), 0.0f, float(qmax));
            ASSERT_EQ(want[uint64_t{t} * dim + c], static_cast<uint32_t>(exact));
          }
        test::for_each_target([&] {
          std::vector<uint8_t> got(uint64_t{n} * dim + 1, 0xEE);
          channel_codes(rows.data(), n, dim, minimum.data(), inverse_step.data(), qmax, got.data());
          for (uint64_t i = 0; i < want.size(); ++i)
            ASSERT_EQ(got[i], want[i]) << "qmax " << qmax << " dim " << dim << " element " << i;
          ASSERT_EQ(got.back(), 0xEE);
        });
      }
}

}  // namespace
}  // namespace kvs
