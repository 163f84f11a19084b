// engine/base/hash.h: hash combining for value types (Shape, PartitionSpec, CacheKey, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

namespace eng {

inline uint64_t hash_mix(uint64_t seed, uint64_t v) {
  // splitmix64-style mixing, then combine (boost::hash_combine's constant).
  v += 0x9e3779b97f4a7c15ULL;
  v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ULL;
  v = (v ^ (v >> 27)) * 0x94d049bb133111ebULL;
  v ^= v >> 31;
  return seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

inline uint64_t hash_bytes(std::string_view s, uint64_t seed = 0xcbf29ce484222325ULL) {
  uint64_t h = seed;  // FNV-1a, then mixed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return hash_mix(0, h);
}

}  // namespace eng
