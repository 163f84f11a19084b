// shell/pretty.h: the REPL's value printer: tables recursively (keys sorted, depth-limited), objects via __tostring.
//
//   {1, 2, name = "tiny", mesh = Mesh('data': 2, ...)}
//
// Short tables print on one line, long ones one entry per line. Top-level strings print raw,
// nested ones quoted. Colours (ANSI) only when asked (the shell asks only on a tty).
// Never raises: __tostring runs under lua_pcall.
#pragma once

#include <lua.hpp>

#include <string>

namespace shell {

struct PrettyOptions {
  bool color = false;  // ANSI colours
  int max_depth = 5;   // deeper tables print as {...}
  int width = 80;      // one-line form allowed up to this many columns
};

std::string pretty(lua_State* L, int idx, const PrettyOptions& options = {});

}  // namespace shell
