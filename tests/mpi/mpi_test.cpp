// tests/mpi/mpi_test.cpp: real processes (run by mpirun from CTest with 2 and 4 ranks). Every
// rank trains the same small llama on a mesh that spans the processes (each runs only its
// devices; collectives cross processes) and, in the same process, on the same mesh simulated
// whole (the local communicator): the 5 losses and the final parameters are bitwise equal,
// each local device received exactly the compiled collective bytes, and each process holds
// only its devices' shards. Meshes whose device count is not a multiple of the process count
// and different programs on different ranks are clear errors. A stop asked by one process
// (Ctrl-C) stops training on every process after the same step.
#include <gtest/gtest.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/compile/executable.h"
#include "engine/dist/dist.h"
#include "engine/ir/builder.h"
#include "engine/runtime/collectives.h"
#include "engine/runtime/runtime.h"
#include "engine/train/config.h"
#include "engine/train/data.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer.h"
#include "tests/common/tiny_config.h"
#include "tests/common/train_state.h"

namespace eng {
namespace {

constexpr int kSteps = 5;

struct Case {
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  bool zero1 = false;
  int64_t stages = 1;  // ici_pipeline_parallelism
};

std::string case_name(const Case& c, bool explicit_mode) {
  std::string s;
  for (size_t i = 0; i < c.axes.size(); ++i) s += fmt::format("{}{}", c.axes[i], c.sizes[i]);
  return s + (c.zero1 ? "_zero1" : "") + (explicit_mode ? "_explicit" : "_auto");
}

// A fortune-format text file (documents between '%' lines) of deterministic bytes, one per
// process (the same contents): packed rows differ from row to row, so a process that fed
// another process's rows would change the losses.
std::string text_dataset() {
  static const std::string path = [] {
    const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                    fmt::format("shardlab_mpi_text_{}_{}.txt", getpid(),
                                                dist::process().index);
    std::ofstream out(p, std::ios::binary);
    uint64_t h = 7;
    for (int doc = 0; doc < 300; ++doc) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      const int len = 3 + static_cast<int>((h >> 33) % 40);
      for (int i = 0; i < len; ++i) out << static_cast<char>('a' + (h >> (i % 50)) % 26);
      out << "\n%\n";
    }
    return p.string();
  }();
  return path;
}

ResolvedConfig config_for(const Case& c) {
  Config cfg = testing::tiny_llama_config({.model_name = "llama-tiny",
                                           .dataset = "text:" + text_dataset(),
                                           .emb_dim = 32,
                                           .query_heads = 4,
                                           .kv_heads = 4,
                                           .head_dim = 8,
                                           .mlp_dim = 64,
                                           .layers = 4,
                                           .vocab_size = 256,
                                           .seq = 16,
                                           .per_device_batch = 1.0,
                                           .learning_rate = 1e-3,
                                           .steps = kSteps,
                                           .warmup_steps_fraction = 0.2,
                                           .adam_eps = 1e-4});
  if (c.stages > 1) {
    EXPECT_TRUE(cfg.set("ici_pipeline_parallelism", c.stages).ok());
  }
  Result<ResolvedConfig> r = resolve_config(cfg, 8);  // global batch 8 on every mesh
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

struct MeshRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
  double max_collective_mismatch = 0;  // |received - compiled| over this process's devices
  int64_t remote_bytes = 0;            // bytes held for devices of other processes (must be 0)
};

// 5 steps of cfg on mesh; span: the runtime spans the processes (else it simulates the mesh).
Result<MeshRun> train(const ResolvedConfig& cfg, const Mesh& mesh, const CompileOptions& opts,
                  bool span) {
  TrainStepLayout layout;
  Program p = build_train_step(cfg, &layout);
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, compile(p, mesh, opts));
  Runtime rt(mesh, 0, span);
  ENG_ASSIGN_OR_RETURN(std::vector<Array> state, testing::init_train_state(p, *exe, cfg, rt));
  ENG_ASSIGN_OR_RETURN(auto data, make_data_source(cfg));
  // This process's rows only (all of them when simulating), as the Trainer loads them.
  const Array& first = state[static_cast<size_t>(layout.first_batch_arg)];
  ENG_RETURN_IF_ERROR(data->set_rows(rt.local_rows(first.shape, first.sharding)));
  HostBatch batch;
  MeshRun run;
  std::vector<Array> outputs;
  const std::vector<Array*> args = testing::arg_pointers(state);
  for (int step = 0; step < kSteps; ++step) {
    data->next(batch);
    const auto arrays = batch.arrays();
    for (size_t k = 0; k < arrays.size(); ++k)
      ENG_RETURN_IF_ERROR(rt.write_rows(state[layout.first_batch_arg + k], arrays[k]->data(),
                                        batch.rows));
    rt.communicator().reset_counters();
    ENG_RETURN_IF_ERROR(rt.execute(*exe, args, outputs));
    float loss = 0;
    ENG_RETURN_IF_ERROR(rt.fetch(outputs[0], &loss));
    run.losses.push_back(loss);
    for (int d = 0; d < rt.num_devices(); ++d) {
      if (!rt.is_local(d)) continue;
      auto moved = rt.communicator().bytes_received(d);
      auto planned = exe->collective_bytes_received_by(d);  // this device's share
      for (const auto& [k, b] : planned)
        run.max_collective_mismatch = std::max(run.max_collective_mismatch, std::fabs(moved[k] - b));
      for (const auto& [k, b] : moved)
        run.max_collective_mismatch = std::max(run.max_collective_mismatch, std::fabs(planned[k] - b));
    }
  }
  for (int d = 0; d < rt.num_devices(); ++d)
    if (!rt.is_local(d)) run.remote_bytes += rt.device(d).bytes_in_use();
  ENG_ASSIGN_OR_RETURN(run.params, testing::fetch_params(rt, p, layout, state));
  return run;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Processes : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(Processes, BitwiseEqualToSimulatedMesh) {
  const auto& [c, explicit_mode] = GetParam();
  Mesh mesh = *Mesh::create(c.axes, c.sizes);
  const int P = dist::process().count;
  if (mesh.num_devices() % P != 0) GTEST_SKIP() << mesh.to_string() << " on " << P << " processes";
  const ResolvedConfig cfg = config_for(c);
  CompileOptions o;
  o.shard_mode = explicit_mode ? ShardMode::kExplicit : ShardMode::kAuto;
  o.shard_optimizer_over_data = c.zero1;
  Result<MeshRun> sim = train(cfg, mesh, o, /*span=*/false);
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  Result<MeshRun> real = train(cfg, mesh, o, /*span=*/true);
  ASSERT_TRUE(real.ok()) << real.status().message();
  ASSERT_EQ(real->losses.size(), static_cast<size_t>(kSteps));
  EXPECT_TRUE(bitwise_equal(real->losses, sim->losses))
      << fmt::format("losses {} vs simulated {}", fmt::join(real->losses, " "),
                     fmt::join(sim->losses, " "));
  ASSERT_EQ(real->params.size(), sim->params.size());
  for (size_t i = 0; i < sim->params.size(); ++i)
    EXPECT_TRUE(bitwise_equal(real->params[i], sim->params[i])) << "parameter " << i;
  EXPECT_EQ(real->max_collective_mismatch, 0);
  EXPECT_EQ(sim->max_collective_mismatch, 0);
  EXPECT_EQ(real->remote_bytes, 0);
  EXPECT_GT(real->losses.front(), real->losses.back());  // it trains
  if (dist::process().index == 0)
    fmt::print("[mpi] {} processes, {} {}{}: losses {:.6f}..{:.6f} bitwise equal\n", P,
               mesh.to_string(), explicit_mode ? "explicit" : "auto", c.zero1 ? " zero1" : "",
               real->losses.front(), real->losses.back());
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, Processes,
    ::testing::Combine(::testing::Values(Case{{"data"}, {2}}, Case{{"fsdp"}, {2}},
                                         Case{{"tensor"}, {2}}, Case{{"data", "fsdp"}, {2, 2}},
                                         Case{{"stage"}, {2}, false, 2},
                                         Case{{"data"}, {2}, true},
                                         Case{{"data", "fsdp"}, {2, 2}, true},
                                         Case{{"fsdp", "tensor"}, {2, 2}},
                                         // the batch over (data, fsdp): rows not contiguous
                                         Case{{"fsdp", "data"}, {2, 2}},
                                         Case{{"data"}, {4}}, Case{{"fsdp"}, {4}},
                                         Case{{"tensor"}, {4}}),
                       ::testing::Bool()),
    [](const auto& info) {
      return case_name(std::get<0>(info.param), std::get<1>(info.param));
    });

// Every collective (and both permute forms, dynamic_slice, groups along one and two axes,
// scattered dims with outer > 1) on a 4-device mesh spanning the processes, straight on the
// communicators: each of this process's devices gets bitwise the simulated mesh's result and
// the same byte counts.
TEST(Collectives, EveryKindEqualsSimulated) {
  const Mesh mesh = *Mesh::create({"data", "stage"}, {2, 2});
  if (mesh.num_devices() % dist::process().count != 0) GTEST_SKIP();
  Builder b("collectives");
  const ValueId x = b.argument("x", Shape{4, 4, 2}, DType::kF32, {}, ArgRole::kParam);
  auto attrs = [](std::vector<std::string> axes, int dim, int dim2 = 0) {
    OpAttrs a;
    a.group_size = static_cast<int64_t>(axes.size()) * 2;
    a.mesh_axes = std::move(axes);
    a.dim = dim;
    a.dim2 = dim2;
    return a;
  };
  b.emit(OpKind::kAllGather, {x}, attrs({"stage"}, 1));
  b.emit(OpKind::kAllGather, {x}, attrs({"data", "stage"}, 0));
  b.emit(OpKind::kReduceScatter, {x}, attrs({"data", "stage"}, 1));
  b.emit(OpKind::kReduceScatter, {x}, attrs({"stage"}, 0));
  b.emit(OpKind::kAllReduce, {x}, attrs({"data"}, 0));
  OpAttrs mx = attrs({"data", "stage"}, 0);
  mx.reduce_max = true;
  b.emit(OpKind::kAllReduce, {x}, mx);
  b.emit(OpKind::kAllToAll, {x}, attrs({"stage"}, 0, 2));
  b.emit(OpKind::kAllToAll, {x}, attrs({"data", "stage"}, 1, 0));
  OpAttrs perm = attrs({"data", "stage"}, 0);
  perm.shift = 1;
  b.emit(OpKind::kCollectivePermute, {x}, perm);
  OpAttrs fill = attrs({"stage"}, 0);
  fill.shift = -1;
  fill.fill_zero = true;
  b.emit(OpKind::kCollectivePermute, {x}, fill);
  b.emit(OpKind::kDynamicSlice, {x}, attrs({"stage"}, 0));
  const Program p = std::move(b).finish();
  const int n = 4;
  const size_t nv = p.values().size();
  // buffers[sim][d][v]; x filled with distinct values per device, the sum order visible.
  std::vector<std::vector<std::vector<float>>> bufs[2];
  std::vector<std::vector<void*>> tables[2];
  std::vector<void* const*> ptrs[2];
  for (int k = 0; k < 2; ++k) {
    bufs[k].assign(n, std::vector<std::vector<float>>(nv));
    tables[k].assign(n, std::vector<void*>(nv, nullptr));
    for (int d = 0; d < n; ++d) {
      for (size_t v = 0; v < nv; ++v) {
        bufs[k][d][v].assign(static_cast<size_t>(p.value(ValueId(v)).shape.numel()), 0.0f);
        tables[k][d][v] = bufs[k][d][v].data();
      }
      for (size_t i = 0; i < bufs[k][d][x].size(); ++i)
        bufs[k][d][x][i] = 1.0f / static_cast<float>(3 + d * 7 + static_cast<int>(i));
      ptrs[k].push_back(tables[k][d].data());
    }
  }
  auto sim = make_local_communicator(mesh);
  Runtime rt(mesh, 0, /*span_processes=*/true);  // for its device range only
  auto real = make_process_communicator(mesh, rt.local_devices(), dist::make_channel());
  ASSERT_TRUE(real->prepare(p).ok());
  for (const Instr& in : p.instrs()) {
    sim->run(p, in, ptrs[0]);
    real->run(p, in, ptrs[1]);
    ASSERT_TRUE(real->take_error().ok());
  }
  for (int d = 0; d < n; ++d) {
    if (!rt.is_local(d)) continue;
    for (size_t v = 0; v < nv; ++v)
      EXPECT_TRUE(bitwise_equal(bufs[1][d][v], bufs[0][d][v]))
          << "device " << d << " value " << p.value(ValueId(v)).name;
    EXPECT_EQ(real->bytes_received(d), sim->bytes_received(d)) << "device " << d;
  }
}

// A file of this process (same contents on every process) under the temp directory.
std::string temp_file(const std::string& name, const std::string& contents) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  fmt::format("shardlab_mpi_{}_{}_{}", getpid(),
                                              dist::process().index, name);
  std::ofstream(p, std::ios::binary) << contents;
  return p.string();
}

// Every data source the Trainer has (synthetic, packed text, a text stream, .npy tokens), on a
// mesh whose processes hold contiguous rows (data=P) and one where they do not (fsdp=2 x
// data=P: the batch is sharded over (data, fsdp)): each process produces only the rows its
// devices hold (B / P per step; the processes' rows partition the batch), and they are bitwise
// the rows of the one-process source.
TEST(ProcessData, EachProcessProducesOnlyItsRows) {
  const int P = dist::process().count;
  if (P == 1) GTEST_SKIP() << "one process";
  std::string stream;
  for (int i = 0; i < 3000; ++i) stream += static_cast<char>('a' + (i * 7919 % 26));
  std::string npy = "\x93NUMPY\x01";
  std::string header = "{'descr': '<u2', 'fortran_order': False, 'shape': (3000,), }";
  header.resize(117, ' ');
  npy += '\0';
  npy += static_cast<char>(header.size() + 1);
  npy += '\0';
  npy += header + "\n";
  for (int i = 0; i < 3000; ++i) npy += std::string{static_cast<char>(i * 31 % 256), '\0'};
  const std::string datasets[] = {"synthetic", "text:" + text_dataset(),
                                  "text:" + temp_file("stream.txt", stream),
                                  "tokens:" + temp_file("tokens.npy", npy)};
  const Mesh meshes[] = {*Mesh::create({"data"}, {P}), *Mesh::create({"fsdp", "data"}, {2, P})};
  auto channel = dist::make_channel();
  for (const std::string& dataset : datasets) {
    for (const Mesh& mesh : meshes) {
      SCOPED_TRACE(dataset + " on " + mesh.to_string());
      Config cfg = testing::tiny_llama_config(
          {.model_name = "llama-tiny", .dataset = dataset, .emb_dim = 16, .query_heads = 2,
           .kv_heads = 2, .head_dim = 8, .mlp_dim = 32, .layers = 1, .vocab_size = 256,
           .seq = 16, .per_device_batch = 2.0, .steps = 2, .dtype = "float32"});
      Result<std::unique_ptr<Trainer>> t = Trainer::create(cfg, mesh);
      ASSERT_TRUE(t.ok()) << t.status().message();
      for (int step = 0; step < 2; ++step) ASSERT_TRUE((*t)->step_and_wait().ok());
      const int64_t B = (*t)->config().global_batch_size, per = B / P;
      const std::vector<int64_t>& rows = (*t)->data()->rows();
      ASSERT_EQ(static_cast<int64_t>(rows.size()), per);
      EXPECT_EQ((*t)->data()->rows_produced(), 2 * per);
      // The processes' rows partition [0, B).
      std::vector<int64_t> all(static_cast<size_t>(B));
      ASSERT_TRUE(channel
                      ->all_gather(dist::MessageHeader::labelled("rows"), rows.data(), per * 8,
                                   all.data())
                      .ok());
      std::sort(all.begin(), all.end());
      for (int64_t r = 0; r < B; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], r);
      // Bitwise the one-process source's rows, batch after batch.
      auto whole = make_data_source((*t)->config()).value();
      auto mine = make_data_source((*t)->config()).value();
      ASSERT_TRUE(mine->set_rows(rows).ok());
      HostBatch w, m;
      for (int step = 0; step < 2; ++step) {
        whole->next(w);
        mine->next(m);
        const int64_t T = w.seq;
        for (size_t a = 0; a < w.arrays().size(); ++a)
          for (int64_t k = 0; k < per; ++k)
            EXPECT_TRUE(std::equal(w.arrays()[a]->begin() + rows[k] * T,
                                   w.arrays()[a]->begin() + (rows[k] + 1) * T,
                                   m.arrays()[a]->begin() + k * T))
                << "array " << a << " row " << rows[k];
      }
    }
  }
}

// Ctrl-C under mpirun (shell/interrupt.h): every step gathers each process's answer to
// TrainerOptions::stop_requested, and StepMetrics::stop_requested is their OR, the same on
// every process, so train() stops every process after the same step. Here only the last
// process asks, from its third step on.
std::atomic<int> g_stop_polls{0};
bool last_process_stops_from_third_step() {
  const int poll = g_stop_polls.fetch_add(1);  // the dispatcher's polls: one per step
  return dist::process().index == dist::process().count - 1 && poll >= 2;
}

std::unique_ptr<Trainer> stop_trainer() {
  Config cfg = testing::tiny_llama_config(
      {.model_name = "llama-tiny", .dataset = "synthetic", .emb_dim = 16, .query_heads = 2,
       .kv_heads = 2, .head_dim = 8, .mlp_dim = 32, .layers = 1, .vocab_size = 256, .seq = 16,
       .per_device_batch = 1.0, .steps = 20, .dtype = "float32"});
  g_stop_polls = 0;
  Result<std::unique_ptr<Trainer>> t =
      Trainer::create(cfg, *Mesh::create({"data"}, {dist::process().count}),
                      {.stop_requested = last_process_stops_from_third_step});
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(ProcessStop, AgreedFlagIsTheOrOverProcesses) {
  if (dist::process().count == 1) GTEST_SKIP() << "one process";
  std::unique_ptr<Trainer> t = stop_trainer();
  ASSERT_NE(t, nullptr);
  for (int step = 0; step < 4; ++step) {
    Result<StepMetrics> m = t->step_and_wait();
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ(m->stop_requested, step >= 2) << "step " << step << " on process "
                                            << dist::process().index;
  }
}

TEST(ProcessStop, TrainStopsEveryProcessAfterTheSameStep) {
  if (dist::process().count == 1) GTEST_SKIP() << "one process";
  std::unique_ptr<Trainer> t = stop_trainer();
  ASSERT_NE(t, nullptr);
  std::vector<int64_t> flushed;
  ASSERT_TRUE(t->train(10, [&](const StepMetrics& m) {
                 flushed.push_back(m.step);
                 return !m.stop_requested;
               }).ok());
  // Step 2 asked to stop; step 3 was already dispatched (the loop flushes step N after
  // dispatching N + 1), so every process ran steps 0-3 and no more.
  EXPECT_EQ(flushed, (std::vector<int64_t>{0, 1, 2, 3})) << "process " << dist::process().index;
  EXPECT_EQ(t->current_step(), 4);
  // Still in lockstep: two more steps run on every process.
  ASSERT_TRUE(t->train(2, [](const StepMetrics&) { return true; }).ok());
  EXPECT_EQ(t->current_step(), 6);
}

// Host bytes in use (glibc's heap and its mmapped chunks).
int64_t heap_bytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

struct PrepareCost {
  int64_t host_bytes = 0;  // heap growth of prepare, less the device buffers (arenas) it made
  double seconds = 0;
  int64_t remote_device_bytes = 0;  // bytes prepare put on other processes' devices
};

PrepareCost measure_prepare(const Mesh& mesh, const Executable& exe, bool span) {
  Runtime rt(mesh, 0, span);
  int64_t device0 = 0, device1 = 0;
  for (int d = 0; d < rt.num_devices(); ++d) device0 += rt.device(d).bytes_in_use();
  const int64_t heap0 = heap_bytes();
  const double t0 = now_seconds();
  EXPECT_TRUE(rt.prepare(exe).ok());
  PrepareCost c;
  c.seconds = now_seconds() - t0;
  for (int d = 0; d < rt.num_devices(); ++d) device1 += rt.device(d).bytes_in_use();
  c.host_bytes = heap_bytes() - heap0 - (device1 - device0);
  if (span) {
    const dist::DeviceRange local = *dist::device_range(rt.num_devices());
    for (int d = 0; d < rt.num_devices(); ++d)
      if (!local.contains(d)) c.remote_device_bytes += rt.device(d).bytes_in_use();
  }
  return c;
}

// make_plans / prepare build plans, buffer tables and staging only for this process's devices
// (and the remote devices they read), printed beside the same mesh simulated whole: a llama
// of 2 layers, width 128, MLP 512, 8 x 64 tokens, bf16, with the convert+sgemm bf16 matmul
// (what a CPU without avx512_bf16 runs: a plan per local device) and with the default. The least of 3 prepares each, after a warm-up (the
// pool threads' kernel scratch grows once per process).
TEST(ProcessPrepare, OnlyThisProcesssDevices) {
  const int P = dist::process().count;
  if (P == 1) GTEST_SKIP() << "one process";
  Config c = testing::tiny_llama_config(
      {.model_name = "llama-tiny", .emb_dim = 128, .query_heads = 4, .kv_heads = 4,
       .head_dim = 32, .mlp_dim = 512, .layers = 2, .vocab_size = 256, .seq = 64});
  for (const char* backend : {"sgemm", "auto"}) {
    for (const Case& k : {Case{{"fsdp"}, {4}}, Case{{"data", "fsdp"}, {2, 2}}}) {
      const Mesh mesh = *Mesh::create(k.axes, k.sizes);
      ASSERT_TRUE(c.set("per_device_batch_size", 2.0).ok());
      const ResolvedConfig cfg = *resolve_config(c, mesh.num_devices());
      Program p = build_train_step(cfg, nullptr);
      auto exe = compile(p, mesh, CompileOptions{});
      ASSERT_TRUE(exe.ok()) << exe.status().message();
      setenv("SHARDLAB_BF16_MATMUL", backend, 1);
      measure_prepare(mesh, **exe, false);
      PrepareCost sim{1 << 30, 1e9}, real{1 << 30, 1e9};
      for (int rep = 0; rep < 3; ++rep) {
        for (bool span : {true, false}) {
          const PrepareCost m = measure_prepare(mesh, **exe, span);
          PrepareCost& best = span ? real : sim;
          best = {std::min(best.host_bytes, m.host_bytes), std::min(best.seconds, m.seconds),
                  std::max(best.remote_device_bytes, m.remote_device_bytes)};
        }
      }
      unsetenv("SHARDLAB_BF16_MATMUL");
      // Nothing is placed on another process's devices (no arena, no widening scratch). The
      // host bytes are printed, not compared: since the convert+sgemm plans keep their f32
      // copies in per-thread scratch, the plans are small, and a process's staging slots for
      // the remote members it reads can outweigh the whole simulated mesh's tables.
      EXPECT_EQ(real.remote_device_bytes, 0) << mesh.to_string();
      if (dist::process().index == 0)
        fmt::print("[mpi] prepare {} bf16 matmul {}: simulated {} devices {} host bytes {:.2f} ms; "
                   "process 0 of {}: {} host bytes {:.2f} ms\n",
                   mesh.to_string(), backend, mesh.num_devices(), sim.host_bytes,
                   sim.seconds * 1e3, P, real.host_bytes, real.seconds * 1e3);
    }
  }
}

TEST(ProcessErrors, MeshNotMultipleOfProcesses) {
  const int P = dist::process().count;
  if (P == 1) GTEST_SKIP() << "one process";
  Result<dist::DeviceRange> r = dist::device_range(P + 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(fmt::format("a mesh of {} devices cannot be split over {} "
                                                  "processes",
                                                  P + 1, P)),
            std::string::npos)
      << r.status().message();
}

// Rank 1 traces a different model: preparing the executable fails on every rank, before any
// step, naming the process.
TEST(ProcessErrors, DifferentProgramsNamed) {
  const int P = dist::process().count;
  if (P == 1) GTEST_SKIP() << "one process";
  Mesh mesh = *Mesh::create({"data"}, {P});
  ResolvedConfig cfg = config_for(Case{{"data"}, {P}});
  if (dist::process().index == 1) cfg.learning_rate *= 2;
  TrainStepLayout layout;
  Program p = build_train_step(cfg, &layout);
  Result<std::shared_ptr<const Executable>> exe = compile(p, mesh, CompileOptions{});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  Runtime rt(mesh, 0, /*span_processes=*/true);
  Status s = rt.prepare(**exe);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("process 1 compiled a different program than process 0"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace eng

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  eng::Status s = eng::dist::init(&argc, &argv);
  if (!s.ok()) {
    fmt::print(stderr, "mpi_test: {}\n", s.message());
    return 1;
  }
  if (eng::dist::process().index != 0) {  // one report: rank 0's (failures still fail the job)
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) fmt::print(stderr, "mpi_test: process {} failed\n", eng::dist::process().index);
  eng::dist::finalize();
  return rc;
}
