#include "kernels/trellis_values.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/check.h"

namespace kvs::trellis_values {
namespace {

// libgcc's __builtin_cpu_supports checks CPUID and that the OS saves the ZMM state (XGETBV).
bool cpu_has_vbmi() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("f16c");
}

bool startup_choice() {
  const bool def = cpu_has_vbmi();
  const char* env = std::getenv("KVSERVE_TRELLIS_VALUES");
  if (env == nullptr || *env == '\0') return def;
  if (std::strcmp(env, "highway") == 0) return false;
  if (std::strcmp(env, "avx512-vbmi") == 0) {
    if (def) return true;
    std::fprintf(stderr, "KVSERVE_TRELLIS_VALUES=avx512-vbmi: this CPU cannot run it\n");
    return false;
  }
  std::fprintf(stderr,
               "KVSERVE_TRELLIS_VALUES=%s: unknown (highway, avx512-vbmi); using the default\n",
               env);
  return def;
}

// 0xFF: no override; else 0 (Highway) or 1 (VBMI).
std::atomic<uint8_t> g_forced{0xFF};

}  // namespace

bool supported() {
  static const bool has = cpu_has_vbmi();
  return has;
}

AccumulateFn active() {
  static const bool startup = startup_choice();
  const uint8_t forced = g_forced.load(std::memory_order_relaxed);
  const bool vbmi = forced == 0xFF ? startup : forced == 1;
  return vbmi ? accumulate_avx512vbmi() : nullptr;
}

void set_for_test(std::optional<bool> vbmi) {
  if (vbmi && *vbmi) KVS_CHECK_MSG(supported(), "this CPU cannot run the AVX512-VBMI kernel");
  g_forced.store(vbmi ? static_cast<uint8_t>(*vbmi) : 0xFF, std::memory_order_relaxed);
}

}  // namespace kvs::trellis_values
