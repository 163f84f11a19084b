// engine/train/plan.h: sl.plan's engine side: a shape-only compile of the config's train_step
// for its compile_topology, and the predicted step time (engine/compile/predict.h).
//
//   Config c;  c.set("model_name", "llama2-70b"); c.set("compile_topology", "v6e-256");
//   ENG_ASSIGN_OR_RETURN(Plan p, plan_for_topology(c, {.store = store}));
//   fmt::print("{}\n", p.predicted.to_table());
//
// The mesh is MaxText's (physical_mesh.h): ici_* over one slice, dcn_* over
// compile_topology_num_slices; an axis of size ici x dcn. The trainer is created shape_only
// on it, so nothing is allocated. With a store, the compile is recorded as any compile is and
// the prediction goes to the `predictions` table under that compilation's compile_id.
#pragma once

#include <memory>

#include "engine/base/status.h"
#include "engine/compile/predict.h"
#include "engine/mesh/physical_mesh.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"

namespace eng {

struct PlanOptions {
  MetricsStore* store = nullptr;  // not owned; null: record nothing
  // MaxText's TFLOP count halves causal attention since PR #1988 (2025-07); tpu-recipes logs
  // before it (tags v0.1.0-v0.1.4) count it whole. false reproduces those logs' count.
  bool causal_attention_halved = true;
  std::vector<std::string> argv{};
  std::string script{};
  bool record_run = false;  // the trainer records a run of its own (shardlab train_compile)
  std::shared_ptr<const TracedTrainStep> traced{};  // TrainerOptions::traced (search.h)
};

struct Plan {
  std::unique_ptr<Trainer> trainer;        // shape_only, on `physical.mesh`
  std::shared_ptr<const Executable> exe;
  PhysicalMesh physical;
  Prediction predicted;
  int64_t compile_id = 0;                  // the store's row (0 without a store)
};

// compile_topology (+ compile_topology_num_slices) and the ici_* / dcn_* keys -> the mesh laid
// on the hardware. Errors: no compile_topology; an unknown topology; ici or dcn products that
// do not match (both numbers named).
Result<PhysicalMesh> physical_mesh_from_config(const Config& config);

Result<Plan> plan_for_topology(const Config& config, const PlanOptions& options = {});

// The `predictions` row (and its `prediction_parts`) of a prediction.
PredictionRow prediction_row(const Prediction& p);

}  // namespace eng
