// engine/base/limits.h: the sizes user input (configs, files, Lua arguments) is checked
// against before anything is allocated or any arithmetic can overflow.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/base/status.h"

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

// Dims of one array: 8 (the runtime's block copies and collectives index with fixed arrays of
// this size). Shapes from users (sl.zeros, reshape, broadcast_to, indexing, traced programs)
// are checked against it; a rank-9 array aborted the process (issue 30).
inline constexpr int kMaxRank = 8;
// OK when rank <= kMaxRank, else "<what>: shape <shape> has <rank> dims, over the limit of 8".
inline Status check_rank(int rank, std::string_view what, std::string_view shape) {
  if (rank <= kMaxRank) return ok_status();
  return invalid_argument("{}: shape {} has {} dims, over the limit of {} dims per array", what,
                          shape, rank, kMaxRank);
}

// Characters of a name a user types (a config key, an option key): did-you-mean compares
// names by edit distance (quadratic in length); a 10^6-character key took 20 s (issue 30).
inline constexpr int64_t kMaxNameLength = 256;

// Cells (iterations x stages) of one pipeline schedule: the engine traces every iteration and
// the grid is drawn cell by cell; sl.pipeline_schedule{stages = 2^20} or {repeats = 1e9} ran
// without end (issue 30). 2^16 is 64 stages x 1024 iterations.
inline constexpr int64_t kMaxPipelineCells = int64_t{1} << 16;

// What this process may still allocate, and where the number comes from. The smallest of:
// MemAvailable (/proc/meminfo; else sysconf's available pages), the cgroup's memory.max minus
// memory.current (cgroup v2; the OOM killer's limit in a container), and RLIMIT_AS minus the
// process's current VmSize. bytes = 0: unknown.
struct AvailableMemory {
  int64_t bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo", "cgroup memory.max", "RLIMIT_AS"
};
AvailableMemory available_memory();

// One contributor to what a trainer will allocate on this host.
struct MemoryItem {
  std::string name;  // "params/token_embedder/embedding", "executable temps"
  int64_t bytes = 0;
};
// OK when the items' total fits `available` (unknown available: OK). Otherwise a
// resource_exhausted error naming `what`, the total, the available and its source, and the
// largest contributors (at most five), e.g. "trainer: llama-tiny on 1 device(s) needs
// 144.0 GiB (154670318748 bytes) of this host's memory in all, but 21.1 GiB (...) is
// available (MemAvailable in /proc/meminfo); largest: executable temps 32.0 GiB,
// params/token_embedder/embedding 16.0 GiB, ...; <hint>".
Status check_memory_budget(std::string_view what, std::span<const MemoryItem> items,
                           const AvailableMemory& available, std::string_view hint);
// "16.0 GiB", "352.0 KiB", "12 B".
std::string format_bytes(int64_t bytes);

}  // namespace eng
