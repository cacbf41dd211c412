// Byte sizes as users type them: "512MiB", "2GiB", "80GB", "1.5e9", "4096".
// GB/MB/KB/TB are powers of 10, GiB/MiB/KiB/TiB powers of 2; a bare number is bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvs {

// The largest size accepted: 1 EiB. Larger values (which would saturate or wrap a 64-bit count
// and silently mean "unbounded") are refused.
inline constexpr uint64_t kMaxByteSize = uint64_t{1} << 60;

// Sizes are rounded to the nearest byte; negative, non-finite or larger than kMaxByteSize
// values are invalid_argument, with a message naming the text.
[[nodiscard]] Result<uint64_t> parse_byte_size(std::string_view text);

// "512.0 MiB (536,870,912 B)"-style rendering: binary units.
[[nodiscard]] std::string format_bytes_binary(uint64_t bytes);
// Decimal units: "80.0 GB".
[[nodiscard]] std::string format_bytes_decimal(uint64_t bytes);
// 1234567 -> "1,234,567"
[[nodiscard]] std::string format_thousands(uint64_t value);

}  // namespace kvs
