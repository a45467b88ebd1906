#pragma once
// A grow-only, 64-byte aligned byte buffer for scratch space that kernels load with aligned
// vector and tile instructions.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace infercast {

class AlignedBuffer {
 public:
  std::uint8_t* reserve(std::size_t bytes) {
    if (bytes > capacity_) {
      const std::size_t rounded = (bytes + 63) / 64 * 64;
      void* p = std::aligned_alloc(64, rounded);
      if (p == nullptr) throw std::bad_alloc();
      data_.reset(static_cast<std::uint8_t*>(p));
      capacity_ = rounded;
    }
    return data_.get();
  }
  [[nodiscard]] std::uint8_t* data() const { return data_.get(); }
  [[nodiscard]] std::size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<std::uint8_t, Free> data_;
  std::size_t capacity_ = 0;
};

}  // namespace infercast
