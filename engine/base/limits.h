// engine/base/limits.h: the sizes user input (configs, files, Lua arguments) is checked
// against before anything is allocated or any arithmetic can overflow.
#pragma once

#include <cstdint>

namespace eng {

// Elements of one tensor: 2^50 (4 PiB of f32), so byte counts and their sums fit int64.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 50;
// Bytes of one array the runtime allocates (and of the host buffer a trainer fills for it):
// 2^36 (64 GiB), far above any model this CPU engine trains; a config asking for more (e.g.
// vocab_size = 2^30) is refused with the array's name and size instead of std::bad_alloc.
// shape_only trainers allocate nothing and are not limited.
inline constexpr int64_t kMaxArrayBytes = int64_t{1} << 36;
// Devices of one mesh: 2^17, beyond the largest accelerator slices; every per-device table
// (device grids, shards, visualize cells) stays small. 10^18 devices allocated for minutes.
inline constexpr int64_t kMaxDevices = int64_t{1} << 17;
// Steps and data positions: 2^53, exact in a double (Lua numbers, JSON); step + 1 cannot wrap.
inline constexpr int64_t kMaxStep = int64_t{1} << 53;

}  // namespace eng
