// engine/runtime/collectives.cpp: LocalCommunicator: collectives over simulated devices by
// block copies and ordered sums, with per-device, per-axes byte counters.
#include "engine/runtime/collectives.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "engine/base/check.h"
#include "engine/compile/spmd.h"
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
    const ValueId x = in.inputs[0], y = in.outputs[0];
    const Shape& xs = p.value(x).shape;
    const int64_t elem = dtype_size(p.value(x).dtype);
    const int64_t xbytes = p.value(x).bytes(), ybytes = p.value(y).bytes();
    const int64_t G = g.size();
    for (int64_t leader = 0; leader < n_; ++leader) {
      if (!g.is_leader(leader)) continue;
      switch (in.kind) {
        case OpKind::kAllGather: {  // member r's block at r along dim
          int64_t outer, mid, inner;
          split3(xs, in.attrs.dim, outer, mid, inner);
          const int64_t run = mid * inner * elem;
          exchange(g, leader, buf, x, y, xbytes,
                   [&](int64_t, int64_t m, void* dst, const void* src) {
                     char* out = static_cast<char*>(dst);
                     const char* inp = static_cast<const char*>(src);
                     for (int64_t o = 0; o < outer; ++o)
                       std::memcpy(out + (o * G + m) * run, inp + o * run, run);
                   });
          break;
        }
        case OpKind::kReduceScatter: {  // member r: block r of the sum, in rank order
          ENG_CHECK(p.value(x).dtype == DType::kF32, "reduce_scatter: f32 only");
          int64_t outer, mid, inner;
          split3(xs, in.attrs.dim, outer, mid, inner);
          const int64_t blk = mid / G * inner;
          exchange(g, leader, buf, x, y, ybytes,
                   [&](int64_t r, int64_t m, void* dst, const void* src) {
                     float* out = static_cast<float*>(dst);
                     const float* inp = static_cast<const float*>(src);
                     for (int64_t o = 0; o < outer; ++o) {
                       const float* s = inp + o * mid * inner + r * blk;
                       float* d = out + o * blk;
                       if (m == 0)
                         std::memcpy(d, s, blk * sizeof(float));
                       else
                         for (int64_t i = 0; i < blk; ++i) d[i] += s[i];
                     }
                   });
          break;
        }
        case OpKind::kAllReduce: {  // every member sums all members' inputs in rank order
          ENG_CHECK(p.value(x).dtype == DType::kF32, "all_reduce: f32 only");
          const int64_t n = xs.numel();
          exchange(g, leader, buf, x, y, xbytes,
                   [&](int64_t, int64_t m, void* dst, const void* src) {
                     float* out = static_cast<float*>(dst);
                     const float* s = static_cast<const float*>(src);
                     if (m == 0)
                       std::memcpy(out, s, n * sizeof(float));
                     else if (in.attrs.reduce_max)
                       for (int64_t i = 0; i < n; ++i) out[i] = out[i] < s[i] ? s[i] : out[i];
                     else
                       for (int64_t i = 0; i < n; ++i) out[i] += s[i];
                   });
          break;
        }
        case OpKind::kAllToAll: all_to_all(p, in, g, leader, buf); break;
        case OpKind::kCollectivePermute: {
          if (in.attrs.fill_zero) {  // a partial permutation: unreached members get zeros
            for (int64_t r = 0; r < G; ++r) {
              const int64_t from = r - in.attrs.shift, dst = g.member(leader, r);
              if (from < 0 || from >= G) {
                std::memset(buf[dst][y], 0, xbytes);
                continue;
              }
              const int64_t src = g.member(leader, from);
              std::memcpy(buf[dst][y], buf[src][x], xbytes);
              if (src != dst) count(dst, g.axis_mask(), xbytes);
            }
            break;
          }
          const int64_t shift = ((in.attrs.shift % G) + G) % G;
          for (int64_t r = 0; r < G; ++r) {
            const int64_t src = g.member(leader, r), dst = g.member(leader, (r + shift) % G);
            std::memcpy(buf[dst][y], buf[src][x], xbytes);
            if (src != dst) count(dst, g.axis_mask(), xbytes);
          }
          break;
        }
        case OpKind::kDynamicSlice: {  // member r keeps block r along dim
          int64_t outer, mid, inner;
          split3(xs, in.attrs.dim, outer, mid, inner);
          const int64_t run = mid / G * inner * elem;
          for (int64_t r = 0; r < G; ++r) {
            const int64_t d = g.member(leader, r);
            const char* inp = static_cast<const char*>(buf[d][x]);
            char* out = static_cast<char*>(buf[d][y]);
            for (int64_t o = 0; o < outer; ++o)
              std::memcpy(out + o * run, inp + (o * G + r) * run, run);
          }
          break;
        }
        default: ENG_CHECK(false, "communicator: {} is not a collective", op_name(in.kind));
      }
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

  // Member m's chunk r along split_dim goes to member r at position m along concat_dim.
  void all_to_all(const Program& p, const Instr& in, const AxesGroup& g, int64_t leader,
                  std::span<void* const* const> buf) {
    const ValueId x = in.inputs[0], y = in.outputs[0];
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
    exchange(g, leader, buf, x, y, chunk_bytes,
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

}  // namespace

std::unique_ptr<Communicator> make_local_communicator(const Mesh& mesh) {
  return std::make_unique<LocalCommunicator>(mesh);
}

}  // namespace eng
