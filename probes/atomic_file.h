#pragma once
// Files are replaced atomically: written to a temporary file beside the target, flushed, then
// renamed over it, so a crash or a full disk never leaves a half-written result and an earlier
// result survives until the new one is complete.
#include <string>

namespace infercast {

// Throws UsageError if the file cannot be written (missing directory, no permission, disk full).
void write_file_atomically(const std::string& path, const std::string& contents);

// Throws UsageError unless a file could be created beside `path` (checked before long work).
void check_writable(const std::string& path);

}  // namespace infercast
