// engine/dist/local_devices.h: the local simulated device count (dist::process().local_devices,
// sl.devices()) as a setting a script may change until devices are in use, as JAX's
// jax.config.update('jax_num_cpu_devices', n) before its backends start
// (engine/frontend/config.h). A narrow header: only the runtime and that setting include it.
#pragma once

#include <cstdint>

#include "engine/base/status.h"

namespace eng::dist {

// Every Runtime's constructor calls it: from then on devices are in use.
void note_devices_in_use();
bool devices_in_use();
// Sets process().local_devices to n in [1, 4096]. Errors: devices in use, n out of range.
Status set_local_devices(int64_t n);

}  // namespace eng::dist
