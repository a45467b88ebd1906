#pragma once
// NUMA placement of the weights: on a machine with more than one memory node, the rows each
// thread reads in a decode step (the GEMV split of every matrix) are moved to that thread's
// node, so every core streams from local memory. One node, or weights left memory-mapped from
// the file, and nothing is moved; the result says which case applied.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/model.h"
#include "kernels/gemm.h"

namespace infercast {

struct PlacementRange {
  const void* begin = nullptr;
  std::size_t bytes = 0;
  int node = -1;
};

// Per matrix of the model and per thread, the bytes of that thread's GEMV rows and the node it
// runs on (`node_of_thread(m)` for thread m, pinned to core m by the thread team); adjacent
// ranges on one node are merged.
std::vector<PlacementRange> plan_weight_placement(const Model& model, unsigned threads,
                                                  const std::function<int(unsigned)>& node_of_thread);

struct NumaPlacement {
  unsigned nodes = 1;             // memory nodes of the machine
  bool applied = false;           // whether pages were bound
  std::uint64_t bytes_bound = 0;  // whole pages bound to their thread's node
  std::string note;               // what was done, or why nothing was
};

// Binds the whole pages inside each range (a page two ranges share stays where it is).
NumaPlacement apply_placement(const std::vector<PlacementRange>& plan, std::size_t page_bytes);

// Decides and applies for this machine (each Engine does, for its threads): plans and binds
// when it has several NUMA nodes and the weights were copied into anonymous memory.
NumaPlacement place_weights(const Model& model, unsigned threads);

// The row schedule GEMM calls must keep for a placement: the fixed split wherever pages were
// bound to the node of the thread the split gives their rows to; guided elsewhere.
GemmContext::RowSchedule row_schedule_for(const NumaPlacement& placement);

}  // namespace infercast
