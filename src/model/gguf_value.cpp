#include "model/gguf_value.h"

#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/check.h"

namespace kvs {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

uint64_t gguf_type_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return 0;
}

GgufValue GgufValue::scalar(GgufType t, const uint8_t* bytes) {
  GgufValue v;
  v.type_ = t;
  std::memcpy(&v.bits_, bytes, gguf_type_size(t));
  return v;
}

GgufValue GgufValue::from_string(std::string_view s) {
  GgufValue v;
  v.type_ = GgufType::kString;
  v.str_ = s;
  return v;
}

GgufValue GgufValue::fixed_array(GgufType elem, uint64_t count, const uint8_t* bytes) {
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_type_ = elem;
  v.count_ = count;
  v.raw_ = bytes;
  return v;
}

GgufValue GgufValue::string_array(std::vector<std::string_view> elems) {
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_type_ = GgufType::kString;
  v.count_ = elems.size();
  v.strings_ = std::move(elems);
  return v;
}

GgufValue GgufValue::array_array(std::vector<GgufValue> elems) {
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_type_ = GgufType::kArray;
  v.count_ = elems.size();
  v.arrays_ = std::move(elems);
  return v;
}

std::string GgufValue::type_string() const {
  if (type_ != GgufType::kArray) return gguf_type_name(type_);
  if (elem_type_ != GgufType::kArray) return fmt::format("array<{}>", gguf_type_name(elem_type_));
  // Arrays of arrays: name the first element's type (elements may differ).
  if (arrays_.empty()) return "array<array>";
  return fmt::format("array<{}>", arrays_.front().type_string());
}

bool GgufValue::is_integer() const {
  switch (type_) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64: return true;
    default: return false;
  }
}

bool GgufValue::is_float() const {
  return type_ == GgufType::kFloat32 || type_ == GgufType::kFloat64;
}

std::optional<int64_t> GgufValue::to_int() const {
  switch (type_) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32: return static_cast<int64_t>(bits_);
    case GgufType::kUint64:
      if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(bits_);
    case GgufType::kInt8: return static_cast<int8_t>(bits_);
    case GgufType::kInt16: return static_cast<int16_t>(bits_);
    case GgufType::kInt32: return static_cast<int32_t>(bits_);
    case GgufType::kInt64: return static_cast<int64_t>(bits_);
    default: return std::nullopt;
  }
}

std::optional<uint64_t> GgufValue::to_uint() const {
  if (type_ == GgufType::kUint64) return bits_;
  auto i = to_int();
  if (!i || *i < 0) return std::nullopt;
  return static_cast<uint64_t>(*i);
}

std::optional<double> GgufValue::to_double() const {
  if (type_ == GgufType::kFloat32) {
    float f;
    std::memcpy(&f, &bits_, sizeof f);
    return f;
  }
  if (type_ == GgufType::kFloat64) {
    double d;
    std::memcpy(&d, &bits_, sizeof d);
    return d;
  }
  if (type_ == GgufType::kUint64) return static_cast<double>(bits_);
  if (auto i = to_int()) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::to_bool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return bits_ != 0;
}

std::string_view GgufValue::string() const {
  KVS_CHECK(type_ == GgufType::kString);
  return str_;
}

GgufType GgufValue::array_type() const {
  KVS_CHECK(type_ == GgufType::kArray);
  return elem_type_;
}

uint64_t GgufValue::array_size() const {
  KVS_CHECK(type_ == GgufType::kArray);
  return count_;
}

GgufValue GgufValue::element(uint64_t i) const {
  KVS_CHECK(type_ == GgufType::kArray && i < count_);
  if (elem_type_ == GgufType::kString) return from_string(strings_[i]);
  if (elem_type_ == GgufType::kArray) return arrays_[i];
  return scalar(elem_type_, raw_ + i * gguf_type_size(elem_type_));
}

std::span<const std::string_view> GgufValue::strings() const {
  KVS_CHECK(type_ == GgufType::kArray && elem_type_ == GgufType::kString);
  return strings_;
}

std::span<const GgufValue> GgufValue::nested_arrays() const {
  KVS_CHECK(type_ == GgufType::kArray && elem_type_ == GgufType::kArray);
  return arrays_;
}

std::span<const uint8_t> GgufValue::raw_elements() const {
  KVS_CHECK(type_ == GgufType::kArray && gguf_type_is_fixed_size(elem_type_));
  return {raw_, count_ * gguf_type_size(elem_type_)};
}

}  // namespace kvs
