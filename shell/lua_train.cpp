// shell/lua_train.cpp: Lua bindings for training: sl.trainer, Trainer and the StepHandle t:step() returns.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/dist/dist.h"
#include "engine/train/config.h"
#include "engine/train/inspect.h"
#include "engine/train/plan.h"
#include "engine/train/train_step.h"
#include "engine/train/pipeline_stats.h"
#include "engine/train/trainer.h"
#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/interrupt.h"
#include "shell/lua_binding.h"
#include "shell/lua_runs.h"
#include "shell/lua_sharding.h"
#include "shell/lua_experts.h"
#include "shell/lua_pipeline.h"
#include "shell/lua_types.h"

namespace shell {

// The userdata types. A Trainer has identity, so the userdata owns it through a pointer.
struct TrainerBox {
  TrainerBox(std::unique_ptr<eng::Trainer> t, ShellContext* c) : trainer(std::move(t)), ctx(c) {
    ctx->trainers.push_back(trainer.get());
  }
  TrainerBox(TrainerBox&& o) noexcept = default;
  TrainerBox& operator=(TrainerBox&&) = delete;
  ~TrainerBox() {
    if (trainer) std::erase(ctx->trainers, trainer.get());
  }
  std::unique_ptr<eng::Trainer> trainer;
  ShellContext* ctx;  // lists the live trainers (ShellContext::compiles)
  bool printed_num_params = false;  // MaxText's "number parameters" line, once per trainer
  bool warned_warmup = false;  // t:train{} printed its lr-still-warming-up warning
};
struct HandleBox {
  eng::StepHandle handle;  // its Trainer is kept alive by the userdata's user value
};

template <>
struct LuaType<TrainerBox> {
  static constexpr const char* kName = "Trainer";
};
template <>
struct LuaType<HandleBox> {
  static constexpr const char* kName = "StepHandle";
};

namespace {

// ---- sl.trainer -------------------------------------------------------------------------

// The command line for the runs table, from lua.c's global `arg`: arg[0] is the script,
// negative indices the interpreter and its options, positive ones the script's arguments.
void command_line(lua_State* L, eng::TrainerOptions& options) {
  if (lua_getglobal(L, "arg") == LUA_TTABLE) {
    lua_Integer first = 0;
    while (lua_rawgeti(L, -1, first - 1) == LUA_TSTRING) lua_pop(L, 1), --first;
    lua_pop(L, 1);
    for (lua_Integer i = first;; ++i) {
      const bool str = lua_rawgeti(L, -1, i) == LUA_TSTRING;
      if (str) options.argv.emplace_back(lua_tostring(L, -1));
      if (str && i == 0) options.script = lua_tostring(L, -1);
      lua_pop(L, 1);
      if (!str && i >= 0) break;
    }
  }
  lua_pop(L, 1);
}

Result<int> trainer_new(lua_State* L) {
  constexpr std::string_view fn = "sl.trainer";
  ENG_ASSIGN_OR_RETURN(eng::Config * cfg, arg_udata<eng::Config>(L, 1, fn, "config"));
  eng::Mesh mesh;
  if (!lua_isnoneornil(L, 2)) {
    ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 2, fn, "mesh"));
    mesh = *m;
  } else {  // MaxText's mesh from the config's ici_* keys (and num_devices), if it sets any
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> devices,
                         with_context(fn, eng::config_num_devices(*cfg)));
    if (devices) {
      ENG_ASSIGN_OR_RETURN(mesh, with_context(fn, eng::mesh_from_config(*cfg, *devices)));
    }
  }
  // The batch on this mesh, before anything is traced: a fractional product is an error here.
  ENG_RETURN_IF_ERROR(with_context(
      fn, eng::global_batch_size(cfg->get_float("per_device_batch_size"), mesh.num_devices())
              .status()));
  eng::TrainerOptions options;
  bool record = true;  // record the run in the metrics store (--db)
  if (!lua_isnoneornil(L, 3)) {
    ENG_RETURN_IF_ERROR(arg_table(L, 3, fn, "options"));
    static const std::vector<std::string> kAllowed = {"shape_only", "device_capacity_bytes", "store"};
    ENG_RETURN_IF_ERROR(check_keys(L, 3, fn, kAllowed));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> shape_only, field_bool(L, 3, "shape_only", fn));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> use_store, field_bool(L, 3, "store", fn));
    record = use_store.value_or(true);
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> cap, field_int(L, 3, "device_capacity_bytes", fn));
    options.shape_only = shape_only.value_or(false);
    options.device_capacity_bytes = cap.value_or(0);
  }
  if (record && eng::dist::process().index == 0) {  // under mpirun, process 0 records the run
    Result<eng::MetricsStore*> store = context(L).open_store();
    if (!store.ok()) return with_context(fn, store.status());
    options.store = *store;
  }
  command_line(L, options);
  options.stop_requested = shell_interrupt_requested;  // Ctrl-C, agreed per step under mpirun
  Result<std::unique_ptr<eng::Trainer>> t = eng::Trainer::create(*cfg, mesh, options);
  if (!t.ok()) return with_context(fn, t.status());
  const std::string note = (*t)->resume_note();
  push_udata(L, TrainerBox(std::move(t).value(), &context(L)));
  if (!note.empty()) {  // "resumed from step N of run NAME", through print (protected)
    lua_getglobal(L, "print");
    lua_pushstring(L, note.c_str());
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_pop(L, 1);
  }
  return 1;
}

Result<eng::Trainer*> arg_trainer(lua_State* L, std::string_view fn) {
  ENG_ASSIGN_OR_RETURN(TrainerBox * box, arg_udata<TrainerBox>(L, 1, fn));
  if (!box->trainer) return eng::failed_precondition("{}: this trainer was closed", fn);
  return box->trainer.get();
}

Result<int> trainer_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:__tostring"));
  const eng::ResolvedConfig& c = t->config();
  lua_pushstring(L, fmt::format("Trainer(model={}, params={:.3g}M, batch={}x{}, devices={}, step={}{})",
                                c.model.name, static_cast<double>(c.model.num_params()) / 1e6,
                                c.global_batch_size, c.max_target_length, t->mesh().num_devices(),
                                t->current_step(), t->shape_only() ? ", shape_only" : "")
                        .c_str());
  return 1;
}

// Pushes the Compiled and MaxText's memory lines (a string, or nil when quiet).
Result<int> trainer_compile_body(lua_State* L) {
  constexpr std::string_view fn = "Trainer:compile";
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, fn));
  bool verbose = context(L).interactive;  // the REPL shows them; scripts ask with verbose=true
  if (!lua_isnoneornil(L, 2)) {
    ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "options"));
    static const std::vector<std::string> kAllowed = {"verbose"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kAllowed));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> v, field_bool(L, 2, "verbose", fn));
    verbose = v.value_or(verbose);
  }
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<const eng::Executable> exe, with_context(fn, t->compile()));
  push_udata(L, CompiledBox{exe, t->program().name(), t->last_compile(),
                            eng::pipeline_shape_of(t->config())});
  // MaxText prints the memory analysis at compile (with log_compiles the trainer already did).
  if (verbose && !t->raw_config().get_bool("log_compiles")) {
    const std::string where = fmt::format("[{} on {}]", t->program().name(), mesh_label(exe->mesh()));
    lua_pushstring(L, fmt::format("{} {}\n{} Note that compiler could over-estimate the HBM usage.",
                                  where, exe->memory().to_string(), where).c_str());
  } else {
    lua_pushnil(L);
  }
  return 2;
}

// t:compile([{verbose=bool}]) -> Compiled. The lines go through the user's `print` here, after
// the body's C++ frames are gone: a `print` that raises unwinds no C++ object (lua_binding.h).
int trainer_compile(lua_State* L) {
  lua_settop(L, 2);
  lua_entry<trainer_compile_body>(L);  // raises on error; else pushes Compiled, lines | nil
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 1;
  }
  lua_getglobal(L, "print");
  lua_insert(L, -2);
  lua_call(L, 1, 0);
  return 1;
}

void push_metrics(lua_State* L, const eng::StepMetrics& m) {
  lua_createtable(L, 0, 12);
  auto num = [&](const char* k, double v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
  };
  lua_pushinteger(L, m.step);
  lua_setfield(L, -2, "step");
  num("loss", m.loss);
  num("total_weights", m.total_weights);
  num("grad_norm", m.grad_norm);
  num("raw_grad_norm", m.raw_grad_norm);
  num("param_norm", m.param_norm);
  num("lr", m.learning_rate);
  num("step_time_s", m.step_time_s);
  num("tokens_per_s", m.tokens_per_s);                    // global (the store's tokens_per_s)
  num("tokens_per_s_device", m.tokens_per_s_per_device);  // per device
  num("tflops_per_s", m.tflops_per_s_per_device);
  lua_pushboolean(L, m.compiled);
  lua_setfield(L, -2, "compiled");
}

// t:step() returns before the devices finish; the handle's loss synchronises on read.
Result<int> trainer_step(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:step"));
  Result<eng::StepHandle> h = t->step();
  if (!h.ok()) return with_context("Trainer:step", h.status());
  push_udata(L, HandleBox{*h}, 1);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);  // the handle keeps its trainer alive
  return 1;
}

// A StepHandle points into its trainer: usable only while that trainer's userdata is alive
// (Lua code can run the trainer's __gc by hand while a handle still references it).
Result<HandleBox*> arg_handle(lua_State* L, std::string_view fn) {
  ENG_ASSIGN_OR_RETURN(HandleBox * h, arg_udata<HandleBox>(L, 1, fn));
  lua_getiuservalue(L, 1, 1);
  TrainerBox* box = to_udata<TrainerBox>(L, -1);
  const bool alive = box != nullptr && box->trainer != nullptr;
  lua_pop(L, 1);
  if (!alive) return eng::failed_precondition("{}: the trainer of step {} was already finalised", fn, h->handle.step());
  return h;
}

Result<eng::StepMetrics> handle_wait(lua_State* L, std::string_view fn) {
  ENG_ASSIGN_OR_RETURN(HandleBox * h, arg_handle(L, fn));
  Result<eng::StepMetrics> m = h->handle.wait();
  if (!m.ok()) return with_context(fn, m.status());
  return m;
}

Result<int> handle_metrics(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::StepMetrics m, handle_wait(L, "StepHandle:wait"));
  push_metrics(L, m);
  return 1;
}

Result<int> handle_ready(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(HandleBox * h, arg_handle(L, "StepHandle:ready"));
  lua_pushboolean(L, h->handle.ready());
  return 1;
}

Result<int> handle_property(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(HandleBox * h, arg_handle(L, "StepHandle"));
  std::string key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (key == "step") {
    lua_pushinteger(L, h->handle.step());
    return 1;
  }
  static const std::vector<std::string> kSynced = {"loss", "total_weights", "grad_norm", "lr",
                                                   "step_time_s"};
  if (std::find(kSynced.begin(), kSynced.end(), key) == kSynced.end()) {
    lua_pushnil(L);
    return 1;
  }
  ENG_ASSIGN_OR_RETURN(eng::StepMetrics m, handle_wait(L, "StepHandle." + key));
  push_metrics(L, m);
  lua_getfield(L, -1, key.c_str());
  return 1;
}

Result<int> handle_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(HandleBox * h, arg_handle(L, "StepHandle:__tostring"));
  if (!h->handle.ready()) {
    lua_pushstring(L, fmt::format("StepHandle(step={}, running)", h->handle.step()).c_str());
    return 1;
  }
  Result<eng::StepMetrics> m = h->handle.wait();
  lua_pushstring(L, m.ok() ? fmt::format("StepHandle(step={}, loss={:.4f})", h->handle.step(), m->loss).c_str()
                           : fmt::format("StepHandle(step={}, failed: {})", h->handle.step(),
                                         m.status().message()).c_str());
  return 1;
}

// A one-line progress bar for a terminal, counting global steps (a resumed run starts where it
// left off): "[#####.....] 120/200 loss 2.310 0.21 s/step ETA 0:17 5124 tok/s/device".
// `done` steps of this call took `elapsed_s`; the ETA is their mean times the steps left. The
// bar's fill is the counter's fraction (global steps), not the call's.
// Ends with "erase to the end of the line": a shorter bar leaves nothing of the longer one.
std::string progress_bar(int64_t done, int64_t total, int64_t first_step, double elapsed_s,
                         const eng::StepMetrics& m) {
  constexpr int kWidth = 30;
  const int64_t end = first_step + total;  // the fill counts what the counter counts
  const int filled = end > 0 ? static_cast<int>(kWidth * std::clamp<int64_t>(m.step + 1, 0, end) / end) : kWidth;
  const double per_step = done > 0 ? elapsed_s / static_cast<double>(done) : 0;
  const auto eta = static_cast<int64_t>(per_step * static_cast<double>(total - done) + 0.5);
  return fmt::format("\r[{}{}] {}/{} loss {:.3f} {:.2f} s/step ETA {}:{:02d} {:.0f} tok/s/device \033[K",
                     std::string(filled, '#'), std::string(kWidth - filled, '.'), m.step + 1,
                     first_step + total, m.loss, per_step, eta / 60, eta % 60,
                     m.tokens_per_s_per_device);
}

// Pushes the result table and the warmup warning (a string, or nil).
Result<int> trainer_train_body(lua_State* L) {
  constexpr std::string_view fn = "Trainer:train";
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, fn));
  int64_t steps = t->config().steps - t->current_step();
  bool quiet = false, asked = false;
  if (!lua_isnoneornil(L, 2)) {
    ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "options"));
    static const std::vector<std::string> kAllowed = {"steps", "quiet"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kAllowed));
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> s, field_int(L, 2, "steps", fn));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> q, field_bool(L, 2, "quiet", fn));
    if (s) steps = *s;
    asked = s.has_value();
    quiet = q.value_or(false);
  }
  if (asked && steps < 0) return eng::invalid_argument("{}: steps must be >= 0, got {}", fn, steps);
  // Past the config's steps: t:train{} has nothing left (said, not an error); a call that asks
  // for steps beyond them trains them and says so (after the bar, with the warmup warning).
  const std::string past = eng::past_steps_note(t->config(), t->current_step(), steps, asked);
  steps = std::max<int64_t>(steps, 0);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  if (!quiet && steps > 0) {  // MaxText's train loop logs it once, before the first step
    ENG_ASSIGN_OR_RETURN(TrainerBox * box, arg_udata<TrainerBox>(L, 1, fn));
    if (!box->printed_num_params) {
      std::puts(eng::number_parameters_line(t->config().model.num_params()).c_str());
      box->printed_num_params = true;
    }
  }
  // Under mpirun every process stops after the same step: the one whose per-step agreement
  // (StepMetrics::stop_requested) first says that some process was interrupted. Stopping on
  // the local flag could leave one process a step ahead, waiting in that step's collectives.
  const bool agreed = eng::dist::process().count > 1;
  shell_clear_interrupt();
  const int64_t first_step = t->current_step();
  const double start_s = eng::now_seconds();
  eng::StepMetrics last;
  int64_t done = 0;
  bool interrupted = false;
  eng::Status s = t->train(steps, [&](const eng::StepMetrics& m) {
    last = m;
    ++done;
    if (!quiet) {
      if (tty) std::fputs(progress_bar(done, steps, first_step, eng::now_seconds() - start_s, m).c_str(), stdout);
      else std::puts(eng::step_line(m).c_str());
      std::fflush(stdout);
    }
    if (agreed ? m.stop_requested : shell_interrupt_requested()) {
      interrupted = true;
      return false;
    }
    return true;
  });
  if (tty && !quiet && done > 0) std::puts("");
  // A script stopped by Ctrl-C ends its run KILLED unless it trains on; in the REPL, Ctrl-C
  // stops the call and the session goes on: a session ended normally (Ctrl-D) ends it FINISHED.
  if (interrupted && !context(L).interactive) t->recorder().set_interrupted(true);
  ENG_RETURN_IF_ERROR(with_context(fn, s));
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, done);
  lua_setfield(L, -2, "steps");
  lua_pushboolean(L, interrupted);
  lua_setfield(L, -2, "interrupted");
  if (done > 0) {
    push_metrics(L, last);
    lua_setfield(L, -2, "last");
  }
  if (interrupted) shell_take_interrupt(L);  // reported in the result, not raised
  TrainerBox* box = to_udata<TrainerBox>(L, 1);  // arg_trainer checked it
  std::string warning =
      interrupted || box->warned_warmup
          ? std::string()
          : eng::warmup_warning(t->config(), done, last.step, last.learning_rate);
  box->warned_warmup = box->warned_warmup || !warning.empty();
  if (!past.empty()) warning = warning.empty() ? past : past + "\n" + warning;
  if (warning.empty()) lua_pushnil(L);
  else lua_pushstring(L, warning.c_str());
  return 2;
}

// t:train{...}. The warmup warning goes through the user's `print` here, after the body's C++
// frames are gone: a `print` that raises unwinds no C++ object (lua_binding.h).
int trainer_train(lua_State* L) {
  lua_settop(L, 2);
  lua_entry<trainer_train_body>(L);  // raises on error; else pushes the result, warning | nil
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 1;
  }
  lua_getglobal(L, "print");
  lua_insert(L, -2);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_pop(L, 1);  // a failing print loses only the warning
  return 1;
}

Result<int> trainer_program(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:program"));
  lua_pushstring(L, t->program().to_text().c_str());
  return 1;
}

Result<int> trainer_config(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:config"));
  push_udata(L, t->raw_config());
  return 1;
}

// A host array's header line and a few values: "params/x: f32[256,256] (65536 values)
// min -0.061 max 0.062 mean 1.2e-05\n{0.0123, -0.0345, ..., 0.0211}" (the rows stay a Lua array).
Result<int> host_array_tostring(lua_State* L) {
  if (lua_type(L, 1) != LUA_TTABLE) return arg_error(L, 1, "HostArray:__tostring", "", "table");
  std::string path, type;
  if (lua_getmetatable(L, 1)) {
    lua_pushstring(L, "__index");
    if (lua_rawget(L, -2) == LUA_TTABLE) {
      if (push_field(L, -1, "path") == LUA_TSTRING) path = lua_tostring(L, -1);
      lua_pop(L, 1);
      if (push_field(L, -1, "type") == LUA_TSTRING) type = lua_tostring(L, -1);
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, 1));
  double lo = 0, hi = 0, sum = 0;
  std::vector<std::string> shown;
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, 1, i);
    const double x = lua_tonumber(L, -1);
    lua_pop(L, 1);
    lo = i == 1 ? x : std::min(lo, x);
    hi = i == 1 ? x : std::max(hi, x);
    sum += x;
    if (i <= 6 || i > n - 2) shown.push_back(fmt::format("{:.4g}", x));
    if (i == 6 && n > 8) shown.push_back("...");
  }
  std::string out = fmt::format("{}: {} ({} values) min {:.4g} max {:.4g} mean {:.4g}\n{{{}}}", path, type, n, lo,
                                hi, n > 0 ? sum / static_cast<double>(n) : 0.0, fmt::join(shown, ", "));
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}

Result<int> trainer_param(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:param"));
  ENG_ASSIGN_OR_RETURN(std::string name, arg_string(L, 2, "Trainer:param", "name"));
  Result<std::vector<float>> host = t->fetch_argument(name);
  if (!host.ok()) return with_context("Trainer:param", host.status());
  lua_createtable(L, static_cast<int>(host->size()), 0);
  for (size_t i = 0; i < host->size(); ++i) {
    lua_pushnumber(L, (*host)[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  // Printed as a summary: a.path, a.type ("f32[256,256]") and a.shape through the metatable.
  const int arg = t->program().find_arg(name);
  lua_createtable(L, 0, 3);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, name.c_str());
  lua_setfield(L, -2, "path");
  if (arg >= 0) {
    const eng::ValueInfo& v = t->program().value(t->program().args()[static_cast<size_t>(arg)].value);
    lua_pushstring(L, v.type_string().c_str());
    lua_setfield(L, -2, "type");
    lua_createtable(L, v.shape.rank(), 0);
    for (int d = 0; d < v.shape.rank(); ++d) {
      lua_pushinteger(L, v.shape.dims()[static_cast<size_t>(d)]);
      lua_rawseti(L, -2, d + 1);
    }
    lua_setfield(L, -2, "shape");
  }
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, lua_entry<host_array_tostring>);
  lua_setfield(L, -2, "__tostring");
  lua_pushstring(L, "HostArray");
  lua_setfield(L, -2, "__name");
  lua_setmetatable(L, -2);
  return 1;
}

// ---- Sharding inspection and store snapshots ---------------------------------------------

// The trainer's run recorder keeps one snapshot per (run, step): repeated t:shardings() in a
// REPL add no rows; a trainer not recording a run writes nothing.
Status maybe_snapshot(const eng::Trainer& t, const eng::ShardingTable& table) {
  Result<int64_t> id = t.recorder().record_shardings(t.current_step(), table);
  if (!id.ok()) return with_context("Trainer:shardings: store", id.status());
  return eng::ok_status();
}

Result<eng::ShardingTable> table_of(const eng::Trainer& t, std::string_view fn) {
  Result<eng::ShardingTable> tab = eng::trainer_shardings(t);
  if (!tab.ok()) return with_context(fn, tab.status());
  return tab;
}

Result<int> push_trainer_shardings(lua_State* L, const eng::Trainer& t) {
  constexpr std::string_view fn = "Trainer:shardings";
  // t:shardings([pattern] [, {skipped = true}]), or t:shardings{skipped = true}.
  const int opts = lua_type(L, 2) == LUA_TTABLE ? 2 : 3;
  std::optional<std::string> pattern;
  if (opts == 3) {
    ENG_ASSIGN_OR_RETURN(pattern, opt_string(L, 2, fn, "pattern"));
  }
  ENG_ASSIGN_OR_RETURN(eng::ShardingTable table, table_of(t, fn));
  ENG_RETURN_IF_ERROR(maybe_snapshot(t, table));
  if (pattern) {
    std::erase_if(table.rows, [&](const eng::ShardingRow& r) {
      return r.path.find(*pattern) == std::string::npos;
    });
  }
  return push_trainer_sharding_table(L, std::move(table), t.raw_config(), opts, fn);
}

Result<int> push_trainer_audit(lua_State* L, const eng::Trainer& t) {
  constexpr std::string_view fn = "Trainer:audit";
  ENG_ASSIGN_OR_RETURN(std::optional<double> tol, opt_number(L, 2, fn, "tolerance"));
  Result<eng::ReplicationReport> r =
      eng::audit_trainer(t, tol.value_or(t.raw_config().get_float("sharding_tolerance")));
  if (!r.ok()) return with_context(fn, r.status());
  push_audit_report(L, *r);
  return 1;
}

Result<int> push_trainer_visualize(lua_State* L, const eng::Trainer& t) {
  constexpr std::string_view fn = "Trainer:visualize";
  ENG_ASSIGN_OR_RETURN(std::string path, arg_string(L, 2, fn, "path"));
  ENG_ASSIGN_OR_RETURN(eng::ShardingTable table, table_of(t, fn));
  const eng::ShardingRow* row = table.find(path);
  if (!row) {
    std::vector<std::string> paths, near;
    for (const auto& r : table.rows) {
      paths.push_back(r.path);
      if (r.path.find(path) != std::string::npos && near.size() < 3) near.push_back(r.path);
    }
    std::string hint = did_you_mean(path, paths);
    if (!hint.empty()) near = {hint};
    return eng::invalid_argument("{}: no array '{}' in the trainer's state{}", fn, path,
                                 near.empty() ? "; see t:shardings() for the paths"
                                              : fmt::format(" (did you mean '{}'?)", fmt::join(near, "', '")));
  }
  ShapedSharding x{row->shape, eng::NamedSharding{table.mesh, row->spec},
                   std::string(eng::dtype_name(row->dtype)), row->path, 3};
  ENG_ASSIGN_OR_RETURN(std::string s, render_sharding(L, x, 3, fn));
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

Result<int> trainer_shardings(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:shardings"));
  return push_trainer_shardings(L, *t);
}
// The paths of t:shardings() without recording anything (the REPL completes strings from them).
Result<int> trainer_paths(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:paths"));
  ENG_ASSIGN_OR_RETURN(eng::ShardingTable table, table_of(*t, "Trainer:paths"));
  lua_createtable(L, static_cast<int>(table.rows.size()), 0);
  for (size_t i = 0; i < table.rows.size(); ++i) {
    lua_pushstring(L, table.rows[i].path.c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}
// t:num_params() -> total, active: every parameter, and those one token's forward pass reads
// (equal for a dense model; the routed experts a token skips are not active).
Result<int> trainer_num_params(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:num_params"));
  lua_pushinteger(L, t->config().model.num_params());
  lua_pushinteger(L, t->config().model.num_active_params());
  return 2;
}
Result<int> trainer_audit(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:audit"));
  return push_trainer_audit(L, *t);
}
Result<int> trainer_visualize(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:visualize"));
  return push_trainer_visualize(L, *t);
}

Result<int> trainer_property(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer"));
  std::string key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (key == "current_step") lua_pushinteger(L, t->current_step());
  else if (key == "mesh") push_udata(L, t->mesh());
  else if (key == "run_id" && !t->run_id().empty()) lua_pushstring(L, t->run_id().c_str());
  else if (key == "run" && !t->run_id().empty() && t->recorder().store() != nullptr)
    return push_run(L, *t->recorder().store(), t->run_id(), "Trainer.run");
  else lua_pushnil(L);
  return 1;
}

// t:tag{k=v, ...} and t:log{name=value, ...}: string keys; tag values as strings, logged values
// numbers (recorded at the last step run).
Result<int> trainer_tag_or_log(lua_State* L, bool log) {
  const std::string_view fn = log ? "Trainer:log" : "Trainer:tag";
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, fn));
  ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, log ? "values" : "tags"));
  std::vector<std::pair<std::string, std::string>> tags;
  std::vector<std::pair<std::string, double>> values;
  lua_pushnil(L);
  while (lua_next(L, 2) != 0) {
    const int kt = lua_type(L, -2), vt = lua_type(L, -1);
    const bool ok = kt == LUA_TSTRING && (log ? vt == LUA_TNUMBER : vt == LUA_TSTRING || vt == LUA_TNUMBER || vt == LUA_TBOOLEAN);
    if (!ok) {
      const std::string msg = fmt::format("{}: expected {{name = {}}}, got a {} key with a {} value", fn,
                                          log ? "number" : "string", lua_typename(L, kt), lua_typename(L, vt));
      lua_pop(L, 2);
      return eng::invalid_argument("{}", msg);
    }
    std::string key = lua_tostring(L, -2);
    if (log) values.emplace_back(std::move(key), lua_tonumber(L, -1));
    else if (vt == LUA_TBOOLEAN) tags.emplace_back(std::move(key), lua_toboolean(L, -1) ? "true" : "false");
    else tags.emplace_back(std::move(key), std::string(lua_tostring(L, -1)));  // no __tostring
    lua_pop(L, 1);  // keep the key
  }
  const int64_t step = std::max<int64_t>(0, t->current_step() - 1);
  for (const auto& [k, v] : tags) ENG_RETURN_IF_ERROR(with_context(fn, t->recorder().set_tag(k, v)));
  for (const auto& [k, v] : values)
    ENG_RETURN_IF_ERROR(with_context(fn, t->recorder().log_value(k, step, v)));
  lua_settop(L, 1);
  return 1;
}
Result<int> trainer_pipeline(lua_State* L) {  // lua_pipeline.cpp
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:pipeline"));
  return push_trainer_pipeline(L, *t);
}

Result<int> trainer_experts(lua_State* L) {  // lua_experts.cpp
  ENG_ASSIGN_OR_RETURN(eng::Trainer * t, arg_trainer(L, "Trainer:experts"));
  return push_trainer_experts(L, *t);
}

Result<int> trainer_tag(lua_State* L) { return trainer_tag_or_log(L, false); }
Result<int> trainer_log(lua_State* L) { return trainer_tag_or_log(L, true); }

// A trainer collected while Ctrl-C is pending (a script stopped by "interrupted!", say in a
// t:step() loop) ends its run KILLED, as one stopped inside t:train{} does.
int trainer_gc(lua_State* L) {
  TrainerBox* box = to_udata<TrainerBox>(L, 1);
  if (box != nullptr && box->trainer && shell_interrupt_requested())
    box->trainer->recorder().set_interrupted(true);
  return udata_gc<TrainerBox>(L);
}

// ---- sl.plan ----------------------------------------------------------------------------

// sl.plan(config [, {causal_attention_halved=bool, store=bool}]) -> Compiled with c.predicted.
Result<int> plan_new(lua_State* L) {
  constexpr std::string_view fn = "sl.plan";
  ENG_ASSIGN_OR_RETURN(eng::Config * cfg, arg_udata<eng::Config>(L, 1, fn, "config"));
  eng::PlanOptions options;
  bool record = true;
  if (!lua_isnoneornil(L, 2)) {
    ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "options"));
    static const std::vector<std::string> kAllowed = {"causal_attention_halved", "store"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kAllowed));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> halved,
                         field_bool(L, 2, "causal_attention_halved", fn));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> use_store, field_bool(L, 2, "store", fn));
    options.causal_attention_halved = halved.value_or(true);
    record = use_store.value_or(true);
  }
  if (record && eng::dist::process().index == 0) {
    Result<eng::MetricsStore*> store = context(L).open_store();
    if (!store.ok()) return with_context(fn, store.status());
    options.store = *store;
  }
  eng::TrainerOptions argv_holder;
  command_line(L, argv_holder);
  options.argv = std::move(argv_holder.argv);
  options.script = std::move(argv_holder.script);
  ENG_ASSIGN_OR_RETURN(eng::Plan plan, with_context(fn, eng::plan_for_topology(*cfg, options)));
  push_udata(L, CompiledBox{plan.exe, plan.trainer->program().name(),
                            plan.trainer->last_compile(), eng::pipeline_shape_of(plan.trainer->config()),
                            std::move(plan.predicted)});
  return 1;
}

constexpr Function kTrainFunctions[] = {
    {"trainer", lua_entry<trainer_new>,
     "sl.trainer(config [, mesh] [, {shape_only=true, device_capacity_bytes=N, store=false}]) -> Trainer",
     "Traces train_step (forward + backward + AdamW as one program) for the config on the mesh\n"
     "  (default: one device) and initialises parameters, optimizer state and data. With\n"
     "  shape_only=true it only traces and compiles (no arrays): memory analysis for meshes and\n"
     "  models far larger than this machine. The run is recorded in the metrics store (--db)\n"
     "  unless store=false."},
    {"plan", lua_entry<plan_new>,
     "sl.plan(config [, {causal_attention_halved=true, store=true}]) -> Compiled",
     "A shape-only compile of train_step for the config's compile_topology (MaxText's names:\n"
     "  v5p-256, v6e-256, a3, ...; compile_topology_num_slices slices; the mesh from the\n"
     "  ici_* and dcn_* keys, laid on the torus as MaxText lays it; no sl.mesh needed), with\n"
     "  c.predicted: step_time_s, tflops_per_device (MaxText's count; causal_attention_halved=\n"
     "  false for logs before MaxText PR #1988), tokens_per_s_per_device, mfu, fits (peak vs\n"
     "  HBM), the breakdown (compute by op class, collectives by mesh axes, exposed) and the\n"
     "  bound. Written to the store's predictions table (docs/prediction.md)."},
};

constexpr Method kTrainerMethods[] = {
    {"compile", trainer_compile, "t:compile([{verbose=bool}]) -> Compiled",
     "Compiles train_step ahead of time (cached: later steps reuse it). verbose (default: on in\n"
     "  the REPL, off in scripts and notebooks) prints MaxText's memory lines, each naming the mesh."},
    {"step", lua_entry<trainer_step>, "t:step() -> StepHandle",
     "Dispatches one training step on the next batch and returns at once (asynchronous, as in\n"
     "  JAX); the handle's loss synchronises when read: h = t:step(); print(h.loss)."},
    {"train", trainer_train, "t:train{steps=N, quiet=false} -> {steps, last, interrupted}",
     "Runs N steps (default: up to config steps); a progress bar on a terminal, MaxText step\n"
     "  lines otherwise. Ctrl-C stops cleanly after the current step: the result has\n"
     "  interrupted = true and no error is raised (a second Ctrl-C ends the process). A run that\n"
     "  ends with the learning rate still in its warmup (e.g. steps=3 of MaxText's default\n"
     "  150001-step schedule) prints a warning, once per trainer."},
    {"program", lua_entry<trainer_program>, "t:program() -> string",
     "The traced train_step as jaxpr-like text."},
    {"config", lua_entry<trainer_config>, "t:config() -> Config", "The trainer's configuration."},
    {"param", lua_entry<trainer_param>, "t:param(name) -> {number}",
     "Host copy of a parameter or optimizer-state array by its path (e.g. \"params/decoder/decoder_norm/scale\"):\n"
     "  a Lua array of its values (row-major); a.path, a.type, a.shape; prints as a summary."},
    {"shardings", lua_entry<trainer_shardings>,
     "t:shardings([pattern] [, {skipped = true}]) -> ShardingTable",
     "How every array of the state is split (params, optimizer state, step, batch), as compile()\n"
     "  places it: rows of path, type (jax.typeof form \"f32[256@fsdp,704@tensor]\"), logical,\n"
     "  spec, local_shape, bytes per device, and the logical-axis rule that fired for each dim\n"
     "  (#n in the merged rule list; row.rules). {skipped = true} also prints, per dim, the rules\n"
     "  of its name that did not fire and why. Prints aligned; tab:dump() gives MaxText's\n"
     "  debug_sharding form. `pattern` keeps paths containing it. Works on shape_only trainers.\n"
     "  Recorded in the store's tensor_shardings table (once per step) when the run is recorded."},
    {"paths", lua_entry<trainer_paths>, "t:paths() -> {string}",
     "The paths of the state's arrays, in t:shardings() order (params, optimizer state, step,\n"
     "  batch); what t:param, t:visualize and t:shardings take. Records nothing."},
    {"audit", lua_entry<trainer_audit>, "t:audit([tolerance]) -> AuditReport",
     "MaxText's assert_params_sufficiently_sharded as a report: parameters not sharded on every\n"
     "  non-trivial axis (fsdp, tensor, context, stage, expert, ...), largest first, with the axes\n"
     "  each misses; exceeds = their share of elements > tolerance (default: the config's\n"
     "  sharding_tolerance, 0.02)."},
    {"num_params", lua_entry<trainer_num_params>, "t:num_params() -> total, active",
     "The model's parameter count and the parameters one token's forward pass reads (the\n"
     "  same for dense models). Training prints MaxText's \"number parameters: N billion\"."},
    {"tag", lua_entry<trainer_tag>, "t:tag{key = value, ...} -> t",
     "Tags the run in the store (MLflow's set_tag): string keys, values as strings."},
    {"log", lua_entry<trainer_log>, "t:log{name = number, ...} -> t",
     "Logs free-form metrics into the store's metrics table at the last step run (context train)."},
    {"pipeline", lua_entry<trainer_pipeline>, "t:pipeline([{measure = bool}]) -> Pipeline",
     "The pipeline schedule (ici_pipeline_parallelism > 1) as a value: S, M, R, delay,\n"
     "  iterations, grid[i + 1][s + 1] = {microbatch_id, repeat_id | bubble}, bubble_fraction\n"
     "  counted from the grid, per_iteration (instructions, collective bytes per axis);\n"
     "  prints as a Gantt chart, p:svg() draws it. {measure = true} times every later step's\n"
     "  instructions; then p.measured = the share of step time spent in bubble slots."},
    {"experts", lua_entry<trainer_experts>, "t:experts() -> ExpertLoad",
     "Mixture of experts: the last step's tokens routed to each expert and dropped over\n"
     "  capacity, per layer, printed as a table with a sparkline per layer (fields step,\n"
     "  capacity, layers[l + 1] = {tokens = {...}, dropped = {...}}). The store has the same\n"
     "  numbers per step: metrics moe/layer_<l>/expert_<e>/tokens and .../dropped."},
    {"visualize", lua_entry<trainer_visualize>, "t:visualize(path [, {dims={i, j}, color=bool}]) -> string",
     "The device grid of one array of the state (see sl.visualize), e.g.\n"
     "  t:visualize(\"params/decoder/layers_0/mlp/wi_0/kernel\")."},
};
constexpr const char* kTrainerProperties[] = {"current_step", "mesh", "run_id", "run"};

constexpr Method kHandleMethods[] = {
    {"wait", lua_entry<handle_metrics>, "h:wait() -> {step, loss, ...}",
     "Waits for the step and returns all its metrics."},
    {"ready", lua_entry<handle_ready>, "h:ready() -> boolean", "Finished on the devices (never blocks)."},
};
constexpr const char* kHandleProperties[] = {"step", "loss", "total_weights", "grad_norm", "lr",
                                             "step_time_s"};


}  // namespace

void open_lua_train(lua_State* L, int sl) {
  define_type(L, {"Trainer",
                  "A training run: config, mesh, the traced train_step, its arrays and data.\n"
                  "  Fields: t.current_step (the next step to run), t.mesh, t.run_id and\n"
                  "  t.run (the run in the metrics store, as sl.run gives it; nil when not recorded).",
                  lua_entry<trainer_tostring>, nullptr, trainer_gc, kTrainerMethods,
                  lua_entry<trainer_property>, kTrainerProperties});
  define_type(L, {"StepHandle",
                  "A dispatched training step. h.step is known at once; h.loss (and the other metric\n"
                  "  fields) wait for the devices, like reading a JAX array.",
                  lua_entry<handle_tostring>, nullptr, udata_gc<HandleBox>, kHandleMethods,
                  lua_entry<handle_property>, kHandleProperties});
  add_functions(L, sl, "sl", kTrainFunctions);
}

}  // namespace shell
