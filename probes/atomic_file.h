#pragma once
// Files are replaced atomically: written to a temporary file beside the target, flushed, then
// renamed over it, so a crash or a full disk never leaves a half-written result and an earlier
// result survives until the new one is complete.
#include <cstddef>
#include <functional>
#include <string>

namespace infercast {

// Throws UsageError if the file cannot be written (missing directory, no permission, disk full).
void write_file_atomically(const std::string& path, const std::string& contents);

// Streams the contents: `produce` is handed a sink and calls it with consecutive pieces (a
// multi-gigabyte model file never has to be in memory). If `produce` throws, the temporary
// file is removed and the target is left as it was.
using ByteSink = std::function<void(const void* data, std::size_t bytes)>;
void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce);

// Throws UsageError unless a file could be created beside `path` (checked before long work).
void check_writable(const std::string& path);

}  // namespace infercast
