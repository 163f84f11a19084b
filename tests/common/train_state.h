// tests/common/train_state.h: the hand-driven train_step loop shared by the tests that run
// the compiled program on a Runtime directly (spmd, remat, pipeline) and bench/memory_report:
// place the initial state, write each batch, fetch the parameters. No GoogleTest here.
#pragma once

#include <utility>
#include <vector>

#include "engine/base/status.h"
#include "engine/compile/executable.h"
#include "engine/model/llama.h"
#include "engine/runtime/runtime.h"
#include "engine/train/config.h"
#include "engine/train/data.h"
#include "engine/train/train_step.h"

namespace eng::testing {

// One Array per argument of p, placed with exe's argument shardings: parameters initialised
// from cfg.init_weights_seed, everything else (optimizer state, step, batch) zeros.
inline Result<std::vector<Array>> init_train_state(const Program& p, const Executable& exe,
                                                   const ResolvedConfig& cfg, Runtime& rt) {
  std::vector<Array> state;
  std::vector<float> host;
  for (size_t i = 0; i < p.args().size(); ++i) {
    const ValueInfo& v = p.value(p.args()[i].value);
    const NamedSharding& s = exe.argument_sharding(static_cast<int>(i));
    if (p.args()[i].role == ArgRole::kParam) {
      host.resize(v.shape.numel());
      init_param(v, cfg.init_weights_seed, host.data(), cfg.model.pipelined_layers(),
                 cfg.model.gpt3());
      ENG_ASSIGN_OR_RETURN(Array a, rt.put(host.data(), v.shape, v.dtype, s, v.name));
      state.push_back(std::move(a));
    } else {
      ENG_ASSIGN_OR_RETURN(Array a, rt.zeros(v.shape, v.dtype, s, v.name));
      state.push_back(std::move(a));
    }
  }
  return state;
}

// The argument list for Runtime::execute: a pointer to each element of state.
inline std::vector<Array*> arg_pointers(std::vector<Array>& state) {
  std::vector<Array*> args;
  for (Array& a : state) args.push_back(&a);
  return args;
}

// Copies the batch into its six arguments (from layout.first_batch_arg on).
inline Status write_batch(Runtime& rt, const HostBatch& batch, const TrainStepLayout& layout,
                          std::vector<Array>& state) {
  const auto arrays = batch.arrays();
  for (size_t k = 0; k < arrays.size(); ++k)
    ENG_RETURN_IF_ERROR(rt.write(state[layout.first_batch_arg + k], arrays[k]->data()));
  return ok_status();
}

// The parameters (the first layout.num_params arguments) fetched to the host, in argument order.
inline Result<std::vector<std::vector<float>>> fetch_params(Runtime& rt, const Program& p,
                                                            const TrainStepLayout& layout,
                                                            const std::vector<Array>& state) {
  std::vector<std::vector<float>> params;
  for (int i = 0; i < layout.num_params; ++i) {
    const ValueInfo& v = p.value(p.args()[i].value);
    std::vector<float> h(v.shape.numel());
    ENG_RETURN_IF_ERROR(rt.fetch(state[i], h.data()));
    params.push_back(std::move(h));
  }
  return params;
}

}  // namespace eng::testing
