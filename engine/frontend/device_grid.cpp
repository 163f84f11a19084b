// engine/frontend/device_grid.cpp: numpy's object array of devices (device_grid.h).
#include "engine/frontend/device_grid.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace eng::frontend {

namespace {

std::string py_tuple(const std::vector<int64_t>& s) {
  return s.size() == 1 ? fmt::format("({},)", s[0]) : fmt::format("({})", fmt::join(s, ", "));
}

// Dims [d, rank) of the devices from *next on, as numpy nests them (rows of rank-2 and more on
// their own lines, indented under "array(").
void print(const DeviceGrid& g, size_t d, size_t* next, std::string* out) {
  *out += "[";
  for (int64_t i = 0; i < g.shape[d]; ++i) {
    if (i > 0)
      *out += d + 1 == g.shape.size()
                  ? ", "
                  : "," + std::string(g.shape.size() - d - 1, '\n') + std::string(7 + d, ' ');
    if (d + 1 == g.shape.size())
      *out += fmt::format("CpuDevice(id={})", g.ids[(*next)++]);
    else
      print(g, d + 1, next, out);
  }
  *out += "]";
}

}  // namespace

Result<DeviceGrid> DeviceGrid::reshape(std::vector<int64_t> dims) const {
  constexpr size_t kMaxDims = 64;  // numpy's NPY_MAXDIMS (printing recurses once per dim)
  if (dims.size() > kMaxDims)
    return invalid_argument("cannot reshape into {} dimensions: at most {}", dims.size(), kMaxDims);
  const auto size = static_cast<int64_t>(ids.size());
  int64_t known = 1;
  int unknown = -1;
  bool bad = dims.empty() && size != 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == -1 && unknown < 0) unknown = static_cast<int>(k);
    else if (dims[k] < 0) bad = true;
    else bad = bad || __builtin_mul_overflow(known, dims[k], &known);
  }
  if (!bad && unknown >= 0 && known > 0 && size % known == 0)
    dims[static_cast<size_t>(unknown)] = size / known;
  int64_t n = 1;
  for (int64_t d : dims) bad = bad || d < 0 || __builtin_mul_overflow(n, d, &n);
  if (bad || n != size || (unknown >= 0 && known == 0))
    return invalid_argument("cannot reshape array of size {} into shape {}", size, py_tuple(dims));
  return DeviceGrid{ids, std::move(dims)};
}

std::string DeviceGrid::repr() const {
  std::string out = "array(";
  size_t next = 0;
  if (shape.empty())
    out += fmt::format("CpuDevice(id={})", ids.empty() ? 0 : ids[0]);
  else
    print(*this, 0, &next, &out);
  return out + ", dtype=object)";
}

}  // namespace eng::frontend
