// tests/pipeline/pipeline_run.h: training a few steps of a (pipelined) config
// on a mesh and collecting what the pipeline tests compare: losses, final
// params per layer (stacked pipeline weights split into
// params/decoder/layers_<l>/...), per-device param bytes and the cost model's
// collective bytes against the runtime's counters.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/compile/executable.h"
#include "engine/ir/interpret.h"
#include "engine/model/llama.h"
#include "engine/model/pipeline.h"
#include "engine/runtime/runtime.h"
#include "engine/train/config.h"
#include "engine/train/data.h"
#include "engine/train/train_step.h"
#include "tests/common/train_state.h"

namespace eng::testing {

// Pins the pipeline to num_pipeline_repeats (1 unless set): MaxText's default
// num_layers_per_pipeline_stage 1 makes a pipeline circular (R = L / S); -1 derives the layers
// per stage from the repeats instead, which is what the tests that pin it assert.
inline Status pin_pipeline_repeats(Config& c) {
  return c.set("num_layers_per_pipeline_stage", int64_t{-1});
}

struct TrainRun {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> params;  // per-layer names (stacked ones split)
  std::shared_ptr<const Executable> exe;
  std::vector<int64_t> device_param_bytes;
  double collective_mismatch = 0;
};

// Stacked pipeline weights ([R,] S, lps, ...) split into their layers l (the
// leading dims' row-major index); layers_outside_pipeline weights (..., L - P at
// param_scan_axis, ...) into layers P + k.
inline void split_pipeline_params(const Program& p, int num_params, const ModelConfig& m,
                                  std::vector<std::vector<float>>& fetched, TrainRun& run) {
  for (int i = 0; i < num_params; ++i) {
    const ValueInfo& v = p.value(p.args()[i].value);
    std::vector<float>& h = fetched[i];
    if (auto out = outside_pipeline_subpath(v.name)) {
      const int a = static_cast<int>(m.param_scan_axis);
      const int64_t outer = v.shape.prod(0, a), K = v.shape[a];
      const int64_t inner = v.shape.prod(a + 1, v.shape.rank());
      for (int64_t k = 0; k < K; ++k) {
        std::vector<float>& layer =
            run.params[fmt::format("params/decoder/layers_{}/{}", m.pipelined_layers() + k, *out)];
        for (int64_t o = 0; o < outer; ++o)
          layer.insert(layer.end(), h.begin() + (o * K + k) * inner,
                       h.begin() + (o * K + k + 1) * inner);
      }
    } else if (auto sub = pipeline_param_subpath(v.name)) {
      const int lead = pipeline_layer_dims(v);
      const int64_t L = v.shape.prod(0, lead), n = v.shape.numel() / L;
      for (int64_t l = 0; l < L; ++l)
        run.params[fmt::format("params/decoder/layers_{}/{}", l, *sub)] =
            std::vector<float>(h.begin() + l * n, h.begin() + (l + 1) * n);
    } else {
      run.params[v.name] = std::move(h);
    }
  }
}

inline Result<TrainRun> train(const ResolvedConfig& cfg, const Mesh& mesh,
                              const CompileOptions& opts, int steps) {
  TrainStepLayout layout;
  Program p = build_train_step(cfg, &layout);
  TrainRun run;
  ENG_ASSIGN_OR_RETURN(run.exe, compile(p, mesh, opts));
  Runtime rt(mesh);
  ENG_ASSIGN_OR_RETURN(std::vector<Array> state, init_train_state(p, *run.exe, cfg, rt));
  for (int d = 0; d < rt.num_devices(); ++d) {
    int64_t bytes = 0;
    for (int i = 0; i < layout.num_params; ++i) bytes += state[i].shards[d].bytes();
    run.device_param_bytes.push_back(bytes);
  }
  ENG_ASSIGN_OR_RETURN(auto data, make_data_source(cfg));
  HostBatch batch;
  std::vector<Array> outputs;
  const std::vector<Array*> args = arg_pointers(state);
  for (int step = 0; step < steps; ++step) {
    data->next(batch);
    ENG_RETURN_IF_ERROR(write_batch(rt, batch, layout, state));
    rt.communicator().reset_counters();
    ENG_RETURN_IF_ERROR(rt.execute(*run.exe, args, outputs));
    float loss = 0;
    ENG_RETURN_IF_ERROR(rt.fetch(outputs[0], &loss));
    run.losses.push_back(loss);
    // The cost model counts what one device receives; with the pipeline's
    // partial permutes (stage 0 receives zeros going forward, the last stage
    // going backward) that is the mean over devices.
    std::map<std::string, double> mean;
    for (int d = 0; d < rt.num_devices(); ++d)
      for (const auto& [k, b] : rt.communicator().bytes_received(d))
        mean[k] += b / rt.num_devices();
    for (const auto& [k, b] : run.exe->cost().collective_bytes)
      run.collective_mismatch = std::max(run.collective_mismatch, std::fabs(mean[k] - b) / b);
  }
  ENG_ASSIGN_OR_RETURN(std::vector<std::vector<float>> fetched, fetch_params(rt, p, layout, state));
  split_pipeline_params(p, layout.num_params, cfg.model, fetched, run);
  return run;
}

// The size of `axis` in the mesh (axes, sizes); 1 when the mesh has no such axis.
inline int64_t axis_size(const std::vector<std::string>& axes, const std::vector<int64_t>& sizes,
                         const std::string& axis) {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] == axis) return sizes[i];
  return 1;
}

// `config` resolved for `devices` devices and trained `steps` steps on one device: the
// sequential reference the pipeline equality tests compare against.
inline Result<TrainRun> train_one_device(const Config& config, int64_t devices, int steps) {
  ENG_ASSIGN_OR_RETURN(ResolvedConfig cfg, resolve_config(config, devices));
  return train(cfg, Mesh(), CompileOptions{}, steps);
}

// `config` (resolved as `cfg`) trained on `mesh` with the config's logical rules (MaxText's
// pipeline rewrite included), in auto or explicit mode, ZeRO-1 when zero1.
inline Result<TrainRun> train_in_mode(const Config& config, const ResolvedConfig& cfg,
                                      const Mesh& mesh, bool explicit_mode, bool zero1,
                                      int steps) {
  ENG_ASSIGN_OR_RETURN(CompileOptions from_config, compile_options_from_config(config));
  CompileOptions o;
  o.rules = from_config.rules;
  o.shard_mode = explicit_mode ? ShardMode::kExplicit : ShardMode::kAuto;
  o.shard_optimizer_over_data = zero1;
  return train(cfg, mesh, o, steps);
}

// Largest relative differences of losses and of final params (max |diff| / max
// |want| per param) between two runs; -1 when the param sets differ.
struct RunDiff {
  double loss_rel = 0, param_rel = 0;
};
inline RunDiff compare_runs(const TrainRun& got, const TrainRun& want) {
  RunDiff d;
  for (size_t s = 0; s < want.losses.size() && s < got.losses.size(); ++s)
    d.loss_rel = std::max(d.loss_rel, std::fabs(double{got.losses[s]} - want.losses[s]) /
                                          std::fabs(double{want.losses[s]}));
  if (got.params.size() != want.params.size()) return {d.loss_rel, -1};
  for (const auto& [name, w] : want.params) {
    auto it = got.params.find(name);
    if (it == got.params.end() || it->second.size() != w.size()) return {d.loss_rel, -1};
    double diff = 0, norm = 0;
    for (size_t k = 0; k < w.size(); ++k) {
      diff = std::max(diff, std::fabs(double{it->second[k]} - w[k]));
      norm = std::max(norm, std::fabs(double{w[k]}));
    }
    d.param_rel = std::max(d.param_rel, diff / norm);
  }
  return d;
}

// The train step of config c in the double-precision reference interpreter, from the
// initial parameters and the first batch: {loss, raw_grad_norm} (empty on failure).
inline std::vector<double> interpreter_metrics(const Config& c) {
  Result<ResolvedConfig> cfg = resolve_config(c, 8);
  EXPECT_TRUE(cfg.ok()) << cfg.status().message();
  TrainStepLayout layout;
  Program p = build_train_step(*cfg, &layout);
  auto data = make_data_source(*cfg);
  EXPECT_TRUE(data.ok());
  HostBatch batch;
  (*data)->next(batch);
  std::vector<HostTensor> args;
  std::vector<float> host;
  for (size_t i = 0; i < p.args().size(); ++i) {
    const ValueInfo& v = p.value(p.args()[i].value);
    HostTensor t;
    t.shape = v.shape;
    t.dtype = v.dtype;
    t.data.assign(v.shape.numel(), 0.0);
    if (p.args()[i].role == ArgRole::kParam) {
      host.resize(v.shape.numel());
      init_param(v, cfg->init_weights_seed, host.data(), cfg->model.pipelined_layers());
      t.data.assign(host.begin(), host.end());
    } else if (static_cast<int>(i) >= layout.first_batch_arg) {
      const auto& a = *batch.arrays()[i - layout.first_batch_arg];
      t.data.assign(a.begin(), a.end());
    }
    args.push_back(std::move(t));
  }
  Result<std::vector<HostTensor>> out = interpret(p, args);
  EXPECT_TRUE(out.ok()) << out.status().message();
  if (!out.ok()) return {};
  const int m = layout.first_metric_output;
  return {(*out)[m].data[0], (*out)[m + 2].data[0]};  // loss, raw_grad_norm
}

}  // namespace eng::testing
