// engine/compile/spmd_factor_rules.cpp: the partitioner's factor-map rules (Shardy-style op sharding rules
// as data) and the hand-written rules of norms, losses' gradients, the optimizer, row ops,
// index ops, transpose and concat (spmd_partitioner.h).
#include "engine/compile/spmd_partitioner.h"

namespace eng::spmd_internal {

namespace {
// One operand of a factor map: its factors, "..." first if present; whole factors end in '!'.
struct FactorOperand {
  bool ellipsis = false;
  bool ellipsis_whole = false;
  std::vector<std::string> factors;
};

std::vector<FactorOperand> parse_operands(std::string_view t) {
  std::vector<FactorOperand> ops;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '(') continue;
    const size_t close = t.find(')', i);
    FactorOperand op;
    std::string_view body = t.substr(i + 1, close - i - 1);
    while (!body.empty()) {
      const size_t comma = body.find(',');
      std::string f(body.substr(0, comma));
      if (f.rfind("...", 0) == 0) {
        op.ellipsis = true;
        op.ellipsis_whole = f == "...!";
      } else {
        op.factors.push_back(f);
      }
      body = comma == std::string_view::npos ? std::string_view() : body.substr(comma + 1);
    }
    ops.push_back(op);
    i = close;
  }
  return ops;
}
}  // namespace

// Applies a factor map (see FactorMap): factor shardings from the source spec, then every
// operand's spec from its factors.
Status Partitioner::by_factors(const Instr& in, const FactorMap& map) {
  const auto& x = in.inputs;
  const std::vector<FactorOperand> ops = parse_operands(map.text);
  ENG_CHECK(ops.size() == x.size() + in.outputs.size(),
            "partition: {}'s factor map {} has {} operands", op_name(in.kind), map.text,
            ops.size());
  PartitionSpec src = dims_only(spec_[x[0]]);
  if (map.source == FactorMap::kAgree) {
    if (all_explicit_) {
      ENG_ASSIGN_OR_RETURN(src, broadcast_common(in));
    } else if (explicit_) {
      ENG_ASSIGN_OR_RETURN(src, mixed_common(in));
    } else {
      src = common(x);
    }
  }
  // The source operand (input 0) names the factors: leading dims for "...", then its own.
  const FactorOperand& first = ops[0];
  const int r0 = rank(x[0]), lead0 = r0 - static_cast<int>(first.factors.size());
  auto axes_of = [&](const std::string& f) -> Axes {
    if (f.back() == '!') return {};
    for (size_t k = 0; k < first.factors.size(); ++k)
      if (first.factors[k] == f) return src.dim_or_none(lead0 + static_cast<int>(k));
    return {};  // a factor no input carries (one_hot's depth): whole
  };
  auto spec_of = [&](size_t o, int r) {
    const FactorOperand& op = ops[o];
    const int lead = r - static_cast<int>(op.factors.size());
    Dims d(r);
    for (int i = 0; i < lead; ++i)
      if (!op.ellipsis_whole && i < lead0) d[i] = src.dim_or_none(i);
    for (size_t k = 0; k < op.factors.size(); ++k) d[lead + k] = axes_of(op.factors[k]);
    return PartitionSpec(d);
  };
  std::vector<PartitionSpec> ins, outs;
  for (size_t i = 0; i < x.size(); ++i) ins.push_back(spec_of(i, rank(x[i])));
  for (size_t o = 0; o < in.outputs.size(); ++o)
    outs.push_back(spec_of(x.size() + o, rank(in.outputs[o])));
  return simple(in, ins, outs, in.attrs);
}

Status Partitioner::rmsnorm(const Instr& in) {  // rows on dim 0 only; the normalised dim whole
  const auto& x = in.inputs;
  const PartitionSpec rep;
  const int r = rank(x[0]);
  Dims d = dims_only(spec_[x[0]]).dims();
  for (int i = 1; i < r; ++i) d[i].clear();
  const PartitionSpec tx(d), rows(Dims{d[0]});
  if (in.kind == OpKind::kRmsNorm) return simple(in, {tx, rep}, {tx, rows}, in.attrs);
  Dims ds{{}};
  const Axes partial = all_axes(d, 0, r - 1);
  return simple(in, {tx, rep, rows, tx}, {tx, PartitionSpec(ds, partial)}, in.attrs);
}

// As rmsnorm: rows on dim 0 only, the normalised dim whole; scale and bias replicated, their
// gradients partial sums over the row axes.
Status Partitioner::layernorm(const Instr& in) {
  const auto& x = in.inputs;
  const PartitionSpec rep;
  const int r = rank(x[0]);
  Dims d = dims_only(spec_[x[0]]).dims();
  for (int i = 1; i < r; ++i) d[i].clear();
  const PartitionSpec tx(d), rows(Dims{d[0]});
  if (in.kind == OpKind::kLayerNorm) return simple(in, {tx, rep, rep}, {tx, rows, rows}, in.attrs);
  const PartitionSpec partial(Dims{{}}, all_axes(d, 0, r - 1));
  return simple(in, {tx, rep, rows, rows, tx}, {tx, partial, partial}, in.attrs);
}

// bias_add: x keeps its dims' sharding (no partial sum: the bias is added once) and the bias
// takes its trailing dims'; bias_add_grad: dy's trailing dims' sharding, partial over the
// axes of its leading (summed) dims.
Status Partitioner::bias_add(const Instr& in) {
  const bool grad = in.kind == OpKind::kBiasAddGrad;
  const ValueId x = in.inputs[0];
  const int r = rank(x), f = grad ? in.attrs.dim : rank(in.inputs[1]);
  const PartitionSpec tx = dims_only(spec_[x]);
  const Dims& d = tx.dims();
  const Dims trailing(d.begin() + (r - f), d.end());
  if (!grad) return simple(in, {tx, PartitionSpec(trailing)}, {tx}, in.attrs);
  return simple(in, {tx}, {PartitionSpec(trailing, all_axes(d, 0, r - f))}, in.attrs);
}

Status Partitioner::add(const Instr& in) {
  const auto& x = in.inputs;
  if (!spec_[x[0]].partial().empty() && spec_[x[0]] == spec_[x[1]])  // linear: stays partial
    return simple(in, {spec_[x[0]], spec_[x[1]]}, {spec_[x[0]]}, in.attrs);
  return by_factors(in, {"(...),(...)->(...)", FactorMap::kAgree});
}

Status Partitioner::linear(const Instr& in) {  // scale, convert: partial passes through
  return simple(in, {spec_[in.inputs[0]]}, {spec_[in.inputs[0]]}, in.attrs);
}

Status Partitioner::xent(const Instr& in) {  // vocab whole, unless vocab-parallel
  const auto& x = in.inputs;
  if (vm_.empty() && !dims_only(spec_[x[0]]).dim_or_none(rank(x[0]) - 1).empty())
    return vocab_parallel_xent(in);
  const int r = rank(x[0]);
  Dims d = whole(dims_only(spec_[x[0]]).dims(), {r - 1});
  const PartitionSpec l(d), rows(Dims(d.begin(), d.end() - 1));
  if (in.kind == OpKind::kSoftmaxCrossEntropy) return simple(in, {l, rows}, {rows, rows}, in.attrs);
  return simple(in, {l, rows, rows, rows}, {l}, in.attrs);
}

// (ids, dy) -> dtable (V, E): partial over the rows' axes.
Status Partitioner::embed_lookup_grad(const Instr& in) {
  const auto& x = in.inputs;
  const int r = rank(x[1]);
  Dims d = dims_only(spec_[x[1]]).dims();
  const Dims ids(d.begin(), d.end() - 1);
  const Axes partial = all_axes(d, 0, r - 1);
  // Vocab-parallel: the gradient's target (its state's sharding) splits the vocab over
  // axes the rows and dy do not use: each device writes only its block.
  const std::optional<PartitionSpec>& target = desired_[in.outputs[0]]
                                                   ? desired_[in.outputs[0]]
                                                   : desired_before_convert_[in.outputs[0]];
  const Axes av = vm_.empty() && target ? target->dim_or_none(0) : Axes{};
  if (!av.empty() && disjoint(av, all_axes(d, 0, r - 1))) {
    // dy's embed dim gives up the vocab axes (an activation-sized gather, instead of a
    // whole (V, E) partial table per device).
    Axes& e = d[r - 1];
    e.erase(
        std::remove_if(e.begin(), e.end(), [&](const std::string& a) { return contains(av, a); }),
        e.end());
    const int64_t block = shp(in.outputs[0])[0] / axes_size(mesh_, av);
    ENG_ASSIGN_OR_RETURN(ValueId li, get(x[0], PartitionSpec(ids)));
    ENG_ASSIGN_OR_RETURN(ValueId ldy, get(x[1], PartitionSpec(d)));
    OpAttrs a = in.attrs;
    a.depth = block;
    emit(in, {li, ldy, axis_index(av, block)}, a, {PartitionSpec(Dims{av, d[r - 1]}, partial)});
    return ok_status();
  }
  return simple(in, {PartitionSpec(ids), PartitionSpec(d)},
                {PartitionSpec(Dims{{}, d[r - 1]}, partial)}, in.attrs);
}

Status Partitioner::masked_mean_loss_grad(const Instr& in) {
  const PartitionSpec rep, s0 = dims_only(spec_[in.inputs[0]]);
  std::vector<PartitionSpec> ins{s0, rep};
  if (in.inputs.size() > 2) ins.push_back(rep);
  return simple(in, ins, {s0}, in.attrs);
}

Status Partitioner::sum_squares(const Instr& in) {  // local sum, partial over every sharded axis
  const PartitionSpec sx = dims_only(spec_[in.inputs[0]]);
  return simple(in, {sx}, {PartitionSpec(Dims{}, all_axes(sx.dims(), 0, sx.rank()))}, in.attrs);
}

Status Partitioner::replicated(const Instr& in) {  // scalar optimizer and metric ops
  return simple(in, std::vector<PartitionSpec>(in.inputs.size(), PartitionSpec()),
                {PartitionSpec()}, in.attrs);
}

Status Partitioner::adamw(const Instr& in) {  // param, grad, mu, nu in the state sharding (mu's)
  const PartitionSpec rep, st = dims_only(spec_[in.inputs[2]]);
  return simple(in, {st, st, st, st, rep, rep, rep}, {st, st, st}, in.attrs);
}

// Slice, pad: the sliced (padded) dim whole, except in two cases where the rows stay within
// one member's block b of a dim split over `axes` (n members):
// - a slice of rows inside block b of x's sharded dim: member b slices them locally and sends
//   them to each other member by a one-source permute (b -> b + k; the members' sum is exact,
//   one term each), so each receives the slice once instead of gathering every block: n
//   collectives moving (n-1)/n of the slice per member against one moving n-1 blocks (the
//   pipeline's stage-0 input cotangent is such a slice: the transpose of its pad);
// - a pad whose out_sharding splits the padded dim, of an x whole on it, landing inside block
//   b: each member pads x into a block and a zero-traffic permute (shift 0, source b) keeps
//   member b's and gives the others zeros, instead of every member building the whole padded
//   dim and slicing it (the pipeline's stage-0 input).
Status Partitioner::rows(const Instr& in) {
  const ValueId x = in.inputs[0];
  const int dim = in.attrs.dim;
  Dims sd = dims_only(spec_[x]).dims();
  sd.resize(std::max<size_t>(sd.size(), dim + 1));
  const int64_t start = in.attrs.start;
  // The block (index b, blk rows) of `size` rows over `axes` that holds rows
  // [start, start + rows); b = -1 when there is none.
  struct Block {
    int64_t b = -1, blk = 0;
  };
  auto block_of = [&](const Axes& axes, int64_t size, int64_t rows) {
    const int64_t n = axes_size(mesh_, axes);
    if (n <= 1 || size % n != 0 || rows < 1) return Block{};
    const int64_t blk = size / n;
    return start / blk == (start + rows - 1) / blk ? Block{start / blk, blk} : Block{};
  };
  if (in.attrs.vmap == 0 && in.kind == OpKind::kSlice) {
    const Axes axes = sd[dim];
    const auto [b, blk] = block_of(axes, gv(x).shape[dim], in.attrs.size);
    if (b >= 0) {
      ENG_ASSIGN_OR_RETURN(ValueId lx, get(x, PartitionSpec(sd)));
      OpAttrs local = in.attrs;
      local.start = start - b * blk;
      const ValueId part = b_.emit(OpKind::kSlice, {lx}, local)[0];
      ValueId sum = kNoValue;
      for (int64_t to = 0; to < axes_size(mesh_, axes); ++to) {
        const ValueId moved = permute(part, axes, to - b, b, 1);
        sum = sum == kNoValue ? moved : b_.emit(OpKind::kAdd, {sum, moved}, OpAttrs{})[0];
      }
      set_attributed(in, sum, PartitionSpec(whole(sd, {dim})));
      return ok_status();
    }
  }
  if (in.attrs.vmap == 0 && in.kind == OpKind::kPad && sd[dim].empty()) {
    std::optional<PartitionSpec> want;
    ENG_RETURN_IF_ERROR(wanted_out(in, rank(in.outputs[0]), want));
    const Axes axes = want ? want->dims()[dim] : Axes{};
    bool shared = false;  // an axis of the padded dim already splits another dim of x
    for (const Axes& other : sd)
      for (const std::string& a : axes) shared |= contains(other, a);
    const int64_t size = in.attrs.size, rows = gv(x).shape[dim];
    const auto [b, blk] = shared ? Block{} : block_of(axes, size, rows);
    if (b >= 0) {
      ENG_ASSIGN_OR_RETURN(ValueId lx, get(x, PartitionSpec(sd)));
      ValueId block = lx;
      if (rows != blk) {
        OpAttrs local = in.attrs;
        local.out_logical.clear();
        local.start = start - b * blk;
        local.size = blk;
        block = b_.emit(OpKind::kPad, {lx}, local)[0];
      }
      Dims od = sd;
      od[dim] = axes;
      set_attributed(in, permute(block, axes, 0, b, 1), PartitionSpec(od));
      return ok_status();
    }
  }
  const PartitionSpec d(whole(sd, {dim}));
  return simple(in, {d}, {d}, in.attrs);
}

// Scanned layers (op.h). index_in_dim: the indexed dim whole (a stacked weight's `layers` dim
// is unsharded unless mapped to a mesh axis), the other dims and partial sums pass through.
Status Partitioner::index_in_dim(const Instr& in) {
  const PartitionSpec& s = spec_[in.inputs[0]];
  Dims d = whole(s.dims(), {in.attrs.dim});
  const PartitionSpec src(d, s.partial());
  d.erase(d.begin() + in.attrs.dim);
  return simple(in, {src}, {PartitionSpec(std::move(d), s.partial())}, in.attrs);
}

// dynamic_slice_in_dim (x, start): the window's rows are known only when it runs, so the
// sliced dim is whole; the other dims keep x's axes and partial sums pass through (the op is
// linear in x). start: replicated.
Status Partitioner::dynamic_slice_in_dim(const Instr& in) {
  const PartitionSpec& s = spec_[in.inputs[0]];
  const PartitionSpec src(whole(s.dims(), {in.attrs.dim}), s.partial());
  return simple(in, {src, PartitionSpec()}, {src}, in.attrs);
}

// dynamic_update_slice_in_dim (x, update, start): x's axes with the dim whole, the update
// laid out alike, start replicated; no partial sums (x and the update would have to agree).
Status Partitioner::dynamic_update_slice_in_dim(const Instr& in) {
  const PartitionSpec t(whole(dims_only(spec_[in.inputs[0]]).dims(), {in.attrs.dim}));
  return simple(in, {t, t, PartitionSpec()}, {t}, in.attrs);
}

// The sharding an add_index_* (update[, acc]) result takes: acc's (without acc: the
// gradient's target, its state's sharding; else the update's with the slot dim inserted),
// slot dim `dim` whole.
Dims Partitioner::accumulator_dims(const Instr& in, int dim) const {
  Dims t;
  if (in.inputs.size() > 1) {
    t = dims_only(spec_[in.inputs[1]]).dims();
  } else if (vm_.empty() && desired_[in.outputs[0]]) {
    t = dims_only(*desired_[in.outputs[0]]).dims();
  } else {
    t = dims_only(spec_[in.inputs[0]]).dims();
    t.insert(t.begin() + dim, Axes{});
  }
  return whole(std::move(t), {dim});
}

// add_index_in_dim (update[, acc]): the result keeps acc's sharding (without acc: the
// gradient's target, its state's sharding), slot dim whole; the update is resharded to
// that sharding without the slot dim (its partial sum reduce-scattered, as a gradient is).
Status Partitioner::add_index_in_dim(const Instr& in) {
  const int dim = in.attrs.dim;
  Dims t = accumulator_dims(in, dim);
  Dims u = t;
  u.erase(u.begin() + dim);
  std::vector<PartitionSpec> ins = {PartitionSpec(u)};
  if (in.inputs.size() > 1) ins.push_back(PartitionSpec(t));
  return simple(in, ins, {PartitionSpec(t)}, in.attrs);
}

// index_per_row (x (N, S, ...)): the slot dim whole, the rows dim and the rest keep their
// axes (partial sums pass through), so each device selects its own rows' slots locally (a
// circular pipeline's weights stay split over `stage`: no bytes move). The local op is told
// the rows' axes to find its global rows (op.h).
Status Partitioner::index_per_row(const Instr& in) {
  const PartitionSpec& s = spec_[in.inputs[0]];
  Dims d = whole(s.dims(), {0});
  d.resize(std::max<size_t>(d.size(), 2));
  const PartitionSpec src(d, s.partial());
  OpAttrs a = in.attrs;
  a.mesh_axes = d[1];
  a.group_size = axes_size(mesh_, d[1]);
  d.erase(d.begin());
  return simple(in, {src}, {PartitionSpec(std::move(d), s.partial())}, a);
}

// add_index_per_row (update[, acc]): as add_index_in_dim with the slot dim 0; the rows dim
// keeps the target's axes, which the local op is told (op.h).
Status Partitioner::add_index_per_row(const Instr& in) {
  Dims t = accumulator_dims(in, 0);
  t.resize(std::max<size_t>(t.size(), 2));
  Dims u(t.begin() + 1, t.end());
  OpAttrs a = in.attrs;
  a.mesh_axes = t[1];
  a.group_size = axes_size(mesh_, t[1]);
  std::vector<PartitionSpec> ins = {PartitionSpec(u)};
  if (in.inputs.size() > 1) ins.push_back(PartitionSpec(t));
  return simple(in, ins, {PartitionSpec(t)}, a);
}

// transpose: each output dim takes its source dim's axes; partial sums pass through.
Status Partitioner::transpose(const Instr& in) {
  const PartitionSpec& s = spec_[in.inputs[0]];
  const std::vector<int64_t>& perm = in.attrs.new_shape;
  Dims d(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) d[i] = s.dim_or_none(static_cast<int>(perm[i]));
  return simple(in, {s}, {PartitionSpec(std::move(d), s.partial())}, in.attrs);
}

// The gradient targets (desired_) of AdamW's gradients, carried back through the
// add_index_in_dim chains that build stacked gradients: each layer's slice is reduced
// straight into its state's sharding, as an unscanned layer's gradient is.
void Partitioner::desire_stacked_slices() {
  for (size_t k = g_.instrs().size(); k-- > 0;) {
    const Instr& in = g_.instrs()[k];
    const bool per_row = in.kind == OpKind::kAddIndexPerRow;
    if ((in.kind != OpKind::kAddIndexInDim && !per_row) || !desired_[in.outputs[0]]) continue;
    const PartitionSpec& want = *desired_[in.outputs[0]];
    if (in.inputs.size() > 1 && !desired_[in.inputs[1]]) desired_[in.inputs[1]] = want;
    const int slot = per_row ? 0 : in.attrs.dim;
    Dims u = whole(want.dims(), {slot});
    if (slot < static_cast<int>(u.size())) u.erase(u.begin() + slot);
    if (!desired_[in.inputs[0]]) desired_[in.inputs[0]] = PartitionSpec(std::move(u));
  }
}

// desired_before_convert_: the input of a convert whose output has a gradient target (bf16
// gradients cast to f32 or grad_dtype; chains of converts too) gets that target, so that
// embed_lookup_grad's vocab-parallel choice is the same as without the cast.
void Partitioner::desire_through_converts() {
  desired_before_convert_.assign(desired_.size(), std::nullopt);
  for (size_t k = g_.instrs().size(); k-- > 0;) {
    const Instr& in = g_.instrs()[k];
    if (in.kind != OpKind::kConvert) continue;
    const ValueId out = in.outputs[0], x = in.inputs[0];
    const std::optional<PartitionSpec>& want =
        desired_[out] ? desired_[out] : desired_before_convert_[out];
    if (want && !desired_[x] && !desired_before_convert_[x]) desired_before_convert_[x] = want;
  }
}

Status Partitioner::concat(const Instr& in) {
  const PartitionSpec d(whole(dims_only(spec_[in.inputs[0]]).dims(), {in.attrs.dim}));
  return simple(in, std::vector<PartitionSpec>(in.inputs.size(), d), {d}, in.attrs);
}

Status Partitioner::not_global(const Instr& in) {
  return invalid_argument("partition: {} may not appear in a global program", op_name(in.kind));
}


}  // namespace eng::spmd_internal
