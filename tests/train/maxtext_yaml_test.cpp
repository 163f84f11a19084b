// tests/train/maxtext_yaml_test.cpp: MaxText's YAML configs: typing, base_config chains, command
// line overrides, model files, bad input, and MaxText's own base.yml and models/*.yml (read in
// place from ../shared/maxtext/configs beside the checkout; skipped with a message without it).
#include "engine/train/maxtext_yaml.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/train/train_step.h"

namespace eng {
namespace {

namespace fs = std::filesystem;
using Kind = YamlValue::Kind;

// MaxText's configs: $SHARDLAB_MAXTEXT_CONFIGS, else ../shared/maxtext/configs beside the
// checkout (where CI puts them). "" when absent.
std::string maxtext_configs() {
  std::string dir;
  if (const char* env = std::getenv("SHARDLAB_MAXTEXT_CONFIGS"); env && *env)
    dir = env;
  else if (const char* src = std::getenv("SHARDLAB_SOURCE_DIR"); src && *src)
    dir = std::string(src) + "/../shared/maxtext/configs";
  std::error_code ec;
  return !dir.empty() && fs::exists(dir + "/base.yml", ec) ? dir : "";
}

#define REQUIRE_MAXTEXT_CONFIGS(dir)                                                   \
  const std::string dir = maxtext_configs();                                           \
  if (dir.empty())                                                                     \
  GTEST_SKIP() << "MaxText's configs not found: ../shared/maxtext/configs beside the " \
                  "checkout (or $SHARDLAB_MAXTEXT_CONFIGS) is absent"

// A scratch directory of small YAML files, per process (ctest runs tests in parallel).
class Files {
 public:
  Files() {
    dir_ = fs::temp_directory_path() /
           fmt::format("shardlab_yaml_{}_{}", getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  ~Files() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  fs::path dir_;
};

std::vector<ConfigOverride> argv(std::initializer_list<std::string> tokens) {
  std::vector<ConfigOverride> out;
  for (const std::string& t : tokens) {
    const size_t eq = t.find('=');
    out.push_back({t.substr(0, eq), t.substr(eq + 1), t});
  }
  return out;
}

// A base file with the keys the tests touch, in MaxText's spelling and types.
constexpr const char* kBase = R"(
run_name: ""
model_name: "default"
override_model_config: false
steps: 150_001
per_device_batch_size: 12.0
learning_rate: 3.e-5
scan_layers: True
max_target_length: 2048
base_emb_dim: 2048
base_num_query_heads: 16
base_num_kv_heads: 16
base_mlp_dim: 7168
base_num_decoder_layers: 16
head_dim: 128
vocab_size: 32000
normalization_layer_epsilon: 1.e-05
mlp_activations: ["silu", "linear"]
num_experts: 1
decoder_block: "llama2"
ici_fsdp_parallelism: -1
ici_tensor_parallelism: 1
dcn_data_parallelism: -1
dataset_type: tfds
enable_dropout: true
hardware: 'tpu'
)";

TEST(YamlScalar, TypedAsMaxTextsLoader) {
  EXPECT_EQ(plain_scalar("10_000").kind, Kind::kInt);
  EXPECT_EQ(plain_scalar("10_000").i, 10000);
  EXPECT_EQ(plain_scalar("-3").i, -3);
  EXPECT_EQ(plain_scalar("0x10").i, 16);
  EXPECT_EQ(plain_scalar("1e-5").kind, Kind::kFloat);  // OmegaConf: a float without a dot
  EXPECT_DOUBLE_EQ(plain_scalar("1e-5").f, 1e-5);
  EXPECT_DOUBLE_EQ(plain_scalar("1.e-05").f, 1e-5);
  EXPECT_DOUBLE_EQ(plain_scalar(".5").f, 0.5);
  EXPECT_DOUBLE_EQ(plain_scalar("3.").f, 3.0);
  EXPECT_EQ(plain_scalar("True").kind, Kind::kBool);
  EXPECT_FALSE(plain_scalar("off").b);
  EXPECT_EQ(plain_scalar("~").kind, Kind::kNull);
  EXPECT_EQ(plain_scalar("None").kind, Kind::kString);  // YAML has no None
  EXPECT_EQ(plain_scalar("1e").kind, Kind::kString);
  EXPECT_EQ(plain_scalar("v5e-256").kind, Kind::kString);
  EXPECT_EQ(plain_scalar("99999999999999999999").kind, Kind::kString);
}

TEST(YamlDocument, ValuesAndErrors) {
  Result<YamlDocument> d =
      parse_yaml_document("a: [['norm', 'fsdp']]\nb: 'quoted 12'\nc: 12\n", "x.yml");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->keys[0].second.to_string(), "[['norm', 'fsdp']]");
  EXPECT_EQ(d->keys[1].second.kind, Kind::kString);
  EXPECT_EQ(d->keys[2].second.kind, Kind::kInt);
  EXPECT_TRUE(parse_yaml_document("", "empty.yml").ok());

  Result<YamlDocument> scalar = parse_yaml_document("just some text\n", "notes.txt");
  ASSERT_FALSE(scalar.ok());
  EXPECT_NE(scalar.status().message().find("notes.txt: not a MaxText config"), std::string::npos);
  Result<YamlDocument> bad = parse_yaml_document("a: [1, 2\nb: 3\n", "bad.yml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.yml: not valid YAML (line"), std::string::npos)
      << bad.status().message();
  Result<YamlDocument> twice = parse_yaml_document("a: 1\nb: 2\na: 3\n", "t.yml");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("line 3: key 'a' is given twice"), std::string::npos);
  EXPECT_FALSE(
      parse_yaml_document("a: " + std::string(100, '[') + std::string(100, ']'), "d").ok());
}

TEST(MaxTextConfig, BaseConfigChainChildOverParent) {
  Files f;
  f.write("configs/base.yml", kBase);
  const std::string mine = f.write("mine/run.yml",
                                   "base_config: \"../configs/base.yml\"\n"
                                   "per_device_batch_size: 2\nmax_target_length: 512\n"
                                   "enable_dropout: false\n");
  Result<MaxTextConfig> m = load_maxtext_config(mine, argv({"steps=10_000", "learning_rate=1e-5"}));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->config.get_string("model_name"), "default");
  EXPECT_DOUBLE_EQ(m->config.get_float("per_device_batch_size"), 2.0);
  EXPECT_EQ(m->config.get_int("max_target_length"), 512);
  EXPECT_EQ(m->config.get_int("steps"), 10000);
  EXPECT_DOUBLE_EQ(m->config.get_float("learning_rate"), 1e-5);
  // A change past the 6th digit is still a change (no text comparison in between).
  Result<MaxTextConfig> fine = load_maxtext_config(mine, argv({"learning_rate=3.0000001e-5"}));
  ASSERT_TRUE(fine.ok()) << fine.status().message();
  EXPECT_EQ(fine->config.get_float("learning_rate"), 3.0000001e-5);
  // base.yml's tfds is not applied (no tfds here); the note says so.
  EXPECT_EQ(m->config.get_string("dataset_type"), "synthetic");
  const std::string report = m->report();
  EXPECT_NE(report.find("dataset_type='tfds' kept as shardlab's synthetic"), std::string::npos)
      << report;
  // enable_dropout set by the child: named; the root's hardware: counted.
  EXPECT_NE(report.find("accepted, no effect on the plan: enable_dropout=False (" + mine + ")"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("other key(s) of"), std::string::npos);
  // Keys equal to shardlab's defaults are not overrides (has_override drives checks).
  EXPECT_FALSE(m->config.has_override("scan_layers"));
}

TEST(MaxTextConfig, CommandLineErrorsNameKeyAndFile) {
  Files f;
  const std::string base = f.write("base.yml", kBase);
  Result<MaxTextConfig> typo = load_maxtext_config(base, argv({"per_device_batch_sise=4"}));
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("did you mean 'per_device_batch_size'?"),
            std::string::npos)
      << typo.status().message();
  Result<MaxTextConfig> list = load_maxtext_config(base, argv({"per_device_batch_size=[1,2]"}));
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("per_device_batch_size=[1,2]: expected a number, got a "
                                         "list"),
            std::string::npos)
      << list.status().message();
  Result<MaxTextConfig> word = load_maxtext_config(base, argv({"steps=many"}));
  ASSERT_FALSE(word.ok());
  EXPECT_NE(word.status().message().find("steps=many: expected an integer"), std::string::npos);
  // shardlab's own keys are accepted on the command line too.
  Result<MaxTextConfig> own =
      load_maxtext_config(base, argv({"num_devices=8", "scan_layers=false"}));
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_EQ(own->num_devices, 8);
  EXPECT_EQ(own->config.get_int("ici_fsdp_parallelism"), 8);  // -1 filled; dcn_data fills to 1
  EXPECT_FALSE(own->config.get_bool("scan_layers"));
}

TEST(MaxTextConfig, BadFilesAreClearErrors) {
  Files f;
  const std::string a = f.write("a.yml", "base_config: b.yml\nsteps: 1\n");
  f.write("b.yml", "base_config: a.yml\nsteps: 2\n");
  Result<MaxTextConfig> cycle = load_maxtext_config(a, {});
  ASSERT_FALSE(cycle.ok());
  EXPECT_NE(cycle.status().message().find("base_config cycle: "), std::string::npos);
  EXPECT_NE(cycle.status().message().find("b.yml -> "), std::string::npos)
      << cycle.status().message();

  const std::string orphan = f.write("orphan.yml", "base_config: nowhere.yml\n");
  Result<MaxTextConfig> missing = load_maxtext_config(orphan, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nowhere.yml: no such file (the base_config of "),
            std::string::npos)
      << missing.status().message();

  const std::string binary = f.write("w.yml", std::string("\x7f"
                                                          "ELF\0\0\1",
                                                          7));
  Result<MaxTextConfig> bin = load_maxtext_config(binary, {});
  ASSERT_FALSE(bin.ok());
  EXPECT_NE(bin.status().message().find("not a YAML file"), std::string::npos);

  const std::string base = f.write("base.yml", kBase);
  const std::string listy = f.write("listy.yml", "base_config: base.yml\nsteps: [1, 2]\n");
  Result<MaxTextConfig> l = load_maxtext_config(listy, {});
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find(listy + ": steps expects an integer, got a list ([1, 2])"),
            std::string::npos)
      << l.status().message();
  (void)base;
}

TEST(MaxTextConfig, ModelFileOverridesAndConflicts) {
  Files f;
  const std::string base = f.write("base.yml", kBase);
  f.write("models/llama2-7b.yml",
          "base_emb_dim: 4096\nbase_num_query_heads: 32\nbase_num_kv_heads: 32\n"
          "base_mlp_dim: 11008\nbase_num_decoder_layers: 32\nlogits_dot_in_fp32: false\n");
  f.write("models/mixtral-8x7b.yml", "num_experts: 8\n");
  Result<MaxTextConfig> unknown_key = load_maxtext_config(base, argv({"model_name=llama2-7b"}));
  ASSERT_FALSE(unknown_key.ok());  // logits_dot_in_fp32 is not in this base
  EXPECT_NE(unknown_key.status().message().find("key 'logits_dot_in_fp32' does not exist"),
            std::string::npos);
  f.write("models/llama2-7b.yml",
          "base_emb_dim: 4096\nbase_num_query_heads: 32\nbase_num_kv_heads: 32\n"
          "base_mlp_dim: 11008\nbase_num_decoder_layers: 32\n");
  Result<MaxTextConfig> m = load_maxtext_config(base, argv({"model_name=llama2-7b"}));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->config.get_int("base_emb_dim"), 4096);
  Result<MaxTextConfig> both =
      load_maxtext_config(base, argv({"model_name=llama2-7b", "base_emb_dim=1024"}));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("override_model_config=true"), std::string::npos);
  Result<MaxTextConfig> wins = load_maxtext_config(
      base, argv({"model_name=llama2-7b", "base_emb_dim=1024", "override_model_config=true"}));
  ASSERT_TRUE(wins.ok()) << wins.status().message();
  EXPECT_EQ(wins->config.get_int("base_emb_dim"), 1024);
  // num_experts is a shardlab key (the MoE block): the model file's value takes effect.
  Result<MaxTextConfig> moe = load_maxtext_config(base, argv({"model_name=mixtral-8x7b"}));
  ASSERT_TRUE(moe.ok()) << moe.status().message();
  EXPECT_EQ(moe->config.get_int("num_experts"), 8);
  // A plan-changing feature shardlab lacks is still refused, naming key, value and feature.
  Result<MaxTextConfig> mla =
      load_maxtext_config(base, argv({"model_name=llama2-7b", "decoder_block=deepseek"}));
  ASSERT_FALSE(mla.ok());
  EXPECT_NE(mla.status().message().find("decoder_block='deepseek' is not supported yet"),
            std::string::npos)
      << mla.status().message();
  Result<MaxTextConfig> nofile = load_maxtext_config(base, argv({"model_name=llama9-1t"}));
  ASSERT_FALSE(nofile.ok());
  EXPECT_NE(nofile.status().message().find("no models/llama9-1t.yml"), std::string::npos);
}

TEST(MaxTextConfig, GlobalParameterScaleAndDcn) {
  Files f;
  const std::string base = f.write("base.yml", std::string(kBase) +
                                                   "global_parameter_scale: 8\nnum_slices: -1\n"
                                                   "dcn_fsdp_parallelism: 1\n");
  Result<MaxTextConfig> m = load_maxtext_config(
      base, argv({"num_devices=16", "num_slices=2", "ici_tensor_parallelism=2"}));
  ASSERT_TRUE(m.ok()) << m.status().message();
  // scale 8 = 2^3: one doubling each of heads/mlp, embed and layers.
  EXPECT_EQ(m->config.get_int("base_emb_dim"), 4096);
  EXPECT_EQ(m->config.get_int("base_num_query_heads"), 32);
  EXPECT_EQ(m->config.get_int("base_mlp_dim"), 14336);
  EXPECT_EQ(m->config.get_int("base_num_decoder_layers"), 32);
  // 16 devices in 2 slices: ici fsdp fills 8 / 2 = 4, dcn data fills 2.
  EXPECT_EQ(m->config.get_int("ici_fsdp_parallelism"), 4);
  EXPECT_EQ(m->config.get_int("ici_data_parallelism"), 2);
  EXPECT_EQ(m->config.get_int("ici_tensor_parallelism"), 2);
  Result<Mesh> mesh = mesh_from_config(m->config, m->num_devices);
  ASSERT_TRUE(mesh.ok()) << mesh.status().message();
  EXPECT_EQ(mesh->num_devices(), 16);
}

TEST(MaxTextConfig, RematCustomAndOffload) {
  Files f;
  const std::string base = f.write("base.yml", std::string(kBase) +
                                                   "remat_policy: 'full'\n"
                                                   "decoder_layer_input: 'device'\n"
                                                   "query_proj: 'remat'\nkey_proj: 'remat'\n"
                                                   "out_proj: 'remat'\ncustom_mesh_and_rule: ''\n");
  Result<MaxTextConfig> m = load_maxtext_config(
      base, argv({"remat_policy=custom", "query_proj=device", "key_proj=offload"}));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->config.get_string("remat_save_names"), "query_proj");
  EXPECT_EQ(m->config.get_string("remat_offload_names"), "key_proj");
  EXPECT_EQ(m->no_effect.size(), 0u) << m->report();  // the fates are consumed, not ignored
  // The recipes' layer input offloaded; its 'remat' is 'device' here (a note).
  Result<MaxTextConfig> layer = load_maxtext_config(
      base, argv({"remat_policy=custom", "decoder_layer_input=offload", "query_proj=offload"}));
  ASSERT_TRUE(layer.ok()) << layer.status().message();
  EXPECT_EQ(layer->config.get_string("remat_offload_names"), "decoder_layer_input,query_proj");
  EXPECT_EQ(layer->config.get_string("remat_save_names"), "");
  Result<MaxTextConfig> remat_input = load_maxtext_config(
      base, argv({"remat_policy=custom", "decoder_layer_input=remat"}));
  ASSERT_TRUE(remat_input.ok()) << remat_input.status().message();
  EXPECT_NE(remat_input->report().find("decoder_layer_input='remat': planned as 'device'"),
            std::string::npos)
      << remat_input->report();
  Result<MaxTextConfig> off = load_maxtext_config(base, argv({"remat_policy=qkv_proj_offloaded"}));
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_EQ(off->config.get_string("remat_policy"), "qkv_proj_offloaded");  // a policy here
  Result<MaxTextConfig> bad =
      load_maxtext_config(base, argv({"remat_policy=custom", "out_proj=keep"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("out_proj='keep': expected 'remat', 'device' or 'offload'"),
            std::string::npos);
  Result<MaxTextConfig> rules = load_maxtext_config(base, argv({"custom_mesh_and_rule=pure-fsdp"}));
  ASSERT_FALSE(rules.ok());
  EXPECT_NE(rules.status().message().find("custom_mesh_and_rule='pure-fsdp' is not supported yet"),
            std::string::npos)
      << rules.status().message();
}

TEST(MaxTextConfigReal, BaseYmlAndEveryModelFile) {
  REQUIRE_MAXTEXT_CONFIGS(dir);
  Result<MaxTextConfig> base = load_maxtext_config(dir + "/base.yml", argv({"num_devices=4"}));
  ASSERT_TRUE(base.ok()) << base.status().message();
  EXPECT_EQ(base->config.get_string("model_name"), "default");
  EXPECT_GT(base->defaults_without_effect, 400);  // base.yml's ~700 keys, most not modelled
  Result<ResolvedConfig> r = resolve_config(base->config, base->num_devices);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.emb_dim, 2048);
  EXPECT_EQ(r->global_batch_size, 48);  // 4 devices x per_device_batch_size 12

  for (const auto& entry : fs::directory_iterator(dir + "/models")) {
    const std::string name = entry.path().stem().string();
    Result<MaxTextConfig> m =
        load_maxtext_config(dir + "/base.yml", argv({"model_name=" + name, "num_devices=8"}));
    // A model file whose preset exists loads (regression: mixtral's decoder_block "mixtral"
    // was refused as an unsupported decoder block).
    if (model_preset(name).ok()) {
      EXPECT_TRUE(m.ok()) << name << ": " << m.status().message();
    }
    if (m.ok()) {
      // Resolves, or names what is not modelled yet (gpt3-175b's opt_type adam_pax,
      // qwen3-235b-a22b's default dropless sparse dispatch).
      Result<ResolvedConfig> rm = resolve_config(m->config, 8);
      if (!rm.ok()) {
        const std::string msg(rm.status().message());
        EXPECT_EQ(rm.status().code(), Code::kUnimplemented) << name << ": " << msg;
        EXPECT_TRUE(msg.find("not supported yet") != std::string::npos ||
                    msg.find("not implemented yet") != std::string::npos)
            << name << ": " << msg;
      }
      continue;
    }
    // Not modelled yet: says so, naming the feature (or the model name).
    EXPECT_EQ(m.status().code(), Code::kUnimplemented) << name << ": " << m.status().message();
    EXPECT_NE(m.status().message().find("not supported yet"), std::string::npos)
        << name << ": " << m.status().message();
  }
  Result<MaxTextConfig> l70 =
      load_maxtext_config(dir + "/base.yml", argv({"model_name=llama2-70b", "num_devices=8"}));
  ASSERT_TRUE(l70.ok()) << l70.status().message();
  EXPECT_EQ(l70->config.get_int("base_num_kv_heads"), 8);
  EXPECT_EQ(l70->config.get_int("base_num_decoder_layers"), 80);
  EXPECT_EQ(l70->config.get_string("model_name"), "llama2-70b");
}

// models/mixtral-8x7b.yml (decoder_block "mixtral") with the dense dispatch resolves to the
// preset's model.
TEST(MaxTextConfigReal, MixtralYmlLoads) {
  REQUIRE_MAXTEXT_CONFIGS(dir);
  for (const char* name : {"mixtral-8x7b", "mixtral-8x22b"}) {
    Result<MaxTextConfig> m = load_maxtext_config(
        dir + "/base.yml", argv({std::string("model_name=") + name, "num_devices=8",
                                 "sparse_matmul=false", "capacity_factor=1.25",
                                 "per_device_batch_size=1", "max_target_length=1024"}));
    ASSERT_TRUE(m.ok()) << name << ": " << m.status().message();
    Result<ResolvedConfig> r = resolve_config(m->config, m->num_devices);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_EQ(r->model.num_params(), model_preset(name)->num_params()) << name;
    EXPECT_EQ(r->model.moe.num_experts, 8) << name;
  }
}

// models/deepseek3-671b.yml: decoder_block deepseek and attention_type mla are the preset's,
// the MLA and yarn keys are keys; with the dense dispatch it resolves to the preset's model
// (671.03B parameters).
TEST(MaxTextConfigReal, Deepseek3YmlLoads) {
  REQUIRE_MAXTEXT_CONFIGS(dir);
  Result<MaxTextConfig> m = load_maxtext_config(
      dir + "/base.yml", argv({"model_name=deepseek3-671b", "num_devices=8", "sparse_matmul=false",
                               "capacity_factor=1.25", "per_device_batch_size=1",
                               "max_target_length=1024"}));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->config.get_string("attention_type"), "mla");
  EXPECT_EQ(m->config.get_int("q_lora_rank"), 1536);
  EXPECT_EQ(m->config.get_int("kv_lora_rank"), 512);
  EXPECT_EQ(m->config.get_int("qk_rope_head_dim"), 64);
  EXPECT_EQ(m->config.get_float("beta_fast"), 32.0);
  Result<ResolvedConfig> r = resolve_config(m->config, m->num_devices);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.decoder_block, "deepseek");
  EXPECT_TRUE(r->model.is_mla());
  EXPECT_EQ(r->model.num_params(), model_preset("deepseek3-671b")->num_params());
  EXPECT_EQ(r->model.moe.first_num_dense_layers, 3);
  EXPECT_EQ(r->model.moe.routed_scaling_factor, 2.5);
  // The MLA keys on a model without MLA: an error naming them.
  Result<MaxTextConfig> l = load_maxtext_config(
      dir + "/base.yml", argv({"model_name=llama2-7b", "num_devices=8", "q_lora_rank=64"}));
  ASSERT_TRUE(l.ok()) << l.status().message();
  Result<ResolvedConfig> rl = resolve_config(l->config, 8);
  ASSERT_FALSE(rl.ok());
  EXPECT_NE(rl.status().message().find("q_lora_rank=64"), std::string::npos)
      << rl.status().message();
}

// models/qwen3-235b-a22b.yml: decoder_block qwen3_moe is the preset's own block, use_qk_norm a
// key; with MaxText's dense dispatch it resolves to the preset's model (235.09B parameters).
TEST(MaxTextConfigReal, Qwen3MoeYmlLoads) {
  REQUIRE_MAXTEXT_CONFIGS(dir);
  Result<MaxTextConfig> m = load_maxtext_config(
      dir + "/base.yml", argv({"model_name=qwen3-235b-a22b", "num_devices=8", "sparse_matmul=false",
                               "capacity_factor=1.25", "per_device_batch_size=1",
                               "max_target_length=1024"}));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(m->config.get_bool("use_qk_norm"));
  EXPECT_TRUE(m->config.get_bool("norm_topk_prob"));
  EXPECT_EQ(m->config.get_int("num_experts"), 128);
  EXPECT_EQ(m->config.get_float("normalization_layer_epsilon"), 1e-6);
  Result<ResolvedConfig> r = resolve_config(m->config, m->num_devices);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.decoder_block, "qwen3_moe");
  EXPECT_TRUE(r->model.use_qk_norm);
  EXPECT_EQ(r->model.num_params(), int64_t{235093634560});
  EXPECT_EQ(r->model.rope_max_timescale, 5000000.0);
  // The model file on its own: its name is the preset's (sl.config("models/qwen3-...yml")).
  Result<MaxTextConfig> own = load_maxtext_config(dir + "/models/qwen3-235b-a22b.yml", argv({}));
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_EQ(own->config.get_string("model_name"), "qwen3-235b-a22b");
  EXPECT_TRUE(own->config.get_bool("use_qk_norm"));
  EXPECT_EQ(own->config.get_int("base_num_decoder_layers"), 94);
  // use_qk_norm on a model whose preset lacks it is a plain key now, not "not supported".
  Result<MaxTextConfig> l = load_maxtext_config(
      dir + "/base.yml", argv({"model_name=llama2-7b", "num_devices=8", "use_qk_norm=true"}));
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_TRUE(l->config.get_bool("use_qk_norm"));
}

TEST(MaxTextConfigReal, UsersOwnFileOverBaseYml) {
  REQUIRE_MAXTEXT_CONFIGS(dir);
  Files f;
  const std::string mine =
      f.write("mine.yml", fmt::format("base_config: \"{}/base.yml\"\nmodel_name: llama2-7b\n"
                                      "per_device_batch_size: 1\nmax_target_length: 1024\n"
                                      "remat_policy: minimal\nici_tensor_parallelism: 2\n",
                                      fs::absolute(dir).string()));
  Result<MaxTextConfig> m = load_maxtext_config(mine, argv({"num_devices=8"}));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->config.get_int("base_emb_dim"), 4096);  // models/ found next to base.yml
  EXPECT_EQ(m->config.get_string("remat_policy"), "minimal");
  EXPECT_EQ(m->config.get_int("ici_fsdp_parallelism"), 4);
  EXPECT_EQ(m->config.get_int("ici_tensor_parallelism"), 2);
}

}  // namespace
}  // namespace eng
