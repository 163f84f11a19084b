// engine/frontend/manual.h: jax.lax collectives for sl.shard_map bodies (manual mode) beyond
// those in numpy.h: all_to_all, as the engine's per-device kAllToAll (engine/ir/op.h), and
// pmean.
//
//   ENG_ASSIGN_OR_RETURN(ValueId y, manual::all_to_all(tr, x, {"X"}, 0, 1, /*tiled=*/true));
#pragma once

#include <string>
#include <vector>

#include "engine/frontend/trace.h"

namespace eng::frontend::manual {

// jax.lax.all_to_all over the group `axes` (G members, ranked major to minor): member m's
// chunk r along split_axis goes to member r, which puts it at position m along concat_axis.
// tiled: split_axis is divided by G and concat_axis multiplied by G (the shape's rank stays).
// Untiled (JAX's default): x.shape[split_axis] must be G; that axis is removed and a new axis
// of size G (the senders) appears at concat_axis of the result. Axes may be negative.
Result<ValueId> all_to_all(Trace& tr, ValueId x, const std::vector<std::string>& axes,
                           int split_axis, int concat_axis, bool tiled);

// jax.lax.pmean: psum over `axes` divided by the group size (float32).
Result<ValueId> pmean(Trace& tr, ValueId x, const std::vector<std::string>& axes);

}  // namespace eng::frontend::manual
