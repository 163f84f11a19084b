// engine/compile/compile.cpp: Program -> Executable: per-device shapes, liveness, in-place
// aliasing checks, buffer assignment (arguments, output region, arena) and the analyses.
#include <algorithm>
#include <atomic>

#include <fmt/format.h>

#include "engine/compile/executable.h"
#include "engine/compile/memory_plan.h"

namespace eng {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

int64_t align_up(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// "params/decoder/wq" for a named value, else "%17 f32[8,256]" (its id and type).
std::string describe(const Program& p, ValueId v) {
  const ValueInfo& info = p.value(v);
  if (!info.name.empty()) return fmt::format("'{}' {}", info.name, info.type_string());
  return fmt::format("%{} {}", v, info.type_string());
}

std::string describe_instr(const Program& p, int i) {
  if (i >= static_cast<int>(p.instrs().size())) return "the program's outputs";
  return fmt::format("instruction {} ({})", i, op_name(p.instrs()[i].kind));
}

// One storage location shared by the values that live in it: an argument buffer, an output
// buffer or an arena temp. A kConstraint output and an in-place update join the storage of
// their input; every other value starts its own.
struct Storage {
  BufferSlot::Kind kind;
  int index = -1;        // argument or output index
  int64_t bytes = 0;     // local bytes
  int first = 0;         // defining instruction of its first value (-1: an argument)
  int last = 0;          // last instruction reading any of its values (n: program outputs)
  int joined_at = -2;    // the instruction whose output last joined it
  ValueId root = kNoValue;
  bool host = false;     // a kMoveToHost output: planned in the host region
};

class Assigner {
 public:
  explicit Assigner(const Program& p) : p_(p), n_(static_cast<int>(p.instrs().size())) {}

  Status run() {
    ENG_RETURN_IF_ERROR(compute_reads());
    const auto& args = p_.args();
    storage_of_.assign(p_.values().size(), -1);
    for (size_t k = 0; k < args.size(); ++k)
      add_storage(args[k].value, {BufferSlot::Kind::kArgument, static_cast<int>(k)}, -1);
    for (int i = 0; i < n_; ++i) {
      const Instr& in = p_.instrs()[i];
      for (size_t o = 0; o < in.outputs.size(); ++o) ENG_RETURN_IF_ERROR(assign(i, in, o));
    }
    return check_outputs();
  }

  const std::vector<Storage>& storages() const { return storages_; }
  int storage_of(ValueId v) const { return storage_of_[v]; }
  int last_read(ValueId v) const { return last_read_[v]; }

 private:
  Status compute_reads() {
    last_read_.assign(p_.values().size(), -1);
    for (int i = 0; i < n_; ++i)
      for (ValueId v : p_.instrs()[i].inputs) last_read_[v] = i;
    alias_of_.assign(p_.values().size(), -1);
    out_index_.assign(p_.values().size(), -1);
    std::vector<int> aliased_by(p_.args().size(), -1);
    for (size_t j = 0; j < p_.outputs().size(); ++j) {
      const ProgramOutput& out = p_.outputs()[j];
      last_read_[out.value] = n_;  // outputs are read after the last instruction
      if (out.aliased_arg < 0) {
        if (out_index_[out.value] < 0) out_index_[out.value] = static_cast<int>(j);
        continue;
      }
      const int k = out.aliased_arg;
      if (aliased_by[k] >= 0)
        return invalid_argument("compile: outputs '{}' and '{}' both update argument {} in place",
                                p_.outputs()[aliased_by[k]].name, out.name,
                                describe(p_, p_.args()[k].value));
      aliased_by[k] = static_cast<int>(j);
      if (alias_of_[out.value] >= 0 && alias_of_[out.value] != k)
        return invalid_argument("compile: value {} updates two arguments in place: {} and {}",
                                describe(p_, out.value),
                                describe(p_, p_.args()[alias_of_[out.value]].value),
                                describe(p_, p_.args()[k].value));
      alias_of_[out.value] = k;
    }
    return ok_status();
  }

  void add_storage(ValueId v, Storage s, int def) {
    s.bytes = p_.value(v).bytes();
    s.first = def;
    s.last = std::max(def, last_read_[v]);
    s.root = v;
    storage_of_[v] = static_cast<int>(storages_.size());
    storages_.push_back(s);
  }

  void join(ValueId v, int s, int i) {
    storage_of_[v] = s;
    storages_[s].last = std::max({storages_[s].last, last_read_[v], i});
    storages_[s].joined_at = i;
  }

  // The instruction reading storage s last, for error messages.
  int last_reader(int s) const { return storages_[s].last; }

  Status assign(int i, const Instr& in, size_t o) {
    const ValueId w = in.outputs[o];
    const bool is_output = last_read_[w] == n_;
    const int target = alias_of_[w];  // argument w updates in place, or -1
    const int inplace = in_place_input(in.kind, o, in.inputs.size());
    const int via = inplace >= 0 ? inplace : in.kind == OpKind::kConstraint ? 0 : -1;
    if (via >= 0) {
      const int s = storage_of_[in.inputs[via]];
      const Storage& st = storages_[s];
      const bool free_here = st.last <= i && st.joined_at != i;
      if (st.kind == BufferSlot::Kind::kArgument && target == st.index) {
        if (!free_here)
          return invalid_argument(
              "compile: {} updates argument {} in place (as output '{}'), but the argument is "
              "still read by {} after the update at {}",
              describe(p_, w), describe(p_, p_.args()[target].value), output_name(w),
              describe_instr(p_, last_reader(s)), describe_instr(p_, i));
        join(w, s, i);
        return ok_status();
      }
      const bool constraint_join = inplace < 0 && !is_output;
      // A temp that dies here (and a value that is not bound for an argument's buffer).
      const bool donate = inplace >= 0 && !is_output && free_here && target < 0 &&
                          st.kind == BufferSlot::Kind::kTemp;
      if (constraint_join || donate) {
        join(w, s, i);
        return ok_status();
      }
    }
    // add and mul are correct in place on either input (same numel, read before written), so
    // their output takes input 1's buffer when input 0's is not free: the accumulation
    // acc' = acc + x reuses whichever operand dies at it, as XLA's buffer assignment does.
    if (inplace == 0 && o == 0 && in.inputs.size() == 2 && !is_output && target < 0 &&
        (in.kind == OpKind::kAdd || in.kind == OpKind::kMul)) {
      const int s = storage_of_[in.inputs[1]];
      const Storage& st = storages_[s];
      if (st.kind == BufferSlot::Kind::kTemp && st.last <= i && st.joined_at != i) {
        join(w, s, i);
        return ok_status();
      }
    }
    if (target >= 0) {
      // Written straight into the argument's buffer: only once nobody reads the old value.
      const int s = storage_of_[p_.args()[target].value];
      if (storages_[s].last >= i)
        return invalid_argument(
            "compile: output '{}' ({}) updates argument {} in place, but the argument is still "
            "read by {}, at or after the output's producer, {}",
            output_name(w), describe(p_, w), describe(p_, p_.args()[target].value),
            describe_instr(p_, last_reader(s)), describe_instr(p_, i));
      join(w, s, i);
      return ok_status();
    }
    if (out_index_[w] >= 0) {
      add_storage(w, {BufferSlot::Kind::kOutput, out_index_[w]}, i);
    } else {
      add_storage(w, {BufferSlot::Kind::kTemp}, i);
      storages_.back().host = in.kind == OpKind::kMoveToHost;
    }
    return ok_status();
  }

  Status check_outputs() const {
    for (const ProgramOutput& out : p_.outputs()) {
      if (out.aliased_arg < 0) continue;
      const Storage& st = storages_[storage_of_[out.value]];
      if (st.kind != BufferSlot::Kind::kArgument || st.index != out.aliased_arg)
        return invalid_argument("compile: output '{}' ({}) updates argument {} but is argument {}",
                                out.name, describe(p_, out.value),
                                describe(p_, p_.args()[out.aliased_arg].value),
                                describe(p_, p_.args()[st.index].value));
    }
    return ok_status();
  }

  std::string output_name(ValueId w) const {
    for (const ProgramOutput& out : p_.outputs())
      if (out.value == w) return out.name;
    return "";
  }

  const Program& p_;
  const int n_;
  std::vector<int> last_read_;   // per value: last reading instruction (n_: an output), or -1
  std::vector<int> alias_of_;    // per value: argument it updates in place, or -1
  std::vector<int> out_index_;   // per value: its first non-aliased output index, or -1
  std::vector<int> storage_of_;  // per value: index into storages_
  std::vector<Storage> storages_;
};

Status check_mesh(const Program& p, const Mesh& mesh) {
  for (size_t v = 0; v < p.values().size(); ++v) {
    const ValueInfo& info = p.values()[v];
    if (!info.spec) continue;
    NamedSharding ns{mesh, *info.spec};
    Status s = ns.validate(info.shape);
    if (!s.ok())
      return invalid_argument("compile: value {}: {}", describe(p, static_cast<ValueId>(v)),
                              s.message());
  }
  return ok_status();
}

std::atomic<uint64_t> g_next_executable_id{1};

}  // namespace

std::string MemoryAnalysis::to_string() const {
  return fmt::format(
      "Total estimated memory size: {:.1f} GB, estimated output size: {:.1f} GB, estimated temp "
      "size: {:.1f} GB, estimated argument size: {:.1f} GB, Estimated host temp size: {:.1f} GB.",
      peak_bytes() / kGiB, output_bytes / kGiB, temp_bytes / kGiB, argument_bytes / kGiB,
      host_temp_bytes / kGiB);
}

int64_t Executable::host_region_offset() const {
  return memory_.host_temp_bytes > 0 ? align_up(memory_.temp_bytes) : memory_.temp_bytes;
}

std::vector<TempInfo> Executable::largest_temps(int n) const {
  std::vector<TempInfo> out = temps_;
  std::stable_sort(out.begin(), out.end(),
                   [](const TempInfo& a, const TempInfo& b) { return a.bytes > b.bytes; });
  if (n >= 0 && static_cast<size_t>(n) < out.size()) out.resize(n);
  return out;
}

Result<std::shared_ptr<const Executable>> compile(const Program& program, const Mesh& mesh,
                                                  const CompileOptions& options) {
  if (!options.manual) ENG_RETURN_IF_ERROR(check_mesh(program, mesh));  // manual: local shapes
  auto exe = std::make_shared<Executable>();
  exe->id_ = g_next_executable_id.fetch_add(1);
  exe->mesh_ = mesh;
  exe->global_ = program;
  if (options.manual) {
    exe->program_ = program;
    for (const Argument& a : program.args())
      exe->arg_shardings_.push_back({mesh, program.value(a.value).spec.value_or(PartitionSpec())});
  } else if (mesh.num_devices() > 1) {
    // SPMD: shardings for the arguments, then the per-device program (spmd.h).
    ENG_RETURN_IF_ERROR(assign_argument_shardings(exe->global_, mesh, options));
    ENG_ASSIGN_OR_RETURN(Partitioned part, partition(exe->global_, mesh, options));
    exe->program_ = std::move(part.local);
    for (const PartitionSpec& s : part.arg_specs) exe->arg_shardings_.push_back({mesh, s});
  } else {
    // One device: local shapes equal global shapes; the per-device program is the program.
    exe->program_ = program;
    for (size_t k = 0; k < program.args().size(); ++k)
      exe->arg_shardings_.push_back({mesh, PartitionSpec()});
  }
  const Program& p = exe->program_;

  Assigner assigner(p);
  ENG_RETURN_IF_ERROR(assigner.run());
  const std::vector<Storage>& storages = assigner.storages();

  // Arenas: one plan buffer per temp storage, the device's and (offloaded values) the host's.
  std::vector<PlanBuffer> buffers, host_buffers;
  std::vector<int> buffer_of(storages.size(), -1);
  for (size_t s = 0; s < storages.size(); ++s) {
    const Storage& st = storages[s];
    if (st.kind != BufferSlot::Kind::kTemp || st.bytes == 0) continue;
    std::vector<PlanBuffer>& into = st.host ? host_buffers : buffers;
    buffer_of[s] = static_cast<int>(into.size());
    into.push_back({st.bytes, st.first, st.last});
  }
  MemoryPlan plan = plan_memory(buffers);
  MemoryPlan host_plan = plan_memory(host_buffers);
  if (options.verify_plan) {
    ENG_RETURN_IF_ERROR(verify_plan(buffers, plan));
    ENG_RETURN_IF_ERROR(verify_plan(host_buffers, host_plan));
  }
  const int64_t host_base = align_up(plan.arena_bytes);  // = exe->host_region_offset()
  auto temp_offset = [&](size_t s) {
    return storages[s].host ? host_base + host_plan.offsets[buffer_of[s]]
                            : plan.offsets[buffer_of[s]];
  };

  // Output region: every non-aliased output, packed in output order.
  std::vector<int64_t> out_offset(p.outputs().size(), -1);
  int64_t region = 0;
  MemoryAnalysis& mem = exe->memory_;
  for (size_t j = 0; j < p.outputs().size(); ++j) {
    const ProgramOutput& out = p.outputs()[j];
    const int64_t bytes = p.value(out.value).bytes();
    mem.output_bytes += bytes;
    if (out.aliased_arg >= 0) {
      mem.alias_bytes += bytes;
      continue;
    }
    out_offset[j] = region;
    region += align_up(bytes);
  }
  exe->output_region_bytes_ = region;
  for (const Argument& a : p.args()) mem.argument_bytes += p.value(a.value).bytes();
  mem.temp_bytes = plan.arena_bytes;
  mem.host_temp_bytes = host_plan.arena_bytes;

  exe->slots_.resize(p.values().size());
  for (size_t v = 0; v < p.values().size(); ++v) {
    const int s = assigner.storage_of(static_cast<ValueId>(v));
    ENG_CHECK(s >= 0, "compile: value {} has no storage", v);
    const Storage& st = storages[s];
    BufferSlot& slot = exe->slots_[v];
    slot.kind = st.kind;
    slot.index = st.index;
    slot.bytes = p.values()[v].bytes();
    if (st.kind == BufferSlot::Kind::kTemp)
      slot.offset = buffer_of[s] >= 0 ? temp_offset(s) : 0;
    else if (st.kind == BufferSlot::Kind::kOutput)
      slot.offset = out_offset[st.index];
  }
  for (size_t s = 0; s < storages.size(); ++s)
    if (buffer_of[s] >= 0)
      exe->temps_.push_back({storages[s].root, storages[s].bytes, storages[s].first,
                             storages[s].last, temp_offset(s), storages[s].host});
  exe->cost_ = estimate_cost(p);
  return std::shared_ptr<const Executable>(std::move(exe));
}

}  // namespace eng
