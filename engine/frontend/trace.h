// engine/frontend/trace.h: users' own programs (JAX's front-end, issue 13): a Trace records
// numpy-like calls into an engine/ir Program; a Compiled is that program compiled for its
// argument shardings (cached like jax.jit) and run on a Runtime's simulated devices.
//
//   Trace tr("f", mesh);
//   ValueId x = tr.input("x", Shape{8, 4}, DType::kF32, P("X", "Y"));
//   ENG_ASSIGN_OR_RETURN(ValueId y, np::add(tr, x, x));           // engine/frontend/numpy.h
//   ENG_ASSIGN_OR_RETURN(auto c, Compiled::create(std::move(tr), {y}, {}, "f"));
//   ENG_ASSIGN_OR_RETURN(std::vector<ArrayRef> out, c->run({xa}));
//
// A program's arguments are the function's inputs, then the arrays it captured (JAX's
// constvars: concrete arrays and Lua numbers used inside a traced function), then one output
// buffer per result: each result is written in place into a buffer placed with the result's
// sharding (what the partitioner propagated, or the caller's out_shardings), because the
// engine's non-aliased outputs are replicated. lower() shows the program without them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/compile/jit.h"
#include "engine/ir/builder.h"
#include "engine/runtime/runtime.h"

namespace eng::frontend {

// The Runtime (simulated devices) of a mesh: one per distinct mesh in the process, shared by
// every array placed on it (arrays hold it, so devices outlive their buffers).
std::shared_ptr<Runtime> runtime_for(const Mesh& mesh);
// The live Runtime of a mesh, or null (never creates one).
std::shared_ptr<Runtime> find_runtime(const Mesh& mesh);

// A concrete array: its shards on the devices of `rt`. Immutable once made.
struct DeviceArray {
  std::shared_ptr<Runtime> rt;
  Array array;
};
using ArrayRef = std::shared_ptr<const DeviceArray>;

// The most values a front-end array may be staged through the host with (as doubles: 2 GiB):
// sl.zeros({2^30}) is refused with its shape instead of exhausting the machine's memory.
inline constexpr int64_t kMaxHostValues = int64_t{1} << 28;
// Ok when `shape` is within kMaxHostValues, else an error naming `what` and the shape.
Status check_host_values(const Shape& shape, std::string_view what);

// Places host values (row-major, numel of shape, as doubles) with `sharding`.
Result<ArrayRef> device_put(const std::vector<double>& host, const Shape& shape, DType dtype,
                            const NamedSharding& sharding);
// The global values of `a`, gathered from its shards.
Result<std::vector<double>> fetch(const DeviceArray& a);
// `a` re-placed with another sharding on the same mesh (through the host: device_put's path).
Result<ArrayRef> reshard_on_host(const DeviceArray& a, const NamedSharding& sharding);

class Trace {
 public:
  // manual: a shard_map body: values have per-device (local) shapes and collectives are
  // explicit (np::psum, ...); the program is compiled without SPMD partitioning.
  Trace(std::string name, Mesh mesh, bool manual = false);
  bool manual() const { return manual_; }
  // An eager shard_map call's trace (eager_manual.h): its values are concrete per-device blocks,
  // each op runs at once; nothing is recorded into it.
  bool eager() const { return eager_; }
  void set_eager() { eager_ = true; }
  const std::string& name() const { return name_; }
  const Mesh& mesh() const { return mesh_; }
  Builder& builder() { return b_; }
  const ValueInfo& info(ValueId v) const { return b_.info(v); }
  int64_t id() const { return id_; }

  // A function input (program argument in call order), sharded by `spec` on the mesh.
  ValueId input(std::string name, const Shape& shape, DType dtype, const PartitionSpec& spec);
  // A captured concrete array (a constvar), placed as it is.
  ValueId capture(ArrayRef a);
  // A captured scalar (a Lua number), replicated, of dtype.
  ValueId scalar(double value, DType dtype);
  // A constant array (np.sum's vector of ones), placed replicated at trace time.
  Result<ValueId> constant(const std::vector<double>& host, const Shape& shape, DType dtype);

  // The logical name the engine's rules resolve to `axes` on this trace's mesh ("" = None):
  // kConstraint and kMatmul's out_sharding take logical names; compile() gets rules mapping
  // each name back to its axes.
  std::string logical_name(const PartitionSpec::DimAxes& axes);
  LogicalAxisRules rules() const;

  int num_inputs() const { return num_inputs_; }

  // Where program argument k comes from, for replaying this trace into another (vmap): an
  // input's position (Trace::input order), else the captured array or the captured scalar.
  struct ArgSource {
    int input = -1;
    ArrayRef captured;
    std::optional<double> scalar;
  };
  ArgSource arg_source(int k) const;

  // The sharding the partitioner gives v in the program traced so far (an argument: its spec;
  // one device: replicated); partial sums count as reduced. What sl.typeof shows for a tracer
  // (explicit mode: shardings are part of the type) and what reductions keep.
  Result<PartitionSpec> sharding_of(ValueId v) const;

  // JAX's varying manual axes (vma) inside shard_map (engine/frontend/vma.h): the mesh axes
  // along which v may differ between devices, as a bit per mesh axis (mesh order; size-1 axes
  // never set). Derived from the program: an input varies over the axes its in_spec names,
  // captured arrays over none; ops take the union of their operands' (collectives as vma.cpp
  // says). Outside shard_map: 0.
  uint32_t vma_bits(ValueId v) const;
  // v also varies over `bits` (an input's in_spec axes; jax.lax.pcast to 'varying').
  void add_vma(ValueId v, uint32_t bits);

  // jax.remat regions traced into this program (engine/frontend/remat.h): how many, the open
  // one's scope (-1: none), and the first instruction of the backward pass (gradients(); -1:
  // not differentiated). Compiled::create rematerializes when both are set.
  struct RematState {
    int32_t regions = 0;
    int32_t open = -1;
    int forward_end = -1;
  };
  RematState& remat() { return remat_; }
  const RematState& remat() const { return remat_; }

  // jax.sharding.auto_axes / explicit_axes called inside this trace (JAX switches the abstract
  // mesh's axis types for the call; no program of its own): the axis types in scope (the
  // mesh's outside any switch), switched by begin_axis_types until the matching
  // end_axis_types. The instructions traced in between are partitioned with those types
  // (SpmdOptions::axis_type_regions): explicit-mode rules for their Explicit axes only.
  const std::vector<AxisType>& axis_types() const;
  void begin_axis_types(std::vector<AxisType> types);
  void end_axis_types();
  // How many switches and views are open; close_to(d) ends those begun after open_depth() was
  // d, innermost first (a view with end_view): a scope's end also ends what its body left open
  // (an auto_axes body's unclosed use_abstract_mesh), and ending twice does nothing.
  size_t open_depth() const { return open_types_.size(); }
  void close_to(size_t depth);
  // The partitioner's options for this trace's program: its rules, the mesh's mode, and the
  // regions of switched axis types so far (an open one ends at the last instruction).
  CompileOptions compile_options() const;

  // jax.sharding.use_abstract_mesh(view) inside this trace: until end_view, specs are named on
  // `view`, another mesh of the same devices whose axes are runs of this mesh's consecutive
  // axes (view ('A': 8) over ('X': 4, 'Y': 2): A is (X, Y); devices are row-major in both),
  // and the trace's axes take their view axis's type (begin_axis_types). The values made in
  // between are typed on the view, and so are the jit's results among them. Errors: another
  // device count, axes that do not line up.
  Status begin_view(const Mesh& view);
  void end_view();
  const Mesh* view() const { return views_open_.empty() ? nullptr : &views_open_.back().view; }
  // The view value v was made under (its producer traced in a view), or null.
  const Mesh* view_of(ValueId v) const;
  // A spec named on `view` as this mesh names it (A -> ('X', 'Y')).
  PartitionSpec from_view(const Mesh& view, const PartitionSpec& spec) const;
  // A spec of this mesh on `view`, or nullopt when a dim is split over part of a view axis.
  std::optional<PartitionSpec> to_view(const Mesh& view, const PartitionSpec& spec) const;

 private:
  friend class Compiled;
  struct Source {  // where one program argument comes from at run time
    enum class Kind : uint8_t { kInput, kCaptured, kScalar, kOutBuffer } kind;
    int index = 0;      // kInput: call position; kOutBuffer: result index
    ArrayRef captured;  // kCaptured
    double scalar = 0;  // kScalar
  };
  std::string name_;
  Mesh mesh_;
  Builder b_;
  int64_t id_;
  bool manual_ = false;
  bool eager_ = false;
  int num_inputs_ = 0;
  std::vector<Source> sources_;                            // per program argument
  std::map<std::string, PartitionSpec::DimAxes> logical_;  // logical name -> mesh axes
  std::map<ValueId, uint32_t> vma_given_;                  // inputs' and pcast's (add_vma)
  mutable std::vector<uint32_t> vma_;                      // per value, derived so far
  mutable size_t vma_instrs_ = 0;                          // instrs derived so far
  RematState remat_;
  struct OpenAxisTypes {  // a begin_axis_types not yet ended
    int begin = 0;
    std::vector<AxisType> types;
    bool view = false;  // begun by begin_view (end_view ends both)
  };
  std::vector<OpenAxisTypes> open_types_;     // innermost last
  std::vector<AxisTypeRegion> type_regions_;  // ended, in the order they ended
  struct ViewRange {  // use_abstract_mesh: instructions [begin, end) typed on view
    int begin = 0, end = -1;  // end -1: still open
    Mesh view;
  };
  std::vector<ViewRange> views_open_;  // innermost last
  std::vector<ViewRange> views_;       // ended
};

// Options a caller (sl.jit) gives a compilation.
struct CompileRequest {
  std::string fn_name;                                  // "f" (the cache key's and store's name)
  std::vector<std::optional<PartitionSpec>> out_specs;  // per result; nullopt: propagated
                                                        // (a manual trace needs every one)
  // jax.jit's donate_argnums, as input indices (Trace::input order): each donated input whose
  // shape, dtype and sharding equal a result's is updated in place as that result (the
  // program's output aliases the argument), so run() returns the input's own DeviceArray as
  // the result; its old values are gone. Inputs matching no result are not donated.
  std::vector<int> donate = {};
};

class Compiled {
 public:
  // Releases the arenas its executable holds on the mesh's runtime (an executable shared
  // with another Compiled is prepared again on its next run).
  ~Compiled();
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;
  // Finishes `tr` with `results` (values of tr) and compiles it. Errors: the partitioner's
  // (explicit-mode asserts, ambiguous matmuls, indivisible out_specs), out_specs naming axes
  // the mesh lacks or of the wrong rank.
  static Result<std::shared_ptr<Compiled>> create(Trace tr, std::vector<ValueId> results,
                                                  const CompileRequest& req);

  // Runs the program on inputs (one per Trace::input, with the shardings traced). A donated
  // input (donors()) is overwritten: its DeviceArray becomes the result it donated to, so the
  // caller must hand over an array nobody else reads (and not pass it twice).
  Result<std::vector<ArrayRef>> run(std::span<const ArrayRef> inputs) const;
  // Per result: the input index whose buffer holds it (donate_argnums), or -1.
  const std::vector<int>& donors() const { return out_donor_; }

  const Program& traced() const { return traced_; }    // the user's program (lower())
  const Program& program() const { return program_; }  // with the output buffers
  const std::shared_ptr<const Executable>& executable() const { return exe_; }
  const CompileInfo& info() const { return info_; }
  const Mesh& mesh() const { return mesh_; }
  const std::vector<NamedSharding>& out_shardings() const { return out_shardings_; }
  // Per result: the sharding it takes on its view's mesh (made under use_abstract_mesh: run()'s
  // array moves there), or nullopt.
  const std::vector<std::optional<NamedSharding>>& out_views() const { return out_views_; }
  const std::vector<NamedSharding>& in_shardings() const { return in_shardings_; }
  const std::vector<Shape>& out_shapes() const { return out_shapes_; }  // global, per result
  // A shard_map body's varying manual axes per value of traced() (vma.h's bits); else empty.
  const std::vector<uint32_t>& vma() const { return vma_; }

 private:
  Compiled() = default;
  Result<std::vector<PartitionSpec>> result_specs(const Trace& tr,
                                                  const std::vector<ValueId>& results,
                                                  const CompileRequest& req) const;
  Status compile(const CompileRequest& req, const CompileOptions& options);
  std::string name_;
  Mesh mesh_;
  Program traced_;
  Program program_;
  std::vector<Trace::Source> sources_;
  std::vector<AxisTypeRegion> type_regions_;  // the trace's (Trace::compile_options)
  std::vector<NamedSharding> in_shardings_;   // per input
  std::vector<NamedSharding> out_shardings_;  // per result
  std::vector<std::optional<NamedSharding>> out_views_;  // per result (out_views())
  std::vector<Shape> out_shapes_;             // per result: its global shape
  std::vector<int> out_donor_;                // per result: donated input index, or -1
  bool manual_ = false;                       // a shard_map body (per-device program)
  std::vector<uint32_t> vma_;                 // manual: per value of traced_
  std::unique_ptr<Jit> jit_;
  std::shared_ptr<const Executable> exe_;
  CompileInfo info_;
};

// The shard mode a mesh implies for users' programs: every axis Explicit makes explicit mode;
// otherwise the partitioner takes each axis's type from the mesh (a mixed mesh: the
// explicit-mode rules for its Explicit axes).
ShardMode shard_mode_of(const Mesh& mesh);

}  // namespace eng::frontend
