// engine/train/trainer.cpp: state initialisation, compile, and asynchronous steps (the host
// loads and dispatches; the dispatcher thread uploads, executes and fetches metrics).
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <thread>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/base/thread_pool.h"
#include "engine/dist/dist.h"
#include "engine/model/llama.h"
#include "engine/runtime/dispatch.h"
#include "engine/tensor/kernels.h"
#include "engine/train/state_memory.h"

namespace eng {

namespace {

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
  if (recorder_)
    recorder_->end(failed_ ? RunStatus::kFailed : RunStatus::kFinished, step_ > first_step_);
}

Result<std::unique_ptr<Trainer>> Trainer::create(const Config& config, const Mesh& mesh,
                                                 TrainerOptions options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->raw_config_ = config;
  t->mesh_ = mesh;
  t->options_ = options;
  ENG_ASSIGN_OR_RETURN(t->config_, resolve_config(config, mesh.num_devices()));
  ENG_RETURN_IF_ERROR(check_mesh_matches_config(config, mesh));
  ENG_RETURN_IF_ERROR(check_mesh_fits_model(t->config_, mesh));
  if (options.traced && options.shape_only) {
    t->program_ = options.traced->program;
    t->layout_ = options.traced->layout;
  } else {
    t->program_ = build_train_step(t->config_, &t->layout_);
  }
  t->tflops_ = calculate_tflops_training_per_device(
      t->config_.model, static_cast<double>(t->config_.global_batch_size) / mesh.num_devices(),
      t->config_.max_target_length);
  ENG_RETURN_IF_ERROR(t->read_options(config));
  if (!options.shape_only) {
    // The whole state fits (state_memory.h), checked before anything batch-sized is allocated:
    // the data source holds a batch too (per_device_batch_size = 1e9 took 8 GB first).
    ENG_RETURN_IF_ERROR(check_trainer_memory(*t));
    ENG_ASSIGN_OR_RETURN(t->data_, make_data_source(t->config_));
    ENG_RETURN_IF_ERROR(t->init_state());
    ENG_RETURN_IF_ERROR(t->restore());  // before the run: a resumed run names its parent
    ENG_RETURN_IF_ERROR(t->begin_run());
    ENG_RETURN_IF_ERROR(t->setup_dispatch());
  } else if (options.record_shape_only) {
    ENG_RETURN_IF_ERROR(t->begin_run());  // its compile and plan rows go to a run of their own
  }
  return t;
}

// The config keys the trainer itself acts on (the model and batch are resolve_config's).
Status Trainer::read_options(const Config& config) {
  const int64_t inflight = config.get_int("max_inflight_steps");
  if (inflight < 0 || inflight >= kStepSlots)
    return invalid_argument("config: max_inflight_steps must be in [0, {}), got {}", kStepSlots,
                            inflight);
  max_inflight_ = static_cast<int>(inflight);
  const int64_t log_period = config.get_int("log_period");
  if (log_period < 1)
    return invalid_argument("config: log_period must be >= 1, got {}", log_period);
  recorder_ = std::make_unique<RunRecorder>(options_.store, log_period);
  ENG_ASSIGN_OR_RETURN(delays_.device_steps, parse_steps(config, "debug_device_delay_steps"));
  ENG_ASSIGN_OR_RETURN(delays_.checkpoint_steps,
                       parse_steps(config, "debug_checkpoint_delay_steps"));
  delays_.device_s = config.get_float("debug_device_delay_seconds");
  delays_.checkpoint_s = config.get_float("debug_checkpoint_delay_seconds");
  jit_options_.debug_compile_delay_s = config.get_float("debug_compile_delay_seconds");
  jit_options_.persistent.dir = config.get_string("compilation_cache_dir");
  jit_options_.persistent.min_compile_time_s =
      config.get_float("persistent_cache_min_compile_time_secs");
  jit_options_.persistent.min_entry_size_bytes =
      config.get_int("persistent_cache_min_entry_size_bytes");
  jit_options_.persistent.max_size_bytes = config.get_int("compilation_cache_max_size");
  jit_options_.log_compiles = config.get_bool("log_compiles");
  jit_options_.explain_misses = config.get_bool("explain_cache_misses");
  jit_options_.defined_at = "engine/train/train_step.cpp (build_train_step)";
  aot_batch_sharding_ = config.get_bool("aot_shaped_batch_sharding");
  if (!config.get_bool("enable_checkpointing")) return ok_status();
  if (config.get_string("base_output_directory").empty() || config.get_string("run_name").empty())
    return invalid_argument(
        "config: enable_checkpointing needs base_output_directory and run_name (checkpoints go "
        "to <base_output_directory>/<run_name>/checkpoints), got '{}' and '{}'",
        config.get_string("base_output_directory"), config.get_string("run_name"));
  if (config.get_int("checkpoint_period") <= 0)
    return invalid_argument("config: checkpoint_period must be positive, got {}",
                            config.get_int("checkpoint_period"));
  return ok_status();
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
  // Under mpirun each process holds its slice of the mesh (engine/dist, docs/distributed.md).
  const bool span = dist::process().count > 1;
  if (span) ENG_RETURN_IF_ERROR(dist::device_range(mesh_.num_devices()).status());
  runtime_ = std::make_unique<Runtime>(mesh_, options_.device_capacity_bytes, span);
  const auto& args = program_.args();
  state_.clear();
  state_.reserve(args.size());
  std::vector<float> host;
  for (size_t i = 0; i < args.size(); ++i) {
    const ValueInfo& v = program_.value(args[i].value);
    const NamedSharding sharding = state_sharding(static_cast<int>(i));
    if (args[i].role == ArgRole::kParam) {
      ENG_RETURN_IF_ERROR(
          check_array_bytes(v.shape, v.dtype, "trainer: parameter '" + v.name + "'"));
      host.resize(static_cast<size_t>(v.shape.numel()));
      init_param(v, config_.init_weights_seed, host.data(), config_.model.pipelined_layers(),
                 config_.model.gpt3());
      std::vector<uint16_t> host16;  // weight_dtype=bfloat16: the initial values, rounded
      if (v.dtype == DType::kBF16) {
        host16.resize(host.size());
        kern::convert_f32_to_bf16(host.data(), host16.data(), static_cast<int64_t>(host.size()));
      }
      const void* data = host16.empty() ? static_cast<const void*>(host.data()) : host16.data();
      ENG_ASSIGN_OR_RETURN(Array a, runtime_->put(data, v.shape, v.dtype, sharding, v.name));
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
  const size_t n_base = kMaxTextMetrics;
  ENG_CHECK(layout_.metric_names.size() >= n_base, "trainer: {} metrics", layout_.metrics.size());
  // The metrics are the non-aliased outputs, so a metric's slot is its place among them.
  auto slot_of = [&](const char* name) {
    return layout_.metrics.at(name) - layout_.first_metric_output;
  };
  metric_index_ = {slot_of("learning/loss"),          slot_of("learning/total_weights"),
                   slot_of("learning/raw_grad_norm"), slot_of("learning/grad_norm"),
                   slot_of("learning/param_norm"),    slot_of("learning/current_learning_rate")};
  const std::pair<const char*, std::vector<int32_t> HostBatch::*> feeds[] = {
      {"inputs", &HostBatch::inputs},
      {"inputs_position", &HostBatch::inputs_position},
      {"inputs_segmentation", &HostBatch::inputs_segmentation},
      {"targets", &HostBatch::targets},
      {"targets_position", &HostBatch::targets_position},
      {"targets_segmentation", &HostBatch::targets_segmentation},
  };
  ENG_CHECK(layout_.batch.size() == std::size(feeds), "trainer: {} batch arrays",
            layout_.batch.size());
  for (const auto& [name, array] : feeds) batch_feeds_.push_back({layout_.batch.at(name), array});
  // Under mpirun the data source produces only the rows this process's devices hold (the
  // batch arrays share the input data sharding; the union covers them all).
  std::vector<int64_t> rows;
  for (const BatchFeed& f : batch_feeds_) {
    const Array& a = state_[static_cast<size_t>(f.arg)];
    std::vector<int64_t> mine = runtime_->local_rows(a.shape, a.sharding), both;
    std::set_union(rows.begin(), rows.end(), mine.begin(), mine.end(), std::back_inserter(both));
    rows = std::move(both);
  }
  ENG_RETURN_IF_ERROR(data_->set_rows(std::move(rows)));
  const int capacity = std::max(1, max_inflight_);
  staging_.resize(static_cast<size_t>(capacity));
  slots_.resize(kStepSlots);
  if (layout_.metrics.size() > n_base) {  // model metrics beyond MaxText's (MoE)
    extra_metric_names_ = std::make_shared<const std::vector<std::string>>(
        layout_.metric_names.begin() + static_cast<std::ptrdiff_t>(n_base), layout_.metric_names.end());
    for (StepSlot& s : slots_)
      s.extra_metrics = std::make_shared<std::vector<float>>(layout_.metrics.size() - n_base, 0.0f);
  }
  if (dist::process().count > 1)  // init_state spans the processes then
    for (StepSlot& s : slots_)
      s.process_times.assign(kProcessValues * static_cast<size_t>(dist::process().count), 0);
  dispatcher_ = std::make_unique<Dispatcher>(
      [this](int64_t ticket, int64_t) { return device_step(ticket); }, capacity);
  return ok_status();
}

Result<std::shared_ptr<const Executable>> Trainer::compile() {
  ENG_ASSIGN_OR_RETURN(Signature sig, aot_signature());
  bool compiled = false;
  ENG_RETURN_IF_ERROR(lookup(std::move(sig), "Trainer::compile (AOT)", step_, &compiled));
  return jit_->current();
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
  static_cast<StepRecord&>(slot) = StepRecord{};  // process_times keeps its buffer
  // The model metrics' buffer: a fresh one when a StepMetrics of an earlier step still holds
  // it (ExtraMetrics), decided here on the caller's thread, where StepMetrics are made and
  // dropped, before the device step writes it.
  if (slot.extra_metrics && slot.extra_metrics.use_count() > 1)
    slot.extra_metrics = std::make_shared<std::vector<float>>(slot.extra_metrics->size(), 0.0f);
  slot.ticket = h.ticket_;
  slot.step = step_;
  // The jit dispatch check: the arrays as placed against the executable in use (no
  // allocation); otherwise a full lookup with their signature (the first step after an AOT
  // compile for another signature: MaxText's double compilation when the shaped batch lacks
  // the sharding).
  const double t0 = now_seconds();
  const bool hit = jit_ && jit_->current_key() && placed_matches(jit_->current_key()->signature);
  if (!hit) ENG_RETURN_IF_ERROR(lookup(placed_signature(), "Trainer::step", step_, &slot.compiled));
  slot.exe = jit_->current().get();
  const double t1 = now_seconds();
  slot.compile_s = t1 - t0;
  data_->next(staging_[static_cast<size_t>(h.ticket_) % staging_.size()]);
  slot.data_s = now_seconds() - t1;
  ENG_ASSIGN_OR_RETURN(int64_t ticket, dispatcher_->submit(step_));
  ENG_CHECK(ticket == h.ticket_, "trainer: ticket {} != expected {}", ticket, h.ticket_);
  if (hit) recorder_->record_tracing_hit(*jit_->current_key(), step_);  // overlaps the step
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
  for (const BatchFeed& f : batch_feeds_) {
    Status s = runtime_->write_rows(state_[static_cast<size_t>(f.arg)], (batch.*f.array).data(),
                                    batch.rows);
    if (!s.ok()) return Status(s.code(), fmt::format("step {}: {}", slot.step, s.message()));
  }
  if (delays_.device_s > 0 && contains(delays_.device_steps, slot.step))  // debug: slow device
    std::this_thread::sleep_for(std::chrono::duration<double>(delays_.device_s));
  const double wait0 = runtime_->collective_wait_seconds();
  Status s = runtime_->execute(*slot.exe, arg_ptrs_, outputs_);
  constexpr size_t n_base = kMaxTextMetrics;
  for (size_t k = 0; s.ok() && k < layout_.metrics.size(); ++k)
    s = runtime_->fetch(outputs_[k],
                        k < n_base ? &slot.metrics[k] : &(*slot.extra_metrics)[k - n_base]);
  slot.device_end = now_seconds();
  // mpirun: every process's times (for process 0's store) and whether it asks to stop (for
  // all: the agreement that stops t:train on every process after the same step).
  if (s.ok() && !slot.process_times.empty()) {
    const bool stop = options_.stop_requested != nullptr && options_.stop_requested();
    const double mine[kProcessValues] = {slot.device_end - slot.device_start,
                                         runtime_->collective_wait_seconds() - wait0,
                                         stop ? 1.0 : 0.0};
    s = runtime_->gather_process_values(mine, slot.process_times);
  }
  if (!s.ok())
    return Status(s.code(), fmt::format("step {} failed on the devices: {}", slot.step, s.message()));
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
  const MetricIndex& i = metric_index_;
  m.loss = slot.metrics[i.loss];
  m.total_weights = slot.metrics[i.total_weights];
  m.raw_grad_norm = slot.metrics[i.raw_grad_norm];
  m.grad_norm = slot.metrics[i.grad_norm];
  m.param_norm = slot.metrics[i.param_norm];
  m.learning_rate = slot.metrics[i.learning_rate];
  m.compiled = slot.compiled;
  m.compile_s = slot.compile_s;
  m.data_time_s = slot.data_s;
  m.device_time_s = slot.device_end - slot.device_start;
  m.synced = slot.synced_at > 0;
  for (size_t p = kProcessValues - 1; p < slot.process_times.size(); p += kProcessValues)
    m.stop_requested = m.stop_requested || slot.process_times[p] != 0;
  m.step_time_s = m.synced ? slot.step_time_s : m.device_time_s;
  const double tokens = static_cast<double>(config_.global_batch_size * config_.max_target_length);
  m.tokens_per_s = tokens / m.step_time_s;
  m.tokens_per_s_per_device = tokens / mesh_.num_devices() / m.step_time_s;
  m.tflops_per_device = tflops_.total;
  m.tflops_per_s_per_device = tflops_.total / m.step_time_s;
  if (slot.extra_metrics) m.extra = ExtraMetrics(extra_metric_names_, slot.extra_metrics);
  return m;
}

Result<StepMetrics> Trainer::last_step_metrics() {
  if (options_.shape_only || !dispatcher_ || dispatcher_->submitted() == 0)
    return failed_precondition("trainer: no step has run yet");
  ENG_RETURN_IF_ERROR(wait_all());
  const int64_t ticket = dispatcher_->submitted() - 1;
  return metrics_of(ticket, slots_[static_cast<size_t>(ticket % kStepSlots)].step);
}

Result<std::vector<float>> Trainer::fetch_argument(const std::string& name) const {
  if (options_.shape_only) return failed_precondition("trainer: shape_only: no arrays to fetch");
  int i = program_.find_arg(name);
  if (i < 0) return not_found("trainer: no argument named '{}'", name);
  const ValueInfo& v = program_.value(program_.args()[i].value);
  if (v.dtype == DType::kI32) return invalid_argument("trainer: '{}' is not a float array", name);
  ENG_RETURN_IF_ERROR(const_cast<Trainer*>(this)->wait_all());
  std::vector<float> host(static_cast<size_t>(v.shape.numel()));
  ENG_RETURN_IF_ERROR(runtime_->fetch(state_[i], host.data()));
  if (v.dtype == DType::kBF16) {  // the first half holds the bf16 bits: widen back to front
    const uint16_t* h = reinterpret_cast<const uint16_t*>(host.data());
    for (size_t k = host.size(); k-- > 0;) host[k] = bf16_to_f32(h[k]);
  }
  return host;
}

// ---- compile cache (engine/compile/jit.h) ---------------------------------------------------

Result<Signature> Trainer::aot_signature() {
  // MaxText after PR 4174: state as it will be placed, and get_shaped_batch(config,
  // batch_sharding=get_input_data_sharding(config, mesh)). Without the sharding (the debug
  // key), the batch is typed replicated, as JAX treats a ShapeDtypeStruct with sharding=None.
  std::vector<NamedSharding> shardings;
  for (size_t k = 0; k < program_.args().size(); ++k)
    shardings.push_back(state_sharding(static_cast<int>(k)));
  if (!aot_batch_sharding_)
    for (const NamedSlot& b : layout_.batch.slots)
      shardings[static_cast<size_t>(b.index)] = NamedSharding{mesh_, PartitionSpec()};
  return signature_of(program_, shardings);
}

Signature Trainer::placed_signature() const {
  Signature sig;
  for (size_t k = 0; k < state_.size(); ++k) {
    const Array& a = state_[k];
    sig.args.push_back(
        {program_.value(program_.args()[k].value).name, a.shape, a.dtype, a.sharding, ""});
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

Status Trainer::lookup(Signature sig, const std::string& site, int64_t step, bool* missed) {
  if (!jit_) {
    ENG_ASSIGN_OR_RETURN(CompileOptions o, compile_options_from_config(raw_config_));
    jit_ = std::make_unique<Jit>(program_.name(), &program_, mesh_, std::move(o), jit_options_);
  }
  ENG_ASSIGN_OR_RETURN(CompileEvent ev, jit_->lookup(std::move(sig), site));
  recorder_->record_compile(ev, step, options_.device_capacity_bytes);
  *missed = !ev.tracing_hit;  // a tracing miss: the step waited for a lookup beyond its own cache
  return ok_status();
}

}  // namespace eng
