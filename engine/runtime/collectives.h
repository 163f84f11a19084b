// engine/runtime/collectives.h: the Communicator runs one collective instruction (op.h:
// kAllGather, kReduceScatter, kAllReduce, kAllToAll, kCollectivePermute, kDynamicSlice) over
// every member's buffers at once. make_local_communicator does it for simulated devices in
// one process; make_process_communicator for the devices of this process when the mesh spans
// several processes (engine/dist, docs/distributed.md): members in this process exchange in
// memory, the others over the process channel, and every device computes exactly what the
// simulated run computes (same blocks, same summation order), so P processes reproduce the
// one-process run bitwise.
//
// Guarantees: deterministic (reductions sum in member rank order, so results are bitwise
// reproducible), allocation-free (groups are enumerated arithmetically; outputs are distinct
// buffers planned by the compiler), and byte-counted: bytes each device receives from other
// devices, per collective axes key ("fsdp", "data,fsdp"), equal to
// compile's CostAnalysis::collective_bytes per execution (the process communicator counts
// the same quantity for its own devices, whether the bytes came from memory or the network).
// The process communicator sizes its message and staging buffers in prepare(), once per
// executable; run() then allocates nothing and creates no communicator.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/dist/dist.h"
#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"

namespace eng {

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Runs collective `in` of per-device program p. buffers[d]: device d's buffer address per
  // ValueId (inputs and outputs of `in` on every device).
  virtual void run(const Program& p, const Instr& in, std::span<void* const* const> buffers) = 0;
  // Names the execution the next run() calls belong to in the headers of their messages
  // (dist::MessageHeader): the program's fingerprint and how many times it ran before.
  virtual void begin(uint64_t fingerprint, int64_t execution) {}
  // Bytes device d received from other devices, per axes key, since the last reset.
  virtual std::map<std::string, double> bytes_received(int device) const = 0;
  virtual void reset_counters() = 0;
  // Sizes buffers for p's collectives and checks that every process prepares the same program
  // (fingerprints compared; a mismatch names the processes). The local communicator: no-op.
  virtual Status prepare(const Program& p) { return ok_status(); }
  // The first error of a cross-process exchange since the last call (then ok again).
  virtual Status take_error() { return ok_status(); }
  // Seconds spent waiting for other processes inside run() since creation (not reset).
  virtual double wait_seconds() const { return 0; }
};

// Simulated devices in this process: every device of `mesh`.
std::unique_ptr<Communicator> make_local_communicator(const Mesh& mesh);
// The devices `local` of `mesh` in this process; the rest live in the other processes of
// `channel`'s job (process q hosts dist::device_range's block q).
std::unique_ptr<Communicator> make_process_communicator(const Mesh& mesh, dist::DeviceRange local,
                                                        std::unique_ptr<dist::Channel> channel);

}  // namespace eng
