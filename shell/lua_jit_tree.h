// shell/lua_jit_tree.h: pytrees for sl.jit / sl.grad (docs/frontend.md): a jitted function's
// arguments and results may be Arrays or (nested) Lua tables of Arrays, as JAX's functions
// take and return lists and dicts of arrays. A Tree is the structure; the Arrays are its
// leaves, in a fixed order: integer keys ascending, then string keys sorted (JAX sorts dict
// keys too).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "shell/lua_array.h"

namespace shell {

struct TreeKey {
  bool is_int = true;
  lua_Integer i = 0;  // is_int
  std::string s;      // otherwise
  bool operator==(const TreeKey&) const = default;
  std::string to_string() const;  // "[2]" or ".w"
};

struct Tree {
  bool leaf = true;                            // an Array; else a table of kids
  std::vector<std::pair<TreeKey, Tree>> kids;  // in leaf order
  bool operator==(const Tree&) const = default;
  int num_leaves() const;
};

// Flattens the value at idx into `tree` and its Arrays (appended to `leaves`). `what` names it
// in errors ("fn: result 2"): a leaf that is not an Array, a key that is neither an integer
// nor a string, nesting deeper than 32, or a table that contains itself is an error.
Status flatten(lua_State* L, int idx, const std::string& what, Tree* tree,
               std::vector<ArrayBox*>* leaves);
// Pushes `tree` rebuilt, leaf k pushed by push_leaf(*next + k order): *next advances.
void unflatten(lua_State* L, const Tree& tree, int* next,
               const std::function<void(int)>& push_leaf);
// Per leaf, its name: `prefix` plus the key path ("params.w", "xs[2]").
void leaf_paths(const Tree& tree, const std::string& prefix, std::vector<std::string>* out);
// The tree's type for signatures and errors: "{w=f32[4,4], b=f32[4]}" from per-leaf types.
std::string tree_type(const Tree& tree, const std::vector<std::string>& leaf_types, int* next);

}  // namespace shell
