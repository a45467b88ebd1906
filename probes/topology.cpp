#include "probes/topology.h"

#include <fmt/format.h>
#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace infercast {
namespace {

std::string read_text(const char* path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// hwloc is loaded once and never freed: binding calls happen from many threads for the life of
// the process, and the topology is read-only after load.
hwloc_topology_t loaded_hwloc() {
  static hwloc_topology_t topology = [] {
    hwloc_topology_t t = nullptr;
    hwloc_topology_init(&t);
    hwloc_topology_load(t);
    return t;
  }();
  return topology;
}

unsigned count_type(hwloc_topology_t t, hwloc_obj_type_t type) {
  const int n = hwloc_get_nbobjs_by_type(t, type);
  return n > 0 ? static_cast<unsigned>(n) : 0U;
}

unsigned count_inside(hwloc_topology_t t, hwloc_obj_t obj, hwloc_obj_type_t type) {
  const int n = hwloc_get_nbobjs_inside_cpuset_by_type(t, obj->cpuset, type);
  return n > 0 ? static_cast<unsigned>(n) : 0U;
}

HugePages read_huge_pages() {
  HugePages h;
  const std::string thp = read_text("/sys/kernel/mm/transparent_hugepage/enabled");
  // The active mode is the bracketed word, e.g. "always [madvise] never".
  const auto open = thp.find('[');
  const auto close = thp.find(']');
  h.transparent_mode = (open != std::string::npos && close != std::string::npos && close > open)
                           ? thp.substr(open + 1, close - open - 1)
                           : "unavailable";
  const std::string meminfo = read_text("/proc/meminfo");
  h.hugetlb_page_bytes = meminfo_value_kib(meminfo, "Hugepagesize") * 1024;
  h.hugetlb_total = meminfo_value_kib(meminfo, "HugePages_Total");
  h.hugetlb_free = meminfo_value_kib(meminfo, "HugePages_Free");
  return h;
}

Topology read_topology() {
  hwloc_topology_t t = loaded_hwloc();
  Topology topo;
  topo.packages = count_type(t, HWLOC_OBJ_PACKAGE);
  topo.numa_nodes = count_type(t, HWLOC_OBJ_NUMANODE);
  topo.cores = count_type(t, HWLOC_OBJ_CORE);
  topo.threads = count_type(t, HWLOC_OBJ_PU);
  if (topo.cores == 0) topo.cores = topo.threads;  // some VMs expose no core objects

  for (int depth = 0; depth < hwloc_topology_get_depth(t); ++depth) {
    const hwloc_obj_type_t type = hwloc_get_depth_type(t, depth);
    if (hwloc_obj_type_is_dcache(type) == 0) continue;
    hwloc_obj_t first = hwloc_get_obj_by_depth(t, depth, 0);
    if (first == nullptr || first->attr == nullptr) continue;
    CacheLevel c;
    c.level = static_cast<int>(first->attr->cache.depth);
    c.type = first->attr->cache.type == HWLOC_OBJ_CACHE_DATA ? "data" : "unified";
    c.size_bytes = first->attr->cache.size;
    c.line_bytes = first->attr->cache.linesize;
    c.instances = static_cast<unsigned>(hwloc_get_nbobjs_by_depth(t, depth));
    c.cores_sharing = count_inside(t, first, HWLOC_OBJ_CORE);
    c.threads_sharing = count_inside(t, first, HWLOC_OBJ_PU);
    if (c.cores_sharing == 0) c.cores_sharing = c.threads_sharing;
    topo.caches.push_back(c);
  }
  std::sort(topo.caches.begin(), topo.caches.end(),
            [](const CacheLevel& a, const CacheLevel& b) { return a.level < b.level; });

  // The kernel's MemTotal, not hwloc's sum of NUMA nodes: some VMs report partial nodes.
  topo.total_memory_bytes = meminfo_value_kib(read_text("/proc/meminfo"), "MemTotal") * 1024;
  if (topo.total_memory_bytes == 0) topo.total_memory_bytes = hwloc_get_root_obj(t)->total_memory;
  topo.available_memory_bytes = available_memory_bytes();
  topo.huge_pages = read_huge_pages();
  return topo;
}

}  // namespace

const CacheLevel* Topology::last_level_cache() const {
  return caches.empty() ? nullptr : &caches.back();
}

std::uint64_t Topology::last_level_cache_bytes() const {
  const CacheLevel* llc = last_level_cache();
  return llc != nullptr ? llc->size_bytes * std::max(1U, llc->instances) : 0;
}

const CacheLevel* Topology::cache(int level) const {
  for (const auto& c : caches) {
    if (c.level == level) return &c;
  }
  return nullptr;
}

const Topology& host_topology() {
  static const Topology topology = read_topology();
  return topology;
}

std::uint64_t meminfo_value_kib(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() ||
        line[key.size()] != ':') {
      continue;
    }
    std::istringstream value(line.substr(key.size() + 1));
    std::uint64_t number = 0;
    value >> number;
    return number;
  }
  return 0;
}

std::uint64_t available_memory_bytes() {
  return meminfo_value_kib(read_text("/proc/meminfo"), "MemAvailable") * 1024;
}

namespace {

// Physical core `core_index` in hwloc order, or its PU where hwloc reports no cores.
hwloc_obj_t core_object(hwloc_topology_t t, unsigned core_index) {
  hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, core_index);
  return core != nullptr ? core : hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, core_index);
}

}  // namespace

bool pin_current_thread_to_core(unsigned core_index) {
  hwloc_topology_t t = loaded_hwloc();
  const hwloc_obj_t core = core_object(t, core_index);
  if (core == nullptr) return false;
  // One PU of the core: binding to the whole core would let the thread hop between siblings.
  hwloc_bitmap_t set = hwloc_bitmap_dup(core->cpuset);
  hwloc_bitmap_singlify(set);
  const int rc = hwloc_set_cpubind(t, set, HWLOC_CPUBIND_THREAD);
  hwloc_bitmap_free(set);
  return rc == 0;
}

int numa_node_of_core(unsigned core_index) {
  const hwloc_obj_t core = core_object(loaded_hwloc(), core_index);
  if (core == nullptr || core->nodeset == nullptr) return -1;
  return hwloc_bitmap_first(core->nodeset);
}

std::string bind_memory_to_node(const void* p, std::size_t bytes, int node) {
  if (bytes == 0) return {};
  if (node < 0) return "no NUMA node given";
  hwloc_topology_t t = loaded_hwloc();
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_bitmap_only(set, static_cast<unsigned>(node));
  errno = 0;
  const int rc = hwloc_set_area_membind(t, p, bytes, set, HWLOC_MEMBIND_BIND,
                                        HWLOC_MEMBIND_MIGRATE | HWLOC_MEMBIND_BYNODESET);
  const int err = errno;
  hwloc_bitmap_free(set);
  if (rc == 0) return {};
  return fmt::format("binding memory to NUMA node {} failed: {}", node, std::strerror(err));
}

}  // namespace infercast
