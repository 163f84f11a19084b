// engine/mesh/topology.h: named hardware as MaxText's compile_topology names it, with the
// per-chip constants a step-time prediction needs.
//
//   Result<Topology> t = topology_from_name("v5p-256", /*num_slices=*/2);
//   t->devices_per_slice      -> 128   (v5p-N counts TensorCores; one megacore device per chip)
//   t->num_devices()          -> 256
//   t->torus                  -> {4, 4, 8} chips, t->wrap -> {true, true, true}
//   t->peak_flops_per_device() -> 4.59e14
//
// Names (MaxText's utils/accelerator_to_spec_map.py; GPU systems from MaxText's
// benchmarks): v4-N, v5p-N (N TensorCores, N/2 chips, 3D torus), v5e-N, v6e-N (N chips, 2D),
// tpu7x-N (N TensorCores, N/2 chips, 2 devices per chip, 3D), a3 (8 x H100 per host),
// a3ultra (8 x H200), a4 (8 x B200). On GPUs a slice is one host (NVLink inside, DCN
// between hosts), so num_slices counts hosts, as compile_topology_num_slices does in MaxText.
// Every constant's public source is in docs/prediction.md. A chip constant that is unknown
// is an error from topology_from_name, never a default.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/status.h"

namespace eng {

enum class Platform : uint8_t { kTpu, kGpu };

// How the chips of one slice are wired: a TPU torus (ICI links to neighbours along each
// dim, wraparound per dim) or a GPU host's NVLink switch (every pair one hop apart).
enum class Interconnect : uint8_t { kTorus, kSwitch };

// Per chip, bf16 dense. A value of 0 means "not known" and fails validate_chip.
struct ChipSpec {
  std::string name;                      // "v5p", "H100"
  Platform platform = Platform::kTpu;
  Interconnect interconnect = Interconnect::kTorus;
  int devices_per_chip = 0;              // JAX devices per chip (tpu7x: 2; megacore: 1)
  double peak_bf16_flops = 0;            // FLOP/s per chip
  double maxtext_peak_tflops = 0;        // per device, MaxText's MFU denominator
  int64_t hbm_bytes = 0;                 // per chip
  double hbm_bytes_per_s = 0;            // per chip
  int ici_links = 0;                     // per chip (torus); GPUs: 1 (the switch port)
  double ici_bytes_per_s_per_link = 0;   // one way, per link (GPUs: NVLink per GPU one way)
  double dcn_bytes_per_s = 0;            // per chip, one way, between slices (hosts)
  int matrix_unit_dim = 0;               // MXU / tensor-core tile edge the shapes pad to
  double host_bytes_per_s = 0;           // per chip, one way: the host link (PCIe); 0 unknown
  // The fraction of peak_bf16_flops the matrix unit sustains on a large aligned bf16 matmul in
  // a public measurement (device time; docs/prediction.md names it). 0: no public measurement
  // found; the prediction then runs the matrix unit at peak (the roofline) and says so.
  double mxu_sustained_fraction = 0;
};

// Names the first constant of `chip` that is 0 (unknown): "topology: chip v5p has no
// hbm_bytes_per_s". ok when all are known.
Status validate_chip(const ChipSpec& chip);

struct Topology {
  std::string name;                // "v5p-256" as given
  std::string family;              // "v5p"
  ChipSpec chip;
  std::vector<int64_t> torus;      // chips per physical dim of one slice ({4,4,8}; a3: {8})
  std::vector<bool> wrap;          // per dim: wraparound links (a ring), else a line
  int64_t chips_per_slice = 0;
  int64_t devices_per_slice = 0;
  int64_t num_slices = 1;          // compile_topology_num_slices (GPUs: hosts)

  int64_t num_devices() const { return devices_per_slice * num_slices; }
  int64_t num_chips() const { return chips_per_slice * num_slices; }
  // Per JAX device (a chip's constants divided by devices_per_chip).
  double peak_flops_per_device() const;
  int64_t hbm_bytes_per_device() const;
  double hbm_bytes_per_s_per_device() const;
  double dcn_bytes_per_s_per_device() const;
  double host_bytes_per_s_per_device() const;  // 0: unknown for this chip
  // The matrix unit's rate per device: peak x chip.mxu_sustained_fraction, or the peak when
  // no sustained fraction is known (mxu_sustained_fraction 0).
  double mxu_flops_per_device() const;
  // "v5p-256: 128 chips (4x4x8, wraparound x,y,z), 128 devices per slice x 2 slices".
  std::string to_string() const;
};

// MaxText's compile_topology + compile_topology_num_slices. Errors: an unknown family names
// the known ones; a known family with a size not in the table lists the sizes; num_slices < 1.
Result<Topology> topology_from_name(std::string_view compile_topology, int64_t num_slices = 1);

// "v4-N, v5e-N, v5p-N, v6e-N, tpu7x-N, a3, a3ultra, a4": for messages and help.
std::string known_topology_families();

}  // namespace eng
