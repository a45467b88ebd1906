#pragma once
// GGUF files (versions 2 and 3): a reader that maps the file and treats every byte as hostile,
// and a streaming writer. Layout, little-endian:
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count
//   kv_count x { string key, u32 value_type, value }
//   tensor_count x { string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the tensor data, each tensor at its offset.
// Strings are u64 length + bytes; arrays are u32 element type + u64 count + elements.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/blocks.h"

namespace infercast {

enum class GgufType : std::uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view to_string(GgufType type);

// One metadata value. Scalars keep their declared type; integers are held widened.
struct GgufValue {
  GgufType type = GgufType::u32;
  GgufType element_type = GgufType::u32;  // arrays only
  std::uint64_t uint = 0;                 // u8..u64, bool
  std::int64_t sint = 0;                  // i8..i64
  double real = 0;                        // f32, f64
  std::string text;                       // string
  std::vector<GgufValue> items;           // array

  static GgufValue make_u32(std::uint32_t v);
  static GgufValue make_i32(std::int32_t v);
  static GgufValue make_u64(std::uint64_t v);
  static GgufValue make_f32(float v);
  static GgufValue make_bool(bool v);
  static GgufValue make_string(std::string v);
  static GgufValue make_array(GgufType element_type, std::vector<GgufValue> items);

  [[nodiscard]] bool is_integer() const;
  [[nodiscard]] bool is_real() const { return type == GgufType::f32 || type == GgufType::f64; }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  // dims[0] is the row length (ggml's ne[0])
  GgmlType type = GgmlType::f32;
  std::uint64_t offset = 0;         // from the start of the data section
  std::uint64_t bytes = 0;
  const std::uint8_t* data = nullptr;  // into the mapping

  [[nodiscard]] std::uint64_t elements() const;
  [[nodiscard]] std::uint64_t rows() const { return elements() / dims.at(0); }
};

// How a file's bytes reach memory. Mapping shares the page cache and starts at once; copying
// reads the file into anonymous memory backed by transparent huge pages, which decode streams
// faster (on 4 KiB file pages the hardware prefetcher stops at every page boundary and each page
// costs a TLB entry).
enum class WeightLoading { map, copy };

class GgufFile {
 public:
  // Maps (or reads) the file. Throws UsageError naming the file and the first thing wrong.
  static GgufFile open(const std::string& path, WeightLoading loading = WeightLoading::map);
  // Parses bytes the caller keeps alive (tests, the fuzzer). Throws UsageError.
  static GgufFile parse(std::span<const std::uint8_t> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  [[nodiscard]] std::uint32_t version() const { return version_; }
  [[nodiscard]] std::uint64_t alignment() const { return alignment_; }
  [[nodiscard]] const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  [[nodiscard]] const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  [[nodiscard]] std::uint64_t file_bytes() const { return bytes_.size(); }

  [[nodiscard]] const GgufValue* find(std::string_view key) const;
  [[nodiscard]] const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Typed lookups: throw UsageError when the key is missing or has an unsuitable type.
  [[nodiscard]] std::uint64_t get_uint(std::string_view key) const;
  [[nodiscard]] double get_real(std::string_view key) const;
  [[nodiscard]] const std::string& get_string(std::string_view key) const;
  [[nodiscard]] std::uint64_t get_uint_or(std::string_view key, std::uint64_t fallback) const;
  [[nodiscard]] double get_real_or(std::string_view key, double fallback) const;

  // Locks the file's pages in memory (mlock); false with errno set when the OS refuses.
  bool lock_in_memory() const;
  // `data` (a tensor's bytes) as a writable pointer when the file was copied into memory this
  // object owns; null for a mapping or parsed bytes, which must not be written.
  [[nodiscard]] std::uint8_t* writable(const std::uint8_t* data) const;
  [[nodiscard]] WeightLoading loading() const { return loading_; }

 private:
  GgufFile() = default;
  void parse_all(const std::string& origin);

  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  WeightLoading loading_ = WeightLoading::map;
  std::span<const std::uint8_t> bytes_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;  // name -> position in tensors_
};

// Writes a GGUF v3 file. Tensor contents are produced one tensor at a time by a callback when
// the data section is written, so a multi-gigabyte model never has to sit in memory. The file is
// written beside the target and renamed over it when complete.
class GgufWriter {
 public:
  using Fill = std::function<void(std::span<std::uint8_t> out)>;

  void set(std::string key, GgufValue value);
  // dims[0] is the row length; it must be a multiple of the type's block size.
  void add_tensor(std::string name, GgmlType type, std::vector<std::uint64_t> dims, Fill fill);
  void write(const std::string& path) const;
  [[nodiscard]] std::uint64_t data_bytes() const;

 private:
  struct Pending {
    std::string name;
    GgmlType type;
    std::vector<std::uint64_t> dims;
    std::uint64_t bytes;
    Fill fill;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Pending> tensors_;
  std::uint64_t alignment_ = 32;
};

// The block geometry of every ggml type a GGUF file may hold, whether or not infercast has
// kernels for it (Q5_0, Q3_K, IQ4_XS, ...); nullptr for a type ggml does not define.
struct GgmlTypeGeometry {
  std::uint32_t block_elems;
  std::uint32_t block_bytes;
  std::string_view name;
};
const GgmlTypeGeometry* ggml_type_geometry(GgmlType type);

// Bytes of a tensor of `type` and these dims; throws UsageError on overflow, an unsupported type
// or a row length that is not a multiple of the block size.
std::uint64_t tensor_bytes(GgmlType type, std::span<const std::uint64_t> dims, std::string_view name);

}  // namespace infercast
