// tests/common/alloc_counter.h: counts heap allocations (operator new and, without
// sanitizers, malloc/calloc/realloc/aligned_alloc) on every thread. Linking
// tests/common/alloc_counter.cpp into a test binary replaces the global allocator there.
#pragma once

#include <cstdint>
#include <functional>

namespace eng::testing {

// Number of allocations, on any thread, while fn runs.
int64_t allocations_during(const std::function<void()>& fn);

}  // namespace eng::testing
