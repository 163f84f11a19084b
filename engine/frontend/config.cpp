// engine/frontend/config.cpp: jax.config.update's options (config.h).
#include "engine/frontend/config.h"

#include "engine/dist/dist.h"
#include "engine/dist/local_devices.h"

namespace eng::frontend {

Status config_update(std::string_view name, const ConfigValue& value) {
  if (name != "jax_num_cpu_devices")
    return invalid_argument(
        "Unrecognized config option: {} (shardlab's jax.config has jax_num_cpu_devices)", name);
  if (!value.integer)
    return invalid_argument("{} expects an integer device count, got {}", name, value.text);
  const int64_t n = *value.integer;
  if (dist::devices_in_use()) {
    if (n == dist::process().local_devices) return ok_status();  // as JAX's: the same value
    return failed_precondition(
        "{} config should be updated before backends are initialized i.e. before any JAX "
        "operation is executed. You should initialize this config immediately after `import "
        "jax`. (shardlab: devices are in use; it has {} local devices)",
        name, dist::process().local_devices);
  }
  Status s = dist::set_local_devices(n);
  if (!s.ok()) return invalid_argument("{}: {}", name, s.message());
  return ok_status();
}

}  // namespace eng::frontend
