#include "probes/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <new>
#include <sstream>
#include <string>
#include <utility>

namespace infercast {
namespace {
constexpr std::size_t kHugePage = 2U << 20;
}

PageBuffer::PageBuffer(std::size_t bytes, bool huge_pages) {
  size_ = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  if (size_ == 0) size_ = kHugePage;
  // Over-map by one huge page so the start can be aligned to 2 MiB: THP only backs aligned
  // ranges.
  const std::size_t mapped = size_ + kHugePage;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto base = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > base) munmap(p, aligned - base);
  const std::uintptr_t end = base + mapped;
  if (end > aligned + size_) munmap(reinterpret_cast<void*>(aligned + size_), end - aligned - size_);
  data_ = reinterpret_cast<std::byte*>(aligned);
  if (huge_pages) madvise(data_, size_, MADV_HUGEPAGE);
}

PageBuffer::~PageBuffer() {
  if (data_ != nullptr) munmap(data_, size_);
}

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PageBuffer::first_touch() {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  volatile std::byte* p = data_;
  for (std::size_t i = 0; i < size_; i += page) p[i] = std::byte{0};
}

bool backed_by_huge_pages(const void* p, std::size_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return false;
  const auto lo = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t hi = lo + bytes;
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2) {  // a mapping header
      inside = start < hi && end > lo;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      std::istringstream value(line.substr(14));
      unsigned long kib = 0;
      value >> kib;
      if (kib > 0) return true;
    }
  }
  return false;
}

}  // namespace infercast
