// engine/model/llama.h: the llama2-style decoder traced into a Program, with MaxText's
// parameter paths and logical axis names (MaxText's configs/base.yml logical_axis_rules).
//
//   Result<ModelConfig> m = model_preset("llama-tiny");
//   Builder b("train_step");
//   LlamaParams p = declare_llama_params(b, *m);       // program arguments, role kParam
//   ValueId loss = trace_llama_loss(b, *m, p, batch);  // forward + masked mean xent
//
// Glossary: B batch, T sequence, E emb_dim, H heads, D head_dim, M mlp_dim, V vocab, L layers.
// Parameter tree (MaxText's unscanned names, scan_layers=false):
//   params/token_embedder/embedding                          (V, E)    (vocab, embed_vocab)
//   params/decoder/layers_{l}/pre_self_attention_layer_norm/scale (E)  (norm,)
//   params/decoder/layers_{l}/self_attention/query/kernel    (E, H, D) (embed, q_heads, kv)
//   params/decoder/layers_{l}/self_attention/key/kernel      (E, Hkv, D)
//                                                            (embed, kv_heads, kv_head_dim)
//   params/decoder/layers_{l}/self_attention/value/kernel    (E, Hkv, D)
//                                                            (embed, kv_heads, kv_head_dim)
//   params/decoder/layers_{l}/self_attention/out/kernel      (H, D, E) (heads, kv, embed)
//   params/decoder/layers_{l}/self_attention/query_norm/scale (D)      (norm,)  use_qk_norm
//   params/decoder/layers_{l}/self_attention/key_norm/scale  (D)       (norm,)  use_qk_norm
//   params/decoder/layers_{l}/post_self_attention_layer_norm/scale (E) (norm,)
//   params/decoder/layers_{l}/mlp/wi_0/kernel                (E, M)    (embed, mlp)
//   params/decoder/layers_{l}/mlp/wi_1/kernel                (E, M)    (embed, mlp)
//   params/decoder/layers_{l}/mlp/wo/kernel                  (M, E)    (mlp, embed)
//   params/decoder/decoder_norm/scale                        (E)       (norm,)
//   params/decoder/logits_dense/kernel                       (E, V)    (embed_vocab, vocab)
// Scanned (scan_layers=true, MaxText's nn.scan over the decoder layers with
// metadata_params={nn.PARTITION_NAME: "layers"}): each layer kind is ONE parameter
// params/decoder/layers/<sub> with the layer dim L inserted at param_scan_axis a and the
// logical name "layers" there, e.g. with a = 1 (MaxText's default)
//   params/decoder/layers/mlp/wi_0/kernel                    (E, L, M) (embed, layers, mlp)
//   params/decoder/layers/pre_self_attention_layer_norm/scale (E, L)   (norm, layers)
//   params/decoder/layers/self_attention/out/kernel          (H, L, D, E)
//                                                            (heads, layers, kv, embed)
// Layer l reads its slice with index_in_dim (op.h) inside its remat region; the stacked
// gradient accumulates the layers' slices in place (add_index_in_dim). Slice l holds exactly
// the unscanned layer l's values, so both layouts train bitwise alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/ir/builder.h"
#include "engine/model/mla_config.h"
#include "engine/model/moe_config.h"
#include "engine/model/pipeline.h"

namespace eng {

struct ModelConfig {
  std::string name;                  // preset name ("llama-tiny", "llama2-7b", ...)
  int64_t vocab_size = 256;
  int64_t emb_dim = 256;             // E
  int64_t num_query_heads = 4;       // H
  int64_t num_kv_heads = 4;          // Hkv: divides H; < H is grouped-query attention
  int64_t head_dim = 64;             // D
  int64_t mlp_dim = 704;             // M
  int64_t num_decoder_layers = 4;    // L
  double normalization_layer_epsilon = 1e-5;
  double rope_min_timescale = 1.0;
  double rope_max_timescale = 10000.0;
  // MaxText's rope_type and rope_use_scale: "default" is RotaryEmbedding (rotate-half);
  // "llama3.1" (also any model named llama3.1*, as MaxText's attentions.py chooses) is
  // LLaMARotaryEmbedding: adjacent pairs rotated, and with rope_use_scale its frequencies
  // scaled as Llama 3.1's (op.h kRope). llama31_rope() says which.
  std::string rope_type = "default";
  bool rope_use_scale = true;
  bool use_iota_embed = false;       // one-hot matmul instead of a gather
  // use_iota_embed falls back to the gather when the one-hot (B, T, V) f32 would exceed
  // this many bytes (MaxText PR #3922: 2 GiB).
  int64_t iota_embed_max_bytes = int64_t{2} << 30;
  // MaxText's num_vocab_tiling: the loss head in this many tiles of the tokens, each tile's
  // logits recomputed in the backward (llama.cpp tiled_cross_entropy); 1 = one (B, T, V) logits.
  int64_t num_vocab_tiling = 1;
  std::vector<std::string> mlp_activations = {"silu", "linear"};
  // MaxText's decoder_block: "llama2" (this file; mistral's is the same layer; qwen3_moe is
  // this layer with use_qk_norm and its experts under moe_block/; "deepseek" is MaxText's
  // deepseek layer layout: first_num_dense_layers dense layers (dense_layers_{i}), then MoE
  // layers (moe_layers_{j}) with DeepSeekMoeBlock_0's routed and shared experts, routed_bias
  // and deepseek's weights; its attention is attention_type's: global or MLA, mla.h) or "gpt3"
  // (engine/model/gpt3.h: LayerNorm with bias, fused qkv with biases, gelu MLP with biases,
  // learned positions, logits via the embedding; mlp_activations [gelu]).
  std::string decoder_block = "llama2";
  // MaxText's use_qk_norm (attentions.py): RMSNorm over head_dim of the projected query and
  // key, per head, before rope (self_attention/query_norm, key_norm; scale (D), ("norm",)).
  bool use_qk_norm = false;
  int64_t trainable_position_size = -1;  // gpt3: learned position embeddings (P, E); -1: none
  bool logits_via_embedding = false;     // gpt3: logits = y . embedding^T (no logits_dense)
  bool fused_qkv = false;                // gpt3: one (E, 3, H, D) qkv_proj kernel
  // MaxText's dtype (activations, matmul inputs) and weight_dtype (parameters); the casts
  // are docs/precision.md's. float32/float32 emits no cast at all.
  DType dtype = DType::kF32;
  DType weight_dtype = DType::kF32;
  // Pipeline parallelism (engine/model/pipeline.h): stages > 1 traces the decoder as
  // MaxText's pipeline over the `stage` mesh axis with this many microbatches, repeats
  // (> 1: circular) and forwarding delay (2: pipeline_delay_activation_forwarding).
  int64_t pipeline_stages = 1;
  int64_t pipeline_microbatches = 1;
  int64_t pipeline_repeats = 1;
  int64_t pipeline_delay = 1;
  // MaxText's pipeline_parallel_layers P: the first P decoder layers run in the pipeline, the
  // other L - P after it as scanned layers (params/decoder/layers_outside_pipeline/...) with
  // `stage` acting as data for their activations; -1: all L (pipelined_layers()).
  int64_t pipeline_parallel_layers = -1;
  // pipeline_fsdp_ag_once / pipeline_fsdp_ag_per_repeat: gather the stage weights over the
  // fsdp axes once per step / once per repeat instead of in every iteration.
  bool pipeline_fsdp_ag_once = false;
  bool pipeline_fsdp_ag_per_repeat = false;
  // Packed sequences (MaxText's packing): attention takes inputs_segmentation and masks keys
  // of other segments. Off: plain causal attention (the program has no segment-id input).
  bool attention_segment_ids = false;
  // Scanned layers (MaxText's scan_layers / param_scan_axis; layout above).
  bool scan_layers = false;
  int64_t param_scan_axis = 1;  // 0 or 1: where the layer dim goes in every stacked weight
  // Mixture of experts (engine/model/moe.h): num_experts > 1 replaces every layer's MLP.
  MoeConfig moe;
  // MaxText's attention_type: "global" (the layer above) or "mla" (multi-head latent attention,
  // engine/model/mla.h: self_attention/{wq_a, q_norm, wq_b | query, wkv_a, kv_norm, wkv_b, out}).
  std::string attention_type = "global";
  MlaConfig mla;

  // Every size positive, kv heads divide query heads, head_dim even; errors name the value.
  Status validate() const;
  int64_t num_params() const;        // total parameter count (every declared weight)
  // Parameters one token's forward pass reads: the total for a dense model (every weight is
  // used by every token; the embedding table counts whole, as MaxText's count does); with
  // experts, only num_experts_per_tok experts' weights of each layer (the router counts).
  int64_t num_active_params() const;
  bool gpt3() const { return decoder_block == "gpt3"; }
  bool is_mla() const { return attention_type == "mla"; }
  bool llama31_rope() const { return name.starts_with("llama3.1") || rope_type.starts_with("llama3.1"); }
  // P: the decoder layers the pipeline runs (all L unless pipeline_parallel_layers is set).
  int64_t pipelined_layers() const {
    return pipeline_parallel_layers < 0 ? num_decoder_layers : pipeline_parallel_layers;
  }
};

// Presets (engine/model/presets.cpp): llama-tiny, llama-small (bench/torch_llama.py's shapes);
// MaxText's configs/models llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3.1-8b,
// llama3.1-70b, llama3.1-405b, mistral-7b (shape-only compiles). An unknown name's error
// names the nearest known ones and lists all.
Result<ModelConfig> model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
// The n preset names closest to `name` by edit distance, nearest first.
std::vector<std::string> nearest_model_names(const std::string& name, size_t n);

// With experts (moe.enabled()), wi_0, wi_1 and wo are the experts' (MoeBlock_0/..., qwen3's
// moe_block/...) and gate is the router's kernel; a dense layer has no gate. query_norm and
// key_norm: use_qk_norm's scales (kNoValue without it).
struct LlamaLayerParams {
  ValueId pre_norm, query, key, value, out, post_norm, wi_0, wi_1, wo;
  ValueId gate = kNoValue;
  ValueId query_norm = kNoValue, key_norm = kNoValue;
  // decoder_block deepseek's MoE layers: routed_bias's gate/bias (E) and the shared experts'
  // MLP (DeepSeekMoeBlock_0/shared_experts/...); kNoValue without them.
  ValueId gate_bias = kNoValue;
  ValueId shared_wi_0 = kNoValue, shared_wi_1 = kNoValue, shared_wo = kNoValue;
  // attention_type mla (engine/model/mla.h): `query` is wq_b (q_lora_rank > 0) or query, `out`
  // is out; key and value are kNoValue.
  ValueId wq_a = kNoValue, q_norm = kNoValue, wkv_a = kNoValue, kv_norm = kNoValue,
          wkv_b = kNoValue;
};

struct LlamaParams {
  ValueId embedding = kNoValue;
  std::vector<LlamaLayerParams> layers;  // per layer (unscanned, no pipeline)
  // Pipeline: one (stages, layers_per_stage, ...) weight per kind (engine/model/pipeline.h);
  // scan_layers: one weight per kind with the layer dim at param_scan_axis.
  LlamaLayerParams stacked{kNoValue, kNoValue, kNoValue, kNoValue, kNoValue,
                           kNoValue, kNoValue, kNoValue, kNoValue};
  // decoder_block deepseek, scanned: the first_num_dense_layers dense layers
  // (params/decoder/dense_layers/<sub>, logical "dense_layers" at param_scan_axis); `stacked`
  // is then the MoE layers (params/decoder/moe_layers/<sub>, "moe_layers"). Unscanned, `layers`
  // holds dense_layers_{i} then moe_layers_{j} in order.
  LlamaLayerParams stacked_dense{kNoValue, kNoValue, kNoValue, kNoValue, kNoValue,
                                 kNoValue, kNoValue, kNoValue, kNoValue};
  // Pipeline with P < L: the L - P layers after it, one weight per kind with the layer dim at
  // param_scan_axis (params/decoder/layers_outside_pipeline/<sub>; engine/model/pipeline.h).
  LlamaLayerParams outside{kNoValue, kNoValue, kNoValue, kNoValue, kNoValue,
                           kNoValue, kNoValue, kNoValue, kNoValue};
  ValueId decoder_norm = kNoValue, logits_dense = kNoValue;
  std::vector<ValueId> all;  // every parameter, in declaration (= argument) order
};

// The batch as MaxText's get_shaped_batch: (B, T) int32 arrays.
struct BatchArgs {
  ValueId inputs, inputs_position, inputs_segmentation;
  ValueId targets, targets_position, targets_segmentation;
};

// Logical axes of the batch arrays (MaxText's input_data_sharding_logical_axes). Pipelined:
// activation_batch, without `stage`: every stage holds its data/fsdp rows (int32, small), so
// the embedding runs on the rows stage 0 takes in and the loss head's targets are local
// slices (pipeline_output_rows); MaxText splits them over `stage` as well.
const std::vector<std::string>& input_data_logical_axes(bool pipelined = false);

LlamaParams declare_llama_params(Builder& b, const ModelConfig& m);

// The nine weights of a layer in LlamaLayerParams order (ten with experts: gate after wo;
// then query_norm and key_norm with use_qk_norm: 9, 10, 11 or 12 weights).
std::vector<ValueId> layer_param_list(const LlamaLayerParams& lp);
LlamaLayerParams layer_from_list(const std::vector<ValueId>& v);

// The nine weights of one decoder layer (LlamaLayerParams order): path under the layer
// (layers_{l}/, layers/ when scanned, or the pipeline's stacking), per-layer shape and
// logical names. The scanned, unscanned and pipeline layouts all declare from this list.
struct LayerWeight {
  const char* sub;
  std::vector<int64_t> dims;
  std::vector<std::string> logical;
};
std::vector<LayerWeight> layer_weights(const ModelConfig& m);
// decoder_block deepseek: a dense layer's (moe_layer false: the llama2 layer's MLP under mlp/)
// or a MoE layer's weights (DeepSeekMoeBlock_0/..., after the gate: gate/bias with
// routed_bias, the shared experts' wi_0, wi_1, wo with shared_experts > 0). layer_weights(m)
// is layer_weights(m, true) there.
std::vector<LayerWeight> layer_weights(const ModelConfig& m, bool moe_layer);
// Any layer kind's values in the order of `ws` (layer_weights), matched by path.
LlamaLayerParams layer_from_weights(const std::vector<LayerWeight>& ws,
                                    const std::vector<ValueId>& v);
// The decoder's scanned layer groups: {path part, logical name, layers}, e.g.
// {"decoder/layers/", "layers", L}, or deepseek's {"decoder/dense_layers/", "dense_layers",
// first_num_dense_layers} and {"decoder/moe_layers/", "moe_layers", L - first}.
struct LayerGroup {
  const char* scanned_part;  // "decoder/layers/"
  const char* logical;       // "layers"
  int64_t n;
  bool moe;                  // the group's layers are MoE layers
};
std::vector<LayerGroup> layer_groups(const ModelConfig& m);

// The sum of squares of every parameter-shaped value (gradients, updated parameters; one
// per entry of p.all, in p.all's order), as one scalar per UNSCANNED parameter, in the
// unscanned argument order: a stacked value contributes one term per layer (its slice).
// Their sum (global_norm) is then bitwise the same for either layout.
std::vector<ValueId> per_layer_sum_squares(Builder& b, const ModelConfig& m, const LlamaParams& p,
                                           const std::vector<ValueId>& values);

// For a scanned parameter name "<prefix>decoder/layers/<sub>" (any prefix: params/,
// opt_state/mu/, ...) and the layer index: "<prefix>decoder/layers_<l>/<sub>"; and back.
// nullopt when the name has no such part.
std::optional<std::string> unscanned_name(const std::string& scanned, int64_t layer);
struct ScannedName {
  std::string name;  // "<prefix>decoder/layers/<sub>"
  int64_t layer;
};
std::optional<ScannedName> scanned_name(const std::string& unscanned);
// The batch arrays of model m (sharded by input_data_logical_axes(m is pipelined)).
BatchArgs declare_batch(Builder& b, const ModelConfig& m, int64_t global_batch, int64_t seq_len);

struct LossValues {
  ValueId loss;           // () f32: masked mean cross-entropy (+ the MoE load-balance loss)
  ValueId total_weights;  // () f32: number of non-padding targets
  // Mixture of experts: the mean over layers of the load-balance losses (MaxText's
  // moe_lb_loss, already in `loss`), and each MoE layer's load (2, E) (engine/model/moe.h).
  ValueId moe_lb_loss = kNoValue;
  std::vector<ValueId> moe_load;
};
struct MoeOutputs;
// One decoder layer (attention + MLP blocks) on x (B, T, E), as remat region remat_scope.
// Under Builder::set_vmap(S) every operand carries a leading stage dim (the pipeline body).
// segment_ids (B, T) i32: packed sequences' segments for the attention mask; kNoValue: none.
// stage_as_data: the layer's activation logical names are their pp_act_as_dp forms
// (pp_act_as_dp_name, pipeline.h), as MaxText runs the layers after a pipeline.
// moe: where a MoE layer appends its load-balance loss and load (required with experts).
ValueId trace_decoder_layer(Builder& b, const ModelConfig& m, const LlamaLayerParams& lp, ValueId x,
                            ValueId positions, int32_t remat_scope,
                            ValueId segment_ids = kNoValue, bool stage_as_data = false,
                            MoeOutputs* moe = nullptr);

// n scanned decoder layers on x: layer k reads slice k (at param_scan_axis) of `stacked`'s
// weights inside remat region first_scope + k (MaxText's scan_decoder_layers); stage_as_data
// as in trace_decoder_layer.
ValueId trace_scanned_layers(Builder& b, const ModelConfig& m, const LlamaLayerParams& stacked,
                             int64_t n, ValueId x, ValueId positions, ValueId segment_ids,
                             int32_t first_scope, bool stage_as_data = false,
                             MoeOutputs* moe = nullptr);

LossValues trace_llama_loss(Builder& b, const ModelConfig& m, const LlamaParams& p,
                            const BatchArgs& batch);

// Deterministic initialisation of one parameter from (seed, path): embedding N(0, 1);
// kernels truncated-normal variance scaling (fan_in) like MaxText's nd_dense_init(1.0,
// "fan_in", "truncated_normal"); norm scales 1. Fills `out` (numel floats). Stacked layer
// weights get each layer's own (unscanned) values; slice k of a layers_outside_pipeline
// weight is layer pipelined_layers + k (ModelConfig::pipelined_layers(); needed only for
// those weights).
// zero_centered_norms (gpt3's Gpt3LayerNorm, which multiplies by 1 + scale): norm scales start
// at 0 and biases (".../bias", every model) at 0, as MaxText's initialisers.
void init_param(const ValueInfo& param, uint64_t seed, float* out, int64_t pipelined_layers = 0,
                bool zero_centered_norms = false);
// Fan-in used by init_param for a kernel path/shape (product of the contracted input dims).
int64_t kernel_fan_in(const ValueInfo& param);

}  // namespace eng
