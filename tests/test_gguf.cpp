// GGUF reader and writer: round trips of every value type, and hostile files (truncations at
// every length, absurd counts and sizes, misalignment, overlaps past the end) that must give a
// UsageError and nothing worse.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/gguf.h"
#include "probes/error.h"
#include "tests/temp_path.h"

namespace infercast {
namespace {

std::vector<std::uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A small file with one value of every type and two tensors.
std::vector<std::uint8_t> sample_file() {
  GgufWriter w;
  GgufValue v;
  v.type = GgufType::u8; v.uint = 200; w.set("k.u8", v);
  v = {}; v.type = GgufType::i8; v.sint = -100; w.set("k.i8", v);
  v = {}; v.type = GgufType::u16; v.uint = 60000; w.set("k.u16", v);
  v = {}; v.type = GgufType::i16; v.sint = -30000; w.set("k.i16", v);
  w.set("k.u32", GgufValue::make_u32(4000000000U));
  w.set("k.i32", GgufValue::make_i32(-2000000000));
  w.set("k.u64", GgufValue::make_u64(1ULL << 60));
  v = {}; v.type = GgufType::i64; v.sint = -(1LL << 60); w.set("k.i64", v);
  w.set("k.f32", GgufValue::make_f32(1.5F));
  v = {}; v.type = GgufType::f64; v.real = -2.25; w.set("k.f64", v);
  w.set("k.bool", GgufValue::make_bool(true));
  w.set("k.string", GgufValue::make_string("h\xC3\xA9llo"));
  w.set("k.array", GgufValue::make_array(GgufType::string, {GgufValue::make_string("a"), GgufValue::make_string("bc")}));
  w.set("k.nested", GgufValue::make_array(GgufType::array, {GgufValue::make_array(GgufType::u32, {GgufValue::make_u32(7)})}));
  w.add_tensor("a", GgmlType::f32, {3, 2}, [](std::span<std::uint8_t> out) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(i);
  });
  w.add_tensor("b", GgmlType::q8_0, {64}, [](std::span<std::uint8_t> out) { std::memset(out.data(), 0xAB, out.size()); });
  const std::string path = temp_path("sample.gguf");
  w.write(path);
  auto bytes = read_all(path);
  std::filesystem::remove(path);
  return bytes;
}

TEST(Gguf, RoundTripsEveryValueType) {
  const auto bytes = sample_file();
  const GgufFile f = GgufFile::parse(bytes);
  EXPECT_EQ(f.version(), 3U);
  EXPECT_EQ(f.find("k.u8")->uint, 200U);
  EXPECT_EQ(f.find("k.i8")->sint, -100);
  EXPECT_EQ(f.find("k.u16")->uint, 60000U);
  EXPECT_EQ(f.find("k.i16")->sint, -30000);
  EXPECT_EQ(f.get_uint("k.u32"), 4000000000U);
  EXPECT_EQ(f.find("k.i32")->sint, -2000000000);
  EXPECT_EQ(f.get_uint("k.u64"), 1ULL << 60);
  EXPECT_EQ(f.find("k.i64")->sint, -(1LL << 60));
  EXPECT_EQ(f.get_real("k.f32"), 1.5);
  EXPECT_EQ(f.get_real("k.f64"), -2.25);
  EXPECT_EQ(f.find("k.bool")->uint, 1U);
  EXPECT_EQ(f.get_string("k.string"), "h\xC3\xA9llo");
  ASSERT_EQ(f.find("k.array")->items.size(), 2U);
  EXPECT_EQ(f.find("k.array")->items[1].text, "bc");
  EXPECT_EQ(f.find("k.nested")->items[0].items[0].uint, 7U);
  ASSERT_EQ(f.tensors().size(), 2U);
  const GgufTensorInfo* a = f.find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->bytes, 24U);
  EXPECT_EQ(a->rows(), 2U);
  EXPECT_EQ(a->data[5], 5);
  const GgufTensorInfo* b = f.find_tensor("b");
  EXPECT_EQ(b->bytes, 68U);
  EXPECT_EQ(b->offset % 32, 0U);
  EXPECT_EQ(b->data[67], 0xAB);
  EXPECT_THROW((void)f.get_string("k.u32"), UsageError);
  EXPECT_THROW((void)f.get_uint("k.missing"), UsageError);
  EXPECT_THROW((void)f.get_uint("k.i8"), UsageError);  // negative
}

TEST(Gguf, OpensMappedFileAndNamesItInErrors) {
  const auto bytes = sample_file();
  const std::string path = temp_path("mapped.gguf");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.tensors().size(), 2U);
  EXPECT_EQ(f.file_bytes(), bytes.size());
  EXPECT_EQ(f.loading(), WeightLoading::map);
  // A copy into anonymous memory holds the same bytes, and outlives the file.
  const GgufFile copied = GgufFile::open(path, WeightLoading::copy);
  EXPECT_EQ(copied.loading(), WeightLoading::copy);
  ASSERT_EQ(copied.tensors().size(), 2U);
  const auto* ta = f.find_tensor("b");
  const auto* tb = copied.find_tensor("b");
  ASSERT_TRUE(ta != nullptr && tb != nullptr);
  EXPECT_NE(ta->data, tb->data);
  EXPECT_EQ(0, std::memcmp(ta->data, tb->data, ta->bytes));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), 40);
  try {
    (void)GgufFile::open(path);
    FAIL() << "a truncated file opened";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more than the file holds"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
  EXPECT_THROW((void)GgufFile::open(path), UsageError);
}

TEST(Gguf, EveryTruncationIsAUsageError) {
  const auto bytes = sample_file();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    // Cutting inside the final padding leaves tensor b's bytes short, so every prefix is bad.
    EXPECT_THROW((void)GgufFile::parse(std::span(bytes).first(n)), UsageError) << "prefix of " << n << " bytes";
  }
  EXPECT_NO_THROW((void)GgufFile::parse(bytes));
}

// Patches of a valid file: each makes one field hostile.
struct Header {
  std::vector<std::uint8_t> bytes;
  template <class T>
  void put(std::size_t at, T v) { std::memcpy(bytes.data() + at, &v, sizeof v); }
};

std::string parse_error(const std::vector<std::uint8_t>& bytes) {
  try {
    (void)GgufFile::parse(bytes);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Gguf, HostileHeadersAreRefusedWithTheReason) {
  const auto good = sample_file();
  Header h{good};
  h.put<std::uint32_t>(0, 0x12345678);
  EXPECT_NE(parse_error(h.bytes).find("bad magic"), std::string::npos);
  h = {good};
  h.put<std::uint32_t>(4, 1);
  EXPECT_NE(parse_error(h.bytes).find("version 1"), std::string::npos);
  h = {good};
  h.put<std::uint32_t>(4, 0x03000000);
  EXPECT_NE(parse_error(h.bytes).find("big-endian"), std::string::npos);
  h = {good};
  h.put<std::uint64_t>(8, ~0ULL);  // tensor count
  EXPECT_NE(parse_error(h.bytes).find("tensor count"), std::string::npos);
  h = {good};
  h.put<std::uint64_t>(16, 1ULL << 40);  // metadata count
  EXPECT_NE(parse_error(h.bytes).find("metadata count"), std::string::npos);
  h = {good};
  h.put<std::uint64_t>(24, ~0ULL >> 1);  // first key's length
  EXPECT_NE(parse_error(h.bytes).find("metadata key"), std::string::npos);
}

std::vector<std::uint8_t> file_with(const std::function<void(GgufWriter&)>& build) {
  GgufWriter w;
  build(w);
  const std::string path = temp_path("built.gguf");
  w.write(path);
  auto bytes = read_all(path);
  std::filesystem::remove(path);
  return bytes;
}

// Finds `needle` in the bytes (a tensor name, a key) to patch the field after it.
std::size_t find_bytes(const std::vector<std::uint8_t>& hay, std::string_view needle) {
  const auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end());
  EXPECT_NE(it, hay.end());
  return static_cast<std::size_t>(it - hay.begin());
}

TEST(Gguf, HostileTensorInfosAreRefused) {
  const auto good = file_with([](GgufWriter& w) {
    w.add_tensor("tensor_x", GgmlType::f32, {4, 4}, [](std::span<std::uint8_t>) {});
  });
  const std::size_t info = find_bytes(good, "tensor_x") + 8;  // n_dims, dims[2], type, offset
  Header h{good};
  h.put<std::uint32_t>(info, 5);
  EXPECT_NE(parse_error(h.bytes).find("dimensions"), std::string::npos);
  h = {good};
  h.put<std::uint64_t>(info + 4, 1ULL << 62);
  h.put<std::uint64_t>(info + 12, 1ULL << 62);
  EXPECT_NE(parse_error(h.bytes).find("overflows"), std::string::npos);
  h = {good};
  h.put<std::uint64_t>(info + 4, 0);
  EXPECT_NE(parse_error(h.bytes).find("empty dimension"), std::string::npos);
  h = {good};
  h.put<std::uint32_t>(info + 20, 99);
  EXPECT_NE(parse_error(h.bytes).find("unknown ggml type"), std::string::npos);
  h = {good};
  h.put<std::uint32_t>(info + 20, static_cast<std::uint32_t>(GgmlType::q4_0));  // 4 is not a multiple of 32
  EXPECT_NE(parse_error(h.bytes).find("multiple"), std::string::npos);
  h = {good};
  h.put<std::uint64_t>(info + 24, 8);
  EXPECT_NE(parse_error(h.bytes).find("not aligned"), std::string::npos);
  h = {good};
  h.put<std::uint64_t>(info + 24, 1ULL << 40);
  EXPECT_NE(parse_error(h.bytes).find("past the end"), std::string::npos);
  h = {good};
  h.put<std::uint64_t>(info + 24, ~0ULL - 31);  // offset + size wraps around
  EXPECT_NE(parse_error(h.bytes).find("past the end"), std::string::npos);
}

TEST(Gguf, HostileMetadataIsRefused) {
  const auto with_array = file_with([](GgufWriter& w) {
    w.set("arr", GgufValue::make_array(GgufType::u32, {GgufValue::make_u32(1)}));
  });
  const std::size_t at = find_bytes(with_array, "arr") + 3;  // value type, element type, count
  Header h{with_array};
  h.put<std::uint64_t>(at + 8, 1ULL << 61);
  EXPECT_NE(parse_error(h.bytes).find("more than the file holds"), std::string::npos);
  h = {with_array};
  h.put<std::uint32_t>(at + 4, 77);
  EXPECT_NE(parse_error(h.bytes).find("unknown value type"), std::string::npos);
  const auto with_bool = file_with([](GgufWriter& w) { w.set("flag", GgufValue::make_bool(true)); });
  h = {with_bool};
  h.bytes[find_bytes(with_bool, "flag") + 8] = 2;
  EXPECT_NE(parse_error(h.bytes).find("bool"), std::string::npos);
  const auto dup = file_with([](GgufWriter& w) {
    w.set("aa", GgufValue::make_u32(1));
    w.set("ab", GgufValue::make_u32(2));
  });
  h = {dup};
  h.bytes[find_bytes(dup, "ab") + 1] = 'a';
  EXPECT_NE(parse_error(h.bytes).find("twice"), std::string::npos);
  const auto aligned = file_with([](GgufWriter& w) { w.set("general.alignment", GgufValue::make_u32(64)); });
  h = {aligned};
  h.put<std::uint32_t>(find_bytes(aligned, "general.alignment") + 21, 48);
  EXPECT_NE(parse_error(h.bytes).find("power of two"), std::string::npos);
}

TEST(Gguf, WriterHonoursAlignmentAndLeavesNoFileOnFailure) {
  const std::string path = temp_path("aligned.gguf");
  GgufWriter w;
  w.set("general.alignment", GgufValue::make_u32(128));
  w.add_tensor("x", GgmlType::f16, {3}, [](std::span<std::uint8_t>) {});
  w.add_tensor("y", GgmlType::f32, {5}, [](std::span<std::uint8_t>) {});
  w.write(path);
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.alignment(), 128U);
  EXPECT_EQ(f.find_tensor("y")->offset, 128U);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(f.find_tensor("y")->data) % 128, 0U);

  // A failing producer keeps the earlier file intact and leaves no temporary behind.
  GgufWriter bad;
  bad.add_tensor("z", GgmlType::f32, {4}, [](std::span<std::uint8_t>) { throw UsageError("disk on fire"); });
  EXPECT_THROW(bad.write(path), UsageError);
  EXPECT_EQ(GgufFile::open(path).tensors().size(), 2U);
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    if (e.path().filename().string().find("aligned.gguf.tmp") != std::string::npos) ++files;
  }
  EXPECT_EQ(files, 0U);
  std::filesystem::remove(path);
  EXPECT_THROW(w.add_tensor("q", GgmlType::q4_k, {100}, [](std::span<std::uint8_t>) {}), UsageError);
}

}  // namespace
}  // namespace infercast
