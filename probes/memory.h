#pragma once
// Page-aligned buffers from mmap: large arrays never come from the heap, can ask for
// transparent huge pages, and are first touched by the thread that will use them (so on a
// multi-node machine the pages land on that thread's NUMA node).
#include <cstddef>
#include <cstdint>

namespace infercast {

class PageBuffer {
 public:
  PageBuffer() = default;
  // Maps `bytes` (rounded up to 2 MiB) without touching it. Throws std::bad_alloc on failure.
  explicit PageBuffer(std::size_t bytes, bool huge_pages = true);
  ~PageBuffer();
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  [[nodiscard]] std::byte* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  template <typename T>
  [[nodiscard]] T* as() const { return reinterpret_cast<T*>(data_); }

  // Writes one byte per page from the calling thread so the pages are placed and faulted now.
  void first_touch();

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Whether the kernel backed at least part of [p, p+bytes) with huge pages, from
// /proc/self/smaps; false when that cannot be read.
bool backed_by_huge_pages(const void* p, std::size_t bytes);

}  // namespace infercast
