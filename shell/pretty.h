// shell/pretty.h: the REPL's value printer: tables recursively (keys sorted, depth-limited), objects via __tostring.
//
//   {1, 2, name = "tiny", mesh = Mesh('data': 2, ...)}
//
// Short tables print on one line, long ones one entry per line; long arrays and tables with
// many keys are summarised ({1, 2, 3, ..., 99, 100} (100 items)). Top-level strings print raw,
// nested ones quoted. Colours (ANSI) only when asked (the shell asks only on a tty).
// Never raises: __tostring runs under lua_pcall.
#pragma once

#include <lua.hpp>

#include <string>
#include <vector>

namespace shell {

// The deepest a table is rendered (each level is a C++ frame and two Lua stack slots);
// sl.pretty refuses a deeper {depth = n}. Lua's own C-call limit is 200.
inline constexpr int kMaxPrettyDepth = 200;

struct PrettyOptions {
  bool color = false;  // ANSI colours
  int max_depth = 5;   // deeper tables print as {...}
  int width = 80;      // one-line form allowed up to this many columns
  bool rows = false;   // Rows (sl.sql, c:temps) as aligned tables; false: as Lua tables
};

std::string pretty(lua_State* L, int idx, const PrettyOptions& options = {});

// An aligned text table: the header, a rule, then the rows; cells that look like numbers are
// right-aligned. At most max_rows rows are shown, then "... N more rows".
std::string format_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows, size_t max_rows = 40);

// Rows: a Lua array of row tables (sl.sql, c:temps) whose metatable names the columns in order
// (rows.columns, read through __index) and prints them as an aligned table. Still a plain
// array underneath: #rows, rows[i].col, ipairs. Sets that metatable on the table at idx.
void set_rows_metatable(lua_State* L, int idx, const std::vector<std::string>& columns);

}  // namespace shell
