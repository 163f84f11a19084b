// engine/frontend/creation.h: the host values of new arrays (sl.arange, np.linspace, np.eye,
// sl.random; docs/frontend.md) and one device's shard as its own array
// (x:addressable_shards()). Values are doubles, row-major; device_put places them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/frontend/trace.h"

namespace eng::frontend {

// jnp.arange's values: start, start + step, ... below stop (above, for a negative step).
// Errors (prefixed with fn): a zero or non-finite step or bound, more than kMaxHostValues.
Result<std::vector<double>> arange_values(double start, double stop, double step,
                                          std::string_view fn);
// np.linspace's num values from start to stop (the last exactly stop when endpoint).
std::vector<double> linspace_values(double start, double stop, int64_t num, bool endpoint);

// A counter-based random key (sl.random.key): value i of a fill depends only on the key and
// i, not on the sharding. Not JAX's threefry bits.
struct PrngKey {
  uint64_t seed = 0;
};
PrngKey prng_key(int64_t seed);
// num new independent keys (jax.random.split); num in 1..2^20, else an error naming fn.
Result<std::vector<PrngKey>> prng_split(PrngKey key, int64_t num, std::string_view fn);
// n values uniform in (0, 1), or standard normal (Box-Muller over the uniform pairs).
std::vector<double> random_values(PrngKey key, int64_t n, bool normal);

// Device d's block of `a` as a one-device array (its own bytes, not a gather).
Result<ArrayRef> shard_block(const DeviceArray& a, int64_t device);

}  // namespace eng::frontend
