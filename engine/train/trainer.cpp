// engine/train/trainer.cpp: state initialisation, compile, and the synchronous step.
#include "engine/train/trainer.h"

#include <cstring>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/base/thread_pool.h"
#include "engine/model/llama.h"

namespace eng {

std::string step_line(const StepMetrics& m) {
  return fmt::format(
      "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, "
      "total_weights: {}, loss: {:.3f}",
      m.step, m.step_time_s, m.tflops_per_s_per_device, m.tokens_per_s_per_device,
      static_cast<int64_t>(m.total_weights), m.loss);
}

Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::create(const Config& config, const Mesh& mesh,
                                                 TrainerOptions options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->raw_config_ = config;
  t->mesh_ = mesh;
  t->options_ = options;
  ENG_ASSIGN_OR_RETURN(t->config_, resolve_config(config, mesh.num_devices()));
  t->program_ = build_train_step(t->config_, &t->layout_);
  t->tflops_ = calculate_tflops_training_per_device(
      t->config_.model, static_cast<double>(t->config_.global_batch_size) / mesh.num_devices(),
      t->config_.max_target_length);
  if (!options.shape_only) {
    ENG_ASSIGN_OR_RETURN(t->data_, make_data_source(t->config_));
    ENG_RETURN_IF_ERROR(t->init_state());
  }
  return t;
}

Status Trainer::init_state() {
  runtime_ = std::make_unique<Runtime>(mesh_, options_.device_capacity_bytes);
  const NamedSharding replicated{mesh_, PartitionSpec()};
  const auto& args = program_.args();
  state_.clear();
  state_.reserve(args.size());
  std::vector<float> host;
  for (size_t i = 0; i < args.size(); ++i) {
    const ValueInfo& v = program_.value(args[i].value);
    if (args[i].role == ArgRole::kParam) {
      host.resize(static_cast<size_t>(v.shape.numel()));
      init_param(v, config_.init_weights_seed, host.data());
      ENG_ASSIGN_OR_RETURN(Array a, runtime_->put(host.data(), v.shape, v.dtype, replicated, v.name));
      state_.push_back(std::move(a));
    } else {
      ENG_ASSIGN_OR_RETURN(Array a, runtime_->zeros(v.shape, v.dtype, replicated, v.name));
      state_.push_back(std::move(a));
    }
  }
  return ok_status();
}

Result<std::shared_ptr<const Executable>> Trainer::compile() {
  if (executable_) return executable_;
  CompileOptions opts;
  ENG_ASSIGN_OR_RETURN(executable_, eng::compile(program_, mesh_, opts));
  return executable_;
}

Result<StepMetrics> Trainer::step() {
  if (options_.shape_only)
    return failed_precondition("trainer: created with shape_only=true; it can compile but not step");
  StepMetrics m;
  m.step = step_;
  m.compiled = executable_ == nullptr;
  const double t0 = now_seconds();
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, compile());
  const double t1 = now_seconds();
  data_->next(batch_);
  const auto arrays = batch_.arrays();
  for (size_t k = 0; k < arrays.size(); ++k) {
    Array& a = state_[layout_.first_batch_arg + k];
    ENG_RETURN_IF_ERROR(runtime_->write(a, arrays[k]->data()));
  }
  const double t2 = now_seconds();
  std::vector<Array*> args;
  args.reserve(state_.size());
  for (Array& a : state_) args.push_back(&a);
  ENG_RETURN_IF_ERROR(runtime_->execute(*exe, args, outputs_));
  float metrics[6];
  for (int k = 0; k < 6; ++k) ENG_RETURN_IF_ERROR(runtime_->fetch(outputs_[k], &metrics[k]));
  const double t3 = now_seconds();
  m.loss = metrics[0];
  m.total_weights = metrics[1];
  m.raw_grad_norm = metrics[2];
  m.grad_norm = metrics[3];
  m.param_norm = metrics[4];
  m.learning_rate = metrics[5];
  m.data_time_s = t2 - t1;
  m.step_time_s = t3 - t1;  // compile time (t1 - t0) is recorded apart, never in the step
  (void)t0;
  const double tokens = static_cast<double>(config_.global_batch_size * config_.max_target_length);
  m.tokens_per_s_per_device = tokens / mesh_.num_devices() / m.step_time_s;
  m.tflops_per_device = tflops_.total;
  m.tflops_per_s_per_device = tflops_.total / m.step_time_s;
  ++step_;
  return m;
}

Status Trainer::train(int64_t steps, FunctionRef<bool(const StepMetrics&)> on_step) {
  for (int64_t i = 0; i < steps; ++i) {
    ENG_ASSIGN_OR_RETURN(StepMetrics m, step());
    if (!on_step(m)) break;
  }
  return ok_status();
}

Result<std::vector<float>> Trainer::fetch_argument(const std::string& name) const {
  if (options_.shape_only) return failed_precondition("trainer: shape_only: no arrays to fetch");
  int i = program_.find_arg(name);
  if (i < 0) return not_found("trainer: no argument named '{}'", name);
  const ValueInfo& v = program_.value(program_.args()[i].value);
  if (v.dtype != DType::kF32) return invalid_argument("trainer: '{}' is not f32", name);
  std::vector<float> host(static_cast<size_t>(v.shape.numel()));
  ENG_RETURN_IF_ERROR(runtime_->fetch(state_[i], host.data()));
  return host;
}

}  // namespace eng
