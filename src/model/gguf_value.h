// GgufValue: one metadata value of a GGUF file, and the GGUF value types. Scalars are decoded;
// strings and scalar-array elements are views into the file's bytes (valid while the GgufFile
// lives).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvs {

// GGUF metadata value types (the u32 tag in the file).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint8", "string", "array", ...; "unknown" for an id outside the enum.
[[nodiscard]] const char* gguf_type_name(GgufType t);
// Bytes of one value of a fixed-size type (0 for string and array, which have variable size).
[[nodiscard]] uint64_t gguf_type_size(GgufType t);
// Whether values of the type have a fixed size (everything but string and array).
[[nodiscard]] inline bool gguf_type_is_fixed_size(GgufType t) { return gguf_type_size(t) != 0; }

// One metadata value. Scalars are stored decoded; strings and scalar-array elements point into the
// file's bytes; arrays of strings hold one view per element and arrays of arrays hold values.
class GgufValue {
 public:
  GgufValue() = default;

  [[nodiscard]] GgufType type() const { return type_; }
  // "uint32", "string", "array<string>", "array<array<int8>>", ...
  [[nodiscard]] std::string type_string() const;

  [[nodiscard]] bool is_integer() const;  // one of the eight integer types
  [[nodiscard]] bool is_float() const;    // float32 or float64
  // The value if it is an integer that fits the result type, else nullopt.
  [[nodiscard]] std::optional<uint64_t> to_uint() const;
  [[nodiscard]] std::optional<int64_t> to_int() const;
  // The value if it is a float or an integer, else nullopt.
  [[nodiscard]] std::optional<double> to_double() const;
  // The value if it is a bool, else nullopt.
  [[nodiscard]] std::optional<bool> to_bool() const;
  // Precondition: type() == kString.
  [[nodiscard]] std::string_view string() const;

  // Arrays. Precondition for all of these: type() == kArray.
  [[nodiscard]] GgufType array_type() const;
  [[nodiscard]] uint64_t array_size() const;
  // Element i (i < array_size()) as a value. For arrays of arrays this copies the nested array;
  // prefer nested_arrays() there.
  [[nodiscard]] GgufValue element(uint64_t i) const;
  // Precondition: array_type() == kString. One view per element, in order.
  [[nodiscard]] std::span<const std::string_view> strings() const;
  // Precondition: array_type() == kArray.
  [[nodiscard]] std::span<const GgufValue> nested_arrays() const;
  // Precondition: array_type() is a fixed-size type. The elements' little-endian bytes
  // (array_size() * gguf_type_size(array_type()) of them), unaligned.
  [[nodiscard]] std::span<const uint8_t> raw_elements() const;

  // Builders used by the parser (and tests); they do not validate.
  static GgufValue scalar(GgufType t, const uint8_t* little_endian_bytes);
  static GgufValue from_string(std::string_view s);
  static GgufValue fixed_array(GgufType elem, uint64_t count, const uint8_t* bytes);
  static GgufValue string_array(std::vector<std::string_view> elems);
  static GgufValue array_array(std::vector<GgufValue> elems);

 private:
  GgufType type_ = GgufType::kUint8;
  uint64_t bits_ = 0;  // scalar: the value's bytes zero-extended (sign handled by to_int)
  std::string_view str_;
  // Arrays.
  GgufType elem_type_ = GgufType::kUint8;
  uint64_t count_ = 0;
  const uint8_t* raw_ = nullptr;  // fixed-size elements
  std::vector<std::string_view> strings_;
  std::vector<GgufValue> arrays_;
};

}  // namespace kvs
