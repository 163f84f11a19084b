// shell/lua_numpy.h: what shell/lua_numpy.cpp and shell/lua_numpy_ops.cpp share (sl.numpy's
// argument readers, also sl.lax.all_to_all's in lua_jit_api.cpp), and the second half of
// sl.numpy (comparisons, where, max/min/argmax, transpose, indexing, einsum, softmax),
// registered by open_lua_numpy.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shell/lua_binding.h"

namespace shell {

// {axis=, keepdims=} or a bare axis number at idx (nil: all axes, keepdims false).
Result<std::pair<std::optional<int>, bool>> read_axis(lua_State* L, int idx, std::string_view fn);
// A mesh axis name or a list of them at idx (jax.lax's axis_name).
Result<std::vector<std::string>> read_axis_names(lua_State* L, int idx, std::string_view fn);

// Adds lua_numpy_ops.cpp's functions to the sl.numpy table at np_table and its methods (x:max,
// x:transpose, ...) to the Array metatable mt's methods.
void open_lua_numpy_ops(lua_State* L, int np_table, int mt);
void open_lua_nn_ops(lua_State* L, int nn_table);  // sl.nn.softmax, sl.nn.log_softmax

// x[key] for a number or table key: numpy's basic indexing (lua_numpy_ops.cpp); x.T.
Result<int> array_getitem(lua_State* L);
Result<int> array_transposed(lua_State* L);

}  // namespace shell
