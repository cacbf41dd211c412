#include "kernels/int8_isa.h"

#include <cpuid.h>

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

// The default: a VNNI ISA when the CPU has one (one vpdpbusd per 32 products), else the AVX2
// kernels when the CPU has AVX2, for every step size. (Until 2026-12-03 AVX2-only CPUs sent
// steps of up to 4 tokens to the Highway path, which was faster there; since the GEMM puts rows
// in lanes, the AVX2 kernels are 1-3x Highway at those sizes, docs/kernels.md.)
Int8Isa default_choice() {
  for (Int8Isa isa : {Int8Isa::kAvx512Vnni, Int8Isa::kAvxVnni, Int8Isa::kAvx2})
    if (cpu_has(isa)) return isa;
  return Int8Isa::kNone;
}

// KVSERVE_INT8_ISA=none|avx2|avx-vnni|avx512-vnni overrides the default (benchmarks compare
// paths end to end with it): that ISA for every step; an unknown or unsupported name is
// reported and ignored.
Int8Isa startup_choice() {
  const Int8Isa def = default_choice();
  const char* env = std::getenv("KVSERVE_INT8_ISA");
  if (env == nullptr || *env == '\0') return def;
  for (Int8Isa isa : kAllInt8Isas) {
    if (std::strcmp(env, int8_isa_name(isa)) != 0 &&
        !(isa == Int8Isa::kNone && std::strcmp(env, "none") == 0))
      continue;
    if (cpu_has(isa)) return isa;
    std::fprintf(stderr, "KVSERVE_INT8_ISA=%s: this CPU cannot run it; using the default\n", env);
    return def;
  }
  std::fprintf(stderr,
               "KVSERVE_INT8_ISA=%s: unknown (none, avx2, avx-vnni, avx512-vnni); using the "
               "default\n",
               env);
  return def;
}

Int8Isa startup() {
  static const Int8Isa c = startup_choice();
  return c;
}

// 0xFF: no override.
std::atomic<uint8_t> g_forced{0xFF};

// CPUID leaf 1's family: the base family, plus the extended family where the base is 0xF.
unsigned cpu_family() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return 0;
  const unsigned base = (eax >> 8) & 0xF;
  return base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
}

bool prefetch_one_token_startup() {
  const bool def = __builtin_cpu_is("amd") && cpu_family() >= 0x1A;
  const char* env = std::getenv("KVSERVE_INT8_PREFETCH_1TOKEN");
  if (env == nullptr || *env == '\0') return def;
  if (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0) return *env == '1';
  std::fprintf(stderr, "KVSERVE_INT8_PREFETCH_1TOKEN=%s: not 0 or 1; using the default (%d)\n", env,
               def ? 1 : 0);
  return def;
}

// 0xFF: no override.
std::atomic<uint8_t> g_prefetch_forced{0xFF};

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
  return forced == 0xFF ? startup() : static_cast<Int8Isa>(forced);
}

void set_int8_isa_for_test(std::optional<Int8Isa> isa) {
  if (isa) KVS_CHECK_MSG(int8_isa_supported(*isa), "this CPU cannot run the requested int8 ISA");
  g_forced.store(isa ? static_cast<uint8_t>(*isa) : 0xFF, std::memory_order_relaxed);
}

bool int8_prefetch_one_token() {
  static const bool startup = prefetch_one_token_startup();
  const uint8_t forced = g_prefetch_forced.load(std::memory_order_relaxed);
  return forced == 0xFF ? startup : forced != 0;
}

void set_int8_prefetch_one_token_for_test(std::optional<bool> on) {
  g_prefetch_forced.store(on ? static_cast<uint8_t>(*on) : 0xFF, std::memory_order_relaxed);
}

}  // namespace kvs
