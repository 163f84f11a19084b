// engine/compile/predict.h: a predicted step time for a compiled (shape-only) per-device
// program on named hardware: a roofline per instruction and two streams (compute, ICI/DCN)
// that overlap as XLA's async collectives let them (docs/prediction.md).
//
//   ENG_ASSIGN_OR_RETURN(PhysicalMesh pm, lay_out_mesh(topology, names, ici, dcn));
//   ENG_ASSIGN_OR_RETURN(Prediction p, predict_step(*exe, pm));
//   fmt::print("{}\n", p.to_table());
//
// Per instruction (exe.program(), local shapes; remat's recomputations are in it):
//   matmul      max(2MNK / (peak x padding efficiency), bytes / HBM bandwidth); the padding
//               efficiency is M N K / (each rounded up to the matrix unit's edge)
//   attention   its flops (causal) x the tiles' share (causal_block_factor) (x 5/4 for the
//               backward, which recomputes QK^T) at peak x the head_dim's padding efficiency
//               (QK^T contracts over head_dim, PV outputs it), or its bytes at HBM bandwidth
//   everything else  bytes read + written at HBM bandwidth (layout ops free)
//   collectives collective_seconds (engine/mesh/physical_mesh.h) on their axes' links
//   move_to_host / move_to_device  bytes / the chip's host link (PCIe, one way) per device,
//               on a stream per direction; a move back to the device starts no earlier than
//               the backward pass (the first move back in program order), then as soon as
//               the link is free (prefetch depth, and the device memory it costs, not modelled)
// Schedule: one compute stream in program order and one collective stream; an instruction
// starts when its inputs are ready and its stream is free. Collectives therefore overlap any
// compute that does not need their result (a scanned layer's FSDP all-gather runs while an
// earlier layer computes; a reduce-scatter of gradients while the next layer's backward
// runs), and a collective whose result is needed at once is exposed. The step time is when
// both streams are done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/compile/executable.h"
#include "engine/mesh/physical_mesh.h"

namespace eng {

struct PredictedCompute {
  std::string op_class;  // "matmul", "attention", "memory-bound", "optimizer"
  double seconds = 0;
  double flops = 0;
  double bytes = 0;
  int64_t count = 0;
};

struct PredictedCollectives {
  std::string axes;              // collective_axes_key: "fsdp", "data,fsdp"
  double seconds = 0;            // on the collective stream
  double exposed_seconds = 0;    // time the compute stream waited for them
  double bytes = 0;              // received per device (collective_bytes_received)
  int64_t count = 0;
};

// Host offload (remat.h's offloaded names): the kMoveToHost / kMoveToDevice copies over the
// host link, one stream per direction (PCIe is full duplex).
struct PredictedHostTransfers {
  double seconds = 0;          // on the two host-link streams
  double exposed_seconds = 0;  // time the compute stream waited for a value moved back
  double bytes = 0;            // moved per device, both directions
  int64_t count = 0;
};

struct Prediction {
  std::string topology;               // "v6e-256"
  int64_t num_slices = 1;
  double step_time_s = 0;
  double compute_s = 0;               // sum of the compute stream's instruction times
  double collective_s = 0;            // sum of the collective stream's
  double exposed_collective_s = 0;    // compute-stream waits for collectives
  std::vector<PredictedCompute> compute;          // by op class, largest first
  std::vector<PredictedCollectives> collectives;  // by mesh axes, largest first
  PredictedHostTransfers host_transfers;           // host offload (count 0: none)
  std::string bound;                  // "compute (matmul)", "collectives (fsdp)"
  int64_t peak_bytes = 0;             // per device (memory analysis)
  int64_t hbm_bytes = 0;              // per device
  int64_t host_temp_bytes = 0;        // per device, offloaded to host memory (not in peak)
  bool fits = false;                  // peak_bytes <= hbm_bytes
  // Filled by the caller that knows the model (engine/train/plan.h): MaxText's count.
  double tflops_per_device = 0;       // per step
  double tflops_per_s_per_device = 0;
  double tokens_per_s_per_device = 0;
  double mfu = 0;                     // tflops_per_s_per_device / MaxText's peak
  // The table c.predicted prints.
  std::string to_table() const;
};

// The matmul padding efficiency on a matrix unit of edge `tile`.
double matmul_efficiency(int64_t M, int64_t N, int64_t K, int64_t tile);

// How the attention kernel tiles the sequence (MaxText's sa_block_q / sa_block_kv, base.yml
// default 512): a causal kernel computes whole tiles up to the diagonal.
struct PredictOptions {
  int64_t attention_block_q = 512;
  int64_t attention_block_kv = 512;
};

// The tiles' (query, key) pairs over the causal T(T+1)/2: (T + b) / (T + 1) for square blocks
// of b; 1 for blocks of 1.
double causal_block_factor(int64_t T, int64_t block_q, int64_t block_kv);

// REQUIRES: pm.mesh has the executable's mesh axes and sizes (else an error naming both).
Result<Prediction> predict_step(const Executable& exe, const PhysicalMesh& pm,
                                const PredictOptions& options = {});

}  // namespace eng
