#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "probes/atomic_file.h"
#include "probes/error.h"

using namespace infercast;
namespace fs = std::filesystem;

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
fs::path fresh_dir() {
  fs::path d = fs::temp_directory_path() / ("infercast-test-" + std::to_string(::getpid()) + "-" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(AtomicFile, WritesAndReplacesLeavingNoTemporaries) {
  const fs::path d = fresh_dir();
  const fs::path f = d / "profile.json";
  write_file_atomically(f, "first");
  EXPECT_EQ(slurp(f), "first");
  write_file_atomically(f, "second");
  EXPECT_EQ(slurp(f), "second");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator{}), 1);
  fs::remove_all(d);
}

TEST(AtomicFile, UnwritableTargetIsAUsageErrorAndKeepsTheOldFile) {
  const fs::path d = fresh_dir();
  EXPECT_THROW(write_file_atomically((d / "missing" / "x.json").string(), "x"), UsageError);
  EXPECT_THROW(check_writable((d / "missing" / "x.json").string()), UsageError);
  EXPECT_THROW(check_writable(d.string()), UsageError);  // a directory
  EXPECT_THROW(check_writable(""), UsageError);
  const fs::path f = d / "keep.json";
  write_file_atomically(f, "old");
  EXPECT_NO_THROW(check_writable(f.string()));
  EXPECT_EQ(slurp(f), "old");  // checking never touches the file
  fs::remove_all(d);
}
