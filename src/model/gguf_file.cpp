#include "model/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kvs {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader decodes little-endian files by reinterpreting bytes");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
// Arrays of arrays deeper than this are rejected: no real file nests at all, and a bound keeps
// the recursive parser's stack use small on hostile input.
constexpr int kMaxArrayNesting = 8;
// Smallest encodings, used to bound counts by the bytes left before anything is reserved.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, u8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4, WeightType::kF32},
    {1, "F16", 1, 2, WeightType::kF16},
    {2, "Q4_0", 32, 18, WeightType::kQ4_0},
    {3, "Q4_1", 32, 20, WeightType::kQ4_1},
    {6, "Q5_0", 32, 22, WeightType::kQ5_0},
    {7, "Q5_1", 32, 24, std::nullopt},
    {8, "Q8_0", 32, 34, WeightType::kQ8_0},
    {9, "Q8_1", 32, 36, std::nullopt},
    {10, "Q2_K", 256, 84, std::nullopt},
    {11, "Q3_K", 256, 110, std::nullopt},
    {12, "Q4_K", 256, 144, WeightType::kQ4_K},
    {13, "Q5_K", 256, 176, std::nullopt},
    {14, "Q6_K", 256, 210, WeightType::kQ6_K},
    {15, "Q8_K", 256, 292, std::nullopt},
    {24, "I8", 1, 1, std::nullopt},
    {25, "I16", 1, 2, std::nullopt},
    {26, "I32", 1, 4, std::nullopt},
    {27, "I64", 1, 8, std::nullopt},
    {28, "F64", 1, 8, std::nullopt},
    {30, "BF16", 1, 2, WeightType::kBF16},
};

bool is_known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

// Reads the file front to back. Every read checks the bytes left first.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  // `what` names the field for the error ("tensor count", "metadata key 'x' value").
  Status need(uint64_t n, std::string_view what) const {
    if (n > left()) {
      return data_loss(fmt::format(
          "truncated file: {} at offset {} needs {} bytes but only {} remain (file size {})", what,
          pos_, n, left(), size_));
    }
    return Status::ok();
  }
  void skip(uint64_t n) { pos_ += n; }  // after need(n)

  template <typename T>
  Result<T> read(std::string_view what) {
    KVS_RETURN_IF_ERROR(need(sizeof(T), what));
    T v;
    std::memcpy(&v, here(), sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string_view> string(std::string_view what) {
    // The field name is formatted only on failure: this runs once per vocabulary entry.
    if (left() < sizeof(uint64_t)) return need(sizeof(uint64_t), fmt::format("{} length", what));
    uint64_t len;
    std::memcpy(&len, here(), sizeof len);
    pos_ += sizeof len;
    if (len > left()) {
      return data_loss(fmt::format(
          "{}: string length {} at offset {} exceeds the {} bytes left in the file (size {})", what,
          len, pos_ - 8, left(), size_));
    }
    std::string_view s(reinterpret_cast<const char*>(here()), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Result<GgufValue> parse_value(Cursor& c, uint32_t type_id, int depth, std::string_view what);

Result<GgufValue> parse_array(Cursor& c, int depth, std::string_view what) {
  if (depth >= kMaxArrayNesting) {
    return data_loss(fmt::format("{}: arrays nested more than {} deep at offset {}", what,
                                 kMaxArrayNesting, c.pos()));
  }
  KVS_ASSIGN_OR_RETURN(uint32_t elem_id, c.read<uint32_t>(fmt::format("{} element type", what)));
  if (!is_known_type(elem_id)) {
    return data_loss(
        fmt::format("{}: unknown array element type {} at offset {}", what, elem_id, c.pos() - 4));
  }
  const auto elem = static_cast<GgufType>(elem_id);
  KVS_ASSIGN_OR_RETURN(uint64_t count, c.read<uint64_t>(fmt::format("{} array length", what)));
  const uint64_t count_pos = c.pos() - 8;
  // Every element takes at least this many bytes, so the count is bounded by the bytes left.
  const uint64_t min_elem_bytes = elem == GgufType::kString  ? 8
                                  : elem == GgufType::kArray ? 12
                                                             : gguf_type_size(elem);
  if (count > c.left() / min_elem_bytes) {
    return data_loss(fmt::format(
        "{}: array length {} of {} at offset {} needs at least {} bytes per element but only {} "
        "bytes are left in the file",
        what, count, gguf_type_name(elem), count_pos, min_elem_bytes, c.left()));
  }
  if (gguf_type_is_fixed_size(elem)) {
    const uint8_t* start = c.here();
    if (elem == GgufType::kBool) {
      for (uint64_t i = 0; i < count; ++i) {
        if (start[i] > 1) {
          return data_loss(fmt::format("{}: bool element {} at offset {} has value {} (not 0 or 1)",
                                       what, i, c.pos() + i, start[i]));
        }
      }
    }
    c.skip(count * min_elem_bytes);
    return GgufValue::fixed_array(elem, count, start);
  }
  if (elem == GgufType::kString) {
    std::vector<std::string_view> strings;
    strings.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      auto s = c.string(what);
      if (!s.is_ok()) {
        return Status(s.status().code(), fmt::format("element {} of {}", i, s.status().message()));
      }
      strings.push_back(*s);
    }
    return GgufValue::string_array(std::move(strings));
  }
  std::vector<GgufValue> arrays;
  arrays.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    KVS_ASSIGN_OR_RETURN(GgufValue v, parse_array(c, depth + 1, what));
    arrays.push_back(std::move(v));
  }
  return GgufValue::array_array(std::move(arrays));
}

Result<GgufValue> parse_value(Cursor& c, uint32_t type_id, int depth, std::string_view what) {
  if (!is_known_type(type_id)) {
    return data_loss(
        fmt::format("{}: unknown value type {} at offset {}", what, type_id, c.pos() - 4));
  }
  const auto type = static_cast<GgufType>(type_id);
  if (type == GgufType::kString) {
    KVS_ASSIGN_OR_RETURN(std::string_view s, c.string(what));
    return GgufValue::from_string(s);
  }
  if (type == GgufType::kArray) return parse_array(c, depth, what);
  const uint64_t size = gguf_type_size(type);
  KVS_RETURN_IF_ERROR(c.need(size, what));
  if (type == GgufType::kBool && *c.here() > 1) {
    return data_loss(
        fmt::format("{}: bool at offset {} has value {} (not 0 or 1)", what, c.pos(), *c.here()));
  }
  GgufValue v = GgufValue::scalar(type, c.here());
  c.skip(size);
  return v;
}

// a * b, or nullopt on overflow.
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Types

const GgmlTypeInfo* ggml_type_info(uint32_t ggml_type) {
  for (const auto& info : kGgmlTypes) {
    if (info.id == ggml_type) return &info;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// GgufTensorInfo

uint64_t GgufTensorInfo::num_elements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;  // the parser checked that this does not overflow
  return n;
}

const char* GgufTensorInfo::type_name() const {
  const GgmlTypeInfo* info = ggml_type_info(ggml_type);
  return info ? info->name : "unknown";
}

Result<WeightType> GgufTensorInfo::weight_type() const {
  const GgmlTypeInfo* info = ggml_type_info(ggml_type);
  if (info == nullptr) {
    return unimplemented(fmt::format("tensor '{}' has unknown ggml type {}", name, ggml_type));
  }
  if (!info->weight_type) {
    return unimplemented(
        fmt::format("tensor '{}' has ggml type {} ({}), which kvserve cannot compute with yet",
                    name, info->name, ggml_type));
  }
  return *info->weight_type;
}

// ---------------------------------------------------------------------------------------------
// GgufFile

struct GgufFile::Bytes {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  void* mapping = nullptr;  // set when the bytes are an mmap of `size` bytes
  std::vector<uint8_t> owned;

  ~Bytes() {
    if (mapping != nullptr) munmap(mapping, size);
  }
};

GgufFile::GgufFile(std::unique_ptr<Bytes> bytes) : bytes_(std::move(bytes)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

uint64_t GgufFile::file_size() const { return bytes_->size; }

std::span<const uint8_t> GgufFile::header_bytes() const {
  return {bytes_->data, static_cast<size_t>(std::min(data_offset_, bytes_->size))};
}

void GgufFile::release_pages(const void* p, uint64_t n) const {
  if (bytes_->mapping == nullptr || n == 0) return;
  const auto base = reinterpret_cast<uintptr_t>(bytes_->data);
  const auto begin = reinterpret_cast<uintptr_t>(p);
  KVS_CHECK(begin >= base && begin + n <= base + bytes_->size);
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + n) / page * page;
  // MADV_DONTNEED on a private, never-written file mapping only drops the page-table entries:
  // the bytes are the file's, read again on the next touch. Failure only keeps them resident.
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(fmt::format("{}: cannot stat: {}", path, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(fmt::format("{}: not a regular file", path));
  }
  auto bytes = std::make_unique<Bytes>();
  bytes->size = static_cast<uint64_t>(st.st_size);
  if (bytes->size == 0) {
    ::close(fd);
    return data_loss(fmt::format("{}: the file is empty (not a GGUF file)", path));
  }
  void* m = mmap(nullptr, bytes->size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) {
    return io_error(
        fmt::format("{}: cannot mmap {} bytes: {}", path, bytes->size, std::strerror(err)));
  }
  bytes->mapping = m;
  bytes->data = static_cast<const uint8_t*>(m);
  GgufFile file(std::move(bytes));
  if (Status s = file.parse(); !s.is_ok()) {
    return Status(s.code(), fmt::format("{}: {}", path, s.message()));
  }
  return file;
}

Result<GgufFile> GgufFile::parse_bytes(std::vector<uint8_t> data) {
  auto bytes = std::make_unique<Bytes>();
  bytes->owned = std::move(data);
  bytes->data = bytes->owned.data();
  bytes->size = bytes->owned.size();
  GgufFile file(std::move(bytes));
  KVS_RETURN_IF_ERROR(file.parse());
  return file;
}

Status GgufFile::parse() {
  Cursor c(bytes_->data, bytes_->size);

  // Header.
  if (c.left() < 4 || std::memcmp(c.here(), "GGUF", 4) != 0) {
    std::string got;
    for (uint64_t i = 0; i < std::min<uint64_t>(4, c.left()); ++i) {
      const char ch = static_cast<char>(c.here()[i]);
      got +=
          (ch >= 0x20 && ch < 0x7f) ? fmt::format("{}", ch) : fmt::format("\\x{:02x}", c.here()[i]);
    }
    return data_loss(fmt::format("not a GGUF file: bad magic '{}' (expected 'GGUF')", got));
  }
  KVS_ASSIGN_OR_RETURN(uint32_t magic, c.read<uint32_t>("magic"));
  KVS_CHECK(magic == kGgufMagic);
  KVS_ASSIGN_OR_RETURN(version_, c.read<uint32_t>("version"));
  if (version_ == 1) {
    return unimplemented(
        "GGUF version 1 is not supported (only versions 2 and 3); re-convert the model with a "
        "current llama.cpp");
  }
  if (version_ != 2 && version_ != 3) {
    return unimplemented(
        fmt::format("unsupported GGUF version {} (only versions 2 and 3 are supported)", version_));
  }
  KVS_ASSIGN_OR_RETURN(uint64_t tensor_count, c.read<uint64_t>("tensor count"));
  KVS_ASSIGN_OR_RETURN(uint64_t kv_count, c.read<uint64_t>("metadata kv count"));
  if (tensor_count > c.left() / kMinTensorInfoBytes) {
    return data_loss(fmt::format(
        "tensor count {} is implausible: {} tensor infos need at least {} bytes each but only {} "
        "bytes follow the header",
        tensor_count, tensor_count, kMinTensorInfoBytes, c.left()));
  }
  if (kv_count > c.left() / kMinKvBytes) {
    return data_loss(fmt::format(
        "metadata kv count {} is implausible: {} key/value pairs need at least {} bytes each but "
        "only {} bytes follow the header",
        kv_count, kv_count, kMinKvBytes, c.left()));
  }

  // Metadata.
  metadata_.reserve(kv_count);
  key_index_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    KVS_ASSIGN_OR_RETURN(std::string_view key, c.string(fmt::format("metadata key #{}", i)));
    const std::string what = fmt::format("metadata key '{}'", key);
    if (key_index_.count(key) != 0) {
      return data_loss(
          fmt::format("{} appears twice (entries #{} and #{})", what, key_index_.at(key), i));
    }
    KVS_ASSIGN_OR_RETURN(uint32_t type_id, c.read<uint32_t>(what + " type"));
    KVS_ASSIGN_OR_RETURN(GgufValue value, parse_value(c, type_id, 0, what));
    key_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::string(key), std::move(value));
  }

  // Alignment.
  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = find("general.alignment")) {
    const std::optional<uint64_t> v = a->to_uint();
    if (!v) {
      return data_loss(
          fmt::format("metadata key 'general.alignment' has type {}, expected an unsigned integer",
                      a->type_string()));
    }
    if (*v == 0 || !std::has_single_bit(*v) || *v > (uint64_t{1} << 30)) {
      return data_loss(fmt::format(
          "metadata key 'general.alignment' is {}; it must be a non-zero power of two (at most "
          "2^30)",
          *v));
    }
    alignment_ = *v;
  }

  // Tensor infos.
  tensors_.reserve(tensor_count);
  tensor_index_.reserve(tensor_count);
  std::vector<std::string_view> names;  // views into the file, for the index
  names.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    KVS_ASSIGN_OR_RETURN(std::string_view name, c.string(fmt::format("tensor #{} name", i)));
    const std::string what = fmt::format("tensor '{}'", name);
    if (tensor_index_.count(name) != 0) {
      return data_loss(
          fmt::format("{} appears twice (tensors #{} and #{})", what, tensor_index_.at(name), i));
    }
    t.name = std::string(name);
    KVS_ASSIGN_OR_RETURN(uint32_t n_dims, c.read<uint32_t>(what + " dimension count"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return data_loss(
          fmt::format("{}: has {} dimensions (must be 1 to {})", what, n_dims, kMaxDims));
    }
    t.dims.resize(n_dims);
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      KVS_ASSIGN_OR_RETURN(t.dims[d], c.read<uint64_t>(fmt::format("{} dim {}", what, d)));
      if (t.dims[d] == 0) return data_loss(fmt::format("{}: dim {} is zero", what, d));
      const auto product = checked_mul(elements, t.dims[d]);
      if (!product) {
        return data_loss(fmt::format("{}: element count overflows 64 bits (dims {})", what,
                                     fmt::join(t.dims.begin(), t.dims.begin() + d + 1, " x ")));
      }
      elements = *product;
    }
    KVS_ASSIGN_OR_RETURN(t.ggml_type, c.read<uint32_t>(what + " type"));
    const GgmlTypeInfo* type = ggml_type_info(t.ggml_type);
    if (type == nullptr) {
      return data_loss(fmt::format("{}: unknown ggml type {}", what, t.ggml_type));
    }
    if (t.dims[0] % type->block_elems != 0) {
      return data_loss(fmt::format("{}: row length {} is not a multiple of the {} block size {}",
                                   what, t.dims[0], type->name, type->block_elems));
    }
    // elements / block_elems * block_bytes cannot overflow past the element count by more than
    // block_bytes / block_elems <= 8; check it anyway.
    const auto size = checked_mul(elements / type->block_elems, type->block_bytes);
    if (!size) {
      return data_loss(fmt::format("{}: byte size overflows 64 bits ({} elements of {})", what,
                                   elements, type->name));
    }
    t.size_bytes = *size;
    KVS_ASSIGN_OR_RETURN(t.offset, c.read<uint64_t>(what + " offset"));
    if (t.offset % alignment_ != 0) {
      return data_loss(fmt::format("{}: data offset {} is not a multiple of the alignment {}", what,
                                   t.offset, alignment_));
    }
    tensor_index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Data section.
  const uint64_t end_of_infos = c.pos();
  const uint64_t padding = (alignment_ - end_of_infos % alignment_) % alignment_;
  data_offset_ = end_of_infos + padding;  // end_of_infos <= size < 2^64 - 2^30: no overflow
  const uint64_t size = bytes_->size;
  for (GgufTensorInfo& t : tensors_) {
    const bool inside = data_offset_ <= size && t.offset <= size - data_offset_ &&
                        t.size_bytes <= size - data_offset_ - t.offset;
    if (!inside) {
      return data_loss(fmt::format(
          "tensor '{}': data [offset {}, {} bytes] extends past end of file (size {}, data "
          "section starts at {})",
          t.name, t.offset, t.size_bytes, size, data_offset_));
    }
    t.data = bytes_->data + data_offset_ + t.offset;
  }
  return Status::ok();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

Result<const GgufValue*> GgufFile::find_typed(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return not_found(fmt::format("metadata key '{}' is missing", key));
  return v;
}

namespace {
Status wrong_type(std::string_view key, const GgufValue& v, std::string_view expected) {
  return invalid_argument(
      fmt::format("metadata key '{}' has type {}, expected {}", key, v.type_string(), expected));
}
}  // namespace

Result<uint64_t> GgufFile::get_uint(std::string_view key) const {
  KVS_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(key));
  if (!v->is_integer()) return wrong_type(key, *v, "an integer");
  if (auto u = v->to_uint()) return *u;
  return invalid_argument(
      fmt::format("metadata key '{}' has value {}, expected a non-negative "
                  "integer",
                  key, *v->to_int()));
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  KVS_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(key));
  if (!v->is_integer()) return wrong_type(key, *v, "an integer");
  if (auto i = v->to_int()) return *i;
  return invalid_argument(
      fmt::format("metadata key '{}' has value {}, which does not fit int64", key, *v->to_uint()));
}

Result<double> GgufFile::get_float(std::string_view key) const {
  KVS_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(key));
  if (auto d = v->to_double()) return *d;
  return wrong_type(key, *v, "a number");
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  KVS_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(key));
  if (auto b = v->to_bool()) return *b;
  return wrong_type(key, *v, "bool");
}

Result<std::string> GgufFile::get_string(std::string_view key) const {
  KVS_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(key));
  if (v->type() != GgufType::kString) return wrong_type(key, *v, "string");
  return std::string(v->string());
}

Result<std::span<const std::string_view>> GgufFile::get_string_views(std::string_view key) const {
  KVS_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(key));
  if (v->type() != GgufType::kArray || v->array_type() != GgufType::kString) {
    return wrong_type(key, *v, "array<string>");
  }
  return v->strings();
}

Result<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  KVS_ASSIGN_OR_RETURN(std::span<const std::string_view> views, get_string_views(key));
  return std::vector<std::string>(views.begin(), views.end());
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  KVS_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(key));
  if (v->type() != GgufType::kArray || !gguf_type_is_fixed_size(v->array_type()) ||
      v->array_type() == GgufType::kBool || v->array_type() == GgufType::kFloat32 ||
      v->array_type() == GgufType::kFloat64) {
    return wrong_type(key, *v, "an array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->array_size());
  for (uint64_t i = 0; i < v->array_size(); ++i) {
    const GgufValue e = v->element(i);
    const std::optional<int64_t> x = e.to_int();
    if (!x) {
      return invalid_argument(fmt::format(
          "metadata key '{}': element {} is {}, which does not fit int64", key, i, *e.to_uint()));
    }
    out.push_back(*x);
  }
  return out;
}

Result<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  KVS_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(key));
  if (v->type() != GgufType::kArray || !gguf_type_is_fixed_size(v->array_type()) ||
      v->array_type() == GgufType::kBool) {
    return wrong_type(key, *v, "an array of numbers");
  }
  std::vector<double> out;
  out.reserve(v->array_size());
  for (uint64_t i = 0; i < v->array_size(); ++i) out.push_back(*v->element(i).to_double());
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t GgufFile::total_tensor_bytes() const {
  uint64_t total = 0;
  for (const auto& t : tensors_) total += t.size_bytes;
  return total;
}

}  // namespace kvs
