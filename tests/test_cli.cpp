// The front end's contract with users: bad input gets one line on stderr and exit status 2,
// and never a crash or a half-written file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {
struct Result {
  int status = -1;
  std::string out, err;
};

Result run(const std::string& args) {
  const fs::path err_file = fs::temp_directory_path() / ("infercast-cli-err-" + std::to_string(::getpid()));
  const std::string cmd = std::string(INFERCAST_BINARY) + " " + args + " 2>" + err_file.string();
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) r.out += buf.data();
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err_file);
  std::stringstream s;
  s << in.rdbuf();
  r.err = s.str();
  fs::remove(err_file);
  return r;
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

void expect_usage_error(const std::string& args, const std::string& needle) {
  const Result r = run(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
  EXPECT_EQ(lines(r.err), 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
}
}  // namespace

TEST(Cli, BadOptionsExitWithStatusTwo) {
  expect_usage_error("probe --threads 0 --out ''", "--threads");
  expect_usage_error("probe --threads 100000 --out ''", "--threads");
  expect_usage_error("probe --max-memory 900TiB --out ''", "--max-memory");
  expect_usage_error("probe --max-memory lots --out ''", "--max-memory");
  expect_usage_error("probe --isa sse9 --out ''", "--isa");
  expect_usage_error("probe --bogus", "bogus");
  expect_usage_error("probe --threads abc", "--threads");
  expect_usage_error("", "subcommand");
}

TEST(Cli, UnwritableOutputFailsBeforeProbing) {
  expect_usage_error("probe --quick --out /nonexistent-dir/profile.json", "cannot write");
  expect_usage_error("probe --quick --out /tmp", "cannot write");
}

TEST(Cli, BadEnvironmentIsAUsageError) {
  setenv("INFERCAST_ISA", "bogus", 1);
  const Result r = run("probe --quick --out ''");
  unsetenv("INFERCAST_ISA");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("INFERCAST_ISA"), std::string::npos) << r.err;
}

TEST(Cli, QuickProbeWritesAProfileAtomically) {
  const fs::path out = fs::temp_directory_path() / ("infercast-cli-" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream old(out);
    old << "earlier results";
  }
  // A failing run leaves the earlier file alone.
  EXPECT_EQ(run("probe --threads 0 --out " + out.string()).status, 2);
  {
    std::ifstream in(out);
    std::string text;
    std::getline(in, text);
    EXPECT_EQ(text, "earlier results");
  }
  const Result r = run("probe --quick --max-memory 8MiB --min-time 0.0005 --isa avx2 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("DRAM read"), std::string::npos);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["schema"], "infercast.profile/1");
  EXPECT_EQ(j["summary"]["peak_amx_int8_gops"], nullptr);  // AVX2 cap: no AMX
  fs::remove(out);

  const Result json = run("probe --quick --max-memory 8MiB --min-time 0.0005 --json --out ''");
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["schema"], "infercast.profile/1");
}
