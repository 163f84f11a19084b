// tests/frontend/session_test.cpp: the front-end's runtime without Lua (engine/frontend/
// session.h, jit_function.h, creation.h, array_print.h): eager dispatch and its LRU cache, the
// trace stack, a jitted function's cache and miss explanation, grad's gradients, donation,
// vmap's plan, the PRNG, NumPy's printing and shard_map's varying manual axes (vma.h).
#include "engine/frontend/session.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/frontend/array_print.h"
#include "engine/frontend/creation.h"
#include "engine/frontend/jit_function.h"
#include "engine/frontend/manual.h"
#include "engine/frontend/vma.h"
#include "engine/frontend/numpy.h"
#include "engine/frontend/numpy_jax.h"

#include "tests/frontend/test_values.h"

namespace eng::frontend {
namespace {

using test::put;

std::vector<double> values(const Value& v) { return fetch(*v.data).value(); }

const OpFn kAdd = [](Trace& tr, std::span<const ValueId> in) -> Result<std::vector<ValueId>> {
  ENG_ASSIGN_OR_RETURN(ValueId y, np::add(tr, in[0], in[1]));
  return std::vector<ValueId>{y};
};

TEST(Session, EagerApplyCompilesOncePerSignature) {
  Session s;
  const Value x = put({1, 2, 3}, Shape{3});
  Result<std::vector<Value>> y = s.apply("add", "", {Operand{&x}, Operand{&x}}, kAdd);
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_EQ(values((*y)[0]), (std::vector<double>{2, 4, 6}));
  // A number operand takes the arrays' dtype: x + 10.
  y = s.apply("add", "", {Operand{&x}, Operand{nullptr, 10}}, kAdd);
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_EQ(values((*y)[0]), (std::vector<double>{11, 12, 13}));
  EXPECT_EQ(s.eager_compiles(), 2);
  // The same signatures again: no compile; a new shape: one.
  ASSERT_TRUE(s.apply("add", "", {Operand{&x}, Operand{&x}}, kAdd).ok());
  ASSERT_TRUE(s.apply("add", "", {Operand{&x}, Operand{nullptr, 1}}, kAdd).ok());
  EXPECT_EQ(s.eager_compiles(), 2);
  const Value z = put({1, 2}, Shape{2});
  ASSERT_TRUE(s.apply("add", "", {Operand{&z}, Operand{&z}}, kAdd).ok());
  EXPECT_EQ(s.eager_compiles(), 3);
  EXPECT_EQ(s.eager_cache_size(), 3u);
}

// jnp.allclose: numpy's asymmetric test |a - b| <= atol + rtol * |b|, broadcast; NaN never close.
TEST(Session, AllcloseIsNumpysTest) {
  Session s;
  // rtol and atol are static arguments: they key the eager cache (as the Lua binding's do).
  auto close = [&](std::vector<double> a, std::vector<double> b, double rtol, double atol) {
    const Value x = put(a, Shape{static_cast<int64_t>(a.size())});
    const Value y = put(b, Shape{static_cast<int64_t>(b.size())});
    Result<std::vector<Value>> r = s.apply(
        "allclose", std::to_string(rtol) + " " + std::to_string(atol), {Operand{&x}, Operand{&y}},
        [=](Trace& tr, std::span<const ValueId> in) -> Result<std::vector<ValueId>> {
          ENG_ASSIGN_OR_RETURN(ValueId v, np::allclose(tr, in[0], in[1], rtol, atol));
          return std::vector<ValueId>{v};
        });
    EXPECT_TRUE(r.ok()) << r.status().message();
    return values((*r)[0]).at(0);
  };
  EXPECT_EQ(close({1, 2, 3}, {1, 2, 3}, 0, 0), 1);
  EXPECT_EQ(close({1, 2, 3.5}, {1, 2, 3}, 0, 0.25), 0);
  EXPECT_EQ(close({1, 2, 3.5}, {1, 2, 3}, 0, 0.5), 1);
  // Asymmetric: the tolerance scales with b's magnitude, not a's.
  EXPECT_EQ(close({0}, {10}, 0.5, 0), 0);
  EXPECT_EQ(close({10}, {19}, 0.5, 0), 1);
  EXPECT_EQ(close({19}, {10}, 0.5, 0), 0);
  EXPECT_EQ(close({1, std::nan("")}, {1, std::nan("")}, 1, 1), 0);
  EXPECT_EQ(close({1, 2}, {1}, 0, 0), 0);  // broadcast: 2 vs 1
}

TEST(Session, EagerCacheEvictsTheLeastRecentlyUsed) {
  Session s;
  const Value x = put({1}, Shape{1});
  auto call = [&](int k) {  // a distinct signature per k (its static arguments)
    ASSERT_TRUE(s.apply("add", std::to_string(k), {Operand{&x}, Operand{&x}}, kAdd).ok());
  };
  for (size_t k = 0; k < Session::kEagerCacheCapacity; ++k) call(static_cast<int>(k));
  EXPECT_EQ(s.eager_compiles(), static_cast<int64_t>(Session::kEagerCacheCapacity));
  call(0);   // used again: now the most recent
  call(-1);  // full: evicts signature 1, the least recently used
  EXPECT_EQ(s.eager_cache_size(), Session::kEagerCacheCapacity);
  const int64_t before = s.eager_compiles();
  call(0);
  EXPECT_EQ(s.eager_compiles(), before);  // kept
  call(1);
  EXPECT_EQ(s.eager_compiles(), before + 1);  // evicted, compiled again
}

TEST(Session, ErrorsNameTheOpAndBothValues) {
  Session s;
  const Value a = put({1, 2}, Shape{2});
  const Value b = put({1, 2}, Shape{2}, *Mesh::create({"X"}, {2}), PartitionSpec({{"X"}}));
  Result<std::vector<Value>> r = s.apply("add", "", {Operand{&a}, Operand{&b}}, kAdd);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("add: operands live on different meshes"), std::string::npos)
      << r.status().message();
  Value gone = a;
  gone.deleted = true;
  r = s.apply("add", "", {Operand{&gone}, Operand{&a}}, kAdd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "add: Array has been deleted with shape=float32[2].");
}

TEST(Session, TracesIntoTheActiveTraceAndRejectsStaleTracers) {
  Session s;
  auto tr = std::make_shared<Trace>("f", Mesh());
  const Value x = Value::tracer(tr, tr->input("x", Shape{2}, DType::kF32, PartitionSpec()));
  const Value c = put({5, 6}, Shape{2});
  // No active trace: x's trace has returned.
  Result<std::vector<Value>> r = s.apply("add", "", {Operand{&x}, Operand{&c}}, kAdd);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Encountered an unexpected tracer"), std::string::npos);
  s.push_trace(tr);
  EXPECT_EQ(s.trace_depth(), 1);
  r = s.apply("add", "", {Operand{&x}, Operand{&c}}, kAdd);  // c is captured (a constvar)
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE((*r)[0].is_tracer());
  EXPECT_EQ((*r)[0].trace, tr);
  s.pop_trace();
  EXPECT_EQ(s.active_trace(), nullptr);
  EXPECT_EQ(s.eager_compiles(), 0);
}

TEST(Session, CurrentMesh) {
  Session s;
  EXPECT_EQ(s.mesh().num_devices(), 1);
  s.set_mesh(*Mesh::create({"X"}, {4}));
  EXPECT_EQ(s.mesh().num_devices(), 4);
  s.set_mesh(std::nullopt);
  EXPECT_EQ(s.mesh().num_devices(), 1);
}

// jax.sharding.get_abstract_mesh: the current mesh's axes and type; inside a trace, the
// trace's (an auto_axes trace has Auto axes; a shard_map body Manual ones).
TEST(Session, AbstractMeshIsTheInnermostScopes) {
  Session s;
  EXPECT_EQ(s.abstract_mesh().to_string(), "AbstractMesh()");
  s.set_mesh(*Mesh::create({"X", "Y"}, {2, 4}, AxisType::kExplicit));
  EXPECT_EQ(s.abstract_mesh().to_string(),
            "AbstractMesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit))");
  s.push_trace(std::make_shared<Trace>("auto", *Mesh::create({"X", "Y"}, {2, 4}, AxisType::kAuto)));
  EXPECT_EQ(s.abstract_mesh().to_string(), "AbstractMesh('X': 2, 'Y': 4, axis_types=(Auto, Auto))");
  s.push_trace(std::make_shared<Trace>("body", *Mesh::create({"i"}, {2}), /*manual=*/true));
  const AbstractMesh m = s.abstract_mesh();
  EXPECT_EQ(m.to_string(), "AbstractMesh('i': 2, axis_types=(Manual,))");
  EXPECT_EQ(m.axis_names, (std::vector<std::string>{"i"}));
  s.pop_trace();
  s.pop_trace();
  EXPECT_EQ(s.abstract_mesh().axis_types, (std::vector<std::string>{"Explicit", "Explicit"}));
}

// f(x) = sum(x * x) traced by hand, as the shell's Lua call would.
CallArgs one_arg(const Value& x) {
  CallArgs a;
  a.leaves = {x};
  a.trees = {Tree{}};
  a.first_leaf = {0};
  a.leaf_in_specs = {std::nullopt};
  a.leaf_types = {fmt::format("f32[{}]", x.shape.to_list())};
  a.types = a.leaf_types;
  a.mesh = x.mesh();
  return a;
}

Result<JitEntry> trace_sum_squares(const JitFunction& f, const CallArgs& args) {
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<Trace> tr, f.new_trace(args.mesh, 0));
  ENG_ASSIGN_OR_RETURN(TracedArgs t, f.trace_inputs(*tr, args, {"x"}));
  const ValueId x = t.leaf_values[0];
  ENG_ASSIGN_OR_RETURN(ValueId xx, np::multiply(*tr, x, x));
  ENG_ASSIGN_OR_RETURN(ValueId y, np::sum(*tr, xx, std::nullopt));
  return f.compile(*tr, Outputs{{y}, {Tree{}}}, t, args);
}

TEST(JitFunction, CachesPerSignatureAndExplainsMisses) {
  JitOptions o;
  o.name = "f";
  JitFunction f(o);
  int traced = 0;
  auto lookup = [&](const Value& x) {
    const CallArgs args = one_arg(x);
    return f.lookup(
        args, [] { return std::vector<std::string>{"x"}; },
        [&]() -> Result<JitEntry> {
          ++traced;
          return trace_sum_squares(f, args);
        });
  };
  const Value x3 = put({1, 2, 3}, Shape{3});
  Result<JitLookup> l = lookup(x3);
  ASSERT_TRUE(l.ok()) << l.status().message();
  ASSERT_EQ(l->event.records.size(), 1u);
  const CacheRecord* r = &l->event.records[0];
  EXPECT_TRUE(l->write);
  EXPECT_FALSE(l->event.tracing_hit);
  EXPECT_EQ(r->outcome, "miss");
  EXPECT_EQ(r->level, "tracing");
  EXPECT_EQ(r->reason_kind, "never_seen");
  EXPECT_EQ(r->reason_text, "TRACING CACHE MISS at f:\n  never seen function:\n    f");
  EXPECT_EQ(l->event.exe, l->entry->compiled->executable());
  Result<std::vector<ArrayRef>> out = f.run(*l->entry->compiled, one_arg(x3), nullptr);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(fetch(*(*out)[0]).value(), (std::vector<double>{14}));
  // A hit: the first one has a row, later ones none.
  l = lookup(x3);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->event.tracing_hit && l->write);
  EXPECT_EQ(l->event.records[0].outcome, "hit");
  l = lookup(x3);
  EXPECT_TRUE(l->event.tracing_hit && !l->write);
  EXPECT_EQ(traced, 1);
  // A new shape: a miss naming the argument, both types.
  l = lookup(put({1, 2}, Shape{2}));
  ASSERT_TRUE(l.ok());
  r = &l->event.records[0];
  EXPECT_EQ(r->reason_kind, "types");
  EXPECT_NE(r->reason_text.find("* at args[0] (x), now f32[2] and before f32[3]"),
            std::string::npos)
      << r->reason_text;
  EXPECT_EQ(f.compiles(), 2);
  EXPECT_EQ(f.entries(), 2u);
  EXPECT_EQ(f.last_miss(), r->reason_text);
}

// One jit cache, one miss explanation: a jitted function's lookup keys by compile's CacheKey
// and explains by compile's explain_miss (engine/compile/cache.h), as the trainer's step does.
TEST(JitFunction, KeysAndExplainsAsCompileDoes) {
  JitOptions o;
  o.name = "g";
  JitFunction f(o);
  auto args_of = [](const Value& x, const std::string& mode) {
    CallArgs a = one_arg(x);  // g(x, mode) with mode static
    a.trees.push_back(std::nullopt);
    a.first_leaf.push_back(1);
    a.types.push_back("static string=" + mode);
    return a;
  };
  auto lookup = [&](const CallArgs& args) {
    return f.lookup(
        args, [] { return std::vector<std::string>{"x", "mode"}; },
        [&]() -> Result<JitEntry> { return trace_sum_squares(f, args); });
  };
  const Value x = put({1, 2, 3}, Shape{3});
  CallArgs scale = args_of(x, "scale");
  const CacheKey key = f.cache_key(scale);
  EXPECT_EQ(key.fn_name, "g");
  EXPECT_EQ(key.module_name(), "jit_g");
  EXPECT_EQ(key.signature.to_string(), "f32[3], static string=scale");
  EXPECT_NE(key.hex(), f.cache_key(args_of(x, "shift")).hex());  // a static value is keyed
  Result<JitLookup> l = lookup(scale);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->event.key, key);
  // The explanation is explain_miss's over the seen keys, arguments named by parameter.
  ASSERT_EQ(f.seen().size(), 1u);
  EXPECT_EQ(f.seen()[0].signature.args[1].name, "args[1] (mode)");
  l = lookup(args_of(x, "shift"));
  ASSERT_TRUE(l.ok()) << l.status().message();
  const CacheRecord& types = l->event.records[0];
  EXPECT_EQ(types.reason_kind, "types");
  EXPECT_EQ(types.reason_text,
            explain_miss(f.seen()[1], std::span<const CacheKey>(f.seen().data(), 1), "g").text);
  EXPECT_NE(types.reason_text.find("* at args[1] (mode), now static string=shift and before "
                                   "static string=scale"),
            std::string::npos)
      << types.reason_text;
  EXPECT_TRUE(types.with_signature);
  // Donation is context: the same types donated miss with the option named.
  CallArgs donated = scale;
  donated.donated = {0};
  l = lookup(donated);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->event.records[0].reason_kind, "context");
  EXPECT_NE(l->event.records[0].reason_text.find(
                "* donate_argnums differs: now 0 and before (unset)"),
            std::string::npos)
      << l->event.records[0].reason_text;
  // So is the mesh: the same type on another mesh.
  const Value on_x = put({1, 2, 3}, Shape{3}, *Mesh::create({"X"}, {2}));
  l = lookup(args_of(on_x, "scale"));
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->event.records[0].reason_kind, "context");
  EXPECT_NE(l->event.records[0].reason_text.find("* mesh differs: now Mesh('X': 2"),
            std::string::npos)
      << l->event.records[0].reason_text;
  EXPECT_EQ(f.last_miss(), l->event.records[0].reason_text);
  EXPECT_EQ(f.compiles(), 4);
  // Each is a hit now.
  for (const CallArgs& a : {scale, args_of(x, "shift"), donated, args_of(on_x, "scale")}) {
    l = lookup(a);
    ASSERT_TRUE(l.ok());
    EXPECT_TRUE(l->event.tracing_hit);
  }
  EXPECT_EQ(f.compiles(), 4);
}

TEST(JitFunction, GradOfSumOfSquares) {
  JitOptions o;
  o.name = "f";
  o.transform = Transform::kValueAndGrad;
  JitFunction f(o);
  const Value x = put({1, -2, 3}, Shape{3});
  const CallArgs args = one_arg(x);
  Result<JitEntry> e = trace_sum_squares(f, args);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->out_tree.size(), 2u);  // the loss, then the gradient
  Result<std::vector<ArrayRef>> out = f.run(*e->compiled, args, nullptr);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(fetch(*(*out)[0]).value(), (std::vector<double>{14}));
  EXPECT_EQ(fetch(*(*out)[1]).value(), (std::vector<double>{2, -4, 6}));  // 2x
}

TEST(JitFunction, GradNeedsAScalarLoss) {
  JitOptions o;
  o.name = "f";
  o.transform = Transform::kGrad;
  JitFunction f(o);
  const CallArgs args = one_arg(put({1, 2}, Shape{2}));
  std::shared_ptr<Trace> tr = f.new_trace(args.mesh, 0).value();
  TracedArgs t = f.trace_inputs(*tr, args, {"x"}).value();
  Result<Outputs> g = f.grad_outputs(*tr, Outputs{{t.leaf_values[0]}, {Tree{}}}, t);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "grad: Gradient only defined for scalar-output functions. Output had shape: (2,)");
}

TEST(JitFunction, DonationHandsOverAnUnsharedBuffer) {
  JitOptions o;
  o.name = "inc";
  o.donate_argnums = {0};
  JitFunction f(o);
  Value x = put({1, 2}, Shape{2});
  CallArgs args = one_arg(x);
  args.donated = {0};
  std::shared_ptr<Trace> tr = f.new_trace(args.mesh, 0).value();
  TracedArgs t = f.trace_inputs(*tr, args, {"x"}).value();
  const ValueId y = np::add(*tr, t.leaf_values[0], tr->scalar(1, DType::kF32)).value();
  Result<JitEntry> e = f.compile(*tr, Outputs{{y}, {Tree{}}}, t, args);
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_EQ(e->compiled->donors(), (std::vector<int>{0}));
  // x is held by another Value too (captured elsewhere): copied, not consumed.
  Value other = x;
  std::vector<ArrayRef> consumed;
  Result<std::vector<ArrayRef>> out = f.run(*e->compiled, args, &consumed);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_TRUE(consumed.empty());
  EXPECT_EQ(values(x), (std::vector<double>{1, 2}));
  EXPECT_EQ(fetch(*(*out)[0]).value(), (std::vector<double>{2, 3}));
  // Held only by the caller's Value and the call's leaf copy: handed over, updated in place.
  other = Value();
  out = f.run(*e->compiled, args, &consumed);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(consumed.size(), 1u);
  EXPECT_EQ(consumed[0], (*out)[0]);
  EXPECT_EQ(values(x), (std::vector<double>{2, 3}));
}

TEST(JitFunction, VmapPlanChecksSizes) {
  JitOptions o;
  o.name = "g";
  o.transform = Transform::kVmap;
  JitFunction f(o);
  auto tr = std::make_shared<Trace>("g", Mesh());
  TracedArgs t;
  t.trees = {Tree{}, Tree{}};
  t.first_leaf = {0, 1};
  t.leaf_values = {tr->input("a", Shape{4, 3}, DType::kF32, PartitionSpec()),
                   tr->input("b", Shape{5, 3}, DType::kF32, PartitionSpec())};
  Result<VmapPlan> p = f.vmap_plan(tr, t);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("vmap got inconsistent sizes"), std::string::npos);
  f.options().in_axes = {0, std::nullopt};  // b not mapped
  p = f.vmap_plan(tr, t);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->batch, 4);
  EXPECT_EQ(p->one->info(p->inner.leaf_values[0]).shape, Shape{3});
  EXPECT_EQ(p->one->info(p->inner.leaf_values[1]).shape, (Shape{5, 3}));
}

TEST(JitFunction, ModeAxesSwitchTheirAxes) {
  JitOptions o;
  o.name = "h";
  o.mode = ShardMode::kAuto;
  o.mode_axes = {"X"};
  JitFunction f(o);
  const Mesh mesh = *Mesh::create({"X", "Y"}, {2, 2}, AxisType::kExplicit);
  // auto_axes(axes='X'): Auto over X, still Explicit over Y (JAX's mixed abstract mesh).
  Result<std::shared_ptr<Trace>> tr = f.new_trace(mesh, 0);
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  EXPECT_EQ((*tr)->mesh().to_string(), "Mesh('X': 2, 'Y': 2, axis_types=(Auto, Explicit))");
  EXPECT_EQ(shard_mode_of((*tr)->mesh()), ShardMode::kAuto);
  f.options().mode_axes = {"Y", "X"};
  tr = f.new_trace(mesh, 0);
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  EXPECT_TRUE((*tr)->mesh().all_axes(AxisType::kAuto));
  f.options().mode_axes = {"Z"};
  tr = f.new_trace(mesh, 0);
  ASSERT_FALSE(tr.ok());
  EXPECT_NE(tr.status().message().find("h: auto_axes: axes names 'Z', which is not an axis of"),
            std::string::npos);
  f.options().mode_axes = {"X"};
  EXPECT_FALSE(f.new_trace(mesh, kMaxTraceDepth).ok());  // recursion through jit
  // Inside a trace: the types switch for the instructions traced until end_axis_types, and
  // the partitioner gets them as a region.
  Trace outer("f", mesh);
  const ValueId x = outer.input("x", Shape{4, 4}, DType::kF32, PartitionSpec({{"X"}, {"Y"}}));
  ASSERT_TRUE(f.begin_switch(outer).value());
  EXPECT_EQ(outer.axis_types(), (std::vector<AxisType>{AxisType::kAuto, AxisType::kExplicit}));
  outer.builder().scale(x, 2.0);
  outer.end_axis_types();
  EXPECT_EQ(outer.axis_types(), mesh.axis_types());
  const CompileOptions co = outer.compile_options();
  ASSERT_EQ(co.axis_type_regions.size(), 1u);
  EXPECT_EQ(co.axis_type_regions[0].begin, 0);
  EXPECT_EQ(co.axis_type_regions[0].end, 1);
  // A switch that changes nothing: auto_axes over Auto axes calls f as it is (no out_sharding).
  Trace auto_tr("f", mesh.with_axis_types({AxisType::kAuto, AxisType::kAuto}));
  EXPECT_FALSE(f.begin_switch(auto_tr).value());
}

TEST(Mesh, PerAxisTypes) {
  const Mesh m =
      *Mesh::create({"X", "Y"}, {2, 4}, std::vector<AxisType>{AxisType::kAuto, AxisType::kExplicit});
  EXPECT_EQ(m.to_string(), "Mesh('X': 2, 'Y': 4, axis_types=(Auto, Explicit))");
  EXPECT_EQ(m.axes_of_type(AxisType::kExplicit), std::vector<std::string>{"Y"});
  EXPECT_FALSE(m.all_axes(AxisType::kExplicit));
  EXPECT_TRUE(m.any_axis(AxisType::kExplicit));
  EXPECT_NE(m.hash(), m.with_axis_types({AxisType::kExplicit, AxisType::kAuto}).hash());
  EXPECT_NE(m, m.with_axis_types({AxisType::kExplicit, AxisType::kExplicit}));
  // The type names the Explicit axes only.
  const NamedSharding s = type_sharding({m, PartitionSpec({{"X"}, {"Y"}})}, m.axis_types());
  EXPECT_EQ(s.spec.to_string(), "P(None, 'Y')");
  EXPECT_FALSE(Mesh::create({"X"}, {2}, std::vector<AxisType>{}).ok());
}

TEST(Creation, ArangeLinspaceAndPrng) {
  EXPECT_EQ(arange_values(0, 5, 2, "arange").value(), (std::vector<double>{0, 2, 4}));
  EXPECT_EQ(arange_values(3, 0, -1, "arange").value(), (std::vector<double>{3, 2, 1}));
  EXPECT_EQ(arange_values(0, 1, 0, "sl.arange").status().message(),
            "sl.arange: step must be finite and nonzero");
  EXPECT_EQ(linspace_values(0, 1, 5, true), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(linspace_values(0, 1, 4, false), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  // The same key gives the same values; split keys differ from each other.
  const PrngKey k = prng_key(0);
  EXPECT_EQ(random_values(k, 8, true), random_values(k, 8, true));
  const std::vector<PrngKey> ks = prng_split(k, 2, "split").value();
  EXPECT_NE(ks[0].seed, ks[1].seed);
  for (double u : random_values(ks[0], 1000, false)) {
    EXPECT_GT(u, 0);
    EXPECT_LT(u, 1);
  }
  EXPECT_FALSE(prng_split(k, 0, "split").ok());
}

TEST(Creation, ShardBlockIsTheDevicesOwnBlock) {
  const Mesh mesh = *Mesh::create({"X"}, {2});
  const Value x = put({1, 2, 3, 4}, Shape{4}, mesh, PartitionSpec({{"X"}}));
  Result<ArrayRef> b = shard_block(*x.data, 1);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(fetch(**b).value(), (std::vector<double>{3, 4}));
}

TEST(ArrayPrint, AsNumPyPrints) {
  EXPECT_EQ(array_repr(put({1, 2.5, 3, 4}, Shape{2, 2})).value(),
            "Array([[1. , 2.5],\n       [3. , 4. ]], dtype=float32)");
  auto tr = std::make_shared<Trace>("f", Mesh());
  const Value t = Value::tracer(tr, tr->input("x", Shape{8, 4}, DType::kF32, PartitionSpec()));
  EXPECT_EQ(array_repr(t).value(), "Traced<f32[8,4]>with<DynamicJaxprTrace>");
}

// shard_map's varying manual axes (vma.h): the rules per op, pcast, the out_specs check.
TEST(Vma, RulesPcastAndOutSpecsCheck) {
  const Mesh mesh = Mesh::create({"i", "j"}, {2, 2}, AxisType::kExplicit).value();
  Trace tr("f", mesh, /*manual=*/true);
  const ValueId x = tr.input("x", Shape{2, 4}, DType::kF32, PartitionSpec{{"i"}, {"j"}});
  const ValueId w = tr.input("w", Shape{4}, DType::kF32, PartitionSpec());
  auto names = [&](ValueId v) { return vma_names(mesh, tr.vma_bits(v)); };
  using V = std::vector<std::string>;
  EXPECT_EQ(names(x), (V{"i", "j"}));
  EXPECT_EQ(names(w), V{});
  const ValueId xw = np::multiply(tr, x, w).value();  // the union
  EXPECT_EQ(names(xw), (V{"i", "j"}));
  const ValueId s = np::psum(tr, xw, {"j"}).value();  // psum: invariant over j
  EXPECT_EQ(names(s), V{"i"});
  EXPECT_EQ(vma_string(mesh, tr.vma_bits(s)), "{V:i}");
  EXPECT_EQ(vma_string(mesh, tr.vma_bits(x)), "{V:(i,j)}");
  const ValueId g = np::all_gather(tr, w, {"j"}, 0, true).value();  // all_gather: varying
  EXPECT_EQ(names(g), V{"j"});
  EXPECT_EQ(names(np::axis_index(tr, "j").value()), V{"j"});
  EXPECT_EQ(names(manual::pmean(tr, s, {"i"}).value()), V{});
  // pcast: invariant -> varying only.
  const ValueId wv = pcast(tr, w, {"i"}, "varying").value();
  EXPECT_EQ(names(wv), V{"i"});
  EXPECT_NE(pcast(tr, wv, {"i"}, "varying").status().message().find(
                "Unsupported pcast from=varying, to='varying'"),
            std::string::npos);
  EXPECT_NE(pcast(tr, x, {"i"}, "sideways").status().message().find("Got unexpected `to` value"),
            std::string::npos);
  // out_specs must name every axis a result varies over.
  EXPECT_TRUE(check_out_vma(tr, "f", {s}, {PartitionSpec{{"i"}}}).ok());
  const Status bad = check_out_vma(tr, "f", {s}, {PartitionSpec()});
  // (two axes unmentioned: JAX's "only varying across" text; one: "replicated across", which
  // tests/frontend/tutorial_shard_map_test.lua's cell 20 checks)
  EXPECT_NE(bad.message().find("out_specs is P() which implies that the corresponding output "
                               "value is only varying across mesh axes {} and not {i}, but it "
                               "was inferred to be possibly varying over {i}"),
            std::string::npos)
      << bad.message();
  // Two failing results: bullets, each named by its index.
  const Status two = check_out_vma(tr, "f", {s, x}, {PartitionSpec(), PartitionSpec{{"i"}}});
  EXPECT_NE(two.message().find("* out_specs[0] is P() which implies"), std::string::npos)
      << two.message();
  EXPECT_NE(two.message().find("* out_specs[1] is P('i') which implies that the corresponding "
                               "output value is replicated across mesh axis 'j'"),
            std::string::npos)
      << two.message();
  // Outside shard_map nothing varies.
  Trace plain("g", mesh);
  EXPECT_EQ(plain.vma_bits(plain.input("x", Shape{2}, DType::kF32, PartitionSpec())), 0u);
}

// grad in a manual trace: d/dw of psum_j(sum(x * w)) for an invariant w is the sum over the
// j-group of x's blocks (the cotangent of w, varying from the multiply, is psummed over j),
// and d/dx is w on every block. Run on 4 devices against the values in double.
TEST(Vma, GradientSumsInvariantOperandsCotangents) {
  const Mesh mesh = Mesh::create({"i", "j"}, {2, 2}, AxisType::kExplicit).value();
  Trace tr("f", mesh, /*manual=*/true);
  const ValueId x = tr.input("x", Shape{1, 3}, DType::kF32, PartitionSpec{{"i"}, {"j"}});
  const ValueId w = tr.input("w", Shape{3}, DType::kF32, PartitionSpec());
  ValueId loss = np::sum(tr, np::multiply(tr, x, w).value(), std::nullopt).value();
  loss = np::psum(tr, loss, {"i", "j"}).value();
  const std::vector<ValueId> grads = gradients("grad", tr, loss, {x, w}).value();
  int all_reduces = 0;
  for (const Instr& in : tr.builder().program().instrs())
    all_reduces += in.kind == OpKind::kAllReduce;
  EXPECT_EQ(all_reduces, 2);  // the loss's, and w's cotangent over (i, j)
  const std::shared_ptr<Compiled> c =
      Compiled::create(std::move(tr), {loss, grads[0], grads[1]},
                       {"f", {PartitionSpec(), PartitionSpec{{"i"}, {"j"}}, PartitionSpec()}})
          .value();
  std::vector<double> xv(12), wv = {0.5, -1.25, 2.0};
  for (int k = 0; k < 12; ++k) xv[k] = std::sin(1.0 + k);
  const ArrayRef xa =
      device_put(xv, Shape{2, 6}, DType::kF32, {mesh, PartitionSpec{{"i"}, {"j"}}}).value();
  const ArrayRef wa = device_put(wv, Shape{3}, DType::kF32, {mesh, PartitionSpec()}).value();
  const std::vector<ArrayRef> out = c->run(std::vector<ArrayRef>{xa, wa}).value();
  // x (2, 6) in blocks (1, 3): block (a, b) is row a, columns 3b..3b+2; the loss sums them all
  // times w.
  double want_loss = 0;
  std::vector<double> want_w(3, 0.0);
  for (int r = 0; r < 2; ++r)
    for (int col = 0; col < 6; ++col) {
      want_loss += xv[r * 6 + col] * wv[col % 3];
      want_w[col % 3] += xv[r * 6 + col];
    }
  EXPECT_NEAR(fetch(*out[0]).value()[0], want_loss, 1e-5);
  const std::vector<double> gx = fetch(*out[1]).value(), gw = fetch(*out[2]).value();
  for (int k = 0; k < 12; ++k) EXPECT_NEAR(gx[k], wv[k % 3], 1e-6) << k;
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(gw[k], want_w[k], 1e-5) << k;
}

}  // namespace
}  // namespace eng::frontend
