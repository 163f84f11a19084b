// engine/dist/dist.h: the process model (JAX's multi-controller model over MPI) and the one
// transport the runtime's collectives use across processes. Only engine/dist includes mpi.h.
//
//   dist::init(&argc, &argv);                 // main(), before any thread starts
//   const dist::Process& p = dist::process(); // index / count / local devices
//   ENG_ASSIGN_OR_RETURN(auto r, dist::device_range(mesh.num_devices()));  // [lo, hi)
//   std::unique_ptr<dist::Channel> ch = dist::make_channel();   // once, at prepare time
//
// `mpirun -np P shardlab ...` runs the same program in P processes; process p hosts devices
// [p*N/P, (p+1)*N/P) of an N-device mesh. Without mpirun (no launcher in the environment)
// MPI is never initialised and the process is process 0 of 1: a plain run is unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/status.h"

namespace eng::dist {

struct Process {
  int index = 0;          // this process's rank (sl.process_index())
  int count = 1;          // number of processes (sl.process_count())
  int local_devices = 1;  // devices per process by default: --local-devices / SHARDLAB_LOCAL_DEVICES
  bool mpi = false;       // MPI is initialised (launched by mpirun with the MPI build)
};

// True when this binary was built with MPI (CMake option SHARDLAB_MPI).
bool built_with_mpi();

// Initialises the process model once: under an MPI launcher (OMPI_COMM_WORLD_SIZE, PMIX_RANK
// or PMI_SIZE in the environment) calls MPI_Init_thread; else nothing. local_devices <= 0:
// SHARDLAB_LOCAL_DEVICES or 1. Errors: launched by mpirun with several processes but built
// without MPI; a bad local device count; MPI without the thread support the runtime needs.
Status init(int* argc, char*** argv, int local_devices = 0);
// JAX's CPU device count: XLA_FLAGS' --xla_force_host_platform_device_count=N (the last one
// given), or 0 when flags name none. init takes it as the local device count when neither
// --local-devices nor SHARDLAB_LOCAL_DEVICES gives one. Errors: N not in [1, 4096].
Result<int> xla_flags_device_count(std::string_view flags);
// os.environ["XLA_FLAGS"] = ... from Lua (shell/lua_dist.cpp): XLA_FLAGS' count (or 1) becomes
// the local device count, as JAX reads XLA_FLAGS when its backend starts: only before the
// devices were first listed (sl.devices(), sl.local_devices(): note_devices_in_use) or a
// Runtime was made (local_devices.h's devices_in_use, which sl.config.update shares), in one
// process, and when neither --local-devices nor SHARDLAB_LOCAL_DEVICES gave the count; else
// nothing changes (JAX ignores XLA_FLAGS set after its backend started).
Status devices_from_xla_flags();
// MPI_Finalize when init started MPI (a barrier: every process must call it).
void finalize();
// Ends every process of the job at once (MPI_Abort), after printing `why` on stderr. Only for
// a fatal fault (a peer vanished, a collective timed out); without MPI, a no-op.
void abort_job(const std::string& why);
const Process& process();

// This process's devices [lo, hi) of an N-device mesh: an error when N is not a multiple of
// the process count.
struct DeviceRange {
  int64_t lo = 0, hi = 0;
  bool contains(int64_t d) const { return d >= lo && d < hi; }
  int64_t size() const { return hi - lo; }
};
Result<DeviceRange> device_range(int64_t num_devices);
// The process hosting device d of an N-device mesh.
int process_of_device(int64_t device, int64_t num_devices);

// What a process is doing when it exchanges messages: sent ahead of every exchange to each
// peer it exchanges with. Peers doing the same call send equal headers; a difference means the
// processes diverged (a script that makes different calls on different ranks), reported at
// once instead of after SHARDLAB_COLLECTIVE_TIMEOUT.
struct MessageHeader {
  uint64_t program = 0;    // fingerprint of the program whose instruction runs (0: not one)
  int64_t instr = -1;      // its instruction index
  int64_t execution = -1;  // how many times the runtime ran that executable before
  char what[72] = {};      // for the error: "all_gather over fsdp in train_step", "fetch of 'x'"
  // A header for a call outside a program (fetch, a gather of timings): compared by `what`.
  static MessageHeader labelled(std::string_view what);
  bool operator==(const MessageHeader& o) const;
  std::string to_string() const;  // "instruction 17 (all_gather ...), execution 3"
};

// Messages between the processes of the job. Every channel sends on one communicator (a
// duplicate of MPI_COMM_WORLD made by dist::init), so that a process in one
// channel's call and a peer in another's see each other's headers: every process makes the
// same calls in the same order, and a difference is an error naming both. A channel is used by
// one thread at a time; after a divergence every later call fails (the job must restart).
class Channel {
 public:
  virtual ~Channel() = default;
  // Sends `header` to, and receives one from, every process with a non-empty send or recv;
  // posts every send and receive, then waits for all: send[q] goes to process q, recv[q] comes
  // from process q (empty spans: nothing); both sides agree on the sizes. A peer's header that
  // differs is an error naming both processes and both headers. Allocates nothing.
  virtual Status exchange(const MessageHeader& header, std::span<const std::span<const char>> send,
                          std::span<const std::span<char>> recv) = 0;
  // Every process contributes `bytes` bytes; all[q * bytes ...] receives process q's.
  virtual Status all_gather(const MessageHeader& header, const void* mine, int64_t bytes,
                            void* all) = 0;
  // Bytes this process sent and received through the channel since it was made.
  virtual int64_t bytes_sent() const = 0;
  virtual int64_t bytes_received() const = 0;
};

// A channel over every process of the job; nullptr without MPI (one process).
std::unique_ptr<Channel> make_channel();

// Process 0's code and text, delivered to every process (the REPL's lines under mpirun:
// process 0 reads the terminal, every process runs the line). Waiting processes sleep between
// polls, so an idle prompt takes no core. Without MPI or with one process: a no-op.
Status broadcast_from_first(int* code, std::string* text);
// Every process's text, in process order, delivered to every process (the REPL's outcome of
// each line under mpirun: every process learns which others failed, and why). Waiting
// processes sleep between polls. Without MPI or with one process: {mine}.
Status all_gather_text(const std::string& mine, std::vector<std::string>* all);
// all_gather_text at the end of a REPL line or notebook cell, after telling every other
// process "this process finished the line". A process still waiting in a collective of that
// line sees the notice (Channel::exchange looks for one while it waits) and ends the job
// naming the process that made fewer collective calls, instead of waiting for
// SHARDLAB_COLLECTIVE_TIMEOUT (docs/distributed.md).
Status end_line(const std::string& mine, std::vector<std::string>* all);

// The end of the job's script (shell/main.cpp, after the script, the store and every trainer
// are closed): tells every other process how this one ended (`error` "" = fine, else the error
// it reported) and learns how they ended. A process whose script failed waits at most
// kEndGraceSeconds for the others to end too, then ends the job (MPI_Abort) naming the ones
// still running; one that succeeded waits for every other (as MPI_Finalize would) and returns
// an error naming a process that failed. Meanwhile a process waiting in a collective for the
// failed process (Channel::exchange looks for the notice while it waits) fails that call with
// the other's error, within a fraction of a second, so its script ends too, naming it: a Lua
// error on one process ends every process within seconds, not after
// SHARDLAB_COLLECTIVE_TIMEOUT. Without MPI or with one process: ok.
inline constexpr double kEndGraceSeconds = 3.0;
Status end_job(const std::string& error);

}  // namespace eng::dist
