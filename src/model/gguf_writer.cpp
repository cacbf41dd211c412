#include "model/gguf_writer.h"

#include <cstring>

namespace kvs {

namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_bytes(std::vector<uint8_t>& out, std::span<const uint8_t> b) {
  out.insert(out.end(), b.begin(), b.end());
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

}  // namespace

template <typename T>
void GgufWriter::add_scalar(std::string_view key, GgufType type, T v) {
  std::vector<uint8_t> payload;
  put(payload, v);
  add_value(key, type, std::move(payload));
}

void GgufWriter::add_uint8(std::string_view key, uint8_t v) {
  add_scalar(key, GgufType::kUint8, v);
}
void GgufWriter::add_int8(std::string_view key, int8_t v) { add_scalar(key, GgufType::kInt8, v); }
void GgufWriter::add_uint16(std::string_view key, uint16_t v) {
  add_scalar(key, GgufType::kUint16, v);
}
void GgufWriter::add_int16(std::string_view key, int16_t v) {
  add_scalar(key, GgufType::kInt16, v);
}
void GgufWriter::add_uint32(std::string_view key, uint32_t v) {
  add_scalar(key, GgufType::kUint32, v);
}
void GgufWriter::add_int32(std::string_view key, int32_t v) {
  add_scalar(key, GgufType::kInt32, v);
}
void GgufWriter::add_float32(std::string_view key, float v) {
  add_scalar(key, GgufType::kFloat32, v);
}
void GgufWriter::add_bool(std::string_view key, bool v) {
  add_scalar(key, GgufType::kBool, static_cast<uint8_t>(v ? 1 : 0));
}
void GgufWriter::add_string(std::string_view key, std::string_view v) {
  add_value(key, GgufType::kString, encode_string(v));
}
void GgufWriter::add_uint64(std::string_view key, uint64_t v) {
  add_scalar(key, GgufType::kUint64, v);
}
void GgufWriter::add_int64(std::string_view key, int64_t v) {
  add_scalar(key, GgufType::kInt64, v);
}
void GgufWriter::add_float64(std::string_view key, double v) {
  add_scalar(key, GgufType::kFloat64, v);
}

void GgufWriter::add_string_array(std::string_view key, std::span<const std::string> v) {
  std::vector<uint8_t> elems;
  for (const auto& s : v) put_string(elems, s);
  add_value(key, GgufType::kArray, encode_array(GgufType::kString, v.size(), elems));
}

void GgufWriter::add_int32_array(std::string_view key, std::span<const int32_t> v) {
  add_value(key, GgufType::kArray, encode_array(GgufType::kInt32, v.size(), encode_scalars(v)));
}

void GgufWriter::add_float32_array(std::string_view key, std::span<const float> v) {
  add_value(key, GgufType::kArray, encode_array(GgufType::kFloat32, v.size(), encode_scalars(v)));
}

void GgufWriter::add_value(std::string_view key, GgufType type, std::vector<uint8_t> payload) {
  kvs_.push_back(Kv{std::string(key), type, std::move(payload)});
}

std::vector<uint8_t> GgufWriter::encode_array(GgufType elem, uint64_t count,
                                              std::span<const uint8_t> elements) {
  std::vector<uint8_t> out;
  put<uint32_t>(out, static_cast<uint32_t>(elem));
  put<uint64_t>(out, count);
  put_bytes(out, elements);
  return out;
}

std::vector<uint8_t> GgufWriter::encode_string(std::string_view s) {
  std::vector<uint8_t> out;
  put_string(out, s);
  return out;
}

void GgufWriter::add_tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t ggml_type,
                            std::vector<uint8_t> bytes) {
  tensors_.push_back(
      Tensor{std::string(name), std::move(dims), ggml_type, true, 0, std::move(bytes)});
}

void GgufWriter::add_tensor_info(std::string_view name, std::vector<uint64_t> dims,
                                 uint32_t ggml_type, uint64_t offset) {
  tensors_.push_back(Tensor{std::string(name), std::move(dims), ggml_type, false, offset, {}});
}

std::vector<uint8_t> GgufWriter::finish(uint32_t version, uint64_t alignment) const {
  auto align_up = [alignment](uint64_t x) {
    return alignment == 0 ? x : (x + alignment - 1) / alignment * alignment;
  };
  bool has_alignment_key = false;
  for (const auto& kv : kvs_) has_alignment_key |= kv.key == "general.alignment";
  const bool add_alignment_key = alignment != 32 && !has_alignment_key;

  std::vector<uint8_t> out;
  put<uint32_t>(out, 0x46554747);  // "GGUF"
  put<uint32_t>(out, version);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kvs_.size() + (add_alignment_key ? 1 : 0));
  for (const auto& kv : kvs_) {
    put_string(out, kv.key);
    put<uint32_t>(out, static_cast<uint32_t>(kv.type));
    put_bytes(out, kv.payload);
  }
  if (add_alignment_key) {
    put_string(out, "general.alignment");
    put<uint32_t>(out, static_cast<uint32_t>(GgufType::kUint32));
    put<uint32_t>(out, static_cast<uint32_t>(alignment));
  }
  // Offsets of tensors with data, relative to the data section.
  std::vector<uint64_t> offsets;
  uint64_t next = 0;
  for (const auto& t : tensors_) {
    offsets.push_back(t.has_data ? next : t.offset);
    if (t.has_data) next = align_up(next + t.bytes.size());
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(out, d);
    put<uint32_t>(out, t.ggml_type);
    put<uint64_t>(out, offsets[i]);
  }
  out.resize(align_up(out.size()), 0);
  const uint64_t data_start = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (!t.has_data) continue;
    out.resize(data_start + offsets[i], 0);
    put_bytes(out, t.bytes);
  }
  return out;
}

}  // namespace kvs
