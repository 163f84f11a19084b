// engine/mesh/topology.cpp: the chip table and MaxText's compile_topology names (sources of
// every constant: docs/prediction.md, "Chips").
#include "engine/mesh/topology.h"

#include <charconv>

#include <fmt/format.h>

namespace eng {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// Per chip, bf16 dense; one-way link bandwidths. docs/prediction.md names each source. The
// last constant is the host link (PCIe) one way, for host offload: the scaling book's
// "typically around 1.5e10 bytes/s per chip" and "Trillium (v6e) has 32 GB/s" (tpus.md);
// 0 where no public figure was found (tpu7x, the GPUs): offloading there is an error.
ChipSpec v4_chip() {
  return {"v4", Platform::kTpu, Interconnect::kTorus, 1, 2.75e14, 275, 32 * kGiB, 1.2e12, 6,
          4.5e10, 6.25e9, 128, 1.5e10};
}
// The last constant of v5e, v6e and tpu7x is the matrix unit's sustained fraction of peak on a
// large bf16 matmul (8192^3): v5e 181.8 of 197 TFLOP/s (XLA's jnp.matmul in JAX's Pallas TPU
// matmul guide), v6e 727.7 of 918 and tpu7x 1081.3 of 1153.5 per device (the same
// profiler-timed JAX benchmark, yangwhale/gpu-tpu-pedia). No public figure was found for the
// other chips: 0, their matrix units run at peak.
ChipSpec v5e_chip() {
  return {"v5e", Platform::kTpu, Interconnect::kTorus, 1, 1.97e14, 197, 16 * kGiB, 8.1e11, 4,
          4.5e10, 3.125e9, 128, 1.5e10, 181.823e12 / 1.97e14};
}
ChipSpec v5p_chip() {
  return {"v5p", Platform::kTpu, Interconnect::kTorus, 1, 4.59e14, 459, 95 * kGiB, 2.765e12, 6,
          9e10, 6.25e9, 128, 1.5e10};
}
ChipSpec v6e_chip() {
  return {"v6e", Platform::kTpu, Interconnect::kTorus, 1, 9.18e14, 918, 32 * kGiB, 1.638e12, 4,
          9e10, 12.5e9, 256, 3.2e10, 727.699e12 / 9.18e14};
}
// Ironwood: 1.2e12 B/s ICI per chip (both ways, all links) over a 3D torus's 6 links. Its
// sustained rate is per device (one of the chip's two), as JAX exposes and times it.
ChipSpec tpu7x_chip() {
  return {"tpu7x", Platform::kTpu, Interconnect::kTorus, 2, 2.307e15, 1153.5, 192 * kGiB, 7.38e12,
          6, 1e11, 12.5e9, 256, 0, 1081.296e12 / 1.1535e15};
}
// GPUs: NVLink through the host's switch (one way, per GPU); a 400 Gb/s NIC per GPU.
ChipSpec h100_chip() {
  return {"H100", Platform::kGpu, Interconnect::kSwitch, 1, 9.89e14, 989, int64_t{80'000'000'000},
          3.35e12, 1, 4.5e11, 5e10, 128, 0};
}
ChipSpec h200_chip() {
  return {"H200", Platform::kGpu, Interconnect::kSwitch, 1, 9.89e14, 989,
          int64_t{141'000'000'000}, 4.8e12, 1, 4.5e11, 5e10, 128, 0};
}
ChipSpec b200_chip() {
  return {"B200", Platform::kGpu, Interconnect::kSwitch, 1, 2.25e15, 2250,
          int64_t{192'000'000'000}, 8.0e12, 1, 9e11, 5e10, 128, 0};
}

struct Shape3 {
  int64_t n;                // the N of the name
  std::vector<int64_t> dims;
};

// v4-N / v5p-N (N TensorCores = 2 x chips): MaxText's accelerator_to_spec_map shapes.
const std::vector<Shape3>& cube_shapes() {
  static const std::vector<Shape3> k = {
      {8, {2, 2, 1}},      {16, {2, 2, 2}},     {32, {2, 2, 4}},      {64, {2, 4, 4}},
      {128, {4, 4, 4}},    {256, {4, 4, 8}},    {384, {4, 4, 12}},    {512, {4, 8, 8}},
      {768, {4, 8, 12}},   {1024, {8, 8, 8}},   {1536, {8, 8, 12}},   {2048, {8, 8, 16}},
      {3072, {8, 12, 16}}, {4096, {8, 16, 16}}, {6144, {12, 16, 16}}, {8192, {16, 16, 16}},
      {12288, {16, 16, 24}}};
  return k;
}
// v4 has the cube shapes up to 4096 except 768 and 3072.
const std::vector<Shape3>& v4_shapes() {
  static const std::vector<Shape3> k = [] {
    std::vector<Shape3> v;
    for (const Shape3& s : cube_shapes())
      if (s.n <= 4096 && s.n != 768 && s.n != 3072) v.push_back(s);
    return v;
  }();
  return k;
}
// v5e-N / v6e-N (N chips).
const std::vector<Shape3>& plane_shapes() {
  static const std::vector<Shape3> k = {{1, {1, 1}},  {4, {2, 2}},   {8, {2, 4}},
                                        {16, {4, 4}}, {32, {4, 8}},  {64, {8, 8}},
                                        {128, {8, 16}}, {256, {16, 16}}};
  return k;
}

std::string sizes_list(const std::vector<Shape3>& shapes, std::string_view family) {
  std::vector<std::string> parts;
  for (const Shape3& s : shapes) parts.push_back(fmt::format("{}-{}", family, s.n));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string dims_string(const std::vector<int64_t>& dims) {
  return fmt::format("{}", fmt::join(dims, "x"));
}

}  // namespace

std::string known_topology_families() {
  return "v4-N, v5e-N, v5p-N, v6e-N, tpu7x-N, a3 (8 x H100 per host), a3ultra (8 x H200), a4 "
         "(8 x B200)";
}

Status validate_chip(const ChipSpec& c) {
  auto missing = [&](std::string_view what) {
    return invalid_argument("topology: chip {} has no {} (a constant the prediction needs)",
                            c.name.empty() ? "<unnamed>" : c.name, what);
  };
  if (c.devices_per_chip <= 0) return missing("devices_per_chip");
  if (c.peak_bf16_flops <= 0) return missing("peak_bf16_flops");
  if (c.maxtext_peak_tflops <= 0) return missing("maxtext_peak_tflops");
  if (c.hbm_bytes <= 0) return missing("hbm_bytes");
  if (c.hbm_bytes_per_s <= 0) return missing("hbm_bytes_per_s");
  if (c.ici_links <= 0) return missing("ici_links");
  if (c.ici_bytes_per_s_per_link <= 0) return missing("ici_bytes_per_s_per_link");
  if (c.dcn_bytes_per_s <= 0) return missing("dcn_bytes_per_s");
  if (c.matrix_unit_dim <= 0) return missing("matrix_unit_dim");
  return ok_status();  // host_bytes_per_s: checked by predict_step when a value is offloaded
}

double Topology::peak_flops_per_device() const {
  return chip.peak_bf16_flops / chip.devices_per_chip;
}
int64_t Topology::hbm_bytes_per_device() const { return chip.hbm_bytes / chip.devices_per_chip; }
double Topology::hbm_bytes_per_s_per_device() const {
  return chip.hbm_bytes_per_s / chip.devices_per_chip;
}
double Topology::mxu_flops_per_device() const {
  const double peak = peak_flops_per_device();
  return chip.mxu_sustained_fraction > 0 ? peak * chip.mxu_sustained_fraction : peak;
}

double Topology::host_bytes_per_s_per_device() const {
  return chip.host_bytes_per_s / chip.devices_per_chip;
}
double Topology::dcn_bytes_per_s_per_device() const {
  return chip.dcn_bytes_per_s / chip.devices_per_chip;
}

std::string Topology::to_string() const {
  std::vector<std::string> wrapped;
  const char* dim_names[] = {"x", "y", "z"};
  for (size_t d = 0; d < wrap.size() && d < 3; ++d)
    if (wrap[d]) wrapped.push_back(dim_names[d]);
  std::string wrap_text =
      chip.interconnect == Interconnect::kSwitch
          ? "NVLink switch"
          : (wrapped.empty() ? "no wraparound"
                             : fmt::format("wraparound {}", fmt::join(wrapped, ",")));
  return fmt::format("{}: {} {} chips per slice ({}, {}), {} devices per slice x {} slice{}", name,
                     chips_per_slice, chip.name, dims_string(torus), wrap_text,
                     devices_per_slice, num_slices, num_slices == 1 ? "" : "s");
}

Result<Topology> topology_from_name(std::string_view name, int64_t num_slices) {
  if (num_slices < 1)
    return invalid_argument("topology: compile_topology_num_slices must be >= 1, got {}",
                            num_slices);
  Topology t;
  t.name = std::string(name);
  t.num_slices = num_slices;
  auto unknown = [&] {
    return invalid_argument("topology: unknown compile_topology '{}'; known families: {}", name,
                            known_topology_families());
  };
  if (name == "a3" || name == "a3ultra" || name == "a4") {
    t.family = std::string(name);
    t.chip = name == "a3" ? h100_chip() : name == "a3ultra" ? h200_chip() : b200_chip();
    t.torus = {8};
    t.wrap = {false};  // a switch: every pair one hop apart (the wrap flag is unused)
    t.chips_per_slice = 8;
  } else {
    size_t dash = name.rfind('-');
    if (dash == std::string_view::npos || dash == 0) return unknown();
    std::string_view family = name.substr(0, dash);
    std::string_view count = name.substr(dash + 1);
    int64_t n = 0;
    auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), n);
    bool number_ok = ec == std::errc() && end == count.data() + count.size() && n > 0;
    t.family = std::string(family);
    const std::vector<Shape3>* shapes = nullptr;
    bool counts_cores = true;
    if (family == "v4") {
      t.chip = v4_chip(), shapes = &v4_shapes();
    } else if (family == "v5p") {
      t.chip = v5p_chip(), shapes = &cube_shapes();
    } else if (family == "tpu7x") {
      t.chip = tpu7x_chip(), shapes = &cube_shapes();
    } else if (family == "v5e") {
      t.chip = v5e_chip(), shapes = &plane_shapes(), counts_cores = false;
    } else if (family == "v6e") {
      t.chip = v6e_chip(), shapes = &plane_shapes(), counts_cores = false;
    } else {
      return unknown();
    }
    const Shape3* found = nullptr;
    if (number_ok)
      for (const Shape3& s : *shapes)
        if (s.n == n) found = &s;
    if (found == nullptr)
      return invalid_argument("topology: no {} slice named '{}'; known sizes: {}", family, name,
                              sizes_list(*shapes, family));
    t.torus = found->dims;
    int64_t chips = 1;
    for (int64_t d : t.torus) chips *= d;
    t.chips_per_slice = chips;
    ENG_CHECK(!counts_cores || chips * 2 == n, "topology table: {} is not 2 x {} chips", n, chips);
    ENG_CHECK(counts_cores || chips == n, "topology table: {} is not {} chips", n, chips);
    // Wraparound (MaxText's wrap column): a 3D slice of a full 4x4x4 cube or more wraps every
    // dim; a 2D slice wraps a dim of 16 chips (v6e-128 wraps its 16, v6e-256 both).
    t.wrap.assign(t.torus.size(), false);
    if (t.torus.size() == 3) {
      if (chips >= 64) t.wrap.assign(3, true);
    } else {
      for (size_t d = 0; d < t.torus.size(); ++d) t.wrap[d] = t.torus[d] == 16;
    }
  }
  t.devices_per_slice = t.chips_per_slice * t.chip.devices_per_chip;
  if (Status s = validate_chip(t.chip); !s.ok()) return s;
  return t;
}

}  // namespace eng
