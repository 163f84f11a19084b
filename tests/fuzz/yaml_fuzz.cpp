// tests/fuzz/yaml_fuzz.cpp: MaxText YAML configs (engine/train/maxtext_yaml.h) over arbitrary
// bytes: the document parser and scalar typing, then the whole of pyconfig's rules on the bytes
// as a config file (base_config chains, model files, the key table).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/train/maxtext_yaml.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// The input as a file of this process (load_maxtext_config reads files).
const std::string& scratch_path() {
  static const std::string path =
      std::string(P_tmpdir) + "/shardlab_yaml_fuzz_" + std::to_string(getpid()) + ".yml";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data), size);
  eng::Result<eng::YamlDocument> doc = eng::parse_yaml_document(raw, "fuzz.yml");
  if (doc.ok())
    for (const auto& [key, value] : doc->keys)
      if (value.to_string().empty()) std::abort();  // every value prints as something
  const eng::YamlValue scalar = eng::plain_scalar(raw);
  (void)scalar.to_string();
  if (size <= 4096) {
    const std::string& path = scratch_path();
    if (FILE* f = std::fopen(path.c_str(), "wb")) {
      std::fwrite(raw.data(), 1, raw.size(), f);
      std::fclose(f);
      eng::Result<eng::MaxTextConfig> m = eng::load_maxtext_config(path, {});
      if (m.ok()) (void)m->report();
      std::remove(path.c_str());
    }
  }
  return 0;
}

namespace eng::fuzz {

std::vector<std::string> seed_inputs() {
  return {
      "model_name: \"default\"\nsteps: 150_001\nper_device_batch_size: 12.0\n"
      "learning_rate: 3.e-5\nscan_layers: True\nmax_num_checkpoints_to_keep: None\n"
      "logical_axis_rules: [['norm', 'fsdp'], ['embed', ['fsdp', 'context']]]\n"
      "mlp_activations: [\"silu\", \"linear\"]\nici_fsdp_parallelism: -1\nnum_devices: 4\n",
      "base_config: \"fuzz.yml\"\nsteps: 1\n",
      "a:\n  b: [1, {c: .5}]\n  d: ~\n",
      "- not\n- a\n- mapping\n",
      "key: 'quoted: value'\nother: \"x\\ty\"\nnum: 0x1F\nexp: 1e-5\nflag: off\n",
      "remat_policy: custom\nquery_proj: device\nkey_proj: offload\n",
      "global_parameter_scale: 8\nnum_devices: 16\nnum_slices: 2\ndcn_data_parallelism: -1\n",
  };
}

}  // namespace eng::fuzz
