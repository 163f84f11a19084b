// tests/train/config_test.cpp: key table, presets, overrides, validation and did-you-mean.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "engine/train/config.h"

namespace eng {
namespace {

TEST(ConfigTest, PresetThenOverrides) {
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("llama-small")).ok());
  EXPECT_EQ(c.get_int("base_emb_dim"), 512);
  EXPECT_EQ(c.get_int("max_target_length"), 512);
  ASSERT_TRUE(c.set("max_target_length", int64_t{128}).ok());
  EXPECT_EQ(c.get_int("max_target_length"), 128);
  EXPECT_DOUBLE_EQ(c.get_float("adam_b2"), 0.95);         // MaxText default
  EXPECT_DOUBLE_EQ(c.get_float("adam_weight_decay"), 0.1);
  EXPECT_DOUBLE_EQ(c.get_float("learning_rate"), 3e-5);
}

// logical_axis_rules is a typed value: set as rules, read back as the same rules (no text
// round trip); a string (MaxText's override form) is parsed on demand, with its error.
TEST(ConfigTest, LogicalAxisRulesAreATypedValue) {
  Config c;
  LogicalAxisRules rules({LogicalAxisRule{"embed", {"fsdp"}}, LogicalAxisRule{"mlp", {}}});
  c.set_logical_axis_rules(rules);
  Result<LogicalAxisRules> got = c.logical_axis_rules();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, rules);
  EXPECT_TRUE(c.has_override("logical_axis_rules"));
  EXPECT_EQ(c.get_string("logical_axis_rules"), rules.to_list_string());  // shown, not re-read
  ASSERT_TRUE(c.set("logical_axis_rules", std::string("[['embed', 'fsdp'")).ok());
  Result<LogicalAxisRules> bad = c.logical_axis_rules();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected ']'"), std::string::npos) << bad.status().message();
  EXPECT_TRUE(Config().logical_axis_rules()->rules().empty());  // default: no overrides
}

TEST(ConfigTest, UnknownKeySuggestsTheClosest) {
  Config c;
  Status s = c.set("learning_rat", 1e-3);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "config: unknown key 'learning_rat'; did you mean 'learning_rate'?");
  s = c.set("per_device_batch", 4.0);
  EXPECT_NE(s.message().find("did you mean 'per_device_batch_size'"), std::string::npos);
}

TEST(ConfigTest, WrongTypeNamesKeyAndBothTypes) {
  Config c;
  Status s = c.set("steps", std::string("ten"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "config: steps expects an integer, got a string (ten)");
  EXPECT_TRUE(c.set("learning_rate", int64_t{1}).ok());  // ints widen to floats
  EXPECT_FALSE(c.set("steps", 2.5).ok());
  EXPECT_TRUE(c.set("steps", 3.0).ok());
}

TEST(ConfigTest, DatasetShorthandAndModelAlias) {
  Config c;
  ASSERT_TRUE(c.set("dataset", std::string("text:/tmp/x.txt")).ok());
  EXPECT_EQ(c.get_string("dataset_type"), "text");
  EXPECT_EQ(c.get_string("dataset_path"), "/tmp/x.txt");
  EXPECT_FALSE(c.set("dataset", std::string("hf:foo")).ok());
  ASSERT_TRUE(c.set("model", std::string("llama2-7b")).ok());
  EXPECT_EQ(c.get_string("model_name"), "llama2-7b");
  Status s = c.set("model", std::string("gpt5"));
  EXPECT_NE(s.message().find("unknown model 'gpt5'"), std::string::npos);
}

TEST(ConfigTest, ResolveDerivesMaxTextValues) {
  Config c;
  ASSERT_TRUE(c.set("steps", int64_t{100}).ok());
  ResolvedConfig r = resolve_config(c, 4).value();
  EXPECT_EQ(r.global_batch_size, 32);  // 4 devices x 8 (llama-tiny preset)
  EXPECT_EQ(r.warmup_steps, 10);
  EXPECT_EQ(r.cos_steps, 90);
  ASSERT_TRUE(c.set("per_device_batch_size", -1.0).ok());
  Result<ResolvedConfig> bad = resolve_config(c, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "config: per_device_batch_size must be positive, got -1");
}

TEST(ConfigTest, ResolveRejectsModelErrors) {
  Config c;
  ASSERT_TRUE(c.set("base_num_query_heads", int64_t{-2}).ok());
  Result<ResolvedConfig> r = resolve_config(c, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_query_heads must be positive, got -2"), std::string::npos);
  Config d;
  ASSERT_TRUE(d.set("dataset_type", std::string("text")).ok());
  EXPECT_NE(resolve_config(d, 1).status().message().find("needs dataset_path"), std::string::npos);
}

TEST(ConfigTest, RejectsValuesThatWouldBeIgnoredOrMeaningless) {
  Config c;
  Status s = c.set("learning_rate", std::nan(""));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "config: learning_rate expects a finite number, got nan");
  EXPECT_FALSE(c.set("per_device_batch_size", HUGE_VAL).ok());
  auto err = [](const char* key, ConfigValue v) {
    Config d;
    EXPECT_TRUE(d.set(key, std::move(v)).ok()) << key;
    Result<ResolvedConfig> r = resolve_config(d, 1);
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_EQ(err("adam_eps", -1.0), "config: adam_eps must be >= 0, got -1");
  EXPECT_EQ(err("gradient_clipping_threshold", -0.5),
            "config: gradient_clipping_threshold must be >= 0, got -0.5");
  EXPECT_EQ(err("adam_weight_decay", -3.0), "config: adam_weight_decay must be >= 0, got -3");
  EXPECT_EQ(err("learning_rate_final_fraction", -3.0),
            "config: learning_rate_final_fraction must be >= 0, got -3");
  EXPECT_EQ(err("gradient_clipping_threshold", 0.0), "");  // 0 disables clipping
  // dataset_path is read only by text/tokens datasets.
  EXPECT_NE(err("dataset", std::string("synthetic:/tmp/x.txt")).find("dataset_path '/tmp/x.txt' is set but dataset_type is synthetic"),
            std::string::npos);
  // Sizes whose element counts would wrap int64 are errors naming the tensor and the dims.
  Config big;
  ASSERT_TRUE(big.set("vocab_size", int64_t{1} << 40).ok());
  ASSERT_TRUE(big.set("base_emb_dim", int64_t{1} << 40).ok());
  Result<ResolvedConfig> r = resolve_config(big, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("all parameters would have 2.42e+24 elements"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("vocab_size 1099511627776, base_emb_dim 1099511627776"),
            std::string::npos);
  Config wide;
  ASSERT_TRUE(wide.set("per_device_batch_size", 1e300).ok());
  EXPECT_NE(resolve_config(wide, 2).status().message().find("global batch 2 x 1e+300 is too large"),
            std::string::npos);
}

// Issue 16 item 4: steps=1e300 became INT64_MIN (an undefined double -> int64 cast).
TEST(ConfigTest, IntegersBeyond2To53AreRefused) {
  Config c;
  for (double v : {1e300, -1e300, 1e17, std::numeric_limits<double>::infinity()}) {
    Status s = c.set("steps", v);
    ASSERT_FALSE(s.ok()) << v;
    EXPECT_NE(s.message().find("config: steps expects an integer"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(c.set("steps", 9007199254740992.0).ok());
  EXPECT_EQ(c.get_int("steps"), int64_t{1} << 53);
}

// Issue 16 item 10: run_name="../../escaped" wrote outside base_output_directory.
TEST(ConfigTest, RunNameStaysUnderTheOutputDirectory) {
  Config c;
  for (const char* bad : {"../../escaped", "/tmp/abs", "a/../../b", ".."}) {
    Status s = c.set("run_name", std::string(bad));
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find(fmt::format("config: run_name '{}'", bad)), std::string::npos)
        << s.message();
  }
  EXPECT_TRUE(c.set("run_name", std::string("exp/1..2/a")).ok());
}

TEST(ConfigTest, FlattenHasEveryKey) {
  Config c;
  auto flat = c.flatten();
  EXPECT_EQ(flat.size(), config_keys().size());
  EXPECT_EQ(flat["model_name"], "llama-tiny");
}

}  // namespace
}  // namespace eng
