#include "kernels/int8_matmul.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "kernels/activations.h"
#include "kernels/int8_gemm.h"
#include "kernels/packed_weights.h"

namespace kvs {
namespace {

using int8_gemm::kPackedRows;
using int8_gemm::kTileTokens;

// A growable 64-byte aligned buffer.
class AlignedBytes {
 public:
  uint8_t* get(size_t n) {
    if (n > cap_) {
      const size_t rounded = (n + 63) / 64 * 64;
      buf_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
      KVS_CHECK(buf_ != nullptr);
      cap_ = rounded;
    }
    return buf_.get();
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> buf_;
  size_t cap_ = 0;
};

// The calling thread's quantized activation, reused across calls.
struct ActScratch {
  AlignedBytes q, d, s, osum, half_osum;
};

const int8_gemm::Kernels& kernels_for(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kAvx512Vnni: return int8_gemm::kernels_avx512vnni();
    case Int8Isa::kAvxVnni: return int8_gemm::kernels_avxvnni();
    default: return int8_gemm::kernels_avx2();
  }
}

}  // namespace

bool int8_matmul_supports(WeightType t) {
  switch (t) {
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ8_0:
    case WeightType::kQ4_K:
    case WeightType::kQ6_K: return true;
    default: return false;
  }
}

bool int8_matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  const MatmulOutput one{&w, y};
  return int8_matmul_group(std::span<const MatmulOutput>(&one, 1), x, T, pool);
}

namespace {

// X quantized once for a call on weights of w0's type and K, or null where the 8-bit GEMM does
// not take it (no ISA, or a type it does not handle).
struct QuantizedActs {
  const int8_gemm::Kernels* k = nullptr;
  int8_gemm::Acts a{};
  bool prefetch_one = false;  // int8_prefetch_one_token(), read once per call
};

QuantizedActs quantize_acts(const WeightMatrix& w0, const float* x, int64_t T, ThreadPool& pool) {
  const Int8Isa isa = int8_isa_active();
  if (isa == Int8Isa::kNone || !int8_matmul_supports(w0.type)) return {};
  const int8_gemm::Kernels& k = kernels_for(isa);
  const int64_t K = w0.cols, KB = K / 32;
  // A block's row holds a whole number of cache lines of every array (16 tokens: 64 bytes of
  // scales), and threads quantize whole runs of 16 tokens, so no two threads write one line.
  // With runs of T / 8 tokens the scale arrays' lines ping-ponged between the cores: SmolLM2's
  // down projection at 64 tokens and 2 threads took 128-278 us instead of 88-105 (Zen 5).
  constexpr int64_t kLineTokens = 16;
  const int64_t stride = (T + kLineTokens - 1) / kLineTokens * kLineTokens;
  thread_local ActScratch scratch;
  const auto bytes = [](int64_t n) { return static_cast<size_t>(n); };
  const int8_gemm::Acts a{
      .q = reinterpret_cast<int8_t*>(scratch.q.get(bytes(stride * K))),
      .d = reinterpret_cast<float*>(scratch.d.get(bytes(stride * KB * 4))),
      .s = reinterpret_cast<float*>(scratch.s.get(bytes(stride * KB * 4))),
      .osum = reinterpret_cast<int32_t*>(scratch.osum.get(bytes(stride * KB * 4))),
      .half_osum = reinterpret_cast<int32_t*>(scratch.half_osum.get(bytes(stride * KB * 8))),
      .K = K,
      .KB = KB,
      .T = stride,
  };
  const int threads = pool.num_threads();
  if (threads > 1 && T * K >= (int64_t{1} << 16)) {
    const int64_t chunk = std::max<int64_t>(1, T / (4 * threads));
    const auto grain = static_cast<size_t>((chunk + kLineTokens - 1) / kLineTokens * kLineTokens);
    pool.parallel_for(static_cast<size_t>(T), grain, [&](size_t b, size_t e, int) {
      k.quantize(w0.type, x, static_cast<int64_t>(b), static_cast<int64_t>(e), a);
    });
  } else {
    k.quantize(w0.type, x, 0, T, a);
  }
  return {&k, a, int8_prefetch_one_token()};
}

// The same activations seen from token t0: its token i is a's token t0 + i (same strides).
int8_gemm::Acts acts_from(const int8_gemm::Acts& a, int64_t t0) {
  int8_gemm::Acts v = a;
  v.q += t0 * 32;
  v.d += t0;
  v.s += t0;
  v.osum += t0;
  v.half_osum += 2 * t0;
  return v;
}

// Work items: a group of kPackedRows rows x a range of tokens. The tokens are split only when the
// groups are too few to keep every thread busy (a token's result does not depend on the split).
struct ItemSplit {
  int64_t splits = 1, per_split = 0;
  // Neighbouring items in one chunk, about 2 chunks per thread, so that a thread reads a long
  // run of the weights rather than every other group, and a step claims few chunks (each claim
  // and count is an atomic on a line both threads write). With 8 chunks per thread,
  // single-stream decode at 2 threads on Zen 5 was 20-33% slower (docs/kernels.md); 2 rather
  // than 1 still lets the other threads take a late thread's second chunk.
  size_t grain = 1;
};

ItemSplit split_items(int64_t groups, int64_t T, int threads) {
  ItemSplit s;
  while (groups * s.splits < 4 * threads && T / (2 * s.splits) >= 2 * kTileTokens) s.splits *= 2;
  s.per_split = ((T + s.splits - 1) / s.splits + kTileTokens - 1) / kTileTokens * kTileTokens;
  s.splits = (T + s.per_split - 1) / s.per_split;
  s.grain = static_cast<size_t>(std::max<int64_t>(1, groups * s.splits / (2 * threads)));
  return s;
}

// Group g of w's rows x tokens [t0, t1) into y[t * N + n0 + r] (r < the group's rows).
void gemm_group(const QuantizedActs& q, const WeightMatrix& w, int64_t g, int64_t t0, int64_t t1,
                float* y, int64_t N, int64_t n0) {
  const uint8_t* group;
  if (w.packed != nullptr) {
    group = w.packed + g * packed_group_bytes(w.type, w.cols);
  } else {
    // Not packed at load: pack this group now.
    thread_local AlignedBytes scratch;
    uint8_t* p = scratch.get(packed_group_bytes(w.type, w.cols));
    pack_group(w, g, p);
    group = p;
  }
  q.k->gemm(w.type, group, q.a, t0, t1, y, N, n0,
            static_cast<int>(std::min(kPackedRows, w.rows - g * kPackedRows)), q.prefetch_one);
}

}  // namespace

bool int8_matmul_group(std::span<const MatmulOutput> outs, const float* x, int64_t T,
                       ThreadPool& pool) {
  KVS_CHECK(!outs.empty() && outs.size() <= kMaxMatmulGroup);
  const WeightMatrix& w0 = *outs[0].w;
  for (const MatmulOutput& o : outs) KVS_CHECK(o.w->type == w0.type && o.w->cols == w0.cols);
  const QuantizedActs q = quantize_acts(w0, x, T, pool);
  if (q.k == nullptr) return false;
  // The weights' rows laid end to end: weight i owns the groups [first_group[i],
  // first_group[i + 1]) of 16 rows. Fixed arrays: this runs several times per layer.
  const size_t count = outs.size();
  std::array<int64_t, kMaxMatmulGroup + 1> first_group{};
  for (size_t i = 0; i < count; ++i)
    first_group[i + 1] = first_group[i] + (outs[i].w->rows + kPackedRows - 1) / kPackedRows;
  const int64_t groups = first_group[count];
  if (groups == 0) return true;
  const ItemSplit s = split_items(groups, T, pool.num_threads());
  pool.parallel_for(static_cast<size_t>(groups * s.splits), s.grain, [&](size_t b, size_t e, int) {
    for (size_t item = b; item < e; ++item) {
      const int64_t gi = static_cast<int64_t>(item) / s.splits;
      const int64_t t0 = static_cast<int64_t>(item) % s.splits * s.per_split;
      size_t i = 0;
      while (gi >= first_group[i + 1]) ++i;
      const WeightMatrix& w = *outs[i].w;
      const int64_t g = gi - first_group[i];
      gemm_group(q, w, g, t0, std::min(T, t0 + s.per_split), outs[i].y, w.rows, g * kPackedRows);
    }
  });
  return true;
}

bool int8_matmul_gated(const WeightMatrix& gate, const WeightMatrix& up, GateActivation act,
                       const float* x, int64_t T, float* out, ThreadPool& pool) {
  KVS_CHECK(gate.type == up.type && gate.cols == up.cols && gate.rows == up.rows);
  // Whole groups only: the activation then runs on whole rows of 16 values, which every target
  // converts in full vectors, as it does the whole [T][F] array unfused.
  if (gate.rows % kPackedRows != 0) return false;
  const QuantizedActs q = quantize_acts(gate, x, T, pool);
  if (q.k == nullptr) return false;
  const int64_t F = gate.rows, groups = F / kPackedRows;
  if (groups == 0) return true;
  const ItemSplit s = split_items(groups, T, pool.num_threads());
  pool.parallel_for(static_cast<size_t>(groups * s.splits), s.grain, [&](size_t b, size_t e, int) {
    // An item's gate and up rows, kChunk tokens at a time, as [kChunk][16] in this thread's
    // buffers (6 KB: in L1), so that the activation is one call per chunk, then the result's rows
    // to out. (Whole-item tiles spilled to L2 at prefill's hundreds of tokens: slower than
    // unfused.) How the tokens are cut does not change a (row, token) sum.
    constexpr int64_t kChunk = 48;
    alignas(64) float gt[kChunk * kPackedRows], ut[kChunk * kPackedRows];
    for (size_t item = b; item < e; ++item) {
      const int64_t g = static_cast<int64_t>(item) / s.splits;
      const int64_t t0 = static_cast<int64_t>(item) % s.splits * s.per_split;
      const int64_t t1 = std::min(T, t0 + s.per_split);
      for (int64_t c0 = t0; c0 < t1; c0 += kChunk) {
        const int64_t c1 = std::min(t1, c0 + kChunk);
        // The activations from token c0 on, so that the GEMM writes token c0 + i at row i (the
        // rest of the call's choices, such as the one-token prefetch, carried along).
        QuantizedActs qc = q;
        qc.a = acts_from(q.a, c0);
        gemm_group(qc, gate, g, 0, c1 - c0, gt, kPackedRows, 0);
        gemm_group(qc, up, g, 0, c1 - c0, ut, kPackedRows, 0);
        gated_activation(act, gt, ut, (c1 - c0) * kPackedRows, gt);
        for (int64_t t = c0; t < c1; ++t)
          std::memcpy(out + t * F + g * kPackedRows, gt + (t - c0) * kPackedRows,
                      kPackedRows * sizeof(float));
      }
    }
  });
  return true;
}

int64_t int8_peak_loop(Int8Isa isa, int64_t iters) {
  KVS_CHECK(isa != Int8Isa::kNone && int8_isa_supported(isa));
  return kernels_for(isa).peak_loop(iters);
}

int64_t int8_peak_macs_per_iter(Int8Isa isa) {
  KVS_CHECK(isa != Int8Isa::kNone);
  return kernels_for(isa).peak_macs_per_iter;
}

}  // namespace kvs
