// tests/spmd/spmd_run.h: what the spmd and model tests share: a hand-driven training run of a
// config on a mesh (losses, final parameters, collective bytes moved vs compiled), its relative
// distance from the one-device run, the loop that checks a list of meshes against one device,
// and the timed, printed shape-only compile of a large preset.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine/compile/executable.h"
#include "engine/runtime/runtime.h"
#include "engine/train/config.h"
#include "engine/train/data.h"
#include "engine/train/train_step.h"
#include "tests/common/tiny_config.h"
#include "tests/common/train_state.h"

namespace eng::testing {

// The model of the spmd acceptance tests (matrix_test, gqa_test): 2 layers, emb 64, 4 heads of
// 16, mlp 128, vocab 256, seq 32, one sequence per device, adam_eps 1e-4 (docs/sharding.md
// says why sharded runs are compared with it), dtype float32 (the tolerances are float32's;
// sharded bf16 against one device is tests/bf16's MatchesOneDevice).
inline TinyLlama spmd_model(int64_t steps) {
  return {.model_name = "llama-tiny",
          .emb_dim = 64,
          .query_heads = 4,
          .kv_heads = 4,
          .head_dim = 16,
          .mlp_dim = 128,
          .layers = 2,
          .vocab_size = 256,
          .seq = 32,
          .per_device_batch = 1.0,
          .learning_rate = 1e-3,
          .steps = steps,
          .warmup_steps_fraction = 0.2,
          .adam_eps = 1e-4,
          .dtype = "float32"};
}

struct SpmdRun {
  std::vector<float> losses;               // one per step
  std::vector<std::vector<float>> params;  // after the last step, in argument order
  double max_collective_mismatch = 0;      // |bytes moved - compiled bytes|, any device and key
};

// Called after the last step, before the parameters are fetched.
using InspectRun =
    std::function<void(const Program& p, const Executable& exe, Runtime& rt,
                       const std::vector<Array>& state, const std::vector<Array>& outputs)>;

// Builds cfg's train_step, compiles it for mesh with opts and runs `steps` steps from the
// initial state on cfg's data, comparing every device's received bytes with the compiled
// collective bytes after each step.
inline Result<SpmdRun> run_train_steps(const ResolvedConfig& cfg, const Mesh& mesh,
                                       const CompileOptions& opts, int steps,
                                       const InspectRun& inspect = {}) {
  TrainStepLayout layout;
  Program p = build_train_step(cfg, &layout);
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, compile(p, mesh, opts));
  Runtime rt(mesh);
  ENG_ASSIGN_OR_RETURN(std::vector<Array> state, init_train_state(p, *exe, cfg, rt));
  ENG_ASSIGN_OR_RETURN(auto data, make_data_source(cfg));
  HostBatch batch;
  SpmdRun run;
  std::vector<Array> outputs;
  const std::vector<Array*> args = arg_pointers(state);
  for (int step = 0; step < steps; ++step) {
    data->next(batch);
    ENG_RETURN_IF_ERROR(write_batch(rt, batch, layout, state));
    rt.communicator().reset_counters();
    ENG_RETURN_IF_ERROR(rt.execute(*exe, args, outputs));
    float loss = 0;
    ENG_RETURN_IF_ERROR(rt.fetch(outputs[0], &loss));
    run.losses.push_back(loss);
    for (int d = 0; d < rt.num_devices(); ++d) {
      auto moved = rt.communicator().bytes_received(d);
      auto planned = exe->collective_bytes_received_by(d);  // this device's share
      for (const auto& [k, b] : planned)
        run.max_collective_mismatch =
            std::max(run.max_collective_mismatch, std::fabs(moved[k] - b));
      for (const auto& [k, b] : moved)
        run.max_collective_mismatch =
            std::max(run.max_collective_mismatch, std::fabs(planned[k] - b));
    }
  }
  if (inspect) inspect(p, *exe, rt, state, outputs);
  ENG_ASSIGN_OR_RETURN(run.params, fetch_params(rt, p, layout, state));
  return run;
}

// max over steps of |got - want| / |want| (each step's ratio in float, as the losses are).
inline double max_loss_rel(const std::vector<float>& got, const std::vector<float>& want) {
  double rel = 0;
  for (size_t s = 0; s < want.size(); ++s)
    rel = std::max(rel, static_cast<double>(std::fabs(got[s] - want[s]) / std::fabs(want[s])));
  return rel;
}

// max over parameters of max|got - want| / max|want|.
inline double max_param_rel(const std::vector<std::vector<float>>& got,
                            const std::vector<std::vector<float>>& want) {
  double rel = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double diff = 0, norm = 0;
    for (size_t k = 0; k < want[i].size(); ++k) {
      diff = std::max(diff, static_cast<double>(std::fabs(got[i][k] - want[i][k])));
      norm = std::max(norm, static_cast<double>(std::fabs(want[i][k])));
    }
    rel = std::max(rel, diff / norm);
  }
  return rel;
}

// A mesh of a sharded-equals-one-device loop, in auto or explicit mode.
struct MeshCase {
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  ShardMode mode = ShardMode::kAuto;
};

// For each case: make_config(mesh) trained `steps` steps on its mesh has losses within 1e-5
// (relative, every step) of want's, final parameters within 1e-5 of want_params' (want's when
// null: a scanned run compared with an unscanned one's losses but its own parameters), and moves
// exactly the compiled collective bytes. Prints "[tag] <mesh> <mode>: loss rel, param rel".
inline void expect_sharded_equals_one_device(
    std::string_view tag, const std::vector<MeshCase>& cases,
    const std::function<ResolvedConfig(const Mesh&)>& make_config, int steps, const SpmdRun& want,
    const SpmdRun* want_params = nullptr) {
  for (const MeshCase& c : cases) {
    const Mesh mesh = *Mesh::create(c.axes, c.sizes);
    CompileOptions o;
    o.shard_mode = c.mode;
    Result<SpmdRun> got = run_train_steps(make_config(mesh), mesh, o, steps);
    ASSERT_TRUE(got.ok()) << mesh.to_string() << ": " << got.status().message();
    const double loss_rel = max_loss_rel(got->losses, want.losses);
    const double param_rel = max_param_rel(got->params, (want_params ? *want_params : want).params);
    fmt::print("[{}] {} {}: loss rel {:.2e}, param rel {:.2e}, losses {:.5f}..{:.5f}\n", tag,
               mesh.to_string(), c.mode == ShardMode::kExplicit ? "explicit" : "auto", loss_rel,
               param_rel, got->losses.front(), got->losses.back());
    EXPECT_LT(loss_rel, 1e-5) << mesh.to_string();
    EXPECT_LT(param_rel, 1e-5) << mesh.to_string();
    EXPECT_EQ(got->max_collective_mismatch, 0) << mesh.to_string();
  }
}

struct ShapeOnlyCompile {
  std::shared_ptr<const Executable> exe;
  double secs = 0;  // wall time of compile()
};

// Compiles p for mesh (no data touched), timed, and prints
// "[tag] <mesh>: compile <s> s; <memory>; collectives per device per step: <key>=<GiB> ...".
inline Result<ShapeOnlyCompile> compile_shape_only(const Program& p, const Mesh& mesh,
                                                   std::string_view tag) {
  const auto t0 = std::chrono::steady_clock::now();
  auto exe = compile(p, mesh, CompileOptions{});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!exe.ok()) return exe.status();
  std::string coll;
  for (const auto& [k, b] : (*exe)->cost().collective_bytes)
    coll += fmt::format(" {}={:.2f}GiB", k, b / 1073741824.0);
  fmt::print("[{}] {}: compile {:.2f} s; {}; collectives per device per step:{}\n", tag,
             mesh.to_string(), secs, (*exe)->memory().to_string(), coll);
  return ShapeOnlyCompile{*exe, secs};
}

}  // namespace eng::testing
