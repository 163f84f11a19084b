// shell/lua_jit_tree.h: pytrees for sl.jit / sl.grad (docs/frontend.md): a jitted function's
// arguments and results may be Arrays or (nested) Lua tables of Arrays; the Tree (structure,
// leaf order) is engine/frontend/jit_function.h's, flattened from and rebuilt into Lua here.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/frontend/jit_function.h"
#include "shell/lua_array.h"

namespace shell {

using eng::frontend::Tree;
using eng::frontend::TreeKey;
using eng::frontend::leaf_paths;
using eng::frontend::tree_type;

// Flattens the value at idx into `tree` and its Arrays (appended to `leaves`). `what` names it
// in errors ("fn: result 2"): a leaf that is not an Array, a key that is neither an integer
// nor a string, nesting deeper than 32, or a table that contains itself is an error.
Status flatten(lua_State* L, int idx, const std::string& what, Tree* tree,
               std::vector<ArrayBox*>* leaves);
// Pushes `tree` rebuilt, leaf k pushed by push_leaf(*next + k order): *next advances.
void unflatten(lua_State* L, const Tree& tree, int* next,
               const std::function<void(int)>& push_leaf);
}  // namespace shell
