// GgufFile: a validated, read-only view of a GGUF model file (versions 2 and 3).
//
// The file is memory-mapped (or, for tests and fuzzing, held as an owned byte buffer) and parsed
// once, in O(file size). Every count, length and offset read from the file is checked against the
// bytes that remain before it is used, so a truncated, corrupt or hostile file yields a Status
// naming the problem, never a crash, an out-of-bounds read or an allocation larger than a small
// multiple of the file size.
//
// Layout (all little-endian):
//   magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count   x { string key | u32 GgufType | value }
//   tensor_count x { string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset }
//   padding to `general.alignment` (default 32)
//   data section: tensor data at `offset` (a multiple of the alignment) from its start
// where a string is u64 length + bytes (no terminator) and an array value is u32 element type +
// u64 count + elements (elements may themselves be arrays).
//
// Strings, tensor data and scalar array elements are views into the file's bytes: they stay valid
// as long as the GgufFile (moving it keeps them valid; the bytes never move).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/weight_type.h"
#include "model/gguf_value.h"

namespace kvs {

// ggml tensor element types kvserve knows the block layout of. `weight_type` is set for the ones
// kvserve can compute with; the others are parsed (their sizes are checked) but a caller asking
// for their WeightType gets kUnimplemented.
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
  uint32_t block_elems;
  uint32_t block_bytes;
  std::optional<WeightType> weight_type;
};
// nullptr for an id this reader does not know.
[[nodiscard]] const GgmlTypeInfo* ggml_type_info(uint32_t ggml_type);

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;     // ggml order: dims[0] = elements per row (innermost); 1..4 dims
  uint32_t ggml_type = 0;         // raw ggml id; always a known one (ggml_type_info() != nullptr)
  uint64_t offset = 0;            // relative to the data section; a multiple of the alignment
  uint64_t size_bytes = 0;        // num_elements / block_elems * block_bytes
  const uint8_t* data = nullptr;  // inside the file's bytes; size_bytes of them

  [[nodiscard]] uint64_t num_elements() const;
  [[nodiscard]] std::span<const uint8_t> bytes() const { return {data, size_bytes}; }
  [[nodiscard]] const char* type_name() const;
  // The kvserve weight type, or kUnimplemented naming the tensor and its ggml type.
  [[nodiscard]] Result<WeightType> weight_type() const;
};

class GgufFile {
 public:
  // Maps `path` read-only and parses it. Error messages start with the path.
  static Result<GgufFile> open(const std::string& path);
  // Parses a copy of a file held in memory (tests, fuzzing, tools).
  static Result<GgufFile> parse_bytes(std::vector<uint8_t> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  [[nodiscard]] uint32_t version() const { return version_; }
  [[nodiscard]] uint64_t alignment() const { return alignment_; }
  [[nodiscard]] uint64_t file_size() const;
  // Start of the data section: the first multiple of alignment() after the tensor infos.
  [[nodiscard]] uint64_t data_offset() const { return data_offset_; }
  // The file's bytes before the data section: header, metadata and tensor infos.
  [[nodiscard]] std::span<const uint8_t> header_bytes() const;

  // Metadata in file order; keys are unique.
  [[nodiscard]] const std::vector<std::pair<std::string, GgufValue>>& metadata() const {
    return metadata_;
  }
  [[nodiscard]] const GgufValue* find(std::string_view key) const;

  // Typed getters: kNotFound "metadata key 'k' is missing", or kInvalidArgument
  // "metadata key 'k' has type string, expected an integer" (or a value that does not fit).
  // Integer getters accept any integer type whose value fits; get_float accepts floats and
  // integers.
  [[nodiscard]] Result<uint64_t> get_uint(std::string_view key) const;
  [[nodiscard]] Result<int64_t> get_int(std::string_view key) const;
  [[nodiscard]] Result<double> get_float(std::string_view key) const;
  [[nodiscard]] Result<bool> get_bool(std::string_view key) const;
  [[nodiscard]] Result<std::string> get_string(std::string_view key) const;
  [[nodiscard]] Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  // Zero-copy variant of get_string_array (views into the file's bytes).
  [[nodiscard]] Result<std::span<const std::string_view>> get_string_views(
      std::string_view key) const;
  [[nodiscard]] Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  [[nodiscard]] Result<std::vector<double>> get_float_array(std::string_view key) const;

  // Tensors in file order; names are unique.
  [[nodiscard]] const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  [[nodiscard]] const GgufTensorInfo* find_tensor(std::string_view name) const;
  [[nodiscard]] uint64_t total_tensor_bytes() const;

  // Tells the OS that the whole pages inside [p, p + n) (bytes of this file) will not be read
  // soon, so that they stop counting as the process's memory (weights packed into a copy of their
  // own). They stay readable: a later read pages them in again from the file. Does nothing when
  // the file is not memory-mapped (parse_bytes).
  void release_pages(const void* p, uint64_t n) const;

 private:
  struct Bytes;  // the mapping or the owned buffer
  explicit GgufFile(std::unique_ptr<Bytes> bytes);
  Status parse();
  Result<const GgufValue*> find_typed(std::string_view key) const;

  std::unique_ptr<Bytes> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  // Keys are views into the file's bytes, which never move (std::string keys could: SSO).
  std::unordered_map<std::string_view, size_t> key_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace kvs
