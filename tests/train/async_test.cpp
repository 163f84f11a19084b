// tests/train/async_test.cpp: asynchronous steps: step() returns before the devices finish,
// run-ahead is bounded, async metrics equal the synchronous path bitwise, errors surface.
#include <vector>

#include "engine/base/clock.h"
#include "engine/runtime/dispatch.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

using testing::tiny_config;

TEST(DispatcherTest, RunsInOrderBoundsPendingAndKeepsTheFirstError) {
  std::vector<int64_t> seen;
  Dispatcher d(
      [&](int64_t ticket, int64_t arg) {
        seen.push_back(arg);
        return arg == 3 ? invalid_argument("item {} failed", ticket) : ok_status();
      },
      2);
  for (int64_t i = 0; i < 3; ++i) {
    Result<int64_t> t = d.submit(i);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(*t, i);
    EXPECT_LE(d.submitted() - d.completed(), 2);
  }
  EXPECT_TRUE(d.wait_all().ok());
  ASSERT_TRUE(d.submit(3).ok());
  ASSERT_TRUE(d.submit(4).ok() || true);  // may already see the error
  Status s = d.wait(3);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "item 3 failed");
  EXPECT_TRUE(d.wait(2).ok());            // earlier tickets stay fine
  EXPECT_FALSE(d.submit(5).ok());         // sticky
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3}));  // 4 was skipped, not run
}

Config delayed_config(const std::string& steps, double seconds, int64_t inflight) {
  Config c = tiny_config(20);
  EXPECT_TRUE(c.set("debug_device_delay_steps", steps).ok());
  EXPECT_TRUE(c.set("debug_device_delay_seconds", seconds).ok());
  EXPECT_TRUE(c.set("max_inflight_steps", inflight).ok());
  return c;
}

TEST(AsyncTest, StepReturnsBeforeTheDevicesFinish) {
  auto t = Trainer::create(delayed_config("1", 0.3, 2), Mesh()).value();
  ASSERT_TRUE(t->compile().ok());
  ASSERT_TRUE(t->step_and_wait().ok());  // step 0, no delay
  const double t0 = now_seconds();
  StepHandle h = t->step().value();      // step 1 sleeps 0.3 s on the device
  const double dispatch = now_seconds() - t0;
  EXPECT_LT(dispatch, 0.15);
  EXPECT_FALSE(h.ready());
  StepMetrics m = h.wait().value();
  EXPECT_GE(now_seconds() - t0, 0.29);
  EXPECT_TRUE(h.ready());
  EXPECT_EQ(m.step, 1);
  EXPECT_GE(m.device_time_s, 0.29);
  EXPECT_EQ(m.step_time_s, m.device_time_s);  // a bare handle reports device time
  EXPECT_FALSE(m.synced);
}

TEST(AsyncTest, RunAheadIsBounded) {
  auto t = Trainer::create(delayed_config("0,1,2,3", 0.2, 2), Mesh()).value();
  ASSERT_TRUE(t->compile().ok());
  std::vector<StepHandle> h;
  std::vector<double> dispatch;
  for (int i = 0; i < 4; ++i) {
    const double t0 = now_seconds();
    h.push_back(t->step().value());
    dispatch.push_back(now_seconds() - t0);
    int pending = 0;
    for (const StepHandle& x : h) pending += x.ready() ? 0 : 1;
    EXPECT_LE(pending, 2) << "after dispatching step " << i;
  }
  EXPECT_LT(dispatch[0], 0.1);
  EXPECT_LT(dispatch[1], 0.1);
  EXPECT_GE(dispatch[2], 0.1);  // waited for step 0 to free its staging slot
  EXPECT_TRUE(h[0].ready());
  for (StepHandle& x : h) EXPECT_TRUE(x.wait().ok());
}

TEST(AsyncTest, MetricsEqualTheSynchronousPathBitwise) {
  auto run = [](int64_t inflight, bool use_train) {
    Config c = tiny_config(8);
    EXPECT_TRUE(c.set("max_inflight_steps", inflight).ok());
    auto t = Trainer::create(c, Mesh()).value();
    std::vector<std::vector<double>> out;
    auto keep = [&](const StepMetrics& m) {
      out.push_back({m.loss, m.total_weights, m.raw_grad_norm, m.grad_norm, m.param_norm,
                     m.learning_rate});
      return true;
    };
    if (use_train) {
      EXPECT_TRUE(t->train(8, keep).ok());
    } else {
      for (int i = 0; i < 8; ++i) keep(t->step_and_wait().value());
    }
    std::vector<float> w = t->fetch_argument("params/decoder/layers_1/mlp/wo/kernel").value();
    out.push_back(std::vector<double>(w.begin(), w.end()));
    return out;
  };
  const auto sync = run(0, false);
  ASSERT_EQ(sync.size(), 9u);
  EXPECT_EQ(run(2, true), sync);
  EXPECT_EQ(run(3, false), sync);
  EXPECT_EQ(run(0, true), sync);
}

TEST(AsyncTest, DeviceErrorsSurfaceOnTheNextSync) {
  int64_t state_bytes = 0;
  {
    auto t = Trainer::create(tiny_config(4), Mesh()).value();
    state_bytes = t->runtime()->device(0).bytes_in_use();
  }
  // Room for the state but not the step's arena: the first execute fails on the dispatcher.
  auto t = Trainer::create(tiny_config(4), Mesh(), {.device_capacity_bytes = state_bytes + 64}).value();
  Result<StepHandle> h = t->step();
  ASSERT_TRUE(h.ok()) << h.status().message();  // dispatch itself succeeds
  Result<StepMetrics> m = h->wait();
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("step 0 failed on the devices"), std::string::npos)
      << m.status().message();
  Result<StepHandle> next = t->step();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().message(), m.status().message());
}

}  // namespace
}  // namespace eng
