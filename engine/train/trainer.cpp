// engine/train/trainer.cpp: state initialisation, compile, and asynchronous steps (the host
// loads and dispatches; the dispatcher thread uploads, executes and fetches metrics).
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/base/thread_pool.h"
#include "engine/model/llama.h"
#include "engine/runtime/dispatch.h"

namespace eng {

namespace {

// The six batch arrays in declare_batch's argument order (HostBatch::arrays() without the
// vector it allocates).
const int32_t* batch_array(const HostBatch& b, int k) {
  switch (k) {
    case 0: return b.inputs.data();
    case 1: return b.inputs_position.data();
    case 2: return b.inputs_segmentation.data();
    case 3: return b.targets.data();
    case 4: return b.targets_position.data();
    default: return b.targets_segmentation.data();
  }
}

constexpr int kNumBatchArrays = 6;

Result<std::vector<int64_t>> parse_steps(const Config& c, const char* key) {
  std::vector<int64_t> out;
  const std::string s = c.get_string(key);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(pos, comma - pos);
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0)
      return invalid_argument("config: {} must be comma-separated step numbers like \"3,7\", got '{}'",
                              key, s);
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::string step_line(const StepMetrics& m) {
  return fmt::format(
      "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, "
      "total_weights: {}, loss: {:.3f}",
      m.step, m.step_time_s, m.tflops_per_s_per_device, m.tokens_per_s_per_device,
      static_cast<int64_t>(m.total_weights), m.loss);
}

// ---- StepHandle --------------------------------------------------------------------------

bool StepHandle::ready() const {
  return trainer_ != nullptr && trainer_->dispatcher_->done(ticket_);
}

Result<StepMetrics> StepHandle::wait() {
  if (trainer_ == nullptr) return failed_precondition("step handle: empty (no step was dispatched)");
  ENG_RETURN_IF_ERROR(trainer_->wait_ticket(ticket_));
  return trainer_->metrics_of(ticket_, step_);
}

Result<double> StepHandle::loss() {
  ENG_ASSIGN_OR_RETURN(StepMetrics m, wait());
  return m.loss;
}

// ---- Trainer -------------------------------------------------------------------------------

Trainer::~Trainer() {
  if (dispatcher_) {
    if (!dispatcher_->wait_all().ok()) failed_ = true;
    dispatcher_.reset();
  }
  if (options_.store != nullptr && !run_id_.empty()) {
    (void)options_.store->flush();
    (void)options_.store->end_run(run_id_, failed_ ? RunStatus::kFailed : RunStatus::kFinished);
  }
}

Result<std::unique_ptr<Trainer>> Trainer::create(const Config& config, const Mesh& mesh,
                                                 TrainerOptions options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->raw_config_ = config;
  t->mesh_ = mesh;
  t->options_ = options;
  ENG_ASSIGN_OR_RETURN(t->config_, resolve_config(config, mesh.num_devices()));
  ENG_RETURN_IF_ERROR(check_mesh_matches_config(config, mesh));
  t->program_ = build_train_step(t->config_, &t->layout_);
  t->tflops_ = calculate_tflops_training_per_device(
      t->config_.model, static_cast<double>(t->config_.global_batch_size) / mesh.num_devices(),
      t->config_.max_target_length);
  const int64_t inflight = config.get_int("max_inflight_steps");
  if (inflight < 0 || inflight >= kStepSlots)
    return invalid_argument("config: max_inflight_steps must be in [0, {}), got {}", kStepSlots, inflight);
  t->max_inflight_ = static_cast<int>(inflight);
  t->log_period_ = config.get_int("log_period");
  if (t->log_period_ < 1)
    return invalid_argument("config: log_period must be >= 1, got {}", t->log_period_);
  ENG_ASSIGN_OR_RETURN(t->delay_steps_, parse_steps(config, "debug_device_delay_steps"));
  ENG_ASSIGN_OR_RETURN(t->ckpt_delay_steps_, parse_steps(config, "debug_checkpoint_delay_steps"));
  t->delay_s_ = config.get_float("debug_device_delay_seconds");
  t->ckpt_delay_s_ = config.get_float("debug_checkpoint_delay_seconds");
  t->compile_delay_s_ = config.get_float("debug_compile_delay_seconds");
  t->persistent_.dir = config.get_string("compilation_cache_dir");
  t->persistent_.min_compile_time_s = config.get_float("persistent_cache_min_compile_time_secs");
  t->persistent_.min_entry_size_bytes = config.get_int("persistent_cache_min_entry_size_bytes");
  t->persistent_.max_size_bytes = config.get_int("compilation_cache_max_size");
  t->log_compiles_ = config.get_bool("log_compiles");
  t->explain_misses_ = config.get_bool("explain_cache_misses");
  t->aot_batch_sharding_ = config.get_bool("aot_shaped_batch_sharding");
  if (config.get_bool("enable_checkpointing")) {
    if (config.get_string("base_output_directory").empty() || config.get_string("run_name").empty())
      return invalid_argument(
          "config: enable_checkpointing needs base_output_directory and run_name (checkpoints go "
          "to <base_output_directory>/<run_name>/checkpoints), got '{}' and '{}'",
          config.get_string("base_output_directory"), config.get_string("run_name"));
    if (config.get_int("checkpoint_period") <= 0)
      return invalid_argument("config: checkpoint_period must be positive, got {}",
                              config.get_int("checkpoint_period"));
  }
  if (!options.shape_only) {
    ENG_ASSIGN_OR_RETURN(t->data_, make_data_source(t->config_));
    ENG_RETURN_IF_ERROR(t->init_state());
    ENG_RETURN_IF_ERROR(t->begin_store_run());
    ENG_RETURN_IF_ERROR(t->restore());
    ENG_RETURN_IF_ERROR(t->setup_dispatch());
  }
  return t;
}

NamedSharding Trainer::state_sharding(int arg) {
  // Where compile() will expect argument `arg` (SPMD, engine/compile/spmd.h): computed once
  // from the config, never from an executable, so the arrays' shardings are what the cache
  // key sees. An invalid config falls back to replicated here and compile() reports the error.
  if (placement_.empty()) {
    Result<CompileOptions> opts = compile_options_from_config(raw_config_);
    Result<std::vector<NamedSharding>> s =
        opts.ok() ? argument_shardings(program_, mesh_, *opts)
                  : Result<std::vector<NamedSharding>>(opts.status());
    if (s.ok()) placement_ = *std::move(s);
    else placement_.assign(program_.args().size(), NamedSharding{mesh_, PartitionSpec()});
  }
  return placement_[arg];
}

Status Trainer::init_state() {
  runtime_ = std::make_unique<Runtime>(mesh_, options_.device_capacity_bytes);
  const auto& args = program_.args();
  state_.clear();
  state_.reserve(args.size());
  std::vector<float> host;
  for (size_t i = 0; i < args.size(); ++i) {
    const ValueInfo& v = program_.value(args[i].value);
    const NamedSharding sharding = state_sharding(static_cast<int>(i));
    if (args[i].role == ArgRole::kParam) {
      host.resize(static_cast<size_t>(v.shape.numel()));
      init_param(v, config_.init_weights_seed, host.data());
      ENG_ASSIGN_OR_RETURN(Array a, runtime_->put(host.data(), v.shape, v.dtype, sharding, v.name));
      state_.push_back(std::move(a));
    } else {
      ENG_ASSIGN_OR_RETURN(Array a, runtime_->zeros(v.shape, v.dtype, sharding, v.name));
      state_.push_back(std::move(a));
    }
  }
  arg_ptrs_.clear();
  for (Array& a : state_) arg_ptrs_.push_back(&a);
  return ok_status();
}

Status Trainer::setup_dispatch() {
  ENG_CHECK(layout_.metric_names.size() <= std::size(StepSlot{}.metrics), "trainer: {} metrics",
            layout_.metric_names.size());
  const int capacity = std::max(1, max_inflight_);
  staging_.resize(static_cast<size_t>(capacity));
  slots_.resize(kStepSlots);
  dispatcher_ = std::make_unique<Dispatcher>(
      [this](int64_t ticket, int64_t) { return device_step(ticket); }, capacity);
  return ok_status();
}

Result<std::shared_ptr<const Executable>> Trainer::compile() {
  ENG_ASSIGN_OR_RETURN(Signature sig, aot_signature());
  bool missed = false;
  ENG_ASSIGN_OR_RETURN(int j, lookup(std::move(sig), "Trainer::compile (AOT)", step_, &missed));
  (void)j;
  return executable_;
}

Status Trainer::wait_ticket(int64_t ticket) const {
  Status s = dispatcher_->wait(ticket);
  if (!s.ok()) {
    const_cast<Trainer*>(this)->failed_ = true;
    return s;
  }
  return ok_status();
}

Result<StepHandle> Trainer::step() {
  if (options_.shape_only)
    return failed_precondition("trainer: created with shape_only=true; it can compile but not step");
  StepHandle h;
  h.trainer_ = this;
  h.step_ = step_;
  h.ticket_ = dispatcher_->submitted();
  // The staging batch and metric slot of this ticket were last used by ticket - capacity:
  // wait for it (this is the run-ahead bound) before overwriting them.
  const int64_t reuse = h.ticket_ - static_cast<int64_t>(staging_.size());
  if (reuse >= 0) ENG_RETURN_IF_ERROR(wait_ticket(reuse));
  StepSlot& slot = slots_[static_cast<size_t>(h.ticket_ % kStepSlots)];
  slot = StepSlot{};
  slot.ticket = h.ticket_;
  slot.step = step_;
  // The jit dispatch check: the arrays as placed against the executable in use (no
  // allocation); otherwise a full lookup with their signature (the first step after an AOT
  // compile for another signature: MaxText's double compilation when the shaped batch lacks
  // the sharding).
  const double t0 = now_seconds();
  const bool hit = current_ >= 0 && placed_matches(jitted_[current_].key.signature);
  if (!hit) {
    ENG_ASSIGN_OR_RETURN(int j, lookup(placed_signature(), "Trainer::step", step_, &slot.compiled));
    (void)j;
  }
  slot.exe = executable_.get();
  const double t1 = now_seconds();
  slot.compile_s = t1 - t0;
  data_->next(staging_[static_cast<size_t>(h.ticket_) % staging_.size()]);
  slot.data_s = now_seconds() - t1;
  ENG_ASSIGN_OR_RETURN(int64_t ticket, dispatcher_->submit(step_));
  ENG_CHECK(ticket == h.ticket_, "trainer: ticket {} != expected {}", ticket, h.ticket_);
  if (hit) record_hit(current_, step_);  // after submit: the store write overlaps the step
  ++step_;
  if (max_inflight_ == 0) ENG_RETURN_IF_ERROR(wait_ticket(ticket));  // synchronous mode
  return h;
}

Result<StepMetrics> Trainer::step_and_wait() {
  ENG_ASSIGN_OR_RETURN(StepHandle h, step());
  return h.wait();
}

Status Trainer::wait_all() {
  if (!dispatcher_) return ok_status();
  Status s = dispatcher_->wait_all();
  if (!s.ok()) failed_ = true;
  return s;
}

// Runs on the dispatcher thread: the only code that touches device arrays while steps are in
// flight. Allocates nothing.
Status Trainer::device_step(int64_t ticket) {
  StepSlot& slot = slots_[static_cast<size_t>(ticket % kStepSlots)];
  const HostBatch& batch = staging_[static_cast<size_t>(ticket) % staging_.size()];
  slot.device_start = now_seconds();
  for (int k = 0; k < kNumBatchArrays; ++k) {
    Status s = runtime_->write(state_[static_cast<size_t>(layout_.first_batch_arg + k)],
                               batch_array(batch, k));
    if (!s.ok()) return Status(s.code(), fmt::format("step {}: {}", slot.step, s.message()));
  }
  if (delay_s_ > 0 && contains(delay_steps_, slot.step))
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));  // debug: slow device
  Status s = runtime_->execute(*slot.exe, arg_ptrs_, outputs_);
  for (size_t k = 0; s.ok() && k < layout_.metric_names.size(); ++k)
    s = runtime_->fetch(outputs_[k], &slot.metrics[k]);
  if (!s.ok())
    return Status(s.code(), fmt::format("step {} failed on the devices: {}", slot.step, s.message()));
  slot.device_end = now_seconds();
  return ok_status();
}

Result<StepMetrics> Trainer::metrics_of(int64_t ticket, int64_t step) {
  const StepSlot& slot = slots_[static_cast<size_t>(ticket % kStepSlots)];
  if (slot.ticket != ticket || dispatcher_->submitted() > ticket + kStepSlots)
    return failed_precondition(
        "step handle: step {}'s metrics were overwritten by later steps (slot now holds step {}); "
        "read a handle within {} steps",
        step, slot.step, kStepSlots);
  StepMetrics m;
  m.step = slot.step;
  m.loss = slot.metrics[0];
  m.total_weights = slot.metrics[1];
  m.raw_grad_norm = slot.metrics[2];
  m.grad_norm = slot.metrics[3];
  m.param_norm = slot.metrics[4];
  m.learning_rate = slot.metrics[5];
  m.compiled = slot.compiled;
  m.compile_s = slot.compile_s;
  m.data_time_s = slot.data_s;
  m.device_time_s = slot.device_end - slot.device_start;
  m.synced = slot.synced_at > 0;
  m.step_time_s = m.synced ? slot.step_time_s : m.device_time_s;
  const double tokens = static_cast<double>(config_.global_batch_size * config_.max_target_length);
  m.tokens_per_s_per_device = tokens / mesh_.num_devices() / m.step_time_s;
  m.tflops_per_device = tflops_.total;
  m.tflops_per_s_per_device = tflops_.total / m.step_time_s;
  return m;
}

Result<std::vector<float>> Trainer::fetch_argument(const std::string& name) const {
  if (options_.shape_only) return failed_precondition("trainer: shape_only: no arrays to fetch");
  int i = program_.find_arg(name);
  if (i < 0) return not_found("trainer: no argument named '{}'", name);
  const ValueInfo& v = program_.value(program_.args()[i].value);
  if (v.dtype != DType::kF32) return invalid_argument("trainer: '{}' is not f32", name);
  ENG_RETURN_IF_ERROR(const_cast<Trainer*>(this)->wait_all());
  std::vector<float> host(static_cast<size_t>(v.shape.numel()));
  ENG_RETURN_IF_ERROR(runtime_->fetch(state_[i], host.data()));
  return host;
}

// ---- compile cache (engine/compile/cache.h) --------------------------------------------------

namespace {

constexpr const char* kFnName = "train_step";

CompilationRow cache_row(const std::string& run_id, std::optional<int64_t> step, const CacheKey& key,
                         std::string outcome, std::string level) {
  CompilationRow r;
  r.run_id = run_id;
  r.step = step;
  r.fn_name = kFnName;
  r.module_name = key.module_name();
  r.outcome = std::move(outcome);
  r.cache_level = std::move(level);
  r.cache_key = key.name();
  return r;
}

}  // namespace

Result<Signature> Trainer::aot_signature() {
  // MaxText after PR 4174: state as it will be placed, and get_shaped_batch(config,
  // batch_sharding=get_input_data_sharding(config, mesh)). Without the sharding (the debug
  // key), the batch is typed replicated, as JAX treats a ShapeDtypeStruct with sharding=None.
  std::vector<NamedSharding> shardings;
  for (size_t k = 0; k < program_.args().size(); ++k)
    shardings.push_back(state_sharding(static_cast<int>(k)));
  if (!aot_batch_sharding_)
    for (size_t k = static_cast<size_t>(layout_.first_batch_arg); k < shardings.size(); ++k)
      shardings[k] = NamedSharding{mesh_, PartitionSpec()};
  return signature_of(program_, shardings);
}

Signature Trainer::placed_signature() const {
  Signature sig;
  for (size_t k = 0; k < state_.size(); ++k) {
    const Array& a = state_[k];
    sig.args.push_back({program_.value(program_.args()[k].value).name, a.shape, a.dtype, a.sharding});
  }
  return sig;
}

bool Trainer::placed_matches(const Signature& sig) const {
  if (sig.args.size() != state_.size()) return false;
  for (size_t k = 0; k < state_.size(); ++k) {
    const ArgType& t = sig.args[k];
    const Array& a = state_[k];
    if (!(a.shape == t.shape) || a.dtype != t.dtype || !(a.sharding == t.sharding)) return false;
  }
  return true;
}

Result<std::shared_ptr<const Executable>> Trainer::compile_for(const Signature& sig,
                                                               const CompileOptions& opts) {
  // The global program with every argument's spec fixed to the signature's: the executable
  // is compiled for exactly the types it is keyed by.
  Program p = program_;
  for (size_t k = 0; k < sig.args.size(); ++k) {
    if (!(sig.args[k].sharding.mesh == mesh_))
      return invalid_argument("compile: argument '{}' lives on {}, the trainer's mesh is {}",
                              sig.args[k].name, sig.args[k].sharding.mesh.to_string(), mesh_.to_string());
    p.mutable_value(p.args()[k].value).spec = sig.args[k].sharding.spec;
  }
  return eng::compile(p, mesh_, opts);
}

Result<int> Trainer::lookup(Signature sig, const std::string& site, std::optional<int64_t> step,
                            bool* missed) {
  *missed = false;
  if (!compile_options_) {
    ENG_ASSIGN_OR_RETURN(CompileOptions o, compile_options_from_config(raw_config_));
    compile_options_ = o;
  }
  if (program_digest_.empty()) program_digest_ = program_digest(program_);
  CacheKey key = make_cache_key(kFnName, program_digest_, mesh_, *compile_options_, std::move(sig));
  // 1. tracing: this train_step's own cache.
  for (size_t i = 0; i < jitted_.size(); ++i) {
    if (!(jitted_[i].key == key)) continue;
    current_ = static_cast<int>(i);
    executable_ = jitted_[i].exe;
    last_compile_ = {jitted_[i].key_hex, key.name(), "hit", "tracing", "", "", 0};
    record_hit(current_, step.value_or(step_));
    return current_;
  }
  *missed = true;
  std::vector<CacheKey> seen;
  for (const Jitted& j : jitted_) seen.push_back(j.key);
  const MissExplanation why = explain_miss(key, seen, site);
  if (explain_misses_) compile_log(why.text);
  std::vector<CompilationRow> rows;
  rows.push_back(cache_row(run_id_, step, key, "miss", "tracing"));
  rows.back().reason_kind = why.kind;
  rows.back().reason_text = why.text;
  rows.back().in_signature = key.signature.to_string();
  rows.back().in_shardings = key.signature.shardings_string();
  CompileInfo info{key.hex(), key.name(), "hit", "executable", why.kind, why.text, 0};
  // 2. executable: the process-wide in-memory cache, by the full key.
  std::shared_ptr<const Executable> exe = ExecutableCache::global().find(key);
  int analysis_row = -1;
  if (exe) {
    rows.push_back(cache_row(run_id_, step, key, "hit", "executable"));
    analysis_row = static_cast<int>(rows.size()) - 1;
  } else {
    rows.push_back(cache_row(run_id_, step, key, "miss", "executable"));
    rows.back().reason_kind = "never_seen";
    rows.back().reason_text = "not in this process's executable cache";
    const int exe_row = static_cast<int>(rows.size()) - 1;
    // 3. persistent: compilation_cache_dir.
    if (!persistent_.dir.empty()) {
      PersistentLoad l = persistent_load(persistent_.dir, key);
      if (l.exe) {
        exe = l.exe;
        if (log_compiles_)
          compile_log(fmt::format("Persistent compilation cache hit for '{}' with key '{}'",
                                  key.module_name(), key.name()));
        rows.push_back(cache_row(run_id_, step, key, "hit", "persistent"));
        rows.back().entry_bytes = l.entry_bytes;
        rows.back().reason_text = fmt::format("loaded {} in {:.3f} s", key.name(), l.load_s);
        analysis_row = static_cast<int>(rows.size()) - 1;
        info.level = "persistent";
      } else {
        if (explain_misses_)
          compile_log(fmt::format("PERSISTENT COMPILATION CACHE MISS for '{}' with key '{}': {}",
                                  key.module_name(), key.name(), l.miss_reason));
        rows.push_back(cache_row(run_id_, step, key, "miss", "persistent"));
        rows.back().reason_kind = l.miss_reason == "no entry" ? "never_seen" : "unavailable";
        rows.back().reason_text = l.miss_reason;
        if (l.entry_bytes > 0) rows.back().entry_bytes = l.entry_bytes;
        if (l.miss_reason != "no entry")
          record_event("compile_cache", "warning", step.value_or(step_),
                       fmt::format("persistent cache entry {} rejected: {}", key.name(), l.miss_reason));
      }
    }
    if (!exe) {
      if (log_compiles_)
        compile_log(fmt::format("Compiling {} with global shapes and types [{}]. Argument mapping: ({}).",
                                key.module_name(), key.signature.to_string(),
                                key.signature.shardings_string()));
      const double t0 = now_seconds();
      ENG_ASSIGN_OR_RETURN(exe, compile_for(key.signature, *compile_options_));
      if (compile_delay_s_ > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(compile_delay_s_));
      const double dt = now_seconds() - t0;
      ++num_compiles_;
      info.outcome = "miss";
      info.level = persistent_.dir.empty() ? "executable" : "persistent";  // the last to miss
      info.compile_s = dt;
      rows[exe_row].compile_s = dt;
      analysis_row = exe_row;
      if (log_compiles_) {
        compile_log(fmt::format("Finished XLA compilation of jit({}) in {:.9f} sec", kFnName, dt));
        compile_log(exe->memory().to_string());
        compile_log("Note that compiler could over-estimate the HBM usage.");
      }
      record_event(jitted_.empty() ? "compile" : "recompile", "info", step.value_or(step_),
                   fmt::format("compiled train_step in {:.3f} s ({})", dt, why.kind));
      if (!persistent_.dir.empty()) {
        PersistentStore w = persistent_store(persistent_, key, *exe, dt);
        if (w.written || !w.skip_reason.empty() || !w.status.ok()) {
          rows.push_back(cache_row(run_id_, step, key, w.written ? "write" : "skip", "persistent"));
          rows.back().compile_s = dt;
          rows.back().entry_bytes = w.entry_bytes;
          rows.back().reason_text = w.written ? persistent_entry_path(persistent_.dir, key)
                                              : w.status.ok() ? w.skip_reason : w.status.message();
        }
        if (log_compiles_ && w.written)
          compile_log(fmt::format("Writing {} to persistent compilation cache with key '{}'",
                                  key.module_name(), key.name()));
        else if (log_compiles_ && !w.skip_reason.empty())
          compile_log(w.skip_reason);
        if (!w.status.ok()) compile_log(w.status.message());
      }
    }
    ExecutableCache::global().insert(key, exe);
  }
  record_compilation_rows(rows, analysis_row, *exe);
  jitted_.push_back({std::move(key), exe, info.key});
  current_ = static_cast<int>(jitted_.size()) - 1;
  executable_ = exe;
  last_compile_ = std::move(info);
  return current_;
}

void Trainer::record_hit(int jitted, int64_t step) {
  if (options_.store == nullptr) return;
  CompilationRow r = cache_row(run_id_, step, jitted_[jitted].key, "hit", "tracing");
  (void)options_.store->record_compilation(r);  // best effort, like record_event
}

void Trainer::record_compilation_rows(std::vector<CompilationRow>& rows, int analysis_row,
                                      const Executable& exe) {
  if (options_.store == nullptr) return;
  MetricsStore& store = *options_.store;
  for (size_t i = 0; i < rows.size(); ++i) {
    Result<int64_t> id = store.record_compilation(rows[i]);
    if (!id.ok() || static_cast<int>(i) != analysis_row) continue;
    const MemoryAnalysis& m = exe.memory();
    MemoryAnalysisRow mr;
    mr.argument_size_in_bytes = m.argument_bytes;
    mr.output_size_in_bytes = m.output_bytes;
    mr.alias_size_in_bytes = m.alias_bytes;
    mr.temp_size_in_bytes = m.temp_bytes;
    mr.peak_memory_in_bytes = m.peak_bytes();
    if (options_.device_capacity_bytes > 0) mr.device_limit_bytes = options_.device_capacity_bytes;
    (void)store.record_memory_analysis(*id, mr);
    std::vector<std::pair<std::string, double>> costs = {{"flops", exe.cost().flops},
                                                         {"bytes accessed", exe.cost().bytes_accessed}};
    for (const auto& [axes, bytes] : exe.cost().collective_bytes)
      costs.emplace_back("collective bytes " + axes, bytes);
    (void)store.record_cost_analysis(*id, costs);
  }
}

}  // namespace eng
