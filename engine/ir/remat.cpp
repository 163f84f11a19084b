// engine/ir/remat.cpp: the remat policies and the rematerialisation pass (remat.h).
//
// The pass rebuilds the program through a Builder (so every re-emitted op is shape-checked
// again): the forward as traced, then each backward instruction preceded by the
// recomputation of the unsaved forward values it reads. A recomputed value is emitted once,
// at its first backward use, and shared by later uses (they all belong to the same layer's
// backward in a layer-by-layer model).
#include "engine/ir/remat.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/base/check.h"
#include "engine/ir/builder.h"

namespace eng {

namespace {

using Names = std::vector<std::string>;

const Names kMinimal = {"query_proj", "key_proj", "value_proj", "out_proj",
                        "mlpwi_0",    "mlpwi_1",  "mlpwo"};

struct NamedPolicy {
  const char* name;
  Names save;
  Names offload = {};  // MaxText's *_offloaded policies: save_and_offload_only_these_names
};

const std::vector<NamedPolicy>& named_policies() {
  static const std::vector<NamedPolicy> p = {
      {"full", {}},
      {"minimal", kMinimal},
      {"minimal_with_context",
       {"query_proj", "key_proj", "value_proj", "context", "out_proj", "mlpwi_0", "mlpwi_1",
        "mlpwo"}},
      {"save_dot_with_context_except_mlp",
       {"query_proj", "key_proj", "value_proj", "context", "out_proj"}},
      {"save_dot_except_mlpwi", {"query_proj", "key_proj", "value_proj", "out_proj", "mlpwo"}},
      {"save_dot_except_mlp", {"query_proj", "key_proj", "value_proj", "out_proj"}},
      {"save_qkv_proj", {"query_proj", "key_proj", "value_proj"}},
      {"save_out_proj", {"out_proj"}},
      // layers/decoders.py: names_which_can_be_saved=[], names_which_can_be_offloaded=...
      // (MaxText's qkv_proj and mlpwi are fused forms this model never tags).
      {"qkv_proj_offloaded", {}, {"query_proj", "key_proj", "value_proj"}},
      {"minimal_offloaded", {}, kMinimal},
  };
  return p;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

class Rematerializer {
 public:
  Rematerializer(const Program& p, int forward_end, const RematPolicy& policy)
      : p_(p), forward_end_(forward_end), policy_(policy), b_(p.name()) {
    map_.assign(p.values().size(), kNoValue);
    recomputed_.assign(p.values().size(), kNoValue);
  }

  Program run(RematStats* stats) {
    for (const Argument& a : p_.args()) {
      const ValueInfo& v = p_.value(a.value);
      map_[a.value] = b_.argument(v.name, v.shape, v.dtype, v.logical, a.role);
      copy_info(map_[a.value], v);
    }
    const int n = static_cast<int>(p_.instrs().size());
    find_backward_reads();
    for (const Argument& a : p_.args()) offload_if_needed(a.value);
    for (int k = 0; k < n; ++k) {
      const Instr& in = p_.instrs()[k];
      std::vector<ValueId> inputs;
      for (ValueId u : in.inputs) {
        if (k >= forward_end_ && !available(u)) {
          ensure(u);
          inputs.push_back(recomputed_[u]);
        } else {
          inputs.push_back(map_[u]);
        }
      }
      std::vector<ValueId> outs = b_.emit(in.kind, std::move(inputs), remap(in.attrs));
      for (size_t o = 0; o < outs.size(); ++o) {
        map_[in.outputs[o]] = outs[o];
        copy_info(outs[o], p_.value(in.outputs[o]));
      }
      if (k < forward_end_)
        for (ValueId v : in.outputs) offload_if_needed(v);
    }
    for (const ProgramOutput& o : p_.outputs()) b_.output(map_[o.value], o.name, o.aliased_arg);
    if (stats) *stats = stats_;
    return std::move(b_).finish();
  }

 private:
  bool is_forward(ValueId v) const {
    const int32_t k = p_.value(v).producer;
    return k >= 0 && k < forward_end_;
  }

  static bool named(const Names& names, const ValueInfo& v) {
    return !v.checkpoint_name.empty() &&
           std::find(names.begin(), names.end(), v.checkpoint_name) != names.end();
  }

  bool saved(const ValueInfo& v) const {
    if (v.remat_scope == kAlwaysRecomputeScope) return false;
    if (policy_.save_all || v.remat_scope < 0) return true;
    return named(policy_.save_names, v);
  }

  // Offloaded: a forward value (or the layer input, an argument in a one-layer program) the
  // policy sends to host memory; the backward reads its copy moved back to the device.
  bool offloaded(ValueId v) const { return needed_on_host_[v] != 0; }

  bool offload_named(ValueId v) const {
    if (policy_.save_all) return false;
    return (is_forward(v) || p_.value(v).producer < 0) && named(policy_.offload_names, p_.value(v));
  }

  // Readable by the backward as computed in the forward: an argument, a backward value or
  // a saved forward value (not an offloaded one: the backward reads its moved-back copy).
  bool available(ValueId v) const {
    if (offloaded(v)) return false;
    return !is_forward(v) || saved(p_.value(v));
  }

  // The offload-named values the backward reads, directly or through the producer chains it
  // recomputes (jax offloads residuals only: a named value nobody reads back stays put).
  void find_backward_reads() {
    needed_on_host_.assign(p_.values().size(), 0);
    host_.assign(p_.values().size(), kNoValue);
    std::vector<char> seen(p_.values().size(), 0);
    std::vector<ValueId> stack;
    for (size_t k = static_cast<size_t>(forward_end_); k < p_.instrs().size(); ++k)
      for (ValueId u : p_.instrs()[k].inputs) stack.push_back(u);
    while (!stack.empty()) {
      const ValueId v = stack.back();
      stack.pop_back();
      if (seen[v]) continue;
      seen[v] = 1;
      if (offload_named(v)) {
        needed_on_host_[v] = 1;
        continue;
      }
      if (!is_forward(v) || saved(p_.value(v))) continue;
      for (ValueId u : p_.instrs()[p_.value(v).producer].inputs) stack.push_back(u);
    }
  }

  // Right after its producer: the value's copy to host memory (kMoveToHost, op.h).
  void offload_if_needed(ValueId v) {
    if (!offloaded(v)) return;
    host_[v] = b_.emit(OpKind::kMoveToHost, {map_[v]})[0];
    copy_info(host_[v], p_.value(v));
    ++stats_.offloaded_values;
    stats_.offloaded_bytes += p_.value(v).bytes();
  }

  // Re-emits v's producer (after its own unsaved inputs), once; an offloaded value is moved
  // back from host memory instead.
  void ensure(ValueId v) {
    if (recomputed_[v] != kNoValue) return;
    if (offloaded(v)) {
      recomputed_[v] = b_.emit(OpKind::kMoveToDevice, {host_[v]})[0];
      copy_info(recomputed_[v], p_.value(v));
      return;
    }
    const Instr& in = p_.instrs()[p_.value(v).producer];
    std::vector<ValueId> inputs;
    for (ValueId u : in.inputs) {
      if (available(u)) {
        inputs.push_back(map_[u]);
      } else {
        ensure(u);
        inputs.push_back(recomputed_[u]);
      }
    }
    std::vector<ValueId> outs = b_.emit(in.kind, std::move(inputs), remap(in.attrs));
    ++stats_.recomputed_instrs;
    for (size_t o = 0; o < outs.size(); ++o) {
      recomputed_[in.outputs[o]] = outs[o];
      copy_info(outs[o], p_.value(in.outputs[o]));
      b_.mutable_info(outs[o]).recomputed = true;
      stats_.recomputed_bytes += p_.value(in.outputs[o]).bytes();
    }
  }

  OpAttrs remap(OpAttrs a) const {
    if (a.out_like >= 0) a.out_like = map_[a.out_like];
    return a;
  }

  // Everything but the producer (set by emit) and the inferred shape (checked equal).
  void copy_info(ValueId to, const ValueInfo& from) {
    ValueInfo& t = b_.mutable_info(to);
    ENG_CHECK(t.shape == from.shape && t.dtype == from.dtype,
              "rematerialize: re-emitted value {} differs from {}", t.type_string(),
              from.type_string());
    t.logical = from.logical;
    t.spec = from.spec;
    t.name = from.name;
    t.checkpoint_name = from.checkpoint_name;
    t.remat_scope = from.remat_scope;
    t.pipeline_iteration = from.pipeline_iteration;
    t.recomputed = from.recomputed;
  }

  const Program& p_;
  const int forward_end_;
  const RematPolicy& policy_;
  Builder b_;
  std::vector<ValueId> map_;         // old value -> its value in the new program
  std::vector<ValueId> recomputed_;  // old forward value -> its recomputation, if any
  std::vector<char> needed_on_host_;  // old value -> offloaded (read back by the backward)
  std::vector<ValueId> host_;        // old offloaded value -> its kMoveToHost copy
  RematStats stats_;
};

}  // namespace

const std::vector<std::string>& checkpoint_names() {
  static const Names n = {"decoder_layer_input", "query_proj", "key_proj", "value_proj",
                          "context",             "out_proj",   "mlpwi_0",  "mlpwi_1",
                          "mlpwo",
                          // multi-head latent attention's (engine/model/mla.h)
                          "query_wa_proj", "mla_q", "kv_wa_proj", "mla_kv"};
  return n;
}

const std::vector<std::string>& remat_policy_names() {
  static const Names n = [] {
    Names out = {"none"};
    for (const NamedPolicy& p : named_policies()) out.push_back(p.name);
    out.push_back("save_only_these_names");
    out.push_back("custom");
    return out;
  }();
  return n;
}

// A comma-separated list of checkpoint names (remat_save_names, remat_offload_names).
Result<Names> parse_names(std::string_view key, std::string_view text) {
  Names out;
  size_t start = 0;
  const std::string list(text);
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string n = trim(std::string_view(list).substr(start, comma - start));
    start = comma + 1;
    if (n.empty()) continue;
    const Names& known = checkpoint_names();
    if (std::find(known.begin(), known.end(), n) == known.end())
      return invalid_argument("config: {}: unknown checkpoint name '{}'; known: {}", key, n,
                              fmt::join(known, ", "));
    out.push_back(n);
  }
  return out;
}

Result<RematPolicy> remat_policy(std::string_view name, std::string_view save_names,
                                 std::string_view offload_names) {
  RematPolicy pol;
  pol.name = std::string(name);
  const bool takes_names = name == "save_only_these_names" || name == "custom";
  // Read by custom alone, as MaxText reads its per-tensor keys (a search may vary the policy
  // over a config that names custom's lists); the names are checked whatever the policy.
  ENG_ASSIGN_OR_RETURN(Names offload, parse_names("remat_offload_names", offload_names));
  if (name == "none") {
    pol.save_all = true;
    return pol;
  }
  for (const NamedPolicy& p : named_policies()) {
    if (name != p.name) continue;
    pol.save_names = p.save;
    pol.offload_names = p.offload;
    return pol;
  }
  if (!takes_names)
    return invalid_argument("config: remat_policy '{}' is unknown; known policies: {}", name,
                            fmt::join(remat_policy_names(), ", "));
  ENG_ASSIGN_OR_RETURN(pol.save_names, parse_names("remat_save_names", save_names));
  if (name != "custom") return pol;
  for (const std::string& n : offload)
    if (std::find(pol.save_names.begin(), pol.save_names.end(), n) != pol.save_names.end())
      return invalid_argument(
          "config: checkpoint name '{}' is both saved on the device (remat_save_names={}) and "
          "offloaded to host (remat_offload_names={}); name it in one",
          n, save_names, offload_names);
  pol.offload_names = std::move(offload);
  return pol;
}

Program rematerialize(const Program& p, int forward_end, const RematPolicy& policy,
                      RematStats* stats) {
  ENG_CHECK(forward_end >= 0 && forward_end <= static_cast<int>(p.instrs().size()),
            "rematerialize: forward_end {} out of range [0, {}]", forward_end, p.instrs().size());
  return Rematerializer(p, forward_end, policy).run(stats);
}

}  // namespace eng
