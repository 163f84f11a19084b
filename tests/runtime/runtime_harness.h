// tests/runtime/runtime_harness.h: random host arguments, running a program on the runtime and
// on the reference interpreter, and comparing every output.
#pragma once

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/ir/interpret.h"
#include "engine/runtime/runtime.h"

namespace eng::testing {

// Random arguments: floats uniform in [-scale, scale]; i32 "ids"/"targets" in [0, vocab);
// positions 0..T-1; segmentation mostly 1 with a few 0s; the step 0 (or `step`).
inline std::vector<HostTensor> random_args(const Program& p, uint64_t seed, int64_t vocab,
                                           double scale = 0.5, int step = 0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(-scale, scale);
  std::vector<HostTensor> args;
  for (const Argument& a : p.args()) {
    const ValueInfo& v = p.value(a.value);
    HostTensor t{v.shape, v.dtype, std::vector<double>(v.shape.numel())};
    const std::string& n = v.name;
    for (int64_t i = 0; i < v.shape.numel(); ++i) {
      if (v.dtype != DType::kI32) {
        t.data[i] = uni(rng);
        if (a.role == ArgRole::kOptNu) t.data[i] = std::abs(t.data[i]) * 0.01;  // nu >= 0
        if (v.dtype == DType::kBF16) t.data[i] = bf16_to_f32(f32_to_bf16(float(t.data[i])));
      } else if (a.role == ArgRole::kStep) {
        t.data[i] = step;
      } else if (n.find("position") != std::string::npos) {
        t.data[i] = static_cast<double>(i % v.shape.dim(-1));
      } else if (n.find("segmentation") != std::string::npos) {
        t.data[i] = (rng() % 5 == 0) ? 0 : 1;
      } else {
        t.data[i] = static_cast<double>(rng() % vocab);
      }
    }
    args.push_back(std::move(t));
  }
  return args;
}

inline Array put_host(Runtime& rt, const HostTensor& t, const NamedSharding& sharding,
                      std::string name) {
  std::vector<char> bytes(t.data.size() * dtype_size(t.dtype));
  for (size_t i = 0; i < t.data.size(); ++i) {
    switch (t.dtype) {
      case DType::kF32: reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(t.data[i]); break;
      case DType::kBF16:
        reinterpret_cast<uint16_t*>(bytes.data())[i] = f32_to_bf16(static_cast<float>(t.data[i]));
        break;
      case DType::kI32: reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(t.data[i]); break;
    }
  }
  auto a = rt.put(bytes.data(), t.shape, t.dtype, sharding, std::move(name));
  EXPECT_TRUE(a.ok()) << a.status().message();
  return std::move(a).value();
}

// The Array holding program output j after execute: its argument when aliased, else its
// entry in `outs` (which holds the non-aliased outputs only, in order).
inline const Array& output_array(const Program& p, size_t j, const std::vector<Array>& args,
                                 const std::vector<Array>& outs) {
  const ProgramOutput& o = p.outputs()[j];
  if (o.aliased_arg >= 0) return args[o.aliased_arg];
  size_t ordinal = 0;
  for (size_t i = 0; i < j; ++i) ordinal += p.outputs()[i].aliased_arg < 0;
  return outs[ordinal];
}

inline std::vector<double> fetch_host(const Runtime& rt, const Array& a) {
  std::vector<char> bytes(a.shape.numel() * dtype_size(a.dtype));
  Status s = rt.fetch(a, bytes.data());
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<double> out(a.shape.numel());
  for (size_t i = 0; i < out.size(); ++i) {
    switch (a.dtype) {
      case DType::kF32: out[i] = reinterpret_cast<const float*>(bytes.data())[i]; break;
      case DType::kBF16: out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes.data())[i]); break;
      case DType::kI32: out[i] = reinterpret_cast<const int32_t*>(bytes.data())[i]; break;
    }
  }
  return out;
}

// Runs p on a runtime over `mesh` (each argument placed as compiled) and returns every output
// on the host, aliased ones through their argument; empty when compiling or running fails (the
// failure is reported as a test failure). exe_out, if given, receives the executable.
inline std::vector<std::vector<double>> run_on_runtime(
    const Program& p, const std::vector<HostTensor>& args, const Mesh& mesh = Mesh(),
    std::shared_ptr<const Executable>* exe_out = nullptr) {
  auto exe = compile(p, mesh, CompileOptions{});
  EXPECT_TRUE(exe.ok()) << exe.status().message();
  if (!exe.ok()) return {};
  if (exe_out) *exe_out = *exe;
  Runtime rt(mesh);
  std::vector<Array> arrays;
  for (size_t k = 0; k < args.size(); ++k)
    arrays.push_back(put_host(rt, args[k], (*exe)->argument_sharding(static_cast<int>(k)),
                              p.value(p.args()[k].value).name));
  std::vector<Array*> ptrs;
  for (Array& a : arrays) ptrs.push_back(&a);
  std::vector<Array> outs;
  const Status s = rt.execute(**exe, ptrs, outs);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<std::vector<double>> host;
  if (!s.ok()) return host;
  for (size_t j = 0; j < p.outputs().size(); ++j)
    host.push_back(fetch_host(rt, output_array(p, j, arrays, outs)));
  return host;
}

// |got - want| <= atol + rtol * |want| elementwise; reports the worst element.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double excess = std::abs(got[i] - want[i]) - (atol + rtol * std::abs(want[i]));
    if (excess > worst) {
      worst = excess;
      at = i;
    }
  }
  EXPECT_EQ(worst, 0) << what << ": element " << at << " got " << got[at] << " want " << want[at];
}

// Runs p once on a runtime over `mesh` (replicated arguments) and once on the interpreter,
// and compares every output (aliased ones through their argument).
inline void expect_matches_interpreter(const Program& p, const std::vector<HostTensor>& args,
                                       double rtol = 1e-4, double atol = 1e-5,
                                       const Mesh& mesh = Mesh()) {
  auto want = interpret(p, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto exe = compile(p, mesh, CompileOptions{});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  Runtime rt(mesh);
  std::vector<Array> arrays;
  for (size_t k = 0; k < args.size(); ++k)
    arrays.push_back(put_host(rt, args[k], NamedSharding{mesh, PartitionSpec()},
                              p.value(p.args()[k].value).name));
  std::vector<Array*> ptrs;
  for (Array& a : arrays) ptrs.push_back(&a);
  std::vector<Array> outs;
  Status s = rt.execute(**exe, ptrs, outs);
  ASSERT_TRUE(s.ok()) << s.message();
  for (size_t j = 0; j < p.outputs().size(); ++j) {
    const ProgramOutput& o = p.outputs()[j];
    const Array& got = output_array(p, j, arrays, outs);
    expect_close(fetch_host(rt, got), (*want)[j].data, rtol, atol,
                 fmt::format("{} output {} '{}'", p.name(), j, o.name));
  }
}

}  // namespace eng::testing
