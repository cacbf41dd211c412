// libFuzzer target for the GGUF reader: any byte string must parse or fail with a Status, never
// crash, read outside the buffer or allocate without bound. Every parsed value and tensor is
// touched so that views into the buffer are read (ASan checks them).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/gguf_file.h"

namespace {

uint64_t touch(const kvs::GgufValue& v) {
  uint64_t h = static_cast<uint64_t>(v.type());
  h += v.type_string().size();
  if (auto u = v.to_uint()) h += *u;
  if (auto i = v.to_int()) h += static_cast<uint64_t>(*i);
  if (auto d = v.to_double()) h += static_cast<uint64_t>(*d != 0);
  if (auto b = v.to_bool()) h += *b;
  if (v.type() == kvs::GgufType::kString) {
    for (char c : v.string()) h += static_cast<uint8_t>(c);
  }
  if (v.type() == kvs::GgufType::kArray) {
    const uint64_t n = v.array_size();
    if (v.array_type() == kvs::GgufType::kString) {
      for (auto s : v.strings()) h += s.empty() ? 0 : static_cast<uint8_t>(s.back());
    } else if (v.array_type() == kvs::GgufType::kArray) {
      for (const auto& a : v.nested_arrays()) h += touch(a);
    } else {
      for (uint8_t b : v.raw_elements()) h += b;
    }
    for (uint64_t i = 0; i < n && i < 64; ++i) h += touch(v.element(i));
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvs::GgufFile::parse_bytes(std::vector<uint8_t>(data, data + size));
  if (!file.is_ok()) {
    if (file.status().message().empty()) __builtin_trap();  // every error must say what is wrong
    return 0;
  }
  volatile uint64_t sink = file->version() + file->alignment() + file->data_offset();
  for (const auto& [key, value] : file->metadata()) {
    sink = sink + key.size() + touch(value);
    if (file->find(key) != &value) __builtin_trap();
    (void)file->get_uint(key);
    (void)file->get_int(key);
    (void)file->get_float(key);
    (void)file->get_bool(key);
    (void)file->get_string(key);
    (void)file->get_string_array(key);
    (void)file->get_int_array(key);
    (void)file->get_float_array(key);
  }
  for (const auto& t : file->tensors()) {
    if (file->find_tensor(t.name) != &t) __builtin_trap();
    sink = sink + t.num_elements() + t.dims.size() + t.ggml_type + t.offset;
    (void)t.weight_type();
    (void)t.type_name();
    // The data must lie inside the parsed buffer: read its first and last byte.
    if (t.size_bytes > 0) sink = sink + t.data[0] + t.data[t.size_bytes - 1];
  }
  sink = sink + file->total_tensor_bytes();
  (void)sink;
  return 0;
}
