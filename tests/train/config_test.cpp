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

// Issue 15 item 9: per_device_batch_size 0.3 on 4 devices silently became a batch of 1
// (MaxText's int()) and failed later at compile; now a fractional or sub-one product is an error
// naming the value, the device count and the product, with the nearest whole-batch values.
TEST(ConfigTest, FractionalGlobalBatchIsAnError) {
  Config c;
  ASSERT_TRUE(c.set("per_device_batch_size", 0.3).ok());
  Result<ResolvedConfig> r = resolve_config(c, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "config: per_device_batch_size 0.3 on 4 devices gives a global batch of 4 x 0.3 = 1.2 "
            "sequences, not a whole number (MaxText's int() would silently make it 1); use a "
            "per_device_batch_size whose product with 4 is a whole number >= 1, e.g. 0.25 (global "
            "batch 1) or 0.5 (global batch 2)");
  Result<int64_t> small = global_batch_size(0.1, 4);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("= 0.4 sequences, less than one"), std::string::npos)
      << small.status().message();
  EXPECT_NE(small.status().message().find("e.g. 0.25 (global batch 1)"), std::string::npos);
  Result<int64_t> zero = global_batch_size(0, 4);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(), "config: per_device_batch_size must be positive, got 0 (4 "
                                     "devices x 0 = a global batch of 0 sequences)");
  EXPECT_FALSE(global_batch_size(-2, 4).ok());
  // Whole products are accepted, fractional per-device sizes included (MaxText's rule).
  EXPECT_EQ(global_batch_size(0.25, 4).value(), 1);
  EXPECT_EQ(global_batch_size(0.5, 4).value(), 2);
  EXPECT_EQ(global_batch_size(0.29, 100).value(), 29);  // 28.999999999999996 in doubles
  EXPECT_EQ(global_batch_size(8, 4).value(), 32);
  ASSERT_TRUE(c.set("per_device_batch_size", 0.25).ok());
  EXPECT_EQ(resolve_config(c, 4).value().global_batch_size, 1);
}

// Issue 15 item 12: sl.trainer(cfg) without a mesh builds it from the ici_* keys; the device
// count is num_devices when set, else the product of the sizes that are not -1.
TEST(ConfigTest, DeviceCountFromIciKeysOrNumDevices) {
  Config c;
  EXPECT_FALSE(config_num_devices(c).value().has_value());  // nothing asked: one device, no axes
  ASSERT_TRUE(c.set("ici_data_parallelism", int64_t{2}).ok());
  EXPECT_EQ(config_num_devices(c).value(), 2);  // fsdp stays -1 and fills to 1
  ASSERT_TRUE(c.set("ici_fsdp_parallelism", int64_t{2}).ok());
  EXPECT_EQ(config_num_devices(c).value(), 4);
  Config d;
  ASSERT_TRUE(d.set("num_devices", int64_t{8}).ok());
  EXPECT_EQ(config_num_devices(d).value(), 8);
  ASSERT_TRUE(d.set("ici_tensor_parallelism", int64_t{2}).ok());
  EXPECT_EQ(config_num_devices(d).value(), 8);  // fsdp -1 fills to 4
  Result<ResolvedConfig> wrong = resolve_config(d, 4);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "config: num_devices=8 but the mesh has 4 devices");
  EXPECT_TRUE(resolve_config(d, 8).ok());
  ASSERT_TRUE(d.set("num_devices", int64_t{0}).ok());
  EXPECT_EQ(config_num_devices(d).status().message(),
            "config: num_devices must be >= 1 or -1, got 0");
  Config e;
  ASSERT_TRUE(e.set("ici_tensor_parallelism", int64_t{0}).ok());
  EXPECT_EQ(config_num_devices(e).status().message(),
            "config: ici_tensor_parallelism must be >= 1 or -1 (fill), got 0");
}

// Issue 15 item 12: MaxText's key=value override strings, split and typed as pyconfig does.
TEST(ConfigTest, SplitsOverrideStrings) {
  auto split = [](std::string_view text) {
    Result<std::vector<ConfigOverride>> r = split_config_overrides(text);
    std::vector<std::string> out;
    if (!r.ok()) return std::vector<std::string>{"error: " + r.status().message()};
    for (const ConfigOverride& o : *r) out.push_back(o.key + "|" + o.value);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("model=llama-tiny steps=10 per_device_batch_size=1"),
            (V{"model|llama-tiny", "steps|10", "per_device_batch_size|1"}));
  EXPECT_EQ(split("  \t"), V{});
  EXPECT_EQ(split("run_name='my run' 'dataset=text:a b.txt'"),
            (V{"run_name|my run", "dataset|text:a b.txt"}));
  EXPECT_EQ(split(R"(run_name="a \"b\" \\ c" x==1)"), (V{R"(run_name|a "b" \ c)", "x|=1"}));
  EXPECT_EQ(split("logical_axis_rules=\"[['embed', ['fsdp']]]\""),
            (V{"logical_axis_rules|[['embed', ['fsdp']]]"}));
  EXPECT_EQ(split("steps=10 steps"),
            (V{"error: config: 'steps' is not key=value (MaxText's override syntax, e.g. steps=10)"}));
  EXPECT_EQ(split("=5"), (V{"error: config: '=5' has no key before '=' (expected key=value)"}));
  EXPECT_EQ(split("run_name='open steps=1"),
            (V{"error: config: unterminated single quote in 'run_name='open steps=1'"}));
}

TEST(ConfigTest, TypesOverrideValuesLikePyconfig) {
  auto parse = [](std::string_view key, std::string_view text) {
    Result<ConfigValue> r = parse_config_value(key, text);
    return r.ok() ? config_value_string(*r) + "/" + std::to_string(r->index())
                  : "error: " + r.status().message();
  };
  EXPECT_EQ(parse("steps", "10"), "10/1");
  EXPECT_EQ(parse("steps", "+3"), "3/1");
  EXPECT_EQ(parse("num_devices", "-1"), "-1/1");
  EXPECT_EQ(parse("steps", "1.5"), "error: config: steps expects an integer, got '1.5'");
  EXPECT_EQ(parse("steps", "1e3"), "error: config: steps expects an integer, got '1e3'");
  EXPECT_EQ(parse("steps", ""), "error: config: steps expects an integer, got ''");
  EXPECT_EQ(parse("steps", "99999999999999999999"),
            "error: config: steps expects an integer, '99999999999999999999' does not fit in 64 bits");
  EXPECT_EQ(parse("learning_rate", "3e-4"), "0.0003/2");
  EXPECT_EQ(parse("per_device_batch_size", "1"), "1/2");
  EXPECT_EQ(parse("learning_rate", "fast"), "error: config: learning_rate expects a number, got 'fast'");
  EXPECT_EQ(parse("use_iota_embed", "True"), "true/0");
  EXPECT_EQ(parse("use_iota_embed", "false"), "false/0");
  EXPECT_EQ(parse("use_iota_embed", "TRUE"), "true/0");
  EXPECT_EQ(parse("use_iota_embed", "1"),
            "error: config: use_iota_embed expects a boolean (true or false), got '1'");
  EXPECT_EQ(parse("run_name", "10"), "10/3");  // strings stay strings
  EXPECT_EQ(parse("model", "llama-tiny"), "llama-tiny/3");
  EXPECT_EQ(parse("stpes", "1"), "error: config: unknown key 'stpes'");
}

// Issue 15 item 9: steps=150001 (MaxText's default) with t:train{steps=3} trained at lr 4e-9
// without a word.
TEST(ConfigTest, WarnsWhileTheLearningRateIsWarmingUp) {
  ResolvedConfig r = resolve_config(Config(), 1).value();
  ASSERT_EQ(r.warmup_steps, 15000);
  EXPECT_EQ(warmup_warning(r, 3, 2, 4e-9),
            "warning: ran 3 steps (to step 2) of a 150001-step learning-rate schedule: the "
            "learning rate is still warming up (lr 4e-09 at step 2; it reaches learning_rate "
            "3e-05 at step 15000). Set steps (or learning_rate_schedule_steps) to the length of "
            "the run you mean.");
  EXPECT_EQ(warmup_warning(r, 1, 15000, 3e-5), "");  // the warmup is over
  EXPECT_EQ(warmup_warning(r, 0, 0, 0), "");         // nothing ran
  Config whole;
  ASSERT_TRUE(whole.set("steps", int64_t{20}).ok());
  ResolvedConfig w = resolve_config(whole, 1).value();
  EXPECT_EQ(warmup_warning(w, 20, 19, 1e-5), "");  // a run over its whole schedule
}

}  // namespace
}  // namespace eng
