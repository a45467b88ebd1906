#pragma once
// Rewrites one tensor's ggml type in a GGUF file in place, for tests of types infercast has no
// kernels for (which its writer cannot fill). Only for a type whose data is no larger than the
// old one's: the offsets stay, so the file stays readable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace infercast {

// `tensor` must be 2-D: after its name come the dimension count (u32), two dimensions (u64 each)
// and the type (u32).
inline void set_tensor_type(const std::string& path, const std::string& tensor, std::uint32_t type) {
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(io)), std::istreambuf_iterator<char>());
  const auto at = std::search(bytes.begin(), bytes.end(), tensor.begin(), tensor.end());
  ASSERT_NE(at, bytes.end()) << tensor;
  io.clear();
  io.seekp(static_cast<std::streamoff>(at - bytes.begin()) + static_cast<std::streamoff>(tensor.size()) + 4 + 16);
  io.write(reinterpret_cast<const char*>(&type), sizeof type);
  ASSERT_TRUE(io.good());
}

}  // namespace infercast
