#include "probes/bandwidth.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fmt/format.h>
#include <stdexcept>

#include "probes/memory.h"
#include "probes/thread_team.h"
#include "probes/timer.h"
#include "probes/units.h"

namespace infercast {
namespace {

constexpr std::uint32_t kPatternMultiplier = 2654435761U;  // Knuth's multiplicative hash
constexpr std::size_t kArrayGap = 2112;  // bytes between arrays: avoids 4 KiB aliasing

std::uint32_t pattern(std::size_t i) { return static_cast<std::uint32_t>(i) * kPatternMultiplier; }

// Sum of pattern(i) for i < n, modulo 2^32, in closed form: the read kernel's expected result.
std::uint32_t pattern_sum(std::uint64_t n) {
  const std::uint64_t triangle = n % 2 == 0 ? (n / 2) * (n - 1) : n * ((n - 1) / 2);
  return static_cast<std::uint32_t>(triangle) * kPatternMultiplier;
}

std::size_t array_stride(std::size_t elements) {
  return (elements * 4 + kArrayGap + 63) / 64 * 64;
}

// The arrays one member works on, carved from its own first-touched buffer.
struct MemberArrays {
  std::byte* base = nullptr;
  std::size_t n = 0;
  [[nodiscard]] std::uint32_t* u32(unsigned k) const {
    return reinterpret_cast<std::uint32_t*>(base + k * array_stride(n));
  }
  [[nodiscard]] float* f32(unsigned k) const {
    return reinterpret_cast<float*>(base + k * array_stride(n));
  }
};

constexpr float kTriadScalar = 3.0F;

void prepare(StreamKernel kernel, const MemberArrays& m) {
  const std::size_t n = m.n;
  switch (kernel) {
    case StreamKernel::read:
      for (std::size_t i = 0; i < n; ++i) m.u32(0)[i] = pattern(i);
      break;
    case StreamKernel::write:
    case StreamKernel::write_nt:
      std::fill_n(m.u32(0), n, 0U);
      break;
    case StreamKernel::copy:
      for (std::size_t i = 0; i < n; ++i) m.u32(0)[i] = pattern(i);
      std::fill_n(m.u32(1), n, 0U);
      break;
    case StreamKernel::triad:
      for (std::size_t i = 0; i < n; ++i) {
        m.f32(0)[i] = -1.0F;
        m.f32(1)[i] = static_cast<float>(i % 16);
        m.f32(2)[i] = static_cast<float>(i % 7);
      }
      break;
  }
}

constexpr std::uint32_t kFillValue = 0x5A5A5A5AU;

// Runs the kernel; returns the read checksum (0 for the others).
std::uint32_t execute(const StreamKernels& k, StreamKernel kernel, const MemberArrays& m,
                      std::size_t passes, unsigned streams) {
  switch (kernel) {
    case StreamKernel::read: return k.read(m.u32(0), m.n, passes, streams);
    case StreamKernel::write: k.write(m.u32(0), m.n, kFillValue, passes); return 0;
    case StreamKernel::write_nt: k.write_nt(m.u32(0), m.n, kFillValue, passes); return 0;
    case StreamKernel::copy: k.copy(m.u32(1), m.u32(0), m.n, passes); return 0;
    case StreamKernel::triad:
      k.triad(m.f32(0), m.f32(1), m.f32(2), kTriadScalar, m.n, passes);
      return 0;
  }
  return 0;
}

// Checks the kernel's output as STREAM does, so no work can have been skipped.
bool verify(StreamKernel kernel, const MemberArrays& m, std::uint32_t checksum,
            std::size_t passes) {
  const std::size_t n = m.n;
  switch (kernel) {
    case StreamKernel::read:
      return checksum == static_cast<std::uint32_t>(passes) * pattern_sum(n);
    case StreamKernel::write:
    case StreamKernel::write_nt:
      return std::all_of(m.u32(0), m.u32(0) + n, [](std::uint32_t v) { return v == kFillValue; });
    case StreamKernel::copy:
      for (std::size_t i = 0; i < n; ++i) {
        if (m.u32(1)[i] != pattern(i)) return false;
      }
      return true;
    case StreamKernel::triad:
      for (std::size_t i = 0; i < n; ++i) {
        const float expected = static_cast<float>(i % 16) + kTriadScalar * static_cast<float>(i % 7);
        if (m.f32(0)[i] != expected) return false;
      }
      return true;
  }
  return false;
}

class SweepRunner {
 public:
  SweepRunner(const BandwidthOptions& options, const Topology& topo)
      : options_(options), topo_(topo), kernels_(stream_kernels_for(options.level)) {}

  std::vector<BandwidthPoint> run() {
    const auto sizes = sweep_sizes(options_.min_bytes, options_.max_bytes,
                                   options_.points_per_octave, 4096);
    const unsigned largest = *std::max_element(options_.thread_counts.begin(),
                                               options_.thread_counts.end());
    std::size_t total_steps = 0;
    for (unsigned t : options_.thread_counts) total_steps += plan(sizes, t, largest).size();
    total_steps *= options_.kernels.size();
    std::size_t done = 0;

    std::vector<BandwidthPoint> points;
    for (unsigned threads : options_.thread_counts) {
      ThreadTeam team(threads);
      std::vector<PageBuffer> buffers(threads);
      const std::size_t per_thread = options_.max_bytes / threads + 4 * kArrayGap + 4096;
      team.run([&](unsigned m) {
        buffers[m] = PageBuffer(per_thread);
        buffers[m].first_touch();
      });
      for (std::uint64_t size : plan(sizes, threads, largest)) {
        for (StreamKernel kernel : options_.kernels) {
          if (options_.progress) {
            options_.progress(fmt::format("bandwidth {} {} thread{} {}", contract(kernel).name,
                                          threads, threads > 1 ? "s" : "", format_size(size)),
                              static_cast<double>(done) / static_cast<double>(total_steps));
          }
          ++done;
          if (auto point = measure(team, buffers, kernel, size)) points.push_back(*point);
        }
      }
    }
    return points;
  }

 private:
  std::vector<std::uint64_t> plan(const std::vector<std::uint64_t>& sizes, unsigned threads,
                                  unsigned largest) const {
    const bool full = threads == 1 || threads == largest || options_.sparse_stride <= 1;
    std::vector<std::uint64_t> chosen;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const bool keep = full || (sizes.size() - 1 - i) %
                                        static_cast<std::size_t>(options_.sparse_stride) == 0;
      if (keep) chosen.push_back(sizes[i]);
    }
    return chosen;
  }

  std::optional<BandwidthPoint> measure(ThreadTeam& team, std::vector<PageBuffer>& buffers,
                                        StreamKernel kernel, std::uint64_t size) {
    const StreamContract& c = contract(kernel);
    const unsigned threads = team.size();
    const std::size_t n = size / threads / (c.arrays * 4ULL) / kBandwidthBlock * kBandwidthBlock;
    if (n == 0) return std::nullopt;
    std::vector<MemberArrays> arrays(threads);
    for (unsigned m = 0; m < threads; ++m) arrays[m] = {buffers[m].data(), n};
    const std::uint64_t per_thread = n * c.arrays * 4ULL;
    const unsigned streams = kernel == StreamKernel::read ? read_streams_for(per_thread, topo_) : 1;

    team.run([&](unsigned m) { prepare(kernel, arrays[m]); });

    // Calibrate passes so one sample lasts at least the minimum time.
    std::size_t passes = 1;
    for (;;) {
      const double t = timed_run(team, arrays, kernel, passes, streams, 1).front();
      if (t >= options_.min_time || passes > (1ULL << 40)) break;
      const double scale = options_.min_time / std::max(t, 1e-7);
      passes = static_cast<std::size_t>(std::ceil(static_cast<double>(passes) *
                                                  std::min(scale * 1.05, 100.0)));
    }
    std::vector<double> times = timed_run(team, arrays, kernel, passes, streams,
                                          options_.samples + 1);
    times.erase(times.begin());  // warm-up

    std::atomic<bool> ok{true};
    team.run([&](unsigned m) {
      if (!verify(kernel, arrays[m], checksums_[m], passes)) ok = false;
    });
    if (!ok) {
      throw std::runtime_error(fmt::format("bandwidth kernel '{}' ({}) computed wrong results",
                                           c.name, to_string(kernels_.level)));
    }

    const double bytes = static_cast<double>(bytes_per_pass(kernel, n) * passes * threads);
    std::vector<double> rates;
    for (double t : times) rates.push_back(bytes / t / 1e9);
    BandwidthPoint point;
    point.kernel = std::string(c.name);
    point.threads = threads;
    point.bytes = per_thread * threads;
    point.bytes_per_thread = per_thread;
    point.streams = streams;
    point.passes = passes;
    point.gbs = summarize_rates(rates);
    return point;
  }

  // Runs `samples` timed samples; each is timed from a common start to the slowest finish.
  std::vector<double> timed_run(ThreadTeam& team, const std::vector<MemberArrays>& arrays,
                                StreamKernel kernel, std::size_t passes, unsigned streams,
                                int samples) {
    std::vector<double> times(static_cast<std::size_t>(samples));
    checksums_.assign(team.size(), 0);
    team.run([&](unsigned m) {
      for (int s = 0; s < samples; ++s) {
        team.barrier();
        const double start = m == 0 ? now_seconds() : 0.0;
        checksums_[m] = execute(kernels_, kernel, arrays[m], passes, streams);
        team.barrier();
        if (m == 0) times[static_cast<std::size_t>(s)] = now_seconds() - start;
      }
    });
    return times;
  }

  const BandwidthOptions& options_;
  const Topology& topo_;
  const StreamKernels& kernels_;
  std::vector<std::uint32_t> checksums_;
};

}  // namespace

std::uint64_t bytes_per_pass(StreamKernel kernel, std::uint64_t elements) {
  const StreamContract& c = contract(kernel);
  return elements * (c.bytes_read + c.bytes_written);
}

std::vector<std::uint64_t> sweep_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes,
                                       int per_octave, std::uint64_t granularity) {
  std::vector<std::uint64_t> sizes;
  if (min_bytes == 0 || max_bytes < min_bytes || per_octave < 1 || granularity == 0) return sizes;
  const double octaves = std::log2(static_cast<double>(max_bytes) / static_cast<double>(min_bytes));
  const int steps = static_cast<int>(std::floor(octaves * per_octave + 1e-9));
  for (int i = 0; i <= steps; ++i) {
    const double raw = static_cast<double>(min_bytes) * std::exp2(static_cast<double>(i) / per_octave);
    std::uint64_t size = static_cast<std::uint64_t>(std::llround(raw / static_cast<double>(granularity))) * granularity;
    size = std::clamp(size, granularity, max_bytes);
    if (sizes.empty() || size > sizes.back()) sizes.push_back(size);
  }
  return sizes;
}

unsigned read_streams_for(std::uint64_t bytes_per_thread, const Topology& topo) {
  const CacheLevel* l1 = topo.cache(1);
  const CacheLevel* l2 = topo.cache(2);
  if (l1 != nullptr && bytes_per_thread <= l1->size_bytes) return 1;
  if (l2 != nullptr && bytes_per_thread <= l2->size_bytes) return 4;
  return 8;
}

std::vector<BandwidthPoint> run_bandwidth_sweep(const BandwidthOptions& options,
                                                const Topology& topo) {
  if (options.thread_counts.empty()) return {};
  return SweepRunner(options, topo).run();
}

std::uint64_t dram_working_set(const Topology& topo, std::uint64_t cache_multiple) {
  const std::uint64_t wanted = std::max(kDramFloorBytes, cache_multiple * topo.last_level_cache_bytes());
  return std::min(wanted, std::max(kDramLeastBytes, topo.available_memory_bytes / 4));
}

std::uint64_t dram_buffer_bytes(const Topology& topo) { return dram_working_set(topo, 2); }

double measure_dram_read_gbs(unsigned threads, IsaLevel level, std::uint64_t bytes) {
  BandwidthOptions o;
  o.thread_counts = {threads};
  o.kernels = {StreamKernel::read};
  if (bytes == 0) bytes = dram_buffer_bytes(host_topology());
  o.min_bytes = o.max_bytes = bytes;
  o.min_time = 0.05;
  o.samples = 5;
  o.level = level;
  return run_bandwidth_sweep(o, host_topology()).front().gbs.median;
}

}  // namespace infercast
