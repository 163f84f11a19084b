// engine/ir/program.h: a traced program: SSA instructions over abstract values (global
// shape, dtype, logical axes, sharding slot). No data lives here; a Program is pure
// description, so llama2-7b traces in milliseconds and compiles without allocating.
//
//   Builder b("train_step");
//   ValueId x = b.argument("inputs", Shape{8, 256}, DType::kI32, {"activation_batch", "activation_length"},
//                          ArgRole::kBatch);
//   ...
//   Program p = std::move(b).finish();
//   fmt::print("{}", p.to_text());   // jaxpr-like dump, used by golden tests
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/ir/op.h"
#include "engine/sharding/partition_spec.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/shape.h"

namespace eng {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

// What a program argument is; the runtime and the checkpointer use it.
enum class ArgRole : uint8_t { kParam, kOptMu, kOptNu, kStep, kBatch };
std::string_view arg_role_name(ArgRole r);  // "param", "opt_mu", ...

struct ValueInfo {
  Shape shape;                        // global shape
  DType dtype = DType::kF32;
  std::vector<std::string> logical;   // logical axis per dim ("" = none), or empty
  std::optional<PartitionSpec> spec;  // sharding slot: unset = the compiler decides
  std::string name;                   // argument path ("params/decoder/.../kernel") or ""
  int32_t producer = -1;              // instruction index, or -1 for an argument
  // Rematerialisation (engine/ir/remat.h). checkpoint_name: jax.ad_checkpoint's
  // checkpoint_name tag ("query_proj", "decoder_layer_input", ...; "" = none), the handle a
  // remat policy saves by. remat_scope: the decoder layer whose checkpointed region produced
  // the value (-1: outside every region, always saved). recomputed: emitted by the remat
  // pass as a recomputation for the backward pass (reported as "rmsnorm (remat)").
  std::string checkpoint_name;
  int32_t remat_scope = -1;
  bool recomputed = false;
  // The pipeline iteration (engine/model/pipeline.h) whose ops produced the value: set while
  // tracing the schedule, inherited by its VJP ops, recomputations and per-device ops, so a
  // profile can charge each instruction's time to an iteration; -1 = outside the pipeline.
  int32_t pipeline_iteration = -1;

  int64_t bytes() const { return shape.numel() * dtype_size(dtype); }
  // "f32[8,256,256]" (with the spec and mesh: "f32[8@data,256,256]").
  std::string type_string(const Mesh* mesh = nullptr) const;
};

// The op producing v as c:temps(n) reports it: "rmsnorm", "rmsnorm (remat)" for a
// recomputation, "argument" for a program argument.
class Program;
std::string producer_description(const Program& p, ValueId v);

struct Instr {
  OpKind kind;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  OpAttrs attrs;
};

struct Argument {
  ValueId value;
  ArgRole role;
};

struct ProgramOutput {
  ValueId value;
  std::string name;         // "params/...", "learning/loss", ...
  int aliased_arg = -1;     // index into args() when the output updates that argument in place
};

// The name Program::to_text gives a value: a, b, ..., z, ba, bb, ... (jaxpr's variable names).
std::string value_name(ValueId id);

class Program {
 public:
  const std::string& name() const { return name_; }
  const std::vector<ValueInfo>& values() const { return values_; }
  const ValueInfo& value(ValueId v) const { return values_[v]; }
  ValueInfo& mutable_value(ValueId v) { return values_[v]; }
  const std::vector<Instr>& instrs() const { return instrs_; }
  const std::vector<Argument>& args() const { return args_; }
  const std::vector<ProgramOutput>& outputs() const { return outputs_; }
  int find_arg(std::string_view name) const;     // index into args(), -1 if none
  int find_output(std::string_view name) const;  // index into outputs(), -1 if none

  // jaxpr-like text: "{ lambda ; a:f32[256,256] b:i32[8,256]. let\n    c:f32[8,256,256] =
  // embed_lookup a b\n ... in (x, y) }" preceded by a legend of argument names.
  std::string to_text() const;
  // Structural fingerprint (ops, attrs, shapes, dtypes, specs, names): part of the cache key.
  uint64_t fingerprint() const;

 private:
  friend class Builder;
  std::string name_;
  std::vector<ValueInfo> values_;      // indexed by ValueId
  std::vector<Instr> instrs_;          // in execution order
  std::vector<Argument> args_;         // program inputs, in call order
  std::vector<ProgramOutput> outputs_; // program results
};

// True when `in` runs MaxText's bf16 arithmetic (docs/precision.md): it is one of the ops
// with a bf16 kernel (engine/tensor/kernels.h's bf16 section, onednn_matmul.h: matmul,
// rmsnorm(_grad), rope, attention(_grad), swiglu(_grad), add, mul) and its float operands
// are bf16, except the f32 slots those kernels define (rmsnorm's scale and rstd, attention's
// lse). Such an op rounds where MaxText's JAX code rounds; every other op with bf16 operands
// computes in f32 and rounds each bf16 output once. The interpreter and the executor both
// decide with this function, so they round at the same points.
bool uses_bf16_kernel(const Program& p, const Instr& in);

}  // namespace eng
