// engine/frontend/trace.cpp: Trace (a Builder plus where each argument comes from), Compiled
// (output shardings, output buffers, the Jit), runtimes per mesh, device_put and fetch.
#include "engine/frontend/trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "engine/base/limits.h"
#include "engine/compile/spmd.h"
#include "engine/frontend/remat.h"
#include "engine/frontend/vma.h"
#include "engine/ir/remat.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::frontend {
namespace {

std::atomic<int64_t> g_next_trace_id{1};

std::string axes_name(const PartitionSpec::DimAxes& axes) {
  return fmt::format("{}", fmt::join(axes, ","));
}

}  // namespace

namespace {
std::mutex g_runtimes_mu;
std::vector<std::weak_ptr<Runtime>> g_runtimes;  // one live Runtime per mesh

std::shared_ptr<Runtime> find_locked(const Mesh& mesh) {
  std::erase_if(g_runtimes, [](const std::weak_ptr<Runtime>& w) { return w.expired(); });
  for (const auto& w : g_runtimes)
    if (auto rt = w.lock(); rt && rt->mesh() == mesh) return rt;
  return nullptr;
}
}  // namespace

std::shared_ptr<Runtime> find_runtime(const Mesh& mesh) {
  std::lock_guard<std::mutex> lock(g_runtimes_mu);
  return find_locked(mesh);
}

std::shared_ptr<Runtime> runtime_for(const Mesh& mesh) {
  std::lock_guard<std::mutex> lock(g_runtimes_mu);
  if (auto rt = find_locked(mesh)) return rt;
  auto rt = std::make_shared<Runtime>(mesh);
  g_runtimes.push_back(rt);
  return rt;
}

ShardMode shard_mode_of(const Mesh& mesh) {
  return mesh.all_axes(AxisType::kExplicit) ? ShardMode::kExplicit : ShardMode::kAuto;
}

Status check_host_values(const Shape& shape, std::string_view what) {
  ENG_RETURN_IF_ERROR(check_rank(shape.rank(), what, shape.to_string()));
  if (shape.numel() > kMaxHostValues)
    return invalid_argument(
        "{}: shape {} has {} elements, over the front-end's limit of {} per "
        "array (engine/frontend/trace.h kMaxHostValues)",
        what, shape.to_string(), shape.numel(), kMaxHostValues);
  return ok_status();
}

namespace {

// Whether device d is at coordinate 0 along every one of `axes`.
bool first_along(const Mesh& mesh, const std::vector<std::string>& axes, int64_t d) {
  const std::vector<int64_t> c = mesh.device_coords(d);
  for (const std::string& a : axes)
    if (const int i = mesh.axis_index(a); i >= 0 && c[static_cast<size_t>(i)] != 0) return false;
  return true;
}

// One device's block as doubles (its own buffer).
std::vector<double> block_values(const Array& arr, int64_t d) {
  const int64_t n = arr.sharding.local_shape(arr.shape).numel();
  const void* p = arr.shards[static_cast<size_t>(d)].data();
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (arr.dtype) {
      case DType::kF32: v[i] = static_cast<const float*>(p)[i]; break;
      case DType::kBF16: v[i] = bf16_to_f32(static_cast<const uint16_t*>(p)[i]); break;
      case DType::kI32: v[i] = static_cast<const int32_t*>(p)[i]; break;
    }
  }
  return v;
}

// JAX's unreduced (P(..., unreduced={'Y'})): the value is the sum over those axes of the
// devices' blocks. Placed as JAX's device_put places it: the member at coordinate 0 along every
// unreduced axis holds its block, the others zeros.
Result<ArrayRef> put_unreduced(const std::vector<double>& host, const Shape& shape, DType dtype,
                               const NamedSharding& sharding) {
  ENG_RETURN_IF_ERROR(sharding.validate(shape));
  ENG_ASSIGN_OR_RETURN(ArrayRef placed, device_put(host, shape, dtype,
                                                   {sharding.mesh, PartitionSpec(sharding.spec.dims())}));
  auto out = std::const_pointer_cast<DeviceArray>(placed);  // made here: nobody else holds it
  for (int64_t d = 0; d < static_cast<int64_t>(out->array.shards.size()); ++d) {
    DeviceBuffer& b = out->array.shards[static_cast<size_t>(d)];
    if (b.data() && !first_along(sharding.mesh, sharding.spec.partial(), d))
      std::memset(b.data(), 0, static_cast<size_t>(b.bytes()));
  }
  out->array.sharding = sharding;
  return placed;
}

// The value of an unreduced array: per element, the sum of the blocks of the devices holding
// it at coordinate 0 along the replicated axes (one per member of the unreduced axes).
Result<std::vector<double>> fetch_unreduced(const DeviceArray& a) {
  const Array& arr = a.array;
  const NamedSharding& s = arr.sharding;
  if (a.rt->spans_processes())
    return unimplemented("fetch: an unreduced array ({}) across processes", s.spec.to_string());
  std::vector<std::string> replicated;
  for (const std::string& m : s.mesh.axis_names()) {
    bool used = std::find(s.spec.partial().begin(), s.spec.partial().end(), m) != s.spec.partial().end();
    for (const auto& d : s.spec.dims()) used = used || std::find(d.begin(), d.end(), m) != d.end();
    if (!used) replicated.push_back(m);
  }
  const Shape local = s.local_shape(arr.shape);
  const int rank = arr.shape.rank();
  std::vector<double> out(static_cast<size_t>(arr.shape.numel()), 0.0);
  for (int64_t d = 0; d < s.mesh.num_devices(); ++d) {
    if (!first_along(s.mesh, replicated, d)) continue;
    const std::vector<double> v = block_values(arr, d);
    const std::vector<int64_t> off = s.local_offset(arr.shape, d);
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    for (size_t i = 0; i < v.size(); ++i) {
      int64_t g = 0;
      for (int k = 0; k < rank; ++k) g = g * arr.shape[k] + off[k] + idx[k];
      out[static_cast<size_t>(g)] += v[i];
      for (int k = rank - 1; k >= 0; --k) {
        if (++idx[k] < local[k]) break;
        idx[k] = 0;
      }
    }
  }
  if (arr.dtype == DType::kF32)  // summed as the devices would: in float32
    for (double& x : out) x = static_cast<float>(x);
  return out;
}

}  // namespace

Result<ArrayRef> device_put(const std::vector<double>& host, const Shape& shape, DType dtype,
                            const NamedSharding& sharding) {
  if (!sharding.spec.partial().empty()) return put_unreduced(host, shape, dtype, sharding);
  ENG_RETURN_IF_ERROR(check_array_bytes(shape, dtype, "device_put"));
  if (static_cast<int64_t>(host.size()) != shape.numel())
    return invalid_argument("device_put: {} values for shape {} ({} elements)", host.size(),
                            shape.to_string(), shape.numel());
  ENG_RETURN_IF_ERROR(sharding.validate(shape));
  auto out = std::make_shared<DeviceArray>();
  out->rt = runtime_for(sharding.mesh);
  std::vector<char> bytes(static_cast<size_t>(shape.numel() * dtype_size(dtype)));
  for (size_t i = 0; i < host.size(); ++i) {
    switch (dtype) {
      case DType::kF32:
        reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(host[i]);
        break;
      case DType::kBF16:
        reinterpret_cast<uint16_t*>(bytes.data())[i] = f32_to_bf16(static_cast<float>(host[i]));
        break;
      case DType::kI32:
        reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(host[i]);
        break;
    }
  }
  ENG_ASSIGN_OR_RETURN(out->array, out->rt->put(bytes.data(), shape, dtype, sharding, "array"));
  return ArrayRef(std::move(out));
}

Result<std::vector<double>> fetch(const DeviceArray& a) {
  ENG_RETURN_IF_ERROR(check_host_values(a.array.shape, "fetch"));
  if (!a.array.sharding.spec.partial().empty()) return fetch_unreduced(a);
  const int64_t n = a.array.shape.numel();
  std::vector<char> bytes(static_cast<size_t>(n * dtype_size(a.array.dtype)));
  ENG_RETURN_IF_ERROR(a.rt->fetch(a.array, bytes.data()));
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (a.array.dtype) {
      case DType::kF32:
        out[i] = reinterpret_cast<const float*>(bytes.data())[i];
        break;
      case DType::kBF16:
        out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
        break;
      case DType::kI32:
        out[i] = reinterpret_cast<const int32_t*>(bytes.data())[i];
        break;
    }
  }
  return out;
}

Result<ArrayRef> reshard_on_host(const DeviceArray& a, const NamedSharding& sharding) {
  if (!(sharding.mesh == a.array.sharding.mesh))
    return invalid_argument("device_put: the array lives on {} but the sharding's mesh is {}",
                            a.array.sharding.mesh.to_string(), sharding.mesh.to_string());
  ENG_ASSIGN_OR_RETURN(std::vector<double> host, fetch(a));
  return device_put(host, a.array.shape, a.array.dtype, sharding);
}

// ---- Trace ------------------------------------------------------------------------------

Trace::Trace(std::string name, Mesh mesh, bool manual)
    : name_(name),
      mesh_(std::move(mesh)),
      b_(std::move(name)),
      id_(g_next_trace_id++),
      manual_(manual) {}

ValueId Trace::input(std::string name, const Shape& shape, DType dtype, const PartitionSpec& spec) {
  ValueId v = b_.argument(std::move(name), shape, dtype, {}, ArgRole::kBatch);
  b_.mutable_info(v).spec = spec;
  sources_.push_back({Source::Kind::kInput, num_inputs_++, nullptr, 0});
  if (manual_) add_vma(v, vma_of_spec(mesh_, spec));  // shard_map: varies where it is split
  return v;
}

ValueId Trace::capture(ArrayRef a) {
  ValueId v = b_.argument(fmt::format("const{}", sources_.size()), a->array.shape, a->array.dtype,
                          {}, ArgRole::kBatch);
  b_.mutable_info(v).spec = a->array.sharding.spec;
  sources_.push_back({Source::Kind::kCaptured, 0, std::move(a), 0});
  return v;
}

ValueId Trace::scalar(double value, DType dtype) {
  ValueId v =
      b_.argument(fmt::format("const{}", sources_.size()), Shape{}, dtype, {}, ArgRole::kBatch);
  b_.mutable_info(v).spec = PartitionSpec();
  sources_.push_back({Source::Kind::kScalar, 0, nullptr, value});
  return v;
}

Result<ValueId> Trace::constant(const std::vector<double>& host, const Shape& shape, DType dtype) {
  ENG_ASSIGN_OR_RETURN(ArrayRef a, device_put(host, shape, dtype, {mesh_, PartitionSpec()}));
  return capture(std::move(a));
}

Trace::ArgSource Trace::arg_source(int k) const {
  const Source& s = sources_[static_cast<size_t>(k)];
  ArgSource a;
  if (s.kind == Source::Kind::kInput) a.input = s.index;
  if (s.kind == Source::Kind::kCaptured) a.captured = s.captured;
  if (s.kind == Source::Kind::kScalar) a.scalar = s.scalar;
  return a;
}

std::string Trace::logical_name(const PartitionSpec::DimAxes& axes) {
  if (axes.empty()) return "";
  std::string n = axes_name(axes);
  logical_[n] = axes;
  return n;
}

LogicalAxisRules Trace::rules() const {
  std::vector<LogicalAxisRule> rules;
  for (const std::string& a : mesh_.axis_names()) rules.push_back({a, {a}});
  for (const auto& [name, axes] : logical_)
    if (axes.size() > 1) rules.push_back({name, axes});
  return LogicalAxisRules(std::move(rules));
}

Result<PartitionSpec> Trace::sharding_of(ValueId v) const {
  if (manual_) return PartitionSpec();  // shard_map's values are per-device blocks
  const ValueInfo& info = b_.info(v);
  if (info.spec) return *info.spec;
  if (mesh_.num_devices() == 1) return PartitionSpec();
  Builder b = b_;
  b.output(v, "x");
  Program p = std::move(b).finish();
  ENG_ASSIGN_OR_RETURN(Partitioned part, partition(p, mesh_, compile_options()));
  return PartitionSpec(part.value_specs[v].dims());
}

const std::vector<AxisType>& Trace::axis_types() const {
  return open_types_.empty() ? mesh_.axis_types() : open_types_.back().types;
}

void Trace::begin_axis_types(std::vector<AxisType> types) {
  open_types_.push_back({static_cast<int>(b_.program().instrs().size()), std::move(types)});
}

void Trace::close_to(size_t depth) {
  while (open_types_.size() > depth) {
    if (open_types_.back().view) end_view();
    else end_axis_types();
  }
}

void Trace::end_axis_types() {
  if (open_types_.empty()) return;
  OpenAxisTypes o = std::move(open_types_.back());
  open_types_.pop_back();
  const int end = static_cast<int>(b_.program().instrs().size());
  if (o.begin < end) type_regions_.push_back({o.begin, end, std::move(o.types)});
}

namespace {

// Per view axis, the run of mesh axes it stands for (view ('A': 8) over ('X': 4, 'Y': 2):
// {{X, Y}}), size-1 mesh axes left out (they shard nothing). Nullopt when the runs do not
// line up.
std::optional<std::vector<std::vector<std::string>>> view_runs(const Mesh& mesh, const Mesh& view) {
  std::vector<std::vector<std::string>> runs;
  int k = 0;
  for (int v = 0; v < view.num_axes(); ++v) {
    std::vector<std::string> run;
    int64_t product = 1;
    for (; k < mesh.num_axes() && product < view.axis_sizes()[v]; ++k) {
      if (mesh.axis_sizes()[k] == 1) continue;
      product *= mesh.axis_sizes()[k];
      run.push_back(mesh.axis_names()[k]);
    }
    if (product != view.axis_sizes()[v]) return std::nullopt;
    runs.push_back(std::move(run));
  }
  for (; k < mesh.num_axes(); ++k)
    if (mesh.axis_sizes()[k] != 1) return std::nullopt;
  return runs;
}

}  // namespace

Status Trace::begin_view(const Mesh& view) {
  if (view.num_devices() != mesh_.num_devices())
    return invalid_argument(
        "use_abstract_mesh: Abstract{} has {} devices, the jit's mesh {} has {}: the total size "
        "of the mesh must not change",
        view.to_string(), view.num_devices(), mesh_.to_string(), mesh_.num_devices());
  const auto runs = view_runs(mesh_, view);
  if (!runs)
    return invalid_argument(
        "use_abstract_mesh: the axes of Abstract{} are not runs of consecutive axes of the jit's "
        "mesh {} (each of its axes must be a product of the mesh's, in order)",
        view.to_string(), mesh_.to_string());
  std::vector<AxisType> types = axis_types();  // size-1 axes (in no run) keep theirs
  for (int v = 0; v < view.num_axes(); ++v)
    for (const std::string& a : (*runs)[v]) types[mesh_.axis_index(a)] = view.axis_type(v);
  begin_axis_types(std::move(types));
  open_types_.back().view = true;
  views_open_.push_back({static_cast<int>(b_.program().instrs().size()), -1, view});
  return ok_status();
}

void Trace::end_view() {
  if (views_open_.empty()) return;
  ViewRange r = std::move(views_open_.back());
  views_open_.pop_back();
  r.end = static_cast<int>(b_.program().instrs().size());
  if (r.begin < r.end) views_.push_back(std::move(r));
  end_axis_types();
}

const Mesh* Trace::view_of(ValueId v) const {
  if (v == kNoValue) return nullptr;
  const int p = b_.info(v).producer;
  if (p < 0) return nullptr;
  const ViewRange* in = nullptr;
  auto consider = [&](const ViewRange& r) {
    const int end = r.end < 0 ? static_cast<int>(b_.program().instrs().size()) : r.end;
    if (r.begin <= p && p < end && (!in || r.begin > in->begin)) in = &r;
  };
  for (const ViewRange& r : views_) consider(r);
  for (const ViewRange& r : views_open_) consider(r);
  return in ? &in->view : nullptr;
}

PartitionSpec Trace::from_view(const Mesh& view, const PartitionSpec& spec) const {
  const auto runs = view_runs(mesh_, view);
  auto map = [&](const std::vector<std::string>& axes) {
    std::vector<std::string> out;
    for (const std::string& a : axes) {
      const int v = view.axis_index(a);
      if (v < 0 || !runs) out.push_back(a);  // not the view's: check_spec names it
      else out.insert(out.end(), (*runs)[v].begin(), (*runs)[v].end());
    }
    return out;
  };
  std::vector<PartitionSpec::DimAxes> dims;
  for (const auto& d : spec.dims()) dims.push_back(map(d));
  return PartitionSpec(std::move(dims), map(spec.partial()));
}

std::optional<PartitionSpec> Trace::to_view(const Mesh& view, const PartitionSpec& spec) const {
  const auto runs = view_runs(mesh_, view);
  if (!runs) return std::nullopt;
  auto map = [&](const std::vector<std::string>& axes) -> std::optional<std::vector<std::string>> {
    std::vector<std::string> out;
    for (size_t i = 0; i < axes.size();) {
      int v = 0;
      while (v < view.num_axes() && ((*runs)[v].empty() || (*runs)[v][0] != axes[i])) ++v;
      if (v == view.num_axes() || i + (*runs)[v].size() > axes.size() ||
          !std::equal((*runs)[v].begin(), (*runs)[v].end(), axes.begin() + i))
        return std::nullopt;
      out.push_back(view.axis_names()[v]);
      i += (*runs)[v].size();
    }
    return out;
  };
  std::vector<PartitionSpec::DimAxes> dims;
  for (const auto& d : spec.dims()) {
    auto m = map(d);
    if (!m) return std::nullopt;
    dims.push_back(std::move(*m));
  }
  auto partial = map(spec.partial());
  if (!partial) return std::nullopt;
  return PartitionSpec(std::move(dims), std::move(*partial));
}

CompileOptions Trace::compile_options() const {
  CompileOptions o;
  o.rules = rules();
  o.shard_mode = shard_mode_of(mesh_);
  o.axis_type_regions = type_regions_;
  const int end = static_cast<int>(b_.program().instrs().size());
  for (const OpenAxisTypes& open : open_types_)
    if (open.begin < end) o.axis_type_regions.push_back({open.begin, end, open.types});
  return o;
}

// ---- Compiled ---------------------------------------------------------------------------

namespace {

// A result the per-device program might not produce with an instruction of its own (an
// argument, a sharding constraint that moves nothing, a value returned twice) gets a copy
// (copy_value), so it can be written into its output buffer.
bool needs_copy(const Program& p, ValueId v, std::span<const ValueId> earlier) {
  const ValueInfo& info = p.value(v);
  if (info.producer < 0) return true;
  if (p.instrs()[static_cast<size_t>(info.producer)].kind == OpKind::kConstraint) return true;
  for (ValueId e : earlier)
    if (e == v) return true;
  return false;
}

// A copy of v made by an instruction: scale by 1 for floats; for int32 (no arithmetic kernels)
// a one-input concatenation, the data-movement op that takes any dtype.
ValueId copy_value(Builder& b, ValueId v) {
  if (b.info(v).dtype != DType::kI32) return b.scale(v, 1.0);
  const Shape s = b.info(v).shape;
  if (s.rank() > 0) return b.concat({v}, 0);
  return b.reshape(b.concat({b.reshape(v, Shape{1})}, 0), Shape{});
}

// True when argument `arg` (or a sharding constraint of it, which shares its buffer) is read
// at or after the instruction producing v: v cannot be written into the argument's buffer
// before that read, so it is copied there after it (engine/compile's in-place rule).
bool read_at_or_after(const Program& p, int arg, ValueId v) {
  const int producer = p.value(v).producer;
  std::vector<bool> shares(p.values().size(), false);
  shares[p.args()[arg].value] = true;
  int last = -1;
  for (size_t i = 0; i < p.instrs().size(); ++i) {
    const Instr& in = p.instrs()[i];
    bool reads = false;
    for (ValueId x : in.inputs) reads = reads || shares[x];
    if (!reads) continue;
    last = static_cast<int>(i);
    if (in.kind == OpKind::kConstraint)
      for (ValueId o : in.outputs) shares[o] = true;
  }
  return producer < 0 || last >= producer;
}

// P() and P(None, None) place a rank-2 value alike.
bool same_layout(const PartitionSpec& a, const PartitionSpec& b, int rank) {
  for (int d = 0; d < rank; ++d)
    if (a.dim_or_none(d) != b.dim_or_none(d)) return false;
  return a.rank() <= rank && b.rank() <= rank;
}

// jax.jit's donate_argnums: per result, the first donated input not yet used whose shape,
// dtype and sharding equal the result's, or -1 (XLA matches donated buffers the same way).
// input_args: per input (Trace::input order), its program argument.
std::vector<int> match_donors(const Program& p, const std::vector<int>& input_args,
                              const std::vector<ValueId>& results,
                              const std::vector<PartitionSpec>& specs,
                              const std::vector<int>& donate, const Mesh& mesh) {
  std::vector<int> donor(results.size(), -1);
  std::vector<bool> used(donate.size(), false);
  for (size_t i = 0; i < results.size(); ++i) {
    const ValueInfo& r = p.value(results[i]);
    for (size_t d = 0; d < donate.size() && donor[i] < 0; ++d) {
      if (used[d] || donate[d] < 0 || donate[d] >= static_cast<int>(input_args.size())) continue;
      const int arg = input_args[static_cast<size_t>(donate[d])];
      const ValueInfo& a = p.value(p.args()[arg].value);
      if (a.shape == r.shape && a.dtype == r.dtype && a.spec &&
          same_layout(remove_size_one_mesh_axis(*a.spec, mesh), specs[i], r.shape.rank()))
        donor[i] = donate[d], used[d] = true;
    }
  }
  return donor;
}

// The global shape of per-device blocks `local` placed by `spec` (shard_map's results).
Shape global_of(const Mesh& mesh, const PartitionSpec& spec, const Shape& local) {
  std::vector<int64_t> d = local.dims();
  for (int i = 0; i < spec.rank() && i < local.rank(); ++i) d[i] *= axes_size(mesh, spec.dim(i));
  return Shape(std::move(d));
}

Result<PartitionSpec> checked_out_spec(const Mesh& mesh, const PartitionSpec& s, const Shape& shape,
                                       size_t index, std::string_view what) {
  if (s.rank() > shape.rank())
    return invalid_argument("{}[{}]: {} is longer than the result's rank {} (shape {})", what,
                            index + 1, s.to_string(), shape.rank(), shape.to_string());
  NamedSharding ns{mesh, s};
  Status st = ns.validate(shape);
  if (!st.ok()) return invalid_argument("{}[{}]: {}", what, index + 1, st.message());
  return s;
}

}  // namespace

Result<std::shared_ptr<Compiled>> Compiled::create(Trace tr, std::vector<ValueId> results,
                                                   const CompileRequest& req) {
  std::shared_ptr<Compiled> c(new Compiled());
  c->name_ = req.fn_name;
  c->mesh_ = tr.mesh();
  c->sources_ = tr.sources_;
  c->manual_ = tr.manual();
  const CompileOptions options = tr.compile_options();
  c->type_regions_ = options.axis_type_regions;
  Builder& b = tr.builder();
  // Every value the program holds (not only what reshape or broadcast_to made) fits the
  // runtime's rank limit (engine/base/limits.h).
  for (const ValueInfo& v : b.program().values())
    ENG_RETURN_IF_ERROR(check_rank(v.shape.rank(), fmt::format("{}: {}", req.fn_name,
                                                               v.name.empty() ? "a value" : v.name),
                                   v.shape.to_string()));
  for (const Argument& a : b.program().args())
    if (c->sources_[&a - b.program().args().data()].kind == Trace::Source::Kind::kInput)
      c->in_shardings_.push_back({c->mesh_, *b.info(a.value).spec});
  {
    Builder shown = b;  // the user's program, as lower() prints it
    for (size_t i = 0; i < results.size(); ++i) shown.output(results[i], fmt::format("out{}", i));
    c->traced_ = std::move(shown).finish();
  }
  if (c->manual_)  // for make_jaxpr's types (engine/frontend/jaxpr.h)
    for (size_t v = 0; v < c->traced_.values().size(); ++v)
      c->vma_.push_back(tr.vma_bits(static_cast<ValueId>(v)));
  ENG_ASSIGN_OR_RETURN(std::vector<PartitionSpec> specs, c->result_specs(tr, results, req));
  for (PartitionSpec& s : specs) s = remove_size_one_mesh_axis(s, c->mesh_);
  // use_abstract_mesh: a result made under a view is typed, and placed, on the view's mesh.
  c->out_views_.assign(results.size(), std::nullopt);
  for (size_t i = 0; i < results.size() && !c->manual_; ++i) {
    const Mesh* view = tr.view_of(results[i]);
    if (!view) continue;
    std::optional<PartitionSpec> s = tr.to_view(*view, specs[i]);
    if (!s)
      return invalid_argument(
          "{}: result {} is laid out {} on {}, which {} cannot express (a dim split over part of "
          "one of its axes)",
          req.fn_name, i + 1, specs[i].to_string(), c->mesh_.to_string(), view->to_string());
    c->out_views_[i] = NamedSharding{*view, *s};
  }
  std::vector<int> input_args;  // per input: its program argument
  for (size_t k = 0; k < c->sources_.size(); ++k)
    if (c->sources_[k].kind == Trace::Source::Kind::kInput)
      input_args.push_back(static_cast<int>(k));
  c->out_donor_ = c->manual_
                      ? std::vector<int>(results.size(), -1)
                      : match_donors(b.program(), input_args, results, specs, req.donate, c->mesh_);
  std::vector<int> aliased(results.size(), -1);  // per result: the argument it updates
  for (size_t i = 0; i < results.size(); ++i) {
    const int donor = c->out_donor_[i];
    const int donor_arg = donor < 0 ? -1 : input_args[static_cast<size_t>(donor)];
    // A donated input returned as it is needs nothing: its buffer already holds the result.
    const bool donor_itself = donor >= 0 && results[i] == b.program().args()[donor_arg].value;
    if (!donor_itself && (needs_copy(b.program(), results[i], std::span(results.data(), i)) ||
                          (donor >= 0 && read_at_or_after(b.program(), donor_arg, results[i]))))
      results[i] = copy_value(b, results[i]);
    const ValueInfo r = b.info(results[i]);  // a copy: argument() below grows the values
    const PartitionSpec& s = specs[i];
    c->out_shardings_.push_back({c->mesh_, s});
    c->out_shapes_.push_back(c->manual_ ? global_of(c->mesh_, s, r.shape) : r.shape);
    if (donor >= 0) {
      aliased[i] = donor_arg;
      continue;
    }
    ValueId buf = b.argument(fmt::format("out{}", i), r.shape, r.dtype, {}, ArgRole::kBatch);
    b.mutable_info(buf).spec = s;
    aliased[i] = static_cast<int>(c->sources_.size());
    c->sources_.push_back({Trace::Source::Kind::kOutBuffer, static_cast<int>(i), nullptr, 0});
  }
  for (size_t i = 0; i < results.size(); ++i)
    b.output(results[i], fmt::format("out{}", i), aliased[i]);
  c->program_ = std::move(b).finish();
  // jax.remat: the backward recomputes the regions' values their policies did not save.
  if (tr.remat().regions > 0 && tr.remat().forward_end >= 0)
    c->program_ = rematerialize(c->program_, tr.remat().forward_end, remat_policy_of_regions());
  ENG_RETURN_IF_ERROR(c->compile(req, options));
  return c;
}

// The results' shardings: the caller's, else what the partitioner propagates (a manual
// trace has no propagation: its out_specs say how the per-device blocks form each result).
Result<std::vector<PartitionSpec>> Compiled::result_specs(const Trace& tr,
                                                          const std::vector<ValueId>& results,
                                                          const CompileRequest& req) const {
  std::vector<PartitionSpec> specs(results.size());
  if (mesh_.num_devices() > 1 && !manual_) {
    CompileOptions opts;
    opts.rules = tr.rules();
    opts.shard_mode = shard_mode_of(mesh_);
    opts.axis_type_regions = type_regions_;
    ENG_ASSIGN_OR_RETURN(Partitioned part, partition(traced_, mesh_, opts));
    for (size_t i = 0; i < results.size(); ++i)
      specs[i] = PartitionSpec(part.value_specs[results[i]].dims());  // partial sums reduced
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const bool given = i < req.out_specs.size() && req.out_specs[i];
    if (!given && manual_)
      return invalid_argument("shard_map: out_specs gives {} specs for {} results",
                              std::min(req.out_specs.size(), results.size() - 1), results.size());
    if (!given) continue;
    const Shape& shape = tr.info(results[i]).shape;  // manual: the block's (local) shape
    const PartitionSpec& want = *req.out_specs[i];
    ENG_ASSIGN_OR_RETURN(
        specs[i], checked_out_spec(mesh_, want, manual_ ? global_of(mesh_, want, shape) : shape, i,
                                   manual_ ? "out_specs" : "out_shardings"));
  }
  return specs;
}

Compiled::~Compiled() {
  if (!exe_) return;
  if (std::shared_ptr<Runtime> rt = find_runtime(mesh_)) rt->release(*exe_);
}

Status Compiled::compile(const CompileRequest& req, const CompileOptions& options) {
  CompileOptions opts = options;
  opts.manual = manual_;
  jit_ = std::make_unique<Jit>(req.fn_name, &program_, mesh_, opts, JitOptions{});
  std::vector<NamedSharding> shardings;
  for (const Argument& a : program_.args())
    shardings.push_back({mesh_, *program_.value(a.value).spec});
  ENG_ASSIGN_OR_RETURN(CompileEvent ev,
                       jit_->lookup(signature_of(program_, shardings), req.fn_name));
  exe_ = ev.exe;
  info_ = jit_->last();
  return ok_status();
}

Result<std::vector<ArrayRef>> Compiled::run(std::span<const ArrayRef> inputs) const {
  std::shared_ptr<Runtime> rt = runtime_for(mesh_);
  std::vector<ArrayRef> held;  // scalars and output buffers made for this call
  std::vector<std::shared_ptr<DeviceArray>> outs(out_shardings_.size());
  std::vector<Array*> args;
  for (size_t k = 0; k < sources_.size(); ++k) {
    const Trace::Source& s = sources_[k];
    const ValueInfo& v = program_.value(program_.args()[k].value);
    switch (s.kind) {
      case Trace::Source::Kind::kInput: {
        if (s.index >= static_cast<int>(inputs.size()))
          return invalid_argument("{}: {} inputs given, the program takes {}", name_, inputs.size(),
                                  in_shardings_.size());
        const DeviceArray& a = *inputs[s.index];
        const Shape want = manual_ ? a.array.sharding.local_shape(a.array.shape) : a.array.shape;
        if (want != v.shape || a.array.dtype != v.dtype || !(a.array.sharding.mesh == mesh_))
          return invalid_argument("{}: input {} is {} on {}, the program was traced for {}", name_,
                                  s.index + 1,
                                  typeof_string(dtype_name(a.array.dtype), a.array.shape,
                                                &a.array.sharding.spec, &a.array.sharding.mesh),
                                  a.array.sharding.mesh.to_string(), v.type_string(&mesh_));
        held.push_back(inputs[s.index]);
        break;
      }
      case Trace::Source::Kind::kCaptured:
        held.push_back(s.captured);
        break;
      case Trace::Source::Kind::kScalar: {
        ENG_ASSIGN_OR_RETURN(ArrayRef a,
                             device_put({s.scalar}, Shape{}, v.dtype, {mesh_, PartitionSpec()}));
        held.push_back(std::move(a));
        break;
      }
      case Trace::Source::Kind::kOutBuffer: {
        auto o = std::make_shared<DeviceArray>();
        o->rt = rt;
        ENG_ASSIGN_OR_RETURN(
            o->array, rt->zeros(out_shapes_[s.index], v.dtype, out_shardings_[s.index], "result"));
        outs[s.index] = o;
        held.push_back(o);
        break;
      }
    }
    args.push_back(const_cast<Array*>(&held.back()->array));  // outputs update their buffers
  }
  for (size_t i = 0; i < outs.size(); ++i)  // donated: the input's buffers hold the result
    if (out_donor_[i] >= 0) outs[i] = std::const_pointer_cast<DeviceArray>(inputs[out_donor_[i]]);
  std::vector<Array> none;
  ENG_RETURN_IF_ERROR(rt->execute(*exe_, args, none));
  return std::vector<ArrayRef>(outs.begin(), outs.end());
}

}  // namespace eng::frontend
