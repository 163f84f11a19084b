// engine/frontend/scan.cpp: jax.lax.scan, unrolled (scan.h).
#include "engine/frontend/scan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "engine/frontend/numpy_jax.h"
#include "engine/frontend/vma.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::frontend {

namespace {

void paths_at(const Tree& t, const std::string& prefix, std::vector<std::string>* out) {
  if (t.leaf) {
    out->push_back(prefix);
    return;
  }
  for (size_t k = 0; k < t.kids.size(); ++k) {
    const TreeKey& key = t.kids[k].first;
    paths_at(t.kids[k].second,
             prefix + (key.is_int ? fmt::format("[{}]", key.i - 1) : fmt::format("['{}']", key.s)),
             out);
  }
}

// What JAX's typematch compares of a leaf: dtype, shape, varying manual axes, and on an
// Explicit mesh (outside shard_map) the sharding; `text` is JAX's str_short ("float32[3]{V:i}").
struct LeafType {
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<std::string> vma;
  std::string spec;  // Explicit mesh only
  std::string text;
  bool operator==(const LeafType& o) const {
    return dtype == o.dtype && shape == o.shape && vma == o.vma && spec == o.spec;
  }
};

// with_sharding false: the sharding is left out (a traced value's costs a partitioning of the
// program so far; scan() compares it on the first iteration only, as JAX traces the body once).
Result<LeafType> leaf_type(const Value& v, bool with_sharding = true) {
  LeafType t;
  t.dtype = v.dtype;
  t.shape = v.shape;
  t.vma = vma_of(v);
  const bool manual = v.is_tracer() && v.trace->manual();
  PartitionSpec spec;
  const bool sharded =
      with_sharding && !manual && shard_mode_of(v.mesh()) == ShardMode::kExplicit;
  if (sharded) {
    ENG_ASSIGN_OR_RETURN(NamedSharding ns, sharding_of(v));
    spec = remove_size_one_mesh_axis(ns.spec, v.mesh());
    t.spec = spec.to_string();
  }
  t.text = typeof_string(dtype_long_name(v.dtype), v.shape, sharded ? &spec : nullptr, &v.mesh()) +
           vma_string(t.vma);
  return t;
}

Result<std::vector<LeafType>> leaf_types(const std::vector<Value>& leaves, bool with_sharding = true) {
  std::vector<LeafType> out;
  for (const Value& v : leaves) {
    ENG_ASSIGN_OR_RETURN(LeafType t, leaf_type(v, with_sharding));
    out.push_back(std::move(t));
  }
  return out;
}

std::string capitalized(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

// JAX's list of differences: one sentence, or "  * a;\n  * b.\n".
std::string differences(const std::vector<std::string>& diffs) {
  if (diffs.size() == 1) return capitalized(diffs[0]) + ".\n";
  std::string out;
  for (size_t k = 0; k + 1 < diffs.size(); ++k) out += fmt::format("  * {};\n", diffs[k]);
  return out + fmt::format("  * {}.\n", diffs.back());
}

std::string tree_text(const Tree& t) {
  if (t.leaf) return "*";
  std::vector<std::string> kids;
  for (const auto& [k, kid] : t.kids)
    kids.push_back(k.is_int ? tree_text(kid) : fmt::format("'{}': {}", k.s, tree_text(kid)));
  return fmt::format("({})", fmt::join(kids, ", "));
}

std::string py_tuple(const std::vector<std::string>& names) {
  std::vector<std::string> q;
  for (const std::string& n : names) q.push_back("'" + n + "'");
  return q.size() == 1 ? fmt::format("({},)", q[0]) : fmt::format("({})", fmt::join(q, ", "));
}

// JAX's _check_carry_type (jax/_src/lax/control_flow/loops.py), for the "scan body".
Status check_carry(const ScanOptions& opts, const Tree& in_tree, const std::vector<LeafType>& in,
                   const Tree& out_tree, const std::vector<Value>& out_leaves, bool with_sharding) {
  auto component = [&](const std::string& p) {
    if (!opts.carry_name.empty())
      return p.empty() ? fmt::format("the input carry {}", opts.carry_name)
                       : fmt::format("the input carry component {}{}", opts.carry_name, p);
    return p.empty() ? std::string("the input carry") : fmt::format("the input carry at path {}", p);
  };
  if (!(in_tree == out_tree))
    return invalid_argument(
        "scan body function carry input and carry output must have the same pytree structure, "
        "but they differ:\n\nthe input tree structure is:\n{}\nthe output tree structure is:\n{}\n"
        "\nRevise the function so that the carry output has the same pytree structure as the "
        "carry input.",
        tree_text(in_tree), tree_text(out_tree));
  ENG_ASSIGN_OR_RETURN(std::vector<LeafType> out, leaf_types(out_leaves, with_sharding));
  const std::vector<std::string> paths = scan_leaf_paths(in_tree);
  std::vector<std::string> diffs, pcasts;
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k] == out[k]) continue;
    std::vector<std::string> why;
    if (in[k].dtype != out[k].dtype) why.push_back("the dtypes do not match");
    if (!(in[k].shape == out[k].shape)) why.push_back("the shapes do not match");
    if (in[k].vma != out[k].vma) why.push_back("the manual axis types do not match");
    // a sharding mismatch alone gets no ", so ..." (JAX's aval_mismatch_extra has no such case)
    std::string extra;
    if (why.size() == 1) extra = ", so " + why[0];
    if (why.size() > 1)
      extra = fmt::format(", so {}, and {}",
                          fmt::join(why.begin(), why.end() - 1, ", "), why.back());
    diffs.push_back(fmt::format("{} has type {} but the corresponding output carry component has "
                                "type {}{}",
                                component(paths[k]), in[k].text, out[k].text, extra));
    std::vector<std::string> more;  // out's varying axes that in lacks, in mesh order
    for (const std::string& a : out[k].vma)
      if (std::find(in[k].vma.begin(), in[k].vma.end(), a) == in[k].vma.end()) more.push_back(a);
    if (!more.empty())
      pcasts.push_back(fmt::format("applying `jax.lax.pcast(..., {}, to='varying')`, to the "
                                   "initial carry value corresponding to {}",
                                   py_tuple(more), component(paths[k])));
  }
  if (diffs.empty()) return ok_status();
  std::string hint;
  if (pcasts.size() == 1) hint = fmt::format("This might be fixed by {}.\n", pcasts[0]);
  if (pcasts.size() > 1) hint = "This might be fixed by:\n" + differences(pcasts);
  if (!hint.empty())
    hint += "See https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for more "
            "information.\n\n";
  return invalid_argument(
      "scan body function carry input and carry output must have equal types, but they "
      "differ:\n\n{}\n{}Revise the function so that all output types match the corresponding "
      "input types.",
      differences(diffs), hint);
}

// JAX's _infer_scan_length.
Result<int64_t> scan_length(const ScanTree& xs, std::optional<int64_t> length) {
  std::vector<int64_t> lengths;
  std::vector<std::string> specs;
  bool sharded = false;
  for (const Value& x : xs.leaves) {
    ENG_ASSIGN_OR_RETURN(LeafType t, leaf_type(x));
    if (x.shape.rank() == 0)
      return invalid_argument("scan got value with no leading axis to scan over: {}.", t.text);
    lengths.push_back(x.shape[0]);
    if (!t.spec.empty()) {
      ENG_ASSIGN_OR_RETURN(NamedSharding ns, sharding_of(x));
      specs.push_back(t.spec);
      sharded = sharded || !ns.spec.dim_or_none(0).empty();
    }
  }
  if (sharded)
    return invalid_argument("0th dimension of all xs should be replicated. Got {}",
                            fmt::join(specs, ", "));
  if (length) {
    if (*length < 0)
      return invalid_argument("scan got a negative `length` argument of {}", *length);
    for (int64_t l : lengths)
      if (l != *length)
        return invalid_argument(
            "scan got `length` argument of {} which disagrees with leading axis sizes [{}].",
            *length, fmt::join(lengths, ", "));
    return *length;
  }
  if (lengths.empty())
    return invalid_argument("scan got no values to scan over and `length` not provided.");
  for (int64_t l : lengths)
    if (l != lengths[0])
      return invalid_argument("scan got values with different leading axis sizes: {}.",
                              fmt::join(lengths, ", "));
  return lengths[0];
}

}  // namespace

std::vector<std::string> scan_leaf_paths(const Tree& tree) {
  std::vector<std::string> out;
  paths_at(tree, "", &out);
  return out;
}

Result<ScanResult> scan(Session& s, const ScanBody& body, const ScanTree& init,
                        const ScanTree& xs, const ScanOptions& opts) {
  if (opts.unroll < 0)
    return invalid_argument("`unroll` must be a `bool` or a non-negative `int`.");
  ENG_ASSIGN_OR_RETURN(const int64_t length, scan_length(xs, opts.length));
  if (length > kMaxScanLength)
    return invalid_argument(
        "scan: length {} is over {}: the scan is unrolled (no loop op), one body per iteration",
        length, kMaxScanLength);
  if (length == 0)
    return invalid_argument(
        "scan: a zero-length scan is not supported: the scan is unrolled, and with no iteration "
        "the types of ys are unknown (JAX's jax.disable_jit() mode has the same limit)");
  ENG_ASSIGN_OR_RETURN(const std::vector<LeafType> carry_types, leaf_types(init.leaves));
  // After the first iteration the types are compared without their sharding: finding a traced
  // value's costs a partitioning of the program so far (quadratic in the length otherwise), and
  // the body, traced once by JAX, gives the same shardings for the same input types.
  std::vector<LeafType> carry_types_unsharded = carry_types, y_types_unsharded;
  for (LeafType& t : carry_types_unsharded) t.spec.clear();
  ScanResult r;
  r.carry = init;
  std::vector<std::vector<Value>> ys;  // per leaf of y, per iteration
  std::vector<LeafType> y_types;
  std::vector<std::vector<Value>> slices;  // per leaf of xs: its `length` slices (one op)
  for (const Value& leaf : xs.leaves) {
    ENG_ASSIGN_OR_RETURN(
        slices.emplace_back(),
        s.apply("scan", fmt::format("unstack {}", length), {Operand{&leaf}},
                [length](Trace& tr, std::span<const ValueId> in) -> Result<std::vector<ValueId>> {
                  std::vector<ValueId> out;
                  for (int64_t i = 0; i < length; ++i)
                    out.push_back(tr.builder().index_in_dim(in[0], 0, i));
                  return out;
                }));
  }
  for (int64_t it = 0; it < length; ++it) {
    const int64_t i = opts.reverse ? length - 1 - it : it;
    ScanTree x{xs.tree, {}};
    for (const std::vector<Value>& leaf : slices) x.leaves.push_back(leaf[static_cast<size_t>(i)]);
    ENG_ASSIGN_OR_RETURN(auto out, body(r.carry, x));
    ENG_RETURN_IF_ERROR(check_carry(opts, init.tree, it == 0 ? carry_types : carry_types_unsharded,
                                    out.first.tree, out.first.leaves, it == 0));
    r.carry = std::move(out.first);
    ENG_ASSIGN_OR_RETURN(std::vector<LeafType> yt, leaf_types(out.second.leaves, it == 0));
    if (it == 0) {
      r.ys.tree = out.second.tree;
      y_types = yt;
      y_types_unsharded = yt;
      for (LeafType& t : y_types_unsharded) t.spec.clear();
      ys.resize(yt.size());
    } else if (!(out.second.tree == r.ys.tree) || !(yt == y_types_unsharded)) {
      std::vector<std::string> a, b;
      for (const LeafType& t : y_types) a.push_back(t.text);
      for (const LeafType& t : yt) b.push_back(t.text);
      return invalid_argument(
          "scan: the body's y at iteration {} is {} of types ({}), but at the first iteration "
          "it was {} of types ({}) (the scan is unrolled: each iteration must give the same "
          "types)",
          it, tree_text(out.second.tree), fmt::join(b, ", "), tree_text(r.ys.tree),
          fmt::join(a, ", "));
    }
    for (size_t k = 0; k < ys.size(); ++k) ys[k].push_back(std::move(out.second.leaves[k]));
  }
  for (std::vector<Value>& leaf : ys) {
    if (opts.reverse) std::reverse(leaf.begin(), leaf.end());
    std::vector<Operand> ops;
    for (const Value& v : leaf) ops.push_back(Operand{&v});
    ENG_ASSIGN_OR_RETURN(
        std::vector<Value> st,
        s.apply("scan", "stack 0", ops,
                [](Trace& tr, std::span<const ValueId> in) -> Result<std::vector<ValueId>> {
                  ENG_ASSIGN_OR_RETURN(
                      ValueId y, np::stack(tr, std::vector<ValueId>(in.begin(), in.end()), 0));
                  return std::vector<ValueId>{y};
                }));
    r.ys.leaves.push_back(std::move(st[0]));
  }
  return r;
}

}  // namespace eng::frontend
