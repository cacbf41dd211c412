// int2_tcq64 (kv_format.h): 2 bits per element of the Hadamard-rotated vector, coded by a trellis
// instead of one element at a time. A group of 64 elements is [f16 d][16 bytes: 64 two-bit codes]
// like int2_had64's, but element i stands for d x kTrellisLevels[s_i] / 128
// (quant/trellis_codebook.h; the / 128 keeps d near 3 x the group's rms, clear of f16's
// subnormals), where s_i, the state of an 8-bit shift register, is element i's code with the three
// codes before it:
//
//   s_i = c_{i-3} << 6 | c_{i-2} << 4 | c_{i-1} << 2 | c_i      (indices mod 64: tail-biting)
//
// So each element picks one of 256 levels while paying 2 bits, and the group's 64 choices are
// made together: the writer searches all 4^64 code sequences for the one of least squared error
// with the Viterbi algorithm (one pass costs 64 steps x 256 states). A level is the sum of two
// parts of 16 values, each indexed by a mix of the state's nibbles, so a reader can look it up
// with two 16-byte shuffles as well as with a gather. Against int2_had64's four levels this lowers
// a Gaussian group's squared error, relative to its energy, from 0.114 to 0.083
// (docs/kv-quantization.md), as a random table of 256 Gaussian levels does. The bitshift trellis
// and the tail-biting are QTIP's (Tseng et al., 2024).
//
// Layout of one group (little endian): [f16 d][16 bytes], code c_i at bits 2 (63 - i) .. 2 (63 - i)
// + 1 of the 128-bit plane. Element i's state is then the 8 bits of the plane from bit
// 2 (63 - i), wrapping from bit 127 to bit 0: a reader takes any element's state with one shift.
//
// The writer: d is searched over five candidates f x 128 rms / kTrellisLevelRms (f = 0.8 .. 1.12,
// rms the group's root mean square, each rounded to f16), keeping the one of least squared error.
// Each candidate is coded tail-biting in two passes: a free pass over the group rotated by half
// gives the state at the wrap, whose low six bits then fix both ends of a second pass. NaN is
// stored as 0; +-inf (as +-the largest float) sets the largest f16 scale and reads back as that
// scale times a level of its sign, a finite value.
#pragma once

#include <cstdint>

#include "quant/trellis_codebook.h"

namespace kvs {

inline constexpr uint32_t kTrellisGroup = 64;           // elements per group
inline constexpr uint32_t kTrellisGroupBytes = 18;      // f16 scale + 64 x 2 bits
inline constexpr uint32_t kTrellisStates = 256;         // 8-bit shift register
inline constexpr uint32_t kTrellisContexts = 64;        // a state's low (or high) six bits
inline constexpr float kTrellisLevelUnit = 1.0f / 128;  // a level's value is d x level x this
// A forward pass's back pointers: three 64-bit words per step (TrellisForwardFn).
inline constexpr uint32_t kTrellisBackWords = 3 * kTrellisGroup;

// kTrellisLevels as floats, aligned: a vector of consecutive states' levels is one load, and a
// vector of any states' levels one gather.
struct TrellisLevelsF32 {
  alignas(64) float v[kTrellisStates];
  constexpr TrellisLevelsF32() : v() {
    for (uint32_t s = 0; s < kTrellisStates; ++s) v[s] = float(kTrellisLevels[s]);
  }
};
inline constexpr TrellisLevelsF32 kTrellisLevelsF32;

// One forward Viterbi pass over x[0, 64) (already divided by d x kTrellisLevelUnit, |x| <= 1024):
// after it, cost[s] is the least squared error, sum (x_i - kTrellisLevels[s_i])^2, of a path ending
// in state s, and back[] (kTrellisBackWords words) says which predecessor t + 64 a (a = 0..3) the
// best path into a state of high six bits t came from at step i >= 1: the step's running minimum
// over a = 0, 1, 2, 3 moved to a where bit t of back[3 i + a - 1] is set, so the predecessor is
// the largest such a, else 0 (trellis_predecessor). Three bit masks per step are what a SIMD
// compare gives, where a byte per context took two blends and a narrowing store. With
// context >= 0, paths start in a state of high six bits `context` (others cost +inf). Each step's
// terms are the scalar loop's, in its order, and ties keep the smallest a, so any implementation
// gives the same bits.
using TrellisForwardFn = void (*)(const float* x, int context, float* cost, uint64_t* back);

// The predecessor a (0..3) of context t at step i >= 1, from a forward pass's back words.
[[nodiscard]] inline uint32_t trellis_predecessor(const uint64_t* back, uint32_t i, uint32_t t) {
  const uint64_t* w = back + 3 * i;
  return (w[2] >> t & 1) ? 3 : (w[1] >> t & 1) ? 2 : (w[0] >> t & 1) ? 1 : 0;
}

// The scalar loop: the definition.
void trellis_forward_scalar(const float* x, int context, float* cost, uint64_t* back);

// n % 64 == 0; x is the (already rotated) vector.
void quantize_trellis(const float* x, uint32_t n, uint8_t* dst);
// The same bytes, with the passes run by `forward` (kernels/trellis_forward.h in lanes).
void quantize_trellis_with(const float* x, uint32_t n, uint8_t* dst, TrellisForwardFn forward);
void dequantize_trellis(const uint8_t* src, uint32_t n, float* y);

// The state (0 .. 255) of element i (< 64) of the group starting at `group`.
[[nodiscard]] uint32_t trellis_state(const uint8_t* group, uint32_t i);

}  // namespace kvs
