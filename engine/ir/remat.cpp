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

  bool saved(const ValueInfo& v) const {
    if (policy_.save_all || v.remat_scope < 0) return true;
    return !v.checkpoint_name.empty() &&
           std::find(policy_.save_names.begin(), policy_.save_names.end(), v.checkpoint_name) !=
               policy_.save_names.end();
  }

  // Readable by the backward as computed in the forward: an argument, a backward value or
  // a saved forward value.
  bool available(ValueId v) const { return !is_forward(v) || saved(p_.value(v)); }

  // Re-emits v's producer (after its own unsaved inputs), once.
  void ensure(ValueId v) {
    if (recomputed_[v] != kNoValue) return;
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
  RematStats stats_;
};

}  // namespace

const std::vector<std::string>& checkpoint_names() {
  static const Names n = {"decoder_layer_input", "query_proj", "key_proj", "value_proj",
                          "context",             "out_proj",   "mlpwi_0",  "mlpwi_1",
                          "mlpwo"};
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

Result<RematPolicy> remat_policy(std::string_view name, std::string_view save_names) {
  RematPolicy pol;
  pol.name = std::string(name);
  if (name == "none") {
    pol.save_all = true;
    return pol;
  }
  for (const NamedPolicy& p : named_policies()) {
    if (name != p.name) continue;
    pol.save_names = p.save;
    return pol;
  }
  if (name != "save_only_these_names" && name != "custom")
    return invalid_argument("config: remat_policy '{}' is unknown; known policies: {}", name,
                            fmt::join(remat_policy_names(), ", "));
  size_t start = 0;
  const std::string list(save_names);
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string n = trim(std::string_view(list).substr(start, comma - start));
    start = comma + 1;
    if (n.empty()) continue;
    const Names& known = checkpoint_names();
    if (std::find(known.begin(), known.end(), n) == known.end())
      return invalid_argument("config: remat_save_names: unknown checkpoint name '{}'; known: {}",
                              n, fmt::join(known, ", "));
    pol.save_names.push_back(n);
  }
  return pol;
}

Program rematerialize(const Program& p, int forward_end, const RematPolicy& policy,
                      RematStats* stats) {
  ENG_CHECK(forward_end >= 0 && forward_end <= static_cast<int>(p.instrs().size()),
            "rematerialize: forward_end {} out of range [0, {}]", forward_end, p.instrs().size());
  return Rematerializer(p, forward_end, policy).run(stats);
}

}  // namespace eng
