// engine/runtime/runtime.cpp: simulated devices with byte accounting, sharded placement
// (device_put / fetch by slicing blocks), and lockstep execution of an Executable.
#include "engine/runtime/runtime.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/base/clock.h"
#include "engine/base/limits.h"
#include "engine/base/thread_pool.h"
#include "engine/compile/memory_plan.h"
#include "engine/dist/local_devices.h"
#include "engine/ir/op_table.h"
#include "engine/runtime/executor.h"
#include "engine/sharding/shard_geometry.h"
#include "engine/tensor/kernels.h"

namespace eng {

namespace {

std::string human_bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / 1073741824.0);
  if (b >= (int64_t{1} << 20)) return fmt::format("{:.2f} MiB", b / 1048576.0);
  if (b >= 1024) return fmt::format("{:.2f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

// Device d's block of a global array: its local shape and the global index of its first
// element per dim (NamedSharding::local_shape / local_offset, computed without allocating
// so that write() can run every step).
struct Block {
  int rank = 0;
  int64_t local[kMaxRank];
  int64_t offset[kMaxRank];
};

Block block_of(const NamedSharding& s, const Shape& global, int64_t device) {
  Block b;
  b.rank = global.rank();
  ENG_CHECK(b.rank <= kMaxRank, "runtime: rank {} above {}", b.rank, kMaxRank);
  for (int i = 0; i < b.rank; ++i) {
    std::span<const std::string> axes;  // major to minor; none past the spec's rank
    if (i < s.spec.rank()) axes = s.spec.dim(i);
    const ShardBlock blk = shard_block(s.mesh, axes, global[i], device);
    b.local[i] = blk.size;
    b.offset[i] = blk.offset;
  }
  return b;
}

// Copies device block `b` between the global row-major array and its local buffer;
// contiguous runs along the last dim are memcpy'd. gshape[0] is never read (only the offsets
// along dim 0 are), so `global` may hold some rows of dim 0 with b.offset[0] indexing them.
void copy_block(void* global, const Shape& gshape, const Block& b, void* local, int64_t elem,
                bool to_global) {
  const int rank = b.rank;
  if (rank == 0) {
    std::memcpy(to_global ? global : local, to_global ? local : global, elem);
    return;
  }
  int64_t rows = 1;
  for (int d = 0; d < rank - 1; ++d) rows *= b.local[d];
  const int64_t run = b.local[rank - 1] * elem;
  if (run == 0) return;
  int64_t idx[kMaxRank] = {};  // index within the block; the last dim stays 0
  for (int64_t r = 0; r < rows; ++r) {
    int64_t g = 0;
    for (int d = 0; d < rank; ++d) g = g * gshape[d] + b.offset[d] + idx[d];
    char* gp = static_cast<char*>(global) + g * elem;
    char* lp = static_cast<char*>(local) + r * run;
    std::memcpy(to_global ? gp : lp, to_global ? lp : gp, run);
    for (int d = rank - 2; d >= 0; --d) {
      if (++idx[d] < b.local[d]) break;
      idx[d] = 0;
    }
  }
}

Status check_placeable(const Mesh& mesh, const Shape& shape, const NamedSharding& sharding,
                       std::string_view what) {
  if (!(sharding.mesh == mesh))
    return invalid_argument("{}: sharding's mesh {} is not the runtime's mesh {}", what,
                            sharding.mesh.to_string(), mesh.to_string());
  ENG_RETURN_IF_ERROR(sharding.validate(shape));
  if (!sharding.spec.partial().empty())
    return invalid_argument("{}: cannot place a partial (unreduced) sharding {}", what,
                            sharding.spec.to_string());
  return ok_status();
}

Status scratch_exhausted(const std::string& program) {
  return resource_exhausted("execute {}: out of memory reserving the kernels' scratch (this "
                            "host's memory or ulimit -v is exhausted); nothing ran",
                            program);
}

// A cheap per-step check of an array made by put/zeros (whose sharding was validated then).
Status check_array(const Mesh& mesh, int num_devices, const Array& a, const char* what) {
  if (!(a.sharding.mesh == mesh) || static_cast<int>(a.shards.size()) != num_devices)
    return invalid_argument("{} {}: array on {} with {} shards, the runtime has {} ({} devices)",
                            what, a.name, a.sharding.mesh.to_string(), a.shards.size(),
                            mesh.to_string(), num_devices);
  return ok_status();
}

// Local (per-device) numel of `a` under its sharding, computed without allocating.
int64_t local_numel(const Array& a) {
  return eng::local_numel(a.sharding.mesh, a.sharding.spec, a.shape);
}

}  // namespace

// ---- DeviceBuffer and Device ----------------------------------------------------------------

DeviceBuffer::~DeviceBuffer() {
  if (device_) device_->release(*this);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : device_(o.device_), data_(o.data_), bytes_(o.bytes_), label_(std::move(o.label_)) {
  o.device_ = nullptr;
  o.data_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (device_) device_->release(*this);
    device_ = o.device_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    label_ = std::move(o.label_);
    o.device_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Result<DeviceBuffer> Device::allocate(int64_t bytes, std::string label) {
  ENG_CHECK(bytes >= 0, "device {}: negative allocation {} for {}", id_, bytes, label);
  if (capacity_ > 0 && in_use_ + bytes > capacity_) {
    std::vector<std::pair<int64_t, const std::string*>> live;
    for (const auto& [ptr, entry] : live_) live.push_back({entry.second, &entry.first});
    std::sort(live.begin(), live.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::string largest;
    for (size_t i = 0; i < live.size() && i < 5; ++i)
      largest += fmt::format("\n  {} {}", human_bytes(live[i].first), *live[i].second);
    return resource_exhausted(
        "device {}: out of memory allocating {} for '{}': {} of {} in use; largest live "
        "buffers:{}",
        id_, human_bytes(bytes), label, human_bytes(in_use_), human_bytes(capacity_),
        largest.empty() ? " none" : largest);
  }
  DeviceBuffer b;
  if (bytes > 0) {
    const int64_t padded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, padded);
    if (!p)
      return resource_exhausted("device {}: host out of memory allocating {} for '{}'", id_,
                                human_bytes(bytes), label);
    std::memset(p, 0, padded);
    b.data_ = p;
    live_[p] = {label, bytes};
  }
  b.device_ = this;
  b.bytes_ = bytes;
  b.label_ = std::move(label);
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return b;
}

void Device::release(DeviceBuffer& b) {
  in_use_ -= b.bytes_;
  if (b.data_) {
    live_.erase(b.data_);
    std::free(b.data_);
  }
  b.device_ = nullptr;
  b.data_ = nullptr;
  b.bytes_ = 0;
}

// ---- Runtime: placement --------------------------------------------------------------------

struct Runtime::Prepared {
  uint64_t exe_id = 0;
  std::vector<int> ordinal;               // per program output: index into `outputs`, or -1
  int num_outputs = 0;                    // non-aliased program outputs
  std::vector<DeviceBuffer> arenas;       // per device: exe.arena_bytes()
  std::vector<DeviceBuffer> widen;        // per device: f32 copies of bf16 operands (executor.h)
  // Per instruction: a bf16 matmul's plan, shared by every device (reentrant: every backend's
  // buffers are per thread); else null.
  std::vector<std::unique_ptr<kern::Bf16MatmulPlan>> plans;
  std::vector<InstrPath> paths;           // per instruction: how run_instr runs it (executor.h)
  std::vector<std::vector<void*>> ptrs;   // per device (other processes': empty): address per ValueId
  kern::ScratchNeeds scratch;             // kernel scratch every executing thread reserves
  uint64_t fingerprint = 0;               // the program's, for the collectives' message headers
  int64_t executions = 0;                 // execute() calls so far
  bool timing = false;                    // set_timing: record `seconds` in execute
  bool timed = false;                     // `seconds` holds a finished timed execute
  std::vector<double> seconds;            // [device * instrs + i] (set_timing sizes it)
};

namespace {
// Kernel scratch per op (local shapes; x = the first input, or the output of an op without
// inputs); false: the op's kernel needs none.
using ScratchFn = bool (*)(const Instr&, const Shape& x, kern::ScratchNeeds&);

bool no_scratch(const Instr&, const Shape&, kern::ScratchNeeds&) { return false; }
bool attention_scratch(const Instr&, const Shape& x, kern::ScratchNeeds& k) {
  k.attention_seq = x[1];
  k.attention_head_dim = x[3];  // the bf16 kernels' per-thread blocks
  return true;
}

bool loss_scratch(const Instr&, const Shape& x, kern::ScratchNeeds& k) {
  k.loss_vocab = x.dim(-1);  // the bf16 kernels' widened rows (reserved for f32 logits too: 2 V floats a thread)
  return true;
}

constexpr OpTable<ScratchFn> kScratch = make_op_table<ScratchFn>(
    {{OpKind::kAttention, attention_scratch},
     {OpKind::kSoftmaxCrossEntropy, loss_scratch},
     {OpKind::kSoftmaxCrossEntropyGrad, loss_scratch},
     {OpKind::kVocabMax, loss_scratch},
     {OpKind::kVocabStats, loss_scratch},
     {OpKind::kAttentionGrad, attention_scratch},
     {OpKind::kRmsNormGrad,
      [](const Instr&, const Shape& x, kern::ScratchNeeds& k) {
        k.rmsnorm_rows = x.prod(0, x.rank() - 1);
        k.rmsnorm_width = x.dim(-1);
        return true;
      }},
     {OpKind::kRope,
      [](const Instr& in, const Shape& x, kern::ScratchNeeds& k) {
        k.rope_positions = x[1];
        k.rope_dim = x[3];
        k.rope_min_timescale = static_cast<float>(in.attrs.min_timescale);
        k.rope_max_timescale = static_cast<float>(in.attrs.max_timescale);
        k.rope_use_scale = in.attrs.rope_use_scale;
        return true;
      }},
#define ENG_NO_SCRATCH(kind) {OpKind::kind, no_scratch},
     // sum / sum_squares scratch comes from the largest value (scratch_needs below).
     ENG_NO_SCRATCH(kEmbedLookup) ENG_NO_SCRATCH(kOneHot) ENG_NO_SCRATCH(kMatmul)
     ENG_NO_SCRATCH(kRmsNorm) ENG_NO_SCRATCH(kSwiglu) ENG_NO_SCRATCH(kAdd) ENG_NO_SCRATCH(kMul)
     ENG_NO_SCRATCH(kScale) ENG_NO_SCRATCH(kConvert) ENG_NO_SCRATCH(kConstraint)
     ENG_NO_SCRATCH(kMaskedMeanLoss) ENG_NO_SCRATCH(kEmbedLookupGrad) ENG_NO_SCRATCH(kSwigluGrad)
     ENG_NO_SCRATCH(kMaskedMeanLossGrad) ENG_NO_SCRATCH(kSumSquares) ENG_NO_SCRATCH(kGlobalNorm)
     ENG_NO_SCRATCH(kClipFactor) ENG_NO_SCRATCH(kLearningRate) ENG_NO_SCRATCH(kAdamW)
     ENG_NO_SCRATCH(kIncrement) ENG_NO_SCRATCH(kAllGather) ENG_NO_SCRATCH(kReduceScatter)
     ENG_NO_SCRATCH(kAllReduce) ENG_NO_SCRATCH(kAllToAll) ENG_NO_SCRATCH(kCollectivePermute)
     ENG_NO_SCRATCH(kDynamicSlice) ENG_NO_SCRATCH(kSafeDivide) ENG_NO_SCRATCH(kReshape)
     ENG_NO_SCRATCH(kSlice) ENG_NO_SCRATCH(kPad) ENG_NO_SCRATCH(kConcat) ENG_NO_SCRATCH(kShift)
     ENG_NO_SCRATCH(kAxisIndex) ENG_NO_SCRATCH(kXentFromStats) ENG_NO_SCRATCH(kRepeatKv)
     ENG_NO_SCRATCH(kRepeatKvGrad) ENG_NO_SCRATCH(kIndexInDim) ENG_NO_SCRATCH(kAddIndexInDim)
     ENG_NO_SCRATCH(kRemainder) ENG_NO_SCRATCH(kDynamicSliceInDim)
     ENG_NO_SCRATCH(kDynamicUpdateSliceInDim)
     ENG_NO_SCRATCH(kTranspose) ENG_NO_SCRATCH(kCompare) ENG_NO_SCRATCH(kSelect)
     ENG_NO_SCRATCH(kIndexPerRow) ENG_NO_SCRATCH(kAddIndexPerRow) ENG_NO_SCRATCH(kMoeRoute)
     ENG_NO_SCRATCH(kMoeRouteGrad) ENG_NO_SCRATCH(kMoeDispatch) ENG_NO_SCRATCH(kMoeCombine)
     ENG_NO_SCRATCH(kMoeCombineWeightsGrad) ENG_NO_SCRATCH(kExpertMatmul)
     ENG_NO_SCRATCH(kExpertMatmulGrad) ENG_NO_SCRATCH(kLayerNorm) ENG_NO_SCRATCH(kLayerNormGrad)
     ENG_NO_SCRATCH(kBiasAdd) ENG_NO_SCRATCH(kBiasAddGrad) ENG_NO_SCRATCH(kMoveToHost)
     ENG_NO_SCRATCH(kMoveToDevice) ENG_NO_SCRATCH(kMoeTopK) ENG_NO_SCRATCH(kMoeTopKGrad)
     ENG_NO_SCRATCH(kMoePermute) ENG_NO_SCRATCH(kMoePermuteWeightsGrad)
     ENG_NO_SCRATCH(kRaggedDot) ENG_NO_SCRATCH(kRaggedDotGrad)
     ENG_NO_SCRATCH(kRaggedAllToAll) ENG_NO_SCRATCH(kMoeEpDispatch) ENG_NO_SCRATCH(kMoeEpReturn)
     ENG_NO_SCRATCH(kMoeEpPlan)
#undef ENG_NO_SCRATCH
    },
    no_scratch, no_scratch);

// The largest kernel scratch the executable's instructions ask for (local shapes).
kern::ScratchNeeds scratch_needs(const Program& p) {
  kern::ScratchNeeds n;
  for (const ValueInfo& v : p.values()) n.sum_elements = std::max(n.sum_elements, v.shape.numel());
  for (const Instr& in : p.instrs()) {
    const Shape& x = p.value(in.inputs.empty() ? in.outputs[0] : in.inputs[0]).shape;
    kern::ScratchNeeds k;
    if (kScratch[op_index(in.kind)](in, x, k)) n.merge(k);
  }
  return n;
}
}  // namespace

Runtime::Runtime(Mesh mesh, int64_t device_capacity_bytes, bool span_processes)
    : mesh_(std::move(mesh)), local_{0, mesh_.num_devices()} {
  dist::note_devices_in_use();  // jax_num_cpu_devices is fixed from now on
  for (int64_t d = 0; d < mesh_.num_devices(); ++d)
    devices_.push_back(std::make_unique<Device>(static_cast<int>(d), device_capacity_bytes));
  if (span_processes && dist::process().count > 1) {
    Result<dist::DeviceRange> range = dist::device_range(mesh_.num_devices());
    ENG_CHECK(range.ok(), "runtime: {}", range.status().message());
    local_ = *range;
    comm_ = make_process_communicator(mesh_, local_, dist::make_channel());
    fetch_channel_ = dist::make_channel();
  } else {
    comm_ = make_local_communicator(mesh_);
  }
  tables_.resize(devices_.size());
}

Runtime::~Runtime() = default;

Status check_array_bytes(const Shape& shape, DType dtype, std::string_view what) {
  ENG_RETURN_IF_ERROR(check_rank(shape.rank(), what, shape.to_string()));
  // numel() <= kMaxTensorElements (shape.h), so the product below cannot overflow.
  const int64_t bytes = shape.numel() * dtype_size(dtype);
  if (bytes > kMaxArrayBytes)
    return resource_exhausted(
        "{}: array {} {} needs {} bytes, over the limit of {} bytes per array", what,
        dtype_name(dtype), shape.to_string(), bytes, kMaxArrayBytes);
  return ok_status();
}

Result<Array> Runtime::zeros(const Shape& shape, DType dtype, const NamedSharding& sharding,
                             std::string name) {
  ENG_RETURN_IF_ERROR(check_array_bytes(shape, dtype, "zeros '" + name + "'"));
  ENG_RETURN_IF_ERROR(check_placeable(mesh_, shape, sharding, "zeros " + name));
  Array a{shape, dtype, sharding, {}, std::move(name)};
  const int64_t bytes = sharding.local_shape(shape).numel() * dtype_size(dtype);
  a.shards.resize(devices_.size());  // another process's devices: empty here
  for (int64_t d = local_.lo; d < local_.hi; ++d) {
    ENG_ASSIGN_OR_RETURN(a.shards[d], devices_[d]->allocate(bytes, a.name));
  }
  return a;
}

Result<Array> Runtime::put(const void* host, const Shape& shape, DType dtype,
                           const NamedSharding& sharding, std::string name) {
  ENG_ASSIGN_OR_RETURN(Array a, zeros(shape, dtype, sharding, std::move(name)));
  for (int64_t d = local_.lo; d < local_.hi; ++d)
    copy_block(const_cast<void*>(host), shape, block_of(sharding, shape, d), a.shards[d].data(),
               dtype_size(dtype), /*to_global=*/false);
  return a;
}

Status Runtime::write(Array& a, const void* host) {
  ENG_RETURN_IF_ERROR(check_array(mesh_, num_devices(), a, "write"));
  for (int64_t d = local_.lo; d < local_.hi; ++d)
    copy_block(const_cast<void*>(host), a.shape, block_of(a.sharding, a.shape, d),
               a.shards[d].data(), dtype_size(a.dtype), /*to_global=*/false);
  return ok_status();
}

std::vector<int64_t> Runtime::local_rows(const Shape& shape, const NamedSharding& sharding) const {
  ENG_CHECK(shape.rank() >= 1, "local_rows: a scalar has no rows");
  std::vector<char> held(static_cast<size_t>(shape[0]), 0);
  for (int64_t d = local_.lo; d < local_.hi; ++d) {
    const Block b = block_of(sharding, shape, d);
    std::fill_n(held.begin() + b.offset[0], b.local[0], 1);
  }
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < shape[0]; ++r)
    if (held[static_cast<size_t>(r)]) rows.push_back(r);
  return rows;
}

Status Runtime::write_rows(Array& a, const void* host, std::span<const int64_t> rows) {
  ENG_RETURN_IF_ERROR(check_array(mesh_, num_devices(), a, "write"));
  ENG_CHECK(a.shape.rank() >= 1, "write_rows: scalar array {}", a.name);
  const int64_t n = static_cast<int64_t>(rows.size());
  for (int64_t d = local_.lo; d < local_.hi; ++d) {
    Block b = block_of(a.sharding, a.shape, d);
    if (b.local[0] == 0) continue;
    // The device's rows [o, o + s) are contiguous in `rows` (ascending, distinct) iff the
    // first and the last are there s - 1 entries apart.
    const int64_t o = b.offset[0], s = b.local[0];
    const int64_t k = std::lower_bound(rows.begin(), rows.end(), o) - rows.begin();
    if (k + s > n || rows[k] != o || rows[k + s - 1] != o + s - 1)
      return invalid_argument("write {}: device {} holds rows [{}, {}), which the {} rows given "
                              "do not all include",
                              a.name, d, o, o + s, n);
    b.offset[0] = k;  // row k of host
    copy_block(const_cast<void*>(host), a.shape, b, a.shards[d].data(), dtype_size(a.dtype),
               /*to_global=*/false);
  }
  return ok_status();
}

Status Runtime::fetch(const Array& a, void* host) const {
  ENG_RETURN_IF_ERROR(check_array(mesh_, num_devices(), a, "fetch"));
  // Replicated blocks are written once per holder; they are equal, so any order is right.
  for (int64_t d = local_.lo; d < local_.hi; ++d)
    copy_block(host, a.shape, block_of(a.sharding, a.shape, d), a.shards[d].data(),
               dtype_size(a.dtype), /*to_global=*/true);
  if (!fetch_channel_ || a.sharding.spec.is_replicated()) return ok_status();
  // Across processes: every process's shards (equal sizes: shardings divide evenly), gathered.
  const int64_t shard = local_numel(a) * dtype_size(a.dtype), per = local_.size() * shard;
  std::vector<char> mine(static_cast<size_t>(per)), all(static_cast<size_t>(per) * dist::process().count);
  for (int64_t d = local_.lo; d < local_.hi; ++d)
    if (shard > 0) std::memcpy(mine.data() + (d - local_.lo) * shard, a.shards[d].data(), shard);
  ENG_RETURN_IF_ERROR(fetch_channel_->all_gather(
      dist::MessageHeader::labelled(fmt::format("fetch of '{}'", a.name)), mine.data(), per,
      all.data()));
  for (int d = 0; d < num_devices(); ++d)
    copy_block(host, a.shape, block_of(a.sharding, a.shape, d), all.data() + d * shard,
               dtype_size(a.dtype), /*to_global=*/true);
  return ok_status();
}

Status Runtime::gather_process_values(std::span<const double> mine, std::span<double> all) const {
  ENG_CHECK(fetch_channel_ && all.size() == mine.size() * dist::process().count,
            "runtime: gather of {} values into {}", mine.size(), all.size());
  return fetch_channel_->all_gather(dist::MessageHeader::labelled("a gather of step times"),
                                    mine.data(), static_cast<int64_t>(mine.size_bytes()),
                                    all.data());
}

// ---- Runtime: execution --------------------------------------------------------------------

Runtime::Prepared* Runtime::find_prepared(const Executable& exe) {
  for (auto& p : prepared_)
    if (p->exe_id == exe.id()) return p.get();
  return nullptr;
}

// SHARDLAB_BF16_MATMUL forces a backend (onednn_matmul.h; default kAuto: AMX, else the
// vdpbf16ps GEMM on avx512_bf16, else the packed f32 one).
Status Runtime::make_plans(const Program& p, Prepared& prep) {
  const kern::MatmulBackend backend = kern::bf16_matmul_backend_from_env();
  prep.paths = instr_paths(p);
  prep.plans.resize(p.instrs().size());
  for (size_t i = 0; i < p.instrs().size(); ++i) {
    ENG_ASSIGN_OR_RETURN(prep.plans[i], make_bf16_matmul_plan(p, p.instrs()[i], backend));
    if (prep.plans[i])
      prep.scratch.bf16_matmul_bytes =
          std::max(prep.scratch.bf16_matmul_bytes, prep.plans[i]->scratch_bytes());
  }
  return ok_status();
}

Status Runtime::prepare(const Executable& exe) {
  if (find_prepared(exe)) return ok_status();
  if (!(exe.mesh() == mesh_))
    return invalid_argument("prepare {}: executable compiled for {} but the runtime has {}",
                            exe.program().name(), exe.mesh().to_string(), mesh_.to_string());
  ENG_RETURN_IF_ERROR(check_executable_dtypes(exe.program()));
  ENG_RETURN_IF_ERROR(comm_->prepare(exe.program()));
  auto prep = std::make_unique<Prepared>();
  prep->exe_id = exe.id();
  prep->arenas.resize(devices_.size());  // another process's devices: none here
  prep->widen.resize(devices_.size());
  prep->ptrs.resize(devices_.size());  // another process's devices: no table
  for (int64_t d = local_.lo; d < local_.hi; ++d) {
    prep->ptrs[d].assign(exe.program().values().size(), nullptr);
    Device& dev = *devices_[d];
    ENG_ASSIGN_OR_RETURN(prep->arenas[d],
                         dev.allocate(exe.arena_bytes(), "arena:" + exe.program().name()));
    ENG_ASSIGN_OR_RETURN(prep->widen[d], dev.allocate(widen_scratch_bytes(exe.program()),
                                                      "bf16 widening:" + exe.program().name()));
  }
  int next = 0;
  for (const ProgramOutput& out : exe.program().outputs())
    prep->ordinal.push_back(out.aliased_arg >= 0 ? -1 : next++);
  prep->num_outputs = next;
  if (spans_processes()) prep->fingerprint = exe.program().fingerprint();
  // Reserve kernel scratch on every pool thread now, so no step allocates it later.
  prep->scratch = scratch_needs(exe.program());
  ENG_RETURN_IF_ERROR(make_plans(exe.program(), *prep));
  const kern::ScratchNeeds& needs = prep->scratch;
  std::atomic<bool> reserved{true};
  default_pool().run_on_every_thread([&] {
    if (!kern::reserve_scratch(needs)) reserved = false;
  });
  if (!reserved) return scratch_exhausted(exe.program().name());
  prepared_.push_back(std::move(prep));
  return ok_status();
}

void Runtime::release(const Executable& exe) {
  std::erase_if(prepared_, [&](const auto& p) { return p->exe_id == exe.id(); });
}

// Checks args and outputs against the executable and fills every device's buffer table.
Status Runtime::bind(const Executable& exe, std::span<Array* const> args,
                     std::vector<Array>& outputs, Prepared& prep) {
  const Program& p = exe.program();
  const std::string& fn = p.name();
  if (args.size() != p.args().size())
    return invalid_argument("execute {}: {} arguments given, the program takes {}", fn,
                            args.size(), p.args().size());
  for (size_t k = 0; k < args.size(); ++k) {
    const Array* a = args[k];
    const ValueInfo& v = p.value(p.args()[k].value);
    if (!a || static_cast<int>(a->shards.size()) != num_devices() || a->dtype != v.dtype ||
        local_numel(*a) * dtype_size(a->dtype) != v.bytes() || !(a->sharding.mesh == mesh_))
      return invalid_argument("execute {}: argument {} ('{}') expects {} per device, got {}", fn, k,
                              v.name, v.type_string(),
                              a ? a->dtype == v.dtype ? fmt::format("{} {}", dtype_name(a->dtype),
                                                                    a->sharding.local_shape(a->shape).to_string())
                                                      : std::string(dtype_name(a->dtype))
                                : "null");
  }
  // Outputs: (re)create the non-aliased ones that do not fit.
  if (outputs.size() != static_cast<size_t>(prep.num_outputs)) outputs.resize(prep.num_outputs);
  for (size_t j = 0; j < p.outputs().size(); ++j) {
    const ProgramOutput& out = p.outputs()[j];
    if (prep.ordinal[j] < 0) continue;
    const ValueInfo& v = p.value(out.value);
    Array& o = outputs[prep.ordinal[j]];
    bool fits = o.shape == v.shape && o.dtype == v.dtype &&
                static_cast<int>(o.shards.size()) == num_devices() && o.sharding.mesh == mesh_ &&
                o.sharding.spec.is_replicated();
    if (!fits) {
      o = Array{};
      ENG_ASSIGN_OR_RETURN(o, zeros(v.shape, v.dtype, NamedSharding{mesh_, PartitionSpec()},
                                    out.name));
    }
    for (Array* a : args)
      if (a->shards[local_.lo].data() && a->shards[local_.lo].data() == o.shards[local_.lo].data())
        return invalid_argument("execute {}: output '{}' is also passed as argument '{}'", fn,
                                out.name, a->name);
  }
  for (int64_t d = local_.lo; d < local_.hi; ++d) {
    std::vector<void*>& ptrs = prep.ptrs[d];
    char* arena = static_cast<char*>(prep.arenas[d].data());
    for (size_t v = 0; v < ptrs.size(); ++v) {
      const BufferSlot& s = exe.slots()[v];
      switch (s.kind) {
        case BufferSlot::Kind::kArgument: ptrs[v] = args[s.index]->shards[d].data(); break;
        case BufferSlot::Kind::kOutput:
          ptrs[v] = outputs[prep.ordinal[s.index]].shards[d].data();
          break;
        case BufferSlot::Kind::kTemp: ptrs[v] = arena ? arena + s.offset : nullptr; break;
        case BufferSlot::Kind::kNone: ptrs[v] = nullptr; break;
      }
    }
  }
  return ok_status();
}

Status Runtime::execute(const Executable& exe, std::span<Array* const> args,
                        std::vector<Array>& outputs) {
  ENG_RETURN_IF_ERROR(prepare(exe));
  Prepared& prep = *find_prepared(exe);
  ENG_RETURN_IF_ERROR(bind(exe, args, outputs, prep));
  const Program& p = exe.program();
  // The calling thread may not be a pool thread (the dispatcher's): out of memory here is an
  // error before any instruction ran, so the state is as it was.
  if (!kern::reserve_scratch(prep.scratch)) return scratch_exhausted(p.name());
  const int64_t lo = local_.lo, n = local_.size();  // this process's devices
  const size_t ni = p.instrs().size();
  double* const seconds = prep.timing ? prep.seconds.data() : nullptr;  // set_timing
  if (seconds) prep.timed = false;
  for (int d = 0; d < num_devices(); ++d) tables_[d] = is_local(d) ? prep.ptrs[d].data() : nullptr;
  comm_->begin(prep.fingerprint, prep.executions++);
  for (size_t i = 0; i < ni; ++i) {
    const Instr& in = p.instrs()[i];
    auto scratch = [&](int64_t d) {
      return InstrScratch{prep.widen[d].data(), prep.plans[i].get(), prep.paths[i]};
    };
    auto run_on = [&](int64_t d) {
      const double t0 = seconds ? now_seconds() : 0;
      run_instr(p, in, prep.ptrs[d].data(), &mesh_, d, scratch(d));
      if (seconds) seconds[static_cast<size_t>(d) * ni + i] = now_seconds() - t0;
    };
    if (is_collective(in.kind)) {
      const double t0 = seconds ? now_seconds() : 0;
      comm_->run(p, in, tables_);  // one instruction across every device's buffers
      ENG_RETURN_IF_ERROR(comm_->take_error());
      if (seconds)
        for (int64_t d = lo; d < lo + n; ++d)
          seconds[static_cast<size_t>(d) * ni + i] = now_seconds() - t0;
    } else if (n == 1) {
      run_on(lo);  // kernels parallelise internally
    } else {
      default_pool().run(n, [&](int64_t k) { run_on(lo + k); });
    }
  }
  if (seconds) prep.timed = true;
  // Outputs not produced in place (an argument or a value returned twice) are copied.
  for (size_t j = 0; j < p.outputs().size(); ++j) {
    const ProgramOutput& out = p.outputs()[j];
    const BufferSlot& s = exe.slots()[out.value];
    if (out.aliased_arg >= 0 || (s.kind == BufferSlot::Kind::kOutput && s.index == (int)j)) continue;
    for (int64_t d = lo; d < lo + n; ++d)
      std::memcpy(outputs[prep.ordinal[j]].shards[d].data(), prep.ptrs[d][out.value], s.bytes);
  }
  return ok_status();
}

Status Runtime::set_timing(const Executable& exe, bool on) {
  ENG_RETURN_IF_ERROR(prepare(exe));
  Prepared& prep = *find_prepared(exe);
  prep.timing = on;
  if (on) prep.seconds.assign(exe.program().instrs().size() * devices_.size(), 0.0);
  return ok_status();
}

std::span<const double> Runtime::instr_seconds(const Executable& exe) {
  const Prepared* prep = find_prepared(exe);
  if (prep == nullptr || !prep->timed) return {};
  return prep->seconds;
}

}  // namespace eng
