// engine/tensor/rope_form.h: which rotary embedding a rope kernel applies. MaxText's
// embeddings.py (src/maxtext/layers/embeddings.py at commit e591f30, 2026-08) has two that
// this engine runs:
//   RotaryEmbedding (the default): pair i is (x[i], x[i + D/2]) (rotate-half);
//   LLaMARotaryEmbedding (model names llama3.1*, or rope_type llama3.1): pair i is
//     (x[2i], x[2i+1]) (adjacent), and with use_scale its frequencies are rescaled as Llama 3.1's
//     (_apply_scaling_factor: scale_factor 8, low_freq_factor 1, high_freq_factor 4,
//     old_context_len 8192, all hard-coded there).
// Both rotate pair i by angle pos / timescale_i, timescale_i = min * (max / min)^(2i / D):
//   y[a] = x[a] cos - x[b] sin,  y[b] = x[b] cos + x[a] sin.
#pragma once

#include <cmath>
#include <cstdint>

namespace eng::kern {

struct RopeForm {
  bool interleave = false;  // pairs (2i, 2i+1) instead of (i, i + D/2)
  bool use_scale = false;   // Llama 3.1's frequency scaling
  bool operator==(const RopeForm&) const = default;
};

// The two elements of pair i (i < D/2).
inline int64_t rope_first(int64_t i, int64_t D, RopeForm f) { return f.interleave ? 2 * i : i; }
inline int64_t rope_second(int64_t i, int64_t D, RopeForm f) {
  return f.interleave ? 2 * i + 1 : i + D / 2;
}

// timescale_i, computed in T (double for the kernels' tables and the float64 oracles).
template <typename T>
T rope_timescale(int64_t i, int64_t D, T min_ts, T max_ts, bool use_scale) {
  const T ts = min_ts * std::pow(max_ts / min_ts, T(2 * i) / T(D));
  if (!use_scale) return ts;
  // Llama 3.1: wavelengths below old_context_len / high_freq_factor keep their frequency,
  // those above old_context_len / low_freq_factor are slowed by scale_factor, and between the
  // two the frequency is interpolated (smooth runs from 0 to 1).
  constexpr double kScaleFactor = 8, kLowFreqFactor = 1, kHighFreqFactor = 4, kOldContext = 8192;
  constexpr double kPi = 3.14159265358979323846;
  const T freq = T(1) / ts, wavelen = T(2 * kPi) / freq;
  T scaled;
  if (wavelen < T(kOldContext / kHighFreqFactor)) {
    scaled = freq;
  } else if (wavelen > T(kOldContext / kLowFreqFactor)) {
    scaled = freq / T(kScaleFactor);
  } else {
    const T smooth =
        (T(kOldContext) / wavelen - T(kLowFreqFactor)) / T(kHighFreqFactor - kLowFreqFactor);
    scaled = (T(1) - smooth) * freq / T(kScaleFactor) + smooth * freq;
  }
  return T(1) / scaled;
}

}  // namespace eng::kern
