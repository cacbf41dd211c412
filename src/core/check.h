// CHECK: always-on assertions for bugs (broken invariants), never for bad input.
// Bad input and expected failures (out of blocks, malformed file) are Status/Result values.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace kvs::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const char* msg);
}  // namespace kvs::detail

#define KVS_CHECK(cond)                                                \
  do {                                                                 \
    if (!(cond)) [[unlikely]]                                          \
      ::kvs::detail::check_failed(__FILE__, __LINE__, #cond, nullptr); \
  } while (0)

#define KVS_CHECK_MSG(cond, msg)                                     \
  do {                                                               \
    if (!(cond)) [[unlikely]]                                        \
      ::kvs::detail::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

#ifdef NDEBUG
#define KVS_DCHECK(cond) \
  do {                   \
  } while (0)
#else
#define KVS_DCHECK(cond) KVS_CHECK(cond)
#endif
