// size_input: a byte size as the user typed it, remembering its unit convention, so the report
// can say "80 GB = 80 x 10^9 B" and show what the plan would be had the same numbers been GiB
// (the usual source of "about 49" vs 48 vs 52 disagreements).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvs {

enum class UnitConvention : uint8_t {
  kBytes,    // a bare number: bytes
  kDecimal,  // KB, MB, GB, TB: powers of 10
  kBinary,   // KiB, MiB, GiB, TiB: powers of 2
};

struct SizeInput {
  std::string text;  // as typed, "80GB"
  uint64_t bytes = 0;
  UnitConvention convention = UnitConvention::kBytes;
  // The same number in the other convention ("80GB" -> 80 GiB in bytes); == bytes for kBytes.
  uint64_t other_convention_bytes = 0;
};

// parse_byte_size (core/byte_size.h) plus the convention and its counterpart.
[[nodiscard]] Result<SizeInput> parse_size_input(std::string_view text);
// A SizeInput for a value that came from elsewhere (a preset, the catalog).
[[nodiscard]] SizeInput size_from_bytes(uint64_t bytes, UnitConvention convention,
                                        std::string text);
[[nodiscard]] const char* unit_convention_name(UnitConvention c);

}  // namespace kvs
