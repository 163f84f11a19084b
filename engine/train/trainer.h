// engine/train/trainer.h: owns a run: config, mesh, the traced train_step, its Executable,
// the device arrays (params, optimizer state, step, batch), the data source, the dispatcher
// thread that runs steps asynchronously, checkpoints, and the metrics-store hookup.
//
//   ENG_ASSIGN_OR_RETURN(auto t, Trainer::create(config, mesh, {.store = store}));
//   ENG_ASSIGN_OR_RETURN(auto exe, t->compile());          // AOT, from the shaped batch
//   ENG_ASSIGN_OR_RETURN(StepHandle h, t->step());         // returns before the devices finish
//   ENG_ASSIGN_OR_RETURN(StepMetrics m, h.wait());         // the sync point
//   ENG_RETURN_IF_ERROR(t->train(100, [](const StepMetrics& m) {   // the MaxText loop
//     fmt::print("{}\n", step_line(m));                     // MaxText's console line
//     return true;                                          // false: stop after this step
//   }));
//
// Threading: a Trainer is driven from ONE host thread. Device work (batch upload, execute,
// metric fetch, debug delays) runs on the dispatcher thread; the host touches device arrays
// only behind a barrier (checkpoint, fetch_argument). At most max_inflight_steps steps are
// pending; step() blocks when that many are.
//
// Timing (docs/metrics-store.md, MaxText step-timing PR): in train(), a step's time is the interval
// between consecutive loss syncs; compile time is recorded apart (StepMetrics::compile_s) and
// never in a step; a checkpoint is a barrier whose duration is recorded on its own (the
// `checkpoints` and `events` tables) and charged to no step. A bare handle's wait() reports
// the device-side time of that step instead (REPL use, where the host may idle between reads).
//
// Restore order on create (MaxText's common/checkpointing.py): latest checkpoint under
// <base_output_directory>/<run_name>/checkpoints (when enable_checkpointing) ->
// load_parameters_path (params only) -> load_full_state_path -> fresh init. Checkpoint N
// holds the state after step N; a resumed trainer continues at step N + 1 with the data
// position restored.
//
// Compile cache (engine/compile/cache.h, docs/compile-cache.md): compile() compiles from
// MaxText's shaped batch carrying the input data sharding (aot_shaped_batch_sharding), and
// every step looks the signature of the arrays AS PLACED up in this train_step's tracing
// cache, then the process-wide executable cache, then compilation_cache_dir. Every lookup is
// a `compilations` row; log_compiles / explain_cache_misses print JAX's messages.
//
// With TrainerOptions::shape_only the trainer traces and compiles but allocates nothing:
// that is how llama2-7b's memory analysis is answered on a laptop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/function_ref.h"
#include "engine/compile/cache.h"
#include "engine/compile/executable.h"
#include "engine/compile/jit.h"
#include "engine/mesh/mesh.h"
#include "engine/runtime/runtime.h"
#include "engine/store/metrics_store.h"
#include "engine/train/config.h"
#include "engine/train/data.h"
#include "engine/train/run_recorder.h"
#include "engine/train/train_step.h"

namespace eng {

class Dispatcher;
class Trainer;

struct TrainerOptions {
  bool shape_only = false;             // compile and analyse; allocate no arrays
  bool record_shape_only = false;      // shape_only: still record a run (train_compile)
  int64_t device_capacity_bytes = 0;   // per simulated device; 0 = unlimited
  MetricsStore* store = nullptr;       // not owned; when set: runs, params, steps, metrics,
                                       // checkpoints and events are recorded
  std::vector<std::string> argv{};     // the command line, for the runs table
  std::string script{};                // the script path ("" in a REPL)
  // Under mpirun: polled once per step on the dispatcher thread, after the step ran; whether
  // any process's answer was true comes back in StepMetrics::stop_requested, the same on
  // every process (the shell's Ctrl-C flag: t:train stops everywhere after the same step).
  bool (*stop_requested)() = nullptr;
  // shape_only: this config's trace, made for another mesh of the same device count (the
  // caller vouches that nothing else differs: search.h); null traces here.
  std::shared_ptr<const TracedTrainStep> traced{};
};

// A dispatched step. Reading its metrics synchronises with the devices. Valid while its
// Trainer lives and for the next kStepSlots steps (older handles report a clear error).
class StepHandle {
 public:
  StepHandle() = default;
  bool valid() const { return trainer_ != nullptr; }
  int64_t step() const { return step_; }
  bool ready() const;            // finished on the devices; never blocks
  Result<StepMetrics> wait();    // blocks until finished; errors of this or an earlier step
  Result<double> loss();         // wait().loss

 private:
  friend class Trainer;
  Trainer* trainer_ = nullptr;
  int64_t step_ = -1;
  int64_t ticket_ = -1;          // dispatcher ticket
};

struct CheckpointInfo {
  int64_t step = -1;             // label: the state after this step
  std::string path;
  int64_t bytes = 0;
  double save_s = 0;             // barrier + write + fsync + rename
};

class Trainer {
 public:
  static constexpr int kStepSlots = 256;  // per-step metric slots (ring)

  static Result<std::unique_ptr<Trainer>> create(const Config& config, const Mesh& mesh,
                                                 TrainerOptions options = {});
  ~Trainer();  // drains in-flight steps; ends the store run (FINISHED, or FAILED after an error)

  const ResolvedConfig& config() const { return config_; }
  const Config& raw_config() const { return raw_config_; }
  const Mesh& mesh() const { return mesh_; }
  const Program& program() const { return program_; }
  const TrainStepLayout& layout() const { return layout_; }
  bool shape_only() const { return options_.shape_only; }
  int64_t current_step() const { return step_; }  // next step to dispatch
  const TrainingTflops& tflops() const { return tflops_; }
  const DataSource* data() const { return data_.get(); }
  int max_inflight_steps() const { return max_inflight_; }
  const std::string& run_id() const { return recorder_->run_id(); }  // "" without a store
  RunRecorder& recorder() const { return *recorder_; }  // the one writer of this run's rows
  const std::string& restored_from() const { return restored_from_; }  // "" = fresh init
  // "resumed from step N of run NAME" after a full-state restore ("" otherwise).
  const std::string& resume_note() const { return resume_note_; }
  std::string checkpoint_dir() const;  // <base_output_directory>/<run_name>/checkpoints

  // Compiles train_step ahead of time for the state as placed and MaxText's shaped batch
  // (get_shaped_batch with get_input_data_sharding; without the sharding when
  // aot_shaped_batch_sharding is false), through the cache: a second call is a tracing hit.
  Result<std::shared_ptr<const Executable>> compile();
  // The AOT signature compile() uses, and the signature of the arrays as placed now.
  Result<Signature> aot_signature();
  Signature placed_signature() const;  // REQUIRES: !shape_only()
  const CompileInfo& last_compile() const { return jit_ ? jit_->last() : no_compile_; }
  // The executable the last compile or step used (null before any): a look that records
  // nothing, unlike compile().
  std::shared_ptr<const Executable> current_executable() const {
    return jit_ ? jit_->current() : nullptr;
  }
  int64_t num_compiles() const { return jit_ ? jit_->num_compiles() : 0; }  // real compiles
  // Loads the next batch on the host and dispatches one step; returns before the devices
  // finish (max_inflight_steps > 0). Errors of earlier async steps surface here or on wait.
  Result<StepHandle> step();
  // step() then wait(): the synchronous path.
  Result<StepMetrics> step_and_wait();
  // Barrier: waits for every dispatched step.
  Status wait_all();
  // The loop, MaxText order: load batch -> dispatch N -> flush N-1 (sync; record) -> maybe
  // checkpoint N (barrier) -> [eval]. Runs `steps` more steps; on_step sees each step's
  // metrics once flushed and may return false to stop after the step in flight (Ctrl-C).
  // Saves on completion when enable_checkpointing && save_checkpoint_on_completion, and
  // after a stop by on_step whenever enable_checkpointing.
  Status train(int64_t steps, FunctionRef<bool(const StepMetrics&)> on_step);
  // Saves the state after the last dispatched step (a barrier) under checkpoint_dir().
  Result<CheckpointInfo> save_checkpoint();

  // The metrics of the last dispatched step (waits for it); an error before any step.
  Result<StepMetrics> last_step_metrics();

  // Host copies of a parameter or optimizer-state argument by program argument name
  // (waits for in-flight steps first).
  Result<std::vector<float>> fetch_argument(const std::string& name) const;
  Runtime* runtime() { return runtime_.get(); }

 private:
  friend class StepHandle;
  // Host + device record of one dispatched step, slots_[ticket % kStepSlots]. The host writes
  // the dispatch fields before submit; the dispatcher writes the device fields; the host
  // reads them after the dispatcher's wait (its mutex orders the accesses).
  struct StepRecord {
    int64_t ticket = -1, step = -1;
    bool compiled = false;
    const Executable* exe = nullptr;  // what this step runs (kept alive by the Jit)
    double compile_s = 0, data_s = 0;
    float metrics[8] = {};             // by MetricIndex, in layout_.metrics order
    double device_start = 0, device_end = 0;
    double synced_at = 0;        // host time of the loss sync (0: not synced in train())
    double step_time_s = 0;      // interval between loss syncs (train())
  };
  // A slot: the record, reset for each ticket, and a buffer sized once at setup and kept (a
  // step allocates nothing).
  struct StepSlot : StepRecord {
    // Under mpirun, kProcessValues per process: device_s, collective wait_s, stop requested.
    std::vector<double> process_times;
    // The model's metrics after MaxText's first six (MoE: learning/moe_lb_loss and each
    // layer's load), in layout_.metrics order; sized at setup, replaced by a fresh buffer
    // when a step reuses the slot while a StepMetrics still holds it (ExtraMetrics).
    std::shared_ptr<std::vector<float>> extra_metrics;
  };
  static constexpr size_t kProcessValues = 3;
  // MaxText's metrics (learning/loss ... current_learning_rate) come first, in metrics[];
  // the model's own (MoE) after them, in extra_metrics.
  static constexpr size_t kMaxTextMetrics = 6;
  // Where each MaxText metric sits in StepSlot::metrics, found by name once.
  struct MetricIndex {
    int loss = -1, total_weights = -1, raw_grad_norm = -1, grad_norm = -1, param_norm = -1,
        learning_rate = -1;
  };
  // One batch argument and the HostBatch array that feeds it, found by name once.
  struct BatchFeed {
    int arg = -1;
    std::vector<int32_t> HostBatch::*array = nullptr;
  };
  // debug_* config keys: artificial delays for timing tests.
  struct DebugDelays {
    std::vector<int64_t> device_steps, checkpoint_steps;
    double device_s = 0, checkpoint_s = 0;
  };

  Trainer() = default;
  Status read_options(const Config& config);
  Status init_state();
  Status setup_dispatch();
  // The one place that decides where state argument i lives (SPMD: the Executable's argument
  // shardings). init_state places with it; restore writes into arrays placed by it.
  NamedSharding state_sharding(int arg);
  // The compile cache: the Jit's lookup, recorded. Sets *missed on a tracing miss.
  Status lookup(Signature sig, const std::string& site, int64_t step, bool* missed);
  bool placed_matches(const Signature& sig) const;  // allocation-free: the steady-state check
  Status device_step(int64_t ticket);          // runs on the dispatcher thread
  Result<StepMetrics> metrics_of(int64_t ticket, int64_t step);  // REQUIRES: ticket finished
  Status wait_ticket(int64_t ticket) const;

  // trainer_loop.cpp: the loop, checkpoints and restore.
  Status sync_for_timing(StepSlot& slot);
  Status flush_step(int64_t ticket, int64_t step, FunctionRef<bool(const StepMetrics&)> on_step,
                    bool* keep_going);
  Status check_loss_finite(const StepMetrics& m) const;  // abort_on_nan_loss / _inf_loss
  bool checkpoint_due(int64_t step) const;
  Status restore();
  Status restore_from(const std::string& path, bool params_only);
  Status begin_run();

  Config raw_config_;
  ResolvedConfig config_;
  Mesh mesh_;
  TrainerOptions options_;
  Program program_;
  TrainStepLayout layout_;
  MetricIndex metric_index_;
  // The names of StepSlot::extra_metrics (layout_.metric_names after MaxText's), shared with
  // every StepMetrics::extra.
  std::shared_ptr<const std::vector<std::string>> extra_metric_names_;
  std::vector<BatchFeed> batch_feeds_;
  TrainingTflops tflops_;
  JitOptions jit_options_;                  // from the config's compile-cache keys
  std::unique_ptr<Jit> jit_;                // made on the first lookup (options validated then)
  static inline const CompileInfo no_compile_{};
  std::unique_ptr<RunRecorder> recorder_;
  std::vector<NamedSharding> placement_;    // where state lives (argument_shardings)
  bool aot_batch_sharding_ = true;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<DataSource> data_;
  std::vector<Array> state_;    // one per program argument (params, mu, nu, step, batch)
  std::vector<Array*> arg_ptrs_;  // &state_[i], built once (execute takes pointers)
  std::vector<Array> outputs_;  // non-aliased outputs (metrics), reused every step
  std::vector<HostBatch> staging_;  // host batches in flight: staging_[ticket % size]
  std::vector<StepSlot> slots_;     // kStepSlots
  int64_t step_ = 0;            // next step to dispatch
  int max_inflight_ = 2;        // config max_inflight_steps
  double ref_time_ = 0;         // train(): the previous loss sync (or checkpoint end)
  DebugDelays delays_;
  int64_t last_checkpoint_step_ = -1;
  std::string restored_from_;   // checkpoint path this trainer started from
  std::string resume_note_;     // resume_note()
  std::string restore_message_;  // the restore event, recorded once the run has begun
  std::vector<std::pair<int64_t, std::string>> restore_warnings_;  // skipped checkpoints: step, why
  std::string parent_run_id_;   // the run that saved the restored checkpoint ("" if unknown)
  int64_t first_step_ = 0;      // step_ after restore: the run stepped when step_ moves past it
  bool failed_ = false;         // an async step failed (the run is FAILED)
  std::unique_ptr<Dispatcher> dispatcher_;  // last: stopped before the arrays it uses go
};

}  // namespace eng
