// tests/ir/grad_check.h: finite-difference gradient checks through the reference interpreter.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/ir/autodiff.h"
#include "engine/ir/interpret.h"

namespace eng::irtest {

// Small shapes shared by the tests: batch, length, heads, head dim, embed, vocab, mlp.
constexpr int64_t kB = 2, kT = 5, kH = 2, kD = 4, kE = 6, kV = 7, kF = 8;

// Random arguments for p, by name: i32 "ids"/"targets" in [0, kV); "positions" t + 3b;
// "segmentation" 1 with a few zeros; float names containing "norm" near 1; other floats
// uniform in [-1, 1). Fixed seed.
std::vector<HostTensor> make_args(const Program& p, uint64_t seed = 1);

// logits = y . head (a fixed random non-wrt argument), then softmax cross-entropy and the
// masked mean loss: a scalar, non-linear in y. y has shape (B, T, ...).
ValueId cross_entropy_head(Builder& b, ValueId y);

// Builds the forward program into b and returns the scalar loss; pushes the values to
// differentiate (arguments) onto wrt.
using BuildLoss = std::function<ValueId(Builder& b, std::vector<ValueId>& wrt)>;

// The tiny llama-like decoder layer of the model gradient checks, with MaxText's parameter
// paths and logical axes: embedding -> rmsnorm -> q (E, H, D), k/v (E, Hkv, D) -> rope ->
// repeat_kv onto the query heads (only when Hkv < H, as the model traces it) -> causal
// attention -> out (H, D, E) -> residual -> rmsnorm -> swiglu MLP -> residual -> final norm ->
// logits -> masked mean loss. Pushes its 12 parameters onto wrt; returns the loss.
struct TinyLayer {
  int64_t query_heads = kH;            // H
  int64_t kv_heads = kH;               // Hkv; H % Hkv == 0
  bool constrain_activations = false;  // sharding constraints on the residual stream
};
ValueId tiny_llama_layer(Builder& b, std::vector<ValueId>& wrt, const TinyLayer& layer);

// The forward program plus append_gradients, with outputs "loss" then "grad/<arg name>".
Program build_with_gradients(const BuildLoss& build);

struct GradError {
  std::string name;  // the wrt argument
  double rel_err;    // ||autodiff - central difference|| / ||central difference||
  double fd_norm;    // ||central difference|| over the checked entries
  int checked;       // entries compared
};

// Compares every wrt gradient of p (from build_with_gradients) with central differences
// of the loss, on max_samples random entries per argument (0: all entries).
std::vector<GradError> check_gradients(const Program& p, const std::vector<HostTensor>& args,
                                       int max_samples = 0);

// build_with_gradients + make_args + check_gradients + EXPECTs (rel_err < tol, fd_norm > 0).
void expect_gradients_match(const BuildLoss& build, int max_samples = 0, double tol = 1e-6);

}  // namespace eng::irtest
