#include "engine/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "probes/atomic_file.h"
#include "probes/error.h"
#include "probes/memory.h"

namespace infercast {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;                   // ggml's limit
constexpr int kMaxArrayDepth = 3;
constexpr std::uint64_t kMaxAlignment = 1 << 20;
constexpr std::uint64_t kMaxNameBytes = 4096;

// Block geometry of every ggml type, so any GGUF file can be read and sized; the kernels decide
// later which of them they can compute with.
constexpr std::array<GgmlTypeGeometry, 31> kGeometry = {{
    {1, 4, "F32"},       {1, 2, "F16"},      {32, 18, "Q4_0"},    {32, 20, "Q4_1"},   {0, 0, ""},
    {0, 0, ""},          {32, 22, "Q5_0"},   {32, 24, "Q5_1"},    {32, 34, "Q8_0"},   {32, 36, "Q8_1"},
    {256, 84, "Q2_K"},   {256, 110, "Q3_K"}, {256, 144, "Q4_K"},  {256, 176, "Q5_K"}, {256, 210, "Q6_K"},
    {256, 292, "Q8_K"},  {256, 66, "IQ2_XXS"}, {256, 74, "IQ2_XS"}, {256, 98, "IQ3_XXS"}, {256, 50, "IQ1_S"},
    {32, 18, "IQ4_NL"},  {256, 110, "IQ3_S"}, {256, 82, "IQ2_S"},  {256, 136, "IQ4_XS"}, {1, 1, "I8"},
    {1, 2, "I16"},       {1, 4, "I32"},      {1, 8, "I64"},       {1, 8, "F64"},      {256, 56, "IQ1_M"},
    {1, 2, "BF16"},
}};

std::uint64_t align_up(std::uint64_t n, std::uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

std::size_t scalar_bytes(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    case GgufType::string: return 8;  // at least its length
    case GgufType::array: return 12;  // at least element type and count
  }
  return 0;
}

// A cursor over untrusted bytes: every read checks the remaining length first.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  [[nodiscard]] std::uint64_t position() const { return pos_; }
  [[nodiscard]] std::uint64_t remaining() const { return bytes_.size() - pos_; }

  template <class T>
  T scalar(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string string(const char* what, std::uint64_t max_bytes = std::numeric_limits<std::uint64_t>::max()) {
    const auto n = scalar<std::uint64_t>(what);
    if (n > max_bytes) throw UsageError(fmt::format("{} is {} bytes long (at most {} allowed)", what, n, max_bytes));
    need(n, what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  void need(std::uint64_t n, const char* what) const {
    if (n > remaining()) {
      throw UsageError(fmt::format("truncated: {} needs {} bytes at offset {}, {} left", what, n, pos_, remaining()));
    }
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::uint64_t pos_ = 0;
};

GgufType read_type(Reader& r, const char* what) {
  const auto raw = r.scalar<std::uint32_t>(what);
  if (raw > static_cast<std::uint32_t>(GgufType::f64)) throw UsageError(fmt::format("{} has unknown value type {}", what, raw));
  return static_cast<GgufType>(raw);
}

GgufValue read_value(Reader& r, GgufType type, int depth, const std::string& key) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::u8: v.uint = r.scalar<std::uint8_t>(key.c_str()); break;
    case GgufType::u16: v.uint = r.scalar<std::uint16_t>(key.c_str()); break;
    case GgufType::u32: v.uint = r.scalar<std::uint32_t>(key.c_str()); break;
    case GgufType::u64: v.uint = r.scalar<std::uint64_t>(key.c_str()); break;
    case GgufType::i8: v.sint = r.scalar<std::int8_t>(key.c_str()); break;
    case GgufType::i16: v.sint = r.scalar<std::int16_t>(key.c_str()); break;
    case GgufType::i32: v.sint = r.scalar<std::int32_t>(key.c_str()); break;
    case GgufType::i64: v.sint = r.scalar<std::int64_t>(key.c_str()); break;
    case GgufType::f32: v.real = static_cast<double>(r.scalar<float>(key.c_str())); break;
    case GgufType::f64: v.real = r.scalar<double>(key.c_str()); break;
    case GgufType::boolean: {
      const auto b = r.scalar<std::uint8_t>(key.c_str());
      if (b > 1) throw UsageError(fmt::format("metadata '{}' is a bool holding {}", key, b));
      v.uint = b;
      break;
    }
    case GgufType::string: v.text = r.string(key.c_str()); break;
    case GgufType::array: {
      if (depth >= kMaxArrayDepth) throw UsageError(fmt::format("metadata '{}' nests arrays too deeply", key));
      v.element_type = read_type(r, key.c_str());
      const auto count = r.scalar<std::uint64_t>(key.c_str());
      // Every element takes at least scalar_bytes, so a count the file cannot hold is refused
      // before anything is allocated for it.
      if (count > r.remaining() / scalar_bytes(v.element_type)) {
        throw UsageError(fmt::format("metadata '{}' claims {} elements, more than the file holds", key, count));
      }
      v.items.reserve(count);
      for (std::uint64_t i = 0; i < count; ++i) v.items.push_back(read_value(r, v.element_type, depth + 1, key));
      break;
    }
  }
  return v;
}

}  // namespace

std::string_view to_string(GgufType type) {
  static constexpr std::array<std::string_view, 13> kNames = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                              "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<std::size_t>(type);
  return i < kNames.size() ? kNames[i] : "unknown";
}

GgufValue GgufValue::make_u32(std::uint32_t v) { GgufValue x; x.type = GgufType::u32; x.uint = v; return x; }
GgufValue GgufValue::make_i32(std::int32_t v) { GgufValue x; x.type = GgufType::i32; x.sint = v; return x; }
GgufValue GgufValue::make_u64(std::uint64_t v) { GgufValue x; x.type = GgufType::u64; x.uint = v; return x; }
GgufValue GgufValue::make_f32(float v) { GgufValue x; x.type = GgufType::f32; x.real = static_cast<double>(v); return x; }
GgufValue GgufValue::make_bool(bool v) { GgufValue x; x.type = GgufType::boolean; x.uint = v ? 1 : 0; return x; }
GgufValue GgufValue::make_string(std::string v) { GgufValue x; x.type = GgufType::string; x.text = std::move(v); return x; }
GgufValue GgufValue::make_array(GgufType element_type, std::vector<GgufValue> items) {
  GgufValue x;
  x.type = GgufType::array;
  x.element_type = element_type;
  x.items = std::move(items);
  return x;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::u8: case GgufType::u16: case GgufType::u32: case GgufType::u64:
    case GgufType::i8: case GgufType::i16: case GgufType::i32: case GgufType::i64: return true;
    default: return false;
  }
}

std::uint64_t GgufTensorInfo::elements() const {
  std::uint64_t n = 1;
  for (auto d : dims) n *= d;  // checked for overflow when the file was read
  return n;
}

const GgmlTypeGeometry* ggml_type_geometry(GgmlType type) {
  const auto raw = static_cast<std::uint32_t>(type);
  if (raw >= kGeometry.size() || kGeometry[raw].block_elems == 0) return nullptr;
  return &kGeometry[raw];
}

std::uint64_t tensor_bytes(GgmlType type, std::span<const std::uint64_t> dims, std::string_view name) {
  const GgmlTypeGeometry* g = ggml_type_geometry(type);
  if (g == nullptr) throw UsageError(fmt::format("tensor '{}' has unknown ggml type {}", name, static_cast<std::uint32_t>(type)));
  if (dims.empty() || dims.size() > kMaxDims) throw UsageError(fmt::format("tensor '{}' has {} dimensions (1 to 4 allowed)", name, dims.size()));
  std::uint64_t elements = 1;
  for (auto d : dims) {
    if (d == 0) throw UsageError(fmt::format("tensor '{}' has an empty dimension", name));
    if (elements > std::numeric_limits<std::uint64_t>::max() / d) throw UsageError(fmt::format("tensor '{}' is too large (element count overflows)", name));
    elements *= d;
  }
  if (dims[0] % g->block_elems != 0) {
    throw UsageError(fmt::format("tensor '{}' has rows of {} elements, not a multiple of {}'s block of {}", name, dims[0], g->name, g->block_elems));
  }
  const std::uint64_t blocks = elements / g->block_elems;
  if (blocks > std::numeric_limits<std::uint64_t>::max() / g->block_bytes) throw UsageError(fmt::format("tensor '{}' is too large (byte count overflows)", name));
  return blocks * g->block_bytes;
}

struct GgufFile::Mapping {
  void* address = nullptr;  // of the file mapping; null when the bytes were copied
  std::size_t length = 0;
  PageBuffer copy;
  ~Mapping() {
    if (address != nullptr) munmap(address, length);
  }
};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

namespace {

void read_all(int fd, std::byte* out, std::size_t size, const std::string& path) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, out + done, std::min<std::size_t>(size - done, 64U << 20), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw UsageError(fmt::format("cannot read '{}': {}", path, n < 0 ? std::strerror(errno) : "file shrank while reading"));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

GgufFile GgufFile::open(const std::string& path, WeightLoading loading) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw UsageError(fmt::format("'{}' is not a regular file", path));
  }
  GgufFile file;
  file.mapping_ = std::make_unique<Mapping>();
  file.loading_ = loading;
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size > 0 && loading == WeightLoading::copy) {
    try {
      file.mapping_->copy = PageBuffer(size, true);
      read_all(fd, file.mapping_->copy.data(), size, path);
    } catch (...) {
      close(fd);
      throw;
    }
    file.bytes_ = {reinterpret_cast<const std::uint8_t*>(file.mapping_->copy.data()), size};
  } else if (size > 0) {
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      close(fd);
      throw UsageError(fmt::format("cannot map '{}': {}", path, std::strerror(err)));
    }
    file.mapping_->address = p;
    file.mapping_->length = size;
    file.bytes_ = {static_cast<const std::uint8_t*>(p), size};
  }
  close(fd);
  file.parse_all(path);
  return file;
}

std::uint8_t* GgufFile::writable(const std::uint8_t* data) const {
  if (loading_ != WeightLoading::copy || mapping_ == nullptr || mapping_->copy.size() == 0) return nullptr;
  auto* base = reinterpret_cast<std::uint8_t*>(mapping_->copy.data());
  if (data < base || data >= base + mapping_->copy.size()) return nullptr;
  return base + (data - base);
}

GgufFile GgufFile::parse(std::span<const std::uint8_t> bytes) {
  GgufFile file;
  file.bytes_ = bytes;
  file.parse_all("GGUF data");
  return file;
}

void GgufFile::parse_all(const std::string& origin) {
  try {
    Reader r(bytes_);
    if (r.remaining() < 4 || r.scalar<std::uint32_t>("magic") != kMagic) throw UsageError("not a GGUF file (bad magic)");
    version_ = r.scalar<std::uint32_t>("version");
    if (version_ == 1) throw UsageError("GGUF version 1 is not supported (versions 2 and 3 are)");
    if (version_ == 0x02000000 || version_ == 0x03000000) throw UsageError("big-endian GGUF is not supported");
    if (version_ != 2 && version_ != 3) throw UsageError(fmt::format("unknown GGUF version {}", version_));
    const auto tensor_count = r.scalar<std::uint64_t>("tensor count");
    const auto kv_count = r.scalar<std::uint64_t>("metadata count");
    // A key-value pair takes at least 13 bytes and a tensor info at least 32: refuse counts the
    // file cannot hold before reserving anything.
    if (kv_count > r.remaining() / 13) throw UsageError(fmt::format("metadata count {} is more than the file holds", kv_count));
    for (std::uint64_t i = 0; i < kv_count; ++i) {
      std::string key = r.string("metadata key", kMaxNameBytes);
      const GgufType type = read_type(r, key.c_str());
      GgufValue value = read_value(r, type, 0, key);
      if (metadata_.contains(key)) throw UsageError(fmt::format("metadata key '{}' appears twice", key));
      metadata_.emplace(std::move(key), std::move(value));
    }
    if (const GgufValue* a = find("general.alignment")) {
      if (!a->is_integer() || a->uint == 0 || (a->uint & (a->uint - 1)) != 0 || a->uint > kMaxAlignment) {
        throw UsageError("general.alignment must be a power of two up to 1 MiB");
      }
      alignment_ = a->uint;
    }
    if (tensor_count > r.remaining() / 32) throw UsageError(fmt::format("tensor count {} is more than the file holds", tensor_count));
    tensors_.reserve(tensor_count);
    for (std::uint64_t i = 0; i < tensor_count; ++i) {
      GgufTensorInfo t;
      t.name = r.string("tensor name", kMaxNameBytes);
      const auto n_dims = r.scalar<std::uint32_t>("tensor dimension count");
      if (n_dims == 0 || n_dims > kMaxDims) throw UsageError(fmt::format("tensor '{}' has {} dimensions (1 to 4 allowed)", t.name, n_dims));
      for (std::uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(r.scalar<std::uint64_t>("tensor dimension"));
      t.type = static_cast<GgmlType>(r.scalar<std::uint32_t>("tensor type"));
      t.offset = r.scalar<std::uint64_t>("tensor offset");
      t.bytes = tensor_bytes(t.type, t.dims, t.name);
      if (t.offset % alignment_ != 0) throw UsageError(fmt::format("tensor '{}' is at offset {}, not aligned to {}", t.name, t.offset, alignment_));
      if (!tensor_index_.emplace(t.name, tensors_.size()).second) throw UsageError(fmt::format("tensor '{}' appears twice", t.name));
      tensors_.push_back(std::move(t));
    }
    const std::uint64_t data_start = align_up(r.position(), alignment_);
    const std::uint64_t data_bytes = data_start <= bytes_.size() ? bytes_.size() - data_start : 0;
    for (auto& t : tensors_) {
      if (t.offset > data_bytes || t.bytes > data_bytes - t.offset) {
        throw UsageError(fmt::format("truncated: tensor '{}' ({} bytes at data offset {}) ends past the end of the file", t.name, t.bytes, t.offset));
      }
      t.data = bytes_.data() + data_start + t.offset;
    }
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}", origin, e.what()));
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::uint64_t GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw UsageError(fmt::format("metadata '{}' is missing", key));
  if (v->type == GgufType::i8 || v->type == GgufType::i16 || v->type == GgufType::i32 || v->type == GgufType::i64) {
    if (v->sint < 0) throw UsageError(fmt::format("metadata '{}' is negative", key));
    return static_cast<std::uint64_t>(v->sint);
  }
  if (!v->is_integer()) throw UsageError(fmt::format("metadata '{}' is a {}, not an integer", key, to_string(v->type)));
  return v->uint;
}

double GgufFile::get_real(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw UsageError(fmt::format("metadata '{}' is missing", key));
  if (v->is_real()) return v->real;
  if (v->is_integer()) return static_cast<double>(get_uint(key));
  throw UsageError(fmt::format("metadata '{}' is a {}, not a number", key, to_string(v->type)));
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw UsageError(fmt::format("metadata '{}' is missing", key));
  if (v->type != GgufType::string) throw UsageError(fmt::format("metadata '{}' is a {}, not a string", key, to_string(v->type)));
  return v->text;
}

std::uint64_t GgufFile::get_uint_or(std::string_view key, std::uint64_t fallback) const {
  return find(key) != nullptr ? get_uint(key) : fallback;
}

double GgufFile::get_real_or(std::string_view key, double fallback) const {
  return find(key) != nullptr ? get_real(key) : fallback;
}

bool GgufFile::lock_in_memory() const {
  if (bytes_.empty() || mapping_ == nullptr) return true;
  return mlock(bytes_.data(), bytes_.size()) == 0;
}

// ---------------------------------------------------------------------------------------------

void GgufWriter::set(std::string key, GgufValue value) {
  if (key == "general.alignment") alignment_ = value.uint;
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<std::uint64_t> dims, Fill fill) {
  const std::uint64_t bytes = tensor_bytes(type, dims, name);
  tensors_.push_back(Pending{std::move(name), type, std::move(dims), bytes, std::move(fill)});
}

std::uint64_t GgufWriter::data_bytes() const {
  std::uint64_t total = 0;
  for (const auto& t : tensors_) total = align_up(total, alignment_) + t.bytes;
  return total;
}

namespace {

class Encoder {
 public:
  explicit Encoder(const ByteSink& sink) : sink_(sink) {}
  template <class T>
  void scalar(T v) { put(&v, sizeof v); }
  void string(std::string_view s) {
    scalar<std::uint64_t>(s.size());
    put(s.data(), s.size());
  }
  void value(const GgufValue& v) {
    switch (v.type) {
      case GgufType::u8: case GgufType::boolean: scalar(static_cast<std::uint8_t>(v.uint)); break;
      case GgufType::u16: scalar(static_cast<std::uint16_t>(v.uint)); break;
      case GgufType::u32: scalar(static_cast<std::uint32_t>(v.uint)); break;
      case GgufType::u64: scalar(v.uint); break;
      case GgufType::i8: scalar(static_cast<std::int8_t>(v.sint)); break;
      case GgufType::i16: scalar(static_cast<std::int16_t>(v.sint)); break;
      case GgufType::i32: scalar(static_cast<std::int32_t>(v.sint)); break;
      case GgufType::i64: scalar(v.sint); break;
      case GgufType::f32: scalar(static_cast<float>(v.real)); break;
      case GgufType::f64: scalar(v.real); break;
      case GgufType::string: string(v.text); break;
      case GgufType::array:
        scalar(static_cast<std::uint32_t>(v.element_type));
        scalar<std::uint64_t>(v.items.size());
        for (const auto& item : v.items) value(item);
        break;
    }
  }
  void pad_to(std::uint64_t alignment) {
    static constexpr std::array<std::uint8_t, 64> kZeros{};
    while (written_ % alignment != 0) put(kZeros.data(), std::min<std::uint64_t>(kZeros.size(), alignment - written_ % alignment));
  }
  void put(const void* p, std::size_t n) {
    sink_(p, n);
    written_ += n;
  }

 private:
  const ByteSink& sink_;
  std::uint64_t written_ = 0;
};

}  // namespace

void GgufWriter::write(const std::string& path) const {
  write_file_atomically(path, [&](const ByteSink& sink) {
    Encoder out(sink);
    out.scalar(kMagic);
    out.scalar<std::uint32_t>(3);
    out.scalar<std::uint64_t>(tensors_.size());
    out.scalar<std::uint64_t>(kv_.size());
    for (const auto& [key, value] : kv_) {
      out.string(key);
      out.scalar(static_cast<std::uint32_t>(value.type));
      out.value(value);
    }
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      offset = align_up(offset, alignment_);
      out.string(t.name);
      out.scalar<std::uint32_t>(static_cast<std::uint32_t>(t.dims.size()));
      for (auto d : t.dims) out.scalar(d);
      out.scalar(static_cast<std::uint32_t>(t.type));
      out.scalar(offset);
      offset += t.bytes;
    }
    out.pad_to(alignment_);
    std::vector<std::uint8_t> buffer;
    for (const auto& t : tensors_) {
      out.pad_to(alignment_);
      buffer.assign(t.bytes, 0);
      t.fill(buffer);
      out.put(buffer.data(), buffer.size());
    }
  });
}

}  // namespace infercast
