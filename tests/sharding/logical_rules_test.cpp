// tests/sharding/logical_rules_test.cpp: MaxText's rules and flax's resolution, against the
// worked examples of MaxText's utils/sharding.py.
#include "engine/sharding/logical_rules.h"

#include <gtest/gtest.h>

#include "tests/common/mesh_helpers.h"

namespace eng {
namespace {

using eng::testing::contains;

// Shorthand as JAX writes it: P({{"x"}, {}}), P({{"x"}}, {"partial_axis"}).
PartitionSpec P(std::initializer_list<PartitionSpec::DimAxes> dims,
                std::vector<std::string> partial = {}) {
  return PartitionSpec(std::vector<PartitionSpec::DimAxes>(dims), std::move(partial));
}

LogicalAxisRules Rules(std::initializer_list<LogicalAxisRule> rules) {
  return LogicalAxisRules(std::vector<LogicalAxisRule>(rules));
}

using Axes = PartitionSpec::DimAxes;


// The 12-axis MaxText mesh with the given non-trivial sizes (others 1).
Mesh maxtext_mesh(std::vector<std::pair<std::string, int64_t>> ici, int64_t devices) {
  bool has_fsdp = false;
  for (const auto& [a, n] : ici) has_fsdp = has_fsdp || a == "fsdp";
  if (!has_fsdp) ici.push_back({"fsdp", 1});
  Result<Mesh> m = Mesh::from_maxtext(ici, devices);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

PartitionSpec resolve(const LogicalAxes& names, const Mesh& mesh) {
  Result<PartitionSpec> p = logical_to_mesh(names, mesh);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : PartitionSpec();
}

PartitionSpec resolve_raw(const LogicalAxes& names,
                          const LogicalAxisRules& rules = LogicalAxisRules::maxtext_default()) {
  Result<PartitionSpec> p = logical_to_mesh_axes(names, rules);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : PartitionSpec();
}

TEST(DefaultRules, VerbatimRows) {
  const LogicalAxisRules& r = LogicalAxisRules::maxtext_default();
  ASSERT_EQ(r.size(), 76);
  EXPECT_EQ(r[0].to_string(), "['circular_repeats', []]");
  EXPECT_EQ(r[1].to_string(),
            "['activation_embed_and_logits_batch', ['data', 'stage', 'fsdp', 'fsdp_transpose', "
            "'expert']]");
  EXPECT_EQ(r[5].to_string(), "['activation_vocab', 'tensor_sequence']");  // a bare string row
  EXPECT_EQ(r[37].to_string(), "['exp', 'expert']");
  EXPECT_EQ(r[47].to_string(),
            "['mlp', ['fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive']]");
  EXPECT_EQ(r[49].to_string(),
            "['embed', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']]");
  EXPECT_EQ(r[50].to_string(), "['embed', ['fsdp', 'context', 'context_usp_ulysses', 'expert']]");
  EXPECT_EQ(r[52].to_string(), "['layers', 'stage']");
  EXPECT_EQ(r[58].to_string(), "['mhc', []]");
  EXPECT_EQ(r[64].to_string(), "['cache_heads', ['autoregressive', 'tensor', 'tensor_sequence']]");
  EXPECT_EQ(r[73].to_string(), "['paged_kv_head_dim_size', []]");
  EXPECT_EQ(r[75].to_string(), "['exp_with_fsdp', 'fsdp']");
  EXPECT_EQ(r.find("activation_vocab").size(), 3u);
  EXPECT_EQ(r.find("embed").size(), 2u);
  EXPECT_TRUE(r.find("nonexistent").empty());
}

// MaxText's utils/sharding.py worked examples: mesh fsdp=4, tensor=2, the other 10 axes 1.
class WorkedExamples : public ::testing::Test {
 protected:
  Mesh mesh_ = maxtext_mesh({{"fsdp", 4}, {"tensor", 2}}, 8);
};

TEST_F(WorkedExamples, MlpWi) {
  PartitionSpec raw = resolve_raw({"embed", "mlp"});
  EXPECT_EQ(raw, P({{"fsdp", "context", "context_usp_ulysses", "expert"},
                    {"fsdp_transpose", "tensor", "tensor_sequence", "autoregressive"}}));
  EXPECT_EQ(resolve({"embed", "mlp"}, mesh_).to_string(), "P('fsdp', 'tensor')");
}

TEST_F(WorkedExamples, MlpWo) {
  EXPECT_EQ(resolve({"mlp", "embed"}, mesh_).to_string(), "P('tensor', 'fsdp')");
}

TEST_F(WorkedExamples, Query) {
  PartitionSpec raw = resolve_raw({"embed", "q_heads", "kv"});
  // embed gets rule #50 (nothing conflicts), q_heads #21, kv is [] -> None.
  EXPECT_EQ(raw, P({{"fsdp", "fsdp_transpose", "context", "context_usp_ulysses", "expert"},
                    {"tensor", "tensor_sequence", "autoregressive"},
                    {}}));
  EXPECT_EQ(resolve({"embed", "q_heads", "kv"}, mesh_).to_string(), "P('fsdp', 'tensor', None)");
}

TEST_F(WorkedExamples, Embedding) {
  EXPECT_EQ(resolve({"vocab", "embed_vocab"}, mesh_).to_string(), "P('tensor', 'fsdp')");
}

TEST_F(WorkedExamples, Norm) {
  EXPECT_EQ(resolve_raw({"norm"}), P({{"tensor"}}));
  EXPECT_EQ(resolve({"norm"}, mesh_).to_string(), "P('tensor')");
}

TEST_F(WorkedExamples, ScannedWi) {
  EXPECT_EQ(resolve_raw({"embed", "layers", "mlp"}).dim(1), (Axes{"stage"}));
  EXPECT_EQ(resolve({"embed", "layers", "mlp"}, mesh_).to_string(), "P('fsdp', None, 'tensor')");
}

TEST_F(WorkedExamples, Batch) {
  LogicalAxes batch = {"activation_embed_and_logits_batch", "activation_norm_length"};
  EXPECT_EQ(resolve(batch, mesh_).to_string(), "P('fsdp', None)");
  Mesh dp = maxtext_mesh({{"data", 2}, {"fsdp", 2}}, 4);
  EXPECT_EQ(resolve(batch, dp).to_string(), "P(('data', 'fsdp'), None)");
}

TEST_F(WorkedExamples, InputDataSharding) {
  Result<NamedSharding> s = get_input_data_sharding(mesh_);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->spec.to_string(), "P('fsdp', None)");
  EXPECT_EQ(s->mesh, mesh_);
  Mesh dp = maxtext_mesh({{"data", 2}, {"fsdp", 2}}, 4);
  Result<NamedSharding> t = get_input_data_sharding(dp);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->spec.to_string(), "P(('data', 'fsdp'), None)");
  EXPECT_TRUE(t->validate(Shape{16, 256}).ok());
}

TEST(Resolution, EmbedFallsBackWhenFsdpTransposeTaken) {
  // mlp (#48) takes fsdp_transpose first, so embed #50 conflicts as a whole and #51 applies.
  PartitionSpec raw = resolve_raw({"embed", "mlp"});
  EXPECT_EQ(raw.dim(0), (Axes{"fsdp", "context", "context_usp_ulysses", "expert"}));
  // Without mlp, #50 applies.
  EXPECT_EQ(resolve_raw({"embed"}).dim(0),
            (Axes{"fsdp", "fsdp_transpose", "context", "context_usp_ulysses", "expert"}));
}

TEST(Resolution, PartialConflictSkipsWholeRule) {
  LogicalAxisRules rules = Rules({{"a", {"x"}}, {"b", {"x", "y"}}, {"b", {"y"}}});
  // b's first rule shares x with a: it is skipped entirely (y is not taken alone from it).
  EXPECT_EQ(resolve_raw({"a", "b"}, rules), P({{"x"}, {"y"}}));
  EXPECT_EQ(resolve_raw({"b", "a"}, rules), P({{"y"}, {"x"}}));
  EXPECT_EQ(resolve_raw({"b"}, rules), P({{"x", "y"}}));
}

TEST(Resolution, RuleOrderNotDimOrderDecides) {
  // The walk is over rules, so an earlier rule wins an axis even for a later dim.
  LogicalAxisRules rules = Rules({{"late", {"x"}}, {"early", {"x"}}, {"early", {"z"}}});
  EXPECT_EQ(resolve_raw({"early", "late"}, rules), P({{"z"}, {"x"}}));
}

TEST(Resolution, EmptyRuleBlocksFallbacks) {
  LogicalAxisRules blocked = Rules({{"x", {}}, {"x", {"fsdp"}}});
  EXPECT_EQ(resolve_raw({"x"}, blocked), P({{}}));
  LogicalAxisRules open = Rules({{"x", {"fsdp"}}});
  EXPECT_EQ(resolve_raw({"x"}, open), P({{"fsdp"}}));
  // In the defaults: activation_kv_length is [] -> None; kv is [] -> None.
  EXPECT_EQ(resolve_raw({"activation_kv_length", "kv"}), P({{}, {}}));
}

// explain_logical_to_mesh (t:shardings()'s rules column): the rule that fired per dim, the
// rules of that name that did not, and why; its axes equal logical_to_mesh's spec.
TEST_F(WorkedExamples, ExplainNamesTheRuleThatFiredAndWhyOthersDidNot) {
  const std::vector<DimResolution> wo = explain_logical_to_mesh({"mlp", "embed"}, mesh_).value();
  ASSERT_EQ(wo.size(), 2u);
  EXPECT_EQ(wo[0].fired, 47);  // #48
  EXPECT_EQ(wo[0].axes, std::vector<std::string>{"tensor"});
  EXPECT_EQ(wo[1].fired, 50);  // #51: #50 wanted fsdp_transpose, which mlp holds
  EXPECT_EQ(wo[1].raw_axes,
            (std::vector<std::string>{"fsdp", "context", "context_usp_ulysses", "expert"}));
  ASSERT_EQ(wo[1].skipped.size(), 1u);
  EXPECT_EQ(wo[1].skipped[0].rule, 49);
  EXPECT_EQ(wo[1].skipped[0].reason,
            "mesh axis 'fsdp_transpose' is already used by dim 0 ('mlp', #48)");
  // A fallback after the firing rule: skipped as settled; an [] rule fires and blocks.
  const LogicalAxisRules r = Rules({{"x", {}}, {"x", {"fsdp"}}});
  const std::vector<DimResolution> x = explain_logical_to_mesh({"x"}, mesh_, r).value();
  EXPECT_EQ(x[0].fired, 0);
  ASSERT_EQ(x[0].skipped.size(), 1u);
  EXPECT_EQ(x[0].skipped[0].reason, "dim 0 is already settled by #1");
  // Unknown names and None: nothing fired.
  const std::vector<DimResolution> u =
      explain_logical_to_mesh({"no_such_axis", std::nullopt}, mesh_).value();
  EXPECT_EQ(u[0].fired, -1);
  EXPECT_FALSE(u[1].logical.has_value());
  // Agrees with logical_to_mesh on every weight and activation name tuple of the model.
  const std::vector<LogicalAxes> all = {
      {"embed", "mlp"}, {"embed", "q_heads", "kv"}, {"heads", "kv", "embed"},
      {"vocab", "embed_vocab"}, {"embed_vocab", "vocab"}, {"norm"}, {"embed", "layers", "mlp"},
      {"activation_batch", "activation_norm_length", "activation_embed"},
      {"activation_embed_and_logits_batch", "activation_length", "activation_vocab"}};
  for (const LogicalAxes& names : all) {
    const PartitionSpec spec = resolve(names, mesh_);
    const std::vector<DimResolution> e = explain_logical_to_mesh(names, mesh_).value();
    for (size_t i = 0; i < names.size(); ++i)
      EXPECT_EQ(e[i].axes, spec.dim_or_none(static_cast<int>(i))) << logical_axes_string(names);
  }
  EXPECT_FALSE(explain_logical_to_mesh({"embed", "embed"}, mesh_).ok());
}

TEST(Resolution, UnknownAndNonePassThrough) {
  EXPECT_EQ(resolve_raw({"no_such_axis", std::nullopt, "norm"}), P({{}, {}, {"tensor"}}));
  EXPECT_EQ(resolve_raw({}), PartitionSpec());
}

TEST(Resolution, RepeatedLogicalNameIsError) {
  Result<PartitionSpec> p = logical_to_mesh_axes({"embed", "mlp", "embed"});
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(contains(p.status().message(), "Dimensions ('embed',) occur more than once"))
      << p.status().message();
  EXPECT_TRUE(contains(p.status().message(), "('embed', 'mlp', 'embed')"));
  Result<PartitionSpec> two = logical_to_mesh_axes({"a", "b", "a", "b"});
  ASSERT_FALSE(two.ok());
  EXPECT_TRUE(contains(two.status().message(), "Dimensions ('a', 'b') occur"));
  // None may repeat.
  EXPECT_TRUE(logical_to_mesh_axes({std::nullopt, std::nullopt}).ok());
}

TEST(Merge, OverridesReplaceByNameAndAppend) {
  const LogicalAxisRules& base = LogicalAxisRules::maxtext_default();
  // llama2-7b.yml overrides ['norm', 'fsdp'].
  LogicalAxisRules m = base.merged(Rules({{"norm", {"fsdp"}, true}}));
  EXPECT_EQ(m.size(), 76);
  EXPECT_EQ(m[75].to_string(), "['norm', 'fsdp']");
  ASSERT_EQ(m.find("norm").size(), 1u);
  EXPECT_EQ(m[74].logical, "exp_with_fsdp");  // the rest keep their order
  EXPECT_EQ(m[51].logical, "layers");         // norm's old slot (#52) is gone

  // A new list with one embed rule removes both base embed rules.
  LogicalAxisRules e = base.merged(Rules({{"embed", {"tensor"}}, {"extra", {"data"}}}));
  EXPECT_EQ(e.size(), 76 - 2 + 2);
  ASSERT_EQ(e.find("embed").size(), 1u);
  EXPECT_EQ(e[e.size() - 2].logical, "embed");
  EXPECT_EQ(e[e.size() - 1].logical, "extra");

  LogicalAxisRules only = Rules({{"embed", {"tensor"}}});
  EXPECT_EQ(base.merged(only, /*replace_all=*/true), only);
  EXPECT_EQ(base.merged(LogicalAxisRules()), base);
  EXPECT_EQ(base.merged(LogicalAxisRules(), true), base);
  EXPECT_NE(base.hash(), m.hash());
}

TEST(Merge, OverrideChangesResolution) {
  Mesh mesh = maxtext_mesh({{"fsdp", 4}, {"tensor", 2}}, 8);
  LogicalAxisRules rules =
      LogicalAxisRules::maxtext_default().merged(Rules({{"norm", {"fsdp"}, true}}));
  Result<PartitionSpec> p = logical_to_mesh({"norm"}, mesh, rules);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->to_string(), "P('fsdp')");
}

TEST(RemoveSizeOne, Canonicalises) {
  Mesh mesh = maxtext_mesh({{"fsdp", 4}, {"tensor", 2}}, 8);
  PartitionSpec in = P({{"data", "fsdp"},
                        {"tensor"},
                        {"context"},
                        {"data", "context"},
                        {},
                        {"fsdp", "expert", "tensor"}},
                       {"tensor"});
  PartitionSpec out = remove_size_one_mesh_axis(in, mesh);
  EXPECT_EQ(out.to_string(),
            "P('fsdp', 'tensor', None, None, None, ('fsdp', 'tensor'), unreduced={'tensor'})");
  // Axes absent from the mesh count as size 1.
  Result<Mesh> small = Mesh::create({"data"}, {2});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(remove_size_one_mesh_axis(P({{"data", "fsdp"}, {"fsdp"}}), *small), P({{"data"}, {}}));
}

// MaxText PR #4208: a Linen state sharding (raw flax) keeps size-1 axes, the activation path
// drops them; the two NamedShardings differ until remove_size_one is applied to both.
TEST(SizeOneAsymmetry, KeepVersusDrop) {
  Result<Mesh> m =
      Mesh::create({"data", "fsdp", "expert", "context"}, {2, 2, 2, 1}, AxisType::kExplicit);
  ASSERT_TRUE(m.ok());
  LogicalAxisRules rules = Rules({{"activation_batch", {"data", "fsdp", "expert", "context"}}});
  LogicalAxes names = {"activation_batch", std::nullopt};
  Result<NamedSharding> kept = logical_to_sharding_keep_size_one(names, *m, rules);
  Result<NamedSharding> dropped = logical_to_sharding(names, *m, rules);
  ASSERT_TRUE(kept.ok() && dropped.ok());
  EXPECT_EQ(kept->spec.to_string(), "P(('data', 'fsdp', 'expert', 'context'), None)");
  EXPECT_EQ(dropped->spec.to_string(), "P(('data', 'fsdp', 'expert'), None)");
  EXPECT_NE(*kept, *dropped);
  EXPECT_EQ(remove_size_one_mesh_axis(kept->spec, *m), dropped->spec);
}

TEST(IndivisibleShapes, DropsAxesCumulatively) {
  Mesh mesh = maxtext_mesh({{"fsdp", 4}, {"tensor", 4}}, 16);
  // 6: neither fsdp=4 nor tensor=4 divides it.
  EXPECT_EQ(adjust_pspec_for_indivisible_shapes(P({{"fsdp", "tensor"}}), Shape{6}, mesh), P({{}}));
  // 8: fsdp kept (8 % 4), then fsdp*tensor = 16 does not divide 8 -> tensor dropped.
  EXPECT_EQ(adjust_pspec_for_indivisible_shapes(P({{"fsdp", "tensor"}}), Shape{8}, mesh),
            P({{"fsdp"}}));
  // 6: tensor=2 kept, then tensor*fsdp = 8 does not divide 6 -> fsdp dropped; 3 % 2 != 0.
  Mesh m2 = maxtext_mesh({{"fsdp", 4}, {"tensor", 2}}, 8);
  EXPECT_EQ(adjust_pspec_for_indivisible_shapes(P({{"tensor", "fsdp"}, {"fsdp"}, {"tensor"}}),
                                                Shape{6, 12, 3}, m2),
            P({{"tensor"}, {"fsdp"}, {}}));
  // Size-1 axes always divide; entries past the rank are dropped.
  EXPECT_EQ(adjust_pspec_for_indivisible_shapes(P({{"context"}, {"fsdp"}}), Shape{7}, m2),
            P({{"context"}}));
}

TEST(LogicalAxesPrint, PythonTuple) {
  EXPECT_EQ(logical_axes_string({"embed", std::nullopt, "mlp"}), "('embed', None, 'mlp')");
  EXPECT_EQ(logical_axes_string({"norm"}), "('norm',)");
}

}  // namespace
}  // namespace eng
