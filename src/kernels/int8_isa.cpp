#include "kernels/int8_isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/check.h"

namespace kvs {
namespace {

// libgcc's __builtin_cpu_supports checks CPUID and that the OS saves the YMM/ZMM state (XGETBV).
bool cpu_has(Int8Isa isa) {
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  switch (isa) {
    case Int8Isa::kNone: return true;
    case Int8Isa::kAvx2: return avx2;
    case Int8Isa::kAvxVnni: return avx2 && __builtin_cpu_supports("avxvnni");
    case Int8Isa::kAvx512Vnni:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

struct Choice {
  Int8Isa isa;
  bool small_steps_on_highway;
};

// The default: a VNNI ISA when the CPU has one (one vpdpbusd per 32 products, every step size).
// On AVX2 without AVX-512, the AVX2 kernels for steps of more than kDirectMaxT tokens (their
// panels beat the Highway path there, most for the k-quants) and the Highway path for smaller
// steps, where it measured faster: vpmaddubsw + vpmaddwd costs the same two multiply uops per 32
// products as Highway's two vpmaddwd, and Highway's unpacking is cheaper (docs/kernels.md). The
// mix is batch invariant only because the AVX2 kernels give the bits of Highway's AVX2 target,
// which is Highway's choice exactly when the CPU lacks AVX-512F. Q5_0 always takes the 8-bit
// kernels: Highway unpacks it in scalar code.
Choice default_choice() {
  for (Int8Isa isa : {Int8Isa::kAvx512Vnni, Int8Isa::kAvxVnni})
    if (cpu_has(isa)) return {isa, false};
  if (cpu_has(Int8Isa::kAvx2) && !__builtin_cpu_supports("avx512f")) return {Int8Isa::kAvx2, true};
  return {Int8Isa::kNone, false};
}

// KVSERVE_INT8_ISA=none|avx2|avx-vnni|avx512-vnni overrides the default (benchmarks compare
// paths end to end with it): that ISA for every step; an unknown or unsupported name is
// reported and ignored.
Choice startup_choice() {
  const Choice def = default_choice();
  const char* env = std::getenv("KVSERVE_INT8_ISA");
  if (env == nullptr || *env == '\0') return def;
  for (Int8Isa isa : kAllInt8Isas) {
    if (std::strcmp(env, int8_isa_name(isa)) != 0 &&
        !(isa == Int8Isa::kNone && std::strcmp(env, "none") == 0))
      continue;
    if (cpu_has(isa)) return {isa, false};
    std::fprintf(stderr, "KVSERVE_INT8_ISA=%s: this CPU cannot run it; using the default\n", env);
    return def;
  }
  std::fprintf(stderr,
               "KVSERVE_INT8_ISA=%s: unknown (none, avx2, avx-vnni, avx512-vnni); using the "
               "default\n",
               env);
  return def;
}

const Choice& startup() {
  static const Choice c = startup_choice();
  return c;
}

// 0xFF: no override.
std::atomic<uint8_t> g_forced{0xFF};

}  // namespace

const char* int8_isa_name(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kNone: return "highway-int16";
    case Int8Isa::kAvx2: return "avx2";
    case Int8Isa::kAvxVnni: return "avx-vnni";
    case Int8Isa::kAvx512Vnni: return "avx512-vnni";
  }
  return "?";
}

bool int8_isa_supported(Int8Isa isa) {
  static const bool supported[] = {cpu_has(Int8Isa::kNone), cpu_has(Int8Isa::kAvx2),
                                   cpu_has(Int8Isa::kAvxVnni), cpu_has(Int8Isa::kAvx512Vnni)};
  return supported[static_cast<int>(isa)];
}

Int8Isa int8_isa_active() {
  const uint8_t forced = g_forced.load(std::memory_order_relaxed);
  return forced == 0xFF ? startup().isa : static_cast<Int8Isa>(forced);
}

bool int8_small_steps_on_highway() {
  return g_forced.load(std::memory_order_relaxed) == 0xFF && startup().small_steps_on_highway;
}

void set_int8_isa_for_test(std::optional<Int8Isa> isa) {
  if (isa) KVS_CHECK_MSG(int8_isa_supported(*isa), "this CPU cannot run the requested int8 ISA");
  g_forced.store(isa ? static_cast<uint8_t>(*isa) : 0xFF, std::memory_order_relaxed);
}

}  // namespace kvs
