// tests/runtime/alloc_test.cpp: a steady-state training step allocates nothing on the heap.
// Global operator new (and, without sanitizers, malloc) are replaced by counting versions.
#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "engine/compile/executable.h"
#include "tests/compile/test_programs.h"
#include "tests/runtime/runtime_harness.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
inline void count() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
}
}  // namespace

void* operator new(std::size_t n) {
  count();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  count();
  std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }  // NOLINT: pairs with the malloc above
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

#if !defined(__SANITIZE_ADDRESS__) && defined(__GLIBC__)
// C allocations too (kernels or OpenBLAS calling malloc directly), through glibc's internals.
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t m) {
  count();
  return __libc_calloc(n, m);
}
void* realloc(void* p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t a, size_t n) {
  count();
  return __libc_memalign(a, n);
}
}
#endif

namespace eng {
namespace {

int64_t allocations_during(const std::function<void()>& fn) {
  g_allocations.store(0);
  g_counting.store(true);
  fn();
  g_counting.store(false);
  return g_allocations.load();
}

void expect_second_step_allocates_nothing(const Mesh& mesh) {
  testing::TinyDims d;
  d.L = 2;
  d.T = 16;
  d.B = 4;  // divisible by the 4-device data axis (the batch is sharded over it)
  Program p = testing::build_train_step(d);
  auto exe = compile(p, mesh, CompileOptions{});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  Runtime rt(mesh);
  std::vector<HostTensor> host = testing::random_args(p, 1, d.V);
  std::vector<Array> arrays;
  for (size_t k = 0; k < host.size(); ++k)
    arrays.push_back(testing::put_host(rt, host[k], (*exe)->argument_sharding(static_cast<int>(k)), "a"));
  std::vector<Array*> ptrs;
  for (Array& a : arrays) ptrs.push_back(&a);
  std::vector<Array> outs;
  // A whole trainer step: refill the batch, execute, fetch the metrics.
  std::vector<int32_t> tokens(d.B * d.T, 3);
  float metrics[4];
  Status s1, s2, s3;
  auto step = [&] {
    for (size_t k = 0; k < arrays.size(); ++k)
      if (p.args()[k].role == ArgRole::kBatch) s1 = rt.write(arrays[k], tokens.data());
    s2 = rt.execute(**exe, ptrs, outs);
    for (int m = 0; m < 4; ++m) s3 = rt.fetch(outs[m], &metrics[m]);
  };
  int64_t first = allocations_during(step);
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok());
  int64_t second = allocations_during(step);
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok());
  EXPECT_TRUE(std::isfinite(metrics[0]));
  EXPECT_GT(first, 0);  // the counter works: the first step prepares the arena and outputs
  EXPECT_EQ(second, 0) << mesh.to_string();
}

TEST(Alloc, SteadyStateStepAllocatesNothing) { expect_second_step_allocates_nothing(Mesh()); }

TEST(Alloc, SteadyStateStepOnFourDevicesAllocatesNothing) {
  expect_second_step_allocates_nothing(*Mesh::create({"data"}, {4}));
}

}  // namespace
}  // namespace eng
