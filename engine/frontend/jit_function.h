// engine/frontend/jit_function.h: a transformed function's runtime (sl.jit, sl.grad,
// sl.value_and_grad, sl.vmap, sl.auto_axes / sl.explicit_axes, sl.shard_map; issue 29;
// docs/frontend.md): its options, its per-signature cache with JAX's miss explanation, the
// inputs of a trace, grad's and vmap's rewriting of the traced outputs, compiling with
// donation, and running with donated buffers handed over. No Lua here: the caller (the shell)
// reads the arguments into a CallArgs and traces the user's function when lookup asks it to.
//
//   JitFunction f(opts);
//   ENG_ASSIGN_OR_RETURN(JitLookup l, f.lookup(args, names, [&] { return trace_it(); }));
//   if (l.event.write) record_jit_compile(store, l.event);   // engine/train/run_recorder.h
//   ENG_ASSIGN_OR_RETURN(auto outs, f.run(*l.entry->compiled, args, &consumed));
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/compile/jit.h"
#include "engine/frontend/session.h"
#include "engine/frontend/vmap.h"

namespace eng::frontend {

// sl.jit inside sl.jit nests traces; deeper than this is recursion through jit.
inline constexpr int kMaxTraceDepth = 32;

// ---- pytrees: a function's arguments and results may be arrays or nested tables of them, as
// JAX's functions take lists and dicts of arrays. A Tree is the structure; the arrays are its
// leaves, in a fixed order: integer keys ascending, then string keys sorted (JAX sorts dict
// keys too).
struct TreeKey {
  bool is_int = true;
  int64_t i = 0;  // is_int
  std::string s;  // otherwise
  bool operator==(const TreeKey&) const = default;
  std::string to_string() const;  // "[2]" or ".w"
};

struct Tree {
  bool leaf = true;                            // an array; else a table of kids
  std::vector<std::pair<TreeKey, Tree>> kids;  // in leaf order
  bool operator==(const Tree&) const = default;
  int num_leaves() const;
};

// Per leaf, its name: `prefix` plus the key path ("params.w", "xs[2]").
void leaf_paths(const Tree& tree, const std::string& prefix, std::vector<std::string>* out);
// The tree's type for signatures and errors: "{w=f32[4,4], b=f32[4]}" from per-leaf types.
std::string tree_type(const Tree& tree, const std::vector<std::string>& leaf_types, int* next);

// An in_specs entry given as a table of specs (JAX's pytree prefix: `(P(), P('stages'), P())`
// for an argument of three parts): a spec for each subtree.
struct SpecTree {
  std::optional<PartitionSpec> spec;  // set: this spec for the whole subtree
  std::vector<TreeKey> keys;          // else per key, keys[i] for kids[i] (two vectors: a
  std::vector<SpecTree> kids;         // vector of pairs of an incomplete type fails in clang)
};
// Per leaf of `tree`, its spec from `prefix`; an error naming `what` where `prefix` is not a
// prefix of `tree` (a key missing on either side, a spec table over an Array).
Result<std::vector<PartitionSpec>> prefix_specs(const SpecTree& prefix, const Tree& tree,
                                                const std::string& what);

// ---- a transformed function ---------------------------------------------------------------

enum class Transform : uint8_t { kNone, kGrad, kValueAndGrad, kVmap };

struct JitOptions {
  std::string name;  // the function's name, or "fn"
  std::vector<std::optional<PartitionSpec>> in_specs;
  std::map<int, SpecTree> in_spec_trees;  // positions whose in_specs entry is a table of specs
  std::vector<std::optional<PartitionSpec>> out_specs;
  std::set<int> static_argnums;  // 0-based, as JAX's (negative: from the end)
  std::set<int> donate_argnums;  // jax.jit's donate_argnums
  Transform transform = Transform::kNone;
  std::vector<int> argnums = {0};           // grad: which inputs (0-based)
  bool has_aux = false;                     // grad: f returns (loss, aux)
  std::vector<std::optional<int>> in_axes;  // vmap: per argument (nullopt: not mapped)
  std::optional<ShardMode> mode;            // sl.auto_axes / sl.explicit_axes: the mode inside
  std::vector<std::string> mode_axes;       // ... the axes they name (empty: all)
  bool manual = false;  // sl.shard_map: f sees per-device blocks (of in_specs) on `mesh`
  Mesh mesh;
  bool context_mesh = false;  // shard_map without mesh: the caller's sl.set_mesh mesh at each call
  // shard_map: called on concrete arrays it runs eagerly (eager_manual.h), as JAX's; sl.jit of
  // it sets this: one program, compiled per signature.
  bool jitted = false;
};

// One call's arguments, read by the caller.
struct CallArgs {
  std::vector<Value> leaves;                                // the array leaves, in order
  std::vector<std::optional<Tree>> trees;                   // per position; nullopt: static
  std::vector<int> first_leaf;                              // per position: its first leaf
  std::vector<std::optional<PartitionSpec>> leaf_in_specs;  // per leaf: in_shardings'
  std::vector<std::string> leaf_types;                      // per leaf: "f32[8@X,16]"
  std::vector<std::string> types;                           // per position: the signature entry
  std::set<int> donated;                                    // positions (donate_argnums, resolved)
  Mesh mesh;
};

// The function's arguments inside a trace: per position its tree (nullopt: static, or not an
// array of this trace) and the traced value of each leaf.
struct TracedArgs {
  std::vector<std::optional<Tree>> trees;
  std::vector<int> first_leaf;
  std::vector<ValueId> leaf_values;
};

// The traced outputs of a function: values and their structure per returned value.
struct Outputs {
  std::vector<ValueId> values;
  std::vector<Tree> tree;
};

// One compiled signature.
struct JitEntry {
  std::shared_ptr<Compiled> compiled;
  std::vector<Tree> out_tree;  // per returned value: its structure over the results
};

// What a lookup did: compile's CompileEvent (engine/compile/jit.h), so a jitted function and
// the trainer's step share one cache key, one miss explanation and one row writer. Its key is
// the tracing key (JitFunction::cache_key); records[0] is the tracing level's hit, or its miss
// with explain_miss's explanation (and the compile time); exe is the signature's executable.
struct JitLookup {
  const JitEntry* entry = nullptr;  // valid until the next lookup
  // A `compilations` row is due: every miss, and the first hit of each signature (a row per
  // call would cost a transaction per call).
  bool write = false;
  CompileEvent event;
};

// vmap's one-example trace: the leaves mapped at in_axes 0 lose their batch dim; replay it
// batched into the outer trace with replay_batched(*one, results, outer, inputs, batch, name).
struct VmapPlan {
  std::shared_ptr<Trace> one;
  TracedArgs inner;
  std::vector<BatchedInput> inputs;
  int64_t batch = 0;
};

class JitFunction {
 public:
  explicit JitFunction(JitOptions options) : opts_(std::move(options)) {}
  const JitOptions& options() const { return opts_; }
  JitOptions& options() { return opts_; }
  const std::string& name() const { return opts_.name; }

  // The most signatures kept compiled; the least recently used goes first beyond it.
  static constexpr size_t kCapacity = 256;

  // The tracing cache key of a call: compile's CacheKey (engine/compile/cache.h) under the
  // function's name, with the call's mesh, donated positions as its options
  // ("donate_argnums=0,2") and one argument per position named "args[i]", typed as the
  // signature writes it (ArgType::type_text: an array's or a pytree's types, or a static
  // value). No program digest: the program is what a miss traces.
  CacheKey cache_key(const CallArgs& args) const;

  // The compiled signature of this call: from the cache, or made by trace_and_compile (called
  // only on a miss), which is then explained by explain_miss against the signatures compiled
  // before, each argument named "args[i] (name)" by param_names (called only on a miss).
  Result<JitLookup> lookup(const CallArgs& args,
                           const std::function<std::vector<std::string>()>& param_names,
                           const std::function<Result<JitEntry>()>& trace_and_compile);

  // The trace a call is recorded into: on args_mesh, or for auto_axes / explicit_axes on the
  // same mesh with their axes switched (switched_types). Errors: depth past kMaxTraceDepth
  // (recursion through jit), switched_types'.
  Result<std::shared_ptr<Trace>> new_trace(const Mesh& args_mesh, int depth) const;
  // auto_axes / explicit_axes: the axis types f runs under, from the types in scope on mesh:
  // the axes named by `axes` (all when none) switched to Auto / Explicit (JAX's
  // _get_new_mesh). Errors: an axis the mesh lacks; a Manual axis (inside shard_map).
  Result<std::vector<AxisType>> switched_types(const Mesh& mesh,
                                               const std::vector<AxisType>& in_scope) const;
  // auto_axes / explicit_axes called inside trace tr (JAX's: no program of their own): begins
  // the switched types on tr (the caller ends them after f) and says whether auto_axes'
  // out_sharding applies: JAX's auto_axes over axes that are all Auto already calls f as it
  // is. A value crossing in (explicit_axes' in_sharding) or out (auto_axes' out_sharding) is
  // resharded by switch_reshard: before begin or after end, each in the right types.
  Result<bool> begin_switch(Trace& tr) const;
  Result<ValueId> switch_reshard(Trace& tr, ValueId v, const PartitionSpec& spec) const;
  // The program inputs of a trace: one per array leaf, named by leaf_names, with
  // in_shardings' spec (shard_map: in_specs', each device's block).
  Result<TracedArgs> trace_inputs(Trace& tr, const CallArgs& args,
                                  const std::vector<std::string>& leaf_names) const;
  // grad / value_and_grad: the loss (and aux) f returned, then d(loss)/d(args at argnums),
  // each structured as its argument.
  Result<Outputs> grad_outputs(Trace& tr, const Outputs& f_out, const TracedArgs& args) const;
  // vmap: checks in_axes and the mapped sizes, and makes the one-example trace.
  Result<VmapPlan> vmap_plan(const std::shared_ptr<Trace>& tr, const TracedArgs& targs) const;
  // Finishes a traced call (grad's outputs appended) and compiles it, donating the donated
  // positions' leaves (a program the in-place rule refuses compiles without donation).
  Result<JitEntry> compile(Trace& tr, Outputs outs, const TracedArgs& targs,
                           const CallArgs& args) const;
  // Runs c on the call's leaves. A donated leaf is handed over when only its own front-end
  // Value holds it (`consumed` gets it: the caller deletes that Value); one held elsewhere too
  // is copied first, so nobody else sees its buffers change.
  Result<std::vector<ArrayRef>> run(const Compiled& c, const CallArgs& args,
                                    std::vector<ArrayRef>* consumed) const;

  // grad of a shard_map'd function: out_specs of grad_outputs' results (gradients by their
  // arguments' in_specs).
  std::vector<std::optional<PartitionSpec>> grad_out_specs(const CallArgs& args) const;

  int64_t compiles() const { return static_cast<int64_t>(seen_.size()); }
  size_t entries() const { return cache_.size(); }
  // The keys compiled so far, in order, arguments named as explanations name them.
  const std::vector<CacheKey>& seen() const { return seen_; }
  const std::string& last_miss() const { return last_miss_; }
  const char* mode_fn() const;  // "auto_axes" or "explicit_axes"

 private:

  struct Slot {
    CacheKey key;
    JitEntry entry;
    uint64_t used = 0;  // the lookup count at its last use (LRU)
  };
  JitOptions opts_;
  std::map<std::string, Slot> cache_;  // CacheKey::hex() -> its compiled signature
  uint64_t lookups_ = 0;
  std::vector<CacheKey> seen_;        // per compile, in order (what misses are explained by)
  std::string last_miss_;             // the last miss's explanation
  std::set<std::string> hit_logged_;  // keys (hex) whose first hit has a row
};

// `a` placed by `to` on another mesh of the same devices (auto_axes' and explicit_axes'
// arguments and results: a runtime belongs to one mesh, axis types included), via the host.
Result<ArrayRef> transfer(const ArrayRef& a, const NamedSharding& to);

// d(loss)/d(each of wrt) appended to tr's program, each typed like its input; zeros where the
// loss does not depend on it. `what` names the caller in errors (an op without a VJP).
Result<std::vector<ValueId>> gradients(std::string_view what, Trace& tr, ValueId loss,
                                       const std::vector<ValueId>& wrt);

}  // namespace eng::frontend
