// engine/compile/memory_plan.h: the liveness-based planner, a pure function over buffers
// (tested without a backend). Buffers alive at the same time never overlap; buffers whose
// lives do not intersect may share bytes. Offsets are aligned to kAlignment.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/base/status.h"

namespace eng {

constexpr int64_t kAlignment = 64;  // bytes: a cache line, and AVX-512's vector width

struct PlanBuffer {
  int64_t bytes;  // > 0
  int first;      // first instruction that needs it (its producer)
  int last;       // last instruction that reads it (inclusive); >= first
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // one per buffer
  int64_t arena_bytes = 0;       // max over offset + aligned size
};

MemoryPlan plan_memory(const std::vector<PlanBuffer>& buffers);
// Checks the invariant: live-overlapping buffers occupy disjoint byte ranges inside the arena.
Status verify_plan(const std::vector<PlanBuffer>& buffers, const MemoryPlan& plan);

}  // namespace eng
