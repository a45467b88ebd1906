#include "probes/latency.h"
#include "probes/random.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <stdexcept>

#include "probes/thread_team.h"
#include "probes/timer.h"
#include "probes/units.h"

namespace infercast {
namespace {

constexpr std::size_t kLine = 64;

// The streamers' checksums end here, so their reads are observable and cannot be dropped.
std::atomic<std::uint32_t> read_sink{0};

// Times `loads` dependent loads, calibrated to the minimum time; returns ns per load.
double time_chase(const void* start, std::size_t lines, double min_time) {
  // Any stretch of a random cycle is as random as the whole; no need to walk all of it.
  std::uint64_t loads = std::min<std::uint64_t>(std::max<std::size_t>(lines, 1024), 1ULL << 14);
  for (;;) {
    const double t0 = now_seconds();
    chase(start, loads);
    const double t = now_seconds() - t0;
    if (t >= min_time || loads > (1ULL << 34)) return t * 1e9 / static_cast<double>(loads);
    loads = static_cast<std::uint64_t>(static_cast<double>(loads) *
                                       std::min(100.0, 1.1 * min_time / std::max(t, 1e-6)));
  }
}

}  // namespace

void build_chase(void* buffer, std::size_t lines, std::uint64_t seed) {
  if (lines == 0) return;
  // Sattolo's shuffle yields a permutation with exactly one cycle through every element.
  std::vector<std::uint32_t> order(lines);
  for (std::size_t i = 0; i < lines; ++i) order[i] = static_cast<std::uint32_t>(i);
  SeededRng rng(seed);
  for (std::size_t i = lines - 1; i > 0; --i) {
    const std::size_t j = rng.next() % i;
    std::swap(order[i], order[j]);
  }
  auto* base = static_cast<std::byte*>(buffer);
  for (std::size_t i = 0; i < lines; ++i) {
    void* next = base + static_cast<std::size_t>(order[i]) * kLine;
    std::memcpy(base + i * kLine, &next, sizeof next);
  }
}

const void* chase(const void* start, std::uint64_t loads) {
  const void* p = start;
  std::uint64_t remaining = loads;
  // Unrolled so the loop branch is negligible next to the load latency.
  while (remaining >= 8) {
    for (int k = 0; k < 8; ++k) p = *static_cast<const void* const*>(p);
    remaining -= 8;
  }
  while (remaining-- > 0) p = *static_cast<const void* const*>(p);
  __asm__ volatile("" : "+r"(p));
  return p;
}

std::vector<LatencyPoint> run_latency_sweep(const LatencyOptions& options) {
  std::vector<LatencyPoint> points;
  if (options.sizes.empty()) return points;
  const std::uint64_t largest = *std::max_element(options.sizes.begin(), options.sizes.end());
  pin_current_thread_to_core(0);
  PageBuffer buffer(largest);
  buffer.first_touch();
  for (std::size_t k = 0; k < options.sizes.size(); ++k) {
    const std::uint64_t bytes = options.sizes[k];
    if (options.progress) {
      options.progress(fmt::format("latency {}", format_size(bytes)),
                       static_cast<double>(k) / static_cast<double>(options.sizes.size()));
    }
    const std::size_t lines = bytes / kLine;
    if (lines < 2) continue;
    build_chase(buffer.data(), lines, options.seed + k);
    // Check the cycle once: `lines` steps from the start must come back to it.
    if (chase(buffer.data(), lines) != buffer.data()) {
      throw std::runtime_error("latency chase is not a single cycle");
    }
    std::vector<double> ns;
    time_chase(buffer.data(), lines, options.min_time / 4);  // warm-up
    for (int s = 0; s < options.samples; ++s) {
      ns.push_back(time_chase(buffer.data(), lines, options.min_time));
    }
    LatencyPoint p;
    p.bytes = bytes;
    p.ns = median_of(ns);
    p.best_ns = *std::min_element(ns.begin(), ns.end());
    p.huge_pages = backed_by_huge_pages(buffer.data(), bytes);
    points.push_back(p);
  }
  return points;
}

std::vector<LoadedLatencyPoint> run_loaded_latency(const LoadedLatencyOptions& options) {
  std::vector<LoadedLatencyPoint> points;
  if (options.threads < 2 || options.bytes < (1ULL << 20)) return points;
  const StreamKernels& kernels = stream_kernels_for(options.level);
  ThreadTeam team(options.threads);
  std::vector<PageBuffer> buffers(options.threads);
  const std::size_t lines = options.bytes / kLine;
  // Streamers read 1 MiB blocks (long enough for the prefetchers to ramp up), pausing after
  // each, over their own DRAM-sized buffer.
  constexpr std::size_t kBlockElements = (1U << 20) / 4;
  const std::size_t stream_elements = options.bytes / 4 / kBlockElements * kBlockElements;
  team.run([&](unsigned m) {
    buffers[m] = PageBuffer(options.bytes);
    buffers[m].first_touch();
    if (m == 0) {
      build_chase(buffers[0].data(), lines, 0x5eedULL);
    } else {
      std::fill_n(buffers[m].as<std::uint32_t>(), stream_elements, 1U);
    }
  });

  for (double delay_ns : options.delays_ns) {
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> streamed_bytes{0};
    double latency = 0, elapsed = 0;
    team.run([&](unsigned m) {
      if (m == 0) {
        const double t0 = now_seconds();
        std::vector<double> ns;
        while (now_seconds() - t0 < options.seconds_per_point) {
          ns.push_back(time_chase(buffers[0].data(), lines, options.seconds_per_point / 8));
        }
        elapsed = now_seconds() - t0;
        latency = median_of(ns);
        stop = true;
        return;
      }
      const auto* data = buffers[m].as<std::uint32_t>();
      std::uint64_t bytes = 0;
      std::uint32_t local = 0;
      std::size_t offset = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        local += kernels.read(data + offset, kBlockElements, 1, 8);
        bytes += kBlockElements * 4;
        offset = (offset + kBlockElements) % stream_elements;
        if (delay_ns > 0) {
          const double until = now_seconds() + delay_ns * 1e-9;
          while (now_seconds() < until) {
          }
        }
      }
      streamed_bytes += bytes;
      read_sink.fetch_add(local, std::memory_order_relaxed);
    });
    LoadedLatencyPoint p;
    p.delay_ns = delay_ns;
    p.stream_threads = options.threads - 1;
    p.stream_gbs = static_cast<double>(streamed_bytes.load()) / elapsed / 1e9;
    p.latency_ns = latency;
    points.push_back(p);
  }
  return points;
}

}  // namespace infercast
