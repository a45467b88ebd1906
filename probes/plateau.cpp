#include "probes/plateau.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "probes/stats.h"

namespace infercast {

std::vector<Plateau> find_plateaus(const std::vector<SweepSample>& sweep, double tolerance,
                                   int min_samples) {
  std::vector<Plateau> plateaus;
  std::size_t start = 0;
  while (start < sweep.size()) {
    // Grow the run while every sample stays close to the run's median.
    std::size_t end = start + 1;
    std::vector<double> values{sweep[start].value};
    while (end < sweep.size()) {
      std::vector<double> trial = values;
      trial.push_back(sweep[end].value);
      const double median = median_of(trial);
      const bool close = std::all_of(trial.begin(), trial.end(), [&](double v) {
        return std::abs(v - median) <= tolerance * std::abs(median);
      });
      if (!close) break;
      values = std::move(trial);
      ++end;
    }
    if (static_cast<int>(values.size()) >= min_samples) {
      Plateau p;
      p.from_bytes = sweep[start].bytes_per_thread;
      p.to_bytes = sweep[end - 1].bytes_per_thread;
      p.value = median_of(values);
      p.samples = static_cast<int>(values.size());
      plateaus.push_back(p);
    }
    start = end;
  }
  return plateaus;
}

std::vector<Plateau> label_plateaus(std::vector<Plateau> plateaus, const Topology& topo,
                                    unsigned threads) {
  threads = std::max(threads, 1U);
  // Capacity of each level available to one thread when `threads` threads share the machine.
  std::vector<std::pair<std::string, double>> levels;
  for (const CacheLevel& c : topo.caches) {
    const double sharers = std::min<double>(std::max(c.cores_sharing, 1U), threads);
    const double share = static_cast<double>(c.size_bytes) /
                         (c.cores_sharing > 1 ? sharers : 1.0);
    levels.emplace_back(fmt::format("L{}", c.level), share);
  }
  std::map<std::string, Plateau> best;
  std::vector<std::string> order;
  for (Plateau& p : plateaus) {
    p.level = "DRAM";
    for (const auto& [name, capacity] : levels) {
      if (static_cast<double>(p.to_bytes) <= capacity) {
        p.level = name;
        break;
      }
    }
    auto it = best.find(p.level);
    if (it == best.end()) {
      order.push_back(p.level);
      best[p.level] = p;
    } else if (p.samples > it->second.samples) {
      it->second = p;
    }
  }
  std::vector<Plateau> labelled;
  for (const auto& name : order) labelled.push_back(best[name]);
  return labelled;
}

}  // namespace infercast
