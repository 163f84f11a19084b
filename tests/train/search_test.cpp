// tests/train/search_test.cpp: the search over meshes x values (engine/train/search.h) on a small
// topology: enumeration counts against the torus by hand, fit dropping, the ranking, the same
// prediction as sl.plan's, the store rows, and the errors.
#include "engine/train/search.h"

#include <gtest/gtest.h>

#include <set>

#include "engine/train/plan.h"

namespace eng {
namespace {

using testing::TempDir;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// llama-tiny (4 query heads, 4 kv heads) on v6e-8: 8 chips on a 2x4 torus, 32 GiB each.
Config tiny() {
  Config c;
  EXPECT_TRUE(c.set("model_name", "llama-tiny").ok());
  EXPECT_TRUE(c.set("compile_topology", "v6e-8").ok());
  EXPECT_TRUE(c.set("max_target_length", int64_t{256}).ok());
  return c;
}

TEST(Search, EnumeratesTheSplitsTheTorusLaysOut) {
  // fsdp x tensor = 8: (1,8) (2,4) (4,2) (8,1); on 2x4 tensor takes 8 (both dims), 4 or 2 (one
  // dim) and fsdp the other: all four lay out.
  Result<SearchResult> two = enumerate_candidates(tiny(), {{"fsdp", "tensor"}, {}});
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->mesh_splits, 4);
  EXPECT_EQ(two->meshes, 4);
  EXPECT_EQ(two->candidates.size(), 4u);
  // data x fsdp x tensor = 8: 10 ordered splits; (2,2,2) needs two dims of 2 and 2x4 has one.
  SearchSpace three{{"data", "fsdp", "tensor"},
                    {{"per_device_batch_size", {"1", "2"}}, {"remat_policy", {"full", "minimal"}}}};
  Result<SearchResult> r = enumerate_candidates(tiny(), three);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->mesh_splits, 10);
  EXPECT_EQ(r->meshes, 9);
  EXPECT_TRUE(contains(r->mesh_skip_example, "allow_split_physical_axes"))
      << r->mesh_skip_example;
  ASSERT_EQ(r->candidates.size(), 9u * 2 * 2);
  std::set<std::string> labels;
  for (const SearchCandidate& c : r->candidates) labels.insert(c.label());
  EXPECT_EQ(labels.size(), r->candidates.size());  // no candidate twice
  EXPECT_TRUE(labels.count("data=1 fsdp=2 tensor=4 per_device_batch_size=2 remat_policy=minimal"));
  EXPECT_FALSE(labels.count("data=2 fsdp=2 tensor=2 per_device_batch_size=1 remat_policy=full"));
  // The last key varies fastest.
  EXPECT_EQ(r->candidates[0].label(),
            "data=1 fsdp=1 tensor=8 per_device_batch_size=1 remat_policy=full");
  EXPECT_EQ(r->candidates[1].label(),
            "data=1 fsdp=1 tensor=8 per_device_batch_size=1 remat_policy=minimal");
}

TEST(Search, AnAxisAtMinusOneFillsWhatTheVariedAxesLeave) {
  Config c = tiny();
  ASSERT_TRUE(c.set("ici_fsdp_parallelism", int64_t{-1}).ok());
  Result<SearchResult> r = enumerate_candidates(c, {{"tensor"}, {}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->candidates.size(), 4u);  // tensor in {1, 2, 4, 8}, fsdp = 8 / tensor
  EXPECT_EQ(r->candidates[0].label(), "tensor=1 fsdp=8");
  EXPECT_EQ(r->candidates[3].label(), "tensor=8 fsdp=1");
}

TEST(Search, DropsWhatDoesNotFitAndRanksTheRest) {
  // per_device_batch_size 16384 x 256 tokens needs far more than 32 GiB on every mesh; 1 fits.
  // tensor=8 cannot shard 4 heads: a failed plan with the engine's message.
  const std::string db = TempDir() + "/search_test.db";
  std::remove(db.c_str());
  Result<std::unique_ptr<MetricsStore>> store = MetricsStore::open(db);
  ASSERT_TRUE(store.ok()) << store.status().message();
  SearchOptions o;
  o.store = store->get();
  int64_t calls = 0;
  o.progress = [&](int64_t done, int64_t total, const SearchCandidate&) {
    ++calls;
    EXPECT_EQ(done, calls);
    EXPECT_EQ(total, 8);
  };
  SearchSpace space{{"fsdp", "tensor"}, {{"per_device_batch_size", {"1", "16384"}}}};
  Result<SearchResult> r = search_configs(tiny(), space, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(calls, 8);
  EXPECT_EQ(r->candidates.size(), 8u);
  EXPECT_EQ(r->planned, 6);
  EXPECT_EQ(r->failed, 2);
  EXPECT_EQ(r->fitting, 3);
  ASSERT_EQ(r->ranking.size(), 3u);
  for (const SearchCandidate& c : r->candidates) {
    if (c.mesh[1].second == 8) {
      EXPECT_FALSE(c.planned);
      EXPECT_TRUE(contains(c.status.message(), "not divisible by 8")) << c.status.message();
      continue;
    }
    ASSERT_TRUE(c.planned) << c.label() << ": " << c.status.message();
    const bool big = c.values[0].second == "16384";
    EXPECT_EQ(c.predicted.fits, !big) << c.label();
    EXPECT_EQ(c.predicted.fits, c.predicted.peak_bytes <= c.predicted.hbm_bytes);
    EXPECT_EQ(c.global_batch, big ? 16384 * 8 : 8);
    if (big) {
      EXPECT_EQ(c.rank, 0);
      EXPECT_TRUE(c.limit().starts_with("memory: ")) << c.limit();
    }
  }
  for (size_t k = 0; k < r->ranking.size(); ++k) {
    const SearchCandidate& c = r->candidates[r->ranking[k]];
    EXPECT_EQ(c.rank, static_cast<int64_t>(k) + 1);
    if (k > 0) {
      EXPECT_GE(r->candidates[r->ranking[k - 1]].predicted.tokens_per_s_per_device,
                c.predicted.tokens_per_s_per_device);
    }
  }
  // The best candidate's prediction is sl.plan's for the same config.
  const SearchCandidate& best = r->candidates[r->ranking[0]];
  Config c = tiny();
  for (const auto& [axis, size] : best.mesh) ASSERT_TRUE(c.set(ici_key(axis), size).ok());
  ASSERT_TRUE(c.set("per_device_batch_size", 1.0).ok());
  Result<Plan> plan = plan_for_topology(c);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->predicted.step_time_s, best.predicted.step_time_s);
  EXPECT_EQ(plan->predicted.peak_bytes, best.predicted.peak_bytes);
  const std::string table = r->to_table(2);
  EXPECT_TRUE(contains(table, "8 candidates (4 meshes of 4 splits), 6 planned, 3 fit, 2 failed"))
      << table;
  EXPECT_TRUE(contains(table, best.label())) << table;
  EXPECT_TRUE(contains(table, "3 do not fit")) << table;

  // The store: one run, a compile and a prediction per planned candidate, an event per candidate.
  ASSERT_FALSE(r->run_id.empty());
  auto count = [&](const std::string& sql) {
    std::vector<SqlValue> args = {SqlValue{r->run_id}};
    Result<QueryResult> q = (*store)->query(sql, args);
    EXPECT_TRUE(q.ok()) << q.status().message();
    return q.ok() ? std::get<int64_t>(q->rows[0][0]) : -1;
  };
  EXPECT_EQ(count("SELECT count(*) FROM compilations WHERE run_id = ?"), 6);
  EXPECT_EQ(count("SELECT count(*) FROM predictions p JOIN compilations c USING (compile_id) "
                  "WHERE c.run_id = ?"),
            6);
  EXPECT_EQ(count("SELECT count(*) FROM events WHERE run_id = ? AND kind = 'search'"), 8);
  EXPECT_EQ(count("SELECT count(*) FROM metrics WHERE run_id = ? AND key = 'search/rank'"), 3);
}

// A store write that fails does not stop the search and is not silent: the first error is kept
// and printed under the table (a v2 store's CHECK once refused every host-offload prediction
// part, and the search dropped the error).
TEST(Search, AFailedStoreWriteIsReported) {
  const std::string db = TempDir() + "/search_store_error.db";
  std::remove(db.c_str());
  std::vector<Migration> refusing(store_migrations().begin(), store_migrations().end());
  refusing.push_back({store_schema_version() + 1, "refuse prediction parts",
                      "CREATE TRIGGER refuse_parts BEFORE INSERT ON prediction_parts BEGIN "
                      "SELECT RAISE(ABORT, 'refused by the test'); END;"});
  Result<std::unique_ptr<MetricsStore>> store = MetricsStore::open(db, {.migrations = refusing});
  ASSERT_TRUE(store.ok()) << store.status().message();
  SearchOptions o;
  o.store = store->get();
  SearchSpace space{{"fsdp", "tensor"}, {{"per_device_batch_size", {"1"}}}};
  Result<SearchResult> r = search_configs(tiny(), space, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->fitting, 3);  // the search went on
  EXPECT_TRUE(contains(r->store_error, "refused by the test")) << r->store_error;
  EXPECT_TRUE(contains(r->to_table(3), "store: some candidates' rows were not recorded: "))
      << r->to_table(3);
}

TEST(Search, LargerBatchesAreSkippedOnceOneDoesNotFit) {
  // 16384 does not fit on any of the three meshes that plan, so 32768 is not planned there;
  // without pruning it is, and does not fit either.
  SearchSpace space{{"fsdp", "tensor"}, {{"per_device_batch_size", {"32768", "1", "16384"}}}};
  Result<SearchResult> r = search_configs(tiny(), space);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->candidates.size(), 12u);
  EXPECT_EQ(r->planned, 6);
  EXPECT_EQ(r->pruned, 3);
  EXPECT_EQ(r->failed, 3);  // tensor=8
  EXPECT_EQ(r->fitting, 3);
  for (const SearchCandidate& c : r->candidates) {
    if (!c.pruned) continue;
    EXPECT_EQ(c.values[0].second, "32768");
    EXPECT_TRUE(contains(c.limit(), "skipped: per_device_batch_size=16384 does not fit"))
        << c.limit();
  }
  SearchOptions all;
  all.prune_batch = false;
  Result<SearchResult> every = search_configs(tiny(), space, all);
  ASSERT_TRUE(every.ok()) << every.status().message();
  EXPECT_EQ(every->planned, 9);
  EXPECT_EQ(every->pruned, 0);
  EXPECT_EQ(every->fitting, 3);
  EXPECT_EQ(every->ranking, r->ranking);  // the same winners either way
}

TEST(Search, ReusedTracesPlanAsFreshOnes) {
  // One trace per (batch, policy) on every data x fsdp x tensor split: the same predictions,
  // memory and errors as tracing each plan anew.
  SearchSpace space{{"data", "fsdp", "tensor"},
                    {{"per_device_batch_size", {"1", "2"}}, {"remat_policy", {"full", "minimal"}}}};
  SearchOptions fresh;
  fresh.reuse_traces = false;
  Result<SearchResult> a = search_configs(tiny(), space);
  Result<SearchResult> b = search_configs(tiny(), space, fresh);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(a->candidates.size(), b->candidates.size());
  EXPECT_GT(a->planned, 20);
  for (size_t i = 0; i < a->candidates.size(); ++i) {
    const SearchCandidate& x = a->candidates[i];
    const SearchCandidate& y = b->candidates[i];
    ASSERT_EQ(x.planned, y.planned) << x.label();
    EXPECT_EQ(x.status.message(), y.status.message()) << x.label();
    if (!x.planned) continue;
    EXPECT_EQ(x.predicted.step_time_s, y.predicted.step_time_s) << x.label();
    EXPECT_EQ(x.predicted.peak_bytes, y.predicted.peak_bytes) << x.label();
    EXPECT_EQ(x.predicted.compute_s, y.predicted.compute_s) << x.label();
  }
  EXPECT_EQ(a->ranking, b->ranking);

  // The Pareto front: by peak ascending with throughput rising, and every planned candidate is
  // on it or beaten on both by one of it.
  const std::vector<size_t> front = a->pareto_front();
  ASSERT_FALSE(front.empty());
  for (size_t k = 1; k < front.size(); ++k) {
    const Prediction& lo = a->candidates[front[k - 1]].predicted;
    const Prediction& hi = a->candidates[front[k]].predicted;
    EXPECT_LE(lo.peak_bytes, hi.peak_bytes);
    EXPECT_LT(lo.tokens_per_s_per_device, hi.tokens_per_s_per_device);
  }
  for (const SearchCandidate& c : a->candidates) {
    if (!c.planned) continue;
    bool covered = false;
    for (size_t f : front) {
      const Prediction& p = a->candidates[f].predicted;
      covered |= p.peak_bytes <= c.predicted.peak_bytes &&
                 p.tokens_per_s_per_device >= c.predicted.tokens_per_s_per_device;
    }
    EXPECT_TRUE(covered) << c.label();
  }
  const std::string svg = a->pareto_svg();
  EXPECT_TRUE(svg.starts_with("<svg")) << svg.substr(0, 80);
  EXPECT_TRUE(contains(svg, "<polyline")) << svg.substr(0, 200);
  size_t circles = 0;
  for (size_t p = svg.find("<circle"); p != std::string::npos; p = svg.find("<circle", p + 1))
    ++circles;
  EXPECT_EQ(circles, static_cast<size_t>(a->planned));
}

TEST(Search, BadInputIsAClearError) {
  auto error = [](const Config& c, const SearchSpace& s) {
    Result<SearchResult> r = enumerate_candidates(c, s);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_TRUE(contains(error(tiny(), {{"tensr"}, {}}), "did you mean 'tensor'"));
  EXPECT_TRUE(contains(error(tiny(), {{"fsdp", "fsdp"}, {}}), "given twice"));
  EXPECT_TRUE(
      contains(error(tiny(), {{}, {{"remat_polcy", {"full"}}}}), "did you mean 'remat_policy'"));
  EXPECT_TRUE(contains(error(tiny(), {{}, {{"per_device_batch_size", {"two"}}}}), "'two'"));
  EXPECT_TRUE(contains(error(tiny(), {{}, {{"remat_policy", {}}}}), "no values"));
  EXPECT_TRUE(contains(error(tiny(), {{"fsdp"}, {{"ici_fsdp_parallelism", {"2"}}}}),
                       "ici_fsdp_parallelism is varied by the mesh axis 'fsdp'"));
  std::vector<std::string> many;
  for (int i = 1; i <= 400; ++i) many.push_back(std::to_string(i));
  EXPECT_TRUE(contains(error(tiny(), {{"fsdp", "tensor"}, {{"per_device_batch_size", many},
                                                           {"steps", many}}}),
                       "more than 100000 candidates"));
  Config no_topology;
  ASSERT_TRUE(no_topology.set("model_name", "llama-tiny").ok());
  EXPECT_TRUE(contains(error(no_topology, {{"fsdp"}, {}}), "compile_topology is not set"));
  Config odd = tiny();
  ASSERT_TRUE(odd.set("ici_data_parallelism", int64_t{3}).ok());
  EXPECT_TRUE(contains(error(odd, {{"fsdp"}, {}}), "does not divide the 8 devices"));
  // A policy the engine does not know fails its candidates with the engine's message.
  Result<SearchResult> r =
      search_configs(tiny(), {{}, {{"remat_policy", {"full", "no_such_policy"}}}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->planned, 1);
  EXPECT_EQ(r->failed, 1);
  EXPECT_TRUE(contains(r->candidates[1].limit(), "no_such_policy")) << r->candidates[1].limit();
}

}  // namespace
}  // namespace eng
