// engine/compile/spmd_shape_rules.cpp: the partitioner's rules for reshape, attention, shifts, repeat_kv,
// sharding constraints, embedding lookups and the losses (spmd_partitioner.h).
#include "engine/compile/spmd_partitioner.h"

namespace eng::spmd_internal {

// Row-major reshape: non-unit dims are matched in groups of equal products; a group keeps
// the sharding of its major input dim on its major output dim when that divides (the
// members' contiguous chunks are the same), else the group is gathered. A merge into one dim
// also keeps the axes of the dims after leading dims held one row per member; a split of one
// dim passes its axes, major first, to the output dims they divide.
Status Partitioner::reshape(const Instr& in) {
  const ValueId x = in.inputs[0], y = in.outputs[0];
  const Shape& xs = gv(x).shape;
  const Shape& ys = gv(y).shape;
  Dims sd = dims_only(spec_[x]).dims(), od(ys.rank());
  int i = 0, j = 0;
  auto skip_units = [](const Shape& s, int k) {
    while (k < s.rank() && s[k] == 1) ++k;
    return k;
  };
  for (int k = 0; k < xs.rank(); ++k)
    if (xs[k] == 1) sd[k].clear();
  for (;;) {
    i = skip_units(xs, i);
    j = skip_units(ys, j);
    if (i >= xs.rank() || j >= ys.rank()) break;
    const int i0 = i, j0 = j;
    int64_t px = xs[i++], py = ys[j++];
    while (px != py) {
      if (px < py) px *= xs[i++];
      else py *= ys[j++];
    }
    if (j - j0 == 1 && i - i0 > 1) {  // a merge: x's dims [i0, i) -> y's dim j0
      // The merged dim keeps the axes of the leading dims held one row per member and of the
      // first dim that is not: a member's rows stay contiguous. Dims after that lose theirs.
      bool contiguous = true;
      for (int k = i0; k < i; ++k) {
        if (!contiguous) {
          sd[k].clear();
          continue;
        }
        od[j0].insert(od[j0].end(), sd[k].begin(), sd[k].end());
        contiguous = axes_size(mesh_, sd[k]) == xs[k];
      }
      continue;
    }
    if (i - i0 == 1 && j - j0 > 1) {  // a split: x's dim i0 -> y's dims [j0, j)
      // Its axes, major first, go to the leading output dims as far as each divides: an
      // output dim held one row per member passes the rest on; the first one that is not
      // ends it, and axes left over are dropped from x (gathered).
      const Axes axes = sd[i0];
      size_t a = 0;
      for (int q = j0; q < j && a < axes.size(); ++q) {
        int64_t n = 1;
        while (a < axes.size() && ys[q] % (n * mesh_.axis_size(axes[a])) == 0) {
          n *= mesh_.axis_size(axes[a]);
          od[q].push_back(axes[a++]);
        }
        if (n != ys[q]) break;
      }
      sd[i0].resize(a);
      continue;
    }
    const int64_t n = axes_size(mesh_, sd[i0]);
    for (int k = i0 + 1; k < i; ++k) sd[k].clear();
    if (n > 1 && ys[j0] % n == 0) od[j0] = sd[i0];
    else sd[i0].clear();
  }
  ENG_ASSIGN_OR_RETURN(ValueId lx, get(x, PartitionSpec(sd)));
  const PartitionSpec out(od);
  set(y, local_reshape(lx, local_shape(ys, out)), out);
  return ok_status();
}

// Attention and its grad: the factor map for the inputs present (optional segment ids).
Status Partitioner::attention(const Instr& in) {
  const bool grad = in.kind == OpKind::kAttentionGrad;
  const bool seg = in.inputs.size() == (grad ? 7u : 4u);
  if (grad) return by_factors(in, seg ? kSegAttentionGradFactors : kAttentionGradFactors);
  return by_factors(in, seg ? kSegAttentionFactors : kAttentionFactors);
}

// MaxText's _shift_right: over a dim sharded one row per member it is a collective permute
// (fill_zero) along those axes; otherwise a local shift of the whole dim.
Status Partitioner::shift(const Instr& in) {
  const ValueId x = in.inputs[0];
  const int dim = in.attrs.dim;
  Dims d = dims_only(spec_[x]).dims();
  const Axes axes = d[dim];
  if (!axes.empty() && axes_size(mesh_, axes) == gv(x).shape[dim]) {
    ENG_ASSIGN_OR_RETURN(ValueId lx, get(x, PartitionSpec(d)));
    // one row per member: the source rows are members
    set_attributed(in, permute(lx, axes, in.attrs.shift, in.attrs.start, in.attrs.size),
                   PartitionSpec(d));
    return ok_status();
  }
  d[dim].clear();
  return simple(in, {PartitionSpec(d)}, {PartitionSpec(d)}, in.attrs);
}

// Grouped-query attention's kv-head repeat (op.h) and its transpose. Batch, length and
// head_dim follow the input; partial sums pass through (both are linear). The heads dim:
// axes sharding the kv heads carry over to the query heads when the KV head count is
// divisible by their size (device r's query-head block [r*H/n, (r+1)*H/n) reads exactly
// its kv-head block [r*Hkv/n, (r+1)*Hkv/n): a local repeat, no traffic; likewise the
// transpose's groups of R query heads never straddle devices). Otherwise (e.g. 8 kv heads
// over tensor=16) the input's heads are gathered, the op runs on every head, and the
// forward's output is sliced back onto those axes when H is divisible by them (a dynamic
// slice, no traffic); the transpose's output stays whole on the heads dim.
Status Partitioner::repeat_kv(const Instr& in) {
  const ValueId x = in.inputs[0], y = in.outputs[0];
  const bool forward = in.kind == OpKind::kRepeatKv;
  const int64_t kv_heads = forward ? shp(x)[2] : shp(y)[2];
  const PartitionSpec sx = spec_[x];
  Dims d = sx.dims();
  d.resize(std::max<size_t>(d.size(), 4));
  const Axes heads = d[2];
  const int64_t n = axes_size(mesh_, heads);
  if (heads.empty() || kv_heads % n == 0) {
    const PartitionSpec s(d, sx.partial());
    return simple(in, {s}, {s}, in.attrs);
  }
  d[2].clear();
  const PartitionSpec whole_heads(d, sx.partial());
  ENG_RETURN_IF_ERROR(simple(in, {whole_heads}, {whole_heads}, in.attrs));
  if (forward && shp(y)[2] % n == 0) {
    Dims od = d;
    od[2] = heads;
    const PartitionSpec target = norm(PartitionSpec(od, sx.partial()), rank(y));
    ENG_ASSIGN_OR_RETURN(ValueId ly, reshard(local_[y], shp(y), spec_[y], target));
    set_output(y, ly, target);
  }
  return ok_status();
}

Status Partitioner::constraint(const Instr& in) {
  const ValueId x = in.inputs[0];
  const int r = rank(x);
  LogicalAxes names = in.attrs.logical;
  names.resize(r);
  if (in.attrs.raw && all_explicit_) {
    // flax's nn.with_logical_constraint under Explicit axes: an assert, size-1 axes kept.
    ENG_ASSIGN_OR_RETURN(PartitionSpec raw, logical_to_mesh_axes(names, o_.rules));
    Dims user(r);
    for (int i = 0; i < r && i < raw.rank(); ++i)
      for (const auto& a : raw.dim(i))
        if (mesh_.has_axis(a)) user[i].push_back(a);
    const PartitionSpec have = spec_[x];
    if (!(PartitionSpec(user) == have))
      return invalid_argument(
          "`with_sharding_constraint` acts as an assert when all axes of mesh are of type "
          "`Explicit`. The array sharding: {} did not match the sharding provided: {}. Please use "
          "`jax.sharding.reshard` to shard your input to the sharding you want.",
          have.to_string(), PartitionSpec(user).to_string());
    set(in.outputs[0], local_[x], have);
    return ok_status();
  }
  // MaxText's maybe_shard_with_logical (and auto-mode with_sharding_constraint): a reshard.
  Result<PartitionSpec> target = logical_to_mesh(names, mesh_, o_.rules);
  if (!target.ok())
    return invalid_argument("sharding constraint {}: {}", logical_axes_string(names),
                            target.status().message());
  PartitionSpec t = norm(*target, r);
  if (in.attrs.raw && explicit_)  // some axes Explicit: with_sharding_constraint names Auto ones
    for (const Axes& axes : t.dims())
      for (const std::string& a : axes)
        if (contains(explicit_axes_, a)) {
          std::vector<AxisType> types;
          for (const std::string& n : mesh_.axis_names())
            types.push_back(contains(explicit_axes_, n) ? AxisType::kExplicit : AxisType::kAuto);
          return invalid_argument(
              "The spec of NamedSharding passed to with_sharding_constraint can only refer to "
              "Auto axes of the mesh. Got spec={} and mesh=Abstract{}. You probably meant to use "
              "`reshard` API?",
              t.to_string(), mesh_.with_axis_types(std::move(types)).to_string());
        }
  if (!in.attrs.mesh_axes.empty()) {  // `drop` (pipeline_fsdp_ag_once): those axes gathered
    Dims d = t.dims();
    for (Axes& axes : d)
      std::erase_if(axes, [&](const std::string& a) {
        return std::find(in.attrs.mesh_axes.begin(), in.attrs.mesh_axes.end(), a) !=
               in.attrs.mesh_axes.end();
      });
    t = norm(PartitionSpec(d), r);
  }
  if (o_.skip_trivial_specs && t.is_replicated()) {
    set(in.outputs[0], local_[x], spec_[x]);
    return ok_status();
  }
  ENG_RETURN_IF_ERROR(check_divisible(shp(x), t,
                                      fmt::format("sharding constraint {}", logical_axes_string(names))));
  ENG_ASSIGN_OR_RETURN(ValueId lv, get(x, t));
  set(in.outputs[0], lv, t);
  return ok_status();
}

// Gather with the table's vocab dim sharded (docs/sharding.md): each device looks up the ids in
// its own block (offset = the block's first row; zeros elsewhere) -> partial over the vocab
// axes; the consumer reduces it (all-reduce, or reduce-scatter onto the activation's target).
// The embed dim is made whole (the rows follow the ids); vocab axes that the ids use, or a
// vmapped lookup, fall back to gathering the table.
Status Partitioner::embed_lookup(const Instr& in) {
  const ValueId table = in.inputs[0], ids = in.inputs[1];
  const Dims idd = dims_only(spec_[ids]).dims();
  Dims out = idd;
  out.push_back({});
  const Axes av = dims_only(spec_[table]).dim_or_none(0);
  if (av.empty() || !vm_.empty() || !disjoint(av, all_axes(idd, 0, static_cast<int>(idd.size()))))
    return simple(in, {PartitionSpec(), PartitionSpec(idd)}, {PartitionSpec(out)}, in.attrs);
  const int64_t block = shp(table)[0] / axes_size(mesh_, av);
  ENG_ASSIGN_OR_RETURN(ValueId lt, get(table, PartitionSpec(Dims{av, {}})));
  ENG_ASSIGN_OR_RETURN(ValueId li, get(ids, PartitionSpec(idd)));
  Axes partial = av;
  sort_mesh_order(partial, mesh_);
  emit(in, {lt, li, axis_index(av, block)}, in.attrs, {PartitionSpec(out, partial)});
  return ok_status();
}

// Cross-entropy over a sharded vocab (docs/sharding.md "Op rules"): local row max ->
// all-reduce max -> local sum of exp(x - max) and the target logit where the target falls in
// the block (partial) -> all-reduce sum -> lse = max + log(sum), xent = lse - target logit.
// The backward computes its block locally with the global lse (5-input grad, op.h).
Status Partitioner::vocab_parallel_xent(const Instr& in) {
  const auto& x = in.inputs;
  const int r = rank(x[0]);
  const Dims d = dims_only(spec_[x[0]]).dims();
  const Axes av = d[r - 1];
  const PartitionSpec l(d), rows(Dims(d.begin(), d.end() - 1));
  const int64_t block = shp(x[0])[r - 1] / axes_size(mesh_, av);
  ENG_ASSIGN_OR_RETURN(ValueId logits, get(x[0], l));
  ENG_ASSIGN_OR_RETURN(ValueId targets, get(x[1], rows));
  const ValueId offset = axis_index(av, block);
  if (in.kind == OpKind::kSoftmaxCrossEntropyGrad) {
    ENG_ASSIGN_OR_RETURN(ValueId lse, get(x[2], rows));
    ENG_ASSIGN_OR_RETURN(ValueId dxent, get(x[3], rows));
    emit(in, {logits, targets, lse, dxent, offset}, in.attrs, {l});
    return ok_status();
  }
  const ValueId mx = all_reduce(b_.emit(OpKind::kVocabMax, {logits})[0], av, true);
  const std::vector<ValueId> st = b_.emit(OpKind::kVocabStats, {logits, mx, targets, offset});
  const ValueId sumexp = all_reduce(st[0], av, false), picked = all_reduce(st[1], av, false);
  const std::vector<ValueId> o = b_.emit(OpKind::kXentFromStats, {mx, sumexp, picked});
  set_output(in.outputs[0], o[0], rows);
  set_output(in.outputs[1], o[1], rows);
  return ok_status();
}

Status Partitioner::masked_mean_loss(const Instr& in) {
  const PartitionSpec sx = dims_only(spec_[in.inputs[0]]);
  if (shards(sx, mesh_) == 1)
    return simple(in, {sx, sx}, {PartitionSpec(), PartitionSpec()}, in.attrs);
  // Sharded rows: masked sum and weights are partial; reduce both, then divide (MaxText's
  // sum(xent * mask) / (sum(mask) + 1e-8) over the GLOBAL batch).
  ENG_ASSIGN_OR_RETURN(ValueId xent, get(in.inputs[0], sx));
  ENG_ASSIGN_OR_RETURN(ValueId seg, get(in.inputs[1], sx));
  OpAttrs a = in.attrs;
  a.unnormalized = true;
  std::vector<ValueId> o = b_.emit(OpKind::kMaskedMeanLoss, {xent, seg}, a);
  const Axes partial = all_axes(sx.dims(), 0, sx.rank());
  const PartitionSpec p(Dims{}, partial);
  ENG_ASSIGN_OR_RETURN(ValueId sum, reshard(o[0], Shape{}, normalize(p, 0, mesh_), PartitionSpec()));
  ENG_ASSIGN_OR_RETURN(ValueId w, reshard(o[1], Shape{}, normalize(p, 0, mesh_), PartitionSpec()));
  ValueId loss = b_.emit(OpKind::kSafeDivide, {sum, w})[0];
  set(in.outputs[0], loss, PartitionSpec());
  set(in.outputs[1], w, PartitionSpec());
  return ok_status();
}


}  // namespace eng::spmd_internal
