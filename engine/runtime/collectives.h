// engine/runtime/collectives.h: the Communicator runs one collective instruction (op.h:
// kAllGather, kReduceScatter, kAllReduce, kAllToAll, kCollectivePermute, kDynamicSlice) over
// every member's buffers at once. LocalCommunicator does it for simulated devices in one
// process; an MPI backend (one process per host owning a slice of the devices) would
// implement the same interface.
//
// Guarantees: deterministic (reductions sum in member rank order, so results are bitwise
// reproducible), allocation-free (groups are enumerated arithmetically; outputs are distinct
// buffers planned by the compiler), and byte-counted: bytes each device receives from other
// devices, per collective axes key ("fsdp", "data,fsdp"), equal to
// compile's CostAnalysis::collective_bytes per execution.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"

namespace eng {

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Runs collective `in` of per-device program p. buffers[d]: device d's buffer address per
  // ValueId (inputs and outputs of `in` on every device).
  virtual void run(const Program& p, const Instr& in, std::span<void* const* const> buffers) = 0;
  // Bytes device d received from other devices, per axes key, since the last reset.
  virtual std::map<std::string, double> bytes_received(int device) const = 0;
  virtual void reset_counters() = 0;
};

// Simulated devices in this process: every device of `mesh`.
std::unique_ptr<Communicator> make_local_communicator(const Mesh& mesh);

}  // namespace eng
