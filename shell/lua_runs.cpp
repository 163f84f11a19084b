// shell/lua_runs.cpp: sl.runs{...} and sl.run(id): runs as values, as MLflow users expect
// (mlflow.search_runs / mlflow.get_run), read from the metrics store.
#include "shell/lua_runs.h"

#include <string>
#include <vector>

#include <fmt/format.h>

#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/lua_binding.h"

namespace shell {
namespace {

void push_value(lua_State* L, const eng::SqlValue& v) {
  switch (v.index()) {
    case 0:
      lua_pushnil(L);
      break;
    case 1:
      lua_pushinteger(L, std::get<int64_t>(v));
      break;
    case 2:
      lua_pushnumber(L, std::get<double>(v));
      break;
    case 3:
      lua_pushstring(L, std::get<std::string>(v).c_str());
      break;
    default:
      lua_pushstring(L, eng::sql_value_to_string(v).c_str());
  }
}

// Row i of r as a table keyed by column name (NULL columns absent).
void push_row(lua_State* L, const eng::QueryResult& r, size_t i) {
  lua_createtable(L, 0, static_cast<int>(r.columns.size()));
  for (size_t j = 0; j < r.columns.size(); ++j) {
    push_value(L, r.rows[i][j]);
    lua_setfield(L, -2, r.columns[j].c_str());
  }
}

void push_rows(lua_State* L, const eng::QueryResult& r) {
  lua_createtable(L, static_cast<int>(r.rows.size()), 0);
  for (size_t i = 0; i < r.rows.size(); ++i) {
    push_row(L, r, i);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
}

// {key = value} from a two-column result.
void push_map(lua_State* L, const eng::QueryResult& r) {
  lua_createtable(L, 0, static_cast<int>(r.rows.size()));
  for (const auto& row : r.rows) {
    push_value(L, row[1]);
    lua_setfield(L, -2, eng::sql_value_to_string(row[0]).c_str());
  }
}

Result<eng::QueryResult> query(eng::MetricsStore& store, std::string_view fn, std::string_view sql,
                               const std::string& run_id) {
  eng::SqlValue a[] = {run_id};
  return with_context(fn, store.query(sql, a));
}

// The run_id of `id`: a run_id itself, else the one run with that name.
Result<std::string> resolve_run(eng::MetricsStore& store, const std::string& id,
                                std::string_view fn) {
  ENG_ASSIGN_OR_RETURN(eng::QueryResult r,
                       query(store, fn,
                             "SELECT run_id FROM runs WHERE run_id = ?1 OR name = ?1 "
                             "ORDER BY run_id = ?1 DESC, start_ms DESC",
                             id));
  if (r.rows.empty()) return eng::not_found("{}: no run with id or name '{}' in the store", fn, id);
  const std::string run_id = std::get<std::string>(r.rows[0][0]);
  if (run_id != id && r.rows.size() > 1)
    return eng::invalid_argument(
        "{}: {} runs are named '{}'; pass a run_id (sl.runs{{name = '{}'}})", fn, r.rows.size(), id,
        id);
  return run_id;
}

// sl.runs{...} options into a RunFilter.
Result<eng::RunFilter> read_filter(lua_State* L, std::string_view fn) {
  eng::RunFilter f;
  if (lua_isnoneornil(L, 1)) return f;
  ENG_RETURN_IF_ERROR(arg_table(L, 1, fn, "options"));
  static const std::vector<std::string> kKeys = {"name",   "status", "since", "until",
                                                 "params", "where",  "limit"};
  ENG_RETURN_IF_ERROR(check_keys(L, 1, fn, kKeys));
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> name, field_string(L, 1, "name", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> status, field_string(L, 1, "status", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> where, field_string(L, 1, "where", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<double> since, field_number(L, 1, "since", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<double> until, field_number(L, 1, "until", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> limit, field_int(L, 1, "limit", fn));
  f.name = name.value_or("");
  f.status = status.value_or("");
  f.where = where.value_or("");
  if (since) f.since_ms = static_cast<int64_t>(*since * 1000);  // os.time() seconds
  if (until) f.until_ms = static_cast<int64_t>(*until * 1000);
  if (limit && *limit < 0)
    return eng::invalid_argument("{}: limit must be >= 0, got {}", fn, *limit);
  f.limit = limit.value_or(-1);
  const int type = push_field(L, 1, "params");
  if (type != LUA_TNIL && type != LUA_TTABLE) {
    lua_pop(L, 1);
    return eng::invalid_argument("{}: params must be a table {{key = value}}, got {}", fn,
                                 lua_typename(L, type));
  }
  if (type == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {  // stack: params, key, value
      const int vt = lua_type(L, -1);
      if (lua_type(L, -2) != LUA_TSTRING ||
          (vt != LUA_TSTRING && vt != LUA_TNUMBER && vt != LUA_TBOOLEAN)) {
        lua_pop(L, 3);
        return eng::invalid_argument(
            "{}: params must map config keys to strings, numbers or booleans", fn);
      }
      std::string v;  // as the params table stores it (config_value_string)
      if (vt == LUA_TBOOLEAN)
        v = lua_toboolean(L, -1) ? "true" : "false";
      else if (lua_isinteger(L, -1))
        v = fmt::format("{}", lua_tointeger(L, -1));
      else if (vt == LUA_TNUMBER)
        v = fmt::format("{:g}", lua_tonumber(L, -1));
      else
        v = lua_tostring(L, -1);
      f.params.emplace_back(lua_tostring(L, -2), std::move(v));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  return f;
}

Result<int> runs(lua_State* L) {
  constexpr std::string_view fn = "sl.runs";
  ENG_ASSIGN_OR_RETURN(eng::RunFilter f, read_filter(L, fn));
  ENG_ASSIGN_OR_RETURN(eng::MetricsStore * store, context(L).open_store());
  ENG_ASSIGN_OR_RETURN(eng::QueryResult r, with_context(fn, store->find_runs(f)));
  push_rows(L, r);
  return 1;
}

Result<int> run(lua_State* L) {
  constexpr std::string_view fn = "sl.run";
  ENG_ASSIGN_OR_RETURN(std::string id, arg_string(L, 1, fn, "id"));
  ENG_ASSIGN_OR_RETURN(eng::MetricsStore * store, context(L).open_store());
  return push_run(L, *store, id, fn);
}

constexpr Function kRunFunctions[] = {
    {"runs", lua_entry<runs>,
     "sl.runs{name=, status=, since=, until=, params={k=v}, where=, limit=} -> {run}",
     "The runs in the metrics store, newest first: run_id, name, status, start_ms, end_ms,\n"
     "  n_steps, last_step, last_loss, best_loss, host, parent_run_id. Every option narrows:\n"
     "  name (exact, or a glob with * ? [), status (RUNNING FINISHED FAILED KILLED), since/until\n"
     "  (os.time() seconds, on start time), params (each key = value in the run's params),\n"
     "  where (an SQL condition over those columns, e.g. \"best_loss < 3\"), limit."},
    {"run", lua_entry<run>, "sl.run(id) -> run",
     "One run by run_id (or unique name): its runs columns (name, status, host, argv, script,\n"
     "  git_rev, parent_run_id, ...), params, tags and metrics (latest value per key) as\n"
     "  {key = value}, and steps and compilations as arrays of rows."},
};

}  // namespace

Result<int> push_run(lua_State* L, eng::MetricsStore& store, const std::string& id,
                     std::string_view fn) {
  ENG_ASSIGN_OR_RETURN(std::string run_id, resolve_run(store, id, fn));
  ENG_ASSIGN_OR_RETURN(eng::QueryResult head,
                       query(store, fn, "SELECT * FROM runs WHERE run_id = ?", run_id));
  const std::pair<const char*, const char*> maps[] = {
      {"params", "SELECT key, value FROM params WHERE run_id = ? ORDER BY key"},
      {"tags", "SELECT key, value FROM tags WHERE run_id = ? ORDER BY key"},
      {"metrics", "SELECT key, value FROM latest_metrics WHERE run_id = ? ORDER BY key"},
  };
  const std::pair<const char*, const char*> lists[] = {
      {"steps", "SELECT * FROM steps WHERE run_id = ? ORDER BY step"},
      {"compilations", "SELECT * FROM compilations WHERE run_id = ? ORDER BY compile_id"},
  };
  std::vector<eng::QueryResult> parts;
  for (const auto& [name, sql] : maps) {
    ENG_ASSIGN_OR_RETURN(eng::QueryResult r, query(store, fn, sql, run_id));
    parts.push_back(std::move(r));
  }
  for (const auto& [name, sql] : lists) {
    ENG_ASSIGN_OR_RETURN(eng::QueryResult r, query(store, fn, sql, run_id));
    parts.push_back(std::move(r));
  }
  push_row(L, head, 0);
  for (size_t k = 0; k < std::size(maps); ++k) {
    push_map(L, parts[k]);
    lua_setfield(L, -2, maps[k].first);
  }
  for (size_t k = 0; k < std::size(lists); ++k) {
    push_rows(L, parts[std::size(maps) + k]);
    lua_setfield(L, -2, lists[k].first);
  }
  return 1;
}

void open_lua_runs(lua_State* L, int sl) { add_functions(L, sl, "sl", kRunFunctions); }

}  // namespace shell
