// Each channel's range over a group's rows, the first step of sealing per-channel keys
// (kv_channel_groups.h): for every channel c, the minimum and maximum of rows[t][c] over the
// rows, compared in row order as std::min / std::max compare (so a signed zero ends where the
// scalar loop leaves it). In SIMD lanes, one channel per lane; the same bits on every target
// (tests/quant/channel_range_test.cpp).
#pragma once

#include <cstdint>

namespace kvs {

// lo[c] and hi[c] start as rows[0][c]; rows[t] for t in [1, n) (n >= 1) are then compared in,
// in order. rows[t] points at row t's dim floats.
void channel_range(const float* const* rows, uint32_t n, uint32_t dim, float* lo, float* hi);
// The same comparisons, continued: rows[t] for t in [0, n) compared into lo and hi as they are
// (what channel_range left for earlier rows), so a range over rows [0, a + b) is channel_range
// over the first a and channel_range_extend over the next b, bit for bit.
void channel_range_extend(const float* const* rows, uint32_t n, uint32_t dim, float* lo, float* hi);
// channel_range of f16 rows (n >= 1 rows of dim, one after another) with no NaN or infinity, as
// a key group's tail holds them (channel_key_f16), compared as f16 in 16-bit lanes (twice the
// lanes of f32, and no conversion but the result's): lo and hi are what channel_range gives for
// the rows converted to f32, bit for bit.
void channel_range_f16(const uint16_t* rows, uint32_t n, uint32_t dim, float* lo, float* hi);

}  // namespace kvs
