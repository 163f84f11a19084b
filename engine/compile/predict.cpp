// engine/compile/predict.cpp: the roofline per instruction and the two-stream schedule
// (docs/prediction.md, "The step-time model").
#include "engine/compile/predict.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "engine/compile/spmd.h"
#include "engine/ir/op.h"

namespace eng {
namespace {

double padded(int64_t x, int64_t tile) {
  return static_cast<double>((x + tile - 1) / tile * tile);
}

// The mixture-of-experts einsums MaxText's dense dispatch runs on the matrix unit (dispatch
// BSM,BSEC->EBCM, combine EBCM,BSEC->BSM and its weights' cotangent, the expert GEMMs
// EBCM,EMH->EBCH and their weight gradients): matmuls for the roofline.
bool moe_einsum(OpKind k) {
  return k == OpKind::kMoeDispatch || k == OpKind::kMoeCombine ||
         k == OpKind::kMoeCombineWeightsGrad || k == OpKind::kExpertMatmul ||
         k == OpKind::kExpertMatmulGrad || k == OpKind::kRaggedDot ||
         k == OpKind::kRaggedDotGrad;
}

// (M, N, K) of one of the GEMMs a moe_einsum is made of (per row b of dispatch and combine,
// per expert g of the expert GEMMs), for the matrix unit's padding.
struct Gemm {
  int64_t M = 0, N = 0, K = 0;
};

Gemm moe_einsum_dims(const Program& p, const Instr& in) {
  const Shape& a = p.value(in.inputs[0]).shape;
  const Shape& b = p.value(in.inputs[1]).shape;
  Gemm d;
  switch (in.kind) {
    case OpKind::kMoeDispatch:  // combine (B,S,E,C), x (B,S,M): (E C) x M over S
      d.M = a.dim(2) * a.dim(3), d.N = b.dim(-1), d.K = a.dim(1);
      break;
    case OpKind::kMoeCombine:  // combine (B,S,E,C), y (E,B,C,M): S x M over (E C)
      d.M = a.dim(1), d.N = b.dim(-1), d.K = a.dim(2) * a.dim(3);
      break;
    case OpKind::kMoeCombineWeightsGrad:  // dout (B,S,M), y (E,B,C,M): S x (E C) over M
      d.M = a.dim(1), d.N = b.dim(0) * b.dim(2), d.K = a.dim(-1);
      break;
    case OpKind::kExpertMatmul: {  // a (G,...,K), w (G,K,N) or (G,N,K): rows x N over K
      d.K = a.dim(-1);
      d.M = a.prod(1, a.rank() - 1);
      d.N = in.attrs.trans_b ? b.dim(1) : b.dim(2);
      break;
    }
    // The dropless dispatch's grouped GEMMs (lhs ([B,]N,K), group_sizes ([B,]E)): balanced
    // groups of N / E rows (the sizes are data; MaxText's megablox tiles them the same way).
    case OpKind::kRaggedDot: {  // rows x P over K
      const int64_t E = p.value(in.inputs[2]).shape.dim(-1);
      d.M = std::max<int64_t>(1, a.dim(-2) / E), d.K = a.dim(-1);
      d.N = in.attrs.trans_b ? b.dim(1) : b.dim(2);
      break;
    }
    case OpKind::kRaggedDotGrad: {  // K x P over the rows
      const int64_t E = p.value(in.inputs[2]).shape.dim(-1);
      d.M = a.dim(-1), d.N = b.dim(-1), d.K = std::max<int64_t>(1, a.dim(-2) / E);
      break;
    }
    default:  // kExpertMatmulGrad: a (G,...,K), dy (G,...,N) -> (G,K,N): K x N over rows
      d.M = a.dim(-1), d.N = b.dim(-1), d.K = a.prod(1, a.rank() - 1);
      break;
  }
  return d;
}

const char* cost_class(OpKind k) {
  if (moe_einsum(k)) return "matmul";
  switch (k) {
    case OpKind::kMatmul:
      return "matmul";
    case OpKind::kAttention:
    case OpKind::kAttentionGrad:
      return "attention";
    case OpKind::kAdamW:
    case OpKind::kSumSquares:
    case OpKind::kGlobalNorm:
    case OpKind::kClipFactor:
    case OpKind::kLearningRate:
    case OpKind::kIncrement:
      return "optimizer";
    default:
      return "memory-bound";
  }
}

double bytes_of(const Program& p, ValueId v) { return static_cast<double>(p.value(v).bytes()); }

// HBM bytes an instruction moves. Layout-only ops move nothing; ops that read one slice of a
// stacked input or update one slice in place move that slice, not the stack.
double hbm_bytes(const Program& p, const Instr& in) {
  switch (in.kind) {
    case OpKind::kReshape:
    case OpKind::kConstraint:
    case OpKind::kAxisIndex:
      return 0;
    case OpKind::kIndexInDim:
    case OpKind::kIndexPerRow:
    case OpKind::kDynamicSlice:
    case OpKind::kDynamicSliceInDim:
    case OpKind::kSlice:
    case OpKind::kEmbedLookup:
      return 2 * bytes_of(p, in.outputs[0]);
    case OpKind::kAddIndexInDim:   // (update[, acc]): read the slot and the update, write the
    case OpKind::kAddIndexPerRow:  // slot; without acc the stack is first zeroed (written once)
      return 3 * bytes_of(p, in.inputs[0]) +
             (in.inputs.size() < 2 ? bytes_of(p, in.outputs[0]) : 0);
    default:
      return instr_bytes_accessed(p, in);
  }
}

CollectiveKind collective_kind(OpKind k) {
  switch (k) {
    case OpKind::kAllGather:
      return CollectiveKind::kAllGather;
    case OpKind::kReduceScatter:
      return CollectiveKind::kReduceScatter;
    case OpKind::kAllReduce:
      return CollectiveKind::kAllReduce;
    case OpKind::kAllToAll:
    case OpKind::kRaggedAllToAll:  // timed as an all-to-all of its balanced bytes (cost.cpp)
      return CollectiveKind::kAllToAll;
    default:
      return CollectiveKind::kPermute;
  }
}

bool moves_data(OpKind k) {
  return k == OpKind::kAllGather || k == OpKind::kReduceScatter || k == OpKind::kAllReduce ||
         k == OpKind::kAllToAll || k == OpKind::kCollectivePermute ||
         k == OpKind::kRaggedAllToAll;
}

std::string human_seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.{}f} {}", b, u == 0 ? 0 : 2, units[u]);
}

// The collective stream's busy intervals. A collective takes the earliest gap that starts
// at or after its inputs are ready and is long enough: collectives run in the order their
// inputs become ready, not in program order (XLA's latency-hiding scheduler moves a layer's
// weight all-gather ahead of an earlier reduce-scatter that still waits for its gradient).
class NetworkTimeline {
 public:
  double place(double ready, double dur) {
    double t = ready;
    size_t i = 0;
    // busy_ is sorted by start and disjoint; skip intervals that end before t.
    while (i < busy_.size() && busy_[i].second <= t) ++i;
    for (; i < busy_.size(); ++i) {
      if (busy_[i].first >= t + dur) break;  // the gap before interval i fits
      t = std::max(t, busy_[i].second);
    }
    busy_.insert(busy_.begin() + static_cast<std::ptrdiff_t>(i), {t, t + dur});
    return t;
  }

 private:
  std::vector<std::pair<double, double>> busy_;
};

}  // namespace

double matmul_efficiency(int64_t M, int64_t N, int64_t K, int64_t tile) {
  if (M <= 0 || N <= 0 || K <= 0 || tile <= 0) return 1;
  return static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) /
         (padded(M, tile) * padded(N, tile) * padded(K, tile));
}

double causal_block_factor(int64_t T, int64_t block_q, int64_t block_kv) {
  if (T <= 0) return 1;
  const int64_t bq = std::clamp<int64_t>(block_q, 1, T), bkv = std::clamp<int64_t>(block_kv, 1, T);
  double computed = 0;  // (query, key) pairs in the tiles the kernel computes
  for (int64_t q0 = 0; q0 < T; q0 += bq) {
    const int64_t rows = std::min(bq, T - q0);
    const int64_t last_key = q0 + rows - 1;                        // the block's last query
    const int64_t keys = std::min(T, (last_key / bkv + 1) * bkv);  // kv blocks up to it
    computed += static_cast<double>(rows) * static_cast<double>(keys);
  }
  const double causal = static_cast<double>(T) * static_cast<double>(T + 1) / 2;
  return computed / causal;
}

double attention_backward_factor(int64_t T, const PredictOptions& o) {
  const double dkv = causal_block_factor(T, o.attention_block_q_dkv, o.attention_block_kv_dkv);
  if (o.attention_fused_bwd) return 5.0 / 4.0 * dkv;
  return dkv + 3.0 / 4.0 * causal_block_factor(T, o.attention_block_q_dq, o.attention_block_kv_dq);
}

Result<Prediction> predict_step(const Executable& exe, const PhysicalMesh& pm,
                                const PredictOptions& options) {
  const Mesh& mesh = exe.mesh();
  for (int a = 0; a < mesh.num_axes(); ++a) {
    const std::string& name = mesh.axis_names()[static_cast<size_t>(a)];
    if (mesh.axis_sizes()[static_cast<size_t>(a)] != pm.mesh.axis_size(name))
      return invalid_argument(
          "predict: the executable's mesh {} does not match the mesh laid on {} ({})",
          mesh.to_string(), pm.topology.name, pm.mesh.to_string());
  }
  const Topology& t = pm.topology;
  // The matrix unit's sustained rate (peak x the chip's public sustained fraction, or the
  // peak where none is known): the ceiling for matmuls and for attention's matmuls alike.
  const double peak = t.mxu_flops_per_device();
  const double hbm_bw = t.hbm_bytes_per_s_per_device();
  const int64_t tile = t.chip.matrix_unit_dim;
  const Program& p = exe.program();
  const double host_bw = t.host_bytes_per_s_per_device();
  for (const Instr& in : p.instrs())
    if ((in.kind == OpKind::kMoveToHost || in.kind == OpKind::kMoveToDevice) && host_bw <= 0)
      return invalid_argument(
          "predict: the program offloads values to host memory (remat_policy offloads), but "
          "chip {} has no host_bytes_per_s (the host link's bandwidth is not known for {}): "
          "use a remat policy without offload on this topology",
          t.chip.name, t.name);

  std::vector<double> ready(p.values().size(), 0.0);  // when each value is available
  NetworkTimeline net, to_host, to_device;
  double backward_start = -1;  // the compute clock at the first move back to the device
  const std::string host_key = "host";
  // Values computed from parameters alone (no step input, no step result).
  std::vector<bool> from_weights(p.values().size(), false);
  // Per value: the axes of the collective it (or the weights-only chain to it) came from.
  std::vector<const std::string*> waited_on(p.values().size(), nullptr);
  for (const Argument& a : p.args())
    from_weights[a.value] = a.role == ArgRole::kParam;
  double compute_clock = 0, net_clock = 0;
  std::map<std::string, PredictedCompute> by_class;
  std::map<std::string, PredictedCollectives> by_axes;
  std::map<std::string, CollectiveGroup> groups;
  Prediction out;
  for (const Instr& in : p.instrs()) {
    double inputs_ready = 0;
    bool weights_only = !in.inputs.empty();
    for (ValueId v : in.inputs) {
      inputs_ready = std::max(inputs_ready, ready[v]);
      weights_only = weights_only && from_weights[v];
    }
    double finish = 0;
    if (in.kind == OpKind::kMoveToHost || in.kind == OpKind::kMoveToDevice) {
      const double bytes = bytes_of(p, in.inputs[0]);
      const double dur = bytes / host_bw;
      double earliest = inputs_ready;
      NetworkTimeline* link = &to_host;
      if (in.kind == OpKind::kMoveToDevice) {
        if (backward_start < 0) backward_start = compute_clock;
        earliest = std::max(earliest, backward_start);
        link = &to_device;
      }
      finish = link->place(earliest, dur) + dur;
      net_clock = std::max(net_clock, finish);
      out.host_transfers.seconds += dur;
      out.host_transfers.bytes += bytes;
      ++out.host_transfers.count;
      for (ValueId v : in.outputs) waited_on[v] = &host_key;
    } else if (moves_data(in.kind)) {
      const std::string key = collective_axes_key(in.attrs.mesh_axes);
      auto g = groups.find(key);
      if (g == groups.end()) g = groups.emplace(key, group_of(pm, in.attrs.mesh_axes)).first;
      const double shard = in.kind == OpKind::kReduceScatter ? bytes_of(p, in.outputs[0])
                                                             : bytes_of(p, in.inputs[0]);
      const double dur = collective_seconds(collective_kind(in.kind), shard, g->second);
      const double start = net.place(inputs_ready, dur);
      finish = start + dur;
      net_clock = std::max(net_clock, finish);
      PredictedCollectives& c = by_axes[key];
      for (ValueId v : in.outputs) waited_on[v] = &c.axes;
      c.axes = key;
      c.seconds += dur;
      c.bytes += collective_bytes_received(p, in);
      ++c.count;
      out.collective_s += dur;
    } else {
      const double bytes = hbm_bytes(p, in);
      double dur = bytes / hbm_bw;
      double flops = 0;
      if (in.kind == OpKind::kMatmul) {
        const DotDims d =
            dot_dims(in.attrs, p.value(in.inputs[0]).shape, p.value(in.inputs[1]).shape);
        flops = instr_flops(p, in);
        dur = std::max(dur, flops / (peak * matmul_efficiency(d.M, d.N, d.K, tile)));
      } else if (moe_einsum(in.kind)) {
        const Gemm d = moe_einsum_dims(p, in);
        flops = instr_flops(p, in);
        dur = std::max(dur, flops / (peak * matmul_efficiency(d.M, d.N, d.K, tile)));
      } else if (in.kind == OpKind::kAttention || in.kind == OpKind::kAttentionGrad) {
        const Shape& q = p.value(in.inputs[0]).shape;  // (B, T, H, D)
        const int64_t D = q.dim(-1), T = q.dim(1);
        const double eff = static_cast<double>(D) / padded(D, tile);
        flops = instr_flops(p, in);
        // The kernel computes whole tiles up to the diagonal; its backward recomputes QK^T
        // (and, in MaxText's default unfused form, dP for a second, dQ kernel).
        const double work =
            flops * (in.kind == OpKind::kAttentionGrad
                         ? attention_backward_factor(T, options)
                         : causal_block_factor(T, options.attention_block_q,
                                               options.attention_block_kv));
        dur = std::max(dur, work / (peak * eff));
      }
      if (bytes == 0 && flops == 0) dur = 0;
      PredictedCompute& c = by_class[cost_class(in.kind)];
      c.op_class = cost_class(in.kind);
      c.seconds += dur;
      c.flops += flops;
      c.bytes += bytes;
      ++c.count;
      out.compute_s += dur;
      // The collective the latest input waited for (through weights-only ops), if any.
      const std::string* late = nullptr;
      for (ValueId v : in.inputs)
        if (ready[v] == inputs_ready && waited_on[v] != nullptr) late = waited_on[v];
      if (weights_only) {
        // Work on the weights alone (a layer's slice of a stacked parameter, its bf16 convert)
        // depends on no step result: XLA schedules it early, so it runs when its inputs are
        // ready and its time is still charged to the compute stream.
        compute_clock += dur;
        for (ValueId v : in.outputs) ready[v] = inputs_ready + dur, waited_on[v] = late;
        for (ValueId v : in.outputs) from_weights[v] = true;
        continue;
      }
      // A compute instruction waits for its inputs; the wait past the compute stream's own
      // clock is exposed collective time, charged to the collective's axes.
      const double start = std::max(compute_clock, inputs_ready);
      if (late != &host_key) out.exposed_collective_s += start - compute_clock;
      if (start > compute_clock && late == &host_key)
        out.host_transfers.exposed_seconds += start - compute_clock;
      else if (start > compute_clock && late != nullptr)
        by_axes[*late].exposed_seconds += start - compute_clock;
      finish = compute_clock = start + dur;
    }
    for (ValueId v : in.outputs) ready[v] = finish, from_weights[v] = weights_only;
  }
  out.topology = t.name;
  out.num_slices = t.num_slices;
  out.chip = t.chip.name;
  out.mxu_flops_per_s = peak;
  out.mxu_sustained_fraction = t.chip.mxu_sustained_fraction;
  out.step_time_s = std::max(compute_clock, net_clock);
  for (auto& [k, v] : by_class) out.compute.push_back(v);
  for (auto& [k, v] : by_axes) out.collectives.push_back(v);
  std::sort(out.compute.begin(), out.compute.end(),
            [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  std::sort(out.collectives.begin(), out.collectives.end(),
            [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  if (out.collective_s > out.compute_s && !out.collectives.empty())
    out.bound = fmt::format("collectives ({})", out.collectives[0].axes);
  else if (!out.compute.empty())
    out.bound = fmt::format("compute ({})", out.compute[0].op_class);
  else
    out.bound = "nothing";
  out.peak_bytes = exe.memory().peak_bytes();
  out.host_temp_bytes = exe.memory().host_temp_bytes;
  out.hbm_bytes = t.hbm_bytes_per_device();
  out.fits = out.peak_bytes <= out.hbm_bytes;
  return out;
}

std::string Prediction::to_table() const {
  std::string s = fmt::format(
      "predicted step on {}{}: {:.3f} s ({}-bound)\n", topology,
      num_slices > 1 ? fmt::format(" x {} slices", num_slices) : std::string(), step_time_s,
      bound);
  if (tflops_per_device > 0)
    s += fmt::format("  {:.3f} TFLOP/s/device (MaxText's count, {:.1f} TFLOP per step), "
                     "{:.1f} tokens/s/device, MFU {:.1f}%\n",
                     tflops_per_s_per_device, tflops_per_device, tokens_per_s_per_device,
                     100 * mfu);
  s += mxu_sustained_fraction > 0
           ? fmt::format("  matrix unit: {:.1f} TFLOP/s per device, {:.1f}% of {}'s peak (its "
                         "public sustained-matmul measurement)\n",
                         mxu_flops_per_s / 1e12, 100 * mxu_sustained_fraction, chip)
           : fmt::format("  matrix unit: {:.1f} TFLOP/s per device, {}'s peak (no public "
                         "sustained-matmul measurement: the roofline)\n",
                         mxu_flops_per_s / 1e12, chip);
  s += fmt::format("  memory: peak {} of {} HBM per device: {}\n", human_bytes(peak_bytes),
                   human_bytes(hbm_bytes),
                   fits ? fmt::format("fits ({} free)", human_bytes(hbm_bytes - peak_bytes))
                        : fmt::format("DOES NOT FIT ({} over)",
                                      human_bytes(peak_bytes - hbm_bytes)));
  if (host_temp_bytes > 0)
    s += fmt::format("  host memory: {} per device offloaded (remat policy)\n",
                     human_bytes(static_cast<double>(host_temp_bytes)));
  s += fmt::format("  {:<22} {:>12} {:>8} {:>14} {:>8}\n", "compute", "time", "share",
                   "TFLOP", "ops");
  for (const PredictedCompute& c : compute)
    s += fmt::format("  {:<22} {:>12} {:>7.1f}% {:>14.2f} {:>8}\n", c.op_class,
                     human_seconds(c.seconds), 100 * c.seconds / std::max(compute_s, 1e-30),
                     c.flops / 1e12, c.count);
  if (!collectives.empty()) {
    s += fmt::format("  {:<22} {:>12} {:>12} {:>14} {:>8}\n", "collectives (axes)", "time",
                     "exposed", "received", "ops");
    for (const PredictedCollectives& c : collectives)
      s += fmt::format("  {:<22} {:>12} {:>12} {:>14} {:>8}\n", c.axes, human_seconds(c.seconds),
                       human_seconds(c.exposed_seconds), human_bytes(c.bytes), c.count);
  }
  if (host_transfers.count > 0 && collectives.empty())
    s += fmt::format("  {:<22} {:>12} {:>12} {:>14} {:>8}\n", "transfers", "time", "exposed",
                     "moved", "ops");
  if (host_transfers.count > 0)
    s += fmt::format("  {:<22} {:>12} {:>12} {:>14} {:>8}\n", "host offload (PCIe)",
                     human_seconds(host_transfers.seconds),
                     human_seconds(host_transfers.exposed_seconds),
                     human_bytes(host_transfers.bytes), host_transfers.count);
  s += fmt::format("  total: compute {}, collectives {} ({} exposed)", human_seconds(compute_s),
                   human_seconds(collective_s), human_seconds(exposed_collective_s));
  return s;
}

}  // namespace eng
