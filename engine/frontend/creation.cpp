// engine/frontend/creation.cpp: arange / linspace values, the counter-based PRNG, one shard.
#include "engine/frontend/creation.h"

#include <cmath>

namespace eng::frontend {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a bijection with good avalanche
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double uniform01(uint64_t key, uint64_t counter) {  // in (0, 1)
  return (static_cast<double>(mix(key ^ mix(counter)) >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

Result<std::vector<double>> arange_values(double start, double stop, double step,
                                          std::string_view fn) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    return invalid_argument("{}: step must be finite and nonzero", fn);
  const double count = std::max(0.0, std::ceil((stop - start) / step));
  if (count > static_cast<double>(kMaxHostValues))
    return invalid_argument("{}: {} elements is too many", fn, count);
  std::vector<double> v(static_cast<size_t>(count));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i) * step;
  return v;
}

std::vector<double> linspace_values(double start, double stop, int64_t num, bool endpoint) {
  std::vector<double> v(static_cast<size_t>(num));
  const double div = static_cast<double>(endpoint ? num - 1 : num);
  const double step = div > 0 ? (stop - start) / div : 0;
  for (int64_t i = 0; i < num; ++i) v[i] = start + static_cast<double>(i) * step;
  if (endpoint && num > 1) v.back() = stop;
  return v;
}

PrngKey prng_key(int64_t seed) { return PrngKey{mix(static_cast<uint64_t>(seed))}; }

Result<std::vector<PrngKey>> prng_split(PrngKey key, int64_t num, std::string_view fn) {
  if (num < 1 || num > 1 << 20)
    return invalid_argument("{}: num must be in 1..2^20, got {}", fn, num);
  std::vector<PrngKey> keys;
  for (int64_t i = 0; i < num; ++i)
    keys.push_back(PrngKey{mix(key.seed ^ mix(0x5eedull + static_cast<uint64_t>(i)))});
  return keys;
}

std::vector<double> random_values(PrngKey key, int64_t n, bool normal) {
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    const double u1 = uniform01(key.seed, 2 * i), u2 = uniform01(key.seed, 2 * i + 1);
    v[i] = normal ? std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2) : u1;
  }
  return v;
}

Result<ArrayRef> shard_block(const DeviceArray& a, int64_t device) {
  const Array& arr = a.array;
  const Shape local = arr.sharding.local_shape(arr.shape);
  const DeviceBuffer& buf = arr.shards[static_cast<size_t>(device)];
  std::vector<double> v(static_cast<size_t>(local.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (arr.dtype) {
      case DType::kF32:
        v[i] = static_cast<const float*>(buf.data())[i];
        break;
      case DType::kBF16:
        v[i] = bf16_to_f32(static_cast<const uint16_t*>(buf.data())[i]);
        break;
      case DType::kI32:
        v[i] = static_cast<const int32_t*>(buf.data())[i];
        break;
    }
  }
  return device_put(v, local, arr.dtype, {Mesh(), PartitionSpec()});
}

}  // namespace eng::frontend
