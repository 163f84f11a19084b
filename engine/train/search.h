// engine/train/search.h: a search over configurations on named hardware (issue 28 part 3):
// the meshes the topology can lay out over the axes asked for, times the values asked for of
// other keys (per_device_batch_size, remat_policy, ...), each planned shape-only as sl.plan
// plans it (plan.h), ranked among those that fit.
//
//   SearchSpace space;
//   space.mesh_axes = {"fsdp", "tensor", "fsdp_transpose"};
//   space.keys = {{"per_device_batch_size", {"1", "2", "4"}},
//                 {"remat_policy", {"full", "minimal"}}};
//   ENG_ASSIGN_OR_RETURN(SearchResult r, search_configs(config, space, {.store = store}));
//   fmt::print("{}", r.to_table(10));
//
// Meshes: the varied axes take every split of a slice's devices (MaxText's ici_*_parallelism;
// the dcn_* keys stay the config's); an axis the search does not vary keeps the config's size,
// and one at -1 fills what the varied axes leave (MaxText's -1). A split the torus cannot lay
// out as JAX's create_device_mesh does (physical_mesh.h: an axis of 4 on v6e-256's 16x16 needs
// allow_split_physical_axes) is counted, not planned. Every candidate is then planned on the
// thread pool; one whose plan fails (a batch that does not divide, a policy the model lacks)
// keeps the error. Ranking: tokens/s per device (default: fair across batch sizes), or the
// predicted step time; ties keep enumeration order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/status.h"
#include "engine/compile/predict.h"
#include "engine/store/metrics_store.h"
#include "engine/train/config.h"

namespace eng {

struct SearchSpace {
  std::vector<std::string> mesh_axes;  // MaxText mesh axes whose ici split varies; empty: fixed
  // Other config keys and their values as command-line text ("2", "full"), typed by the key.
  std::vector<std::pair<std::string, std::vector<std::string>>> keys;
};

enum class SearchRank { kTokensPerSecond, kStepTime };

struct SearchCandidate;

struct SearchOptions {
  SearchRank rank = SearchRank::kTokensPerSecond;
  MetricsStore* store = nullptr;  // not owned; null: record nothing; else one run for the search
  std::vector<std::string> argv{};
  std::string script{};
  // Called after each candidate (on a pool thread, one call at a time): done of total.
  std::function<void(int64_t done, int64_t total, const SearchCandidate&)> progress{};
  std::function<bool()> stop_requested{};  // polled before each candidate (Ctrl-C)
  // Plan the batch sizes of one mesh and values smallest first and skip the larger ones once
  // one does not fit: memory grows with the batch, so they cannot fit either (recorded as
  // skipped). false plans every candidate.
  bool prune_batch = true;
  // Trace each combination of values once and reuse it on every mesh (TracedTrainStep) when
  // the meshes differ only in data, fsdp, fsdp_transpose and tensor; false traces per plan.
  bool reuse_traces = true;
};

struct SearchCandidate {
  int64_t index = 0;                                   // enumeration order
  std::vector<std::pair<std::string, int64_t>> mesh;   // the varied axes' ici sizes (with a fill)
  std::vector<std::pair<std::string, std::string>> values;  // the varied keys' values
  Status status = ok_status();  // not ok: not planned, or the plan failed (the message says)
  bool planned = false;
  bool pruned = false;         // skipped: a smaller per_device_batch_size did not fit
  Prediction predicted;        // when planned
  int64_t global_batch = 0;    // sequences per step (when planned)
  int64_t rank = 0;            // 1 = best among those that fit; 0: not ranked
  // "fsdp=16 tensor=16 per_device_batch_size=2 remat_policy=full"
  std::string label() const;
  // What limits it: "compute (matmul)", "collectives (fsdp): 0.8 s exposed", "memory: 12.3 GiB
  // over", or the error.
  std::string limit() const;
};

struct SearchResult {
  std::string topology;                   // "v6e-256 x 1 slice"
  int64_t num_devices = 0;                // of the topology (all slices)
  std::vector<SearchCandidate> candidates;  // every one, in enumeration order
  std::vector<size_t> ranking;            // indices into candidates of those that fit, best first
  int64_t mesh_splits = 0;                // splits of the varied axes tried
  int64_t meshes = 0;                     // of them, laid out on the torus
  std::string mesh_skip_example;          // why one split was not laid out ("" when none)
  int64_t planned = 0, fitting = 0, failed = 0, pruned = 0;
  bool interrupted = false;
  double seconds = 0;
  std::string run_id;                     // the search's run ("" without a store)
  std::string store_error;                // the first store write that failed ("" when none; the
                                          // search goes on, its store rows are incomplete)
  SearchRank rank = SearchRank::kTokensPerSecond;
  // The best `top` with what limits each, and a summary line.
  std::string to_table(int64_t top) const;
  // The planned candidates no other planned one beats on both peak memory and the ranking's
  // measure, by peak ascending (indices into candidates; fitting or not).
  std::vector<size_t> pareto_front() const;
  // Peak memory vs the ranking's measure as an SVG scatter plot: every planned candidate (filled
  // when it fits), the front as a line, the device's HBM as a dashed limit (search_svg.cpp).
  std::string pareto_svg() const;
};

// The candidates without planning them (search_configs' first step; for tests and --dry-run).
// Errors: an unknown mesh axis or key (with a did-you-mean), a value the key cannot take, a
// varied axis also set in `keys`, no compile_topology, a slice whose devices the fixed axes do
// not divide.
Result<SearchResult> enumerate_candidates(const Config& base, const SearchSpace& space);

Result<SearchResult> search_configs(const Config& base, const SearchSpace& space,
                                    const SearchOptions& options = {});

}  // namespace eng
