// Weight matmul throughput for the SmolLM2-135M shapes. Counters: "GB/s" = weight bytes read per
// second (the decode roofline: compare with BM_MemoryRead, the machine's streaming read bandwidth
// measured the same way), "GFLOP/s" = 2*N*K*T per second (the prefill roofline).
// Args: type, N, K, T, threads. Single-thread runs are timed in CPU time (robust on a shared
// machine), multi-thread runs in wall time.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "core/weight_type.h"
#include "kernels/matmul.h"

namespace kvs {
namespace {

std::vector<uint8_t> make_weights(WeightType type, int64_t N, int64_t K) {
  std::mt19937 rng(42);
  std::vector<uint8_t> buf(weight_row_bytes(type, K) * N);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const auto& info = weight_type_info(type);
  // Finite, small scales (random bytes could be inf/NaN halves).
  const uint16_t d = f32_to_f16(0.01f);
  for (size_t off = 0; off + info.block_bytes <= buf.size(); off += info.block_bytes) {
    switch (type) {
      case WeightType::kQ8_0:
      case WeightType::kQ4_0:
      case WeightType::kQ5_0: std::memcpy(&buf[off], &d, 2); break;
      case WeightType::kQ4_1:
      case WeightType::kQ4_K:
        std::memcpy(&buf[off], &d, 2);
        std::memcpy(&buf[off + 2], &d, 2);
        break;
      case WeightType::kQ6_K: std::memcpy(&buf[off + 208], &d, 2); break;
      case WeightType::kF16: std::memcpy(&buf[off], &d, 2); break;
      case WeightType::kBF16: buf[off + 1] = 0x3C; break;
      case WeightType::kF32: {
        const float f = 0.01f;
        std::memcpy(&buf[off], &f, 4);
        break;
      }
    }
  }
  return buf;
}

ThreadPool& pool(int threads) {
  static std::unique_ptr<ThreadPool> pools[8];
  if (!pools[threads]) pools[threads] = std::make_unique<ThreadPool>(threads);
  return *pools[threads];
}

void set_counters(benchmark::State& state, const WeightMatrix& w, int64_t T) {
  const double bytes = static_cast<double>(w.row_bytes) * static_cast<double>(w.rows);
  const double flops = 2.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols) * T;
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Matmul(benchmark::State& state) {
  const auto type = static_cast<WeightType>(state.range(0));
  const int64_t N = state.range(1), K = state.range(2), T = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  const auto wbuf = make_weights(type, N, K);
  const WeightMatrix w{type, wbuf.data(), N, K, weight_row_bytes(type, K)};
  std::vector<float> x(T * K, 0.5f), y(T * N);
  for (int64_t i = 0; i < T * K; ++i) x[i] = static_cast<float>((i * 37) % 101) * 0.01f - 0.5f;
  ThreadPool& p = pool(threads);
  state.SetLabel(weight_type_info(type).name);
  for (auto _ : state) {
    matmul(w, x.data(), T, y.data(), p);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, w, T);
}

void BM_MatmulReference(benchmark::State& state) {
  const auto type = static_cast<WeightType>(state.range(0));
  const int64_t N = state.range(1), K = state.range(2), T = state.range(3);
  const auto wbuf = make_weights(type, N, K);
  const WeightMatrix w{type, wbuf.data(), N, K, weight_row_bytes(type, K)};
  std::vector<float> x(T * K, 0.25f), y(T * N);
  state.SetLabel(weight_type_info(type).name);
  for (auto _ : state) {
    matmul_reference(w, x.data(), T, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, w, T);
}

constexpr int64_t kQ41 = static_cast<int64_t>(WeightType::kQ4_1);
constexpr int64_t kQ80 = static_cast<int64_t>(WeightType::kQ8_0);

template <int64_t kThreads>
void SmolLmShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "N", "K", "T", "threads"});
  const int64_t shapes[][3] = {
      {kQ41, 576, 576}, {kQ41, 1536, 576}, {kQ41, 576, 1536}, {kQ80, 49152, 576}};
  for (const auto& s : shapes)
    for (int64_t T : {1, 4, 16, 64}) b->Args({s[0], s[1], s[2], T, kThreads});
}

// Streaming read of a 256 MiB buffer split over the pool (the decode bandwidth ceiling).
void BM_MemoryRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const size_t n = size_t{256} << 20 >> 3;
  std::vector<uint64_t> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = i;
  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8);
  ThreadPool& p = pool(threads);
  for (auto _ : state) {
    p.parallel_for(n / 8, 4096, [&](size_t begin, size_t end, int t) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t i = begin * 8; i < end * 8; i += 8) {
        s0 += buf[i] ^ buf[i + 4];
        s1 += buf[i + 1] ^ buf[i + 5];
        s2 += buf[i + 2] ^ buf[i + 6];
        s3 += buf[i + 3] ^ buf[i + 7];
      }
      sums[static_cast<size_t>(t) * 8] += s0 + s1 + s2 + s3;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(n * 8) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void OtherTypes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "N", "K", "T", "threads"});
  for (WeightType t : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ8_0,
                       WeightType::kQ4_0, WeightType::kQ4_K, WeightType::kQ6_K})
    for (int64_t T : {1, 16}) b->Args({static_cast<int64_t>(t), 1536, 1536, T, 1});
}

void ReferenceShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "N", "K", "T", "threads"});
  b->Args({kQ41, 576, 1536, 1, 1});
  b->Args({kQ41, 576, 1536, 16, 1});
  b->Args({kQ80, 49152, 576, 1, 1});
}

BENCHMARK(BM_Matmul)->Apply(SmolLmShapes<1>);
BENCHMARK(BM_Matmul)->Apply(SmolLmShapes<2>)->UseRealTime();
BENCHMARK(BM_Matmul)->Apply(OtherTypes);
BENCHMARK(BM_MemoryRead)->Arg(1);
BENCHMARK(BM_MemoryRead)->Arg(2)->UseRealTime();
BENCHMARK(BM_MatmulReference)->Apply(ReferenceShapes)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvs

BENCHMARK_MAIN();
