// engine/train/state_memory.h: what a trainer will allocate on this host, checked against the
// memory this process may still allocate before anything is allocated: a clear error naming
// the total, the available and the largest contributors instead of an OOM kill (issue 16).
//
//   ENG_RETURN_IF_ERROR(check_trainer_memory(trainer));   // in Trainer::create, before init
//
// The simulated devices of a mesh share this host's memory, so every per-device number counts
// once per device.
#pragma once

#include <vector>

#include "engine/base/limits.h"
#include "engine/train/trainer.h"

namespace eng {

// The items: every state and batch array on every device (local shapes from the per-device
// program x devices), the executable's temporaries and non-aliased outputs on every device
// (its memory plan), the host buffer that initialises the largest parameter and the host
// batches staged for in-flight steps. Compiles the train step once, outside every cache
// (nothing is recorded). Each array is first checked against kMaxArrayBytes.
Result<std::vector<MemoryItem>> trainer_memory_items(Trainer& t);
// trainer_memory_items against available_memory().
Status check_trainer_memory(Trainer& t);

}  // namespace eng
