// engine/runtime/executor.cpp: the kernel dispatch: every OpKind onto engine/tensor/kernels.h
// (f32), scalar ops computed directly with reference.h's shared scalar formulas.
#include "engine/runtime/executor.h"
#include "engine/runtime/executor_args.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>

#include "engine/ir/moe_attrs.h"
#include "engine/ir/op_table.h"
#include "engine/sharding/shard_geometry.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/onednn_matmul.h"
#include "engine/tensor/reference.h"

namespace eng {

int64_t axis_rank(const Mesh* mesh, int64_t device, const std::vector<std::string>& axes);

namespace {

using executor_detail::Args;
using namespace executor_detail;  // the MoE kernels (executor_moe.cpp)

// A float or i32 element as float, for kConvert.
float load(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kI32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
  }
  return 0;
}

void store(void* p, DType d, int64_t i, float x) {
  switch (d) {
    case DType::kF32: static_cast<float*>(p)[i] = x; break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(x); break;
    case DType::kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(x); break;  // truncates
  }
}

void convert(const void* x, DType from, void* y, DType to, int64_t n) {
  if (from == to) {
    if (x != y) std::memcpy(y, x, n * dtype_size(from));
  } else if (from == DType::kF32 && to == DType::kBF16) {
    kern::convert_f32_to_bf16(static_cast<const float*>(x), static_cast<uint16_t*>(y), n);
  } else if (from == DType::kBF16 && to == DType::kF32) {
    kern::convert_bf16_to_f32(static_cast<const uint16_t*>(x), static_cast<float*>(y), n);
  } else {
    for (int64_t i = 0; i < n; ++i) store(y, to, i, load(x, from, i));
  }
}

// An empty array (a 0-sized dim) may have no buffer at all: memcpy's pointers must not be null.
void copy_if_distinct(void* dst, const void* src, int64_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}


// ---- bf16 kernels (kernels.h's bf16 section; program.h uses_bf16_kernel picks them) ----------
void run_matmul_bf16(const Args& a) {
  ENG_CHECK(a.plan != nullptr, "executor: bf16 matmul without a plan (Runtime::prepare makes them)");
  a.plan->run(a.h(0), a.h(1), a.hout(0));
}
void run_rmsnorm_bf16(const Args& a) {
  const int64_t E = a.last_dim(0);
  kern::rmsnorm_forward_bf16(a.h(0), a.f(1), a.hout(0), a.out(1), a.numel(0) / E, E,
                             static_cast<float>(a.in.attrs.eps));
}
void run_rmsnorm_grad_bf16(const Args& a) {
  const int64_t E = a.last_dim(0);
  kern::rmsnorm_backward_bf16(a.h(0), a.f(1), a.f(2), a.h(3), a.hout(0), a.out(1),
                              a.numel(0) / E, E);
}
void run_rope_bf16(const Args& a) {
  const Shape& x = a.shape(0);
  const OpAttrs& at = a.in.attrs;
  kern::rope_bf16(a.h(0), a.ids(1), a.hout(0), x[0], x[1], x[2], x[3],
                  static_cast<float>(at.min_timescale), static_cast<float>(at.max_timescale),
                  at.inverse, {at.rope_interleave, at.rope_use_scale});
}
void run_attention_bf16(const Args& a) {
  const Shape& q = a.shape(0);
  kern::attention_forward_bf16(a.h(0), a.h(1), a.h(2), a.segment_ids(), a.hout(0), a.out(1), q[0],
                               q[1], q[2], q[3], static_cast<float>(a.in.attrs.scale));
}
void run_attention_grad_bf16(const Args& a) {  // (q, k, v, o, lse, do[, segment ids])
  const Shape& q = a.shape(0);
  size_t d = a.in.inputs.size() - 1;  // do: the last float input
  while (a.p.value(a.in.inputs[d]).dtype == DType::kI32) --d;
  kern::attention_backward_bf16(a.h(0), a.h(1), a.h(2), a.h(3), a.f(4), a.segment_ids(), a.h(d),
                                a.hout(0), a.hout(1), a.hout(2), q[0], q[1], q[2], q[3],
                                static_cast<float>(a.in.attrs.scale));
}
void run_swiglu_bf16(const Args& a) {
  kern::swiglu_forward_bf16(a.h(0), a.h(1), a.hout(0), a.numel(0));
}
void run_swiglu_grad_bf16(const Args& a) {
  kern::swiglu_backward_bf16(a.h(0), a.h(1), a.h(2), a.hout(0), a.hout(1), a.numel(0));
}
void run_xent_bf16(const Args& a) {
  const int64_t V = a.last_dim(0);
  kern::softmax_cross_entropy_forward_bf16(a.h(0), a.ids(1), a.out(0), a.out(1), a.numel(0) / V, V);
}
int64_t offset_input(const Args& a, size_t i);  // below: an optional offset input, else 0
void run_xent_grad_bf16(const Args& a) {
  const int64_t V = a.last_dim(0);
  kern::softmax_cross_entropy_backward_bf16(a.h(0), a.ids(1), a.f(2), a.f(3), a.hout(0),
                                            a.numel(0) / V, V, offset_input(a, 4));
}
void run_vocab_max_bf16(const Args& a) {
  const int64_t V = a.last_dim(0);
  kern::vocab_max_bf16(a.h(0), a.out(0), a.numel(0) / V, V);
}
void run_vocab_stats_bf16(const Args& a) {
  const int64_t V = a.last_dim(0);
  kern::vocab_stats_bf16(a.h(0), a.f(1), a.ids(2), *a.ids(3), a.out(0), a.out(1), a.numel(0) / V, V);
}
void run_add_bf16(const Args& a) { kern::add_bf16(a.h(0), a.h(1), a.hout(0), a.numel(0)); }
void run_mul_bf16(const Args& a) { kern::mul_bf16(a.h(0), a.h(1), a.hout(0), a.numel(0)); }

void run_matmul(const Args& a) {  // one GEMM on op.h's 2D views (DotDims)
  const OpAttrs& at = a.in.attrs;
  const DotDims d = dot_dims(at, a.shape(0), a.shape(1));
  if (a.integer())
    return kern::matmul_i32(at.trans_a, at.trans_b, d.M, d.N, d.K, a.ids(0), d.lda, a.ids(1),
                            d.ldb, a.iout(0), d.N);
  kern::matmul(at.trans_a, at.trans_b, d.M, d.N, d.K, 1.0f, a.f(0), d.lda, a.f(1), d.ldb, 0.0f,
               a.out(0), d.N);
}

void run_masked_mean_loss(const Args& a) {
  const float* xent = a.f(0);
  const int32_t* seg = a.ids(1);
  double sum = 0, weights = 0;
  for (int64_t i = 0, n = a.numel(0); i < n; ++i)
    if (seg[i] != 0) {
      sum += xent[i];
      weights += 1;
    }
  *a.out(0) = static_cast<float>(a.in.attrs.unnormalized ? sum : sum / (weights + 1e-8));
  *a.out(1) = static_cast<float>(weights);
}

void run_masked_mean_loss_grad(const Args& a) {
  const int32_t* seg = a.ids(0);
  const double dloss = a.in.inputs.size() > 2 ? a.scalar(2) : 1.0;
  const float g = static_cast<float>(a.in.attrs.scale * dloss / (a.scalar(1) + 1e-8));
  float* dxent = a.out(0);
  for (int64_t i = 0, n = a.numel(0); i < n; ++i) dxent[i] = seg[i] != 0 ? g : 0.0f;
}

void run_adamw(const Args& a) {
  const OpAttrs& at = a.in.attrs;
  const int64_t n = a.numel(0), bytes = n * 4;
  float* param = a.out(0);
  float* mu = a.out(1);
  float* nu = a.out(2);
  copy_if_distinct(param, a.f(0), bytes);  // no-ops when updated in place (the usual case)
  copy_if_distinct(mu, a.f(2), bytes);
  copy_if_distinct(nu, a.f(3), bytes);
  const int64_t count = static_cast<int64_t>(*a.ids(6)) + 1;
  kern::adamw_update(param, a.f(1), mu, nu, n, a.scalar(4), a.scalar(5), static_cast<float>(at.b1),
                     static_cast<float>(at.b2), static_cast<float>(at.eps),
                     static_cast<float>(at.weight_decay), count);
}

// Splits shape s around dim: outer (dims before), mid (dim), inner (dims after).
void split3(const Shape& s, int dim, int64_t& outer, int64_t& mid, int64_t& inner) {
  outer = s.prod(0, dim);
  mid = s[dim];
  inner = s.prod(dim + 1, s.rank());
}

// The pipeline's data movement (op.h), on bytes: any dtype.
struct Bytes {
  const ValueInfo& xv;
  const ValueInfo& yv;
  const char* x;
  char* y;
  int64_t elem;
  explicit Bytes(const Args& a)
      : xv(a.p.value(a.in.inputs[0])),
        yv(a.p.value(a.in.outputs[0])),
        x(static_cast<const char*>(a.ptrs[a.in.inputs[0]])),
        y(static_cast<char*>(a.ptrs[a.in.outputs[0]])),
        elem(dtype_size(xv.dtype)) {}
};

void run_repeat_kv(const Args& a) {
  const Bytes b(a);
  const Shape& xs = b.xv.shape;  // (..., Hkv, D): every leading dim is a row
  const int r = xs.rank();
  kern::repeat_kv(b.x, b.y, xs.prod(0, r - 2), xs[r - 2], xs[r - 1], a.in.attrs.size, b.elem);
}

// slice, pad, shift: rows along attrs.dim.
void run_rows(const Args& a) {
  const OpAttrs& at = a.in.attrs;
  const Bytes b(a);
  int64_t outer, n_in, inner, o2, n_out, i2;
  split3(b.xv.shape, at.dim, outer, n_in, inner);
  split3(b.yv.shape, at.dim, o2, n_out, i2);
  const int64_t row = inner * b.elem;
  if (a.in.kind != OpKind::kSlice) std::memset(b.y, 0, b.yv.bytes());
  for (int64_t o = 0; o < outer; ++o) {
    const char* xs = b.x + o * n_in * row;
    char* ys = b.y + o * n_out * row;
    if (a.in.kind == OpKind::kSlice) {
      std::memcpy(ys, xs + at.start * row, at.size * row);
    } else if (a.in.kind == OpKind::kPad) {
      std::memcpy(ys + at.start * row, xs, n_in * row);
    } else {  // shift: out[i] = x[i - shift], from the source rows [lo, hi)
      const ShiftRows r = shift_source_rows(at, n_in);
      if (r.hi > r.lo)
        std::memcpy(ys + (r.lo + at.shift) * row, xs + r.lo * row, (r.hi - r.lo) * row);
    }
  }
}

void run_concat(const Args& a) {
  const Bytes b(a);
  const int dim = a.in.attrs.dim;
  int64_t outer, n_out, inner;
  split3(b.yv.shape, dim, outer, n_out, inner);
  const int64_t row = inner * b.elem;
  int64_t at_row = 0;
  for (ValueId v : a.in.inputs) {
    const int64_t n = a.p.value(v).shape[dim];
    const char* xs = static_cast<const char*>(a.ptrs[v]);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(b.y + (o * n_out + at_row) * row, xs + o * n * row, n * row);
    at_row += n;
  }
}

// index_in_dim / add_index_in_dim (op.h): slot attrs.start of the stacked (outer, L, inner) view.
void run_index_in_dim(const Args& a) {
  const Bytes b(a);
  int64_t outer, L, inner;
  split3(b.xv.shape, a.in.attrs.dim, outer, L, inner);
  const int64_t row = inner * b.elem;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(b.y + o * row, b.x + (o * L + a.in.attrs.start) * row, row);
}
void run_add_index_in_dim(const Args& a) {  // (update[, acc]): in place on acc
  const Shape& stacked = a.p.value(a.in.outputs[0]).shape;
  int64_t outer, L, inner;
  split3(stacked, a.in.attrs.dim, outer, L, inner);
  float* y = a.out(0);
  if (a.in.inputs.size() > 1) copy_if_distinct(y, a.f(1), stacked.numel() * 4);
  else std::memset(y, 0, stacked.numel() * 4);
  for (int64_t o = 0; o < outer; ++o)
    kern::add(y + (o * L + a.in.attrs.start) * inner, a.f(0) + o * inner,
              y + (o * L + a.in.attrs.start) * inner, inner);
}

// dynamic_(update_)slice_in_dim (op.h): the window at dynamic_slice_start; any dtype.
void run_dynamic_slice(const Args& a) {
  const Bytes b(a);
  const bool update = a.in.kind == OpKind::kDynamicUpdateSliceInDim;
  int64_t outer, n, inner;
  split3(b.xv.shape, a.in.attrs.dim, outer, n, inner);
  const int64_t size = update ? a.shape(1)[a.in.attrs.dim] : a.in.attrs.size, m = size * inner;
  const int64_t s = dynamic_slice_start(*a.ids(update ? 2 : 1), n, size), e = b.elem;
  const char* u = static_cast<const char*>(a.ptrs[a.in.inputs[update ? 1 : 0]]);
  if (update) copy_if_distinct(b.y, b.x, b.xv.bytes());
  int32_t* yi = reinterpret_cast<int32_t*>(b.y);
  const DType d = b.xv.dtype;
  for (int64_t o = 0; o < outer && m > 0; ++o) {
    const int64_t at = (o * n + s) * inner, part = o * m;  // elements: x's window, the slice
    if (!update) std::memcpy(b.y + part * e, b.x + at * e, m * e);
    else if (!a.in.attrs.inverse) std::memcpy(b.y + at * e, u + part * e, m * e);
    else if (d == DType::kI32)
      kern::add_i32(yi + at, reinterpret_cast<const int32_t*>(u) + part, yi + at, m);
    else
      for (int64_t k = 0; k < m; ++k)
        store(b.y, d, at + k, load(b.y, d, at + k) + load(u, d, part + k));
  }
}

// index_per_row / add_index_per_row (op.h): row s of the stacked (N, S, inner) view at slot
// indices[g], g the global row: this device's block of rows starts at rank(axes) * S.
int64_t first_global_row(const Args& a, int64_t local_rows) {
  return axis_rank(a.mesh, a.device, a.in.attrs.mesh_axes) * local_rows;
}
void run_index_per_row(const Args& a) {
  const Bytes b(a);
  const Shape& x = b.xv.shape;
  const int64_t S = x[1], row = x.prod(2, x.rank()) * b.elem, g0 = first_global_row(a, S);
  for (int64_t s = 0; s < S; ++s)
    std::memcpy(b.y + s * row, b.x + (a.in.attrs.new_shape[g0 + s] * S + s) * row, row);
}
void run_add_index_per_row(const Args& a) {  // (update[, acc]): in place on acc
  const Shape& stacked = a.p.value(a.in.outputs[0]).shape;
  const int64_t S = stacked[1], inner = stacked.prod(2, stacked.rank());
  const int64_t g0 = first_global_row(a, S);
  float* y = a.out(0);
  if (a.in.inputs.size() > 1) copy_if_distinct(y, a.f(1), stacked.numel() * 4);
  else std::memset(y, 0, stacked.numel() * 4);
  for (int64_t s = 0; s < S; ++s) {
    float* at = y + (a.in.attrs.new_shape[g0 + s] * S + s) * inner;
    kern::add(at, a.f(0) + s * inner, at, inner);
  }
}

// The optional vocab-block offset input (op.h: 3-input embed_lookup(_grad), 5-input xent grad).
int64_t offset_input(const Args& a, size_t i) {
  return a.in.inputs.size() > i ? static_cast<int64_t>(*a.ids(i)) : 0;
}

// Unary ops (op.h's UnaryMath), evaluated per element in double like the reference.
void run_unary(const Args& a) {
  const UnaryMath& u = unary_math(a.in.kind);
  const float* x = a.f(0);
  float* y = a.out(0);
  for (int64_t i = 0, n = a.numel(0); i < n; ++i) y[i] = static_cast<float>(u.f(x[i]));
}
void run_unary_grad(const Args& a) {  // (x, dy) -> dx = dy * df(x)
  const UnaryMath& u = unary_math(a.in.kind);
  const float* x = a.f(0);
  const float* dy = a.f(1);
  float* dx = a.out(0);
  for (int64_t i = 0, n = a.numel(0); i < n; ++i)
    dx[i] = static_cast<float>(static_cast<double>(dy[i]) * u.df(x[i]));
}

// transpose (any dtype): y walked in row-major order, the source offset kept incrementally;
// a trailing run of dims the permutation keeps in place is copied as one block.
void run_transpose(const Args& a) {
  const Bytes b(a);
  const std::vector<int64_t>& perm = a.in.attrs.new_shape;
  const Shape& xs = b.xv.shape;
  const int r = xs.rank();
  int keep = r;  // dims [keep, r) stay in place
  while (keep > 0 && perm[keep - 1] == keep - 1) --keep;
  const int64_t block = xs.prod(keep, r) * b.elem;
  ENG_CHECK(r <= kMaxTransposeRank, "transpose: rank {} > {}", r, kMaxTransposeRank);
  std::array<int64_t, kMaxTransposeRank> stride{}, idx{};  // a step allocates nothing
  if (r > 0) stride[static_cast<size_t>(r - 1)] = b.elem;
  for (int d = r - 2; d >= 0; --d) stride[d] = stride[d + 1] * xs[d + 1];
  const int64_t n = keep == 0 ? 1 : b.yv.shape.prod(0, keep);
  int64_t src = 0;
  for (int64_t k = 0; k < n; ++k) {
    std::memcpy(b.y + k * block, b.x + src, block);
    for (int d = keep - 1; d >= 0; --d) {  // next output index: carry through y's dims
      src += stride[perm[d]];
      if (++idx[d] < b.yv.shape[d]) break;
      src -= stride[perm[d]] * idx[d];
      idx[d] = 0;
    }
  }
}

template <typename T>
void compare_values(const Args& a, const T* x, const T* z, T* y) {
  const int64_t n = a.numel(0);
  switch (static_cast<CompareDirection>(a.in.attrs.dim)) {
    case CompareDirection::kEq: for (int64_t i = 0; i < n; ++i) y[i] = x[i] == z[i]; break;
    case CompareDirection::kNe: for (int64_t i = 0; i < n; ++i) y[i] = x[i] != z[i]; break;
    case CompareDirection::kLt: for (int64_t i = 0; i < n; ++i) y[i] = x[i] < z[i]; break;
    case CompareDirection::kLe: for (int64_t i = 0; i < n; ++i) y[i] = x[i] <= z[i]; break;
    case CompareDirection::kGt: for (int64_t i = 0; i < n; ++i) y[i] = x[i] > z[i]; break;
    case CompareDirection::kGe: for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= z[i]; break;
  }
}

void run_compare(const Args& a) {  // float, or int32 operands (an int32 mask)
  if (a.integer()) return compare_values(a, a.ids(0), a.ids(1), a.iout(0));
  compare_values(a, a.f(0), a.f(1), a.out(0));
}

void run_select(const Args& a) {
  const float *p = a.f(0), *t = a.f(1), *f = a.f(2);
  float* y = a.out(0);
  for (int64_t i = 0, n = a.numel(0); i < n; ++i) y[i] = p[i] != 0 ? t[i] : f[i];
}

void run_collective(const Args& a) {  // runtime.cpp runs these across devices
  ENG_CHECK(false, "executor: {} runs across devices (collectives.h), not per device",
            op_name(a.in.kind));
}

// One kernel per op. any_dtype: data movement and casts, exempt from the f32/i32 check.
struct Kernel {
  void (*run)(const Args&) = nullptr;
  bool any_dtype = false;
};
using A = const Args&;

void copy_value(A a) {  // kMoveToHost, kMoveToDevice: the value, in another buffer
  copy_if_distinct(a.ptrs[a.in.outputs[0]], a.ptrs[a.in.inputs[0]],
                   a.p.value(a.in.inputs[0]).bytes());
}

constexpr OpTable<Kernel> kKernels = make_op_table<Kernel>(
    {
        {OpKind::kEmbedLookup,
         {[](A a) {  // table (V, E), ids (B, T)[, offset] -> (B, T, E)
           const Shape& t = a.shape(0);
           kern::embed_lookup(a.f(0), a.ids(1), a.out(0), a.numel(1), t[0], t[1],
                              offset_input(a, 2));
         }}},
        {OpKind::kAxisIndex, {[](A a) {
           *static_cast<int32_t*>(a.ptrs[a.in.outputs[0]]) = static_cast<int32_t>(
               a.in.attrs.size * axis_rank(a.mesh, a.device, a.in.attrs.mesh_axes));
         }}},
        {OpKind::kVocabMax, {[](A a) {
           const int64_t V = a.last_dim(0);
           kern::vocab_max(a.f(0), a.out(0), a.numel(0) / V, V);
         }}},
        {OpKind::kVocabStats, {[](A a) {
           const int64_t V = a.last_dim(0);
           kern::vocab_stats(a.f(0), a.f(1), a.ids(2), *a.ids(3), a.out(0), a.out(1),
                             a.numel(0) / V, V);
         }}},
        {OpKind::kXentFromStats,
         {[](A a) {  // (max, sumexp, picked) -> xent, lse
           const float* mx = a.f(0);
           const float* se = a.f(1);
           const float* pk = a.f(2);
           float* xent = a.out(0);
           float* lse = a.out(1);
           for (int64_t i = 0, n = a.numel(0); i < n; ++i) {
             lse[i] = mx[i] + std::log(se[i]);
             xent[i] = lse[i] - pk[i];
           }
         }}},
        {OpKind::kOneHot,
         {[](A a) { kern::one_hot(a.ids(0), a.out(0), a.numel(0), a.in.attrs.depth); }}},
        {OpKind::kMatmul, {run_matmul}},
        {OpKind::kRmsNorm,
         {[](A a) {  // x (N, E) viewed
           const int64_t E = a.last_dim(0);
           kern::rmsnorm_forward(a.f(0), a.f(1), a.out(0), a.out(1), a.numel(0) / E, E,
                                 static_cast<float>(a.in.attrs.eps));
         }}},
        {OpKind::kRope, {[](A a) {
           const Shape& x = a.shape(0);
           const OpAttrs& at = a.in.attrs;
           kern::rope(a.f(0), a.ids(1), a.out(0), x[0], x[1], x[2], x[3],
                      static_cast<float>(at.min_timescale), static_cast<float>(at.max_timescale),
                      at.inverse, {at.rope_interleave, at.rope_use_scale});
         }}},
        {OpKind::kAttention, {[](A a) {
           const Shape& q = a.shape(0);
           kern::attention_forward(a.f(0), a.f(1), a.f(2), a.out(0), a.out(1), q[0], q[1], q[2],
                                   q[3], static_cast<float>(a.in.attrs.scale),
                                   a.in.inputs.size() == 4 ? a.ids(3) : nullptr);
         }}},
        {OpKind::kSwiglu,
         {[](A a) { kern::swiglu_forward(a.f(0), a.f(1), a.out(0), a.numel(0)); }}},
        {OpKind::kAdd, {[](A a) {
           if (a.integer()) return kern::add_i32(a.ids(0), a.ids(1), a.iout(0), a.numel(0));
           kern::add(a.f(0), a.f(1), a.out(0), a.numel(0));
         }}},
        {OpKind::kMul, {[](A a) {
           if (a.integer()) return kern::mul_i32(a.ids(0), a.ids(1), a.iout(0), a.numel(0));
           kern::mul(a.f(0), a.f(1), a.out(0), a.numel(0));
         }}},
        {OpKind::kScale, {[](A a) {
           if (a.integer())
             return kern::scale_i32(a.ids(0), static_cast<int64_t>(a.in.attrs.scale), a.iout(0),
                                    a.numel(0));
           kern::scale(a.f(0), static_cast<float>(a.in.attrs.scale), a.out(0), a.numel(0));
         }}},
        {OpKind::kConvert,
         {[](A a) {
            convert(a.ptrs[a.in.inputs[0]], a.p.value(a.in.inputs[0]).dtype,
                    a.ptrs[a.in.outputs[0]], a.in.attrs.dtype, a.numel(0));
          },
          true}},
        {OpKind::kConstraint,
         {[](A a) {  // an identity on one device; usually the same buffer
            copy_if_distinct(a.ptrs[a.in.outputs[0]], a.ptrs[a.in.inputs[0]],
                             a.p.value(a.in.inputs[0]).bytes());
          },
          true}},
        {OpKind::kSoftmaxCrossEntropy, {[](A a) {
           const int64_t V = a.last_dim(0);
           kern::softmax_cross_entropy_forward(a.f(0), a.ids(1), a.out(0), a.out(1), a.numel(0) / V,
                                               V);
         }}},
        {OpKind::kMaskedMeanLoss, {run_masked_mean_loss}},
        {OpKind::kEmbedLookupGrad,
         {[](A a) {  // ids (N), dy (N, E) -> dtable (depth, E)
           const int64_t E = a.last_dim(1);
           kern::embed_lookup_grad(a.ids(0), a.f(1), a.out(0), a.numel(0), a.in.attrs.depth, E,
                                   offset_input(a, 2));
         }}},
        {OpKind::kLayerNorm,
         {[](A a) {  // x (N, E) viewed
           const int64_t E = a.last_dim(0);
           kern::layernorm_forward(a.f(0), a.f(1), a.f(2), a.out(0), a.out(1), a.out(2),
                                   a.numel(0) / E, E, static_cast<float>(a.in.attrs.eps));
         }}},
        {OpKind::kLayerNormGrad, {[](A a) {
           const int64_t E = a.last_dim(0);
           kern::layernorm_backward(a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), a.out(0), a.out(1),
                                    a.out(2), a.numel(0) / E, E);
         }}},
        {OpKind::kBiasAdd, {[](A a) {  // x (rows, F) viewed, F = the bias's elements
           const int64_t F = a.numel(1);
           kern::bias_add(a.f(0), a.f(1), a.out(0), a.numel(0) / F, F);
         }}},
        // Host offload: a copy between the device arena and the host region after it.
        {OpKind::kMoveToHost, {copy_value, true}},
        {OpKind::kMoveToDevice, {copy_value, true}},
        {OpKind::kBiasAddGrad, {[](A a) {
           const int64_t F = a.p.value(a.in.outputs[0]).shape.numel();
           kern::bias_add_grad(a.f(0), a.out(0), a.numel(0) / F, F);
         }}},
        {OpKind::kRmsNormGrad, {[](A a) {
           const int64_t E = a.last_dim(0);
           kern::rmsnorm_backward(a.f(0), a.f(1), a.f(2), a.f(3), a.out(0), a.out(1),
                                  a.numel(0) / E, E);
         }}},
        {OpKind::kAttentionGrad, {[](A a) {
           const Shape& q = a.shape(0);
           kern::attention_backward(a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), a.f(5), a.out(0),
                                    a.out(1), a.out(2), q[0], q[1], q[2], q[3],
                                    static_cast<float>(a.in.attrs.scale),
                                    a.in.inputs.size() == 7 ? a.ids(6) : nullptr);
         }}},
        {OpKind::kRepeatKvGrad, {[](A a) {
           const Shape& dy = a.shape(0);
           const int64_t R = a.in.attrs.size;
           kern::repeat_kv_grad(a.f(0), a.out(0), dy[0] * dy[1], dy[2] / R, dy[3], R);
         }}},
        {OpKind::kSwigluGrad, {[](A a) {
           kern::swiglu_backward(a.f(0), a.f(1), a.f(2), a.out(0), a.out(1), a.numel(0));
         }}},
        {OpKind::kSoftmaxCrossEntropyGrad, {[](A a) {
           const int64_t V = a.last_dim(0);
           kern::softmax_cross_entropy_backward(a.f(0), a.ids(1), a.f(2), a.f(3), a.out(0),
                                                a.numel(0) / V, V, offset_input(a, 4));
         }}},
        {OpKind::kMaskedMeanLossGrad, {run_masked_mean_loss_grad}},
        {OpKind::kSumSquares,
         {[](A a) { *a.out(0) = static_cast<float>(kern::sum_squares(a.f(0), a.numel(0))); }}},
        {OpKind::kGlobalNorm, {[](A a) {
           double s = 0;
           for (size_t i = 0; i < a.in.inputs.size(); ++i) s += a.scalar(i);
           *a.out(0) = static_cast<float>(std::sqrt(s));
         }}},
        {OpKind::kClipFactor, {[](A a) {
           *a.out(0) = static_cast<float>(ref::clip_factor(a.scalar(0), a.in.attrs.clip_threshold));
         }}},
        {OpKind::kLearningRate, {[](A a) {
           const OpAttrs& at = a.in.attrs;
           *a.out(0) = static_cast<float>(ref::learning_rate_at(
               *a.ids(0), at.learning_rate, at.warmup_steps, at.cos_steps, at.final_fraction));
         }}},
        {OpKind::kAdamW, {run_adamw}},
        {OpKind::kIncrement,
         {[](A a) { *static_cast<int32_t*>(a.ptrs[a.in.outputs[0]]) = *a.ids(0) + 1; }}},
        {OpKind::kSafeDivide, {[](A a) {
           *a.out(0) = static_cast<float>(static_cast<double>(a.scalar(0)) / (a.scalar(1) + 1e-8));
         }}},
        {OpKind::kReshape,
         {[](A a) {
            const Bytes b(a);
            copy_if_distinct(b.y, b.x, b.xv.bytes());
          },
          true}},
        {OpKind::kSlice, {run_rows, true}},
        {OpKind::kPad, {run_rows, true}},
        {OpKind::kShift, {run_rows, true}},
        {OpKind::kConcat, {run_concat, true}},
        {OpKind::kRepeatKv, {run_repeat_kv, true}},
        {OpKind::kIndexInDim, {run_index_in_dim, true}},
        {OpKind::kAddIndexInDim, {run_add_index_in_dim}},
        {OpKind::kTranspose, {run_transpose, true}},
        {OpKind::kCompare, {run_compare}},
        {OpKind::kSelect, {run_select}},
        {OpKind::kIndexPerRow, {run_index_per_row, true}},
        {OpKind::kRemainder, {[](A a) {
           const bool i32 = a.integer();
           for (int64_t i = 0, n = a.numel(0); i < n; ++i) {
             if (i32) a.iout(0)[i] = remainder_i32(a.ids(0)[i], a.ids(1)[i]);
             else a.out(0)[i] = remainder_float(a.f(0)[i], a.f(1)[i]);
           }
         }}},
        {OpKind::kDynamicSliceInDim, {run_dynamic_slice, true}},
        {OpKind::kDynamicUpdateSliceInDim, {run_dynamic_slice, true}},
        {OpKind::kAddIndexPerRow, {run_add_index_per_row}},
        {OpKind::kMoeRoute, {run_moe_route}},
        {OpKind::kMoeRouteGrad, {run_moe_route}},
        {OpKind::kMoeDispatch, {run_moe_dispatch}},
        {OpKind::kMoeCombine, {run_moe_dispatch}},
        {OpKind::kMoeCombineWeightsGrad, {run_moe_combine_weights_grad}},
        {OpKind::kExpertMatmul, {run_expert_matmul}},
        {OpKind::kExpertMatmulGrad, {run_expert_matmul}},
        {OpKind::kMoeTopK, {run_moe_top_k}},
        {OpKind::kMoeTopKGrad, {run_moe_top_k}},
        {OpKind::kMoePermute, {run_moe_permute}},
        {OpKind::kMoePermuteWeightsGrad, {run_moe_permute}},
        {OpKind::kRaggedDot, {run_ragged_dot}},
        {OpKind::kRaggedDotGrad, {run_ragged_dot}},
        // Data movement is dtype-agnostic; reductions (all_reduce, reduce_scatter) are f32.
        {OpKind::kAllGather, {run_collective, true}},
        {OpKind::kAllToAll, {run_collective, true}},
        {OpKind::kRaggedAllToAll, {run_collective, true}},
        {OpKind::kMoeEpDispatch, {[](A a) {  // identities (op.h): the partitioner lowers them
           const Bytes b(a);
           copy_if_distinct(b.y, b.x, b.xv.bytes());
         }, true}},
        {OpKind::kMoeEpReturn, {[](A a) {
           const Bytes b(a);
           copy_if_distinct(b.y, b.x, b.xv.bytes());
         }, true}},
        {OpKind::kMoeEpPlan, {run_moe_ep_plan}},
        {OpKind::kCollectivePermute, {run_collective, true}},
        {OpKind::kDynamicSlice, {run_collective, true}},
        {OpKind::kAllReduce, {run_collective}},
        {OpKind::kReduceScatter, {run_collective}},
    },
    {run_unary}, {run_unary_grad});

// The bf16 kernel of an op that uses_bf16_kernel (program.h); null for any other op.
using RunFn = void (*)(const Args&);
RunFn bf16_kernel(OpKind kind) {
  switch (kind) {
    case OpKind::kMatmul: return run_matmul_bf16;
    case OpKind::kRmsNorm: return run_rmsnorm_bf16;
    case OpKind::kRmsNormGrad: return run_rmsnorm_grad_bf16;
    case OpKind::kRope: return run_rope_bf16;
    case OpKind::kAttention: return run_attention_bf16;
    case OpKind::kAttentionGrad: return run_attention_grad_bf16;
    case OpKind::kSwiglu: return run_swiglu_bf16;
    case OpKind::kSwigluGrad: return run_swiglu_grad_bf16;
    case OpKind::kAdd: return run_add_bf16;
    case OpKind::kMul: return run_mul_bf16;
    case OpKind::kSoftmaxCrossEntropy: return run_xent_bf16;
    case OpKind::kSoftmaxCrossEntropyGrad: return run_xent_grad_bf16;
    case OpKind::kVocabMax: return run_vocab_max_bf16;
    case OpKind::kVocabStats: return run_vocab_stats_bf16;
    case OpKind::kMoeRoute: return run_moe_route_bf16;
    case OpKind::kMoeRouteGrad: return run_moe_route_bf16;
    case OpKind::kMoeDispatch: return run_moe_dispatch_bf16;
    case OpKind::kMoeCombine: return run_moe_dispatch_bf16;
    case OpKind::kMoeCombineWeightsGrad: return run_moe_combine_weights_grad_bf16;
    case OpKind::kExpertMatmul: return run_expert_matmul_bf16;
    case OpKind::kExpertMatmulGrad: return run_expert_matmul_bf16;
    default: return nullptr;
  }
}

}  // namespace

Status check_executable_dtypes(const Program& p) {
  for (size_t i = 0; i < p.instrs().size(); ++i) {
    const Instr& in = p.instrs()[i];
    if (kKernels[op_index(in.kind)].any_dtype) continue;
    if (in.attrs.vmap > 0)
      return unimplemented(
          "executor: instruction {} ({}) is vmapped over {}: only partitioned "
          "programs (the stage axis) run vmapped ops",
          i, op_name(in.kind), in.attrs.vmap);
    for (size_t k = 0; k < in.inputs.size(); ++k) {
      const DType have = p.value(in.inputs[k]).dtype;
      const bool want_int = is_int_input(in.kind, k);
      if (want_int ? have == DType::kI32 : have != DType::kI32) continue;
      if (have == DType::kI32 && has_integer_kernel(in.kind)) continue;  // all i32 (builder)
      return unimplemented("executor: instruction {} ({}) input {} is {} but the CPU kernels take {}",
                           i, op_name(in.kind), k, dtype_name(have),
                           want_int ? "i32" : "f32 or bf16");
    }
  }
  return ok_status();
}

namespace {

constexpr int64_t kWidenAlign = 64;
int64_t widened_bytes(const ValueInfo& v) {
  return (v.shape.numel() * 4 + kWidenAlign - 1) / kWidenAlign * kWidenAlign;
}

// The f32 scratch `in` needs to run widened (0: it runs on its own buffers). A value used
// twice as an input is widened once.
int64_t widen_bytes(const Program& p, const Instr& in) {
  if (kKernels[op_index(in.kind)].any_dtype || uses_bf16_kernel(p, in)) return 0;
  int64_t bytes = 0;
  for (size_t k = 0; k < in.inputs.size(); ++k) {
    const ValueId v = in.inputs[k];
    const bool seen = std::find(in.inputs.begin(), in.inputs.begin() + k, v) !=
                      in.inputs.begin() + k;
    if (!seen && p.value(v).dtype == DType::kBF16) bytes += widened_bytes(p.value(v));
  }
  for (ValueId o : in.outputs)
    if (p.value(o).dtype == DType::kBF16) bytes += widened_bytes(p.value(o));
  return bytes;
}

// The widening path: bf16 operands are pointed at f32 copies for the f32 kernel (ptrs is
// the device's table; every entry changed here is restored before returning).
void run_widened(const Args& a, void** ptrs, char* scratch) {
  constexpr int kMax = 16;
  std::array<std::pair<ValueId, void*>, kMax> saved;
  int n = 0;
  auto widen = [&](ValueId v, bool load) {
    const ValueInfo& info = a.p.value(v);
    if (info.dtype != DType::kBF16) return;
    for (int j = 0; j < n; ++j)
      if (saved[j].first == v) return;
    ENG_CHECK(n < kMax, "executor: {} has more than {} bf16 operands", op_name(a.in.kind), kMax);
    saved[n++] = {v, ptrs[v]};
    if (load)
      kern::convert_bf16_to_f32(static_cast<const uint16_t*>(ptrs[v]),
                                reinterpret_cast<float*>(scratch), info.shape.numel());
    ptrs[v] = scratch;
    scratch += widened_bytes(info);
  };
  for (ValueId v : a.in.inputs) widen(v, true);
  const int first_output = n;
  for (ValueId o : a.in.outputs) widen(o, false);
  kKernels[op_index(a.in.kind)].run(a);
  for (int j = n - 1; j >= 0; --j) {
    const auto& [v, original] = saved[j];
    if (j >= first_output)  // round the f32 result into the real bf16 output
      kern::convert_f32_to_bf16(static_cast<const float*>(ptrs[v]),
                                static_cast<uint16_t*>(original), a.p.value(v).shape.numel());
    ptrs[v] = original;
  }
}

}  // namespace

namespace {
// The one product a bf16 GEMM-like instruction's plan computes: the whole matmul (op.h's 2D
// views); one expert's (R, K) . (K, N) of expert_matmul (trans_b: (N, K)^T), (R, K)^T . (R, N)
// of its grad; one (row, expert)'s (S, M) . (C, M)^T of moe_combine_weights_grad, written
// E * C apart. Nothing for any other op.
std::optional<kern::Bf16MatmulShape> bf16_gemm_shape(const Program& p, const Instr& in) {
  // Every GEMM-like op has two operands; other bf16 kernels may have one (moe_route).
  if (in.inputs.size() < 2) return std::nullopt;
  const Shape& x = p.value(in.inputs[0]).shape;
  const Shape& w = p.value(in.inputs[1]).shape;
  switch (in.kind) {
    case OpKind::kMatmul: {
      const DotDims d = dot_dims(in.attrs, x, w);
      return kern::Bf16MatmulShape{.trans_a = in.attrs.trans_a, .trans_b = in.attrs.trans_b,
                                   .M = d.M, .N = d.N, .K = d.K, .lda = d.lda, .ldb = d.ldb,
                                   .ldc = d.N, .c_dtype = DType::kBF16};
    }
    case OpKind::kExpertMatmul: {
      const int r = x.rank();
      const int64_t R = x.prod(1, r - 1), K = x[r - 1], N = w[in.attrs.trans_b ? 1 : 2];
      return kern::Bf16MatmulShape{.trans_b = in.attrs.trans_b, .M = R, .N = N, .K = K, .lda = K,
                                   .ldb = in.attrs.trans_b ? K : N, .ldc = N,
                                   .c_dtype = DType::kBF16};
    }
    case OpKind::kExpertMatmulGrad: {
      const int r = x.rank();
      const int64_t R = x.prod(1, r - 1), K = x[r - 1], N = w[r - 1];
      return kern::Bf16MatmulShape{.trans_a = true, .M = K, .N = N, .K = R, .lda = K, .ldb = N,
                                   .ldc = N, .c_dtype = DType::kBF16};
    }
    case OpKind::kMoeCombineWeightsGrad: {  // dout (B,S,M), y (E,B,C,M)
      const int64_t S = x[1], M = x[2], E = w[0], C = w[2];
      return kern::Bf16MatmulShape{.trans_b = true, .M = S, .N = C, .K = M, .lda = M, .ldb = M,
                                   .ldc = E * C, .c_dtype = DType::kBF16};
    }
    default: return std::nullopt;
  }
}
}  // namespace

Result<std::unique_ptr<kern::Bf16MatmulPlan>> make_bf16_matmul_plan(const Program& p,
                                                                    const Instr& in,
                                                                    kern::MatmulBackend backend) {
  if (!uses_bf16_kernel(p, in)) return std::unique_ptr<kern::Bf16MatmulPlan>();
  const std::optional<kern::Bf16MatmulShape> s = bf16_gemm_shape(p, in);
  if (!s) return std::unique_ptr<kern::Bf16MatmulPlan>();
  return kern::Bf16MatmulPlan::create(*s, backend);
}

int64_t widen_scratch_bytes(const Program& p) {
  int64_t most = 0;
  for (const Instr& in : p.instrs()) most = std::max(most, widen_bytes(p, in));
  return most;
}

// kAxisIndex: the device's rank along `axes` (major to minor; collectives' member order),
// arithmetically from the row-major device id (no allocation).
int64_t axis_rank(const Mesh* mesh, int64_t device, const std::vector<std::string>& axes) {
  if (mesh == nullptr) return 0;
  return AxesGroup(*mesh, axes).rank(device);
}

namespace {
InstrPath decide_path(const Program& p, const Instr& in) {
  if (uses_bf16_kernel(p, in)) return InstrPath::kBf16Kernel;
  return widen_bytes(p, in) == 0 ? InstrPath::kKernel : InstrPath::kWidened;
}
}  // namespace

std::vector<InstrPath> instr_paths(const Program& p) {
  std::vector<InstrPath> paths;
  paths.reserve(p.instrs().size());
  for (const Instr& in : p.instrs()) paths.push_back(decide_path(p, in));
  return paths;
}

void run_instr(const Program& p, const Instr& in, void** ptrs, const Mesh* mesh, int64_t device,
               const InstrScratch& scratch) {
  const Args a{p, in, ptrs, mesh, device, scratch.matmul};
  const InstrPath path = scratch.path == InstrPath::kDecide ? decide_path(p, in) : scratch.path;
  if (path == InstrPath::kBf16Kernel) {
    const RunFn run = bf16_kernel(in.kind);
    ENG_CHECK(run != nullptr, "executor: {} has no bf16 kernel (program.h's list)",
              op_name(in.kind));
    run(a);
    return;
  }
  if (path == InstrPath::kKernel) {
    kKernels[op_index(in.kind)].run(a);
    return;
  }
  ENG_CHECK(scratch.widen != nullptr, "executor: {} has bf16 operands but no widening scratch",
            op_name(in.kind));
  run_widened(a, ptrs, static_cast<char*>(scratch.widen));
}

}  // namespace eng
