// Weight matmul throughput for the SmolLM2-135M and Gemma 3 270M shapes, next to the machine's
// ceilings measured in the same run:
//  * BM_Int8Peak/<isa>/<threads>: the 8-bit dot-product peak of each ISA this CPU has, a tight
//    loop of its best instruction (vpmaddubsw + vpmaddwd on AVX2, vpdpbusd with AVX-VNNI /
//    AVX512-VNNI) on every thread. "Gops/s" counts 2 ops per multiply-add.
//  * BM_MemoryRead/<threads>: streaming read bandwidth (the decode roofline).
// BM_Matmul/<path>/type/N/K/T/threads (block-quantized weights packed once before timing, as the
// model packs them at load; kernels/packed_layout.h) counters: "GB/s" = weight bytes read per
// second; "Gops/s" = 2*N*K*T per second; "of_peak" = Gops/s over the best ISA's peak at the same
// thread count; "of_bw" = GB/s over BM_MemoryRead at the same thread count (peaks and bandwidth
// measured once, before the first matmul, on the same clock). Paths: "default" is matmul()'s own
// choice; "highway-int16" is the Highway int16 (pmaddwd) path, the only integer path before the
// 8-bit GEMM; "avx2", "avx-vnni", "avx512-vnni" are the 8-bit GEMM forced onto that ISA (registered
// only when the CPU has it), so one run compares before and after. Single-thread runs are timed
// in the thread's CPU time, multi-thread in wall time.
//
//   build/bench/matmul_bench --benchmark_filter='Peak|Memory|/1$'   # everything single-threaded
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "core/weight_type.h"
#include "kernels/int8_isa.h"
#include "kernels/int8_matmul.h"
#include "kernels/matmul.h"
#include "kernels/packed_weights.h"

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

// Seconds on the clock the benchmarks of `threads` threads use: the calling thread's CPU time for
// one thread (a ThreadPool of 1 runs everything on the caller; robust on a shared machine), wall
// time otherwise.
double clock_seconds(int threads) {
  if (threads == 1) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The 8-bit ISAs this CPU can run, best first.
std::vector<Int8Isa> int8_isas() {
  std::vector<Int8Isa> v;
  for (Int8Isa isa : {Int8Isa::kAvx512Vnni, Int8Isa::kAvxVnni, Int8Isa::kAvx2})
    if (int8_isa_supported(isa)) v.push_back(isa);
  return v;
}

// `isa`'s peak with `threads` threads in ops/s (2 per multiply-add): every thread runs the ISA's
// dot-product loop; best of several runs of at least 0.05 s.
double int8_peak_ops(Int8Isa isa, int threads) {
  ThreadPool& p = pool(threads);
  int64_t iters = 1 << 16;
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    std::vector<int64_t> sink(static_cast<size_t>(threads) * 8);
    const double t0 = clock_seconds(threads);
    p.parallel_for(static_cast<size_t>(threads), 1, [&](size_t, size_t, int t) {
      sink[static_cast<size_t>(t) * 8] += int8_peak_loop(isa, iters);
    });
    const double s = clock_seconds(threads) - t0;
    benchmark::DoNotOptimize(sink.data());
    if (s < 0.05) {  // calibrate
      iters *= 4;
      continue;
    }
    best = std::max(best, 2.0 * static_cast<double>(int8_peak_macs_per_iter(isa)) *
                              static_cast<double>(iters) * threads / s);
  }
  return best;
}

// The machine's int8 peak: the best ISA's (0 without one).
double cached_peak(int threads) {
  static double peaks[8] = {};
  const auto isas = int8_isas();
  if (peaks[threads] == 0 && !isas.empty()) peaks[threads] = int8_peak_ops(isas[0], threads);
  return peaks[threads];
}

// Streaming read of a 256 MiB buffer split over the pool (the decode bandwidth ceiling), bytes/s.
struct ReadBuffer {
  static constexpr size_t kWords = size_t{256} << 20 >> 3;
  std::vector<uint64_t> buf = std::vector<uint64_t>(kWords);
  ReadBuffer() {
    for (size_t i = 0; i < kWords; ++i) buf[i] = i;
  }
  uint64_t read(ThreadPool& p) const {
    std::vector<uint64_t> sums(static_cast<size_t>(p.num_threads()) * 8);
    p.parallel_for(kWords / 8, 4096, [&](size_t begin, size_t end, int t) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t i = begin * 8; i < end * 8; i += 8) {
        s0 += buf[i] ^ buf[i + 4];
        s1 += buf[i + 1] ^ buf[i + 5];
        s2 += buf[i + 2] ^ buf[i + 6];
        s3 += buf[i + 3] ^ buf[i + 7];
      }
      sums[static_cast<size_t>(t) * 8] += s0 + s1 + s2 + s3;
    });
    uint64_t s = 0;
    for (uint64_t v : sums) s += v;
    return s;
  }
};

const ReadBuffer& read_buffer() {
  static const ReadBuffer b;
  return b;
}

double cached_bandwidth(int threads) {
  static double bw[8] = {};
  if (bw[threads] == 0) {
    const ReadBuffer& b = read_buffer();
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = clock_seconds(threads);
      benchmark::DoNotOptimize(b.read(pool(threads)));
      const double s = clock_seconds(threads) - t0;
      bw[threads] = std::max(bw[threads], ReadBuffer::kWords * 8.0 / s);
    }
  }
  return bw[threads];
}

void BM_Int8Peak(benchmark::State& state, Int8Isa isa) {
  const int threads = static_cast<int>(state.range(0));
  state.SetLabel(int8_isa_name(isa));
  ThreadPool& p = pool(threads);
  constexpr int64_t kIters = 1 << 18;
  std::vector<int64_t> sink(static_cast<size_t>(threads) * 8);
  for (auto _ : state) {
    p.parallel_for(static_cast<size_t>(threads), 1, [&](size_t, size_t, int t) {
      sink[static_cast<size_t>(t) * 8] += int8_peak_loop(isa, kIters);
    });
    benchmark::DoNotOptimize(sink.data());
  }
  state.counters["Gops/s"] = benchmark::Counter(
      2.0 * static_cast<double>(int8_peak_macs_per_iter(isa)) * kIters * threads * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MemoryRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const ReadBuffer& b = read_buffer();
  ThreadPool& p = pool(threads);
  for (auto _ : state) benchmark::DoNotOptimize(b.read(p));
  state.counters["GB/s"] = benchmark::Counter(ReadBuffer::kWords * 8.0 * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void set_counters(benchmark::State& state, const WeightMatrix& w, int64_t T, int threads) {
  const double bytes = static_cast<double>(w.row_bytes) * static_cast<double>(w.rows);
  const double ops = 2.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols) * T;
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["Gops/s"] =
      benchmark::Counter(ops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const double peak = cached_peak(threads);
  if (peak > 0)
    state.counters["of_peak"] =
        benchmark::Counter(ops / peak, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["of_bw"] = benchmark::Counter(bytes / cached_bandwidth(threads),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Matmul(benchmark::State& state, std::optional<Int8Isa> path, const char* what) {
  const auto type = static_cast<WeightType>(state.range(0));
  const int64_t N = state.range(1), K = state.range(2), T = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  // Ceilings measured before the first matmul, not inside the timing.
  cached_peak(threads);
  cached_bandwidth(threads);
  const auto wbuf = make_weights(type, N, K);
  WeightMatrix w{type, wbuf.data(), N, K, weight_row_bytes(type, K)};
  std::vector<float> x(T * K, 0.5f), y(T * N);
  for (int64_t i = 0; i < T * K; ++i) x[i] = static_cast<float>((i * 37) % 101) * 0.01f - 0.5f;
  ThreadPool& p = pool(threads);
  // Packed once, as the model packs its weights at load (the Highway path reads w.data).
  std::vector<uint8_t> packed;
  if (packed_layout_supports(type)) {
    packed.resize(packed_weight_bytes(type, N, K) + 64);
    uint8_t* aligned = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    pack_weight(w, aligned, p);
    w.packed = aligned;
  }
  state.SetLabel(std::string(weight_type_info(type).name) + " " + what);
  set_int8_isa_for_test(path);
  for (auto _ : state) {
    matmul(w, x.data(), T, y.data(), p);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_int8_isa_for_test(std::nullopt);
  set_counters(state, w, T, threads);
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
  set_counters(state, w, T, 1);
}

constexpr int64_t id(WeightType t) { return static_cast<int64_t>(t); }

struct Shape {
  WeightType type;
  int64_t N, K;
  const char* what;
};

// SmolLM2-135M (Q4_1 layers, Q8_0 tied lm_head).
constexpr Shape kSmolLm[] = {{WeightType::kQ4_1, 576, 576, "q/o"},
                             {WeightType::kQ4_1, 1536, 576, "gate/up"},
                             {WeightType::kQ4_1, 576, 1536, "down"},
                             {WeightType::kQ8_0, 49152, 576, "lm_head"}};
// Gemma 3 270M (Q4_K_M file).
constexpr Shape kGemma[] = {{WeightType::kQ5_0, 1024, 640, "q"},
                            {WeightType::kQ4_K, 640, 1024, "o"},
                            {WeightType::kQ5_0, 2048, 640, "gate/up"},
                            {WeightType::kQ6_K, 640, 2048, "down"},
                            {WeightType::kQ8_0, 256, 640, "v"},
                            {WeightType::kQ8_0, 262144, 640, "lm_head"}};  // 178 MB: from DRAM

void register_all() {
  const std::vector<Int8Isa> isas = int8_isas();
  // "default": matmul()'s own choice (on AVX2-only CPUs a mix of highway and avx2 by step size).
  std::vector<std::optional<Int8Isa>> paths = {std::nullopt, Int8Isa::kNone};
  paths.insert(paths.end(), isas.rbegin(), isas.rend());
  for (Int8Isa isa : isas) {
    const std::string name = std::string("BM_Int8Peak/") + int8_isa_name(isa);
    benchmark::RegisterBenchmark(name.c_str(), BM_Int8Peak, isa)->Arg(1);
    benchmark::RegisterBenchmark(name.c_str(), BM_Int8Peak, isa)->Arg(2)->UseRealTime();
  }
  benchmark::RegisterBenchmark("BM_MemoryRead", BM_MemoryRead)->Arg(1);
  benchmark::RegisterBenchmark("BM_MemoryRead", BM_MemoryRead)->Arg(2)->UseRealTime();
  const auto add = [&](const Shape& s, int64_t T, int64_t threads) {
    for (const std::optional<Int8Isa>& path : paths) {
      const std::string name =
          std::string("BM_Matmul/") + (path ? int8_isa_name(*path) : "default");
      auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, path, s.what);
      b->ArgNames({"type", "N", "K", "T", "threads"})->Args({id(s.type), s.N, s.K, T, threads});
      if (threads > 1) b->UseRealTime();
    }
  };
  for (int64_t threads : {1, 2})
    for (const Shape& s : kSmolLm)
      for (int64_t T : {1, 4, 16, 64, 256})
        if (s.N != 49152 || T <= 64) add(s, T, threads);  // the lm_head: decode tokens only
  for (const Shape& s : kGemma)
    for (int64_t T : {1, 16, 64})
      if (s.N != 262144 || T == 1) add(s, T, 1);  // the lm_head: one decode token
  for (WeightType t : {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ5_0, WeightType::kQ4_K,
                       WeightType::kQ6_K})
    for (int64_t T : {1, 16}) add(Shape{t, 1536, 1536, "square"}, T, 1);
  for (WeightType t : {WeightType::kF32, WeightType::kF16, WeightType::kBF16})
    for (int64_t T : {1, 16}) {
      auto* b =
          benchmark::RegisterBenchmark("BM_Matmul/float", BM_Matmul, Int8Isa::kNone, "square");
      b->ArgNames({"type", "N", "K", "T", "threads"})->Args({id(t), 1536, 1536, T, 1});
    }
  for (const Shape& s : {Shape{WeightType::kQ4_1, 576, 1536, "down"},
                         Shape{WeightType::kQ8_0, 49152, 576, "lm_head"}}) {
    benchmark::RegisterBenchmark("BM_MatmulReference", BM_MatmulReference)
        ->ArgNames({"type", "N", "K", "T"})
        ->Args({id(s.type), s.N, s.K, 1})
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace kvs

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kvs::register_all();
  benchmark::AddCustomContext("int8_isas", [] {
    std::string s;
    for (kvs::Int8Isa isa : kvs::int8_isas())
      s += std::string(s.empty() ? "" : ",") + kvs::int8_isa_name(isa);
    return s.empty() ? std::string("none") : s;
  }());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
