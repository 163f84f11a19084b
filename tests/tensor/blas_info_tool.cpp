// tests/tensor/blas_info_tool.cpp: prints blas_info() after one sgemm, for blas_test.cpp.
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "engine/tensor/blas.h"
#include "engine/tensor/kernels.h"

int main() {
  if (eng::Status s = eng::check_blas_environment(); !s.ok()) {
    fmt::print(stderr, "blas_info_tool: {}\n", s.message());
    return 2;
  }
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {};
  eng::kern::matmul(false, false, 2, 2, 2, 1.f, a, 2, b, 2, 0.f, c, 2);  // (2, 2) = (2, 2) x I
  const eng::BlasInfo& info = eng::blas_info();
  const char* after = std::getenv("OPENBLAS_CORETYPE");
  fmt::print("coretype_after_load={}\n", after ? after : "(unset)");
  fmt::print("chosen={}\ncore={}\nthreads={}\nresult_ok={}\nenv={}\nconfig={}\n", info.chosen_core, info.core, info.num_threads,
             c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4, info.env_note, info.config);
  return 0;
}
