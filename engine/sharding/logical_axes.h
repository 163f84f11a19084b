// engine/sharding/logical_axes.h: LogicalAxes, the one type for logical axis names per tensor
// dim (flax's logical axes: a name, or None), used by the rules (logical_rules.h), the IR's
// constraint and out_sharding attributes (ir/op.h), compile and train/inspect. (The printer
// is defined in logical_rules.cpp.)
//
//   LogicalAxes names = {"activation_batch", std::nullopt, "activation_embed"};
//   // Python: ('activation_batch', None, 'activation_embed')
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace eng {

// Per tensor dim: a logical axis name, or nullopt for None (passes through as None).
using LogicalAxes = std::vector<std::optional<std::string>>;

// "('embed', None, 'mlp')", "('norm',)": Python's tuple form, as MaxText logs it.
std::string logical_axes_string(const LogicalAxes& names);

// From a list of names where "" stands for None (ValueInfo::logical and the Builder's
// string lists; a serialized program), and back.
inline LogicalAxes to_logical_axes(const std::vector<std::string>& names) {
  LogicalAxes out;
  out.reserve(names.size());
  for (const auto& n : names) out.push_back(n.empty() ? std::nullopt : std::optional(n));
  return out;
}
inline std::vector<std::string> logical_axis_names(const LogicalAxes& axes) {
  std::vector<std::string> out;
  out.reserve(axes.size());
  for (const auto& a : axes) out.push_back(a.value_or(""));
  return out;
}

}  // namespace eng
