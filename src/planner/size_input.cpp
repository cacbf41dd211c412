#include "planner/size_input.h"

#include <cctype>

#include "core/byte_size.h"

namespace kvs {

Result<SizeInput> parse_size_input(std::string_view text) {
  KVS_ASSIGN_OR_RETURN(uint64_t bytes, parse_byte_size(text));
  SizeInput s;
  s.text = std::string(text);
  s.bytes = bytes;
  s.other_convention_bytes = bytes;
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c)))
      t.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  // The unit is what follows the number; parse_byte_size accepted it, so it is one of
  // b, k/kb, m/mb, g/gb, t/tb or ki(b), mi(b), gi(b), ti(b).
  size_t pos = t.find_first_not_of("0123456789.e+");
  std::string unit = pos == std::string::npos ? "" : t.substr(pos);
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  if (unit.empty()) return s;
  std::string swapped = t.substr(0, pos);
  if (unit.size() == 2 && unit[1] == 'i') {
    s.convention = UnitConvention::kBinary;
    swapped += unit.substr(0, 1) + "b";
  } else {
    s.convention = UnitConvention::kDecimal;
    swapped += unit + "ib";
  }
  KVS_ASSIGN_OR_RETURN(s.other_convention_bytes, parse_byte_size(swapped));
  return s;
}

SizeInput size_from_bytes(uint64_t bytes, UnitConvention convention, std::string text) {
  SizeInput s;
  s.text = std::move(text);
  s.bytes = bytes;
  s.convention = convention;
  s.other_convention_bytes = bytes;
  const uint64_t k = convention == UnitConvention::kBinary ? 1024 : 1000;
  const uint64_t o = convention == UnitConvention::kBinary ? 1000 : 1024;
  if (convention != UnitConvention::kBytes) {
    // Reinterpret at the largest unit that divides exactly (G, then M, then K).
    for (int p = 4; p >= 1; --p) {
      uint64_t unit = 1, other = 1;
      for (int i = 0; i < p; ++i) unit *= k, other *= o;
      if (bytes % unit == 0) {
        s.other_convention_bytes = bytes / unit * other;
        break;
      }
    }
  }
  return s;
}

const char* unit_convention_name(UnitConvention c) {
  switch (c) {
    case UnitConvention::kBytes: return "bytes";
    case UnitConvention::kDecimal: return "decimal (GB = 10^9 B)";
    case UnitConvention::kBinary: return "binary (GiB = 2^30 B)";
  }
  return "?";
}

}  // namespace kvs
