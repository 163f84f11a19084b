// engine/compile/spmd_matmul.cpp: the partitioner's rules for the mixture-of-experts ops and for matmul
// (contracting, batch and free dims; JAX's ambiguity errors) (spmd_partitioner.h).
#include "engine/compile/spmd_partitioner.h"

#include <fmt/ranges.h>

namespace eng::spmd_internal {

// ---- mixture of experts (op.h) ----------------------------------------------------------------
namespace {
Axes minus(const Axes& a, const Axes& used) {
  Axes out;
  for (const std::string& x : a)
    if (std::find(used.begin(), used.end(), x) == used.end()) out.push_back(x);
  return out;
}
Axes joined(Axes a, const Axes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
bool contains_any(const Axes& a, const Axes& b) {
  for (const std::string& x : a)
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  return false;
}
}  // namespace

// Routing is per row b: the sequence and expert dims whole, rows where the logits have them;
// the load-balance loss and the load are sums over the rows (partial over their axes).
Status Partitioner::moe_route(const Instr& in) {
  const Axes b = dims_only(spec_[in.inputs[0]]).dim_or_none(0);
  const PartitionSpec rows(Dims{b, {}, {}}), rows4(Dims{b, {}, {}, {}}), whole(Dims{{}});
  // The router bias (E) whole on every device; its gradient a sum over the rows (partial).
  if (in.kind == OpKind::kMoeRouteGrad) {
    if (in.inputs.size() == 2) return simple(in, {rows, rows4}, {rows}, in.attrs);
    return simple(in, {rows, rows4, whole},
                  {in.attrs.raw ? PartitionSpec(Dims{{}}, b) : rows}, in.attrs);
  }
  std::vector<PartitionSpec> ins = {rows};
  if (in.inputs.size() == 2) ins.push_back(whole);
  return simple(in, ins, {rows4, PartitionSpec(Dims{}, b), PartitionSpec(Dims{{}, {}}, b)},
                in.attrs);
}

// dispatch (combine, x (B,S,M)) -> (E,B,C,M) and combine (combine, y (E,B,C,M)) -> (B,S,M):
// rows b as the combine weights have them (the expert dim of the expert-major side whole: its
// `expert` axis moves to the rows, an all-to-all), the model dim M where x / y has it.
Status Partitioner::moe_dispatch(const Instr& in) {
  const bool forward = in.kind == OpKind::kMoeDispatch;
  const Axes b = dims_only(spec_[in.inputs[0]]).dim_or_none(0);
  const PartitionSpec sx = dims_only(spec_[in.inputs[1]]);
  const Axes m = minus(sx.dim_or_none(forward ? 2 : 3), b);
  const PartitionSpec comb(Dims{b, {}, {}, {}}), tokens(Dims{b, {}, m}), experts(Dims{{}, b, {}, m});
  return forward ? simple(in, {comb, tokens}, {experts}, in.attrs)
                 : simple(in, {comb, experts}, {tokens}, in.attrs);
}

// (dout (B,S,M), y (E,B,C,M)) -> (B,S,E,C): rows b as dout's; M contracted (partial over its
// axes).
Status Partitioner::moe_combine_weights_grad(const Instr& in) {
  const PartitionSpec sd = dims_only(spec_[in.inputs[0]]);
  const Axes b = sd.dim_or_none(0), m = minus(sd.dim_or_none(2), b);
  return simple(in, {PartitionSpec(Dims{b, {}, m}), PartitionSpec(Dims{{}, b, {}, m})},
                {PartitionSpec(Dims{b, {}, {}, {}}, m)}, in.attrs);
}

// expert_matmul (a (G,...,K), w (G,K,N)): experts g where a has them (else w), a's row dims
// keep their other axes, K whole (the weight gathered over its fsdp axes, as FSDP), N where w
// has it. expert_matmul_grad (a, dy) -> (G,K,N): a sum over the rows, partial over their axes.
Status Partitioner::expert_matmul(const Instr& in) {
  const PartitionSpec sa = dims_only(spec_[in.inputs[0]]), sw = dims_only(spec_[in.inputs[1]]);
  const int r = rank(in.inputs[0]);
  Axes g = sa.dim_or_none(0);
  if (g.empty()) g = sw.dim_or_none(0);
  Dims da(r), dw(rank(in.inputs[1]));
  da[0] = g;
  dw[0] = g;
  Axes used = g;
  for (int i = 1; i < r - 1; ++i) {
    da[i] = minus(sa.dim_or_none(i), used);
    used = joined(used, da[i]);
  }
  const Axes rows = minus(used, g);
  if (in.kind == OpKind::kExpertMatmulGrad) {
    for (int i = 1; i < r - 1; ++i) dw[i] = da[i];
    da[r - 1] = minus(sa.dim_or_none(r - 1), used);
    dw[r - 1] = minus(sw.dim_or_none(r - 1), joined(used, da[r - 1]));
    return simple(in, {PartitionSpec(da), PartitionSpec(dw)},
                  {PartitionSpec(Dims{g, da[r - 1], dw[r - 1]}, rows)}, in.attrs);
  }
  const int n_dim = in.attrs.trans_b ? 1 : 2;
  dw[n_dim] = minus(sw.dim_or_none(n_dim), used);
  Dims out(da.begin(), da.end() - 1);
  out.push_back(dw[n_dim]);
  return simple(in, {PartitionSpec(da), PartitionSpec(dw)}, {PartitionSpec(out)}, in.attrs);
}

// ---- the dropless dispatch (op.h kMoeTopK ... kRaggedDotGrad) ----------------------------------
// Every row b sorts and multiplies its own choices, so rows stay where the logits / tokens have
// them and every other dim of the routing and the permutation is whole on each device (no
// traffic: each device permutes its local sequences, as MaxText's shard_map does).
Status Partitioner::moe_top_k(const Instr& in) {
  const Axes b = dims_only(spec_[in.inputs[0]]).dim_or_none(0);
  const PartitionSpec rows2(Dims{b, {}}), rows3(Dims{b, {}, {}}), whole(Dims{{}});
  if (in.kind == OpKind::kMoeTopKGrad) {
    if (in.inputs.size() == 2) return simple(in, {rows3, rows3}, {rows3}, in.attrs);
    return simple(in, {rows3, rows3, whole},
                  {in.attrs.raw ? PartitionSpec(Dims{{}}, b) : rows3}, in.attrs);
  }
  std::vector<PartitionSpec> ins = {rows3};
  if (in.inputs.size() == 2) ins.push_back(whole);
  return simple(in, ins,
                {rows3, rows2, rows2, rows2, PartitionSpec(Dims{}, b), PartitionSpec(Dims{{}, {}}, b)},
                in.attrs);
}

// (x, order, rank[, weights]): rows b as x has them, the model dim M keeps its other axes.
Status Partitioner::moe_permute(const Instr& in) {
  const PartitionSpec sx = dims_only(spec_[in.inputs[0]]);
  const Axes b = sx.dim_or_none(0), m = minus(sx.dim_or_none(2), b);
  std::vector<PartitionSpec> ins = {PartitionSpec(Dims{b, {}, m}), PartitionSpec(Dims{b, {}}),
                                    PartitionSpec(Dims{b, {}})};
  if (in.inputs.size() == 4) ins.push_back(PartitionSpec(Dims{b, {}, {}}));
  return simple(in, ins, {PartitionSpec(Dims{b, {}, m})}, in.attrs);
}

// (a (B,S,M), y (B,N,M), order, rank) -> (B,S,k): rows b as a's; M contracted (partial).
Status Partitioner::moe_permute_weights_grad(const Instr& in) {
  const PartitionSpec sa = dims_only(spec_[in.inputs[0]]);
  const Axes b = sa.dim_or_none(0), m = minus(sa.dim_or_none(2), b);
  const PartitionSpec rows(Dims{b, {}, m}), idx(Dims{b, {}});
  return simple(in, {rows, rows, idx, idx}, {PartitionSpec(Dims{b, {}, {}}, m)}, in.attrs);
}

// ragged_dot (lhs ([B,]N,K), rhs (E,K,P), group_sizes): rows b where lhs has them; the row
// and expert dims whole (a row's groups span every expert: no expert parallelism here); K
// split only where lhs and rhs split it alike (a partial sum over those axes), else gathered
// (the weight over its fsdp axes, as FSDP); P where rhs has it. ragged_dot_grad (lhs, dout,
// group_sizes) -> (E,K,P): a sum over the rows, partial over their axes.
Status Partitioner::ragged_dot(const Instr& in) {
  const PartitionSpec sl = dims_only(spec_[in.inputs[0]]), sr = dims_only(spec_[in.inputs[1]]);
  const int r = rank(in.inputs[0]);
  const Axes b = r == 3 ? sl.dim_or_none(0) : Axes{};
  auto lead = [&](Axes last) {
    Dims d;
    if (r == 3) d.push_back(b);
    d.push_back({});
    d.push_back(std::move(last));
    return PartitionSpec(d);
  };
  const PartitionSpec groups = r == 3 ? PartitionSpec(Dims{b, {}}) : PartitionSpec(Dims{{}});
  const Axes kl = minus(sl.dim_or_none(r - 1), b);
  if (in.kind == OpKind::kRaggedDotGrad) {
    const Axes p = minus(sr.dim_or_none(r - 1), joined(b, kl));
    return simple(in, {lead(kl), lead(p), groups}, {PartitionSpec(Dims{{}, kl, p}, b)}, in.attrs);
  }
  const bool tb = in.attrs.trans_b;
  const Axes kr = sr.dim_or_none(tb ? 2 : 1);
  const Axes k = !kl.empty() && kl == kr ? kl : Axes{};
  const Axes p = minus(sr.dim_or_none(tb ? 1 : 2), joined(b, k));
  const PartitionSpec rhs = tb ? PartitionSpec(Dims{{}, p, k}) : PartitionSpec(Dims{{}, k, p});
  Axes partial = k;
  sort_mesh_order(partial, mesh_);
  Dims out = lead(p).dims();
  return simple(in, {lead(k), rhs, groups}, {PartitionSpec(out, partial)}, in.attrs);
}

// ragged_all_to_all (x ([L..,]G,N,F), offsets and sizes ([L..,]G,G)): the member dim G keeps
// x's axes A, which become the collective's group (each device holds G/|A| members and
// exchanges rows with the rest of its group; A empty: every member here, no traffic); the
// leading dims keep their axes (independent groups), the rows N and the buffer R whole, F
// keeps its other axes. The offsets and sizes are split as the members, their last dim whole.
Status Partitioner::ragged_all_to_all(const Instr& in) {
  const PartitionSpec sx = dims_only(spec_[in.inputs[0]]);
  const int r = rank(in.inputs[0]);
  Dims dx(static_cast<size_t>(r)), di(static_cast<size_t>(r - 1));
  Axes used;
  for (int k = 0; k < r - 2; ++k) {
    dx[k] = di[k] = minus(sx.dim_or_none(k), used);
    used = joined(used, dx[k]);
  }
  dx[r - 1] = minus(sx.dim_or_none(r - 1), used);
  OpAttrs a = in.attrs;
  a.mesh_axes = dx[r - 3];
  a.group_size = axes_size(mesh_, a.mesh_axes);
  const PartitionSpec idx(di);
  return simple(in, {PartitionSpec(dx), idx, idx, idx}, {PartitionSpec(dx)}, a);
}

// ---- expert parallelism for the dropless dispatch (MaxText's sparse_matmul under shard_map,
// layers/moe.py at e591f30: ra2a_and_route, local_permute, get_all_to_all_params,
// get_ragged_buffer_size) --------------------------------------------------------------------

// The mesh axes (size > 1) the experts are split over: the ops' `exp` logical name resolved.
Axes Partitioner::ep_axes(const OpAttrs& at) const {
  LogicalAxes names = at.logical;
  if (names.empty()) return {};
  Result<PartitionSpec> w = logical_to_mesh(names, mesh_, o_.rules);
  if (!w.ok()) return {};
  return remove_size_one_axes(w->dim_or_none(0), mesh_);
}

// The index arithmetic of one routing (group_sizes), once: every member's per-row group sizes
// all-gathered over the expert group, this device's rank in it, moe_ep_plan. The buffer is
// MaxText's get_ragged_buffer_size of this device's Bl x N rows.
Status Partitioner::ep_plan(ValueId groups, const Axes& ep, const Axes& rows, int64_t N,
                            const OpAttrs& at) {
  if (plans_.count(groups)) return ok_status();
  const int64_t G = axes_size(mesh_, ep), E = shp(groups)[1];
  if (E % G != 0)
    return invalid_argument("moe_ep_dispatch: the expert axes ({}) of size {} do not divide "
                            "num_experts {}",
                            fmt::join(ep, ", "), G, E);
  ENG_ASSIGN_OR_RETURN(ValueId lg, get(groups, PartitionSpec(Dims{rows, {}})));
  const int64_t Bl = b_.info(lg).shape[0];
  OpAttrs r;
  r.new_shape = {1, Bl, E};
  const ValueId counts = coll(OpKind::kAllGather, b_.emit(OpKind::kReshape, {lg}, r)[0], 0, ep);
  const double local_rows = static_cast<double>(Bl * N), factor = at.scale;
  const double worst = std::min(static_cast<double>(G), static_cast<double>(E) / static_cast<double>(at.size));
  OpAttrs pa;
  pa.start = N;
  pa.size = std::max<int64_t>(1, static_cast<int64_t>(local_rows * (factor > 0 ? factor : worst)));
  const std::vector<ValueId> o = b_.emit(OpKind::kMoeEpPlan, {counts, axis_index(ep, 1)}, pa);
  plans_[groups] = EpPlan{ep,   rows, pa.size, N,    o[0], o[1], o[2], o[3],
                          o[4], o[5], o[6],    o[7], o[8], o[9], o[10]};
  return ok_status();
}

// moe_ep_dispatch (x (B,N,F), group_sizes): with no expert axes the identity. Otherwise each
// device's rows (B over the rows' axes, the expert axes among them) are sorted by (expert, b),
// sent by a ragged all-to-all over the expert axes into a receive buffer of R rows, and sorted
// there by (local expert, sender): the output's local value is that (R, F) buffer. moe_ep_return
// reverses the three steps.
Status Partitioner::moe_ep(const Instr& in) {
  const ValueId x = in.inputs[0], groups = in.inputs[1], out = in.outputs[0];
  const Axes ep = ep_axes(in.attrs);
  const bool dispatch = in.kind == OpKind::kMoeEpDispatch;
  if (ep.empty() || (!dispatch && routed_[x] == kNoValue)) {
    local_[out] = local_[x];
    spec_[out] = spec_[x];
    return ok_status();
  }
  const Shape gs = shp(x);
  const int64_t N = gs[1];
  if (dispatch) {
    const PartitionSpec sx = dims_only(spec_[x]);
    Axes rows = sx.dim_or_none(0);
    for (const std::string& a : ep)
      if (!contains(rows, a)) rows.push_back(a);
    const Axes f = minus(sx.dim_or_none(2), rows);
    ENG_ASSIGN_OR_RETURN(ValueId lx, get(x, PartitionSpec(Dims{rows, {}, f})));
    ENG_RETURN_IF_ERROR(ep_plan(groups, ep, rows, N, in.attrs));
    const EpPlan& p = plans_.at(groups);
    const Shape ls = b_.info(lx).shape;
    OpAttrs r;
    r.new_shape = {1, ls[0] * N, ls[2]};
    const ValueId sorted =
        local_permute(b_.emit(OpKind::kReshape, {lx}, r)[0], p.send_order, p.send_rank, false);
    OpAttrs a;
    a.size = p.R;
    a.mesh_axes = ep;
    a.group_size = axes_size(mesh_, ep);
    const ValueId recv = b_.emit(OpKind::kRaggedAllToAll, {sorted, p.io, p.ss, p.oo}, a)[0];
    r.new_shape = {p.R, ls[2]};
    const ValueId xe = b_.emit(OpKind::kReshape,
                               {local_permute(recv, p.local_order, p.local_rank, false)}, r)[0];
    set_attributed(in, xe, PartitionSpec(Dims{rows, {}, f}));
    b_.mutable_info(xe).spec = PartitionSpec(Dims{{}, f});  // the (R, F) buffer's
    routed_[out] = groups;
    return ok_status();
  }
  if (routed_[x] != groups)
    return invalid_argument("moe_ep_return: its rows were dispatched with another routing");
  const EpPlan& p = plans_.at(groups);
  const ValueId ly = local_[x];
  const int64_t F = b_.info(ly).shape[1], rows = b_.info(p.send_order).shape[1];
  OpAttrs r;
  r.new_shape = {1, p.R, F};
  const ValueId back = local_permute(b_.emit(OpKind::kReshape, {ly}, r)[0], p.local_order,
                                     p.local_rank, true);
  OpAttrs a;
  a.size = rows;
  a.mesh_axes = p.ep;
  a.group_size = axes_size(mesh_, p.ep);
  const ValueId sent = b_.emit(OpKind::kRaggedAllToAll, {back, p.rio, p.rss, p.roo}, a)[0];
  r.new_shape = {rows / N, N, F};
  const ValueId o = b_.emit(OpKind::kReshape,
                            {local_permute(sent, p.send_order, p.send_rank, true)}, r)[0];
  set_attributed(in, o, spec_[x]);  // the rows' axes, F's, and any partial sum
  return ok_status();
}

// The ops on dispatched rows (each device's (R, F) receive buffer): ragged_dot with the
// experts' weights split over the expert axes (each device multiplies its own experts' rows),
// its weight gradient (a partial sum over the rows' other axes), and the elementwise ops
// between them; partial sums are reduced first where the op is not linear in them.
Status Partitioner::routed(const Instr& in) {
  ValueId routing = kNoValue;
  for (ValueId x : in.inputs)
    if (routed_[x] != kNoValue) routing = routed_[x];
  const EpPlan& p = plans_.at(routing);
  auto feat = [&](ValueId g) { return spec_[g].dim_or_none(2); };
  // g's local buffer with no partial sum, and its feature dim on `want` (gathered if not).
  auto whole = [&](ValueId g, const Axes& want) -> Result<ValueId> {
    if (routed_[g] != routing)
      return invalid_argument("{}: operand {} is not in the expert-parallel buffer of the other "
                              "operands (moe_ep_dispatch's rows mixed with other values)",
                              op_name(in.kind), g);
    ValueId l = local_[g];
    if (!spec_[g].partial().empty()) {
      Axes part = spec_[g].partial();
      sort_mesh_order(part, mesh_);
      l = all_reduce(l, part, false);
    }
    const Axes& has = feat(g);
    if (has != want) {
      if (!want.empty())
        return invalid_argument("{}: feature axes ({}) of the expert-parallel rows, want ({})",
                                op_name(in.kind), fmt::join(has, ", "), fmt::join(want, ", "));
      if (!has.empty()) l = coll(OpKind::kAllGather, l, 1, has);
    }
    return l;
  };
  auto done = [&](int o, ValueId l, const Axes& f, const Axes& partial = {}) {
    set_attributed(in, l, PartitionSpec(Dims{p.rows, {}, f}, partial), o);
    b_.mutable_info(l).spec = PartitionSpec(Dims{{}, f}, partial);  // the (R, F) buffer's
    routed_[in.outputs[o]] = routing;
  };
  switch (in.kind) {
    case OpKind::kRaggedDot: {
      const ValueId lhs = in.inputs[0], rhs = in.inputs[1];
      if (routed_[rhs] != kNoValue || in.inputs[2] != routing) break;
      const PartitionSpec sr = dims_only(spec_[rhs]);
      const bool tb = in.attrs.trans_b;
      const Axes kr = sr.dim_or_none(tb ? 2 : 1), kl = feat(lhs);
      const Axes k = !kl.empty() && kl == kr && spec_[lhs].partial().empty() ? kl : Axes{};
      ENG_ASSIGN_OR_RETURN(ValueId ll, whole(lhs, k));
      const Axes pr = minus(sr.dim_or_none(tb ? 1 : 2), joined(joined(p.rows, k), p.ep));
      const PartitionSpec want =
          tb ? PartitionSpec(Dims{p.ep, pr, k}) : PartitionSpec(Dims{p.ep, k, pr});
      ENG_ASSIGN_OR_RETURN(ValueId lr, get(rhs, want));
      OpAttrs a;
      a.trans_b = tb;
      Axes partial = k;
      sort_mesh_order(partial, mesh_);
      done(0, b_.emit(OpKind::kRaggedDot, {ll, lr, p.groups}, a)[0], pr, partial);
      return ok_status();
    }
    case OpKind::kRaggedDotGrad: {  // (lhs (R,K), dout (R,P)) -> (E,K,P) on this device's experts
      const ValueId lhs = in.inputs[0], dy = in.inputs[1];
      ENG_ASSIGN_OR_RETURN(ValueId ll, whole(lhs, feat(lhs)));
      const Axes kl = feat(lhs);
      const Axes pd = contains_any(feat(dy), kl) ? Axes{} : feat(dy);
      ENG_ASSIGN_OR_RETURN(ValueId ld, whole(dy, pd));
      Axes partial = minus(p.rows, p.ep);
      sort_mesh_order(partial, mesh_);
      emit(in, {ll, ld, p.groups}, OpAttrs{}, {PartitionSpec(Dims{p.ep, kl, pd}, partial)});
      return ok_status();
    }
    case OpKind::kSwiglu:
    case OpKind::kSwigluGrad:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kConvert: {
      // Elementwise: every operand in the buffer, the first one's feature axes (a partial sum
      // passes through add, scale and convert when every operand has the same).
      Axes f = feat(in.inputs[0]);
      const bool linear = in.kind == OpKind::kAdd || in.kind == OpKind::kScale ||
                          in.kind == OpKind::kConvert;
      bool same = linear, feats = true;
      for (ValueId x : in.inputs) {
        feats = feats && feat(x) == f;
        same = same && routed_[x] == routing && feat(x) == f &&
               spec_[x].partial() == spec_[in.inputs[0]].partial();
      }
      if (!feats) f.clear();  // operands split differently: each gathered
      std::vector<ValueId> ls;
      for (ValueId x : in.inputs) {
        if (same) {
          ls.push_back(local_[x]);
          continue;
        }
        ENG_ASSIGN_OR_RETURN(ValueId l, whole(x, f));
        ls.push_back(l);
      }
      const Axes partial = same ? spec_[in.inputs[0]].partial() : Axes{};
      const std::vector<ValueId> outs = b_.emit(in.kind, ls, in.attrs);
      for (size_t o = 0; o < outs.size(); ++o) done(static_cast<int>(o), outs[o], f, partial);
      return ok_status();
    }
    default:
      break;
  }
  return unimplemented(
      "{}: an operand holds moe_ep_dispatch's rows in the expert-parallel receive buffer (over "
      "{}); only ragged_dot, its gradient and elementwise ops (swiglu, add, mul, scale, convert) "
      "may read them before moe_ep_return",
      op_name(in.kind), fmt::join(p.ep, ", "));
}

Status Partitioner::matmul(const Instr& in) {
  const ValueId ga = in.inputs[0], gb = in.inputs[1];
  const Shape A = shp(ga);
  const Shape B = shp(gb);
  const MatmulDims m = matmul_dims(in.attrs, A, B);
  Dims da = spec_[ga].dims(), db = spec_[gb].dims();

  std::optional<PartitionSpec> want;
  ENG_RETURN_IF_ERROR(wanted_out(in, m.out_rank(), want));
  bool paired = m.a_con.size() == m.b_con.size();
  for (size_t k = 0; paired && k < m.a_con.size(); ++k) paired = A[m.a_con[k]] == B[m.b_con[k]];
  if (!want) ENG_RETURN_IF_ERROR(check_matmul_ambiguity(in, m, da, db));
  agree_contracting(m, paired, da, db);
  const double bytes_a = static_cast<double>(gv(ga).bytes());
  const double bytes_b = static_cast<double>(gv(gb).bytes());
  gather_shared_free_axes(m, bytes_a >= bytes_b, want, da, db);  // auto: gather the cheaper
  return emit_matmul(in, m, da, db, want);
}

// The wanted result sharding (matmul, pad), if the program says: out_sharding (an error if
// its logical names do not resolve), else autodiff's out_like when that value is already
// placed.
Status Partitioner::wanted_out(const Instr& in, int out_rank, std::optional<PartitionSpec>& want) {
  const OpAttrs& at = in.attrs;
  if (!at.out_logical.empty()) {
    LogicalAxes names = at.out_logical;
    names.resize(out_rank);
    Result<PartitionSpec> w = logical_to_mesh(names, mesh_, o_.rules);
    if (!w.ok())
      return invalid_argument("{} out_sharding: {}", op_name(in.kind), w.status().message());
    want = norm(*w, out_rank);
  } else if (at.out_like >= 0 && local_[at.out_like] != kNoValue) {
    // out_like is not an operand: under vmap its tracked spec still has the leading dim.
    PartitionSpec like = dims_only(spec_[at.out_like]);
    if (!vm_.empty() && !swapped_[at.out_like]) {
      Dims d = like.dims();
      if (!d.empty()) d.erase(d.begin());
      like = PartitionSpec(d);
    }
    if (like.rank() == out_rank) want = like;
  }
  return ok_status();
}

// Explicit mode, no wanted sharding: jax.lax's dot_general sharding rule. Contracting dims
// sharded on both sides (alike or not) are JAX's "ambiguous" error; otherwise the result is
// the lhs free dims' shardings then the rhs's, and an axis on two of them is JAX's illegally
// sharded result. On a mixed mesh only the Explicit axes count (the operands' types name only
// those).
Status Partitioner::check_matmul_ambiguity(const Instr& in, const MatmulDims& m, const Dims& da_all,
                                           const Dims& db_all) {
  if (!explicit_) return ok_status();
  const Dims da = all_explicit_ ? da_all : project(da_all, true);
  const Dims db = all_explicit_ ? db_all : project(db_all, true);
  Dims lc, rc;
  bool both = false;
  for (size_t k = 0; k < m.a_con.size() && k < m.b_con.size(); ++k)
    both |= !da[m.a_con[k]].empty() && !db[m.b_con[k]].empty();
  for (int i : m.a_con) lc.push_back(da[i]);
  for (int i : m.b_con) rc.push_back(db[i]);
  if (both)
    return invalid_argument(
        "Contracting dimensions are sharded and it is ambiguous how the output should be "
        "sharded. Please specify the output sharding via the `out_sharding` parameter. Got "
        "lhs_contracting_spec={} and rhs_contracting_spec={}",
        jax_tuple_string(lc), jax_tuple_string(rc));
  Dims out;
  for (int i : m.a_free) out.push_back(da[i]);
  for (int i : m.b_free) out.push_back(db[i]);
  const Axes used = all_axes(out, 0, static_cast<int>(out.size()));
  bool twice = false;
  for (size_t i = 0; i < used.size(); ++i)
    for (size_t j = i + 1; j < used.size(); ++j) twice |= used[i] == used[j];
  if (!twice) return ok_status();
  const PartitionSpec sa(da), sb(db), so(out);
  return invalid_argument(
      "dot_general operation with inputs: {}, {} produces an illegally sharded result: {}",
      typeof_string(dtype_name(gv(in.inputs[0]).dtype), shp(in.inputs[0]), &sa, &mesh_),
      typeof_string(dtype_name(gv(in.inputs[1]).dtype), shp(in.inputs[1]), &sb, &mesh_),
      typeof_string(dtype_name(gv(in.outputs[0]).dtype), shp(in.outputs[0]), &so, &mesh_));
}

// Contracting pairs: agree on one side's axes (that side must not use them elsewhere on
// the other operand); the more-sharded valid choice wins; neither valid -> whole. Unpaired
// contracting dims (the flattened dims differ) are all gathered.
void Partitioner::agree_contracting(const MatmulDims& m, bool paired, Dims& da, Dims& db) const {
  if (!paired) {
    for (int i : m.a_con) da[i].clear();
    for (int i : m.b_con) db[i].clear();
    return;
  }
  for (size_t k = 0; k < m.a_con.size(); ++k) {
    Axes& xa = da[m.a_con[k]];
    Axes& xb = db[m.b_con[k]];
    if (xa == xb) continue;
    const bool va = !used_elsewhere(xa, db, m.b_con[k]), vb = !used_elsewhere(xb, da, m.a_con[k]);
    Axes t;
    if (va && vb) t = axes_size(mesh_, xa) >= axes_size(mesh_, xb) ? xa : xb;
    else if (va) t = xa;
    else if (vb) t = xb;
    xa = t;
    xb = t;
  }
}

// The local matmul on operands resharded to da, db: free dims keep their axes, contracting
// axes make the result a partial sum over them. With out_sharding the result IS in that
// sharding (resharded to it).
Status Partitioner::emit_matmul(const Instr& in, const MatmulDims& m, const Dims& da,
                                const Dims& db, const std::optional<PartitionSpec>& want) {
  ENG_ASSIGN_OR_RETURN(ValueId la, get(in.inputs[0], PartitionSpec(da)));
  ENG_ASSIGN_OR_RETURN(ValueId lb, get(in.inputs[1], PartitionSpec(db)));
  Dims out;
  for (int i : m.a_free) out.push_back(da[i]);
  for (int i : m.b_free) out.push_back(db[i]);
  Axes partial;
  for (int i : m.a_con) partial.insert(partial.end(), da[i].begin(), da[i].end());
  sort_mesh_order(partial, mesh_);
  emit(in, {la, lb}, in.attrs, {PartitionSpec(out, partial)});
  if (!in.attrs.out_logical.empty()) {
    ENG_RETURN_IF_ERROR(check_divisible(shp(in.outputs[0]), *want, "matmul out_sharding"));
    ENG_ASSIGN_OR_RETURN(ValueId lv, get(in.outputs[0], *want));
    set(in.outputs[0], lv, *want);
  }
  return ok_status();
}


}  // namespace eng::spmd_internal
