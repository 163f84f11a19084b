// shell/train_compile.cpp: `shardlab train_compile <config.yml> key=value ...`: MaxText's
// train_compile.py (an ahead-of-time, shape-only compile of train_step for compile_topology x
// compile_topology_num_slices) on MaxText's own YAML, recorded in the metrics store.
#include "shell/train_compile.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "engine/ir/program.h"
#include "engine/store/metrics_store.h"
#include "engine/train/inspect.h"
#include "engine/train/maxtext_yaml.h"
#include "engine/train/plan.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer.h"

namespace shell {
namespace {

constexpr const char* kUsage =
    "usage: shardlab train_compile <config.yml> [key=value ...] [--shardings] [--db PATH]\n"
    "  MaxText's train_compile.py: compile train_step shape-only (nothing is allocated) for\n"
    "  compile_topology x compile_topology_num_slices (or num_devices=N), print MaxText's memory\n"
    "  lines and exit 1 when the peak per device exceeds the device's HBM. The config is\n"
    "  MaxText's YAML (base.yml, a file with base_config: \"base.yml\"); key=value overrides as\n"
    "  MaxText takes them. The plan is recorded as a run in the metrics store.\n"
    "  --shardings   also print the sharding table of every train_step argument\n"
    "  --db PATH     metrics store (default $SHARDLAB_DB or ./shardlab.db)\n";

struct Args {
  std::string config;
  std::vector<eng::ConfigOverride> overrides;
  bool shardings = false;
  bool help = false;
  std::string db;
};

eng::Result<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      a.help = true;
    } else if (s == "--shardings") {
      a.shardings = true;
    } else if (s == "--db") {
      if (i + 1 >= argc) return eng::invalid_argument("'--db' needs a path");
      a.db = argv[++i];
    } else if (s.starts_with("--db=")) {
      a.db = s.substr(5);
    } else if (s.starts_with("-")) {
      return eng::invalid_argument("unrecognized option '{}'", s);
    } else if (a.config.empty() && s.find('=') == std::string::npos) {
      a.config = s;
    } else {
      const size_t eq = s.find('=');
      if (eq == std::string::npos || eq == 0)
        return eng::invalid_argument(
            "'{}' is not key=value (MaxText's override syntax, e.g. "
            "per_device_batch_size=4)",
            s);
      a.overrides.push_back({s.substr(0, eq), s.substr(eq + 1), s});
    }
  }
  if (a.config.empty() && !a.help)
    return eng::invalid_argument("needs a config file (e.g. base.yml of MaxText's configs)");
  return a;
}

double gb(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

std::string mesh_line(const eng::Mesh& mesh) {
  std::vector<std::string> parts;
  for (int a = 0; a < mesh.num_axes(); ++a)
    if (mesh.axis_sizes()[a] > 1)
      parts.push_back(fmt::format("{}={}", mesh.axis_names()[a], mesh.axis_sizes()[a]));
  return parts.empty() ? std::string("one device") : fmt::format("{}", fmt::join(parts, " x "));
}

void print_temps(const eng::Executable& exe, int n) {
  const eng::Program& p = exe.program();
  std::vector<eng::TempInfo> temps = exe.largest_temps(n);
  if (temps.empty()) return;
  std::printf("Largest temporaries per device:\n");
  for (const eng::TempInfo& t : temps) {
    const eng::ValueInfo& v = p.value(t.value);
    std::string name = eng::value_name(t.value);
    if (!v.checkpoint_name.empty()) name += " (" + v.checkpoint_name + ")";
    std::printf("  %9.3f GB  %-28s %-28s %s\n", gb(t.bytes), name.c_str(), v.type_string().c_str(),
                eng::producer_description(p, t.value).c_str());
  }
}

// Everything after parsing; returns the exit status and prints errors itself.
int train_compile(const Args& a, const std::vector<std::string>& argv) {
  auto fail = [](const eng::Status& s) {
    std::fprintf(stderr, "shardlab train_compile: %s\n", s.message().c_str());
    return EXIT_FAILURE;
  };
  const auto start = std::chrono::steady_clock::now();
  eng::Result<eng::MaxTextConfig> m = eng::load_maxtext_config(a.config, a.overrides);
  if (!m.ok()) return fail(m.status());
  if (m->num_devices < 1)
    return fail(eng::invalid_argument(
        "no device count: set compile_topology (with compile_topology_num_slices) or num_devices=N "
        "(or every ici_*_parallelism)"));

  std::unique_ptr<eng::MetricsStore> store;
  std::string db = a.db;
  if (db.empty()) {
    const char* env = std::getenv("SHARDLAB_DB");
    db = env && *env ? env : "shardlab.db";
  }
  eng::Result<std::unique_ptr<eng::MetricsStore>> opened = eng::MetricsStore::open(db);
  if (!opened.ok()) return fail(opened.status());
  store = std::move(opened).value();

  // With compile_topology: sl.plan's path (the mesh laid on the hardware, the predicted step);
  // else a shape-only trainer on the ici_* mesh of num_devices.
  std::unique_ptr<eng::Trainer> trainer;
  std::shared_ptr<const eng::Executable> exe;
  std::optional<eng::Prediction> predicted;
  if (m->topology) {
    eng::PlanOptions options;
    options.store = store.get();
    options.argv = argv;
    options.script = a.config;
    options.record_run = true;
    eng::Result<eng::Plan> plan = eng::plan_for_topology(m->config, options);
    if (!plan.ok()) return fail(plan.status());
    trainer = std::move(plan->trainer);
    exe = plan->exe;
    predicted = plan->predicted;
  } else {
    eng::Result<eng::Mesh> mesh = eng::mesh_from_config(m->config, m->num_devices);
    if (!mesh.ok()) return fail(mesh.status());
    eng::TrainerOptions options;
    options.shape_only = true;
    options.record_shape_only = true;
    options.store = store.get();
    options.argv = argv;
    options.script = a.config;
    eng::Result<std::unique_ptr<eng::Trainer>> t = eng::Trainer::create(m->config, *mesh, options);
    if (!t.ok()) return fail(t.status());
    trainer = std::move(t).value();
    eng::Result<std::shared_ptr<const eng::Executable>> e = trainer->compile();
    if (!e.ok()) return fail(e.status());
    exe = *e;
  }
  int status = EXIT_SUCCESS;
  const eng::ResolvedConfig& r = trainer->config();
  std::printf("train_compile: %s: model %s, %lld devices%s, mesh %s, global batch %lld x %lld\n",
              a.config.c_str(), r.model.name.c_str(), static_cast<long long>(m->num_devices),
              m->compile_topology.empty()
                  ? ""
                  : fmt::format(" ({} x {} slice{})", m->compile_topology, m->num_slices,
                                m->num_slices == 1 ? "" : "s")
                        .c_str(),
              mesh_line(trainer->mesh()).c_str(), static_cast<long long>(r.global_batch_size),
              static_cast<long long>(r.max_target_length));
  std::printf("%s", m->report().c_str());
  const eng::MemoryAnalysis& mem = exe->memory();
  std::printf("%s\n", mem.to_string().c_str());
  print_temps(*exe, 5);
  if (a.shardings) {
    eng::Result<eng::ShardingTable> tab = eng::trainer_shardings(*trainer);
    if (!tab.ok()) return fail(tab.status());
    std::printf("%s", tab->to_string().c_str());
  }
  eng::RunRecorder& rec = trainer->recorder();
  (void)rec.log_value("plan/peak_bytes", 0, static_cast<double>(mem.peak_bytes()));
  (void)rec.log_value("plan/argument_bytes", 0, static_cast<double>(mem.argument_bytes));
  (void)rec.log_value("plan/temp_bytes", 0, static_cast<double>(mem.temp_bytes));
  (void)rec.log_value("plan/num_devices", 0, static_cast<double>(m->num_devices));
  (void)rec.set_tag("train_compile.config", a.config);
  if (!m->compile_topology.empty())
    (void)rec.set_tag("train_compile.topology", m->compile_topology);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("Compiled train_step shape-only in %.2f s (nothing allocated)\n", seconds);
  if (predicted) {
    std::printf("Predicted step on %s (docs/prediction.md):\n%s\n", m->compile_topology.c_str(),
                predicted->to_table().c_str());
    (void)rec.log_value("plan/predicted_step_time_s", 0, predicted->step_time_s);
  }
  if (m->topology) {
    const int64_t hbm = m->topology->hbm_bytes_per_device();
    const int64_t peak = mem.peak_bytes();
    (void)rec.log_value("plan/hbm_bytes", 0, static_cast<double>(hbm));
    (void)rec.log_value("plan/fits", 0, peak <= hbm ? 1.0 : 0.0);
    if (peak > hbm) {
      std::fprintf(stderr,
                   "shardlab train_compile: does not fit: the peak per device is %.2f GB but a "
                   "%s device (%s) has %.2f GB of HBM: over by %.2f GB (%.0f%% more than "
                   "fits). As XLA says it: Ran out of memory in memory space hbm. Used %.2fG of "
                   "%.2fG hbm. Exceeded hbm capacity by %.2fG.\n",
                   gb(peak), m->topology->chip.name.c_str(), m->topology->name.c_str(), gb(hbm),
                   gb(peak - hbm),
                   100.0 * static_cast<double>(peak - hbm) / static_cast<double>(hbm), gb(peak),
                   gb(hbm), gb(peak - hbm));
      status = EXIT_FAILURE;
    } else {
      std::printf("Fits: the peak per device is %.2f GB of a %s device's %.2f GB HBM (%.0f%%)\n",
                  gb(peak), m->topology->chip.name.c_str(), gb(hbm),
                  100.0 * static_cast<double>(peak) / static_cast<double>(hbm));
    }
  } else {
    std::printf(
        "No HBM check and no predicted step: no compile_topology (num_devices gives the "
        "devices only)\n");
  }
  if (!trainer->run_id().empty())
    std::printf("run %s in %s\n", trainer->run_id().c_str(), db.c_str());
  trainer.reset();  // ends the run before the store flushes
  eng::Status flushed = store->flush();
  if (!flushed.ok()) return fail(flushed);
  return status;
}

}  // namespace

int run_train_compile(int argc, char** argv) {
  eng::Result<Args> a = parse_args(argc, argv);
  if (!a.ok()) {
    std::fprintf(stderr, "shardlab train_compile: %s\n%s", a.status().message().c_str(), kUsage);
    return EXIT_FAILURE;
  }
  if (a->help) {
    std::printf("%s", kUsage);
    return EXIT_SUCCESS;
  }
  return train_compile(*a, std::vector<std::string>(argv, argv + argc));
}

}  // namespace shell
