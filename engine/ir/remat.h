// engine/ir/remat.h: rematerialisation (jax.checkpoint / MaxText's remat_policy) as a
// program transformation.
//
// The model tags values while tracing (Builder::checkpoint_name, Builder::set_remat_scope):
// each decoder layer is a remat region, like MaxText's nn.remat around the layer, and its
// dot outputs carry MaxText's checkpoint names. Given the differentiated program, the pass
// keeps the forward as traced and, for every forward value a backward instruction reads that
// the policy does not save, re-emits its producer chain (back to saved values and
// arguments) right before its first backward use. The recomputed values then live only
// during their own layer's backward instead of across the whole backward pass.
//
//   RematPolicy pol = *remat_policy("full", "");
//   Program remat = rematerialize(program, forward_end, pol);  // forward_end: first backward instr
//
// What is always saved, whatever the policy: arguments, values outside every remat region
// (embedding, final norm, logits, loss) and each layer's output (the next layer's
// decoder_layer_input: the checkpointed region's boundary, as a scan carry is in MaxText).
// Policies (MaxText's names; inside the layers, what is saved besides the layer input):
//   none     everything (no recomputation: the traced program unchanged)
//   full     nothing (MaxText's default: policy=None around the layer)
//   minimal  the seven projection outputs query_proj, key_proj, value_proj, out_proj,
//            mlpwi_0, mlpwi_1, mlpwo (JAX's checkpoint_dots_with_no_batch_dims: the dots
//            with no batch dims; attention's QK^T/PV dots have batch dims and are recomputed)
//   minimal_with_context        minimal + context (the attention output)
//   save_dot_with_context_except_mlp  query_proj, key_proj, value_proj, context, out_proj
//   save_dot_except_mlpwi       query_proj, key_proj, value_proj, out_proj, mlpwo
//   save_dot_except_mlp         query_proj, key_proj, value_proj, out_proj
//   save_qkv_proj               query_proj, key_proj, value_proj
//   save_out_proj               out_proj
//   qkv_proj_offloaded          query_proj, key_proj, value_proj offloaded to host
//   minimal_offloaded           minimal's seven names offloaded to host
//   save_only_these_names, custom   the comma-separated names of remat_save_names; custom
//            also offloads remat_offload_names (MaxText's tensors_to_offload)
// Offloaded (jax.checkpoint_policies.save_and_offload_only_these_names, offload_dst
// "pinned_host"): the value is copied to host memory right after its producer
// (kMoveToHost) and back (kMoveToDevice) before its first backward reader, so its device
// buffer ends with its last forward reader, as a recomputed value's does, without the
// recomputation. decoder_layer_input may be offloaded too (MaxText's custom policy).
// Recomputation is the same ops on the same inputs, so every result is bitwise identical
// to the unrematerialised program's.
//
// Values traced under kAlwaysRecomputeScope are recomputed for the backward whatever the policy
// (none included): a custom VJP that saves only its inputs. MaxText's vocabulary tiling
// (num_vocab_tiling, engine/model/llama.cpp's loss head) is one: each tile's logits and
// cross-entropy are computed again, tile by tile, in the backward.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/base/status.h"
#include "engine/ir/program.h"

namespace eng {

// The checkpoint names the llama model tags (engine/model/llama.cpp), MaxText's names.
const std::vector<std::string>& checkpoint_names();

// The remat scope (ValueInfo::remat_scope) of values recomputed whatever the policy (above).
constexpr int32_t kAlwaysRecomputeScope = -2;
// The accepted remat_policy values, in the order of the table above.
const std::vector<std::string>& remat_policy_names();

struct RematPolicy {
  std::string name;                        // the remat_policy value
  bool save_all = false;                   // none
  std::vector<std::string> save_names;     // checkpoint names saved inside remat regions
  std::vector<std::string> offload_names;  // checkpoint names offloaded to host memory
};

// Parses remat_policy (and remat_save_names, comma-separated, for save_only_these_names and
// custom; remat_offload_names for custom alone: other policies ignore it, as MaxText's
// per-tensor keys). Unknown policies or names, and a name both saved and offloaded (custom),
// are errors naming them.
Result<RematPolicy> remat_policy(std::string_view name, std::string_view save_names,
                                 std::string_view offload_names = "");

struct RematStats {
  int recomputed_instrs = 0;   // instructions re-emitted for the backward pass
  int64_t recomputed_bytes = 0;  // bytes of the values they produce
  int offloaded_values = 0;    // values moved to host memory (kMoveToHost)
  int64_t offloaded_bytes = 0;
};

// The rematerialised program. forward_end: index of the first instruction that is not part
// of the forward pass (autodiff's output and what follows it); instructions before it are
// kept as they are. The result has the same arguments and outputs, in the same order.
Program rematerialize(const Program& p, int forward_end, const RematPolicy& policy,
                      RematStats* stats = nullptr);

}  // namespace eng
