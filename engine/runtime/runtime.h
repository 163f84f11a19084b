// engine/runtime/runtime.h: simulated devices, arrays sharded over them, and execution.
//
//   Runtime rt(mesh);                                    // one Device per mesh device
//   Result<Array> w = rt.put(host_floats, shape, DType::kF32, sharding);  // device_put
//   Status s = rt.execute(*exe, args, outputs);           // runs the Executable in lockstep
//   std::vector<float> host = rt.fetch(outputs[0]);      // gathers shards to the host
//
// Each Device owns only its shards and its arena, and accounts every byte it holds, so
// memory per device is measured, not estimated. A runtime that spans processes (mpirun,
// engine/dist) holds and runs only this process's devices; the others' shards are empty here. A device may have a capacity; going over
// it is an out-of-memory error that lists the largest buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/base/status.h"
#include "engine/compile/executable.h"
#include "engine/mesh/mesh.h"
#include "engine/runtime/collectives.h"
#include "engine/sharding/partition_spec.h"

namespace eng {

class Device;

// A device buffer: bytes owned by one Device's allocator (freed back to it on destruction).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  friend class Device;
  Device* device_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  std::string label_;  // for out-of-memory reports: "params/decoder/.../kernel" or "arena"
};

class Device {
 public:
  Device(int id, int64_t capacity_bytes) : id_(id), capacity_(capacity_bytes) {}
  int id() const { return id_; }
  // Allocates zeroed, kAlignment-aligned bytes; fails with resource_exhausted listing the
  // largest live buffers when capacity (if > 0) would be exceeded. Accounting counts the
  // bytes requested (so it matches the compiler's memory analysis exactly). Called from one
  // thread at a time (the runtime never allocates inside a parallel region).
  Result<DeviceBuffer> allocate(int64_t bytes, std::string label);
  int64_t bytes_in_use() const { return in_use_; }
  int64_t peak_bytes() const { return peak_; }
  int64_t capacity() const { return capacity_; }
  void reset_peak() { peak_ = in_use_; }

 private:
  friend class DeviceBuffer;
  void release(DeviceBuffer& b);
  int id_;
  int64_t capacity_;        // 0 = unlimited
  int64_t in_use_ = 0;      // bytes currently allocated
  int64_t peak_ = 0;        // high-water mark of in_use_
  std::unordered_map<const void*, std::pair<std::string, int64_t>> live_;  // data -> (label, bytes), for OOM reports
};

// A global array: its type and sharding plus one shard per device.
struct Array {
  Shape shape;              // global
  DType dtype = DType::kF32;
  NamedSharding sharding;   // replicated on one device until the mesh issue
  std::vector<DeviceBuffer> shards;  // indexed by device id
  std::string name;
};

// OK when an array of this shape and dtype fits kMaxArrayBytes (engine/base/limits.h);
// otherwise an error naming `what`, its shape, its bytes and the limit. Runtime::zeros and
// put check it; callers that fill a host buffer for an array check it before sizing that.
Status check_array_bytes(const Shape& shape, DType dtype, std::string_view what);

class Runtime {
 public:
  // span_processes: when the job has several processes (dist::process().count > 1), host only
  // this process's devices (dist::device_range; REQUIRES the mesh to split, which the caller
  // checks) and run collectives across processes. Every process constructs it in the same order.
  explicit Runtime(Mesh mesh, int64_t device_capacity_bytes = 0, bool span_processes = false);
  ~Runtime();
  const Mesh& mesh() const { return mesh_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  // The devices this process holds and runs: all of them unless the runtime spans processes.
  dist::DeviceRange local_devices() const { return local_; }
  bool is_local(int device) const { return local_.contains(device); }
  bool spans_processes() const { return fetch_channel_ != nullptr; }
  // Seconds this process has waited for other processes inside collectives, since creation.
  double collective_wait_seconds() const { return comm_->wait_seconds(); }
  // Across processes: every process's `mine` (same length everywhere) into all[q * size + i].
  Status gather_process_values(std::span<const double> mine, std::span<double> all) const;
  Device& device(int i) { return *devices_[i]; }
  // Runs the collectives of executed programs; its counters are the bytes actually moved.
  Communicator& communicator() { return *comm_; }

  // device_put: host data (global, row-major, dtype-sized elements) split per sharding.
  Result<Array> put(const void* host, const Shape& shape, DType dtype, const NamedSharding& sharding,
                    std::string name);
  // An array of zeros with the given sharding (optimizer state, outputs).
  Result<Array> zeros(const Shape& shape, DType dtype, const NamedSharding& sharding, std::string name);
  // Copies shard data back into a global host buffer (bytes = numel * dtype size). Across
  // processes, an array not replicated is gathered: every process must call fetch on it.
  Status fetch(const Array& a, void* host) const;
  // Overwrites an existing array's shards from global host data (same layout as put); no
  // allocation, so a data loader can refill the batch arrays every step.
  Status write(Array& a, const void* host);
  // The rows (indices along dim 0, ascending) of an array of `shape` under `sharding` that
  // this process's devices hold: all of them in one process; under mpirun, what a data loader
  // must produce for this process (engine/train/data.h).
  std::vector<int64_t> local_rows(const Shape& shape, const NamedSharding& sharding) const;
  // write() from host data holding only the rows `rows` of dim 0 (ascending; row k of host is
  // global row rows[k]): they must include local_rows(a). No allocation.
  Status write_rows(Array& a, const void* host, std::span<const int64_t> rows);

  // Prepares per-device arenas (exe.arena_bytes() each) and buffer tables for exe: allocated
  // once, reused by every execute, so a step allocates nothing. Also checks that the mesh
  // matches and that the kernels support every op's dtypes. Idempotent.
  Status prepare(const Executable& exe);
  // Frees what prepare() allocated for exe (no-op if it was never prepared).
  void release(const Executable& exe);
  // Runs exe in lockstep: instruction i on every device (in parallel over devices on the
  // pool when there are several), then i + 1. args: in program argument order; arguments
  // with aliased outputs are updated in place. outputs: the NON-aliased program outputs only,
  // in program order (e.g. the metrics of a train step). They are written directly into
  // outputs[i] (the executable's output region, one buffer per output): created on the first
  // call, then reused when the same vector is passed again, which is what makes a
  // steady-state step allocate nothing. An Array passed as an argument must not be one of
  // `outputs` (swap them between steps instead).
  Status execute(const Executable& exe, std::span<Array* const> args, std::vector<Array>& outputs);

  // Instruction timing, off unless asked (a profile of where step time goes, e.g. the
  // pipeline's bubbles): while on for exe, every execute of exe records the seconds each
  // device spent in each instruction (a collective's wall time is charged to every device)
  // into a table sized here, so a timed step still allocates nothing. Prepares exe.
  Status set_timing(const Executable& exe, bool on);
  // The last timed execute of exe: seconds[device * instrs + i]; empty when none has run.
  // Read it when no execute of exe is in flight.
  std::span<const double> instr_seconds(const Executable& exe);

 private:
  struct Prepared;  // per-executable arenas
  Prepared* find_prepared(const Executable& exe);
  Status make_plans(const Program& p, Prepared& prep);  // bf16 matmul plans (executor.h)
  Status bind(const Executable& exe, std::span<Array* const> args, std::vector<Array>& outputs,
              Prepared& prep);
  Mesh mesh_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::unique_ptr<Prepared>> prepared_;
  std::unique_ptr<Communicator> comm_;
  std::vector<void* const*> tables_;  // per device: buffer table of the running executable
  dist::DeviceRange local_;           // the devices held here: [0, N) in one process
  std::unique_ptr<dist::Channel> fetch_channel_;  // gathers fetched shards across processes
};

}  // namespace eng
