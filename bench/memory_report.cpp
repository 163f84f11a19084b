// bench/memory_report.cpp: the numbers of docs/memory.md. Compiles train_step for a config
// and mesh, prints MaxText's memory line, the largest temporaries (c:temps) and, unless
// --compile-only (shape-only: nothing is allocated), runs steps on the simulated devices
// and prints each device's measured peak next to the compiler's, and the median step time.
//
//   memory_report model_name=llama-tiny remat_policy=full --mesh fsdp=2 --steps 5
//   memory_report model_name=llama2-7b per_device_batch_size=1 max_target_length=2048
//       --mesh fsdp=8 --compile-only        (one command line)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/compile/executable.h"
#include "engine/runtime/runtime.h"
#include "engine/train/config.h"
#include "engine/train/data.h"
#include "engine/train/train_step.h"
#include "tests/common/train_state.h"

namespace {

using namespace eng;

Status set_key(Config& c, const std::string& kv) {
  const size_t eq = kv.find('=');
  if (eq == std::string::npos) return invalid_argument("expected key=value, got '{}'", kv);
  const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
  for (const ConfigKey& k : config_keys()) {
    if (k.name != key) continue;
    if (std::holds_alternative<bool>(k.default_value)) return c.set(key, value == "true");
    if (std::holds_alternative<int64_t>(k.default_value)) return c.set(key, int64_t{std::atoll(value.c_str())});
    if (std::holds_alternative<double>(k.default_value)) return c.set(key, std::atof(value.c_str()));
    return c.set(key, value);
  }
  return c.set(key, value);  // aliases ("model", "dataset")
}

Result<int> run(int argc, char** argv) {
  Config c;
  ENG_RETURN_IF_ERROR(c.set("model_name", "llama-tiny"));
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  int steps = 5, temps = 8;
  bool compile_only = false;
  CompileOptions opts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mesh" && i + 1 < argc) {
      const std::string m = argv[++i];  // "data=2,fsdp=2"
      size_t start = 0;
      while (start < m.size()) {
        size_t comma = m.find(',', start);
        if (comma == std::string::npos) comma = m.size();
        const std::string part = m.substr(start, comma - start);
        const size_t eq = part.find('=');
        axes.push_back(part.substr(0, eq));
        sizes.push_back(std::atoll(part.substr(eq + 1).c_str()));
        start = comma + 1;
      }
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--temps" && i + 1 < argc) {
      temps = std::atoi(argv[++i]);
    } else if (a == "--compile-only") {
      compile_only = true;
    } else {
      ENG_RETURN_IF_ERROR(set_key(c, a));
    }
  }
  Mesh mesh;
  if (!axes.empty()) {
    ENG_ASSIGN_OR_RETURN(mesh, Mesh::create(axes, sizes));
  }
  ENG_ASSIGN_OR_RETURN(ResolvedConfig cfg, resolve_config(c, mesh.num_devices()));
  ENG_ASSIGN_OR_RETURN(CompileOptions from_config, compile_options_from_config(c));
  opts = from_config;
  TrainStepLayout layout;
  double t0 = now_seconds();
  Program p = build_train_step(cfg, &layout);
  const double trace_s = now_seconds() - t0;
  t0 = now_seconds();
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, compile(p, mesh, opts));
  const double compile_s = now_seconds() - t0;
  const MemoryAnalysis& m = exe->memory();
  fmt::print("model {} remat_policy {} mesh {} B={} T={}: {} instructions (trace {:.2f} s, compile {:.2f} s)\n",
             cfg.model.name, cfg.remat_policy, mesh.to_string(), cfg.global_batch_size,
             cfg.max_target_length, exe->program().instrs().size(), trace_s, compile_s);
  fmt::print("{}\n", m.to_string());
  fmt::print("per device bytes: argument {} output {} alias {} temp {} peak {}\n", m.argument_bytes,
             m.output_bytes, m.alias_bytes, m.temp_bytes, m.peak_bytes());
  const Program& lp = exe->program();
  for (const TempInfo& t : exe->largest_temps(temps))
    fmt::print("  temp {:<28} {:>12} B  {:<22} live [{}, {}]\n", lp.value(t.value).type_string(),
               t.bytes, producer_description(lp, t.value), t.first_instr, t.last_instr);
  if (compile_only) return 0;

  Runtime rt(mesh);
  ENG_ASSIGN_OR_RETURN(std::vector<Array> state, testing::init_train_state(p, *exe, cfg, rt));
  ENG_RETURN_IF_ERROR(rt.prepare(*exe));
  ENG_ASSIGN_OR_RETURN(auto data, make_data_source(cfg));
  HostBatch batch;
  std::vector<Array> outputs;
  const std::vector<Array*> args = testing::arg_pointers(state);
  std::vector<double> times;
  float loss = 0;
  for (int step = 0; step < steps + 1; ++step) {  // step 0 is a warmup
    data->next(batch);
    ENG_RETURN_IF_ERROR(testing::write_batch(rt, batch, layout, state));
    t0 = now_seconds();
    ENG_RETURN_IF_ERROR(rt.execute(*exe, args, outputs));
    ENG_RETURN_IF_ERROR(rt.fetch(outputs[0], &loss));
    if (step > 0) times.push_back(now_seconds() - t0);
  }
  std::sort(times.begin(), times.end());
  std::string peaks;
  for (int d = 0; d < rt.num_devices(); ++d)
    peaks += fmt::format("{}{}", d ? " " : "", rt.device(d).peak_bytes());
  fmt::print("measured peak per device: {} (compiler: {}); last loss {:.6f}; median step {:.1f} ms\n",
             peaks, m.peak_bytes(), loss, times.empty() ? 0.0 : times[times.size() / 2] * 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Result<int> r = run(argc, argv);
  if (!r.ok()) {
    fmt::print(stderr, "memory_report: {}\n", r.status().message());
    return 1;
  }
  return *r;
}
