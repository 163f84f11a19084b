// tests/compile/memory_plan_test.cpp: the planner as a pure function: no overlap for random
// lifetimes, lower-bound optimality checks, and the verifier catching a bad plan.
#include <algorithm>
#include <climits>
#include <random>

#include <gtest/gtest.h>

#include "engine/compile/memory_plan.h"

namespace eng {
namespace {

int64_t aligned(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// max over instructions of the (aligned) bytes live there: no plan can beat it.
int64_t max_live_bytes(const std::vector<PlanBuffer>& bufs) {
  int last = 0;
  for (const PlanBuffer& b : bufs) last = std::max(last, b.last);
  int64_t best = 0;
  for (int t = 0; t <= last; ++t) {
    int64_t live = 0;
    for (const PlanBuffer& b : bufs)
      if (b.first <= t && t <= b.last) live += aligned(b.bytes);
    best = std::max(best, live);
  }
  return best;
}

// The planner as it was before its conflicts came from per-block lists: every placed buffer
// scanned in offset order, the three orders, the smallest arena (the earlier on a tie).
MemoryPlan place_naive(const std::vector<PlanBuffer>& bufs, const std::vector<size_t>& order) {
  MemoryPlan plan;
  plan.offsets.assign(bufs.size(), -1);
  std::vector<size_t> placed;  // by offset
  for (size_t i : order) {
    const int64_t size = aligned(bufs[i].bytes);
    int64_t best = -1, best_gap = INT64_MAX, prev_end = 0;
    for (size_t j : placed) {
      if (bufs[j].first > bufs[i].last || bufs[i].first > bufs[j].last) continue;
      const int64_t gap = plan.offsets[j] - prev_end;
      if (gap >= size && gap < best_gap) {
        best = prev_end;
        best_gap = gap;
      }
      prev_end = std::max(prev_end, plan.offsets[j] + aligned(bufs[j].bytes));
    }
    if (best < 0) best = prev_end;
    plan.offsets[i] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + size);
    placed.insert(std::upper_bound(placed.begin(), placed.end(), best,
                                   [&](int64_t off, size_t j) { return off < plan.offsets[j]; }),
                  i);
  }
  return plan;
}

MemoryPlan plan_naive(const std::vector<PlanBuffer>& bufs) {
  std::vector<size_t> order(bufs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto life = [&](size_t i) { return bufs[i].last - bufs[i].first; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (bufs[a].bytes != bufs[b].bytes) return bufs[a].bytes > bufs[b].bytes;
    return bufs[a].first < bufs[b].first;
  });
  MemoryPlan by_size = place_naive(bufs, order);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (life(a) != life(b)) return life(a) > life(b);
    if (bufs[a].bytes != bufs[b].bytes) return bufs[a].bytes > bufs[b].bytes;
    return bufs[a].first < bufs[b].first;
  });
  MemoryPlan best = place_naive(bufs, order);
  if (by_size.arena_bytes <= best.arena_bytes) best = std::move(by_size);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return static_cast<double>(life(a)) * static_cast<double>(bufs[a].bytes) >
           static_cast<double>(life(b)) * static_cast<double>(bufs[b].bytes);
  });
  MemoryPlan by_area = place_naive(bufs, order);
  return by_area.arena_bytes < best.arena_bytes ? by_area : best;
}

// Mostly short lives, some over two blocks, a few over the whole program (a train step's
// saved activations): the blocked planner places every buffer where the plain scan does.
TEST(MemoryPlan, BlockedConflictListsEqualThePlainScan) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 6; ++trial) {
    const int n = 500 + static_cast<int>(rng() % 1500);
    const int steps = 200 + static_cast<int>(rng() % 3000);
    std::vector<PlanBuffer> bufs;
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % steps);
      const int kind = static_cast<int>(rng() % 10);
      const int max_life = kind < 7 ? 4 : kind < 9 ? steps / 8 : steps;
      const int last = std::min(steps - 1, first + static_cast<int>(rng() % max_life));
      bufs.push_back({1 + static_cast<int64_t>(rng() % (1 << 20)), first, last});
    }
    const MemoryPlan got = plan_memory(bufs), want = plan_naive(bufs);
    EXPECT_EQ(got.arena_bytes, want.arena_bytes) << "trial " << trial;
    EXPECT_EQ(got.offsets, want.offsets) << "trial " << trial;
    ASSERT_TRUE(verify_plan(bufs, got).ok());
  }
}

TEST(MemoryPlan, RandomLifetimesNeverOverlap) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 60), steps = 1 + static_cast<int>(rng() % 40);
    std::vector<PlanBuffer> bufs;
    for (int i = 0; i < n; ++i) {
      int first = static_cast<int>(rng() % steps);
      int last = first + static_cast<int>(rng() % (steps - first));
      bufs.push_back({1 + static_cast<int64_t>(rng() % 5000), first, last});
    }
    MemoryPlan plan = plan_memory(bufs);
    ASSERT_TRUE(verify_plan(bufs, plan).ok()) << verify_plan(bufs, plan).message();
    for (int64_t off : plan.offsets) EXPECT_EQ(off % kAlignment, 0);
    EXPECT_GE(plan.arena_bytes, max_live_bytes(bufs));
    int64_t total = 0;
    for (const PlanBuffer& b : bufs) total += aligned(b.bytes);
    EXPECT_LE(plan.arena_bytes, total);
  }
}

TEST(MemoryPlan, SimpleChainsAreOptimal) {
  // A chain: buffer i is produced by instruction i and read by i + 1 (a layer stack), with
  // equal, growing, shrinking and alternating sizes.
  std::vector<std::vector<int64_t>> chains{
      {4096, 4096, 4096, 4096, 4096},
      {100, 200, 300, 400, 500, 600},
      {6000, 5000, 4000, 3000, 2000, 1000},
      {1000, 8000, 1000, 8000, 1000, 8000, 1000},
      {64, 64 * 1024, 64 * 3 * 1024, 64 * 1024, 64},
  };
  for (const auto& sizes : chains) {
    std::vector<PlanBuffer> bufs;
    for (size_t i = 0; i < sizes.size(); ++i)
      bufs.push_back({sizes[i], static_cast<int>(i), static_cast<int>(i) + 1});
    MemoryPlan plan = plan_memory(bufs);
    ASSERT_TRUE(verify_plan(bufs, plan).ok());
    EXPECT_EQ(plan.arena_bytes, max_live_bytes(bufs)) << "chain of " << sizes.size();
  }
}

TEST(MemoryPlan, RandomChainsStayNearTheLowerBound) {
  // Greedy by size is a heuristic: on random chains it may lose to the max-live bound, but
  // on these seeds it never loses by more than the largest buffer.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<PlanBuffer> bufs;
    const int n = 2 + static_cast<int>(rng() % 30);
    int64_t largest = 0;
    for (int i = 0; i < n; ++i) {
      bufs.push_back({1 + static_cast<int64_t>(rng() % 100000), i, i + 1});
      largest = std::max(largest, aligned(bufs.back().bytes));
    }
    MemoryPlan plan = plan_memory(bufs);
    ASSERT_TRUE(verify_plan(bufs, plan).ok());
    EXPECT_LE(plan.arena_bytes, max_live_bytes(bufs) + largest) << "trial " << trial;
  }
}

TEST(MemoryPlan, DisjointLifetimesShareBytes) {
  std::vector<PlanBuffer> bufs{{1000, 0, 1}, {1000, 2, 3}, {500, 4, 4}};
  MemoryPlan plan = plan_memory(bufs);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(plan.arena_bytes, aligned(1000));
}

TEST(MemoryPlan, BestFitFillsTheTightestGap) {
  // A long-lived 64 B buffer sits between two 1 KiB buffers that are live at different
  // times; a later 64 B buffer fits under either 1 KiB slot only where its life allows.
  std::vector<PlanBuffer> bufs{{1024, 0, 2}, {1024, 3, 5}, {64, 0, 5}, {64, 1, 1}};
  MemoryPlan plan = plan_memory(bufs);
  ASSERT_TRUE(verify_plan(bufs, plan).ok());
  EXPECT_EQ(plan.arena_bytes, 1024 + 64 + 64);
  EXPECT_EQ(max_live_bytes(bufs), 1024 + 64 + 64);
}

TEST(MemoryPlan, EmptyPlan) {
  MemoryPlan plan = plan_memory({});
  EXPECT_EQ(plan.arena_bytes, 0);
  EXPECT_TRUE(verify_plan({}, plan).ok());
}

TEST(MemoryPlan, VerifierCatchesOverlap) {
  std::vector<PlanBuffer> bufs{{128, 0, 2}, {128, 1, 3}};
  MemoryPlan bad{{0, 64}, 192};
  Status s = verify_plan(bufs, bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("overlap"), std::string::npos) << s.message();
  MemoryPlan outside{{0, 128}, 200};
  EXPECT_FALSE(verify_plan(bufs, outside).ok());
  MemoryPlan unaligned{{0, 130}, 300};
  EXPECT_FALSE(verify_plan(bufs, unaligned).ok());
  MemoryPlan fine{{0, 128}, 256};
  EXPECT_TRUE(verify_plan(bufs, fine).ok());
}

}  // namespace
}  // namespace eng
