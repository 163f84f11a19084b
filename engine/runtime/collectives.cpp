// engine/runtime/collectives.cpp: DeviceCommunicator: collectives over the devices of this
// process by block copies and ordered sums, with per-device, per-axes byte counters; members
// in other processes (engine/dist) send exactly the blocks each local receiver reads, which
// land in a staging copy of their input so the same copies and sums run on them.
#include "engine/runtime/collectives.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/base/check.h"
#include "engine/base/clock.h"
#include "engine/base/limits.h"
#include "engine/compile/spmd.h"
#include "engine/ir/op_table.h"
#include "engine/sharding/shard_geometry.h"
#include "engine/tensor/kernels.h"

namespace eng {

namespace {

// (outer, mid, inner) view of a local shape around `dim`.
void split3(const Shape& s, int dim, int64_t& outer, int64_t& mid, int64_t& inner) {
  outer = s.prod(0, dim);
  mid = s[dim];
  inner = s.prod(dim + 1, s.rank());
}

// A block of one member's input that one receiver reads: `outer` runs of `run` bytes, `stride`
// bytes apart, the first at `offset`.
struct Piece {
  int64_t outer = 1, stride = 0, offset = 0, run = 0;
  int64_t bytes() const { return outer * run; }
};

class DeviceCommunicator final : public Communicator {
 public:
  DeviceCommunicator(const Mesh& mesh, dist::DeviceRange local,
                     std::unique_ptr<dist::Channel> channel)
      : mesh_(mesh), n_(mesh.num_devices()), local_(local), channel_(std::move(channel)),
        counters_(static_cast<size_t>(n_) << std::min(mesh.num_axes(), 12), 0.0) {
    ENG_CHECK(mesh.num_axes() <= 12, "communicator: {} mesh axes (at most 12)", mesh.num_axes());
    ENG_CHECK(channel_ || (local.lo == 0 && local.hi == n_),
              "communicator: devices [{}, {}) of {} without a channel", local.lo, local.hi, n_);
    if (channel_) {
      const size_t P = static_cast<size_t>(dist::process().count);
      send_.resize(P);
      recv_.resize(P);
      send_spans_.resize(P);
      recv_spans_.resize(P);
      pos_.resize(P);
      staging_slot_.assign(static_cast<size_t>(n_), -1);
    }
  }

  void run(const Program& p, const Instr& in, std::span<void* const* const> buf) override {
    ENG_CHECK(static_cast<int64_t>(buf.size()) == n_, "communicator: {} buffer tables for {} devices",
              buf.size(), n_);
    const AxesGroup g(mesh_, in.attrs.mesh_axes);
    if (channel_ && in.kind == OpKind::kRaggedAllToAll) {  // prepare() refused a spanning one
      ENG_CHECK(!spans_processes(g), "communicator: ragged_all_to_all across processes");
    } else if (channel_ && in.kind != OpKind::kDynamicSlice && !transfer(p, in, g, buf)) {
      return;
    }
    const CollectiveFn fn = kCollectives[op_index(in.kind)];
    for (int64_t leader = 0; leader < n_; ++leader) {
      if (!g.is_leader(leader)) continue;
      (this->*fn)(Group{p, in, g, leader, buf});
    }
  }

  Status prepare(const Program& p) override;
  void begin(uint64_t fingerprint, int64_t execution) override {
    fingerprint_ = fingerprint;
    execution_ = execution;
  }
  Status take_error() override { return std::exchange(error_, ok_status()); }
  double wait_seconds() const override { return wait_s_; }

  std::map<std::string, double> bytes_received(int device) const override {
    std::map<std::string, double> out;
    const size_t slots = size_t{1} << std::min(mesh_.num_axes(), 12);
    for (size_t m = 1; m < slots; ++m) {
      const double b = counters_[device * slots + m];
      if (b == 0) continue;
      std::vector<std::string> axes;
      for (int a = 0; a < mesh_.num_axes(); ++a)
        if (m & (size_t{1} << a)) axes.push_back(mesh_.axis_names()[a]);
      out[collective_axes_key(axes)] += b;
    }
    return out;
  }

  void reset_counters() override {
    std::fill(counters_.begin(), counters_.end(), 0.0);
  }

 private:
  // Counters are keyed by the set of axes (a bitmask); keys as compile's (spmd.h).
  void count(int64_t device, uint32_t mask, int64_t bytes) {
    const size_t slots = size_t{1} << std::min(mesh_.num_axes(), 12);
    counters_[device * slots + mask] += static_cast<double>(bytes);
  }

  bool local(int64_t device) const { return local_.contains(device); }
  // Does some group of g have members in another process?
  bool spans_processes(const AxesGroup& g) const {
    for (int64_t leader = 0; leader < n_; ++leader) {
      if (!g.is_leader(leader)) continue;
      for (int64_t r = 1; r < g.size(); ++r)
        if (process_of(g.member(leader, r)) != process_of(leader)) return true;
    }
    return false;
  }
  int process_of(int64_t device) const { return dist::process_of_device(device, n_); }
  // Device `device`'s input x: its own buffer here, else its staging copy.
  const void* input(std::span<void* const* const> buf, int64_t device, ValueId x) {
    return local(device) ? buf[device][x] : staging(device);
  }
  // The staging copy of remote device `device`'s input (one this process's devices read).
  char* staging(int64_t device) {
    const int64_t slot = staging_slot_[static_cast<size_t>(device)];
    ENG_CHECK(slot >= 0, "communicator: device {} is read but has no staging slot", device);
    return staging_.data() + slot * staging_stride_;
  }

  // ---- cross-process transfers (only with a channel) ----

  static bool per_receiver(OpKind k) { return k == OpKind::kReduceScatter || k == OpKind::kAllToAll; }
  // Does the member of rank r read the input of the member of rank m? (dynamic_slice never
  // crosses: run() and prepare() skip it.)
  static bool needs(const Instr& in, int64_t G, int64_t r, int64_t m) {
    return in.kind != OpKind::kCollectivePermute || permute_source(in.attrs, G, r) == m;
  }
  static Piece piece(const Program& p, const Instr& in, int64_t G, int64_t r);
  template <typename F>
  void for_each_transfer(const Instr& in, const AxesGroup& g, bool outgoing, F&& f) const;
  bool transfer(const Program& p, const Instr& in, const AxesGroup& g,
                std::span<void* const* const> buf);

  // One collective instruction on the group of one leader (the group's rank-0 member).
  struct Group {
    const Program& p;
    const Instr& in;
    const AxesGroup& g;
    int64_t leader;
    std::span<void* const* const> buf;  // buf[device][ValueId]; this process's devices only
    ValueId x() const { return in.inputs[0]; }
    ValueId y() const { return in.outputs[0]; }
  };
  using CollectiveFn = void (DeviceCommunicator::*)(const Group&);
  // One row per OpKind (engine/ir/op_table.h): a collective's method, else not_a_collective.
  static const OpTable<CollectiveFn> kCollectives;

  void not_a_collective(const Group& c) {
    ENG_CHECK(false, "communicator: {} is not a collective", op_name(c.in.kind));
  }

  // Member r's block at r along dim.
  void all_gather(const Group& c) {
    const Shape& xs = c.p.value(c.x()).shape;
    const int64_t elem = dtype_size(c.p.value(c.x()).dtype), G = c.g.size();
    int64_t outer, mid, inner;
    split3(xs, c.in.attrs.dim, outer, mid, inner);
    const int64_t run = mid * inner * elem;
    exchange(c.g, c.leader, c.buf, c.x(), c.y(), c.p.value(c.x()).bytes(),
             [&](int64_t, int64_t m, void* dst, const void* src) {
               char* out = static_cast<char*>(dst);
               const char* inp = static_cast<const char*>(src);
               for (int64_t o = 0; o < outer; ++o)
                 std::memcpy(out + (o * G + m) * run, inp + o * run, run);
             });
  }

  // Member r: block r of the sum, in rank order. bf16 (grad_dtype=bfloat16): each member's
  // addition is done in f32 and rounded to bf16 (docs/precision.md); i32 wraps.
  void reduce_scatter(const Group& c) {
    const DType dtype = c.p.value(c.x()).dtype;
    int64_t outer, mid, inner;
    split3(c.p.value(c.x()).shape, c.in.attrs.dim, outer, mid, inner);
    const int64_t blk = mid / c.g.size() * inner, elem = dtype_size(dtype);
    exchange(c.g, c.leader, c.buf, c.x(), c.y(), c.p.value(c.y()).bytes(),
             [&](int64_t r, int64_t m, void* dst, const void* src) {
               for (int64_t o = 0; o < outer; ++o) {
                 const char* s = static_cast<const char*>(src) + (o * mid * inner + r * blk) * elem;
                 char* d = static_cast<char*>(dst) + o * blk * elem;
                 if (m == 0)
                   std::memcpy(d, s, blk * elem);
                 else
                   accumulate(d, s, blk, dtype, false);
               }
             });
  }

  // d[i] += s[i] (or max), n elements of f32, of bf16 with f32 math rounded once per call, or
  // of i32 (wrapping). Sums run on the vectorised kernels (kern::add, kern::add_bf16: the same
  // rounding as f32_to_bf16, so the bits do not change).
  static void accumulate(void* d, const void* s, int64_t n, DType dtype, bool reduce_max) {
    if (dtype == DType::kI32) {
      auto* out = static_cast<int32_t*>(d);
      const auto* in = static_cast<const int32_t*>(s);
      if (!reduce_max) return kern::add_i32(out, in, out, n);
      for (int64_t i = 0; i < n; ++i) out[i] = std::max(out[i], in[i]);
      return;
    }
    const bool bf16 = dtype == DType::kBF16;
    if (!reduce_max) {
      if (bf16)
        kern::add_bf16(static_cast<const uint16_t*>(d), static_cast<const uint16_t*>(s),
                       static_cast<uint16_t*>(d), n);
      else
        kern::add(static_cast<const float*>(d), static_cast<const float*>(s), static_cast<float*>(d), n);
      return;
    }
    if (!bf16) {
      float* out = static_cast<float*>(d);
      const float* in = static_cast<const float*>(s);
      for (int64_t i = 0; i < n; ++i) out[i] = out[i] < in[i] ? in[i] : out[i];
      return;
    }
    uint16_t* out = static_cast<uint16_t*>(d);
    const uint16_t* in = static_cast<const uint16_t*>(s);
    for (int64_t i = 0; i < n; ++i)
      if (bf16_to_f32(out[i]) < bf16_to_f32(in[i])) out[i] = in[i];
  }

  // Every member sums (or maxes) all members' inputs in rank order.
  void all_reduce(const Group& c) {
    const DType dtype = c.p.value(c.x()).dtype;
    const int64_t n = c.p.value(c.x()).shape.numel();
    const bool reduce_max = c.in.attrs.reduce_max;
    exchange(c.g, c.leader, c.buf, c.x(), c.y(), c.p.value(c.x()).bytes(),
             [&](int64_t, int64_t m, void* dst, const void* src) {
               if (m == 0)
                 std::memcpy(dst, src, c.p.value(c.x()).bytes());
               else
                 accumulate(dst, src, n, dtype, reduce_max);
             });
  }

  // Member r's x goes to member r + shift (mod G); with fill_zero, a partial permutation:
  // no wrap-around, and members nobody sends to get zeros.
  void collective_permute(const Group& c) {
    const AxesGroup& g = c.g;
    const ValueId x = c.x(), y = c.y();
    const int64_t xbytes = c.p.value(x).bytes(), G = g.size();
    for (int64_t r = 0; r < G; ++r) {
      const int64_t dst = g.member(c.leader, r);
      if (!local(dst)) continue;
      const int64_t from = permute_source(c.in.attrs, G, r);
      if (from < 0) {
        std::memset(c.buf[dst][y], 0, xbytes);
        continue;
      }
      const int64_t src = g.member(c.leader, from);
      std::memcpy(c.buf[dst][y], input(c.buf, src, x), xbytes);
      if (src != dst) count(dst, g.axis_mask(), xbytes);
    }
  }

  // Member r keeps block r along dim (no traffic).
  void dynamic_slice(const Group& c) {
    const int64_t elem = dtype_size(c.p.value(c.x()).dtype), G = c.g.size();
    int64_t outer, mid, inner;
    split3(c.p.value(c.x()).shape, c.in.attrs.dim, outer, mid, inner);
    const int64_t run = mid / G * inner * elem;
    for (int64_t r = 0; r < G; ++r) {
      const int64_t d = c.g.member(c.leader, r);
      if (!local(d)) continue;
      const char* inp = static_cast<const char*>(c.buf[d][c.x()]);
      char* out = static_cast<char*>(c.buf[d][c.y()]);
      for (int64_t o = 0; o < outer; ++o) std::memcpy(out + o * run, inp + (o * G + r) * run, run);
    }
  }

  // Member m's chunk r along split_dim goes to member r at position m along concat_dim.
  void all_to_all(const Group& c) {
    const Program& p = c.p;
    const Instr& in = c.in;
    const AxesGroup& g = c.g;
    const ValueId x = c.x(), y = c.y();
    const Shape& xs = p.value(x).shape;
    const Shape& ys = p.value(y).shape;
    const int rank = xs.rank();
    ENG_CHECK(rank <= kMaxRank, "all_to_all: rank {}", rank);
    const int64_t elem = dtype_size(p.value(x).dtype), G = g.size();
    const int sd = in.attrs.dim, cd = in.attrs.dim2;
    int64_t ext[kMaxRank] = {}, xstr[kMaxRank], ystr[kMaxRank];
    for (int k = 0; k < rank; ++k) ext[k] = xs[k];
    ext[sd] /= G;
    xstr[rank - 1] = ystr[rank - 1] = 1;
    for (int k = rank - 2; k >= 0; --k) {
      xstr[k] = xstr[k + 1] * xs[k + 1];
      ystr[k] = ystr[k + 1] * ys[k + 1];
    }
    const int64_t chunk_bytes = p.value(x).bytes() / G;
    exchange(g, c.leader, c.buf, x, y, chunk_bytes,
             [&](int64_t r, int64_t m, void* dst, const void* src) {
               char* out = static_cast<char*>(dst);
               const char* inp = static_cast<const char*>(src);
               const int64_t xoff = r * ext[sd] * xstr[sd], yoff = m * xs[cd] * ystr[cd];
               int64_t idx[kMaxRank] = {};
               int64_t total = 1;
               for (int k = 0; k < rank; ++k) total *= ext[k];
               const int64_t runlen = ext[rank - 1];
               for (int64_t e = 0; e < total; e += runlen) {
                 int64_t xo = xoff, yo = yoff;
                 for (int k = 0; k < rank - 1; ++k) {
                   xo += idx[k] * xstr[k];
                   yo += idx[k] * ystr[k];
                 }
                 std::memcpy(out + yo * elem, inp + xo * elem, runlen * elem);
                 for (int k = rank - 2; k >= 0; --k) {
                   if (++idx[k] < ext[k]) break;
                   idx[k] = 0;
                 }
               }
             });
  }

  // jax.lax.ragged_all_to_all (op.h): each member's rows go to the receivers' buffers at the
  // offsets the sender names, summed in sender order where two senders write one row. Each
  // device holds Gl members (global member q * Gl + j for the device of rank q); a receiver
  // is counted the bytes of the rows it gets from other devices.
  void ragged_all_to_all(const Group& c) {
    const Program& p = c.p;
    const ValueInfo& xv = p.value(c.x());
    const Shape& xs = xv.shape;
    const int rank = xs.rank();
    const DType dtype = xv.dtype;
    const int64_t elem = dtype_size(dtype), Gm = c.g.size();
    const int64_t L = xs.prod(0, rank - 3), Gl = xs[rank - 3], N = xs[rank - 2], F = xs[rank - 1];
    const int64_t G = Gm * Gl, R = c.in.attrs.size, row = F * elem;
    for (int64_t q = 0; q < Gm; ++q) {
      const int64_t dst = c.g.member(c.leader, q);
      if (!local(dst)) continue;
      char* y = static_cast<char*>(c.buf[dst][c.y()]);
      std::memset(y, 0, static_cast<size_t>(p.value(c.y()).bytes()));
      for (int64_t m = 0; m < Gm; ++m) {
        const int64_t src = c.g.member(c.leader, m);
        const char* x = static_cast<const char*>(c.buf[src][c.x()]);
        const auto* io = static_cast<const int32_t*>(c.buf[src][c.in.inputs[1]]);
        const auto* ss = static_cast<const int32_t*>(c.buf[src][c.in.inputs[2]]);
        const auto* oo = static_cast<const int32_t*>(c.buf[src][c.in.inputs[3]]);
        int64_t rows = 0;
        for (int64_t l = 0; l < L; ++l)
          for (int64_t jr = 0; jr < Gl; ++jr)
            for (int64_t js = 0; js < Gl; ++js) {
              const int64_t at = (l * Gl + js) * G + q * Gl + jr;
              const int64_t from = io[at], to = oo[at];
              // The rows inside both the source [0, N) and the buffer [0, R).
              const int64_t lo = std::max<int64_t>({0, -from, -to});
              const int64_t hi = std::min<int64_t>({ss[at], N - from, R - to});
              if (hi <= lo) continue;
              const char* a = x + ((l * Gl + js) * N + from + lo) * row;
              char* o = y + ((l * Gl + jr) * R + to + lo) * row;
              accumulate(o, a, (hi - lo) * F, dtype, false);
              rows += hi - lo;
            }
        if (src != dst) count(dst, c.g.axis_mask(), rows * row);
      }
    }
  }

  // The group of `leader` exchanges y from x: for each receiver r in this process (rank order)
  // and each sender m (rank order: the order reductions sum in), deliver(r, m, receiver's y,
  // sender's x); every receiver is counted `bytes` for each other member it hears from.
  template <typename Deliver>
  void exchange(const AxesGroup& g, int64_t leader, std::span<void* const* const> buf, ValueId x,
                ValueId y, int64_t bytes, Deliver&& deliver) {
    for (int64_t r = 0; r < g.size(); ++r) {
      const int64_t dst = g.member(leader, r);
      if (!local(dst)) continue;
      for (int64_t m = 0; m < g.size(); ++m) {
        const int64_t src = g.member(leader, m);
        deliver(r, m, buf[dst][y], input(buf, src, x));
        if (src != dst) count(dst, g.axis_mask(), bytes);
      }
    }
  }

  Mesh mesh_;
  int64_t n_;
  dist::DeviceRange local_;                  // this process's devices
  std::unique_ptr<dist::Channel> channel_;   // null: every device is here
  std::vector<double> counters_;             // [device][axes mask]
  // Cross-process buffers, sized by prepare(): per peer process the packed pieces sent to and
  // received from it, and per remote device a staging copy of (the read blocks of) its input.
  std::vector<std::vector<char>> send_, recv_;
  std::vector<std::span<const char>> send_spans_;
  std::vector<std::span<char>> recv_spans_;
  std::vector<int64_t> pos_;                 // per peer: bytes packed / unpacked so far
  std::vector<char> staging_;
  int64_t staging_stride_ = 0;               // bytes per staged remote device in staging_
  std::vector<int64_t> staging_slot_;        // per device: its slot in staging_ (-1: none; only
                                             // remote devices this process's devices read)
  int64_t staged_ = 0;                       // slots in use
  std::vector<uint64_t> fingerprints_;       // prepare's all-gather target, one per process
  Status error_;                             // first failed exchange since take_error()
  uint64_t fingerprint_ = 0;                 // begin(): the program running, for headers
  int64_t execution_ = -1;                   // begin(): its earlier executions
  double wait_s_ = 0;                        // seconds in channel exchanges, cumulative
};

using L = DeviceCommunicator;
#define ENG_NOT_COLLECTIVE(kind) {OpKind::kind, &L::not_a_collective},
constexpr OpTable<L::CollectiveFn> L::kCollectives = make_op_table<L::CollectiveFn>(
    {
        {OpKind::kAllGather, &L::all_gather},
        {OpKind::kReduceScatter, &L::reduce_scatter},
        {OpKind::kAllReduce, &L::all_reduce},
        {OpKind::kAllToAll, &L::all_to_all},
        {OpKind::kRaggedAllToAll, &L::ragged_all_to_all},
        {OpKind::kCollectivePermute, &L::collective_permute},
        {OpKind::kDynamicSlice, &L::dynamic_slice},
        // Per-device ops: the executor runs them (executor.cpp), never the communicator.
        ENG_NOT_COLLECTIVE(kEmbedLookup) ENG_NOT_COLLECTIVE(kOneHot) ENG_NOT_COLLECTIVE(kMatmul)
        ENG_NOT_COLLECTIVE(kRmsNorm) ENG_NOT_COLLECTIVE(kRope) ENG_NOT_COLLECTIVE(kAttention)
        ENG_NOT_COLLECTIVE(kSwiglu) ENG_NOT_COLLECTIVE(kAdd) ENG_NOT_COLLECTIVE(kMul)
        ENG_NOT_COLLECTIVE(kScale) ENG_NOT_COLLECTIVE(kConvert) ENG_NOT_COLLECTIVE(kConstraint)
        ENG_NOT_COLLECTIVE(kSoftmaxCrossEntropy) ENG_NOT_COLLECTIVE(kMaskedMeanLoss)
        ENG_NOT_COLLECTIVE(kEmbedLookupGrad) ENG_NOT_COLLECTIVE(kRmsNormGrad)
        ENG_NOT_COLLECTIVE(kAttentionGrad) ENG_NOT_COLLECTIVE(kSwigluGrad)
        ENG_NOT_COLLECTIVE(kSoftmaxCrossEntropyGrad) ENG_NOT_COLLECTIVE(kMaskedMeanLossGrad)
        ENG_NOT_COLLECTIVE(kSumSquares) ENG_NOT_COLLECTIVE(kGlobalNorm)
        ENG_NOT_COLLECTIVE(kClipFactor) ENG_NOT_COLLECTIVE(kLearningRate)
        ENG_NOT_COLLECTIVE(kAdamW) ENG_NOT_COLLECTIVE(kIncrement) ENG_NOT_COLLECTIVE(kSafeDivide)
        ENG_NOT_COLLECTIVE(kReshape) ENG_NOT_COLLECTIVE(kSlice) ENG_NOT_COLLECTIVE(kPad)
        ENG_NOT_COLLECTIVE(kConcat) ENG_NOT_COLLECTIVE(kShift) ENG_NOT_COLLECTIVE(kAxisIndex)
        ENG_NOT_COLLECTIVE(kVocabMax) ENG_NOT_COLLECTIVE(kVocabStats)
        ENG_NOT_COLLECTIVE(kXentFromStats) ENG_NOT_COLLECTIVE(kRepeatKv)
        ENG_NOT_COLLECTIVE(kRepeatKvGrad) ENG_NOT_COLLECTIVE(kIndexInDim)
        ENG_NOT_COLLECTIVE(kAddIndexInDim) ENG_NOT_COLLECTIVE(kRemainder)
        ENG_NOT_COLLECTIVE(kDynamicSliceInDim) ENG_NOT_COLLECTIVE(kDynamicUpdateSliceInDim)
        ENG_NOT_COLLECTIVE(kTranspose) ENG_NOT_COLLECTIVE(kCompare) ENG_NOT_COLLECTIVE(kSelect)
        ENG_NOT_COLLECTIVE(kIndexPerRow) ENG_NOT_COLLECTIVE(kAddIndexPerRow)
        ENG_NOT_COLLECTIVE(kMoeRoute) ENG_NOT_COLLECTIVE(kMoeRouteGrad)
        ENG_NOT_COLLECTIVE(kMoeDispatch) ENG_NOT_COLLECTIVE(kMoeCombine)
        ENG_NOT_COLLECTIVE(kMoeCombineWeightsGrad) ENG_NOT_COLLECTIVE(kExpertMatmul)
        ENG_NOT_COLLECTIVE(kExpertMatmulGrad)
            ENG_NOT_COLLECTIVE(kLayerNorm) ENG_NOT_COLLECTIVE(kLayerNormGrad)
                ENG_NOT_COLLECTIVE(kBiasAdd) ENG_NOT_COLLECTIVE(kBiasAddGrad)
                    ENG_NOT_COLLECTIVE(kMoveToHost) ENG_NOT_COLLECTIVE(kMoveToDevice)
                        ENG_NOT_COLLECTIVE(kMoeTopK) ENG_NOT_COLLECTIVE(kMoeTopKGrad)
                            ENG_NOT_COLLECTIVE(kMoePermute)
                                ENG_NOT_COLLECTIVE(kMoePermuteWeightsGrad)
                                    ENG_NOT_COLLECTIVE(kRaggedDot)
                                        ENG_NOT_COLLECTIVE(kRaggedDotGrad)
        ENG_NOT_COLLECTIVE(kMoeEpDispatch) ENG_NOT_COLLECTIVE(kMoeEpReturn)
        ENG_NOT_COLLECTIVE(kMoeEpPlan)
    },
    &L::not_a_collective, &L::not_a_collective);
#undef ENG_NOT_COLLECTIVE

// ---- cross-process transfers ----------------------------------------------------------------

// The bytes of a member's x that the member of rank r reads: block r along the scattered dim
// (reduce_scatter: the block it sums; all_to_all: the chunk it receives), else all of x.
Piece DeviceCommunicator::piece(const Program& p, const Instr& in, int64_t G, int64_t r) {
  const ValueInfo& x = p.value(in.inputs[0]);
  if (!per_receiver(in.kind)) return Piece{1, 0, 0, x.bytes()};
  int64_t outer, mid, inner;
  split3(x.shape, in.attrs.dim, outer, mid, inner);
  const int64_t elem = dtype_size(x.dtype), run = mid / G * inner * elem;
  return Piece{outer, mid * inner * elem, r * run, run};
}

// Calls f(peer, sender device, receiver rank or -1) for every piece that crosses between this
// process and another: outgoing, the pieces this process's members send; else the pieces they
// receive. Both sides enumerate (leader, sender rank, receiver rank) in the same order, so the
// packed messages line up. A piece that does not depend on the receiver (rank -1) crosses once
// per peer process, however many of its devices read it.
template <typename F>
void DeviceCommunicator::for_each_transfer(const Instr& in, const AxesGroup& g, bool outgoing,
                                           F&& f) const {
  const int64_t G = g.size();
  const int me = dist::process().index, P = dist::process().count;
  for (int64_t leader = 0; leader < n_; ++leader) {
    if (!g.is_leader(leader)) continue;
    for (int64_t m = 0; m < G; ++m) {
      const int64_t src = g.member(leader, m);
      if (local(src) != outgoing) continue;
      if (per_receiver(in.kind)) {
        for (int64_t r = 0; r < G; ++r) {
          const int64_t dst = g.member(leader, r);
          if (local(dst) != outgoing && needs(in, G, r, m))
            f(outgoing ? process_of(dst) : process_of(src), src, r);
        }
        continue;
      }
      for (int q = 0; q < P; ++q) {
        if (q == me || (!outgoing && q != process_of(src))) continue;
        bool read = false;
        for (int64_t r = 0; r < G && !read; ++r) {
          const int64_t dst = g.member(leader, r);
          read = (outgoing ? process_of(dst) == q : local(dst)) && needs(in, G, r, m);
        }
        if (read) f(q, src, -1);
      }
    }
  }
}

// Packs the pieces other processes read, exchanges them and unpacks what this process's
// devices read into staging. false (error_ set) when the exchange failed.
bool DeviceCommunicator::transfer(const Program& p, const Instr& in, const AxesGroup& g,
                                  std::span<void* const* const> buf) {
  const int64_t G = g.size();
  const ValueId x = in.inputs[0];
  std::fill(pos_.begin(), pos_.end(), 0);
  for_each_transfer(in, g, true, [&](int q, int64_t src, int64_t r) {
    const Piece pc = piece(p, in, G, r < 0 ? 0 : r);
    const char* from = static_cast<const char*>(buf[src][x]) + pc.offset;
    char* to = send_[q].data() + pos_[q];
    for (int64_t o = 0; o < pc.outer; ++o) std::memcpy(to + o * pc.run, from + o * pc.stride, pc.run);
    pos_[q] += pc.bytes();
  });
  for (size_t q = 0; q < send_.size(); ++q) send_spans_[q] = {send_[q].data(), size_t(pos_[q])};
  std::fill(pos_.begin(), pos_.end(), 0);
  for_each_transfer(in, g, false, [&](int q, int64_t, int64_t r) {
    pos_[q] += piece(p, in, G, r < 0 ? 0 : r).bytes();
  });
  for (size_t q = 0; q < recv_.size(); ++q) recv_spans_[q] = {recv_[q].data(), size_t(pos_[q])};
  // The header peers compare: the same instruction of the same execution (no allocation).
  dist::MessageHeader h;
  h.program = fingerprint_;
  h.instr = &in - p.instrs().data();
  h.execution = execution_;
  fmt::format_to_n(h.what, sizeof h.what - 1, "{} over {} in {}", op_name(in.kind),
                   fmt::join(in.attrs.mesh_axes, ","), p.name());
  const double t0 = now_seconds();
  Status s = channel_->exchange(h, send_spans_, recv_spans_);
  wait_s_ += now_seconds() - t0;
  if (!s.ok()) {
    if (error_.ok()) error_ = Status(s.code(), fmt::format("{}: {}", op_name(in.kind), s.message()));
    return false;
  }
  std::fill(pos_.begin(), pos_.end(), 0);
  for_each_transfer(in, g, false, [&](int q, int64_t src, int64_t r) {
    const Piece pc = piece(p, in, G, r < 0 ? 0 : r);
    char* to = staging(src) + pc.offset;
    const char* from = recv_[q].data() + pos_[q];
    for (int64_t o = 0; o < pc.outer; ++o) std::memcpy(to + o * pc.stride, from + o * pc.run, pc.run);
    pos_[q] += pc.bytes();
  });
  return true;
}

// Grows the message and staging buffers to what p's collectives need, and checks that every
// process prepared the same program.
Status DeviceCommunicator::prepare(const Program& p) {
  if (!channel_) return ok_status();
  const int P = dist::process().count;
  fingerprints_.assign(static_cast<size_t>(P), 0);
  const uint64_t mine = p.fingerprint();
  ENG_RETURN_IF_ERROR(channel_->all_gather(
      dist::MessageHeader::labelled("prepare (the program fingerprints compared)"), &mine,
      sizeof mine, fingerprints_.data()));
  for (int q = 1; q < P; ++q)
    if (fingerprints_[q] != fingerprints_[0])
      return failed_precondition(
          "prepare {}: process {} compiled a different program than process 0 (fingerprint "
          "{:016x} vs {:016x}): every process must run the same script with the same config",
          p.name(), q, fingerprints_[q], fingerprints_[0]);
  std::vector<int64_t> send(P, 0), recv(P, 0);
  int64_t max_x = 0;
  const int64_t staged = staged_;
  for (const Instr& in : p.instrs()) {
    if (!is_collective(in.kind) || in.kind == OpKind::kDynamicSlice) continue;
    const AxesGroup g(mesh_, in.attrs.mesh_axes);
    if (in.kind == OpKind::kRaggedAllToAll) {
      // Its receivers read the senders' offsets and sizes as well as their rows; the
      // process channel stages one input per sender.
      if (spans_processes(g))
        return unimplemented(
            "prepare {}: ragged_all_to_all over {} spans processes: not supported across MPI "
            "processes yet (put the axes' devices in one process)",
            p.name(), fmt::join(in.attrs.mesh_axes, ","));
      continue;
    }
    max_x = std::max(max_x, p.value(in.inputs[0]).bytes());
    for (bool out : {true, false}) {
      std::fill(pos_.begin(), pos_.end(), 0);
      for_each_transfer(in, g, out, [&](int q, int64_t src, int64_t r) {
        pos_[q] += piece(p, in, g.size(), r < 0 ? 0 : r).bytes();
        if (!out && staging_slot_[static_cast<size_t>(src)] < 0)
          staging_slot_[static_cast<size_t>(src)] = staged_++;
      });
      for (int q = 0; q < P; ++q) (out ? send : recv)[q] = std::max((out ? send : recv)[q], pos_[q]);
    }
  }
  for (int q = 0; q < P; ++q) {
    if (static_cast<int64_t>(send_[q].size()) < send[q]) send_[q].resize(send[q]);
    if (static_cast<int64_t>(recv_[q].size()) < recv[q]) recv_[q].resize(recv[q]);
  }
  const int64_t stride = (max_x + 63) / 64 * 64;
  if (stride > staging_stride_ || staged_ > staged) {
    staging_stride_ = std::max(stride, staging_stride_);
    staging_.assign(static_cast<size_t>(staged_ * staging_stride_), 0);
  }
  return ok_status();
}

}  // namespace

std::unique_ptr<Communicator> make_local_communicator(const Mesh& mesh) {
  return std::make_unique<DeviceCommunicator>(mesh, dist::DeviceRange{0, mesh.num_devices()},
                                              nullptr);
}

std::unique_ptr<Communicator> make_process_communicator(const Mesh& mesh, dist::DeviceRange local,
                                                        std::unique_ptr<dist::Channel> channel) {
  return std::make_unique<DeviceCommunicator>(mesh, local, std::move(channel));
}

}  // namespace eng
