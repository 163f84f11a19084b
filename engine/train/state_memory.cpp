// engine/train/state_memory.cpp: a trainer's host memory, item by item, before it allocates.
#include "engine/train/state_memory.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "engine/compile/executable.h"
#include "engine/runtime/runtime.h"
#include "engine/train/train_step.h"

namespace eng {
namespace {

int64_t array_bytes(const ValueInfo& v) { return v.shape.numel() * dtype_size(v.dtype); }

// Per-array limit first (the error names the array), as init_state would.
Status check_each_array(const Program& p) {
  for (const Argument& a : p.args()) {
    const ValueInfo& v = p.value(a.value);
    const std::string what = a.role == ArgRole::kParam ? "trainer: parameter '" + v.name + "'"
                                                       : "trainer: array '" + v.name + "'";
    ENG_RETURN_IF_ERROR(check_array_bytes(v.shape, v.dtype, what));
  }
  return ok_status();
}

// The executable compile() will build (same program, argument specs, mesh and options),
// compiled here without any cache.
Result<std::shared_ptr<const Executable>> plan(Trainer& t) {
  ENG_ASSIGN_OR_RETURN(Signature sig, t.aot_signature());
  ENG_ASSIGN_OR_RETURN(CompileOptions options, compile_options_from_config(t.raw_config()));
  Program p = t.program();
  for (size_t k = 0; k < sig.args.size(); ++k)
    p.mutable_value(p.args()[k].value).spec = sig.args[k].sharding.spec;
  return compile(p, t.mesh(), options);
}

}  // namespace

Result<std::vector<MemoryItem>> trainer_memory_items(Trainer& t) {
  ENG_RETURN_IF_ERROR(check_each_array(t.program()));
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, plan(t));
  const int64_t devices = t.mesh().num_devices();
  const Program& local = exe->program();  // per device: local shapes
  std::vector<MemoryItem> items;
  int64_t largest_param = 0, batch = 0;
  for (size_t k = 0; k < local.args().size(); ++k) {
    const ValueInfo& v = local.value(local.args()[k].value);
    const ValueInfo& global = t.program().value(t.program().args()[k].value);
    items.push_back({v.name, array_bytes(v) * devices});
    if (local.args()[k].role == ArgRole::kParam)
      largest_param = std::max(largest_param, global.shape.numel() * int64_t{sizeof(float)});
    if (local.args()[k].role == ArgRole::kBatch) batch += array_bytes(global);
  }
  const MemoryAnalysis& m = exe->memory();
  items.push_back({devices == 1 ? std::string("executable temps")
                                : fmt::format("executable temps ({} x {} per device)", devices,
                                              format_bytes(m.temp_bytes)),
                   m.temp_bytes * devices});
  const int64_t outputs = std::max<int64_t>(m.output_bytes - m.alias_bytes, 0);
  items.push_back({"executable outputs", outputs * devices});
  items.push_back({"host buffer initialising the largest parameter", largest_param});
  const int staged = std::max(1, t.max_inflight_steps());
  items.push_back({fmt::format("host batches ({} staged)", staged), batch * staged});
  return items;
}

Status check_trainer_memory(Trainer& t) {
  ENG_ASSIGN_OR_RETURN(std::vector<MemoryItem> items, trainer_memory_items(t));
  return check_memory_budget(
      fmt::format("trainer: {} on {} device(s)", t.config().model.name, t.mesh().num_devices()),
      items, available_memory(),
      "shrink the model or batch, or plan it with {shape_only = true} (allocates nothing)");
}

}  // namespace eng
