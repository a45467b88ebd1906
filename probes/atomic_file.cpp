#include "probes/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "probes/error.h"

namespace infercast {
namespace {

[[noreturn]] void fail(const std::string& path, const char* what) {
  throw UsageError("cannot write '" + path + "': " + what);
}

// A new, empty file beside `path` (same directory, so the rename stays on one file system),
// open for writing; its name is in `name`.
int open_temporary(const std::string& path, std::vector<char>& name) {
  if (std::filesystem::is_directory(path)) fail(path, "it is a directory");
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  const std::string tmpl = (dir / ("." + p.filename().string() + ".tmp.XXXXXX")).string();
  name.assign(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) fail(path, std::strerror(errno));
  return fd;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& contents) {
  write_file_atomically(path, [&](const ByteSink& sink) { sink(contents.data(), contents.size()); });
}

void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  std::vector<char> name;
  const int fd = open_temporary(path, name);
  const ByteSink sink = [&](const void* data, std::size_t bytes) {
    const auto* p = static_cast<const char*>(data);
    std::size_t written = 0;
    while (written < bytes) {
      const ssize_t n = write(fd, p + written, bytes - written);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(path, std::strerror(errno));  // the handler below removes the temporary file
      }
      written += static_cast<std::size_t>(n);
    }
  };
  try {
    produce(sink);
  } catch (...) {
    close(fd);
    unlink(name.data());
    throw;
  }
  fchmod(fd, 0644);
  if (fsync(fd) != 0 || close(fd) != 0) {
    const int err = errno;
    unlink(name.data());
    fail(path, std::strerror(err));
  }
  if (std::rename(name.data(), path.c_str()) != 0) {
    const int err = errno;
    unlink(name.data());
    fail(path, std::strerror(err));
  }
}

void check_writable(const std::string& path) {
  if (path.empty()) throw UsageError("output path is empty");
  std::vector<char> name;
  close(open_temporary(path, name));
  unlink(name.data());
}

}  // namespace infercast
