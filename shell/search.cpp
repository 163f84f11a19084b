// shell/search.cpp: `shardlab search <config.yml> key=value ... --vary KEY=V1,V2 ...`: MaxText's
// YAML as train_compile reads it, then engine/train/search.h over the meshes and values asked
// for, a progress bar on a terminal, the best N with what limits each, the run in the store.
#include "shell/search.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/store/metrics_store.h"
#include "engine/train/maxtext_yaml.h"
#include "engine/train/search.h"

namespace shell {
namespace {

constexpr const char* kUsage =
    "usage: shardlab search <config.yml> [key=value ...] --vary KEY=V1,V2,... [--vary ...]\n"
    "                       [--rank tokens|step_time] [--top N] [--no-prune] [--svg PATH]\n"
    "                       [--db PATH]\n"
    "  Plans every combination shape-only for compile_topology (as train_compile does) and\n"
    "  ranks those that fit. The config and key=value overrides are MaxText's, as for\n"
    "  train_compile.\n"
    "  --vary mesh=fsdp,tensor,...   vary the ici split of these mesh axes over a slice's\n"
    "                                devices (every split the torus lays out; an axis not\n"
    "                                varied keeps its size, one at -1 fills)\n"
    "  --vary KEY=V1,V2,...          try these values of a config key (per_device_batch_size,\n"
    "                                remat_policy, sa_block_q, ...)\n"
    "  --rank tokens|step_time       rank by predicted tokens/s per device (default; fair across\n"
    "                                batch sizes) or by predicted step time\n"
    "  --top N                       rows of the table (default 10)\n"
    "  --svg PATH                    write the Pareto front (peak memory vs the ranking's\n"
    "                                measure, every planned candidate) as an SVG\n"
    "  --no-prune                    plan every batch size (default: a mesh and values' batch\n"
    "                                sizes smallest first, the larger skipped once one does not\n"
    "                                fit: memory grows with the batch)\n"
    "  --db PATH                     metrics store (default $SHARDLAB_DB or ./shardlab.db): one\n"
    "                                run, every candidate's compile, prediction and metrics\n"
    "  Example (docs/train_compile.md):\n"
    "    shardlab search maxtext/configs/base.yml model_name=llama3.1-70b \\\n"
    "      compile_topology=v6e-256 compile_topology_num_slices=1 max_target_length=8192 \\\n"
    "      --vary mesh=fsdp,tensor,fsdp_transpose --vary per_device_batch_size=1,2,3,4,5 \\\n"
    "      --vary remat_policy=full,minimal,save_qkv_proj,save_dot_except_mlp\n";

struct Args {
  std::string config;
  std::vector<eng::ConfigOverride> overrides;
  eng::SearchSpace space;
  eng::SearchRank rank = eng::SearchRank::kTokensPerSecond;
  int64_t top = 10;
  bool prune = true;
  bool help = false;
  std::string svg;
  std::string db;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

eng::Status add_vary(const std::string& text, eng::SearchSpace& space) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return eng::invalid_argument(
        "--vary '{}' is not KEY=V1,V2,... (e.g. --vary remat_policy=full,minimal or --vary "
        "mesh=fsdp,tensor)",
        text);
  const std::string key = text.substr(0, eq);
  std::vector<std::string> values = split_commas(text.substr(eq + 1));
  for (const std::string& v : values)
    if (v.empty()) return eng::invalid_argument("--vary '{}': an empty value", text);
  if (key == "mesh") {
    if (!space.mesh_axes.empty()) return eng::invalid_argument("--vary mesh= given twice");
    space.mesh_axes = std::move(values);
  } else {
    space.keys.emplace_back(key, std::move(values));
  }
  return eng::ok_status();
}

eng::Result<Args> parse_args(int argc, char** argv) {
  Args a;
  auto value_of = [&](int& i, const std::string& flag) -> eng::Result<std::string> {
    const std::string s = argv[i];
    if (s.size() > flag.size() && s[flag.size()] == '=') return s.substr(flag.size() + 1);
    if (i + 1 >= argc) return eng::invalid_argument("'{}' needs a value", flag);
    return std::string(argv[++i]);
  };
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    auto is = [&](const std::string& flag) { return s == flag || s.starts_with(flag + "="); };
    if (s == "-h" || s == "--help") {
      a.help = true;
    } else if (s == "--no-prune") {
      a.prune = false;
    } else if (is("--vary")) {
      ENG_ASSIGN_OR_RETURN(std::string v, value_of(i, "--vary"));
      ENG_RETURN_IF_ERROR(add_vary(v, a.space));
    } else if (is("--rank")) {
      ENG_ASSIGN_OR_RETURN(std::string v, value_of(i, "--rank"));
      if (v == "tokens") a.rank = eng::SearchRank::kTokensPerSecond;
      else if (v == "step_time") a.rank = eng::SearchRank::kStepTime;
      else return eng::invalid_argument("--rank '{}': tokens or step_time", v);
    } else if (is("--top")) {
      ENG_ASSIGN_OR_RETURN(std::string v, value_of(i, "--top"));
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > 1000000)
        return eng::invalid_argument("--top '{}': a count of rows (0 or more)", v);
      a.top = n;
    } else if (is("--svg")) {
      ENG_ASSIGN_OR_RETURN(a.svg, value_of(i, "--svg"));
    } else if (is("--db")) {
      ENG_ASSIGN_OR_RETURN(a.db, value_of(i, "--db"));
    } else if (s.starts_with("-")) {
      return eng::invalid_argument("unrecognized option '{}'", s);
    } else if (a.config.empty() && s.find('=') == std::string::npos) {
      a.config = s;
    } else {
      const size_t eq = s.find('=');
      if (eq == std::string::npos || eq == 0)
        return eng::invalid_argument(
            "'{}' is not key=value (MaxText's override syntax, e.g. per_device_batch_size=4)", s);
      a.overrides.push_back({s.substr(0, eq), s.substr(eq + 1), s});
    }
  }
  if (a.config.empty() && !a.help)
    return eng::invalid_argument("needs a config file (e.g. base.yml of MaxText's configs)");
  return a;
}

int search(const Args& a, const std::vector<std::string>& argv) {
  auto fail = [](const eng::Status& s) {
    std::fprintf(stderr, "shardlab search: %s\n", s.message().c_str());
    return EXIT_FAILURE;
  };
  eng::Result<eng::MaxTextConfig> m = eng::load_maxtext_config(a.config, a.overrides);
  if (!m.ok()) return fail(m.status());
  if (!m->topology)
    return fail(eng::invalid_argument(
        "needs compile_topology (the hardware to plan for, e.g. compile_topology=v6e-256)"));
  std::string db = a.db;
  if (db.empty()) {
    const char* env = std::getenv("SHARDLAB_DB");
    db = env && *env ? env : "shardlab.db";
  }
  eng::Result<std::unique_ptr<eng::MetricsStore>> store = eng::MetricsStore::open(db);
  if (!store.ok()) return fail(store.status());
  std::printf("search: %s: model %s on %s x %lld slice%s\n", a.config.c_str(),
              m->config.get_string("model_name").c_str(), m->compile_topology.c_str(),
              static_cast<long long>(m->num_slices), m->num_slices == 1 ? "" : "s");
  std::printf("%s", m->report().c_str());
  std::fflush(stdout);

  eng::SearchOptions options;
  options.rank = a.rank;
  options.prune_batch = a.prune;
  options.store = store->get();
  options.argv = argv;
  options.script = a.config;
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  int64_t fitting = 0;
  options.progress = [&](int64_t done, int64_t total, const eng::SearchCandidate& c) {
    if (c.planned && c.predicted.fits) ++fitting;
    if (!tty) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fputs(search_progress_bar(done, total, fitting, s).c_str(), stderr);
    if (done == total) std::fputs("\n", stderr);
    std::fflush(stderr);
  };
  eng::Result<eng::SearchResult> r = eng::search_configs(m->config, a.space, options);
  if (!r.ok()) return fail(r.status());
  std::printf("%s", r->to_table(a.top).c_str());
  if (!a.svg.empty()) {
    const std::string svg = r->pareto_svg();
    std::FILE* f = std::fopen(a.svg.c_str(), "wb");
    bool ok = f != nullptr && std::fwrite(svg.data(), 1, svg.size(), f) == svg.size();
    if (f != nullptr) ok = std::fclose(f) == 0 && ok;
    if (!ok) return fail(eng::io_error("--svg: cannot write '{}'", a.svg));
    std::printf("Pareto front (%zu of %lld planned) in %s\n", r->pareto_front().size(),
                static_cast<long long>(r->planned), a.svg.c_str());
  }
  if (!r->run_id.empty()) std::printf("run %s in %s\n", r->run_id.c_str(), db.c_str());
  eng::Status flushed = (*store)->flush();
  if (!flushed.ok()) return fail(flushed);
  return r->ranking.empty() ? EXIT_FAILURE : EXIT_SUCCESS;
}

}  // namespace

std::string search_progress_bar(int64_t done, int64_t total, int64_t fitting, double elapsed_s) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  return fmt::format("\rsearch [{}{}] {}/{}, {} fit, {:.1f} s", std::string(filled, '#'),
                     std::string(kWidth - filled, '-'), done, total, fitting, elapsed_s);
}

int run_search(int argc, char** argv) {
  eng::Result<Args> a = parse_args(argc, argv);
  if (!a.ok()) {
    std::fprintf(stderr, "shardlab search: %s\n%s", a.status().message().c_str(), kUsage);
    return EXIT_FAILURE;
  }
  if (a->help) {
    std::printf("%s", kUsage);
    return EXIT_SUCCESS;
  }
  return search(*a, std::vector<std::string>(argv, argv + argc));
}

}  // namespace shell
