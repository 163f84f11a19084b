// engine/compile/serialize.h: a versioned binary encoding of an Executable (its per-device and
// global programs, argument shardings, buffer slots, temporaries, memory and cost analysis):
// the payload of a persistent compilation cache entry (cache.h adds the header and checksum).
//
//   std::string bytes = serialize_executable(*exe);
//   Result<std::shared_ptr<const Executable>> back = deserialize_executable(bytes);
//
// Decoding never trusts the bytes: every count is bounded by the bytes left, every enum and
// value id is range-checked, and the decoded buffer slots are checked against the memory
// analysis, so a damaged payload is a data_loss Status, not a crash or a wrong execution.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "engine/base/status.h"
#include "engine/compile/executable.h"

namespace eng {

// Bump when the encoding changes: an entry of another version is a cache miss.
constexpr uint32_t kExecutableFormatVersion = 5;  // 2: pipeline attrs (vmap, slice, reshape);
                                                  // 3: ValueInfo::pipeline_iteration
                                                  // 4: kRope's interleave / llama31_scale
                                                  // 5: host temps (kMoveToHost), TempInfo::host

std::string serialize_program(const Program& p);
Result<Program> deserialize_program(std::string_view bytes);

std::string serialize_executable(const Executable& exe);
// The decoded Executable gets a fresh id() (the runtime keys its arenas on it).
Result<std::shared_ptr<const Executable>> deserialize_executable(std::string_view bytes);

// 64-bit digest of bytes (FNV-1a over 8 lanes, then mixed): the entry checksum.
uint64_t digest64(std::string_view bytes, uint64_t seed = 0);

}  // namespace eng
