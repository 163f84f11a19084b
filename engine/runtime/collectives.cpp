// engine/runtime/collectives.cpp: LocalCommunicator: collectives over simulated devices by
// block copies and ordered sums, with per-device, per-axes byte counters.
#include "engine/runtime/collectives.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "engine/base/check.h"
#include "engine/compile/spmd.h"
#include "engine/ir/op_table.h"
#include "engine/sharding/shard_geometry.h"

namespace eng {

namespace {

constexpr int kMaxRank = 8;

// (outer, mid, inner) view of a local shape around `dim`.
void split3(const Shape& s, int dim, int64_t& outer, int64_t& mid, int64_t& inner) {
  outer = s.prod(0, dim);
  mid = s[dim];
  inner = s.prod(dim + 1, s.rank());
}

class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(const Mesh& mesh)
      : mesh_(mesh), n_(mesh.num_devices()),
        counters_(static_cast<size_t>(n_) << std::min(mesh.num_axes(), 12), 0.0) {
    ENG_CHECK(mesh.num_axes() <= 12, "communicator: {} mesh axes (at most 12)", mesh.num_axes());
  }

  void run(const Program& p, const Instr& in, std::span<void* const* const> buf) override {
    ENG_CHECK(static_cast<int64_t>(buf.size()) == n_, "communicator: {} buffer tables for {} devices",
              buf.size(), n_);
    const AxesGroup g(mesh_, in.attrs.mesh_axes);
    const CollectiveFn fn = kCollectives[op_index(in.kind)];
    for (int64_t leader = 0; leader < n_; ++leader) {
      if (!g.is_leader(leader)) continue;
      (this->*fn)(Group{p, in, g, leader, buf});
    }
  }

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

  void reset_counters() override { std::fill(counters_.begin(), counters_.end(), 0.0); }

 private:
  // Counters are keyed by the set of axes (a bitmask); keys as compile's (spmd.h).
  void count(int64_t device, uint32_t mask, int64_t bytes) {
    const size_t slots = size_t{1} << std::min(mesh_.num_axes(), 12);
    counters_[device * slots + mask] += static_cast<double>(bytes);
  }

  // One collective instruction on the group of one leader (the group's rank-0 member).
  struct Group {
    const Program& p;
    const Instr& in;
    const AxesGroup& g;
    int64_t leader;
    std::span<void* const* const> buf;  // buf[device][ValueId]
    ValueId x() const { return in.inputs[0]; }
    ValueId y() const { return in.outputs[0]; }
  };
  using CollectiveFn = void (LocalCommunicator::*)(const Group&);
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
  // addition is done in f32 and rounded to bf16 (docs/precision.md).
  void reduce_scatter(const Group& c) {
    const bool bf16 = c.p.value(c.x()).dtype == DType::kBF16;
    ENG_CHECK(bf16 || c.p.value(c.x()).dtype == DType::kF32, "reduce_scatter: f32 or bf16 only");
    int64_t outer, mid, inner;
    split3(c.p.value(c.x()).shape, c.in.attrs.dim, outer, mid, inner);
    const int64_t blk = mid / c.g.size() * inner, elem = bf16 ? 2 : 4;
    exchange(c.g, c.leader, c.buf, c.x(), c.y(), c.p.value(c.y()).bytes(),
             [&](int64_t r, int64_t m, void* dst, const void* src) {
               for (int64_t o = 0; o < outer; ++o) {
                 const char* s = static_cast<const char*>(src) + (o * mid * inner + r * blk) * elem;
                 char* d = static_cast<char*>(dst) + o * blk * elem;
                 if (m == 0)
                   std::memcpy(d, s, blk * elem);
                 else
                   accumulate(d, s, blk, bf16, false);
               }
             });
  }

  // d[i] += s[i] (or max), n elements of f32, or of bf16 with f32 math rounded once per call.
  static void accumulate(void* d, const void* s, int64_t n, bool bf16, bool reduce_max) {
    if (!bf16) {
      float* out = static_cast<float*>(d);
      const float* in = static_cast<const float*>(s);
      if (reduce_max)
        for (int64_t i = 0; i < n; ++i) out[i] = out[i] < in[i] ? in[i] : out[i];
      else
        for (int64_t i = 0; i < n; ++i) out[i] += in[i];
      return;
    }
    uint16_t* out = static_cast<uint16_t*>(d);
    const uint16_t* in = static_cast<const uint16_t*>(s);
    for (int64_t i = 0; i < n; ++i) {
      const float a = bf16_to_f32(out[i]), b = bf16_to_f32(in[i]);
      out[i] = reduce_max ? (a < b ? in[i] : out[i]) : f32_to_bf16(a + b);
    }
  }

  // Every member sums (or maxes) all members' inputs in rank order.
  void all_reduce(const Group& c) {
    const bool bf16 = c.p.value(c.x()).dtype == DType::kBF16;
    ENG_CHECK(bf16 || c.p.value(c.x()).dtype == DType::kF32, "all_reduce: f32 or bf16 only");
    const int64_t n = c.p.value(c.x()).shape.numel();
    const bool reduce_max = c.in.attrs.reduce_max;
    exchange(c.g, c.leader, c.buf, c.x(), c.y(), c.p.value(c.x()).bytes(),
             [&](int64_t, int64_t m, void* dst, const void* src) {
               if (m == 0)
                 std::memcpy(dst, src, c.p.value(c.x()).bytes());
               else
                 accumulate(dst, src, n, bf16, reduce_max);
             });
  }

  // Member r's x goes to member r + shift (mod G); with fill_zero, a partial permutation:
  // no wrap-around, and members nobody sends to get zeros.
  void collective_permute(const Group& c) {
    const AxesGroup& g = c.g;
    const ValueId x = c.x(), y = c.y();
    const int64_t xbytes = c.p.value(x).bytes(), G = g.size();
    if (c.in.attrs.fill_zero) {
      for (int64_t r = 0; r < G; ++r) {
        const int64_t from = r - c.in.attrs.shift, dst = g.member(c.leader, r);
        if (from < 0 || from >= G) {
          std::memset(c.buf[dst][y], 0, xbytes);
          continue;
        }
        const int64_t src = g.member(c.leader, from);
        std::memcpy(c.buf[dst][y], c.buf[src][x], xbytes);
        if (src != dst) count(dst, g.axis_mask(), xbytes);
      }
      return;
    }
    const int64_t shift = ((c.in.attrs.shift % G) + G) % G;
    for (int64_t r = 0; r < G; ++r) {
      const int64_t src = g.member(c.leader, r), dst = g.member(c.leader, (r + shift) % G);
      std::memcpy(c.buf[dst][y], c.buf[src][x], xbytes);
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

  // The group of `leader` exchanges y from x: for each receiver r (rank order) and each sender
  // m (rank order: the order reductions sum in), deliver(r, m, receiver's y, sender's x); every
  // receiver is counted `bytes` for each other member it hears from.
  template <typename Deliver>
  void exchange(const AxesGroup& g, int64_t leader, std::span<void* const* const> buf, ValueId x,
                ValueId y, int64_t bytes, Deliver&& deliver) {
    for (int64_t r = 0; r < g.size(); ++r) {
      const int64_t dst = g.member(leader, r);
      for (int64_t m = 0; m < g.size(); ++m) {
        const int64_t src = g.member(leader, m);
        deliver(r, m, buf[dst][y], static_cast<const void*>(buf[src][x]));
        if (src != dst) count(dst, g.axis_mask(), bytes);
      }
    }
  }

  Mesh mesh_;
  int64_t n_;
  std::vector<double> counters_;  // [device][axes mask]
};

using L = LocalCommunicator;
#define ENG_NOT_COLLECTIVE(kind) {OpKind::kind, &L::not_a_collective},
constexpr OpTable<L::CollectiveFn> L::kCollectives = make_op_table<L::CollectiveFn>(
    {
        {OpKind::kAllGather, &L::all_gather},
        {OpKind::kReduceScatter, &L::reduce_scatter},
        {OpKind::kAllReduce, &L::all_reduce},
        {OpKind::kAllToAll, &L::all_to_all},
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
        ENG_NOT_COLLECTIVE(kAddIndexInDim)
        ENG_NOT_COLLECTIVE(kTranspose) ENG_NOT_COLLECTIVE(kCompare) ENG_NOT_COLLECTIVE(kSelect)
    },
    &L::not_a_collective, &L::not_a_collective);
#undef ENG_NOT_COLLECTIVE

}  // namespace

std::unique_ptr<Communicator> make_local_communicator(const Mesh& mesh) {
  return std::make_unique<LocalCommunicator>(mesh);
}

}  // namespace eng
