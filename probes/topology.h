#pragma once
// Machine topology from hwloc: what there is to run on and how the caches are shared. Memory
// availability and huge pages come from the kernel, which hwloc does not track.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace infercast {

struct CacheLevel {
  int level = 0;               // 1, 2, 3, ...
  std::string type;            // "data", "unified" or "instruction"
  std::uint64_t size_bytes = 0;  // one instance
  unsigned line_bytes = 0;
  unsigned instances = 0;      // how many such caches the machine has
  unsigned cores_sharing = 0;  // physical cores that share one instance
  unsigned threads_sharing = 0;  // hardware threads that share one instance
};

struct HugePages {
  std::string transparent_mode;  // "always", "madvise", "never" or "unavailable"
  std::uint64_t hugetlb_page_bytes = 0;
  std::uint64_t hugetlb_total = 0;
  std::uint64_t hugetlb_free = 0;
  [[nodiscard]] bool transparent_usable() const {
    return transparent_mode == "always" || transparent_mode == "madvise";
  }
};

struct Topology {
  unsigned packages = 0;
  unsigned numa_nodes = 0;
  unsigned cores = 0;    // physical cores
  unsigned threads = 0;  // hardware threads (PUs)
  std::vector<CacheLevel> caches;  // data/unified caches, by level
  std::uint64_t total_memory_bytes = 0;
  std::uint64_t available_memory_bytes = 0;
  HugePages huge_pages;

  // Largest data/unified cache level, or nullptr if hwloc found none.
  [[nodiscard]] const CacheLevel* last_level_cache() const;
  // All instances of it together (0 if there is none): what a working set must exceed to leave
  // every cache.
  [[nodiscard]] std::uint64_t last_level_cache_bytes() const;
  [[nodiscard]] const CacheLevel* cache(int level) const;
};

// The host's topology, read once.
const Topology& host_topology();

// Available memory now (MemAvailable), re-read on every call.
std::uint64_t available_memory_bytes();

// Pins the calling thread to one physical core (index in hwloc order, first PU of the core).
// Returns false, leaving the thread unpinned, if the core does not exist or binding fails.
bool pin_current_thread_to_core(unsigned core_index);

// The NUMA node (OS index) whose memory is local to physical core `core_index`, or -1 when
// hwloc does not say.
int numa_node_of_core(unsigned core_index);

// Binds the pages of [p, p + bytes) to NUMA node `node` (OS index), moving those already
// placed. Returns an empty string on success, otherwise why it could not.
std::string bind_memory_to_node(const void* p, std::size_t bytes, int node);

// Parses /proc/meminfo-style text; exposed for tests.
std::uint64_t meminfo_value_kib(const std::string& text, const std::string& key);

}  // namespace infercast
