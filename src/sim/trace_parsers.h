// Trace file formats for `kvserve simulate --trace FILE`. Every error names the file and line.
//
// Mooncake JSONL (the FAST'25 trace release), one object per line:
//   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}
// timestamp in milliseconds after the first request; hash_ids one per `block_tokens` (512) prompt
// tokens, the last block possibly partial; requests sharing the first k ids share their first
// k x 512 prompt tokens. hash_ids may be absent (nothing shared).
//
// CSV with a header naming its columns (case-insensitive, any order, extra columns ignored):
//   timestamp | time                           seconds (a number) or a date-time
//                                              "2023-11-16 18:15:46.6805900" (Azure's traces)
//   prompt_tokens | ContextTokens | input_length | input_tokens
//   output_tokens | GeneratedTokens | output_length
// Arrival = timestamp - the first row's. CSV traces carry no sharing information.
//
// Both: blank lines are skipped; rows are sorted by arrival (stable); an output of 0 tokens (the
// engine generates at least one) becomes 1 and is counted in Trace::notes; a prompt of 0 tokens is
// an error.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "sim/trace.h"

namespace kvs {

// Bounds on what a trace may cost to read: its bytes (read whole) and one line's.
inline constexpr uint64_t kMaxTraceBytes = uint64_t{1} << 30;
inline constexpr size_t kMaxTraceLineBytes = size_t{1} << 20;

enum class TraceFormat { kAuto, kMooncakeJsonl, kCsv };

[[nodiscard]] Result<TraceFormat> parse_trace_format(const std::string& name);

[[nodiscard]] Result<Trace> parse_mooncake_jsonl(std::string_view text, const std::string& origin,
                                                 uint32_t block_tokens = 512);
[[nodiscard]] Result<Trace> parse_csv_trace(std::string_view text, const std::string& origin);

// kAuto: ".csv" is CSV, anything else whose first non-blank character is '{' is Mooncake JSONL.
[[nodiscard]] Result<Trace> load_trace(const std::string& path, TraceFormat format,
                                       uint32_t block_tokens = 512);

// The Mooncake JSONL text of a trace (the inverse of parse_mooncake_jsonl, timestamps rounded to
// whole milliseconds); for generated traces and the validation replayer.
[[nodiscard]] std::string trace_to_mooncake_jsonl(const Trace& trace);

}  // namespace kvs
