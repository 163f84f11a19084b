// engine/train/trainer.h: owns a run: config, mesh, the traced train_step, its Executable,
// the device arrays (params, optimizer state, step, batch) and the data source.
//
//   ENG_ASSIGN_OR_RETURN(auto t, Trainer::create(config, mesh, {}));
//   ENG_ASSIGN_OR_RETURN(auto exe, t->compile());          // AOT, from the shaped batch
//   ENG_ASSIGN_OR_RETURN(StepMetrics m, t->step());          // one step
//   fmt::print("{}\n", step_line(m));                        // MaxText's console line
//
// With TrainerOptions::shape_only the trainer traces and compiles but allocates nothing:
// that is how llama2-7b's memory analysis is answered on a laptop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/function_ref.h"
#include "engine/compile/executable.h"
#include "engine/mesh/mesh.h"
#include "engine/runtime/runtime.h"
#include "engine/train/config.h"
#include "engine/train/data.h"
#include "engine/train/train_step.h"

namespace eng {

struct TrainerOptions {
  bool shape_only = false;             // compile and analyse; allocate no arrays
  int64_t device_capacity_bytes = 0;   // per simulated device; 0 = unlimited
};

struct StepMetrics {
  int64_t step = 0;                    // the step that ran (0-based)
  double loss = 0, total_weights = 0, raw_grad_norm = 0, grad_norm = 0, param_norm = 0;
  double learning_rate = 0;
  double step_time_s = 0;              // wall time of the step, synchronised on its loss
  double tokens_per_s_per_device = 0;  // perf/per_device_tokens_per_sec
  double tflops_per_device = 0;        // perf/per_device_tflops (per step)
  double tflops_per_s_per_device = 0;  // perf/per_device_tflops_per_sec
  double data_time_s = 0;              // host time spent loading the batch
  bool compiled = false;               // this step triggered a compilation
};

// "completed step: 3, seconds: 0.412, TFLOP/s/device: 0.113, Tokens/s/device: 4970.874,
// total_weights: 2048, loss: 5.102" (MaxText's metric_logger line).
std::string step_line(const StepMetrics& m);

class Trainer {
 public:
  static Result<std::unique_ptr<Trainer>> create(const Config& config, const Mesh& mesh,
                                                 TrainerOptions options = {});
  ~Trainer();

  const ResolvedConfig& config() const { return config_; }
  const Config& raw_config() const { return raw_config_; }
  const Mesh& mesh() const { return mesh_; }
  const Program& program() const { return program_; }
  const TrainStepLayout& layout() const { return layout_; }
  bool shape_only() const { return options_.shape_only; }
  int64_t current_step() const { return step_; }
  const TrainingTflops& tflops() const { return tflops_; }
  const DataSource* data() const { return data_.get(); }

  // Compiles train_step ahead of time (cached: a second call returns the same Executable).
  Result<std::shared_ptr<const Executable>> compile();
  // Runs one training step on the next batch. Fails in shape_only mode.
  Result<StepMetrics> step();
  // Runs up to `steps` steps; on_step may return false to stop early (Ctrl-C).
  Status train(int64_t steps, FunctionRef<bool(const StepMetrics&)> on_step);

  // Host copies of a parameter or optimizer-state argument by program argument name.
  Result<std::vector<float>> fetch_argument(const std::string& name) const;
  Runtime* runtime() { return runtime_.get(); }

 private:
  Trainer() = default;
  Status init_state();

  Config raw_config_;
  ResolvedConfig config_;
  Mesh mesh_;
  TrainerOptions options_;
  Program program_;
  TrainStepLayout layout_;
  TrainingTflops tflops_;
  std::shared_ptr<const Executable> executable_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<DataSource> data_;
  std::vector<Array> state_;    // one per program argument (params, mu, nu, step, batch)
  std::vector<Array> outputs_;  // non-aliased outputs (metrics), reused every step
  HostBatch batch_;
  int64_t step_ = 0;            // next step to run
};

}  // namespace eng
