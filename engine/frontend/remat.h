// engine/frontend/remat.h: jax.remat (jax.checkpoint) with a policy, for users' functions
// traced inside sl.grad: the values a region computes are recomputed in the backward pass
// unless its policy saves them. The region's values carry a remat scope (ValueInfo::
// remat_scope) and the saved ones a checkpoint name; Compiled::create runs engine/ir/remat.h's
// rematerialize over the differentiated program with the policy that saves that name.
//
//   RematRegion r = remat_begin(tr);
//   ... trace f ...
//   ENG_RETURN_IF_ERROR(remat_end(tr, r, results,
//                                 [](std::string_view op) { return op != "all_gather"; }));
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "engine/frontend/trace.h"
#include "engine/ir/remat.h"

namespace eng::frontend {

// The checkpoint name of the values a region's policy saves.
inline constexpr std::string_view kRematSavedName = "remat_saved";

struct RematRegion {
  size_t first_instr = 0;  // the region's first instruction
  int32_t outer = -1;      // the enclosing region's scope (restored at the end)
};

// Opens a region: values traced from now on are in its scope.
RematRegion remat_begin(Trace& tr);
// Closes it: every instruction traced since remat_begin is asked `save(op_name)` (JAX's
// policy(prim, ...): True saves its outputs; no policy saves nothing); the region's results
// are saved (they leave the checkpoint). The scope is restored even when `save` fails.
Status remat_end(Trace& tr, const RematRegion& r, const std::vector<ValueId>& results,
                 const std::function<Result<bool>(std::string_view op)>& save);

// The policy Compiled::create rematerializes with: inside regions, save kRematSavedName.
RematPolicy remat_policy_of_regions();

}  // namespace eng::frontend
