// engine/store/sql_functions.cpp: percentile(x, p) and median(x) aggregates (SQLite 3.40 has none).
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace eng {
namespace {

// Aggregate state: the non-NULL inputs and the requested percentile (0..100).
struct PercentileState {
  std::vector<double> xs;  // collected values, sorted in final
  double p = -1;           // first p seen; -1 until then
};

PercentileState* state(sqlite3_context* ctx, bool create) {
  auto** slot = static_cast<PercentileState**>(
      sqlite3_aggregate_context(ctx, create ? sizeof(PercentileState*) : 0));
  if (slot == nullptr) return nullptr;
  if (*slot == nullptr && create) *slot = new PercentileState();
  return *slot;
}

void add_value(sqlite3_context* ctx, sqlite3_value* x, double p) {
  PercentileState* s = state(ctx, true);
  if (s == nullptr) return sqlite3_result_error_nomem(ctx);
  if (s->p < 0) {
    s->p = p;
  } else if (s->p != p) {
    return sqlite3_result_error(ctx, "percentile: P must be the same for every row of a group", -1);
  }
  if (sqlite3_value_type(x) == SQLITE_NULL) return;
  s->xs.push_back(sqlite3_value_double(x));
}

void percentile_step(sqlite3_context* ctx, int argc, sqlite3_value** argv) {
  if (sqlite3_value_type(argv[1]) == SQLITE_NULL)
    return sqlite3_result_error(ctx, "percentile: P must not be NULL", -1);
  double p = sqlite3_value_double(argv[1]);
  if (!(p >= 0 && p <= 100)) {
    std::string msg = "percentile: P must be between 0 and 100, got " +
                      std::string(reinterpret_cast<const char*>(sqlite3_value_text(argv[1])));
    return sqlite3_result_error(ctx, msg.c_str(), -1);
  }
  add_value(ctx, argv[0], p);
}

void median_step(sqlite3_context* ctx, int argc, sqlite3_value** argv) {
  add_value(ctx, argv[0], 50.0);
}

// Linear interpolation between closest ranks (numpy's default, SQLite 3.51's percentile()).
void percentile_final(sqlite3_context* ctx) {
  PercentileState* s = state(ctx, false);
  if (s == nullptr || s->xs.empty()) {
    sqlite3_result_null(ctx);
  } else {
    std::sort(s->xs.begin(), s->xs.end());
    double r = s->p / 100.0 * static_cast<double>(s->xs.size() - 1);
    size_t lo = static_cast<size_t>(std::floor(r));
    size_t hi = std::min(lo + 1, s->xs.size() - 1);
    double frac = r - static_cast<double>(lo);
    sqlite3_result_double(ctx, s->xs[lo] + (s->xs[hi] - s->xs[lo]) * frac);
  }
  delete s;
}

}  // namespace

int register_sql_functions(sqlite3* db) {
  int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
  int rc = sqlite3_create_function_v2(db, "percentile", 2, flags, nullptr, nullptr,
                                      percentile_step, percentile_final, nullptr);
  if (rc != SQLITE_OK) return rc;
  return sqlite3_create_function_v2(db, "median", 1, flags, nullptr, nullptr, median_step,
                                    percentile_final, nullptr);
}

}  // namespace eng
