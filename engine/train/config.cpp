// engine/train/config.cpp: the key table, preset resolution, validation and did-you-mean.
#include "engine/train/config.h"

#include "engine/base/file.h"
#include "engine/base/limits.h"
#include "engine/base/text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "engine/ir/remat.h"
#include "engine/model/pipeline_schedule.h"

namespace eng {

namespace {

using V = ConfigValue;

// The largest element count of one tensor (2^50: 4 PiB of float32, far beyond any device,
// small enough that byte counts and their sums stay inside int64).
constexpr double kMaxElements = 1125899906842624.0;

// MaxText's base.yml defaults, except where noted (e.g. a synthetic default dataset because
// tfds is not available here).
const std::vector<ConfigKey> kKeys = {
    {"run_name", V{std::string()}, "name of the run in the metrics store (default: generated)"},
    {"model_name", V{std::string("llama-tiny")}, "model preset: llama-tiny, llama-small, llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3.1-8b, llama3.1-70b, llama3.1-405b, mistral-7b, gpt3-175b, gpt3-52k, gpt3-tiny, mixtral-tiny, mixtral-8x7b, mixtral-8x22b, qwen3-235b-a22b, qwen3-tiny, default (MaxText base.yml's model; MaxText's configs/models values; docs/models.md)"},
    {"steps", V{int64_t{150001}}, "number of training steps"},
    {"per_device_batch_size", V{12.0}, "sequences per device per step (global batch = devices x this)"},
    {"max_target_length", V{int64_t{2048}}, "sequence length T"},
    {"vocab_size", V{int64_t{32000}}, "vocabulary size V"},
    {"base_emb_dim", V{int64_t{2048}}, "embedding width E"},
    {"base_num_query_heads", V{int64_t{16}}, "attention heads H"},
    {"base_num_kv_heads", V{int64_t{16}},
     "key/value heads (divides the query heads; fewer = grouped-query attention)"},
    {"head_dim", V{int64_t{128}}, "head dimension D"},
    {"base_mlp_dim", V{int64_t{7168}}, "MLP hidden width M"},
    {"base_num_decoder_layers", V{int64_t{16}}, "decoder layers L"},
    {"normalization_layer_epsilon", V{1e-5}, "RMSNorm epsilon"},
    {"use_qk_norm", V{false}, "RMSNorm over head_dim of the projected query and key, per head, before rope (self_attention/query_norm, key_norm; qwen3); not for gpt3"},
    {"rope_min_timescale", V{1.0}, "RoPE: the first pair's timescale"},
    {"rope_max_timescale", V{10000.0}, "RoPE: the timescale the last pair approaches (llama3*: 500000, mistral-7b: 1000000)"},
    {"rope_type", V{std::string("default")}, "default (MaxText's RotaryEmbedding: rotate-half pairs) | llama3.1 (LLaMARotaryEmbedding: adjacent pairs, Llama 3.1's frequency scaling when rope_use_scale; what every model named llama3.1* runs, as in MaxText) | yarn (attention_type mla only: MaxText's YarnRotaryEmbedding on its rope part, interleaved pairs, frequencies corrected by rope_factor, beta_fast, beta_slow, rope_truncate)"},
    {"rope_use_scale", V{true}, "with the llama3.1 rope: apply Llama 3.1's frequency scaling (factor 8, low/high frequency factors 1/4, original context 8192, as MaxText hard-codes them); ignored by the default rope"},
    {"use_iota_embed", V{false}, "embed with a one-hot matmul instead of a gather"},
    {"scan_layers", V{true}, "stack each decoder-layer weight kind into one params/decoder/layers/... array with a 'layers' dim (MaxText's default; false: params/decoder/layers_<l>/...; pipelines keep their own (stages, layers_per_stage, ...) stacking; docs/sharding.md)"},
    {"param_scan_axis", V{int64_t{1}}, "where the layer dim goes in every stacked weight with scan_layers: 0 or 1 (MaxText default 1)"},
    {"dtype", V{std::string("bfloat16")}, "activation and matmul-input dtype: bfloat16 (MaxText's default) | float32 (docs/precision.md)"},
    {"weight_dtype", V{std::string("float32")}, "parameter and optimizer-moment dtype: float32 (MaxText's default) | bfloat16"},
    {"learning_rate", V{3e-5}, "peak learning rate"},
    {"warmup_steps_fraction", V{0.1}, "fraction of the schedule spent in linear warmup"},
    {"learning_rate_final_fraction", V{0.1}, "cosine decays to learning_rate x this"},
    {"learning_rate_schedule_steps", V{int64_t{-1}}, "schedule length (-1: steps)"},
    {"opt_type", V{std::string("adamw")}, "optimizer (adamw)"},
    {"adam_b1", V{0.9}, "AdamW beta1"},
    {"adam_b2", V{0.95}, "AdamW beta2"},
    {"adam_eps", V{1e-8}, "AdamW epsilon"},
    {"adam_weight_decay", V{0.1}, "AdamW decoupled weight decay"},
    {"gradient_clipping_threshold", V{1.0}, "clip by global norm (0 disables)"},
    {"dataset_type", V{std::string("synthetic")}, "synthetic | text | tokens"},
    {"dataset_path", V{std::string()}, "text file (byte-level) or .npy token file"},
    {"packing", V{true}, "text datasets: pack the file's documents (split at its '%' lines, as fortune files have) into rows, with segment ids that attention respects and positions restarting per document (MaxText's packing); a file without '%' lines is one stream of windows; .npy tokens have no document boundaries (packing=true set explicitly is an error)"},
    {"init_weights_seed", V{int64_t{0}}, "seed of the parameter initialisation"},
    {"data_shuffle_seed", V{int64_t{0}}, "seed of the data order"},
    {"log_period", V{int64_t{1}}, "steps per metrics-store transaction (MaxText default 100; 1 here so every step is durable once synced; queries, checkpoints and the end of train() flush too)"},
    {"remat_policy", V{std::string("full")}, "rematerialisation: none | full | minimal | minimal_with_context | save_dot_with_context_except_mlp | save_dot_except_mlpwi | save_dot_except_mlp | save_qkv_proj | save_out_proj | qkv_proj_offloaded | minimal_offloaded | save_only_these_names | custom (docs/memory.md)"},
    {"remat_save_names", V{std::string()}, "checkpoint names saved by remat_policy save_only_these_names/custom, comma-separated (e.g. \"query_proj,key_proj,value_proj,out_proj\")"},
    {"remat_offload_names", V{std::string()}, "checkpoint names remat_policy=custom offloads to host memory, comma-separated (MaxText's custom keys set to 'offload', e.g. \"decoder_layer_input,query_proj\")"},
    {"num_vocab_tiling", V{int64_t{1}}, "MaxText's vocabulary tiling: the loss head in this many tiles of each row's tokens (it must divide max_target_length), each tile's logits computed again in the backward, so one tile's (B, T/K, V) logits are live instead of the whole (B, T, V); the lm head kernel is gathered once; 1 = off (docs/memory.md)"},
    {"iota_embed_max_bytes", V{int64_t{2} << 30}, "use_iota_embed falls back to the gather above this one-hot (B,T,V) f32 size (MaxText PR #3922: 2 GiB)"},
    {"remove_size_one_mesh_axis_from_type", V{true}, "size-1 mesh axes are dropped from shardings (MaxText default true; always the case here, false is unsupported)"},
    {"grad_dtype", V{std::string("float32")}, "float32 gradients are cast to this before clipping and the update: float32 (MaxText's default) | bfloat16 (MaxText train.py)"},
    // Sharding (docs/sharding.md): MaxText's names.
    {"shard_mode", V{std::string("auto")}, "auto | explicit (explicit: constraints assert, ambiguous matmuls need out_sharding)"},
    {"shard_optimizer_over_data", V{false}, "ZeRO-1: optimizer state also sharded over the data axis"},
    {"skip_trivial_specs", V{false}, "an all-replicated sharding constraint emits nothing (MaxText PR 3 proposal)"},
    {"logical_axis_rules", V{std::string()}, "rule overrides in base.yml's form, e.g. \"[['embed', ['fsdp']], ['mlp', []]]\": merged as MaxText's pyconfig does: into the defaults after the model's own rules (llama2-*: ['norm', 'fsdp']; same-name rules replaced, overrides appended)"},
    {"override_logical_axis_rules", V{false}, "logical_axis_rules replaces the default rules instead of merging"},
    {"sharding_tolerance", V{0.02}, "largest fraction of parameter elements allowed unsharded on a non-trivial axis (t:audit)"},
    {"num_devices", V{int64_t{-1}}, "devices of the mesh sl.trainer builds from the ici_* keys when given no mesh (-1: the product of the ici_* sizes that are not -1); with a mesh it must equal the mesh's device count. Not a MaxText key: MaxText counts jax.devices()"},
    {"ici_diloco_parallelism", V{int64_t{1}}, "mesh axis 'diloco' size"},
    {"ici_data_parallelism", V{int64_t{1}}, "mesh axis 'data' size"},
    {"ici_pipeline_parallelism", V{int64_t{1}}, "mesh axis 'stage' size; > 1 traces the decoder as a pipeline (docs/sharding.md)"},
    {"num_layers_per_pipeline_stage", V{int64_t{1}}, "decoder layers per pipeline stage per repeat lps (MaxText's default 1); R = num_decoder_layers (or pipeline_parallel_layers when set) / (stages x lps), circular when R > 1; num_decoder_layers / stages is the non-circular pipeline; -1: derived from num_pipeline_repeats"},
    {"num_pipeline_microbatches", V{int64_t{-1}}, "pipeline microbatches M (-1: the number of stages, twice that with pipeline_delay_activation_forwarding); must divide the global batch and be divisible by the stages"},
    {"num_pipeline_repeats", V{int64_t{-1}}, "pipeline repeats R (-1: derived, num_decoder_layers (or pipeline_parallel_layers when set) / (stages x num_layers_per_pipeline_stage)); R > 1 is a circular pipeline; to choose R here, set num_layers_per_pipeline_stage = -1 (or to the matching value)"},
    {"pipeline_parallel_layers", V{int64_t{-1}}, "the first P decoder layers run in the pipeline (-1: all), R = P / (stages x num_layers_per_pipeline_stage); the other num_decoder_layers - P run after it as scanned layers (params/decoder/layers_outside_pipeline/...) with the stage axis acting as data (MaxText's decoders.py)"},
    {"pipeline_delay_activation_forwarding", V{false}, "forward each stage's output one iteration late (delay d = 2; needs num_pipeline_microbatches >= 2 x stages)"},
    {"pipeline_fsdp_ag_once", V{false}, "all-gather the fsdp-sharded pipeline weights once per step instead of in every iteration (more memory held, fewer bytes moved)"},
    {"pipeline_fsdp_ag_per_repeat", V{false}, "all-gather the fsdp-sharded pipeline weights of each repeat once, before its first use"},
    {"ici_fsdp_parallelism", V{int64_t{-1}}, "mesh axis 'fsdp' size (-1: the remaining devices)"},
    {"ici_fsdp_transpose_parallelism", V{int64_t{1}}, "mesh axis 'fsdp_transpose' size"},
    {"ici_context_parallelism", V{int64_t{1}}, "mesh axis 'context' size"},
    {"ici_context_usp_ulysses_parallelism", V{int64_t{1}}, "mesh axis 'context_usp_ulysses' size"},
    {"ici_context_autoregressive_parallelism", V{int64_t{1}}, "mesh axis 'context_autoregressive' size"},
    {"ici_tensor_parallelism", V{int64_t{1}}, "mesh axis 'tensor' size"},
    {"ici_tensor_sequence_parallelism", V{int64_t{1}}, "mesh axis 'tensor_sequence' size"},
    {"ici_expert_parallelism", V{int64_t{1}}, "mesh axis 'expert' size"},
    {"ici_autoregressive_parallelism", V{int64_t{1}}, "mesh axis 'autoregressive' size"},
    // Named hardware (docs/prediction.md): MaxText's train_compile keys, used by sl.plan.
    {"compile_topology", V{std::string()}, "the hardware sl.plan compiles and predicts for, MaxText's names: v4-N, v5e-N, v5p-N, v6e-N, tpu7x-N, a3, a3ultra, a4 (\"\": none)"},
    {"compile_topology_num_slices", V{int64_t{1}}, "slices of compile_topology (GPUs: hosts); the dcn_* axes span them"},
    {"sa_block_q", V{int64_t{512}}, "attention query block of MaxText's splash kernel; sl.plan's prediction computes whole (sa_block_q, sa_block_kv) tiles up to the causal diagonal (the CPU kernel's own blocking is separate)"},
    {"sa_block_kv", V{int64_t{512}}, "attention key/value block of MaxText's splash kernel (see sa_block_q)"},
    {"sa_block_q_dkv", V{int64_t{512}}, "query block of the splash kernel's dK/dV backward (sl.plan: its causal tiles)"},
    {"sa_block_kv_dkv", V{int64_t{512}}, "key/value block of the splash kernel's dK/dV backward (see sa_block_q_dkv)"},
    {"sa_block_q_dq", V{int64_t{512}}, "query block of the splash kernel's separate dQ backward (unused with sa_use_fused_bwd_kernel)"},
    {"sa_block_kv_dq", V{int64_t{512}}, "key/value block of the splash kernel's separate dQ backward (see sa_block_q_dq)"},
    {"sa_use_fused_bwd_kernel", V{false}, "the splash backward computes dQ inside the dK/dV kernel (5 matmuls per tile) instead of a second kernel that recomputes QK^T and dP (4 + 3); sl.plan prices the one MaxText runs"},
    {"dcn_diloco_parallelism", V{int64_t{1}}, "mesh axis 'diloco' size over slices (DCN)"},
    {"dcn_data_parallelism", V{int64_t{-1}}, "mesh axis 'data' size over slices (DCN; -1: the remaining slices)"},
    {"dcn_pipeline_parallelism", V{int64_t{1}}, "mesh axis 'stage' size over slices (DCN)"},
    {"dcn_fsdp_parallelism", V{int64_t{1}}, "mesh axis 'fsdp' size over slices (DCN)"},
    {"dcn_fsdp_transpose_parallelism", V{int64_t{1}}, "mesh axis 'fsdp_transpose' size over slices (DCN)"},
    {"dcn_context_parallelism", V{int64_t{1}}, "mesh axis 'context' size over slices (DCN)"},
    {"dcn_context_usp_ulysses_parallelism", V{int64_t{1}}, "mesh axis 'context_usp_ulysses' size over slices (DCN)"},
    {"dcn_context_autoregressive_parallelism", V{int64_t{1}}, "mesh axis 'context_autoregressive' size over slices (DCN)"},
    {"dcn_tensor_parallelism", V{int64_t{1}}, "mesh axis 'tensor' size over slices (DCN)"},
    {"dcn_tensor_sequence_parallelism", V{int64_t{1}}, "mesh axis 'tensor_sequence' size over slices (DCN)"},
    {"dcn_expert_parallelism", V{int64_t{1}}, "mesh axis 'expert' size over slices (DCN)"},
    {"dcn_autoregressive_parallelism", V{int64_t{1}}, "mesh axis 'autoregressive' size over slices (DCN)"},
    // Mixture of experts (engine/model/moe.h, docs/sharding.md "Mixture of experts").
    {"num_experts", V{int64_t{1}}, "experts per MoE layer (> 1: every decoder layer's MLP is a routed MoE block)"},
    {"num_experts_per_tok", V{int64_t{1}}, "experts each token is routed to (top-k)"},
    {"base_moe_mlp_dim", V{int64_t{-1}}, "each expert's hidden width (-1: base_mlp_dim)"},
    {"capacity_factor", V{-1.0}, "expert capacity factor: > 0 with sparse_matmul=false is the dense dispatch with capacity (tokens over capacity are dropped); not read with sparse_matmul=true (dropless)"},
    {"sparse_matmul", V{true}, "dropless sparse dispatch (MaxText's default): tokens sorted by expert, grouped matmul (ragged_dot), unsorted and weighted; nothing dropped; with expert parallelism each device's rows go to the experts' devices by a ragged all-to-all over `expert` (ragged_buffer_factor sizes the receive buffer)"},
    {"ragged_buffer_factor", V{-1.0}, "the dropless dispatch's receive buffer under expert parallelism (MaxText's get_ragged_buffer_size): > 0: local rows x factor (rows past an overflowing buffer are dropped); <= 0: the worst case, local rows x min(expert parallelism, num_experts / num_experts_per_tok)"},
    {"megablox", V{true}, "the sparse dispatch's grouped matmul kernel (MaxText's megablox; here every setting runs the engine's ragged_dot: one GEMM per row group)"},
    {"load_balance_loss_weight", V{0.0}, "weight of the Switch load-balance loss added to the loss (learning/moe_lb_loss)"},
    {"decoder_block", V{std::string()}, "MaxText's decoder layer: '' (the preset's), llama2, mistral, qwen3_moe, gpt3, or deepseek (dense_layers then moe_layers with shared experts and routed_bias; its attention is attention_type's)"},
    {"shared_experts", V{int64_t{0}}, "deepseek: a dense MLP of width shared_experts x base_moe_mlp_dim beside the routed experts, added to their output (DeepSeekMoeBlock_0/shared_experts)"},
    {"first_num_dense_layers", V{int64_t{0}}, "deepseek: this many dense decoder layers (dense_layers) before the MoE layers (moe_layers); scanned as two groups"},
    {"routed_score_func", V{std::string()}, "router score function: '' (the logits), softmax or sigmoid; weights: a softmax over the top-k scores, except deepseek's (the scores, divided by their sum for sigmoid, times routed_scaling_factor)"},
    {"routed_bias", V{false}, "deepseek: the router's gate/bias (E), added to the scores for the top-k choice only (not the weights); learned by gradient (through the load-balance loss)"},
    {"routed_bias_update_rate", V{0.0}, "deepseek with routed_bias: after each step gate/bias += rate x sign(mean load - load), per MoE layer over the step's batch (MaxText's aux-loss-free balancing)"},
    {"routed_scaling_factor", V{1.0}, "scale of deepseek's routed weights (other decoders ignore it, as MaxText)"},
    {"norm_topk_prob", V{false}, "divide the top-k weights by their sum (qwen3; deepseek ignores it, as MaxText)"},
    {"shard_exp_on_fsdp", V{false}, "expert weights' expert dim on embed_moe (fsdp) instead of exp (expert)"},
    {"moe_dispatch_no_expert_sharding", V{true}, "the dispatched tokens' batch dim leaves `expert` to the experts' dim, so tokens move by all-to-all over `expert` (MaxText's default is false: expert weights all-gathered instead)"},
    // Multi-head latent attention (engine/model/mla.h; MaxText base.yml's names and defaults).
    {"attention_type", V{std::string("global")}, "global (causal multi-head / grouped-query attention) | mla (multi-head latent attention: wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b; deepseek3)"},
    {"q_lora_rank", V{int64_t{0}}, "mla: the query's low rank (0: one query kernel (E, H, qk_nope_head_dim + qk_rope_head_dim))"},
    {"kv_lora_rank", V{int64_t{512}}, "mla: the key/value latent width (wkv_a's output before the rope part)"},
    {"qk_nope_head_dim", V{int64_t{128}}, "mla: the query/key head part without rope"},
    {"qk_rope_head_dim", V{int64_t{64}}, "mla: the query/key head part with rope (the key's shared by all heads)"},
    {"v_head_dim", V{int64_t{128}}, "mla: the value head dim"},
    {"mscale", V{1.0}, "mla: the softmax scale is (qk_nope_head_dim + qk_rope_head_dim)^-0.5 x (0.1 mscale ln(rope_factor) + 1)^2 when max_position_embeddings > original_max_position_embeddings"},
    {"rope_factor", V{40.0}, "mla: the softmax scale's rope_factor; yarn: the low frequencies' divisor"},
    {"max_position_embeddings", V{int64_t{163840}}, "mla: with original_max_position_embeddings, whether the softmax scale takes mscale"},
    {"original_max_position_embeddings", V{int64_t{4096}}, "mla: see max_position_embeddings"},
    {"rope_interleave", V{true}, "rope_type yarn: pairs (2i, 2i+1) (true; false is not supported yet)"},
    {"beta_fast", V{32.0}, "rope_type yarn: dims rotating more than beta_fast times in original_max_position_embeddings keep their frequency"},
    {"beta_slow", V{1.0}, "rope_type yarn: dims rotating fewer than beta_slow times are slowed by rope_factor (between the two: a linear mix)"},
    {"rope_truncate", V{true}, "rope_type yarn: floor / ceil the correction range's dims"},
    // Asynchronous dispatch and checkpoints (docs/checkpoints.md).
    {"max_inflight_steps", V{int64_t{2}}, "steps the host may dispatch ahead of the devices (0: synchronous)"},
    {"enable_checkpointing", V{false}, "save checkpoints (MaxText default true; off here so a REPL writes no files)"},
    {"checkpoint_period", V{int64_t{10000}}, "save a checkpoint after every step N with N % period == 0"},
    {"save_checkpoint_on_start", V{true}, "save step 0 (the state after the first step) when checkpointing is on, as MaxText does"},
    {"save_checkpoint_on_completion", V{true}, "save the last step when train() completes"},
    {"max_num_checkpoints_to_keep", V{int64_t{-1}}, "keep only the newest N checkpoints (-1: all)"},
    {"base_output_directory", V{std::string()}, "checkpoints go to <this>/<run_name>/checkpoints/<step>/"},
    {"load_parameters_path", V{std::string()}, "restore params only from this checkpoint (file or step dir)"},
    {"load_full_state_path", V{std::string()}, "restore the full state from this checkpoint (file or step dir)"},
    // Divergence (issue 30): MaxText base.yml's keys and defaults.
    {"abort_on_nan_loss", V{true}, "stop training (an error and an event; the run ends FAILED) when a step's loss is NaN"},
    {"abort_on_inf_loss", V{true}, "stop training (an error and an event; the run ends FAILED) when a step's loss is +-inf"},
    // Debug options for honest-timing tests: delays on the DEVICE side (dispatcher thread).
    {"debug_device_delay_seconds", V{0.0}, "debug: the devices sleep this long on debug_device_delay_steps"},
    {"debug_device_delay_steps", V{std::string()}, "debug: comma-separated steps to delay on the devices, e.g. \"3,7\""},
    {"debug_checkpoint_delay_seconds", V{0.0}, "debug: sleep this long halfway through writing a checkpoint file"},
    {"debug_checkpoint_delay_steps", V{std::string()}, "debug: comma-separated checkpoint steps to delay (empty: all)"},
    {"debug_compile_delay_seconds", V{0.0}, "debug: add this long to the train_step compile"},
    // Compile cache (docs/compile-cache.md): JAX's and MaxText's names.
    {"compilation_cache_dir", V{std::string()}, "persistent compilation cache directory (MaxText jax_cache_dir; \"\": off)"},
    {"persistent_cache_min_compile_time_secs", V{1.0}, "only compiles at least this long are written to the persistent cache (JAX default 1.0)"},
    {"persistent_cache_min_entry_size_bytes", V{int64_t{0}}, "only entries at least this big are written (0 or -1: no limit)"},
    {"compilation_cache_max_size", V{int64_t{-1}}, "most bytes the persistent cache's entries may hold; least recently used entries are evicted to fit a new one (-1: no limit; 0: nothing is written) (jax_compilation_cache_max_size)"},
    {"log_compiles", V{false}, "log every train_step compile, persistent-cache hit and the memory analysis (jax_log_compiles)"},
    {"explain_cache_misses", V{false}, "explain every compile-cache miss: which argument, old and new type (jax_explain_cache_misses)"},
    {"aot_shaped_batch_sharding", V{true}, "debug/compat: false reproduces MaxText's pre-PR-4174 AOT compile from an unsharded shaped batch (a second compile at step 0)"},
};

// Preset values applied between the base defaults and the user's overrides, like MaxText's
// configs/models/*.yml. llama-tiny/llama-small also fix the batch and sequence of
// the PyTorch reference's presets (bench/compare_torch.py) so throughput compares like for like.
std::map<std::string, V> preset_overrides(const std::string& model_name) {
  std::map<std::string, V> out;
  Result<ModelConfig> m = model_preset(model_name);
  if (!m.ok()) return out;
  out["vocab_size"] = m->vocab_size;
  out["base_emb_dim"] = m->emb_dim;
  out["base_num_query_heads"] = m->num_query_heads;
  out["base_num_kv_heads"] = m->num_kv_heads;
  out["head_dim"] = m->head_dim;
  out["base_mlp_dim"] = m->mlp_dim;
  out["base_num_decoder_layers"] = m->num_decoder_layers;
  out["rope_max_timescale"] = m->rope_max_timescale;
  if (m->use_iota_embed) out["use_iota_embed"] = true;  // gpt3's ymls
  if (m->normalization_layer_epsilon != 1e-5)  // qwen3's 1e-6
    out["normalization_layer_epsilon"] = m->normalization_layer_epsilon;
  if (m->use_qk_norm) out["use_qk_norm"] = true;  // qwen3
  if (model_name == "llama-tiny" || model_name == "llama-small" || model_name == "mixtral-tiny" ||
      model_name == "qwen3-tiny") {
    out["per_device_batch_size"] = 8.0;
    out["max_target_length"] = int64_t{model_name == "llama-small" ? 512 : 256};
  }
  if (m->moe.enabled()) {  // configs/models/mixtral-*.yml's MoE keys
    out["num_experts"] = m->moe.num_experts;
    out["num_experts_per_tok"] = m->moe.num_experts_per_tok;
    out["base_moe_mlp_dim"] = m->moe.moe_mlp_dim;
    if (m->moe.norm_topk_prob) out["norm_topk_prob"] = true;  // qwen3
    if (m->moe.load_balance_loss_weight > 0)
      out["load_balance_loss_weight"] = m->moe.load_balance_loss_weight;
  }
  if (m->decoder_block == "deepseek") {  // configs/models/deepseek3-671b.yml's deepseek keys
    out["shared_experts"] = m->moe.shared_experts;
    out["first_num_dense_layers"] = m->moe.first_num_dense_layers;
    out["routed_score_func"] = m->moe.routed_score_func;
    out["routed_bias"] = m->moe.routed_bias;
    out["routed_scaling_factor"] = m->moe.routed_scaling_factor;
  }
  if (m->is_mla()) {  // and its MLA keys
    out["attention_type"] = m->attention_type;
    out["q_lora_rank"] = m->mla.q_lora_rank;
    out["kv_lora_rank"] = m->mla.kv_lora_rank;
    out["qk_nope_head_dim"] = m->mla.qk_nope_head_dim;
    out["qk_rope_head_dim"] = m->mla.qk_rope_head_dim;
    out["v_head_dim"] = m->mla.v_head_dim;
    out["mscale"] = m->mla.mscale;
    out["rope_factor"] = m->mla.rope_factor;
    out["max_position_embeddings"] = m->mla.max_position_embeddings;
    out["original_max_position_embeddings"] = m->mla.original_max_position_embeddings;
    out["rope_type"] = m->rope_type;
    out["rope_interleave"] = m->mla.rope_interleave;
  }
  if (model_name == "deepseek-tiny") {  // trainable here: the dense dispatch, short sequences
    out["sparse_matmul"] = false;
    out["capacity_factor"] = 1.25;
    out["per_device_batch_size"] = 8.0;
    out["max_target_length"] = int64_t{128};
  }
  if (model_name == "mixtral-tiny" || model_name == "qwen3-tiny") {  // the dense dispatch
    out["sparse_matmul"] = false;
    out["capacity_factor"] = 1.25;
  }
  if (model_name == "gpt3-tiny") {  // as llama-tiny (base.yml's 2048 exceeds its 1024 positions)
    out["per_device_batch_size"] = 8.0;
    out["max_target_length"] = int64_t{256};
  }
  return out;
}

}  // namespace

LogicalAxisRules model_logical_axis_rules(const std::string& model_name) {
  if (model_name == "llama2-7b" || model_name == "llama2-13b" || model_name == "llama2-70b")
    return LogicalAxisRules({LogicalAxisRule{"norm", {"fsdp"}, true}});  // ['norm', 'fsdp']
  return LogicalAxisRules();
}

namespace {

const ConfigKey* find_key(std::string_view name) {
  for (const ConfigKey& k : kKeys)
    if (k.name == name) return &k;
  return nullptr;
}

// With its article: "config: steps expects an integer, got a string (x)".
const char* type_name(const V& v) {
  switch (v.index()) {
    case 0: return "a boolean";
    case 1: return "an integer";
    case 2: return "a number";
    default: return "a string";
  }
}


}  // namespace

std::string config_value_string(const ConfigValue& v) {
  switch (v.index()) {
    case 0: return std::get<bool>(v) ? "true" : "false";
    case 1: return fmt::format("{}", std::get<int64_t>(v));
    case 2: return fmt::format("{:g}", std::get<double>(v));
    default: return std::get<std::string>(v);
  }
}

const std::vector<ConfigKey>& config_keys() { return kKeys; }

std::string suggest_config_key(std::string_view key) {
  std::vector<std::string_view> names;
  for (const ConfigKey& k : kKeys) names.push_back(k.name);
  return closest_match(key, names);
}

Status Config::set(std::string_view key, ConfigValue value) {
  if (key == "model") key = "model_name";
  if (key == "dataset") {
    if (value.index() != 3)
      return invalid_argument("config: dataset expects a string like \"text:PATH\", got {}",
                              type_name(value));
    const std::string s = std::get<std::string>(value);
    const size_t colon = s.find(':');
    const std::string type = s.substr(0, colon);
    if (type != "synthetic" && type != "text" && type != "tokens")
      return invalid_argument(
          "config: dataset '{}' not understood: expected \"synthetic\", \"text:PATH\" or "
          "\"tokens:PATH\"",
          s);
    overrides_["dataset_type"] = type;
    overrides_["dataset_path"] = colon == std::string::npos ? std::string() : s.substr(colon + 1);
    return ok_status();
  }
  if (static_cast<int64_t>(key.size()) > kMaxNameLength)
    return invalid_argument("config: a key of {} characters ('{}...') is over the limit of {} "
                            "characters",
                            key.size(), key.substr(0, 32), kMaxNameLength);
  const ConfigKey* k = find_key(key);
  if (k == nullptr) {
    std::string hint = suggest_config_key(key);
    return invalid_argument("config: unknown key '{}'{}", key,
                            hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint));
  }
  if (k->default_value.index() == 2 && value.index() == 1)
    value = static_cast<double>(std::get<int64_t>(value));
  if (k->default_value.index() == 1 && value.index() == 2) {
    double d = std::get<double>(value);
    if (d != std::floor(d))
      return invalid_argument("config: {} expects an integer, got {:g}", key, d);
    if (std::fabs(d) > static_cast<double>(kMaxStep))  // the cast below would be undefined
      return invalid_argument("config: {} expects an integer of at most 2^53, got {:g}", key, d);
    value = static_cast<int64_t>(d);
  }
  if (value.index() == 2 && !std::isfinite(std::get<double>(value)))
    return invalid_argument("config: {} expects a finite number, got {:g}", key,
                            std::get<double>(value));
  if (k->default_value.index() != value.index())
    return invalid_argument("config: {} expects {}, got {} ({})", key,
                            type_name(k->default_value), type_name(value),
                            config_value_string(value));
  if (value.index() == 3)  // a NUL would cut a path or name short where C strings are used
    if (const size_t nul = std::get<std::string>(value).find('\0'); nul != std::string::npos)
      return invalid_argument("config: {} contains a NUL byte (at character {})", key, nul);
  if (key == "run_name")  // checkpoints go to <base_output_directory>/<run_name>: stay there
    ENG_RETURN_IF_ERROR(check_confined_name("config: run_name", std::get<std::string>(value)));
  if (key == "model_name") {
    Result<ModelConfig> m = model_preset(std::get<std::string>(value));
    if (!m.ok()) return invalid_argument("config: model_name: {}", m.status().message());
  }
  if (key == "logical_axis_rules") rules_.reset();  // the text is parsed when asked for
  overrides_[std::string(key)] = std::move(value);
  return ok_status();
}

void Config::set_logical_axis_rules(LogicalAxisRules rules) {
  overrides_["logical_axis_rules"] = rules.to_list_string();  // shown by get() and flatten()
  rules_ = std::move(rules);
}

Result<LogicalAxisRules> Config::logical_axis_rules() const {
  if (rules_) return *rules_;
  return parse_logical_axis_rules(get_string("logical_axis_rules"));
}

bool Config::has_override(std::string_view key) const {
  return overrides_.count(std::string(key)) > 0;
}

Result<ConfigValue> Config::get(std::string_view key) const {
  const ConfigKey* k = find_key(key);
  if (k == nullptr) return invalid_argument("config: unknown key '{}'", key);
  auto it = overrides_.find(std::string(key));
  if (it != overrides_.end()) return it->second;
  std::string model = std::get<std::string>(find_key("model_name")->default_value);
  auto mit = overrides_.find("model_name");
  if (mit != overrides_.end()) model = std::get<std::string>(mit->second);
  std::map<std::string, V> preset = preset_overrides(model);
  auto pit = preset.find(std::string(key));
  if (pit != preset.end()) return pit->second;
  return k->default_value;
}

int64_t Config::get_int(std::string_view key) const { return std::get<int64_t>(get(key).value()); }
double Config::get_float(std::string_view key) const { return std::get<double>(get(key).value()); }
bool Config::get_bool(std::string_view key) const { return std::get<bool>(get(key).value()); }
std::string Config::get_string(std::string_view key) const {
  return std::get<std::string>(get(key).value());
}

std::map<std::string, std::string> Config::flatten() const {
  std::map<std::string, std::string> out;
  for (const ConfigKey& k : kKeys) out[std::string(k.name)] = config_value_string(get(k.name).value());
  return out;
}

namespace {

// Shape-only compiles accept any model, but every tensor's element count (and the sums of
// them the memory analysis takes) must fit in int64: beyond this they would wrap silently.
Status check_tensor_sizes(const ResolvedConfig& r) {
  const ModelConfig& m = r.model;
  const double B = static_cast<double>(r.global_batch_size), T = static_cast<double>(r.max_target_length);
  const double V = static_cast<double>(m.vocab_size), E = static_cast<double>(m.emb_dim),
               H = static_cast<double>(m.num_query_heads), D = static_cast<double>(m.head_dim),
               M = static_cast<double>(m.mlp_dim), L = static_cast<double>(m.num_decoder_layers);
  const std::pair<const char*, double> tensors[] = {
      {"all parameters", V * E * 2 + L * (2 * E + 4 * E * H * D + 3 * E * M)},
      {"the logits (global batch x max_target_length x vocab_size)", B * T * V},
      {"an MLP activation (global batch x max_target_length x base_mlp_dim)", B * T * M},
      {"an attention activation (global batch x max_target_length x heads x head_dim)", B * T * H * D},
  };
  for (const auto& [what, n] : tensors)
    if (n > kMaxElements)
      return invalid_argument("config: {} would have {:.3g} elements, more than the {:.3g} this "
                              "engine can index (vocab_size {}, base_emb_dim {}, heads {}, head_dim "
                              "{}, base_mlp_dim {}, layers {}, global batch {}, max_target_length {})",
                              what, n, kMaxElements, m.vocab_size, m.emb_dim, m.num_query_heads,
                              m.head_dim, m.mlp_dim, m.num_decoder_layers, r.global_batch_size,
                              r.max_target_length);
  return ok_status();
}

}  // namespace

// MaxText's pipeline knobs (types.py): layers per stage and repeats (circular when R > 1),
// microbatches (default S, 2S with delay), forwarding delay and the fsdp gather options.
namespace {

// R and layers per stage from num_layers_per_pipeline_stage / num_pipeline_repeats (either
// may be -1: derived; -1 for both: one repeat) over the L pipelined layers, named `what`
// (num_decoder_layers, or pipeline_parallel_layers when it is set). Errors name both numbers.
Status resolve_pipeline_repeats(const Config& c, int64_t S, int64_t L, const char* what,
                                ModelConfig& m) {
  int64_t lps = c.get_int("num_layers_per_pipeline_stage");
  int64_t R = c.get_int("num_pipeline_repeats");
  if (R != -1 && (R < 1 || L % (R * S) != 0))
    return invalid_argument("config: num_pipeline_repeats {} x {} pipeline stages does not divide "
                            "{} {}",
                            R, S, what, L);
  if (lps != -1 && (lps < 1 || L % (lps * S) != 0))
    return invalid_argument("config: num_layers_per_pipeline_stage {} x {} stages does not "
                            "divide {} {}",
                            lps, S, what, L);
  if (lps == -1) lps = L / (S * (R == -1 ? 1 : R));
  const int64_t derived = L / (lps * S);
  if (R != -1 && R != derived)
    return invalid_argument("config: num_pipeline_repeats {} disagrees with {} {} / "
                            "(num_layers_per_pipeline_stage {} x {} stages) = {} repeats",
                            R, what, L, lps, S, derived);
  m.pipeline_repeats = derived;
  return ok_status();
}

// The product of the fsdp and fsdp_transpose axes the config asks for (-1 fills the devices).
int64_t config_fsdp_size(const Config& c, int64_t num_devices) {
  int64_t others = 1;
  for (const ConfigKey& k : kKeys)
    if (k.name.starts_with("ici_") && k.name.ends_with("_parallelism") &&
        k.name != "ici_fsdp_parallelism" && c.get_int(k.name) > 0)
      others *= c.get_int(k.name);
  const int64_t fsdp = c.get_int("ici_fsdp_parallelism");
  const int64_t f = fsdp == -1 ? std::max<int64_t>(num_devices / others, 1) : fsdp;
  return f * std::max<int64_t>(c.get_int("ici_fsdp_transpose_parallelism"), 1);
}

Status resolve_pipeline_fsdp_gather(const Config& c, ResolvedConfig& r) {
  const bool once = c.get_bool("pipeline_fsdp_ag_once");
  const bool per_repeat = c.get_bool("pipeline_fsdp_ag_per_repeat");
  if (once && per_repeat)
    return invalid_argument("config: pipeline_fsdp_ag_once and pipeline_fsdp_ag_per_repeat are "
                            "exclusive (gather once per step or once per repeat)");
  if (once || per_repeat) {
    const int64_t fsdp = config_fsdp_size(c, r.num_devices);
    if (fsdp <= 1)
      return invalid_argument("config: {}=true gathers the stage weights over fsdp, but "
                              "ici_fsdp_parallelism {} x ici_fsdp_transpose_parallelism {} = {} "
                              "device (no fsdp sharding to gather)",
                              once ? "pipeline_fsdp_ag_once" : "pipeline_fsdp_ag_per_repeat",
                              c.get_int("ici_fsdp_parallelism"),
                              c.get_int("ici_fsdp_transpose_parallelism"), fsdp);
  }
  r.model.pipeline_fsdp_ag_once = once;
  r.model.pipeline_fsdp_ag_per_repeat = per_repeat;
  return ok_status();
}

}  // namespace

Status resolve_pipeline(const Config& c, ResolvedConfig& r) {
  const int64_t stages = c.get_int("ici_pipeline_parallelism");
  const int64_t L = r.model.num_decoder_layers;
  if (stages < 1)
    return invalid_argument("config: ici_pipeline_parallelism must be >= 1, got {}", stages);
  if (stages == 1) return ok_status();
  // MaxText's pipeline_parallel_layers checks (configs/pyconfig_deprecated.py; types.py keeps
  // the divisibility ones): -1 = all, else 0 < P <= L; R follows from P.
  const int64_t P = c.get_int("pipeline_parallel_layers");
  if (P != -1 && P <= 0)
    return invalid_argument("config: pipeline_parallel_layers must be a positive number of layers "
                            "<= num_decoder_layers {} (or -1: all), got {}",
                            L, P);
  if (P > L)
    return invalid_argument("config: pipeline_parallel_layers {} is more than the {} decoder "
                            "layers (num_decoder_layers): only a subset can be pipelined",
                            P, L);
  const int64_t pipelined = P == -1 ? L : P;
  const char* what = P == -1 ? "num_decoder_layers" : "pipeline_parallel_layers";
  if (pipelined % stages != 0)
    return invalid_argument("config: {} {} is not divisible by the {} pipeline "
                            "stages (ici_pipeline_parallelism)",
                            what, pipelined, stages);
  ENG_RETURN_IF_ERROR(resolve_pipeline_repeats(c, stages, pipelined, what, r.model));
  r.model.pipeline_parallel_layers = P;
  const int64_t delay = c.get_bool("pipeline_delay_activation_forwarding") ? 2 : 1;
  int64_t M = c.get_int("num_pipeline_microbatches");
  if (M == -1) M = stages * delay;
  if (M < 1) return invalid_argument("config: num_pipeline_microbatches must be >= 1, got {}", M);
  if (r.global_batch_size % M != 0)
    return invalid_argument("config: num_pipeline_microbatches {} does not divide the global "
                            "batch {}",
                            M, r.global_batch_size);
  if (M % stages != 0)
    return invalid_argument("config: num_pipeline_microbatches {} is not divisible by the {} "
                            "pipeline stages",
                            M, stages);
  if (delay == 2 && M < 2 * stages)
    return invalid_argument("config: pipeline_delay_activation_forwarding needs "
                            "num_pipeline_microbatches >= 2 x {} stages, got {}",
                            stages, M);
  // The schedule the engine traces unrolled (pipeline.h), within its size limit (limits.h).
  const int64_t R = r.model.pipeline_repeats;
  if (Result<PipelineSchedule> sched =
          PipelineSchedule::make({stages, M, R, delay, pipelined / (stages * R)});
      !sched.ok())
    return invalid_argument("config: {}", sched.status().message());
  ENG_RETURN_IF_ERROR(resolve_pipeline_fsdp_gather(c, r));
  r.model.pipeline_stages = stages;
  r.model.pipeline_microbatches = M;
  r.model.pipeline_delay = delay;
  return ok_status();
}

namespace {

// optax.adamw and MaxText's warmup + cosine schedule.
Status resolve_optimizer(const Config& c, ResolvedConfig& r) {
  r.learning_rate = c.get_float("learning_rate");
  r.warmup_steps_fraction = c.get_float("warmup_steps_fraction");
  r.learning_rate_final_fraction = c.get_float("learning_rate_final_fraction");
  if (r.learning_rate < 0)
    return invalid_argument("config: learning_rate must be >= 0, got {:g}", r.learning_rate);
  if (r.warmup_steps_fraction < 0 || r.warmup_steps_fraction > 1)
    return invalid_argument("config: warmup_steps_fraction must be in [0, 1], got {:g}",
                            r.warmup_steps_fraction);
  int64_t schedule_steps = c.get_int("learning_rate_schedule_steps");
  if (schedule_steps == -1) schedule_steps = r.steps;
  if (schedule_steps < 0)
    return invalid_argument("config: learning_rate_schedule_steps must be >= 0 or -1, got {}",
                            schedule_steps);
  r.warmup_steps =
      static_cast<int64_t>(static_cast<double>(schedule_steps) * r.warmup_steps_fraction);
  r.cos_steps = schedule_steps - r.warmup_steps;
  r.adam_b1 = c.get_float("adam_b1");
  r.adam_b2 = c.get_float("adam_b2");
  r.adam_eps = c.get_float("adam_eps");
  r.adam_weight_decay = c.get_float("adam_weight_decay");
  r.gradient_clipping_threshold = c.get_float("gradient_clipping_threshold");
  for (auto [key, v] : {std::pair{"adam_b1", r.adam_b1}, std::pair{"adam_b2", r.adam_b2}})
    if (v < 0 || v >= 1) return invalid_argument("config: {} must be in [0, 1), got {:g}", key, v);
  // Negative values here have no meaning (a negative eps divides by zero; a negative
  // threshold would flip the clipped gradient), so they are errors rather than surprises.
  for (auto [key, v] :
       {std::pair{"adam_eps", r.adam_eps}, std::pair{"adam_weight_decay", r.adam_weight_decay},
        std::pair{"gradient_clipping_threshold", r.gradient_clipping_threshold},
        std::pair{"learning_rate_final_fraction", r.learning_rate_final_fraction}})
    if (v < 0) return invalid_argument("config: {} must be >= 0, got {:g}", key, v);

  return ok_status();
}

// The dataset keys (dataset="text:PATH" sets both).
Status resolve_data(const Config& c, ResolvedConfig& r) {
  r.dataset_type = c.get_string("dataset_type");
  r.dataset_path = c.get_string("dataset_path");
  if (r.dataset_type != "synthetic" && r.dataset_type != "text" && r.dataset_type != "tokens")
    return invalid_argument("config: dataset_type must be synthetic, text or tokens, got '{}'",
                            r.dataset_type);
  if (r.dataset_type != "synthetic" && r.dataset_path.empty())
    return invalid_argument("config: dataset_type={} needs dataset_path", r.dataset_type);
  if (r.dataset_type == "synthetic" && !r.dataset_path.empty())
    return invalid_argument(
        "config: dataset_path '{}' is set but dataset_type is synthetic, which "
        "reads no file (use dataset=\"text:PATH\" or \"tokens:PATH\")",
        r.dataset_path);
  // MaxText's packing: documents of a text file packed into rows (engine/train/data.h); the
  // attention then masks across the rows' segments. A .npy token stream has no boundaries.
  const bool packing = c.get_bool("packing");
  if (r.dataset_type == "tokens" && packing && c.has_override("packing"))
    return invalid_argument(
        "config: packing=true needs document boundaries, but the tokens file '{}' is one stream "
        "of token ids with none; set packing=false (the default for tokens files reads it as a "
        "stream)",
        r.dataset_path);
  r.packing = packing && r.dataset_type == "text";
  r.model.attention_segment_ids = r.packing;
  return ok_status();
}

}  // namespace

// dtype, weight_dtype, grad_dtype: the float types the kernels run (docs/precision.md).
static Result<DType> config_float_dtype(const Config& c, const char* key) {
  const std::string v = c.get_string(key);
  Result<DType> d = parse_dtype(v);
  if (!d.ok()) {
    if (v == "float16" || v == "fp16" || v == "f16" || v == "float64" || v == "fp8")
      return unimplemented("config: {}={} is not supported: the CPU kernels run float32 and "
                           "bfloat16 only", key, v);
    return invalid_argument("config: {}={} is not a dtype: expected float32 or bfloat16", key, v);
  }
  if (*d == DType::kI32)
    return invalid_argument("config: {}={} is not a float dtype: expected float32 or bfloat16",
                            key, v);
  return *d;
}

// The MoE keys into the model (engine/model/moe_config.h); ModelConfig::validate checks them.
static void resolve_moe(const Config& c, MoeConfig& moe) {
  moe.num_experts = c.get_int("num_experts");
  moe.num_experts_per_tok = c.get_int("num_experts_per_tok");
  moe.moe_mlp_dim = c.get_int("base_moe_mlp_dim");
  moe.capacity_factor = c.get_float("capacity_factor");
  moe.sparse_matmul = c.get_bool("sparse_matmul");
  moe.ragged_buffer_factor = c.get_float("ragged_buffer_factor");
  moe.megablox = c.get_bool("megablox");
  moe.load_balance_loss_weight = c.get_float("load_balance_loss_weight");
  moe.shared_experts = c.get_int("shared_experts");
  moe.first_num_dense_layers = c.get_int("first_num_dense_layers");
  moe.routed_score_func = c.get_string("routed_score_func");
  moe.routed_bias = c.get_bool("routed_bias");
  moe.routed_bias_update_rate = c.get_float("routed_bias_update_rate");
  moe.routed_scaling_factor = c.get_float("routed_scaling_factor");
  moe.norm_topk_prob = c.get_bool("norm_topk_prob");
  moe.shard_exp_on_fsdp = c.get_bool("shard_exp_on_fsdp");
  moe.moe_dispatch_no_expert_sharding = c.get_bool("moe_dispatch_no_expert_sharding");
}

Result<ResolvedConfig> resolve_config(const Config& c, int64_t num_devices) {
  ResolvedConfig r;
  r.num_devices = num_devices;
  ENG_ASSIGN_OR_RETURN(ModelConfig preset, model_preset(c.get_string("model_name")));
  r.model = preset;
  r.model.vocab_size = c.get_int("vocab_size");
  r.model.emb_dim = c.get_int("base_emb_dim");
  r.model.num_query_heads = c.get_int("base_num_query_heads");
  r.model.num_kv_heads = c.get_int("base_num_kv_heads");
  r.model.head_dim = c.get_int("head_dim");
  r.model.mlp_dim = c.get_int("base_mlp_dim");
  r.model.num_decoder_layers = c.get_int("base_num_decoder_layers");
  r.model.normalization_layer_epsilon = c.get_float("normalization_layer_epsilon");
  r.model.use_qk_norm = c.get_bool("use_qk_norm");
  r.model.rope_min_timescale = c.get_float("rope_min_timescale");
  r.model.rope_max_timescale = c.get_float("rope_max_timescale");
  r.model.rope_type = c.get_string("rope_type");
  r.model.rope_use_scale = c.get_bool("rope_use_scale");
  r.model.use_iota_embed = c.get_bool("use_iota_embed");
  r.model.scan_layers = c.get_bool("scan_layers");
  r.model.param_scan_axis = c.get_int("param_scan_axis");
  r.model.iota_embed_max_bytes = c.get_int("iota_embed_max_bytes");
  r.model.num_vocab_tiling = c.get_int("num_vocab_tiling");
  resolve_moe(c, r.model.moe);
  r.model.attention_type = c.get_string("attention_type");
  r.model.mla.q_lora_rank = c.get_int("q_lora_rank");
  r.model.mla.kv_lora_rank = c.get_int("kv_lora_rank");
  r.model.mla.qk_nope_head_dim = c.get_int("qk_nope_head_dim");
  r.model.mla.qk_rope_head_dim = c.get_int("qk_rope_head_dim");
  r.model.mla.v_head_dim = c.get_int("v_head_dim");
  r.model.mla.mscale = c.get_float("mscale");
  r.model.mla.rope_factor = c.get_float("rope_factor");
  r.model.mla.max_position_embeddings = c.get_int("max_position_embeddings");
  r.model.mla.original_max_position_embeddings = c.get_int("original_max_position_embeddings");
  r.model.mla.rope_interleave = c.get_bool("rope_interleave");
  r.model.mla.beta_fast = c.get_float("beta_fast");
  r.model.mla.beta_slow = c.get_float("beta_slow");
  r.model.mla.rope_truncate = c.get_bool("rope_truncate");
  if (const std::string block = c.get_string("decoder_block"); !block.empty())
    r.model.decoder_block = block;
  if (r.model.iota_embed_max_bytes < 0)
    return invalid_argument("config: iota_embed_max_bytes must be >= 0, got {}",
                            r.model.iota_embed_max_bytes);
  ENG_RETURN_IF_ERROR(r.model.validate());

  ENG_ASSIGN_OR_RETURN(r.model.dtype, config_float_dtype(c, "dtype"));
  ENG_ASSIGN_OR_RETURN(r.model.weight_dtype, config_float_dtype(c, "weight_dtype"));
  ENG_ASSIGN_OR_RETURN(r.grad_dtype, config_float_dtype(c, "grad_dtype"));
  if (c.get_string("opt_type") != "adamw")
    return unimplemented("config: opt_type={} is not supported yet (only adamw)",
                         c.get_string("opt_type"));

  const double pdbs = c.get_float("per_device_batch_size");
  if (!(pdbs > 0)) return invalid_argument("config: per_device_batch_size must be positive, got {:g}", pdbs);
  const int64_t wanted_devices = c.get_int("num_devices");
  if (wanted_devices != -1 && wanted_devices != num_devices)
    return invalid_argument("config: num_devices={} but the mesh has {} devices", wanted_devices,
                            num_devices);
  r.per_device_batch_size = static_cast<int64_t>(pdbs);
  ENG_ASSIGN_OR_RETURN(r.global_batch_size, global_batch_size(pdbs, num_devices));
  r.max_target_length = c.get_int("max_target_length");
  if (r.max_target_length < 1)
    return invalid_argument("config: max_target_length must be positive, got {}", r.max_target_length);
  r.steps = c.get_int("steps");
  if (r.steps < 0) return invalid_argument("config: steps must be >= 0, got {}", r.steps);

  ENG_RETURN_IF_ERROR(resolve_optimizer(c, r));
  ENG_RETURN_IF_ERROR(resolve_data(c, r));
  r.init_weights_seed = static_cast<uint64_t>(c.get_int("init_weights_seed"));
  r.data_shuffle_seed = static_cast<uint64_t>(c.get_int("data_shuffle_seed"));
  r.run_name = c.get_string("run_name");
  if (!c.get_bool("remove_size_one_mesh_axis_from_type"))
    return unimplemented(
        "config: remove_size_one_mesh_axis_from_type=false is not supported: the partitioner's "
        "shardings never carry size-1 mesh axes (docs/memory.md)");
  ENG_RETURN_IF_ERROR(check_tensor_sizes(r));
  ENG_RETURN_IF_ERROR(resolve_pipeline(c, r));
  if (r.model.moe.enabled()) {
    // The expert axis: ici_expert_parallelism x dcn_expert_parallelism (over slices).
    const int64_t ici = c.get_int("ici_expert_parallelism");
    const int64_t dcn = std::max<int64_t>(c.get_int("dcn_expert_parallelism"), 1);
    const int64_t ep = ici * dcn;
    const std::string size =
        dcn == 1 ? fmt::format("ici_expert_parallelism {}", ici)
                 : fmt::format("ici_expert_parallelism {} x dcn_expert_parallelism {} = {}", ici,
                               dcn, ep);
    if (ep > 1 && r.model.moe.num_experts % ep != 0)
      return invalid_argument("config: {} does not divide num_experts {} (each device of an "
                              "`expert` group holds num_experts / {} experts)",
                              size, r.model.moe.num_experts, ep);
    if (r.model.pipeline_stages > 1)
      return unimplemented("config: num_experts={} with ici_pipeline_parallelism={} is not "
                           "supported yet (MoE layers in a pipeline stage)",
                           r.model.moe.num_experts, r.model.pipeline_stages);
  }
  if (r.model.num_vocab_tiling < 1 || r.max_target_length % r.model.num_vocab_tiling != 0)
    return invalid_argument("config: num_vocab_tiling {} must be >= 1 and divide "
                            "max_target_length {} (the loss head's tiles split each row's tokens)",
                            r.model.num_vocab_tiling, r.max_target_length);
  if (r.model.gpt3() && r.model.num_vocab_tiling > 1)
    return unimplemented("config: num_vocab_tiling={} with model {}'s logits_via_embedding is not "
                         "supported yet (the tiled loss head reads a logits_dense kernel)",
                         r.model.num_vocab_tiling, r.model.name);
  if (r.model.gpt3() && r.model.moe.enabled())
    return unimplemented("config: model {} (decoder_block gpt3) with num_experts={} is not "
                         "supported yet (MoE layers are llama2-style decoder layers here)",
                         r.model.name, r.model.moe.num_experts);
  if (r.model.gpt3() && r.model.pipeline_stages > 1)
    return unimplemented("config: model {} (decoder_block gpt3) has no pipeline here; set "
                         "ici_pipeline_parallelism=1",
                         r.model.name);
  if (r.model.trainable_position_size > 0 &&
      r.max_target_length > r.model.trainable_position_size)
    return invalid_argument("config: max_target_length {} exceeds model {}'s "
                            "trainable_position_size {} (its learned position table)",
                            r.max_target_length, r.model.name, r.model.trainable_position_size);
  // The default (MaxText's true) leaves a pipeline its own (stages, layers_per_stage, ...)
  // stacking; asking for scan_layers=true with stages explicitly is refused.
  // pipeline_parallel_layers < L: the layers after the pipeline are scanned, as MaxText
  // requires ("Currently we only support scan_layers=True when pipelining a subset of
  // layers"); scan_layers=true is then what runs, scan_layers=false is refused.
  const bool outside = r.model.pipeline_stages > 1 &&
                       r.model.pipelined_layers() < r.model.num_decoder_layers;
  if (outside && !r.model.scan_layers)
    return invalid_argument("config: pipeline_parallel_layers {} < num_decoder_layers {} runs the "
                            "other layers scanned (MaxText supports only scan_layers=true there), "
                            "but scan_layers=false",
                            r.model.pipelined_layers(), r.model.num_decoder_layers);
  if (r.model.pipeline_stages > 1 && (outside || !c.has_override("scan_layers")))
    r.model.scan_layers = false;
  if (r.model.scan_layers && r.model.pipeline_stages > 1)
    return unimplemented("config: scan_layers=true with ici_pipeline_parallelism={} is not "
                         "supported yet (the pipeline stacks its own (stages, layers_per_stage, "
                         "...) weights); set scan_layers=false or ici_pipeline_parallelism=1",
                         r.model.pipeline_stages);
  r.remat_policy = c.get_string("remat_policy");
  r.remat_save_names = c.get_string("remat_save_names");
  r.remat_offload_names = c.get_string("remat_offload_names");
  ENG_RETURN_IF_ERROR(
      remat_policy(r.remat_policy, r.remat_save_names, r.remat_offload_names).status());
  return r;
}

// ---- batch and devices --------------------------------------------------------------------

Result<int64_t> global_batch_size(double pdbs, int64_t num_devices) {
  const double n = static_cast<double>(num_devices);
  if (!(pdbs > 0))
    return invalid_argument("config: per_device_batch_size must be positive, got {:g} ({} devices "
                            "x {:g} = a global batch of {:g} sequences)",
                            pdbs, num_devices, pdbs, n * pdbs);
  const double global = n * pdbs;
  if (global > kMaxElements)
    return invalid_argument("config: global batch {} x {:g} is too large (limit {:.3g} sequences)",
                            num_devices, pdbs, kMaxElements);
  // 0.29 x 100 is 28.999999999999996 in double arithmetic: a product within a relative 1e-9 of
  // a whole number is that number (MaxText's int() would make it 28).
  const double whole = std::round(global);
  if (whole >= 1 && std::fabs(global - whole) <= 1e-9 * whole) return static_cast<int64_t>(whole);
  const double below = std::floor(global), above = std::ceil(global);
  const std::string nearest =
      below >= 1 ? fmt::format("{} (global batch {:g}) or {} (global batch {:g})", below / n,
                               below, above / n, above)
                 : fmt::format("{} (global batch 1)", 1 / n);  // shortest exact form
  return invalid_argument(
      "config: per_device_batch_size {:g} on {} devices gives a global batch of {} x {:g} = {:g} "
      "sequences, {} (MaxText's int() would silently make it {}); use a per_device_batch_size "
      "whose product with {} is a whole number >= 1, e.g. {}",
      pdbs, num_devices, num_devices, pdbs, global,
      below >= 1 ? "not a whole number" : "less than one", static_cast<int64_t>(below),
      num_devices, nearest);
}

Result<std::optional<int64_t>> config_num_devices(const Config& c) {
  const int64_t wanted = c.get_int("num_devices");
  if (wanted != -1 && wanted < 1)
    return invalid_argument("config: num_devices must be >= 1 or -1, got {}", wanted);
  bool any = wanted != -1;
  int64_t product = 1;
  for (const ConfigKey& k : kKeys) {
    if (!k.name.starts_with("ici_") || !k.name.ends_with("_parallelism")) continue;
    any = any || c.has_override(k.name);
    const int64_t size = c.get_int(k.name);
    if (size == -1) continue;
    if (size < 1)
      return invalid_argument("config: {} must be >= 1 or -1 (fill), got {}", k.name, size);
    if (__builtin_mul_overflow(product, size, &product))
      return invalid_argument("config: the product of the ici_* sizes overflows at {}={}", k.name,
                              size);
  }
  if (!any) return std::optional<int64_t>();
  return std::optional<int64_t>(wanted != -1 ? wanted : product);
}

// ---- MaxText's key=value override strings -------------------------------------------------

namespace {

// Reads one token starting at text[i] (not whitespace) into *token (as written) and *out
// (quotes removed); returns the index after it.
Result<size_t> read_override_token(std::string_view text, size_t i, std::string* token,
                                   std::string* out) {
  const size_t begin = i;
  while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) {
    const char q = text[i];
    if (q != '\'' && q != '"') {
      out->push_back(text[i++]);
      continue;
    }
    size_t j = i + 1;
    for (; j < text.size() && text[j] != q; ++j) {
      if (q == '"' && text[j] == '\\' && j + 1 < text.size() &&
          (text[j + 1] == '"' || text[j + 1] == '\\'))
        ++j;  // \" and \\ inside double quotes
      out->push_back(text[j]);
    }
    if (j == text.size())
      return invalid_argument("config: unterminated {} quote in '{}'",
                              q == '"' ? "double" : "single", text.substr(begin));
    i = j + 1;
  }
  *token = std::string(text.substr(begin, i - begin));
  return i;
}

}  // namespace

Result<std::vector<ConfigOverride>> split_config_overrides(std::string_view text) {
  std::vector<ConfigOverride> out;
  size_t i = 0;
  while (true) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i == text.size()) return out;
    std::string token, unquoted;
    ENG_ASSIGN_OR_RETURN(i, read_override_token(text, i, &token, &unquoted));
    // Split at the first '=' after quote removal, as pyconfig sees what a POSIX shell passes it
    // (run_name='a b' and 'run_name=a b' are the same argument).
    const size_t eq = unquoted.find('=');
    if (eq == std::string::npos)
      return invalid_argument("config: '{}' is not key=value (MaxText's override syntax, e.g. "
                              "steps=10)",
                              token);
    const std::string key = unquoted.substr(0, eq);
    if (key.empty())
      return invalid_argument("config: '{}' has no key before '=' (expected key=value)", token);
    out.push_back({key, unquoted.substr(eq + 1), token});
  }
}

Result<ConfigValue> parse_config_value(std::string_view key, std::string_view text) {
  if (key == "model" || key == "dataset") return ConfigValue{std::string(text)};
  const ConfigKey* k = find_key(key);
  if (k == nullptr) return invalid_argument("config: unknown key '{}'", key);
  const std::string s(text);
  const char* first = s.data() + (s.starts_with('+') && s.size() > 1 && s[1] != '-' ? 1 : 0);
  const char* last = s.data() + s.size();
  switch (k->default_value.index()) {
    case 0: {  // pyconfig's string_to_bool: s.lower() == "true" / "false"
      std::string lower = s;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (lower == "true" || lower == "false") return ConfigValue{lower == "true"};
      return invalid_argument("config: {} expects a boolean (true or false), got '{}'", key, s);
    }
    case 1: {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(first, last, v);
      if (ec == std::errc::result_out_of_range)
        return invalid_argument("config: {} expects an integer, '{}' does not fit in 64 bits", key,
                                s);
      if (ec != std::errc() || end != last || first == last)
        return invalid_argument("config: {} expects an integer, got '{}'", key, s);
      return ConfigValue{v};
    }
    case 2: {
      double v = 0;
      auto [end, ec] = std::from_chars(first, last, v);
      if (ec != std::errc() || end != last || first == last)
        return invalid_argument("config: {} expects a number, got '{}'", key, s);
      return ConfigValue{v};
    }
    default: return ConfigValue{s};
  }
}

// ---- the warmup warning -------------------------------------------------------------------

std::string warmup_warning(const ResolvedConfig& r, int64_t steps_run, int64_t last_step,
                           double last_lr) {
  if (steps_run < 1 || last_step >= r.warmup_steps) return "";
  return fmt::format(
      "warning: ran {} step{} (to step {}) of a {}-step learning-rate schedule: the learning "
      "rate is still warming up (lr {:.3g} at step {}; it reaches learning_rate {:g} at step "
      "{}). Set steps (or learning_rate_schedule_steps) to the length of the run you mean.",
      steps_run, steps_run == 1 ? "" : "s", last_step, r.warmup_steps + r.cos_steps, last_lr,
      last_step, r.learning_rate, r.warmup_steps);
}

std::string past_steps_note(const ResolvedConfig& r, int64_t first_step, int64_t steps,
                            bool asked) {
  if (!asked)
    return first_step < r.steps ? std::string() : fmt::format(
        "Trainer:train: nothing to train: the trainer is at step {}, the config's steps = {} "
        "are done (t:train{{steps = N}} trains N steps more, past the config)",
        first_step, r.steps);
  const int64_t last = first_step + steps - 1;
  if (steps < 1 || last < r.steps) return "";
  const int64_t first_past = std::max(first_step, r.steps);
  std::string note = fmt::format(
      "Trainer:train: step{} {} {} past the config's steps = {}", first_past == last ? "" : "s",
      first_past == last ? fmt::format("{}", last) : fmt::format("{}-{}", first_past, last),
      first_past == last ? "is" : "are", r.steps);
  const int64_t schedule_end = r.warmup_steps + r.cos_steps;
  if (r.cos_steps > 0 && last >= schedule_end)
    note += fmt::format(
        "; the learning-rate schedule ends at step {} (learning_rate_schedule_steps), from there "
        "the learning rate is 0 and steps leave the weights as they are",
        schedule_end);
  return note;
}

}  // namespace eng
