// engine/frontend/config.h: jax.config.update for the options shardlab has (sl.config.update;
// sl.config itself is the trainer's configuration). One option so far:
//
//   jax_num_cpu_devices   the number of local simulated devices (sl.devices(); what
//                         SHARDLAB_LOCAL_DEVICES / --local-devices set at start). As JAX's, it
//                         may change only before any device is in use (a Runtime: an array, a
//                         trainer); afterwards setting the value it has is a no-op, any other
//                         value JAX's error.
//
//   ENG_RETURN_IF_ERROR(config_update("jax_num_cpu_devices", ConfigValue{.integer = 8}));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/base/status.h"

namespace eng::frontend {

// The value given: an integer when it is one, and its text for errors ("8", "'eight'", "true").
struct ConfigValue {
  std::optional<int64_t> integer;
  std::string text;
};

// Errors: JAX's "Unrecognized config option: NAME" (naming the options there are); a value of
// the wrong type or range; jax_num_cpu_devices after devices are in use (JAX's text).
Status config_update(std::string_view name, const ConfigValue& value);

}  // namespace eng::frontend
