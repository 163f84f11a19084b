// shell/lua_store.cpp: Lua bindings for the metrics store: sl.sql.
#include <optional>
#include <string>
#include <vector>

#include "engine/store/metrics_store.h"
#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/lua_binding.h"
#include "shell/pretty.h"

namespace shell {
namespace {

Result<eng::SqlValue> to_sql_value(lua_State* L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL: return eng::SqlValue();
    case LUA_TBOOLEAN: return eng::SqlValue(int64_t{lua_toboolean(L, idx) ? 1 : 0});
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) return eng::SqlValue(int64_t{lua_tointeger(L, idx)});
      return eng::SqlValue(double{lua_tonumber(L, idx)});
    case LUA_TSTRING: {
      size_t n = 0;
      const char* s = lua_tolstring(L, idx, &n);
      return eng::SqlValue(std::string(s, n));
    }
    default: return arg_error(L, idx, "sl.sql", {}, "nil, boolean, number or string");
  }
}

void push_sql_value(lua_State* L, const eng::SqlValue& v) {
  switch (v.index()) {
    case 0: lua_pushnil(L); break;
    case 1: lua_pushinteger(L, std::get<int64_t>(v)); break;
    case 2: lua_pushnumber(L, std::get<double>(v)); break;
    case 3: {
      const std::string& s = std::get<std::string>(v);
      lua_pushlstring(L, s.data(), s.size());
      break;
    }
    default: {
      const eng::Blob& b = std::get<eng::Blob>(v);
      lua_pushlstring(L, reinterpret_cast<const char*>(b.data()), b.size());
    }
  }
}

// sl.sql(query, [{write = true},] ...) -> rows: an array of tables keyed by column name;
// rows.columns (through the metatable, so printing and ipairs see only the rows) lists the
// column names in order. Read-only unless the options table says write = true.
Result<int> sql(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(std::string query, arg_string(L, 1, "sl.sql", "query"));
  int first_arg = 2;
  eng::SqlAccess access = eng::SqlAccess::kReadOnly;
  if (lua_type(L, 2) == LUA_TTABLE) {  // options: parameters are never tables
    static const std::vector<std::string> kAllowed = {"write"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, "sl.sql", kAllowed));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> write, field_bool(L, 2, "write", "sl.sql"));
    if (write.value_or(false)) access = eng::SqlAccess::kReadWrite;
    first_arg = 3;
  }
  std::vector<eng::SqlValue> args;
  for (int i = first_arg; i <= lua_gettop(L); ++i) {
    ENG_ASSIGN_OR_RETURN(eng::SqlValue v, to_sql_value(L, i));
    args.push_back(std::move(v));
  }
  ENG_ASSIGN_OR_RETURN(eng::MetricsStore * store, with_context("sl.sql", context(L).open_store()));
  ENG_ASSIGN_OR_RETURN(eng::QueryResult r, with_context("sl.sql", store->query(query, args, access)));
  lua_createtable(L, static_cast<int>(r.rows.size()), 0);
  for (size_t i = 0; i < r.rows.size(); ++i) {
    lua_createtable(L, 0, static_cast<int>(r.columns.size()));
    for (size_t j = 0; j < r.columns.size(); ++j) {
      push_sql_value(L, r.rows[i][j]);
      lua_setfield(L, -2, r.columns[j].c_str());  // a fresh table: no metamethods
    }
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  set_rows_metatable(L, -1, r.columns);
  return 1;
}

constexpr Function kStoreFunctions[] = {
    {"sql", lua_entry<sql>, "sl.sql(query, ...) -> rows",
     "Runs one SQL statement on the metrics store (--db; opened on first use) with `?`\n"
     "  parameters bound from the extra arguments. Returns an array of rows, each a table keyed\n"
     "  by column name (NULL columns are absent); rows.columns lists the column names in order.\n"
     "  Prints as an aligned table in SELECT order. Read-only: a statement that would write\n"
     "  (INSERT, UPDATE, DELETE, CREATE TEMP ...) is refused unless the options table before the\n"
     "  parameters says write = true; the schema, transactions and ATTACH are refused always.\n"
     "  Example: sl.sql('SELECT * FROM v_best_loss WHERE name = ?', 'tiny')\n"
     "           sl.sql('DELETE FROM runs WHERE name = ?', {write = true}, 'tiny')"},
};

}  // namespace

void open_lua_store(lua_State* L, int sl) { add_functions(L, sl, "sl", kStoreFunctions); }

}  // namespace shell
