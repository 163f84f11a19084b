// engine/train/run_recorder.cpp: turns what a run did into metrics-store rows.
#include "engine/train/run_recorder.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "engine/base/git.h"
#include "engine/base/hash.h"
#include "engine/tensor/system_info.h"

namespace eng {

namespace {

CompilationRow compilation_row(const std::string& run_id, std::optional<int64_t> step,
                               const CacheKey& key, std::string outcome, std::string level) {
  CompilationRow r;
  r.run_id = run_id;
  r.step = step;
  r.fn_name = key.fn_name;
  r.module_name = key.module_name();
  r.outcome = std::move(outcome);
  r.cache_level = std::move(level);
  r.cache_key = key.name();
  return r;
}

MemoryAnalysisRow memory_row(const MemoryAnalysis& m, int64_t device_limit_bytes) {
  MemoryAnalysisRow r;
  r.argument_size_in_bytes = m.argument_bytes;
  r.output_size_in_bytes = m.output_bytes;
  r.alias_size_in_bytes = m.alias_bytes;
  r.temp_size_in_bytes = m.temp_bytes;
  r.peak_memory_in_bytes = m.peak_bytes();
  if (device_limit_bytes > 0) r.device_limit_bytes = device_limit_bytes;
  return r;
}

// 32 hex digits over the file's bytes ("" when it cannot be read).
std::string file_digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return fmt::format("{:016x}{:016x}", hash_bytes(bytes), hash_bytes(bytes, 0x9e3779b97f4a7c15ULL));
}

}  // namespace

std::string step_line(const StepMetrics& m) {
  return fmt::format(
      "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, "
      "total_weights: {}, loss: {:.3f}",
      m.step, m.step_time_s, m.tflops_per_s_per_device, m.tokens_per_s_per_device,
      static_cast<int64_t>(m.total_weights), m.loss);
}

std::string number_parameters_line(int64_t num_params) {
  return fmt::format("number parameters: {:.3f} billion", static_cast<double>(num_params) / 1e9);
}

Status RunRecorder::begin(RunInfo info) {
  if (store_ == nullptr) return ok_status();
  if (!info.script.empty() && info.script_hash.empty()) info.script_hash = file_digest(info.script);
  if (info.git_rev.empty()) {
    std::error_code ec;
    const std::filesystem::path script(info.script);
    info.git_rev = git_revision(info.script.empty() || !script.has_parent_path()
                                    ? std::filesystem::current_path(ec)
                                    : script.parent_path());
  }
  ENG_ASSIGN_OR_RETURN(run_id_, store_->begin_run(info));
  // What the run ran on (CPU, BLAS core, kernel paths): a slow run explains itself.
  for (const auto& [k, v] : system_info())
    ENG_RETURN_IF_ERROR(store_->set_tag(run_id_, "shardlab." + k, v));
  return ok_status();
}

void RunRecorder::end(RunStatus status, bool stepped) {
  if (store_ == nullptr || run_id_.empty() || ended_) return;
  ended_ = true;
  if (!stepped) {
    Result<bool> gone = store_->discard_run_if_empty(run_id_);
    if (gone.ok() && *gone) return;
  }
  if (status == RunStatus::kFinished && interrupted_) status = RunStatus::kKilled;
  if (status == RunStatus::kFinished && !script_error_.empty()) {
    record_event("error", "error", last_step_, script_error_);
    status = RunStatus::kFailed;
  }
  if (!store_->flush().ok()) status = RunStatus::kFailed;  // rows that could not be written
  (void)store_->end_run(run_id_, status);
}

void RunRecorder::set_script_error(std::string message) {
  if (const size_t eol = message.find('\n'); eol != std::string::npos) message.resize(eol);
  script_error_ = "the script ended with an error";
  if (!message.empty()) script_error_ += ": " + message;
}

Status RunRecorder::set_tag(const std::string& key, const std::string& value) {
  if (store_ == nullptr || run_id_.empty())
    return failed_precondition("run: this trainer records no run (store=false or shape_only)");
  if (key.starts_with("shardlab."))
    return invalid_argument("run: tag '{}': names starting 'shardlab.' are the store's own", key);
  return store_->set_tag(run_id_, key, value);
}

Status RunRecorder::log_value(const std::string& name, int64_t step, double value) {
  if (store_ == nullptr || run_id_.empty())
    return failed_precondition("run: this trainer records no run (store=false or shape_only)");
  if (name.empty()) return invalid_argument("run: a logged value needs a name");
  store_->log_metric(run_id_, name, step, value);
  return flush();
}

std::pair<std::string, std::string> RunRecorder::checkpoint_run(const std::string& path,
                                                                const std::string& file_run_id) {
  if (store_ == nullptr) return {};
  if (!file_run_id.empty()) {
    SqlValue id[] = {file_run_id};
    Result<QueryResult> r = store_->query("SELECT run_id, name FROM runs WHERE run_id = ?", id);
    if (r.ok() && !r->rows.empty())
      return {std::get<std::string>(r->rows[0][0]), std::get<std::string>(r->rows[0][1])};
  }
  SqlValue a[] = {path};
  Result<QueryResult> r = store_->query(
      "SELECT c.run_id, r.name FROM checkpoints c JOIN runs r USING (run_id) WHERE c.path = ? "
      "AND c.status = 'committed' ORDER BY c.wall_ms DESC LIMIT 1",
      a);
  if (!r.ok() || r->rows.empty()) return {};
  return {std::get<std::string>(r->rows[0][0]), std::get<std::string>(r->rows[0][1])};
}

void RunRecorder::record_compile(const CompileEvent& ev, std::optional<int64_t> step,
                                 int64_t device_limit_bytes) {
  if (store_ == nullptr) return;
  for (size_t i = 0; i < ev.records.size(); ++i) {
    const CacheRecord& c = ev.records[i];
    CompilationRow r = compilation_row(run_id_, step, ev.key, c.outcome, c.level);
    r.reason_kind = c.reason_kind;
    r.reason_text = c.reason_text;
    r.compile_s = c.compile_s;
    r.entry_bytes = c.entry_bytes;
    if (c.with_signature) {
      r.in_signature = ev.key.signature.to_string();
      r.in_shardings = ev.key.signature.shardings_string();
    }
    Result<int64_t> id = store_->record_compilation(r);
    if (!id.ok() || static_cast<int>(i) != ev.analysis_record || !ev.exe) continue;
    last_analysis_compile_id_ = *id;
    (void)store_->record_memory_analysis(*id, memory_row(ev.exe->memory(), device_limit_bytes));
    const CostAnalysis& cost = ev.exe->cost();
    std::vector<std::pair<std::string, double>> costs = {{"flops", cost.flops},
                                                         {"bytes accessed", cost.bytes_accessed}};
    for (const auto& [axes, bytes] : cost.collective_bytes)
      costs.emplace_back("collective bytes " + axes, bytes);
    (void)store_->record_cost_analysis(*id, costs);
  }
  for (const CompileNote& n : ev.notes) record_event(n.kind, n.level, step.value_or(0), n.message);
}

int64_t RunRecorder::record_plan(const CompileInfo& info, const Executable& exe, int64_t step,
                                 int64_t device_limit_bytes) {
  if (store_ == nullptr) return 0;
  CompilationRow r;
  r.run_id = run_id_;
  r.step = step;
  r.fn_name = "train_step";
  r.module_name = "jit_train_step";
  r.outcome = info.outcome;
  r.cache_level = info.level;
  r.reason_kind = info.reason_kind;
  r.reason_text = info.reason_text;
  r.cache_key = info.key_name;
  if (info.compile_s > 0) r.compile_s = info.compile_s;
  Result<int64_t> id = store_->record_compilation(r);
  if (!id.ok()) return 0;
  (void)store_->record_memory_analysis(*id, memory_row(exe.memory(), device_limit_bytes));
  const CostAnalysis& cost = exe.cost();
  std::vector<std::pair<std::string, double>> costs = {{"flops", cost.flops},
                                                       {"bytes accessed", cost.bytes_accessed}};
  for (const auto& [axes, bytes] : cost.collective_bytes)
    costs.emplace_back("collective bytes " + axes, bytes);
  (void)store_->record_cost_analysis(*id, costs);
  return *id;
}

void RunRecorder::record_tracing_hit(const CacheKey& key, int64_t step) {
  if (store_ == nullptr) return;
  (void)store_->record_compilation(compilation_row(run_id_, step, key, "hit", "tracing"));
}

void RunRecorder::record_process_times(int64_t step, std::span<const double> times,
                                       size_t per_process) {
  if (store_ == nullptr) return;
  const size_t processes = times.size() / per_process;
  while (process_keys_.size() < processes) {  // the first step names them; later ones reuse
    const size_t p = process_keys_.size();
    process_keys_.emplace_back(fmt::format("dist/device_time_s/process_{}", p),
                               fmt::format("dist/collective_wait_s/process_{}", p));
  }
  for (size_t p = 0; p < processes; ++p) {
    store_->log_metric(run_id_, process_keys_[p].first, step, times[per_process * p]);
    store_->log_metric(run_id_, process_keys_[p].second, step, times[per_process * p + 1]);
  }
}

Status RunRecorder::record_step(const StepMetrics& m, double tokens, int64_t num_devices) {
  if (store_ == nullptr) return ok_status();
  StepRow row;
  row.run_id = run_id_;
  row.step = m.step;
  last_step_ = m.step;
  row.loss = m.loss;
  row.step_time_s = m.step_time_s;
  if (m.compiled) row.compile_s = m.compile_s;
  row.data_s = m.data_time_s;
  row.tokens = static_cast<int64_t>(tokens);
  row.tokens_per_s = m.tokens_per_s;
  row.tokens_per_s_device = m.tokens_per_s_per_device;
  row.tflops_per_device = m.tflops_per_s_per_device;
  row.grad_norm = m.grad_norm;
  row.lr = m.learning_rate;
  row.synced = m.synced;
  row.compiled = m.compiled;
  store_->log_step(std::move(row));
  const std::pair<const char*, double> metrics[] = {
      {"learning/loss", m.loss},
      {"learning/grad_norm", m.grad_norm},
      {"learning/raw_grad_norm", m.raw_grad_norm},
      {"learning/param_norm", m.param_norm},
      {"learning/current_learning_rate", m.learning_rate},
      {"learning/total_weights", m.total_weights},
      {"perf/step_time_seconds", m.step_time_s},
      {"perf/per_device_tflops", m.tflops_per_device},
      {"perf/per_device_tflops_per_sec", m.tflops_per_s_per_device},
      {"perf/per_device_tokens", tokens / static_cast<double>(num_devices)},
      {"perf/per_device_tokens_per_sec", m.tokens_per_s_per_device},
  };
  for (const auto& [key, value] : metrics) store_->log_metric(run_id_, key, m.step, value);
  for (const auto& [key, value] : m.extra) store_->log_metric(run_id_, key, m.step, value);
  // One transaction per log_period steps; queries, checkpoints and train()'s end flush too.
  if (++unflushed_steps_ < log_period_) return ok_status();
  return flush();
}

Status RunRecorder::flush() {
  if (store_ == nullptr) return ok_status();
  unflushed_steps_ = 0;
  return store_->flush();
}

void RunRecorder::record_checkpoint(int64_t step, const std::string& path,
                                    std::optional<int64_t> bytes, double save_s, bool committed) {
  if (store_ == nullptr || run_id_.empty()) return;
  CheckpointRow row;
  row.run_id = run_id_;
  row.step = step;
  row.path = path;
  row.bytes = bytes;
  row.save_s = save_s;
  row.status = committed ? "committed" : "failed";
  (void)store_->record_checkpoint(row);
}

void RunRecorder::record_event(const std::string& kind, const std::string& level, int64_t step,
                               const std::string& message) {
  if (store_ == nullptr || run_id_.empty()) return;
  EventRow e;
  e.run_id = run_id_;
  e.step = step;
  e.level = level;
  e.kind = kind;
  e.message = message;
  (void)store_->record_event(e);  // best effort: a store error never stops training
}

Result<int64_t> RunRecorder::record_shardings(int64_t step, const ShardingTable& table) {
  if (store_ == nullptr || run_id_.empty()) return int64_t{0};
  if (step == snapshot_step_) return snapshot_id_;  // repeated t:shardings() add no rows
  ENG_ASSIGN_OR_RETURN(snapshot_id_, record_sharding_snapshot(*store_, run_id_, step, table));
  snapshot_step_ = step;
  return snapshot_id_;
}

void record_function_compile(MetricsStore& store, const CompileEvent& ev,
                             const CompileInfo& compiled) {
  for (size_t i = 0; i < ev.records.size(); ++i) {
    const CacheRecord& c = ev.records[i];
    CompilationRow row;
    row.fn_name = ev.key.fn_name;
    row.module_name = ev.key.module_name();
    row.outcome = c.outcome;
    row.cache_level = c.level;
    row.reason_kind = c.reason_kind;
    row.reason_text = c.reason_text;
    if (c.with_signature) row.in_signature = ev.key.signature.to_string();
    row.cache_key = compiled.key;
    row.compile_s = c.compile_s;
    Result<int64_t> id = store.record_compilation(row);
    if (!id.ok() || static_cast<int>(i) != ev.analysis_record || !ev.exe) continue;
    (void)store.record_memory_analysis(*id, memory_row(ev.exe->memory(), 0));
  }
}

}  // namespace eng
