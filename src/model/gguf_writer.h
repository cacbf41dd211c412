// GgufWriter: builds a GGUF file (version 2 or 3) in memory, for tests, fuzz seeds and tools.
//
// It writes what it is given without validating it (tests use that to build malformed files):
// keys and tensor names are not checked for duplicates and tensor bytes are not checked against
// the dims. Tensors added with add_tensor() are laid out in order, each at the next multiple of
// the alignment in the data section.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf_file.h"

namespace kvs {

class GgufWriter {
 public:
  // Scalars.
  void add_uint8(std::string_view key, uint8_t v);
  void add_int8(std::string_view key, int8_t v);
  void add_uint16(std::string_view key, uint16_t v);
  void add_int16(std::string_view key, int16_t v);
  void add_uint32(std::string_view key, uint32_t v);
  void add_int32(std::string_view key, int32_t v);
  void add_float32(std::string_view key, float v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_uint64(std::string_view key, uint64_t v);
  void add_int64(std::string_view key, int64_t v);
  void add_float64(std::string_view key, double v);

  // Common arrays.
  void add_string_array(std::string_view key, std::span<const std::string> v);
  void add_int32_array(std::string_view key, std::span<const int32_t> v);
  void add_float32_array(std::string_view key, std::span<const float> v);

  // Any value: `payload` is the value's encoding without its type tag (see encode_* below).
  void add_value(std::string_view key, GgufType type, std::vector<uint8_t> payload);

  // Encodings, for add_value and for building arrays of arrays.
  // An array: u32 element type, u64 count, then `elements` (count encoded elements, concatenated).
  // The result is both an array value's payload and one element of an array of arrays.
  static std::vector<uint8_t> encode_array(GgufType elem, uint64_t count,
                                           std::span<const uint8_t> elements);
  static std::vector<uint8_t> encode_string(std::string_view s);  // u64 length + bytes
  template <typename T>
  static std::vector<uint8_t> encode_scalars(std::span<const T> v) {
    std::vector<uint8_t> out(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
    return out;
  }

  // A tensor whose bytes go into the data section. dims in ggml order (dims[0] = row length).
  void add_tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t ggml_type,
                  std::vector<uint8_t> bytes);
  // A tensor info written exactly as given, with no data (for malformed-file tests).
  void add_tensor_info(std::string_view name, std::vector<uint64_t> dims, uint32_t ggml_type,
                       uint64_t offset);

  // The file. If alignment != 32, a `general.alignment` uint32 key is appended to the metadata
  // (unless the caller added one).
  [[nodiscard]] std::vector<uint8_t> finish(uint32_t version = 3, uint64_t alignment = 32) const;

 private:
  struct Kv {
    std::string key;
    GgufType type;
    std::vector<uint8_t> payload;
  };
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t ggml_type;
    bool has_data;
    uint64_t offset;  // used when !has_data
    std::vector<uint8_t> bytes;
  };
  template <typename T>
  void add_scalar(std::string_view key, GgufType type, T v);

  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace kvs
