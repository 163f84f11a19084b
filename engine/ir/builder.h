// engine/ir/builder.h: traces model code into a Program. Every method infers its outputs'
// shapes, dtypes and logical axes from its inputs; a mismatch is a bug in the model code
// (configs are validated before tracing), so it aborts with both shapes in the message.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "engine/ir/program.h"
#include "engine/tensor/rope_form.h"

namespace eng {

class Builder {
 public:
  explicit Builder(std::string name);

  ValueId argument(std::string name, Shape shape, DType dtype, std::vector<std::string> logical,
                   ArgRole role);
  // Marks v as a program result; aliased_arg: index into args() it updates in place.
  void output(ValueId v, std::string name, int aliased_arg = -1);

  // The generic entry every helper below goes through: infers outputs and appends.
  std::vector<ValueId> emit(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs = {});

  // ---- rematerialisation tags (engine/ir/remat.h) ----
  // jax.ad_checkpoint.checkpoint_name: tags v (no op is emitted) and returns it.
  ValueId checkpoint_name(ValueId v, std::string name);
  // Values emitted from now on belong to remat region `scope` (a decoder layer), until the
  // next call; -1 (the default) = outside every region: always saved.
  void set_remat_scope(int32_t scope) { remat_scope_ = scope; }
  // Values emitted from now on belong to pipeline iteration `it` (ValueInfo::
  // pipeline_iteration), until the next call; -1 (the default) = outside the pipeline.
  void set_pipeline_iteration(int32_t it) { pipeline_iteration_ = it; }
  int32_t pipeline_iteration() const { return pipeline_iteration_; }

  // ---- vmap (op.h): ops emitted from now on are vmapped over a leading dim of size n
  // (0 = none), until the next call; the pipeline's stage body (jax.vmap over stages).
  void set_vmap(int64_t n) { vmap_ = n; }
  int64_t vmap() const { return vmap_; }
  // The logical name vmapped outputs get for their leading dim (the model's, e.g. MaxText's
  // "activation_stage"); kept across set_vmap calls, so autodiff's vmapped VJPs get it too.
  void set_vmap_logical(std::string name) { vmap_logical_ = std::move(name); }

  // ---- pipeline data movement (op.h) ----
  ValueId reshape(ValueId x, const Shape& shape);
  ValueId slice(ValueId x, int dim, int64_t start, int64_t size);
  // out_sharding (logical names, as matmul's): where the padded result should live; a row
  // block padded into one member's block of a dim split that way is placed there with no
  // traffic (spmd.cpp rows) instead of padded whole then sliced.
  ValueId pad(ValueId x, int dim, int64_t start, int64_t size,
              const std::vector<std::string>& out_sharding = {});
  ValueId concat(std::vector<ValueId> xs, int dim);
  // kShift (op.h): rows move by `shift` along dim; with source_size > 0 only the rows
  // [source_start, source_start + source_size) move (zeros elsewhere).
  ValueId shift(ValueId x, int dim, int64_t shift, int64_t source_start = 0,
                int64_t source_size = 0);
  // ---- scanned layers (op.h) ----
  ValueId index_in_dim(ValueId x, int dim, int64_t index);  // x[..., index, ...], dim removed
  // acc (or zeros with dim of length size) with update added into slot index along dim.
  ValueId add_index_in_dim(ValueId update, ValueId acc, int dim, int64_t index, int64_t size);
  // x (N, S, ...) -> (S, ...), row s from slot indices[s] of dim 0 (a per-row index_in_dim).
  ValueId index_per_row(ValueId x, const std::vector<int64_t>& indices);
  // acc (or zeros (size, S, ...)) with update[s] added at [indices[s], s].
  ValueId add_index_per_row(ValueId update, ValueId acc, const std::vector<int64_t>& indices,
                            int64_t size);
  // ---- traced indices (op.h): jnp.remainder, jax.lax.dynamic_(update_)slice_in_dim ----
  ValueId remainder(ValueId a, ValueId b);  // a mod b, the sign of b (Python's %)
  // x[s : s + size] along dim, s = the i32 scalar start, negative from the end, clamped.
  ValueId dynamic_slice_in_dim(ValueId x, ValueId start, int dim, int64_t size);
  // x with update written (add: added) at rows [s, s + update.dim) along dim, s as above.
  ValueId dynamic_update_slice_in_dim(ValueId x, ValueId update, ValueId start, int dim,
                                      bool add);
  // ---- the front-end's transpose, comparisons and select (op.h) ----
  ValueId transpose(ValueId x, const std::vector<int64_t>& permutation);
  ValueId compare(ValueId a, ValueId b, CompareDirection direction);  // a 0/1 mask like a
  ValueId select(ValueId pred, ValueId on_true, ValueId on_false);    // pred != 0 ? t : f

  // ---- forward ----
  ValueId embed_lookup(ValueId table, ValueId ids);
  // depth_logical: the logical name of the new last dim (the model's, e.g. "vocab").
  ValueId one_hot(ValueId ids, int64_t depth, std::string depth_logical = "");
  // out_sharding: JAX's out_sharding as logical names per result dim (MaxText passes it in
  // explicit mode); out_like: the value whose sharding the result takes (autodiff). See op.h.
  ValueId matmul(ValueId a, ValueId b, int a_split, int b_split, bool trans_a = false,
                 bool trans_b = false, std::vector<std::string> out_sharding = {},
                 ValueId out_like = kNoValue);
  std::pair<ValueId, ValueId> rmsnorm(ValueId x, ValueId scale, double eps);  // y, rstd
  // MaxText's Gpt3LayerNorm (op.h kLayerNorm): y = norm(x) * (1 + scale) + bias.
  ValueId layernorm(ValueId x, ValueId scale, ValueId bias, double eps);
  ValueId bias_add(ValueId x, ValueId bias);  // x + bias over x's trailing dims
  // form: MaxText's LLaMARotaryEmbedding variants (engine/tensor/rope_form.h).
  ValueId rope(ValueId x, ValueId positions, double min_timescale, double max_timescale,
               bool inverse = false, kern::RopeForm form = {});
  // o, lse; segment_ids (B, T) i32 masks keys of other segments (packing), kNoValue: none.
  std::pair<ValueId, ValueId> attention(ValueId q, ValueId k, ValueId v, double scale,
                                        ValueId segment_ids = kNoValue);
  ValueId swiglu(ValueId g, ValueId u);
  // Grouped-query attention (op.h): (B,T,Hkv,D) -> (B,T,Hkv*repeats,D), head h = kv h / repeats.
  // heads_logical: the logical name of the result's heads dim (the model's); "" keeps x's.
  ValueId repeat_kv(ValueId x, int64_t repeats, std::string heads_logical = "");
  ValueId add(ValueId a, ValueId b);
  ValueId mul(ValueId a, ValueId b);
  ValueId scale(ValueId x, double c);
  ValueId convert(ValueId x, DType dtype);
  // MaxText's maybe_shard_with_logical: size-1 mesh axes dropped; a reshard in both modes.
  ValueId constraint(ValueId x, std::vector<std::string> logical);
  // flax's nn.with_logical_constraint: size-1 axes kept; in explicit mode an equality assert.
  ValueId raw_constraint(ValueId x, std::vector<std::string> logical);
  std::pair<ValueId, ValueId> softmax_cross_entropy(ValueId logits, ValueId targets);  // xent, lse
  std::pair<ValueId, ValueId> masked_mean_loss(ValueId xent, ValueId segmentation);  // loss, weights

  // ---- optimizer and metrics ----
  ValueId sum_squares(ValueId x);
  ValueId global_norm(std::vector<ValueId> sums_of_squares);
  ValueId clip_factor(ValueId norm, double threshold);
  ValueId learning_rate(ValueId step, double lr, int64_t warmup_steps, int64_t cos_steps,
                        double final_fraction);
  // Returns param', mu', nu'.
  std::array<ValueId, 3> adamw(ValueId param, ValueId grad, ValueId mu, ValueId nu, ValueId lr,
                               ValueId clip, ValueId step, double b1, double b2, double eps,
                               double weight_decay);
  ValueId increment(ValueId step);

  const ValueInfo& info(ValueId v) const { return program_.values_[v]; }
  ValueInfo& mutable_info(ValueId v) { return program_.values_[v]; }
  const Program& program() const { return program_; }
  Program finish() &&;

 private:
  ValueId new_value(ValueInfo info);
  Program program_;
  int32_t remat_scope_ = -1;
  int32_t pipeline_iteration_ = -1;
  int64_t vmap_ = 0;
  std::string vmap_logical_;
};

}  // namespace eng
