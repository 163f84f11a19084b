// tests/train/plan_test.cpp: sl.plan's engine side: the config's mesh on named hardware, the
// predicted step (roofline per instruction, overlapped collectives), MaxText's TFLOP count,
// fits against HBM, the store's predictions rows, and the errors.
#include "engine/train/plan.h"

#include <gtest/gtest.h>

#include "engine/store/metrics_store.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

using testing::TempDir;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

Config config(const std::string& model, const std::string& topology, double batch, int64_t seq) {
  Config c;
  EXPECT_TRUE(c.set("model_name", model).ok());
  EXPECT_TRUE(c.set("compile_topology", topology).ok());
  EXPECT_TRUE(c.set("per_device_batch_size", batch).ok());
  EXPECT_TRUE(c.set("max_target_length", seq).ok());
  return c;
}

TEST(Predict, MatmulEfficiencyPadsToTheMatrixUnit) {
  EXPECT_DOUBLE_EQ(matmul_efficiency(4096, 8192, 1024, 256), 1.0);
  EXPECT_DOUBLE_EQ(matmul_efficiency(100, 256, 256, 128), 100.0 / 128);
  EXPECT_DOUBLE_EQ(matmul_efficiency(128, 128, 128, 256), 1.0 / 8);
}

TEST(Predict, CausalBlockFactorCountsWholeTiles) {
  EXPECT_DOUBLE_EQ(causal_block_factor(4096, 1, 1), 1.0);
  EXPECT_DOUBLE_EQ(causal_block_factor(4096, 512, 512), (4096.0 + 512) / (4096 + 1));
  EXPECT_DOUBLE_EQ(causal_block_factor(8192, 2048, 2048), (8192.0 + 2048) / (8192 + 1));
  EXPECT_DOUBLE_EQ(causal_block_factor(100, 512, 512), 100.0 * 100 / (100.0 * 101 / 2));
}

// The splash backward's matrix work (jax's splash_attention_kernel: the dK/dV kernel's QK^T,
// dV, dP, dK; the separate dQ kernel's QK^T, dP, dQ; fused, dQ inside the dK/dV kernel) over
// the counted 4 matmuls, each kernel on its own causal tiles.
TEST(Predict, AttentionBackwardFactorCountsEachKernelsMatmulsAndTiles) {
  PredictOptions o;  // MaxText's defaults: 512 blocks, two kernels
  EXPECT_DOUBLE_EQ(attention_backward_factor(8192, o),
                   7.0 / 4 * (8192.0 + 512) / (8192 + 1));
  o.attention_fused_bwd = true;
  o.attention_block_q_dkv = o.attention_block_kv_dkv = 2048;
  o.attention_block_q_dq = 1;  // unused when fused
  EXPECT_DOUBLE_EQ(attention_backward_factor(8192, o), 5.0 / 4 * (8192.0 + 2048) / (8192 + 1));
  o.attention_fused_bwd = false;  // llama2-70b's recipe: q 2048 over kv 512 in both kernels
  o.attention_block_q_dkv = o.attention_block_q_dq = 2048;
  o.attention_block_kv_dkv = o.attention_block_kv_dq = 512;
  const double tiles = causal_block_factor(4096, 2048, 512);
  EXPECT_DOUBLE_EQ(tiles, (2048.0 * 2048 + 2048.0 * 4096) / (4096.0 * 4097 / 2));
  EXPECT_DOUBLE_EQ(attention_backward_factor(4096, o), tiles + 3.0 / 4 * tiles);
}

TEST(Plan, SplashBackwardKeysMustBePositive) {
  Config c = config("llama-tiny", "v6e-8", 1, 256);
  ASSERT_TRUE(c.set("sa_block_kv_dq", int64_t{0}).ok());
  Result<Plan> r = plan_for_topology(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "plan: sa_block_kv_dq must be >= 1, got 0");
}

// With HBM bandwidth out of the way every matmul and attention op is bound by the matrix
// unit, so scaling the chip's sustained fraction scales their time by exactly its inverse:
// v6e's measured 79.3% against the bare peak (fraction 0: the roofline).
TEST(Predict, MatrixUnitTimeScalesWithTheSustainedFraction) {
  Config c = config("llama-tiny", "v6e-8", 4, 512);
  Result<Plan> r = plan_for_topology(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  PhysicalMesh measured = r->physical, at_peak = r->physical;
  measured.topology.chip.hbm_bytes_per_s = at_peak.topology.chip.hbm_bytes_per_s = 1e30;
  at_peak.topology.chip.mxu_sustained_fraction = 0;
  const double f = measured.topology.chip.mxu_sustained_fraction;
  ASSERT_NEAR(f, 727.699e12 / 9.18e14, 1e-12);
  Result<Prediction> a = predict_step(*r->exe, measured), b = predict_step(*r->exe, at_peak);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_DOUBLE_EQ(a->mxu_flops_per_s, 727.699e12);
  EXPECT_DOUBLE_EQ(b->mxu_flops_per_s, 9.18e14);
  int checked = 0;
  for (const PredictedCompute& x : a->compute)
    for (const PredictedCompute& y : b->compute)
      if (x.op_class == y.op_class && (x.op_class == "matmul" || x.op_class == "attention")) {
        EXPECT_GT(y.seconds, 0) << y.op_class;
        EXPECT_NEAR(x.seconds, y.seconds / f, 1e-12 * x.seconds) << x.op_class;
        ++checked;
      }
  EXPECT_EQ(checked, 2);
  EXPECT_TRUE(contains(a->to_table(), "79.3% of v6e's peak"));
  EXPECT_TRUE(contains(b->to_table(), "no public sustained-matmul measurement"));
}

// MaxText's dense MoE dispatch runs its einsums on the matrix unit: dispatch, combine, the
// combine weights' cotangent and the expert GEMMs (forward and weight gradient) are matmuls
// for the roofline, never "memory-bound", and their flops are the cost model's.
TEST(Predict, DenseMoeEinsumsRunOnTheMatrixUnit) {
  Config c = config("mixtral-tiny", "v6e-8", 4, 512);
  ASSERT_TRUE(c.set("sparse_matmul", false).ok());
  ASSERT_TRUE(c.set("capacity_factor", 1.25).ok());
  Result<Plan> r = plan_for_topology(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  double flops = 0;
  int64_t count = 0, einsums = 0;
  for (const Instr& in : r->exe->program().instrs()) {
    const bool moe = in.kind == OpKind::kMoeDispatch || in.kind == OpKind::kMoeCombine ||
                     in.kind == OpKind::kMoeCombineWeightsGrad ||
                     in.kind == OpKind::kExpertMatmul || in.kind == OpKind::kExpertMatmulGrad;
    if (in.kind != OpKind::kMatmul && !moe) continue;
    flops += instr_flops(r->exe->program(), in);
    ++count;
    einsums += moe;
  }
  EXPECT_GT(einsums, 0);
  const Prediction& p = r->predicted;
  const PredictedCompute* matmul = nullptr;
  for (const PredictedCompute& x : p.compute)
    if (x.op_class == "matmul") matmul = &x;
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->count, count);
  EXPECT_DOUBLE_EQ(matmul->flops, flops);
  EXPECT_GE(matmul->seconds, flops / p.mxu_flops_per_s * (1 - 1e-12));  // at most the MXU rate
}

TEST(Plan, FsdpOnV5pOverlapsItsCollectives) {
  Config c = config("llama2-7b", "v5p-16", 1, 1024);
  Result<Plan> r = plan_for_topology(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Prediction& p = r->predicted;
  EXPECT_EQ(r->physical.mesh.axis_size("fsdp"), 8);
  EXPECT_EQ(p.topology, "v5p-16");
  // The step is at least the compute stream and at most compute plus every collective.
  EXPECT_GE(p.step_time_s, p.compute_s);
  EXPECT_LE(p.step_time_s, p.compute_s + p.collective_s + 1e-9);
  ASSERT_FALSE(p.collectives.empty());
  EXPECT_EQ(p.collectives[0].axes, "fsdp");
  EXPECT_LT(p.exposed_collective_s, p.collective_s);  // the FSDP gathers overlap compute
  double exposed = 0;  // every wait is charged to the axes of the collective it waited for
  for (const PredictedCollectives& k : p.collectives) exposed += k.exposed_seconds;
  EXPECT_NEAR(exposed, p.exposed_collective_s, 1e-9);
  EXPECT_GT(exposed, 0);
  EXPECT_EQ(p.compute[0].op_class, "matmul");
  // Matmuls at the v5p peak at least: their flops over 4.59e14.
  EXPECT_GE(p.compute[0].seconds, p.compute[0].flops / 4.59e14 * (1 - 1e-12));
  // MaxText's count for the config, per device.
  const TrainingTflops tf = calculate_tflops_training_per_device(
      r->trainer->config().model, 1, 1024);
  EXPECT_DOUBLE_EQ(p.tflops_per_device, tf.total);
  EXPECT_NEAR(p.tflops_per_s_per_device, tf.total / p.step_time_s, 1e-9);
  EXPECT_NEAR(p.tokens_per_s_per_device, 1024 / p.step_time_s, 1e-9);
  EXPECT_NEAR(p.mfu, p.tflops_per_s_per_device / 459, 1e-12);
  EXPECT_TRUE(p.fits);
  EXPECT_TRUE(contains(p.to_table(), "predicted step on v5p-16"));
  EXPECT_TRUE(contains(p.to_table(), "fsdp"));
}

TEST(Plan, CausalHalvingIsTheRowsConvention) {
  Config c = config("llama-tiny", "v6e-8", 1, 256);
  PlanOptions whole;
  whole.causal_attention_halved = false;
  Result<Plan> a = plan_for_topology(c), b = plan_for_topology(c, whole);
  ASSERT_TRUE(a.ok() && b.ok());
  const TrainingTflops h = calculate_tflops_training_per_device(a->trainer->config().model, 1, 256);
  EXPECT_DOUBLE_EQ(a->predicted.tflops_per_device, h.total);
  EXPECT_DOUBLE_EQ(b->predicted.tflops_per_device, h.learnable + 2 * h.attention);
  EXPECT_DOUBLE_EQ(a->predicted.step_time_s, b->predicted.step_time_s);  // time is the same
}

TEST(Plan, FitsIsFalseWhenThePeakExceedsHbm) {
  // llama2-7b's f32 params and moments over 4 v5e chips: ~25 GiB per device, 16 GiB of HBM.
  Result<Plan> r = plan_for_topology(config("llama2-7b", "v5e-4", 1, 512));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->predicted.peak_bytes, r->predicted.hbm_bytes);
  EXPECT_EQ(r->predicted.hbm_bytes, int64_t{16} << 30);
  EXPECT_FALSE(r->predicted.fits);
  EXPECT_TRUE(contains(r->predicted.to_table(), "DOES NOT FIT"));
}

TEST(Plan, DcnAxesSpanSlices) {
  Config c = config("llama-tiny", "v5p-8", 1, 256);
  ASSERT_TRUE(c.set("compile_topology_num_slices", int64_t{2}).ok());
  Result<Plan> r = plan_for_topology(c);  // dcn_data_parallelism -1: data = 2 over DCN
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->physical.mesh.num_devices(), 8);
  EXPECT_EQ(r->physical.mesh.axis_size("data"), 2);
  EXPECT_EQ(r->physical.mesh.axis_size("fsdp"), 4);
  bool data_axis = false;
  for (const PredictedCollectives& k : r->predicted.collectives)
    data_axis = data_axis || contains(k.axes, "data");
  EXPECT_TRUE(data_axis);  // gradients are reduced over the slices too
}

// dcn_expert_parallelism (MaxText's key): the expert axis over slices. mixtral-8x7b on two
// v6e-256 slices, experts split 2 ways over DCN: the dispatch's all-to-alls over `expert` run
// on the DCN link, the trainer's mesh has expert = 2 and the experts' weights are split.
TEST(Plan, DcnExpertParallelismSpansSlices) {
  Config c = config("mixtral-8x7b", "v6e-256", 1, 2048);
  for (auto [k, v] : std::initializer_list<std::pair<const char*, ConfigValue>>{
           {"compile_topology_num_slices", int64_t{2}},
           {"sparse_matmul", false},
           {"capacity_factor", 1.0},
           {"ici_fsdp_parallelism", int64_t{-1}},
           {"dcn_data_parallelism", int64_t{1}},
           {"dcn_expert_parallelism", int64_t{2}}})
    ASSERT_TRUE(c.set(k, v).ok()) << k;
  Result<Plan> r = plan_for_topology(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->physical.mesh.num_devices(), 512);
  EXPECT_EQ(r->physical.mesh.axis_size("expert"), 2);
  EXPECT_EQ(r->physical.mesh.axis_size("fsdp"), 256);
  bool over_dcn = false;
  for (const AxisPlacement& a : r->physical.axes)
    if (a.axis == "expert") over_dcn = a.dcn_size == 2 && a.dcn_bytes_per_s > 0;
  EXPECT_TRUE(over_dcn);
  const PredictedCollectives* expert = nullptr;
  for (const PredictedCollectives& k : r->predicted.collectives)
    if (k.axes == "expert") expert = &k;
  ASSERT_NE(expert, nullptr) << r->predicted.to_table();
  EXPECT_GT(expert->bytes, 0);
}

TEST(Plan, GpuHostsAreSlicesOverDcn) {
  Config c = config("llama-tiny", "a3", 1, 256);
  ASSERT_TRUE(c.set("compile_topology_num_slices", int64_t{2}).ok());
  Result<Plan> r = plan_for_topology(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->physical.mesh.num_devices(), 16);
  EXPECT_EQ(r->physical.axis("fsdp")->to_string(), "fsdp: 8 over the NVLink switch (8)");
  EXPECT_EQ(r->physical.axis("data")->to_string(), "data: 2 over 2 slices over DCN");
  EXPECT_EQ(r->predicted.hbm_bytes, int64_t{80'000'000'000});
  EXPECT_GT(r->predicted.step_time_s, 0);
  EXPECT_NEAR(r->predicted.mfu, r->predicted.tflops_per_s_per_device / 989, 1e-12);
}

// Host offload: the moves are timed on the chip's host link (v6e: 32 GB/s one way, the
// scaling book), both directions, and the offloaded bytes leave the device peak.
TEST(Plan, HostOffloadIsTimedOnTheHostLink) {
  Config c = config("llama-tiny", "v6e-8", 2, 512);
  ASSERT_TRUE(c.set("remat_policy", "custom").ok());
  ASSERT_TRUE(c.set("remat_offload_names", "decoder_layer_input,query_proj,key_proj,value_proj").ok());
  Result<Plan> r = plan_for_topology(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Prediction& p = r->predicted;
  double moved = 0;
  int64_t moves = 0;
  const Program& local = r->exe->program();
  for (const Instr& in : local.instrs())
    if (in.kind == OpKind::kMoveToHost || in.kind == OpKind::kMoveToDevice) {
      moved += static_cast<double>(local.value(in.inputs[0]).bytes());
      ++moves;
    }
  ASSERT_GT(moves, 0);
  EXPECT_EQ(p.host_transfers.count, moves);
  EXPECT_DOUBLE_EQ(p.host_transfers.bytes, moved);
  EXPECT_NEAR(p.host_transfers.seconds, moved / 3.2e10, 1e-12);
  EXPECT_GT(p.host_temp_bytes, 0);
  EXPECT_EQ(p.host_temp_bytes, r->exe->memory().host_temp_bytes);
  EXPECT_GE(p.step_time_s, p.compute_s);
  EXPECT_TRUE(contains(p.to_table(), "host offload (PCIe)")) << p.to_table();
  // The same config saving those names on the device instead: a larger device peak.
  Config dev = c;
  ASSERT_TRUE(dev.set("remat_offload_names", "").ok());
  ASSERT_TRUE(dev.set("remat_save_names", "query_proj,key_proj,value_proj").ok());
  Result<Plan> d = plan_for_topology(dev);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_LT(p.peak_bytes, d->predicted.peak_bytes);
  EXPECT_EQ(d->predicted.host_transfers.count, 0);
  // A chip whose host link is not known: an error, never a default.
  Config ironwood = c;
  ASSERT_TRUE(ironwood.set("compile_topology", "tpu7x-8").ok());
  Result<Plan> e = plan_for_topology(ironwood);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(contains(e.status().message(), "chip tpu7x has no host_bytes_per_s"))
      << e.status().message();
}

TEST(Plan, Errors) {
  Config none = config("llama-tiny", "", 1, 256);
  Result<Plan> r0 = plan_for_topology(none);
  ASSERT_FALSE(r0.ok());
  EXPECT_TRUE(contains(r0.status().message(), "compile_topology is not set"));
  Result<Plan> r1 = plan_for_topology(config("llama-tiny", "v9-8", 1, 256));
  ASSERT_FALSE(r1.ok());
  EXPECT_TRUE(contains(r1.status().message(), "known families: v4-N"));
  Config bad = config("llama-tiny", "v6e-8", 1, 256);
  ASSERT_TRUE(bad.set("ici_fsdp_parallelism", int64_t{2}).ok());
  ASSERT_TRUE(bad.set("ici_tensor_parallelism", int64_t{2}).ok());
  Result<Plan> r2 = plan_for_topology(bad);
  ASSERT_FALSE(r2.ok());
  EXPECT_TRUE(contains(r2.status().message(), "Number of devices per slice 8 does not match the "
                                              "product of the ICI parallelism 4"))
      << r2.status().message();
}

TEST(Plan, WritesThePredictionUnderItsCompilation) {
  TempDir dir("plan");
  auto store = MetricsStore::open(dir / "m.db").value();
  PlanOptions o;
  o.store = store.get();
  Result<Plan> r = plan_for_topology(config("llama-tiny", "v6e-8", 1, 256), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GT(r->compile_id, 0);
  SqlValue id[] = {r->compile_id};
  Result<QueryResult> q = store->query(
      "SELECT topology, step_time_s, fits FROM predictions WHERE compile_id = ?", id);
  ASSERT_TRUE(q.ok()) << q.status().message();
  ASSERT_EQ(q->rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(q->rows[0][0]), "v6e-8");
  EXPECT_DOUBLE_EQ(std::get<double>(q->rows[0][1]), r->predicted.step_time_s);
  EXPECT_EQ(std::get<int64_t>(q->rows[0][2]), 1);
  Result<QueryResult> parts = store->query(
      "SELECT count(*) FROM prediction_parts WHERE compile_id = ? AND kind = 'compute'", id);
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(std::get<int64_t>(parts->rows[0][0]),
            static_cast<int64_t>(r->predicted.compute.size()));
}

// Regression: schema version 2 refused prediction_parts.kind 'host_offload', so recording the
// plan of an offloading remat policy failed. A v2 store is migrated (its rows kept) and takes it.
TEST(Plan, RecordsHostOffloadPartsAndMigratesAVersion2Store) {
  TempDir dir("plan_v2");
  const std::string path = dir / "m.db";
  int64_t parts_before = 0;
  {
    std::vector<Migration> v2(store_migrations().begin(), store_migrations().begin() + 2);
    ASSERT_EQ(v2.back().version, 2);
    auto old = MetricsStore::open(path, {.migrations = v2}).value();
    PlanOptions o;
    o.store = old.get();
    Result<Plan> r = plan_for_topology(config("llama-tiny", "v6e-8", 1, 256), o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    Result<QueryResult> q = old->query("SELECT count(*) FROM prediction_parts");
    ASSERT_TRUE(q.ok());
    parts_before = std::get<int64_t>(q->rows[0][0]);
    ASSERT_GT(parts_before, 0);
  }
  auto store = MetricsStore::open(path).value();
  EXPECT_EQ(*store->user_version(), store_schema_version());
  Result<QueryResult> kept = store->query("SELECT count(*) FROM prediction_parts");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(std::get<int64_t>(kept->rows[0][0]), parts_before);

  Config c = config("llama-tiny", "v6e-8", 2, 512);
  ASSERT_TRUE(c.set("remat_policy", "custom").ok());
  ASSERT_TRUE(c.set("remat_offload_names", "decoder_layer_input,query_proj,key_proj,value_proj").ok());
  PlanOptions o;
  o.store = store.get();
  Result<Plan> r = plan_for_topology(c, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  SqlValue id[] = {r->compile_id};
  Result<QueryResult> host = store->query(
      "SELECT name, seconds, bytes FROM prediction_parts WHERE compile_id = ? AND "
      "kind = 'host_offload'",
      id);
  ASSERT_TRUE(host.ok()) << host.status().message();
  ASSERT_EQ(host->rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(host->rows[0][0]), "host");
  EXPECT_DOUBLE_EQ(std::get<double>(host->rows[0][1]), r->predicted.host_transfers.seconds);
  EXPECT_DOUBLE_EQ(std::get<double>(host->rows[0][2]), r->predicted.host_transfers.bytes);
}

}  // namespace
}  // namespace eng
