#include "engine/placement.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/thread_pool.h"
#include "probes/topology.h"
#include "probes/units.h"

namespace infercast {
namespace {

// Every matrix one GEMV call reads: the stacked experts of a MoE layer are one call per
// expert (rows [e*R, (e+1)*R)), so each expert's rows are split between the threads.
std::vector<WeightView> gemv_matrices(const Model& model) {
  std::vector<WeightView> out;
  for (const auto& l : model.layers()) {
    for (const WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down, &l.router}) {
      if (w->data != nullptr) out.push_back(*w);
    }
    for (const WeightView* w : {&l.gate_exps, &l.up_exps, &l.down_exps}) {
      if (w->data == nullptr) continue;
      for (int e = 0; e < model.config().experts; ++e) out.push_back(expert_slice(*w, model.config().experts, e));
    }
  }
  out.push_back(model.output());
  return out;
}

}  // namespace

std::vector<PlacementRange> plan_weight_placement(const Model& model, unsigned threads,
                                                  const std::function<int(unsigned)>& node_of_thread) {
  std::vector<PlacementRange> plan;
  for (const WeightView& w : gemv_matrices(model)) {
    const auto* base = static_cast<const std::uint8_t*>(w.data);
    for (unsigned m = 0; m < threads; ++m) {
      // The rows each thread's GEMV takes under the fixed row schedule (the engine switches to
      // it when it binds pages), split in the step the matrix's kernels use.
      const RowRange r = split_rows(w.rows, row_split_step(w), m, threads);
      if (r.begin >= r.end) continue;
      const PlacementRange range{base + r.begin * w.row_bytes, (r.end - r.begin) * w.row_bytes, node_of_thread(m)};
      if (!plan.empty() && plan.back().node == range.node &&
          static_cast<const std::uint8_t*>(plan.back().begin) + plan.back().bytes == range.begin) {
        plan.back().bytes += range.bytes;
      } else {
        plan.push_back(range);
      }
    }
  }
  return plan;
}

NumaPlacement apply_placement(const std::vector<PlacementRange>& plan, std::size_t page_bytes) {
  NumaPlacement result;
  for (const auto& r : plan) {
    const auto begin = reinterpret_cast<std::uintptr_t>(r.begin);
    const std::uintptr_t first = (begin + page_bytes - 1) / page_bytes * page_bytes;
    const std::uintptr_t last = (begin + r.bytes) / page_bytes * page_bytes;
    if (last <= first) continue;
    const std::string why = bind_memory_to_node(reinterpret_cast<const void*>(first), last - first, r.node);
    if (!why.empty()) {
      result.note = why;
      return result;
    }
    result.bytes_bound += last - first;
    result.applied = true;
  }
  return result;
}

NumaPlacement place_weights(const Model& model, unsigned threads) {
  const unsigned nodes = std::max(1U, host_topology().numa_nodes);
  NumaPlacement result;
  if (nodes <= 1) {
    result.note = "one NUMA node: nothing to place";
  } else if (model.file().loading() != WeightLoading::copy) {
    result.note = "weights are memory-mapped from the file: NUMA placement needs --load copy";
  } else {
    // The copy is backed by transparent huge pages where the kernel gave them: bind in 2 MiB
    // steps, so no page is split between two threads' nodes.
    result = apply_placement(plan_weight_placement(model, threads, [](unsigned m) { return numa_node_of_core(m); }),
                             std::size_t{2} << 20);
    if (result.applied && result.note.empty()) {
      result.note = fmt::format("{} of weights bound to the node of the thread that reads them", format_size(result.bytes_bound));
    } else if (!result.applied && result.note.empty()) {
      result.note = "no thread's rows span a whole 2 MiB page: nothing to move";
    }
  }
  result.nodes = nodes;
  return result;
}

GemmContext::RowSchedule row_schedule_for(const NumaPlacement& placement) {
  return placement.applied ? GemmContext::RowSchedule::fixed : GemmContext::RowSchedule::guided;
}

}  // namespace infercast
