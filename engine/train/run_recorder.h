// engine/train/run_recorder.h: the one writer of a run's rows in the metrics store: the run
// itself, its params, steps and metrics, compilations with their memory and cost analysis,
// checkpoints, events and tensor-sharding snapshots. The trainer and the shell hand it what
// happened; nothing else in the engine or the shell writes store rows for a run.
//
//   RunRecorder rec(store, /*log_period=*/1);           // store may be null: records nothing
//   ENG_RETURN_IF_ERROR(rec.begin(info));
//   rec.record_compile(event, /*step=*/0, /*device_limit_bytes=*/0);
//   ENG_RETURN_IF_ERROR(rec.record_step(metrics, /*global_tokens=*/2048, /*num_devices=*/4));
//   rec.end(RunStatus::kFinished);
//
// Step and metric rows are buffered by the store and flushed every log_period steps; every
// other record is its own small transaction and best effort (a failed event or compilation
// row never stops training; a failed step flush does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/compile/jit.h"
#include "engine/store/metrics_store.h"
#include "engine/train/inspect.h"

namespace eng {

// A step's model metrics beyond MaxText's (MoE: learning/moe_lb_loss, moe/layer_<l>/expert_<e>/
// tokens and .../dropped) as (name, value) pairs. The names are the trainer's, shared; the
// values are the step's buffer, shared too: the trainer writes a later step into a fresh buffer
// while a StepMetrics still holds this one, so reading metrics allocates nothing and a held
// StepMetrics never changes.
class ExtraMetrics {
 public:
  ExtraMetrics() = default;
  ExtraMetrics(std::shared_ptr<const std::vector<std::string>> names,
               std::shared_ptr<const std::vector<float>> values)
      : names_(std::move(names)), values_(std::move(values)) {}
  size_t size() const { return values_ ? values_->size() : 0; }
  bool empty() const { return size() == 0; }
  std::pair<const std::string&, double> operator[](size_t k) const {
    return {(*names_)[k], (*values_)[k]};
  }
  class Iterator {
   public:
    Iterator(const ExtraMetrics* m, size_t k) : m_(m), k_(k) {}
    std::pair<const std::string&, double> operator*() const { return (*m_)[k_]; }
    Iterator& operator++() {
      ++k_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return k_ != o.k_; }

   private:
    const ExtraMetrics* m_;
    size_t k_;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size()}; }

 private:
  std::shared_ptr<const std::vector<std::string>> names_;
  std::shared_ptr<const std::vector<float>> values_;
};

struct StepMetrics {
  int64_t step = 0;  // the step that ran (0-based)
  double loss = 0, total_weights = 0, raw_grad_norm = 0, grad_norm = 0, param_norm = 0;
  double learning_rate = 0;
  double step_time_s = 0;              // train(): between consecutive loss syncs;
                                       // bare handle: device_time_s
  double device_time_s = 0;            // dispatcher: batch upload + execute + metric fetch
  double tokens_per_s = 0;             // global: tokens of the whole batch per second
  double tokens_per_s_per_device = 0;  // perf/per_device_tokens_per_sec
  double tflops_per_device = 0;        // perf/per_device_tflops (per step)
  double tflops_per_s_per_device = 0;  // perf/per_device_tflops_per_sec
  double data_time_s = 0;              // host time spent loading the batch
  double compile_s = 0;   // compile time before this step's dispatch (not in step_time_s)
  bool compiled = false;  // this step triggered a compilation
  bool synced = false;    // step_time_s was measured at a loss sync (train())
  // Under mpirun: some process's TrainerOptions::stop_requested said yes after this step ran
  // (Ctrl-C); the same on every process. Without mpirun: false.
  bool stop_requested = false;
  // The model's own metrics by MaxText-style name (MoE: learning/moe_lb_loss,
  // moe/layer_<l>/expert_<e>/tokens and .../dropped); empty for a dense llama.
  ExtraMetrics extra;
};

// "completed step: 3, seconds: 0.412, TFLOP/s/device: 0.113, Tokens/s/device: 4970.874,
// total_weights: 2048, loss: 5.102" (MaxText's metric_logger line).
std::string step_line(const StepMetrics& m);
// MaxText's line before the first step (metric_logger.py): "number parameters: 8.030 billion".
std::string number_parameters_line(int64_t num_params);

class RunRecorder {
 public:
  RunRecorder(MetricsStore* store, int64_t log_period) : store_(store), log_period_(log_period) {}
  ~RunRecorder() = default;
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  bool recording() const { return store_ != nullptr; }
  const std::string& run_id() const { return run_id_; }  // "" before begin() or without a store
  MetricsStore* store() const { return store_; }

  // Inserts the run (status RUNNING) with its params. Fills what the caller leaves empty:
  // the script's hash (from the file), the git revision (of the script's directory, else the
  // working directory); the host and pid are the store's.
  Status begin(RunInfo info);
  // Ends the run: FINISHED, or FAILED when `status` says so, the last flush fails or the
  // script failed (set_script_error), or KILLED when marked interrupted. A run that never stepped and recorded nothing of its own (no tags,
  // no logged values) is deleted instead (its compilations and events stay, run_id NULL).
  // Idempotent; store errors are dropped (destructor paths).
  void end(RunStatus status, bool stepped);
  // Ctrl-C stopped the loop: the run ends KILLED unless a later train() completes.
  void set_interrupted(bool interrupted) { interrupted_ = interrupted; }
  bool interrupted() const { return interrupted_; }
  // The script that drove the run ended with an uncaught error while the run was open (the
  // shell calls it for every live trainer before it exits): the run ends FAILED, as MLflow
  // ends a run FAILED when an exception leaves its `with` block, even after its last step;
  // an interrupted run stays KILLED. `message` (its first line) becomes an error event.
  void set_script_error(std::string message);

  // t:tag{k=v} and t:log{name=value}: a tag, and a free-form metric at `step` (context train).
  Status set_tag(const std::string& key, const std::string& value);
  Status log_value(const std::string& name, int64_t step, double value);
  // The run in this store that saved the checkpoint at `path` ({run_id, name}; empty if none).
  // (run id, name) of the run that wrote the checkpoint at `path`: the run the file names
  // (`file_run_id`, its "shardlab_run_id" metadata) when this store has it, else the run its
  // row in the checkpoints table names; {} when neither is known.
  std::pair<std::string, std::string> checkpoint_run(const std::string& path,
                                                     const std::string& file_run_id);

  // A cache lookup: one `compilations` row per consulted level, the analysis rows on the one
  // that produced the executable, and an event per note. Best effort.
  void record_compile(const CompileEvent& ev, std::optional<int64_t> step,
                      int64_t device_limit_bytes);
  // A compile made without this recorder (a search's candidate, planned on a pool thread): one
  // `compilations` row as the lookup answered it (`info`), its memory and cost analysis.
  // Returns its compile_id (0 without a store or when the row failed). Best effort.
  int64_t record_plan(const CompileInfo& info, const Executable& exe, int64_t step,
                      int64_t device_limit_bytes);
  // The compile_id of the last record_compile row that carries an analysis (0: none).
  int64_t last_analysis_compile_id() const { return last_analysis_compile_id_; }
  // The steady-state tracing hit of a step (no CompileEvent is built for it).
  void record_tracing_hit(const CacheKey& key, int64_t step);
  // One step: a `steps` row and the MaxText metrics, buffered; flushed every log_period.
  Status record_step(const StepMetrics& m, double global_tokens, int64_t num_devices);
  // Under mpirun: each process's device time and collective wait of `step` (the first two of
  // per_process values per process, engine/dist), as metrics dist/device_time_s/process_<p>
  // and dist/collective_wait_s/process_<p> (docs/distributed.md has the straggler query).
  void record_process_times(int64_t step, std::span<const double> times, size_t per_process);
  Status flush();  // everything buffered, in one transaction
  void record_checkpoint(int64_t step, const std::string& path, std::optional<int64_t> bytes,
                         double save_s, bool committed);
  void record_event(const std::string& kind, const std::string& level, int64_t step,
                    const std::string& message);
  // One tensor_shardings snapshot per step: a second call for the same step records nothing
  // and returns the first snapshot's id (0 without a store).
  Result<int64_t> record_shardings(int64_t step, const ShardingTable& table);

 private:
  MetricsStore* store_;          // not owned; null = record nothing
  int64_t log_period_ = 1;       // steps per store transaction
  int64_t unflushed_steps_ = 0;  // steps buffered since the last flush
  std::string run_id_;
  bool ended_ = false;
  bool interrupted_ = false;
  std::string script_error_;  // set_script_error: "" = none
  int64_t last_step_ = 0;     // the last step recorded (for the script error's event)
  int64_t snapshot_step_ = -1, snapshot_id_ = 0;  // the last sharding snapshot
  int64_t last_analysis_compile_id_ = 0;  // record_compile's row with the analysis
  // record_process_times' metric names per process (device time, collective wait), made once.
  std::vector<std::pair<std::string, std::string>> process_keys_;
};

// A jitted function's cache lookup (engine/frontend/jit_function.h's JitLookup event),
// outside any run: one `compilations` row per record of `ev` under its key's fn_name (module
// jit_<fn_name>), its cache_key the executable's (`compiled`: the Compiled's CompileInfo), and
// for the record with the analysis (a miss) its memory analysis. The shell writes every miss
// and each signature's first hit. Best effort: a store that cannot be written does not stop
// the computation.
void record_function_compile(MetricsStore& store, const CompileEvent& ev,
                             const CompileInfo& compiled);

}  // namespace eng
