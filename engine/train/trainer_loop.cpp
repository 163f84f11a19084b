// engine/train/trainer_loop.cpp: the training loop in MaxText's train.py order, with step times
// between loss syncs and checkpoint time apart (MaxText's step-timing fix), metrics-store
// records, and checkpoint save/restore.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/dist/dist.h"
#include "engine/runtime/dispatch.h"
#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"

namespace eng {

namespace {

bool is_state_arg(ArgRole r) { return r != ArgRole::kBatch; }

// The params row set of a run: the flattened config with the values that took effect where
// the config only hinted (ici_* sizes, -1 fills), plus mesh.<axis> sizes, derived sizes and
// the job's process count (JAX's process_count: mpirun -np P).
std::vector<std::pair<std::string, std::string>> run_params(const Config& raw,
                                                            const ResolvedConfig& c,
                                                            const Mesh& mesh) {
  std::map<std::string, std::string> p = raw.flatten();
  for (const std::string& axis : maxtext_mesh_axes())
    p[ici_key(axis)] = fmt::format("{}", mesh.axis_size(axis));
  for (size_t i = 0; i < mesh.axis_names().size(); ++i)
    p["mesh." + mesh.axis_names()[i]] = fmt::format("{}", mesh.axis_sizes()[i]);
  p["mesh"] = mesh.to_string();
  p["num_devices"] = fmt::format("{}", mesh.num_devices());
  p["process_count"] = fmt::format("{}", dist::process().count);  // jax.process_count()
  p["model_name"] = c.model.name;
  p["model.num_params"] = fmt::format("{}", c.model.num_params());
  p["per_device_batch_size_effective"] = fmt::format(
      "{:g}", static_cast<double>(c.global_batch_size) / static_cast<double>(mesh.num_devices()));
  p["global_batch_size_to_load"] = fmt::format("{}", c.global_batch_size);
  p["global_batch_size_to_train_on"] = fmt::format("{}", c.global_batch_size);
  p["tokens_per_step"] = fmt::format("{}", c.global_batch_size * c.max_target_length);
  p["learning_rate_schedule_steps_effective"] = fmt::format("{}", c.warmup_steps + c.cos_steps);
  p["warmup_steps"] = fmt::format("{}", c.warmup_steps);
  return {p.begin(), p.end()};
}

}  // namespace

std::string Trainer::checkpoint_dir() const {
  return checkpoint_root(raw_config_.get_string("base_output_directory"),
                         raw_config_.get_string("run_name"));
}

// ---- the run ------------------------------------------------------------------------------

Status Trainer::begin_run() {
  if (!recorder_->recording()) return ok_status();
  RunInfo info;
  info.name = config_.run_name;
  info.argv = options_.argv;
  info.script = options_.script;
  info.parent_run_id = parent_run_id_;
  info.params = run_params(raw_config_, config_, mesh_);
  ENG_RETURN_IF_ERROR(recorder_->begin(std::move(info)));
  for (const auto& [step, message] : restore_warnings_)
    recorder_->record_event("restore", "warning", step, message);
  if (!restored_from_.empty()) recorder_->record_event("restore", "info", step_, restore_message_);
  return ok_status();
}

// ---- timing and the loop -------------------------------------------------------------------

// The loss sync of a step in train(): its time is the interval since the previous sync (or
// since the loop started, or the last checkpoint ended), minus nothing: compile happened
// before ref_time_ was advanced past it.
Status Trainer::sync_for_timing(StepSlot& slot) {
  if (slot.synced_at > 0) return ok_status();
  ENG_RETURN_IF_ERROR(wait_ticket(slot.ticket));
  slot.synced_at = now_seconds();
  slot.step_time_s = slot.synced_at - ref_time_;
  ref_time_ = slot.synced_at;
  return ok_status();
}

Status Trainer::flush_step(int64_t ticket, int64_t step,
                           FunctionRef<bool(const StepMetrics&)> on_step, bool* keep_going) {
  StepSlot& slot = slots_[static_cast<size_t>(ticket % kStepSlots)];
  ENG_RETURN_IF_ERROR(sync_for_timing(slot));
  ENG_ASSIGN_OR_RETURN(StepMetrics m, metrics_of(ticket, step));
  const double tokens = static_cast<double>(config_.global_batch_size * config_.max_target_length);
  ENG_RETURN_IF_ERROR(recorder_->record_step(m, tokens, mesh_.num_devices()));
  recorder_->record_process_times(step, slot.process_times, kProcessValues);
  const bool more = on_step(m);
  if (keep_going != nullptr) *keep_going = more;
  return check_loss_finite(m);
}

// MaxText's abort_on_nan_loss / abort_on_inf_loss (both true by default): a step whose loss is
// not finite stops train() with this error (recorded as the run's error event; the run ends
// FAILED). The step itself is recorded first (its loss NULL in the store).
Status Trainer::check_loss_finite(const StepMetrics& m) const {
  const bool nan = std::isnan(m.loss), inf = std::isinf(m.loss);
  const char* key = nan ? "abort_on_nan_loss" : "abort_on_inf_loss";
  if ((!nan && !inf) || !raw_config_.get_bool(key)) return ok_status();
  return failed_precondition("step {}: the loss is {} (training diverged: learning_rate {}, "
                             "adam_eps {}); training stopped. Set {}=false to keep going",
                             m.step, nan ? "NaN" : (m.loss > 0 ? "inf" : "-inf"),
                             raw_config_.get_float("learning_rate"),
                             raw_config_.get_float("adam_eps"), key);
}

// MaxText's _should_save_checkpoint_at_step: every checkpoint_period steps; step 0 (always a
// multiple) only with save_checkpoint_on_start; never a step already saved or restored.
bool Trainer::checkpoint_due(int64_t step) const {
  if (!raw_config_.get_bool("enable_checkpointing") || step < 0) return false;
  if (step == 0 && !raw_config_.get_bool("save_checkpoint_on_start")) return false;
  if (step == last_checkpoint_step_) return false;
  return step % raw_config_.get_int("checkpoint_period") == 0;
}

Status Trainer::train(int64_t steps, FunctionRef<bool(const StepMetrics&)> on_step) {
  if (options_.shape_only)
    return failed_precondition("trainer: created with shape_only=true; it can compile but not train");
  ENG_RETURN_IF_ERROR(wait_all());  // steps dispatched by bare step() calls are not timed here
  recorder_->set_interrupted(false);  // the caller marks a new Ctrl-C after this returns
  ref_time_ = now_seconds();
  int64_t prev_ticket = -1, prev_step = -1;
  bool keep_going = true;
  int64_t done = 0;
  Status status;
  while (done < steps && keep_going) {
    // 1. load batch N and 2. dispatch it (compile, if any, is excluded from the step).
    Result<StepHandle> h = step();
    if (!h.ok()) {
      status = h.status();
      break;
    }
    ++done;
    StepSlot& slot = slots_[static_cast<size_t>(h->ticket_ % kStepSlots)];
    ref_time_ += slot.compile_s;
    // 3. flush step N-1: reading its loss is the sync point.
    if (prev_ticket >= 0) status = flush_step(prev_ticket, prev_step, on_step, &keep_going);
    prev_ticket = h->ticket_;  // step N is dispatched: from here on it is the one to record
    prev_step = h->step_;
    if (!status.ok()) break;
    // 4. maybe checkpoint step N: a barrier, charged to no step.
    if (checkpoint_due(h->step_)) {
      status = sync_for_timing(slot);
      if (status.ok()) status = save_checkpoint().status();
      if (!status.ok()) break;
      ref_time_ = now_seconds();
    }
  }
  // The last dispatched step is recorded even after an error (a failed save or flush loses no
  // step that ran; its rows stay buffered when the store is what failed).
  if (prev_ticket >= 0) {
    Status last = flush_step(prev_ticket, prev_step, on_step, nullptr);
    if (status.ok()) status = last;
  }
  // On completion (save_checkpoint_on_completion), and when on_step stopped the loop (Ctrl-C):
  // the state after the last completed step, so the run resumes where it stopped.
  const bool stopped = !keep_going, completed = done == steps && steps > 0;
  if (status.ok() && (stopped || completed) && raw_config_.get_bool("enable_checkpointing") &&
      (stopped || raw_config_.get_bool("save_checkpoint_on_completion")) &&
      last_checkpoint_step_ != step_ - 1)
    status = save_checkpoint().status();
  if (!status.ok()) {
    (void)wait_all();
    recorder_->record_event("error", "error", step_, status.message());
  }
  Status s = recorder_->flush();
  if (status.ok()) status = s;
  if (!status.ok()) failed_ = true;  // the run ends FAILED (issue 16 item 8)
  return status;
}

// ---- checkpoints ---------------------------------------------------------------------------

Result<CheckpointInfo> Trainer::save_checkpoint() {
  if (options_.shape_only) return failed_precondition("trainer: shape_only: no state to save");
  if (step_ == 0) return failed_precondition("trainer: no step has run yet; nothing to checkpoint");
  if (raw_config_.get_string("base_output_directory").empty() || raw_config_.get_string("run_name").empty())
    return failed_precondition("trainer: saving a checkpoint needs base_output_directory and run_name");
  CheckpointInfo info;
  info.step = step_ - 1;
  ENG_RETURN_IF_ERROR(recorder_->flush());  // the metrics logged so far are durable before the save
  const double t0 = now_seconds();
  ENG_RETURN_IF_ERROR(wait_all());  // the barrier: the state after step N is final
  std::vector<CheckpointTensorSpec> specs;
  std::vector<int> arg_of;
  const auto& args = program_.args();
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_state_arg(args[i].role)) continue;
    const ValueInfo& v = program_.value(args[i].value);
    specs.push_back({v.name, v.dtype, v.shape});
    arg_of.push_back(static_cast<int>(i));
  }
  std::map<std::string, std::string> meta = {
      {"step", fmt::format("{}", info.step)},
      {"data_position", fmt::format("{}", data_->position())},
      {"init_weights_seed", fmt::format("{}", config_.init_weights_seed)},
      {"data_shuffle_seed", fmt::format("{}", config_.data_shuffle_seed)},
      {"run_name", config_.run_name},
      {"model_name", raw_config_.get_string("model_name")},
      {"mesh", mesh_.to_string()},
      {"dataset", data_->describe()},
  };
  const ModelConfig& m = config_.model;  // where the scanned stacks keep their layer dim
  if (m.scan_layers || m.pipelined_layers() < m.num_decoder_layers)
    meta["param_scan_axis"] = fmt::format("{}", m.param_scan_axis);
  // The run that wrote it, for the resumed run's parent_run_id even when this process dies
  // between the file's rename and its row in the store's checkpoints table.
  if (!recorder_->run_id().empty()) meta["shardlab_run_id"] = recorder_->run_id();
  CheckpointWriteOptions wopts;
  const std::vector<int64_t>& delayed = delays_.checkpoint_steps;
  if (delays_.checkpoint_s > 0 &&
      (delayed.empty() || std::find(delayed.begin(), delayed.end(), info.step) != delayed.end()))
    wopts.debug_delay_s = delays_.checkpoint_s;
  info.path = checkpoint_path(checkpoint_dir(), info.step);
  if (dist::process().index != 0) {  // mpirun: join process 0's gathers; it writes the file
    std::vector<char> host;
    for (size_t k = 0; k < specs.size(); ++k) {
      host.resize(static_cast<size_t>(specs[k].shape.numel() * dtype_size(specs[k].dtype)));
      ENG_RETURN_IF_ERROR(runtime_->fetch(state_[static_cast<size_t>(arg_of[k])], host.data()));
    }
    info.save_s = now_seconds() - t0;
    last_checkpoint_step_ = info.step;
    return info;
  }
  // Global host arrays: a checkpoint saved on one mesh restores onto any other.
  Result<int64_t> bytes = write_checkpoint(
      info.path, specs,
      [&](int k, void* dst) { return runtime_->fetch(state_[static_cast<size_t>(arg_of[k])], dst); },
      meta, wopts);
  info.save_s = now_seconds() - t0;
  recorder_->record_checkpoint(info.step, info.path,
                               bytes.ok() ? std::optional<int64_t>(*bytes) : std::nullopt,
                               info.save_s, bytes.ok());
  if (!bytes.ok()) {
    recorder_->record_event("checkpoint", "error", info.step, bytes.status().message());
    return bytes.status();
  }
  info.bytes = *bytes;
  last_checkpoint_step_ = info.step;
  recorder_->record_event("checkpoint", "info", info.step,
                          fmt::format("saved checkpoint {} ({} bytes) to {} in {:.3f} s", info.step,
                                      info.bytes, info.path, info.save_s));
  ENG_RETURN_IF_ERROR(prune_checkpoints(checkpoint_dir(), raw_config_.get_int("max_num_checkpoints_to_keep")));
  return info;
}

Status Trainer::restore() {
  if (raw_config_.get_bool("enable_checkpointing")) {
    std::vector<int64_t> steps = list_checkpoints(checkpoint_dir());
    // The latest checkpoint that restores; any bad one (corrupt, truncated, not a regular
    // file, a tensor of another shape or dtype) is skipped with a warning naming it, recorded
    // once the run has begun (begin_run). An older one rewrites every state array, so what a
    // refused one wrote first is overwritten.
    for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
      const std::string path = checkpoint_path(checkpoint_dir(), *step);
      std::error_code ec;
      Status s = std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec))
                     ? failed_precondition("checkpoint '{}' is a symbolic link", path)
                     : restore_from(path, false);
      if (s.ok() || step + 1 == steps.rend()) return s;
      restore_warnings_.emplace_back(*step,
                                     fmt::format("skipped checkpoint {}: {}", *step, s.message()));
    }
  }
  const std::string params = raw_config_.get_string("load_parameters_path");
  if (!params.empty()) return restore_from(params, true);
  const std::string full = raw_config_.get_string("load_full_state_path");
  if (!full.empty()) return restore_from(full, false);
  return ok_status();
}

namespace {

// The optimizer's step count (the i32 "step" state, the schedule's and AdamW's count) is the
// number of updates so far: __metadata__ step + 1. A file where they disagree would train on
// at another learning rate (count 1e6 with step 3: lr 0; count -7: a negative lr), and a step
// the count cannot hold (over 2^31 - 2) would wrap it.
Status check_step_count(const CheckpointFile& f) {
  ENG_ASSIGN_OR_RETURN(int64_t step, f.metadata_int("step"));
  constexpr int64_t kMaxCountStep = std::numeric_limits<int32_t>::max() - 1;
  if (step > kMaxCountStep)
    return data_loss("checkpoint '{}': __metadata__ step {} is over {}, the most the optimizer's "
                     "int32 step count holds",
                     f.path, step, kMaxCountStep);
  const CheckpointFile::Entry* e = f.find("step");
  if (e == nullptr || e->spec.dtype != DType::kI32 || e->spec.shape.numel() != 1)
    return ok_status();  // checkpoint_tensor names what is missing or of another type
  int32_t count = 0;
  std::memcpy(&count, f.bytes(*e), sizeof(count));
  if (count != step + 1)
    return data_loss("checkpoint '{}': the optimizer's step count is {} but __metadata__ step is "
                     "{} (the count after step {} is {})",
                     f.path, count, step, step, step + 1);
  return ok_status();
}

}  // namespace

Status Trainer::restore_from(const std::string& path, bool params_only) {
  ENG_ASSIGN_OR_RETURN(CheckpointFile f, read_checkpoint(path));
  if (!params_only) ENG_RETURN_IF_ERROR(check_step_count(f));
  const auto& args = program_.args();
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_state_arg(args[i].role) || (params_only && args[i].role != ArgRole::kParam)) continue;
    const ValueInfo& v = program_.value(args[i].value);
    // Either layer layout (scan_layers) restores into this one (checkpoint.h).
    std::vector<char> converted;
    const ModelConfig& m = config_.model;
    ENG_ASSIGN_OR_RETURN(
        const void* bytes,
        m.pipeline_stages > 1 && pipeline_param_subpath(v.name)
            ? checkpoint_pipeline_tensor(f, v.name, v.dtype, v.shape, pipeline_layer_dims(v),
                                         converted)
        : outside_pipeline_subpath(v.name)
            ? checkpoint_outside_tensor(f, v.name, v.dtype, v.shape, m.param_scan_axis,
                                        m.pipelined_layers(), converted)
            : checkpoint_tensor(f, v.name, v.dtype, v.shape,
                                m.scan_layers ? m.param_scan_axis : -1, converted));
    // Written with this array's own sharding: restoring onto another mesh reshards.
    ENG_RETURN_IF_ERROR(runtime_->write(state_[i], bytes));
  }
  if (!params_only) {
    ENG_ASSIGN_OR_RETURN(int64_t step, f.metadata_int("step"));
    ENG_ASSIGN_OR_RETURN(int64_t position, f.metadata_int("data_position"));
    step_ = step + 1;
    last_checkpoint_step_ = step;
    data_->set_position(position);
  }
  restored_from_ = f.path;
  first_step_ = step_;
  restore_message_ = fmt::format("restored {} from {}; continuing at step {}",
                                 params_only ? "params" : "full state", f.path, step_);
  if (params_only) return ok_status();
  const auto it = f.metadata.find("shardlab_run_id");
  const auto [run_id, name] =
      recorder_->checkpoint_run(f.path, it == f.metadata.end() ? "" : it->second);
  parent_run_id_ = run_id;
  resume_note_ = name.empty() ? fmt::format("resumed from step {} of {}", step_ - 1, f.path)
                              : fmt::format("resumed from step {} of run {}", step_ - 1, name);
  return ok_status();
}

}  // namespace eng
