// engine/runtime/executor_args.h: private to engine/runtime/executor*.cpp: the typed view of one
// instruction's buffers on one device that every kernel of the executor's table takes, and the
// kernels kept in their own file (executor_moe.cpp: the mixture-of-experts ops).
#pragma once

#include <cstdint>

#include "engine/base/check.h"
#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"
#include "engine/tensor/onednn_matmul.h"

namespace eng::executor_detail {

// Typed views of one instruction's buffers on one device.
struct Args {
  const Program& p;
  const Instr& in;
  void* const* ptrs;
  const Mesh* mesh;  // where it runs (kAxisIndex); null: one device
  int64_t device;
  const kern::Bf16MatmulPlan* plan = nullptr;  // a bf16 matmul's (executor.h)

  const float* f(size_t i) const { return static_cast<const float*>(ptrs[in.inputs[i]]); }
  const int32_t* ids(size_t i) const { return static_cast<const int32_t*>(ptrs[in.inputs[i]]); }
  float* out(size_t o) const { return static_cast<float*>(ptrs[in.outputs[o]]); }
  const Shape& shape(size_t i) const { return p.value(in.inputs[i]).shape; }
  int64_t numel(size_t i) const { return shape(i).numel(); }
  int64_t last_dim(size_t i) const { return shape(i).dim(-1); }
  float scalar(size_t i) const { return *f(i); }
  const uint16_t* h(size_t i) const { return static_cast<const uint16_t*>(ptrs[in.inputs[i]]); }
  uint16_t* hout(size_t o) const { return static_cast<uint16_t*>(ptrs[in.outputs[o]]); }
  int32_t* iout(size_t o) const { return static_cast<int32_t*>(ptrs[in.outputs[o]]); }
  // Integer arithmetic (op.h OpDef::integer): the builder made every operand i32.
  bool integer() const { return p.value(in.outputs[0]).dtype == DType::kI32; }
  // Attention's segment ids: its i32 input, if any (null: causal only).
  const int32_t* segment_ids() const {
    for (size_t k = 0; k < in.inputs.size(); ++k)
      if (p.value(in.inputs[k]).dtype == DType::kI32) return ids(k);
    return nullptr;
  }
};

// executor_moe.cpp: the MoE ops' kernels (engine/tensor/moe.h's loops, sgemm or the bf16 plan
// per expert, kern::ragged_dot), f32 and bf16 forms.
void run_moe_route(const Args& a);
void run_moe_dispatch(const Args& a);
void run_moe_combine_weights_grad(const Args& a);
void run_expert_matmul(const Args& a);
void run_moe_top_k(const Args& a);
void run_moe_permute(const Args& a);
void run_ragged_dot(const Args& a);
void run_moe_ep_plan(const Args& a);
void run_moe_route_bf16(const Args& a);
void run_moe_dispatch_bf16(const Args& a);
void run_moe_combine_weights_grad_bf16(const Args& a);
void run_expert_matmul_bf16(const Args& a);

}  // namespace eng::executor_detail
