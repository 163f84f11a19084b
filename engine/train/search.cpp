// engine/train/search.cpp: enumerate meshes x values on named hardware, plan each shape-only on
// the thread pool, rank those that fit (search.h).
#include "engine/train/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "engine/base/text.h"
#include "engine/base/thread_pool.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/physical_mesh.h"
#include "engine/train/plan.h"
#include "engine/train/run_recorder.h"
#include "engine/train/train_step.h"

namespace eng {
namespace {

constexpr size_t kMaxCandidates = 100000;  // each is a plan of ~0.1-0.5 s

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// Every k-tuple of positive integers whose product is n (exact) or divides n, in lexicographic
// order of the tuple.
void splits(int64_t n, size_t k, bool exact, std::vector<int64_t>& cur,
            std::vector<std::vector<int64_t>>& out) {
  if (cur.size() == k) {
    if (!exact || n == 1) out.push_back(cur);
    return;
  }
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d != 0) continue;
    cur.push_back(d);
    splits(n / d, k, exact, cur, out);
    cur.pop_back();
  }
}

Status check_mesh_axes(const SearchSpace& space) {
  const std::vector<std::string>& axes = maxtext_mesh_axes();
  std::vector<std::string_view> names(axes.begin(), axes.end());
  for (size_t i = 0; i < space.mesh_axes.size(); ++i) {
    const std::string& a = space.mesh_axes[i];
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) {
      const std::string hint = closest_match(a, names);
      return invalid_argument("search: '{}' is not a mesh axis{} (MaxText's axes: {})", a,
                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
                              fmt::join(axes, ", "));
    }
    for (size_t j = 0; j < i; ++j)
      if (space.mesh_axes[j] == a) return invalid_argument("search: mesh axis '{}' given twice", a);
    for (const auto& [key, values] : space.keys)
      if (key == ici_key(a))
        return invalid_argument("search: {} is varied by the mesh axis '{}'; give it once", key, a);
  }
  return ok_status();
}

// The keys' values typed by the key table; an unknown key names the nearest one.
Result<std::vector<std::vector<ConfigValue>>> typed_values(const SearchSpace& space) {
  std::vector<std::string_view> known;
  for (const ConfigKey& k : config_keys()) known.push_back(k.name);
  std::vector<std::vector<ConfigValue>> out;
  for (size_t i = 0; i < space.keys.size(); ++i) {
    const auto& [key, texts] = space.keys[i];
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      const std::string hint = closest_match(key, known);
      return invalid_argument("search: unknown key '{}'{}", key,
                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint));
    }
    for (size_t j = 0; j < i; ++j)
      if (space.keys[j].first == key) return invalid_argument("search: key '{}' given twice", key);
    if (texts.empty()) return invalid_argument("search: key '{}' has no values to try", key);
    std::vector<ConfigValue> typed;
    for (const std::string& t : texts) {
      Result<ConfigValue> v = parse_config_value(key, t);
      if (!v.ok()) return invalid_argument("search: {}", v.status().message());
      typed.push_back(std::move(v).value());
    }
    out.push_back(std::move(typed));
  }
  return out;
}

std::string seconds_string(double s) {
  return s >= 1 ? fmt::format("{:.3f} s", s) : fmt::format("{:.2f} ms", s * 1e3);
}

}  // namespace

std::string SearchCandidate::label() const {
  std::vector<std::string> parts;
  for (const auto& [axis, size] : mesh) parts.push_back(fmt::format("{}={}", axis, size));
  for (const auto& [key, value] : values) parts.push_back(fmt::format("{}={}", key, value));
  return parts.empty() ? std::string("(the config)") : fmt::format("{}", fmt::join(parts, " "));
}

std::string SearchCandidate::limit() const {
  if (!status.ok()) return status.message();
  if (!planned) return "not planned";
  if (!predicted.fits)
    return fmt::format("memory: {:.2f} GiB over {:.2f} GiB",
                       gib(predicted.peak_bytes - predicted.hbm_bytes), gib(predicted.hbm_bytes));
  if (predicted.exposed_collective_s > 0.01 * predicted.step_time_s)
    return fmt::format("{}, {} exposed", predicted.bound,
                       seconds_string(predicted.exposed_collective_s));
  return predicted.bound;
}

Result<SearchResult> enumerate_candidates(const Config& base, const SearchSpace& space) {
  ENG_RETURN_IF_ERROR(check_mesh_axes(space));
  ENG_ASSIGN_OR_RETURN(std::vector<std::vector<ConfigValue>> typed, typed_values(space));
  const std::string name = base.get_string("compile_topology");
  if (name.empty())
    return invalid_argument("search: compile_topology is not set; name the hardware ({})",
                            known_topology_families());
  ENG_ASSIGN_OR_RETURN(Topology topo,
                       topology_from_name(name, base.get_int("compile_topology_num_slices")));
  const std::vector<std::string>& axes = maxtext_mesh_axes();
  std::vector<int64_t> ici, dcn;
  for (const std::string& axis : axes) {
    ici.push_back(base.get_int(ici_key(axis)));
    dcn.push_back(base.get_int(dcn_key(axis)));
  }
  // The fixed axes' product and the one that fills (-1), if any.
  std::vector<size_t> varied;
  for (const std::string& a : space.mesh_axes)
    varied.push_back(static_cast<size_t>(std::find(axes.begin(), axes.end(), a) - axes.begin()));
  int64_t fixed = 1;
  int fill = -1;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (std::find(varied.begin(), varied.end(), i) != varied.end()) continue;
    if (ici[i] == -1) {
      if (fill >= 0)
        return invalid_argument("search: {} and {} are both -1; one axis at most fills the slice",
                                ici_key(axes[static_cast<size_t>(fill)]), ici_key(axes[i]));
      fill = static_cast<int>(i);
    } else if (ici[i] < 1) {
      return invalid_argument("search: {}={} (sizes are >= 1, or -1 to fill)", ici_key(axes[i]),
                              ici[i]);
    } else {
      fixed *= ici[i];
    }
  }
  if (topo.devices_per_slice % fixed != 0)
    return invalid_argument(
        "search: the axes not varied multiply to {}, which does not divide the {} devices of a "
        "{} slice",
        fixed, topo.devices_per_slice, topo.name);
  SearchResult r;
  r.topology = fmt::format("{} x {} slice{}", topo.name, topo.num_slices,
                           topo.num_slices == 1 ? "" : "s");
  r.num_devices = topo.num_devices();
  // Meshes: each split of the varied axes that the torus lays out.
  std::vector<std::vector<std::pair<std::string, int64_t>>> meshes;
  std::vector<std::vector<int64_t>> tuples;
  std::vector<int64_t> cur;
  if (!varied.empty()) splits(topo.devices_per_slice / fixed, varied.size(), fill < 0, cur, tuples);
  for (const std::vector<int64_t>& t : tuples) {
    std::vector<int64_t> m = ici;
    for (size_t k = 0; k < varied.size(); ++k) m[varied[k]] = t[k];
    ++r.mesh_splits;
    Result<PhysicalMesh> pm = lay_out_mesh(topo, axes, m, dcn);
    if (!pm.ok()) {
      if (r.mesh_skip_example.empty())
        r.mesh_skip_example = fmt::format("{}", pm.status().message());
      continue;
    }
    std::vector<std::pair<std::string, int64_t>> desc;
    for (size_t k = 0; k < varied.size(); ++k) desc.emplace_back(axes[varied[k]], t[k]);
    if (fill >= 0)
      desc.emplace_back(axes[static_cast<size_t>(fill)],
                        pm->axes[static_cast<size_t>(fill)].ici_size);
    meshes.push_back(std::move(desc));
  }
  if (varied.empty()) {  // the config's own mesh (its plan says so if the torus cannot take it)
    meshes.push_back({});
    r.mesh_splits = 1;
  }
  r.meshes = static_cast<int64_t>(meshes.size());
  // meshes x values (the last key varies fastest).
  size_t combos = 1;
  for (const auto& v : typed) {
    combos *= v.size();
    if (combos * meshes.size() > kMaxCandidates)
      return invalid_argument("search: more than {} candidates ({} meshes x the values); narrow "
                              "the search",
                              kMaxCandidates, meshes.size());
  }
  for (const auto& mesh : meshes) {
    for (size_t c = 0; c < combos; ++c) {
      SearchCandidate cand;
      cand.index = static_cast<int64_t>(r.candidates.size());
      cand.mesh = mesh;
      size_t rest = c;
      std::vector<std::pair<std::string, std::string>> values(typed.size());
      for (size_t k = typed.size(); k-- > 0;) {
        const size_t j = rest % typed[k].size();
        rest /= typed[k].size();
        values[k] = {space.keys[k].first, config_value_string(typed[k][j])};
      }
      cand.values = std::move(values);
      r.candidates.push_back(std::move(cand));
    }
  }
  return r;
}

namespace {

// The candidate's config: the base with its mesh and values set.
Result<Config> candidate_config(const Config& base, const SearchCandidate& c,
                                const std::vector<std::string>& varied_axes) {
  Config cfg = base;
  for (const auto& [axis, size] : c.mesh) {
    const bool is_varied =
        std::find(varied_axes.begin(), varied_axes.end(), axis) != varied_axes.end();
    if (is_varied) ENG_RETURN_IF_ERROR(cfg.set(ici_key(axis), size));
  }
  for (const auto& [key, text] : c.values) {
    ENG_ASSIGN_OR_RETURN(ConfigValue v, parse_config_value(key, text));
    ENG_RETURN_IF_ERROR(cfg.set(key, std::move(v)));
  }
  return cfg;
}

bool better(const SearchCandidate& a, const SearchCandidate& b, SearchRank rank) {
  if (rank == SearchRank::kStepTime) return a.predicted.step_time_s < b.predicted.step_time_s;
  return a.predicted.tokens_per_s_per_device > b.predicted.tokens_per_s_per_device;
}

// The candidate's rows in the store; the first write that failed, if any (the search goes on).
Status record_candidate(RunRecorder& rec, const SearchCandidate& c, const Plan* plan) {
  const int64_t i = c.index;
  Status first = ok_status();
  auto keep = [&](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  if (plan != nullptr) {
    const Prediction& p = c.predicted;
    const int64_t id = rec.record_plan(plan->trainer->last_compile(), *plan->exe, i, p.hbm_bytes);
    if (id > 0) keep(rec.store()->record_prediction(id, prediction_row(p)));
    keep(rec.log_value("search/step_time_s", i, p.step_time_s));
    keep(rec.log_value("search/tokens_per_s_per_device", i, p.tokens_per_s_per_device));
    keep(rec.log_value("search/mfu", i, p.mfu));
    keep(rec.log_value("search/peak_bytes", i, static_cast<double>(p.peak_bytes)));
    keep(rec.log_value("search/fits", i, p.fits ? 1.0 : 0.0));
    keep(rec.log_value("search/global_batch", i, static_cast<double>(c.global_batch)));
    rec.record_event("search", "info", i,
                     fmt::format("{}: {:.3f} s, {:.1f} tokens/s/device, peak {:.2f} GiB, {}",
                                 c.label(), p.step_time_s, p.tokens_per_s_per_device,
                                 gib(p.peak_bytes), c.limit()));
  } else {
    rec.record_event("search", "warning", i, fmt::format("{}: {}", c.label(), c.limit()));
  }
  return first;
}

// The candidate's per_device_batch_size as varied ("" when it is not varied).
std::string batch_of(const SearchCandidate& c) {
  for (const auto& [key, value] : c.values)
    if (key == "per_device_batch_size") return value;
  return "";
}

// Candidates in groups that differ only in per_device_batch_size, each sorted by it (ascending);
// groups in enumeration order. Without pruning (or without a varied batch) one per candidate.
std::vector<std::vector<size_t>> batch_groups(const std::vector<SearchCandidate>& cands,
                                              bool prune) {
  std::vector<std::vector<size_t>> groups;
  std::map<std::string, size_t> by_rest;  // the label without the batch -> group
  for (size_t i = 0; i < cands.size(); ++i) {
    if (!prune || batch_of(cands[i]).empty()) {
      groups.push_back({i});
      continue;
    }
    SearchCandidate rest = cands[i];
    std::erase_if(rest.values, [](const auto& kv) { return kv.first == "per_device_batch_size"; });
    auto [it, added] = by_rest.emplace(rest.label(), groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  for (std::vector<size_t>& g : groups)
    std::stable_sort(g.begin(), g.end(), [&](size_t a, size_t b) {
      return std::strtod(batch_of(cands[a]).c_str(), nullptr) <
             std::strtod(batch_of(cands[b]).c_str(), nullptr);
    });
  return groups;
}

// Traces shared by the candidates that differ only in their data/fsdp/fsdp_transpose/tensor
// split (TracedTrainStep): keyed by the candidate's values.
struct TraceCache {
  bool usable = false;  // every mesh axis the candidates vary (or fill) leaves the trace alone
  int64_t num_devices = 0;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const TracedTrainStep>> traces;
};

bool trace_independent_axis(const std::string& axis) {
  return axis == "data" || axis == "fsdp" || axis == "fsdp_transpose" || axis == "tensor";
}

std::shared_ptr<const TracedTrainStep> trace_for(TraceCache& cache, const Config& cfg,
                                                 const SearchCandidate& c) {
  if (!cache.usable) return nullptr;
  SearchCandidate values_only = c;
  values_only.mesh.clear();
  const std::string key = values_only.label();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.traces.find(key);
    if (it != cache.traces.end()) return it->second;
  }
  Result<ResolvedConfig> rc = resolve_config(cfg, cache.num_devices);
  if (!rc.ok()) return nullptr;  // the plan reports it
  auto traced = std::make_shared<TracedTrainStep>();
  traced->program = build_train_step(*rc, &traced->layout);
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.traces.emplace(key, std::move(traced)).first->second;
}

// Plans one candidate shape-only: fills its prediction (or its error) and returns the plan, for
// the store, when it compiled.
std::optional<Plan> plan_candidate(const Config& base, SearchCandidate& c,
                                   const std::vector<std::string>& varied_axes,
                                   TraceCache& traces) {
  Result<Config> cfg = candidate_config(base, c, varied_axes);
  if (!cfg.ok()) {
    c.status = cfg.status();
    return std::nullopt;
  }
  PlanOptions options;
  options.traced = trace_for(traces, *cfg, c);
  Result<Plan> p = plan_for_topology(*cfg, options);
  if (!p.ok()) {
    c.status = p.status();
    return std::nullopt;
  }
  c.planned = true;
  c.predicted = p->predicted;
  c.global_batch = p->trainer->config().global_batch_size;
  return std::move(p).value();
}

}  // namespace

Result<SearchResult> search_configs(const Config& base, const SearchSpace& space,
                                    const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  ENG_ASSIGN_OR_RETURN(SearchResult r, enumerate_candidates(base, space));
  r.rank = options.rank;
  RunRecorder rec(options.store, 1 << 30);  // flushed once, at the end
  if (options.store != nullptr) {
    RunInfo info;
    info.argv = options.argv;
    info.script = options.script;
    for (const auto& [k, v] : base.flatten()) info.params.emplace_back(k, v);
    ENG_RETURN_IF_ERROR(rec.begin(std::move(info)));
    std::vector<std::string> vary;
    if (!space.mesh_axes.empty())
      vary.push_back(fmt::format("mesh={}", fmt::join(space.mesh_axes, ",")));
    for (const auto& [k, v] : space.keys)
      vary.push_back(fmt::format("{}={}", k, fmt::join(v, ",")));
    (void)rec.set_tag("search.vary", fmt::format("{}", fmt::join(vary, " ")));
    (void)rec.set_tag("search.topology", r.topology);
  }
  std::mutex mu;  // guards the recorder, the progress callback and the counters below
  std::atomic<bool> stopped{false};
  int64_t done = 0;
  const int64_t total = static_cast<int64_t>(r.candidates.size());
  TraceCache traces;
  traces.num_devices = r.num_devices;
  traces.usable = options.reuse_traces && base.get_int("ici_pipeline_parallelism") == 1;
  for (const SearchCandidate& c : r.candidates)
    for (const auto& [axis, size] : c.mesh)
      if (!trace_independent_axis(axis)) traces.usable = false;
  // One task per group of candidates that differ only in per_device_batch_size, smallest
  // batch first: once one does not fit, the larger ones are skipped (memory grows with it).
  const std::vector<std::vector<size_t>> groups = batch_groups(r.candidates, options.prune_batch);
  default_pool().run(static_cast<int64_t>(groups.size()), [&](int64_t g) {
    std::string too_big;  // the smaller batch that did not fit
    for (size_t i : groups[static_cast<size_t>(g)]) {
      SearchCandidate& c = r.candidates[i];
      std::optional<Plan> plan;
      if (stopped.load() || (options.stop_requested && options.stop_requested())) {
        stopped.store(true);
        c.status = Status(Code::kCancelled, "interrupted before it was planned");
      } else if (!too_big.empty()) {
        c.pruned = true;
        c.status = Status(Code::kResourceExhausted,
                          fmt::format("skipped: per_device_batch_size={} does not fit with the "
                                      "same mesh and values (memory grows with the batch)",
                                      too_big));
      } else {
        try {  // a pool task must not let an exception (std::bad_alloc) end the process
          plan = plan_candidate(base, c, space.mesh_axes, traces);
        } catch (const std::exception& e) {
          plan.reset();
          c.planned = false;
          c.status = Status(Code::kResourceExhausted, fmt::format("plan failed: {}", e.what()));
        }
        if (c.planned && !c.predicted.fits) too_big = batch_of(c);
      }
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      if (rec.recording())
        if (Status s = record_candidate(rec, c, plan ? &*plan : nullptr);
            !s.ok() && r.store_error.empty())
          r.store_error = s.message();
      if (options.progress) options.progress(done, total, c);
    }
  });
  r.interrupted = stopped.load();
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const SearchCandidate& c = r.candidates[i];
    if (c.planned) ++r.planned;
    if (c.pruned) ++r.pruned;
    if (!c.planned && !c.pruned && c.status.code() != Code::kCancelled) ++r.failed;
    if (c.planned && c.predicted.fits) r.ranking.push_back(i);
  }
  r.fitting = static_cast<int64_t>(r.ranking.size());
  std::stable_sort(r.ranking.begin(), r.ranking.end(), [&](size_t a, size_t b) {
    return better(r.candidates[a], r.candidates[b], r.rank);
  });
  for (size_t k = 0; k < r.ranking.size(); ++k) {
    SearchCandidate& c = r.candidates[r.ranking[k]];
    c.rank = static_cast<int64_t>(k) + 1;
    if (rec.recording()) (void)rec.log_value("search/rank", c.index, static_cast<double>(c.rank));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rec.recording()) {
    if (!r.ranking.empty()) (void)rec.set_tag("search.best", r.candidates[r.ranking[0]].label());
    (void)rec.log_value("search/seconds", 0, r.seconds);
    r.run_id = rec.run_id();
    ENG_RETURN_IF_ERROR(rec.flush());
    rec.end(r.interrupted ? RunStatus::kKilled : RunStatus::kFinished, false);
  }
  return r;
}

std::string SearchResult::to_table(int64_t top) const {
  std::string out;
  const char* by = rank == SearchRank::kStepTime ? "predicted step time"
                                                 : "predicted tokens/s per device";
  out += fmt::format(
      "search on {}: {} candidates ({} mesh{} of {} split{}), {} planned, {} fit, {} failed, {} "
      "skipped{}, {:.1f} s; best by {}:\n",
      topology, candidates.size(), meshes, meshes == 1 ? "" : "es", mesh_splits,
      mesh_splits == 1 ? "" : "s", planned, fitting, failed, pruned,
      interrupted ? " (interrupted)" : "", seconds, by);
  if (ranking.empty()) out += "  nothing fits\n";
  const size_t n = std::min(ranking.size(), static_cast<size_t>(std::max<int64_t>(top, 0)));
  size_t width = 9;  // "candidate"
  for (size_t k = 0; k < n; ++k) width = std::max(width, candidates[ranking[k]].label().size());
  if (n > 0)
    out += fmt::format("  {:>4}  {:<{}} {:>6} {:>10} {:>11} {:>6} {:>9}  {}\n", "rank",
                       "candidate", width, "batch", "step", "tokens/s/d", "MFU", "peak GiB",
                       "what limits it");
  for (size_t k = 0; k < n; ++k) {
    const SearchCandidate& c = candidates[ranking[k]];
    const Prediction& p = c.predicted;
    out += fmt::format("  {:>4}  {:<{}} {:>6} {:>10} {:>11.1f} {:>5.1f}% {:>9.2f}  {}\n", c.rank,
                       c.label(), width, c.global_batch, seconds_string(p.step_time_s),
                       p.tokens_per_s_per_device, 100 * p.mfu, gib(p.peak_bytes), c.limit());
  }
  for (const SearchCandidate& c : candidates)
    if (!c.planned && !c.pruned && c.status.code() != Code::kCancelled) {
      out += fmt::format("  {} failed, e.g. {}: {}\n", failed, c.label(), c.status.message());
      break;
    }
  if (fitting < planned)
    for (const SearchCandidate& c : candidates)
      if (c.planned && !c.predicted.fits) {
        out += fmt::format("  {} do not fit, e.g. {}: {}\n", planned - fitting, c.label(),
                           c.limit());
        break;
      }
  for (const SearchCandidate& c : candidates)
    if (c.pruned) {
      out += fmt::format("  {} skipped: a smaller per_device_batch_size on the same mesh and "
                         "values did not fit (memory grows with the batch)\n",
                         pruned);
      break;
    }
  if (!mesh_skip_example.empty() && meshes < mesh_splits)
    out += fmt::format("  {} split{} not laid out on the torus, e.g. {}\n", mesh_splits - meshes,
                       mesh_splits - meshes == 1 ? "" : "s", mesh_skip_example);
  if (!store_error.empty())
    out += fmt::format("  store: some candidates' rows were not recorded: {}\n", store_error);
  return out;
}

}  // namespace eng
