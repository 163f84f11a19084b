// shell/lua_numpy.h: what shell/lua_numpy.cpp and shell/lua_numpy_ops.cpp share (sl.numpy's
// op builders and argument readers, also used by lua_jit_api.cpp's sl.lax.all_to_all), and the
// second half of sl.numpy (comparisons, where, max/min/argmax, transpose, indexing, einsum,
// softmax), registered by open_lua_numpy.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shell/lua_array.h"
#include "shell/lua_binding.h"

namespace shell {

// An op's one result as the result list `apply` takes (lua_array.h).
Result<std::vector<eng::ValueId>> one(Result<eng::ValueId> r);
// np.<fn>(x1, x2): an elementwise op of two operands (Arrays or numbers, one Array at least).
using BinaryFn =
    std::function<Result<eng::ValueId>(eng::frontend::Trace&, eng::ValueId, eng::ValueId)>;
Result<int> binary(lua_State* L, std::string_view fn, const BinaryFn& f);
// np.<fn>(a [, axis | {axis=, keepdims=}]): a reduction over one axis or all.
Result<int> reduction(lua_State* L, std::string_view fn,
                      Result<eng::ValueId> (*f)(eng::frontend::Trace&, eng::ValueId,
                                                std::optional<int>, bool));
// Adds methods (x:sum, x:max, ...) to the Array type's methods table (mt's __methods).
void add_array_methods(lua_State* L, int mt, std::span<const Method> methods);

// {axis=, keepdims=} or a bare axis number at idx (nil: all axes, keepdims false).
Result<std::pair<std::optional<int>, bool>> read_axis(lua_State* L, int idx, std::string_view fn);
// A mesh axis name or a list of them at idx (jax.lax's axis_name).
Result<std::vector<std::string>> read_axis_names(lua_State* L, int idx, std::string_view fn);
// The options table {key = bool} at idx, the only key it may hold (nil or absent: false).
Result<bool> read_bool_option(lua_State* L, int idx, std::string_view fn, const char* key);

// Adds lua_numpy_ops.cpp's functions to the sl.numpy table at np_table and its methods (x:max,
// x:transpose, ...) to the Array metatable mt's methods.
void open_lua_numpy_ops(lua_State* L, int np_table, int mt);
void open_lua_nn_ops(lua_State* L, int nn_table);  // sl.nn.softmax, sl.nn.log_softmax
// JAX's other jax.numpy / jax.nn names (lua_numpy_jax.cpp): creation (np.zeros ... are sl's
// aliases), elementwise math, reductions, shape moves, take, cumsum, sl.nn.relu, one_hot ...
void open_lua_numpy_jax(lua_State* L, int sl, int np_table, int nn_table);

// lua_index.cpp: the % operator, np.remainder/mod, np.pad, sl.lax.dynamic_slice_in_dim and
// dynamic_update_slice_in_dim into the tables at np_table / lax_table and the Array metatable
// mt; x[i] for an int32 scalar Array i (array_index_by_array); x.at (array_at).
void open_lua_index(lua_State* L, int np_table, int lax_table, int mt);
Result<int> array_index_by_array(lua_State* L);
int array_at(lua_State* L);

// x[key] for a number or table key: numpy's basic indexing (lua_numpy_ops.cpp); x.T.
Result<int> array_getitem(lua_State* L);
Result<int> array_transposed(lua_State* L);

}  // namespace shell
