// engine/compile/executable.h: a compiled program: the (per-device) program plus its memory
// plan, memory analysis and cost analysis. Compilation never touches data, so an
// Executable for llama2-7b on 256 devices is cheap to build and inspect (shape-only).
//
//   CompileOptions opts;
//   Result<std::shared_ptr<const Executable>> exe = compile(program, mesh, opts);
//   fmt::print("{}\n", (*exe)->memory().to_string());   // MaxText's memory line
//
// Memory model (per device; XLA's memory_analysis fields):
//   argument = bytes of every argument (params, optimizer state, step, batch shards)
//   output   = bytes of every output (aliased ones included, as XLA counts them)
//   alias    = bytes of outputs that update an argument in place
//   temp     = the arena: every intermediate value, placed by the liveness-based planner
//   host temp = the values a remat policy offloads (kMoveToHost outputs), planned the same
//              way in the host's memory (XLA's host_temp_size_in_bytes): not in the peak
//   peak     = argument + output + temp - alias
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/compile/spmd.h"
#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"

namespace eng {

// The SPMD fields (SpmdOptions: rules, shard_mode, shard_optimizer_over_data,
// skip_trivial_specs) are inherited; see spmd.h.
struct CompileOptions : SpmdOptions {
  bool verify_plan = true;            // check the memory plan's no-overlap invariant
  // The program is already per-device (local shapes, explicit collectives: the front-end's
  // shard_map, docs/frontend.md): no SPMD partitioning; argument k is placed by its spec.
  bool manual = false;
};

struct MemoryAnalysis {
  int64_t argument_bytes = 0;  // per device (the largest device)
  int64_t output_bytes = 0;
  int64_t alias_bytes = 0;
  int64_t temp_bytes = 0;
  int64_t host_temp_bytes = 0;  // pinned host memory (offloaded values); not in peak_bytes
  int64_t peak_bytes() const { return argument_bytes + output_bytes + temp_bytes - alias_bytes; }
  // MaxText's print_compiled_memory_stats line (GB = bytes / 1024^3).
  std::string to_string() const;
};

struct CostAnalysis {
  double flops = 0;           // per device, per execution
  double bytes_accessed = 0;  // per device: every op's inputs read + outputs written
  // Bytes one device receives per execution, keyed by the collective's mesh axes ("fsdp",
  // "data,fsdp"; spmd.h collective_bytes_received); empty on one device.
  std::map<std::string, double> collective_bytes;
};

// Where a value lives on each device.
struct BufferSlot {
  enum class Kind : uint8_t { kArgument, kOutput, kTemp, kNone } kind = Kind::kNone;
  int index = -1;      // argument index (kArgument) or output index (kOutput)
  int64_t offset = 0;  // byte offset in the arena (kTemp) or in the output region (kOutput)
  int64_t bytes = 0;   // local (per-device) bytes
};

// One temporary of the plan, for Compiled:temps(n).
struct TempInfo {
  ValueId value;
  int64_t bytes;
  int first_instr, last_instr;  // live range, inclusive
  int64_t offset;
  bool host = false;  // in the host region (an offloaded value)
};

class Executable {
 public:
  // Unique per compile() in this process: the runtime keys its prepared arenas on it.
  uint64_t id() const { return id_; }
  const Program& program() const { return program_; }    // the per-device program
  // The global program after sharding assignment (argument specs set); on one device it
  // equals program().
  const Program& global_program() const { return global_; }
  // Where argument k lives (how the caller must place it: Runtime::put(..., sharding)).
  // Non-aliased outputs are replicated; aliased ones have their argument's sharding.
  const NamedSharding& argument_sharding(int k) const { return arg_shardings_[k]; }
  const std::vector<NamedSharding>& argument_shardings() const { return arg_shardings_; }
  const Mesh& mesh() const { return mesh_; }
  const std::vector<BufferSlot>& slots() const { return slots_; }  // indexed by ValueId
  const MemoryAnalysis& memory() const { return memory_; }
  const CostAnalysis& cost() const { return cost_; }
  // What device `device` receives per execution, keyed as cost().collective_bytes (which is
  // the mean over devices): what the runtime's counters show for that device.
  std::map<std::string, double> collective_bytes_received_by(int64_t device) const;
  // What the runtime allocates per device for temps: the device arena, then (from
  // host_region_offset()) the host temps. On this CPU both are process memory; the split is
  // what a TPU's HBM and its host's pinned memory would hold.
  int64_t arena_bytes() const { return host_region_offset() + memory_.host_temp_bytes; }
  int64_t host_region_offset() const;
  int64_t output_region_bytes() const { return output_region_bytes_; }
  // The n largest temporaries, largest first.
  std::vector<TempInfo> largest_temps(int n) const;

 private:
  friend Result<std::shared_ptr<const Executable>> compile(const Program&, const Mesh&,
                                                           const CompileOptions&);
  // serialize.cpp: the persistent compilation cache writes and reads every field below. A
  // new field must be added there too: nothing checks it (tests/train/compile_cache_test.cpp's
  // ExecutableRoundTripsBitwise compares what is written, so it misses a forgotten field).
  friend struct ExecutableCodec;
  uint64_t id_ = 0;
  Program program_;
  Program global_;
  std::vector<NamedSharding> arg_shardings_;
  Mesh mesh_;
  std::vector<BufferSlot> slots_;
  std::vector<TempInfo> temps_;
  MemoryAnalysis memory_;
  CostAnalysis cost_;
  int64_t output_region_bytes_ = 0;  // non-aliased outputs, packed
};

Result<std::shared_ptr<const Executable>> compile(const Program& program, const Mesh& mesh,
                                                  const CompileOptions& options);

// Cost model (cost.cpp) of one instruction and of a whole (per-device) program: matmul
// 2MNK; causal attention 2·B·H·D·T(T+1) forward (QK^T and PV over the causal half) and
// twice that backward; a few flops per element for everything else.
double instr_flops(const Program& p, const Instr& in);
double instr_bytes_accessed(const Program& p, const Instr& in);
CostAnalysis estimate_cost(const Program& p);

}  // namespace eng
