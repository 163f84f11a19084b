// engine/frontend/device_grid.h: numpy's object array of devices, `np.array(jax.devices()[:4])
// .reshape(2, 2)` (sl.numpy.array of sl.devices()' tables; docs/frontend.md), which
// jax.sharding.Mesh takes as it takes the nested list: the device ids row-major and a shape.
//
//   DeviceGrid g{{0, 1, 2, 3}, {4}};
//   ENG_ASSIGN_OR_RETURN(DeviceGrid sq, g.reshape({2, -1}));   // shape (2, 2)
//   sq.repr();  // "array([[CpuDevice(id=0), CpuDevice(id=1)],\n       [...]], dtype=object)"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/base/status.h"

namespace eng::frontend {

struct DeviceGrid {
  std::vector<int64_t> ids;    // row-major
  std::vector<int64_t> shape;  // numpy's .shape
  // numpy's reshape: at most one dim -1 (inferred); else "cannot reshape array of size 4 into
  // shape (3, 2)", as numpy's ValueError.
  Result<DeviceGrid> reshape(std::vector<int64_t> dims) const;
  // numpy's repr of the object array, each device as JAX's CPU device repr (CpuDevice(id=0)).
  std::string repr() const;
};

}  // namespace eng::frontend
