// shell/pretty.cpp: recursive, sorted, depth-limited rendering of Lua values for the REPL.
#include "shell/pretty.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "shell/lua_binding.h"

namespace shell {
namespace {

constexpr const char* kReset = "\033[0m";
constexpr const char* kNumber = "\033[36m";    // cyan (trepl)
constexpr const char* kBoolean = "\033[34m";   // blue
constexpr const char* kFunction = "\033[35m";  // magenta
constexpr const char* kString = "\033[32m";    // green
constexpr const char* kNil = "\033[90m";       // grey

bool is_identifier(const std::string& s) {
  static const std::set<std::string> keywords = {
      "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
      "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"};
  if (s.empty() || !(isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return !keywords.count(s);
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\{}", static_cast<int>(c));
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

// Columns a string takes on screen: ANSI escapes take none.
size_t visible_width(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\033') {
      while (i < s.size() && s[i] != 'm') ++i;
    } else if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) {
      ++n;
    }
  }
  return n;
}

class Printer {
 public:
  Printer(lua_State* L, const PrettyOptions& o) : L_(L), o_(o) {}

  std::string value(int idx, int depth, int indent) {
    idx = lua_absindex(L_, idx);
    switch (lua_type(L_, idx)) {
      case LUA_TNIL: return paint(kNil, "nil");
      case LUA_TBOOLEAN: return paint(kBoolean, lua_toboolean(L_, idx) ? "true" : "false");
      case LUA_TNUMBER: return paint(kNumber, number(idx));
      case LUA_TSTRING: {
        size_t n = 0;
        const char* s = lua_tolstring(L_, idx, &n);
        return depth == 0 ? std::string(s, n) : paint(kString, quote(std::string_view(s, n)));
      }
      case LUA_TTABLE:
        if (o_.rows || !is_rows(idx))
          if (auto s = tostring_meta(idx)) return *s;
        return table(idx, depth, indent);
      case LUA_TFUNCTION: return paint(kFunction, address(idx));
      default:
        if (auto s = tostring_meta(idx)) return *s;
        return address(idx);
    }
  }

 private:
  std::string paint(const char* color, std::string text) const {
    return o_.color ? fmt::format("{}{}{}", color, text, kReset) : text;
  }

  std::string number(int idx) {
    lua_pushvalue(L_, idx);
    std::string s = lua_tostring(L_, -1);  // converts the copy only
    lua_pop(L_, 1);
    return s;
  }

  bool is_rows(int idx) {
    bool rows = false;
    if (luaL_getmetafield(L_, idx, "__name") != LUA_TNIL) {
      rows = lua_type(L_, -1) == LUA_TSTRING && std::strcmp(lua_tostring(L_, -1), "Rows") == 0;
      lua_pop(L_, 1);
    }
    return rows;
  }

  std::string address(int idx) {
    std::string name = luaL_typename(L_, idx);
    if (luaL_getmetafield(L_, idx, "__name") != LUA_TNIL) {
      if (lua_type(L_, -1) == LUA_TSTRING) name = lua_tostring(L_, -1);
      lua_pop(L_, 1);
    }
    return fmt::format("{}: {}", name, lua_topointer(L_, idx));
  }

  // __tostring under pcall; nullopt when there is none. An error in it prints as <error: ...>.
  std::optional<std::string> tostring_meta(int idx) {
    if (luaL_getmetafield(L_, idx, "__tostring") == LUA_TNIL) return std::nullopt;
    lua_pushvalue(L_, idx);
    std::string out;
    if (lua_pcall(L_, 1, 1, 0) != LUA_OK) out = fmt::format("<__tostring error: {}>", lua_tostring(L_, -1) ? lua_tostring(L_, -1) : "?");
    else if (lua_type(L_, -1) == LUA_TSTRING) out = lua_tostring(L_, -1);
    else out = "<__tostring returned a non-string>";
    lua_pop(L_, 1);
    return out;
  }

  struct Entry {
    int kind;            // 0: array item, 1: number key, 2: string key, 3: other key
    double num = 0;      // numeric key for sorting
    std::string key;     // rendered key ("" for array items)
    std::string value;   // rendered value
  };

  std::string table(int idx, int depth, int indent) {
    const void* p = lua_topointer(L_, idx);
    if (open_.count(p)) return paint(kNil, "<cycle>");
    if (depth >= o_.max_depth) return "{...}";
    open_.insert(p);
    lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L_, idx));
    // A long array shows its first kHead and last kTail items (only those are rendered).
    const bool long_array = n > kHead + kTail + 1;
    auto hidden = [&](lua_Integer i) { return long_array && i > kHead && i <= n - kTail; };
    std::vector<Entry> entries;
    lua_pushnil(L_);
    while (lua_next(L_, idx) != 0) {
      Entry e;
      int kt = lua_type(L_, -2);
      if (kt == LUA_TNUMBER && lua_isinteger(L_, -2) && lua_tointeger(L_, -2) >= 1 &&
          lua_tointeger(L_, -2) <= n) {
        if (hidden(lua_tointeger(L_, -2))) {
          lua_pop(L_, 1);
          continue;
        }
        e.kind = 0, e.num = static_cast<double>(lua_tointeger(L_, -2));
      } else if (kt == LUA_TNUMBER) {
        e.kind = 1, e.num = lua_tonumber(L_, -2), e.key = "[" + number(lua_gettop(L_) - 1) + "]";
      } else if (kt == LUA_TSTRING) {
        std::string k = lua_tostring(L_, -2);
        e.kind = 2, e.key = is_identifier(k) ? k : "[" + quote(k) + "]";
      } else {
        e.kind = 3, e.key = "[" + value(lua_gettop(L_) - 1, depth + 1, indent + 2) + "]";
      }
      e.value = value(-1, depth + 1, indent + 2);
      entries.push_back(std::move(e));
      lua_pop(L_, 1);
    }
    open_.erase(p);
    if (entries.empty()) return "{}";
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      if (a.kind != b.kind) return a.kind < b.kind;
      if (a.kind <= 1) return a.num < b.num;
      return a.key < b.key;
    });
    std::vector<std::string> parts;
    size_t len = 2;
    bool multiline = false;
    const size_t keyed = static_cast<size_t>(
        std::count_if(entries.begin(), entries.end(), [](const Entry& e) { return e.kind != 0; }));
    size_t shown_keys = 0;
    for (const Entry& e : entries) {
      if (e.kind != 0 && ++shown_keys > kMaxKeys) break;
      parts.push_back(e.kind == 0 ? e.value : fmt::format("{} = {}", e.key, e.value));
      if (long_array && e.kind == 0 && e.num == static_cast<double>(kHead)) parts.push_back("...");
      len += visible_width(parts.back()) + 2;
      multiline |= parts.back().find('\n') != std::string::npos;
    }
    if (keyed > kMaxKeys) parts.push_back("...");
    std::string note;  // what was left out
    if (long_array) note += fmt::format("{} items", n);
    if (keyed > kMaxKeys) note += fmt::format("{}{} keys", note.empty() ? "" : ", ", keyed);
    if (!note.empty()) note = paint(kNil, " (" + note + ")");
    if (!multiline && static_cast<int>(len) + indent <= o_.width)
      return fmt::format("{{{}}}{}", fmt::join(parts, ", "), note);
    std::string pad(indent + 2, ' ');
    std::string out = "{\n";
    for (const std::string& s : parts) out += pad + s + (s == "..." ? "\n" : ",\n");
    return out + std::string(indent, ' ') + "}" + note;
  }

  static constexpr lua_Integer kHead = 8, kTail = 2;  // items shown of a long array
  static constexpr size_t kMaxKeys = 40;               // keys shown of a big table

  lua_State* L_;
  const PrettyOptions& o_;
  std::set<const void*> open_;  // tables being printed (cycle detection)
};

bool looks_numeric(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// One cell of a Rows table: numbers as Lua prints them, NULL (absent) as an empty cell.
std::string cell_text(lua_State* L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL: return "";
    case LUA_TBOOLEAN: return lua_toboolean(L, idx) ? "true" : "false";
    case LUA_TNUMBER:
      if (!lua_isinteger(L, idx)) return fmt::format("{:.6g}", lua_tonumber(L, idx));
      [[fallthrough]];
    case LUA_TSTRING: {
      lua_pushvalue(L, idx);
      size_t n = 0;
      const char* s = lua_tolstring(L, -1, &n);
      std::string out(s, n);
      lua_pop(L, 1);
      for (char& c : out)
        if (c == '\n' || c == '\t') c = ' ';
      return out;
    }
    default: return luaL_typename(L, idx);
  }
}

// __tostring of a Rows table: the columns from the metatable's __index, rows raw.
Result<int> rows_tostring(lua_State* L) {
  if (lua_type(L, 1) != LUA_TTABLE) return arg_error(L, 1, "Rows:__tostring", "", "table");
  std::vector<std::string> columns;
  lua_getmetatable(L, 1);
  lua_pushstring(L, "__index");
  if (lua_rawget(L, -2) == LUA_TTABLE) {
    lua_pushstring(L, "columns");
    if (lua_rawget(L, -2) == LUA_TTABLE)
      for (lua_Integer i = 1; lua_rawgeti(L, -1, i) == LUA_TSTRING; ++i, lua_pop(L, 1))
        columns.emplace_back(lua_tostring(L, -1));
  }
  lua_settop(L, 1);
  const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, 1));
  std::vector<std::vector<std::string>> rows;
  for (lua_Integer i = 1; i <= n; ++i) {
    std::vector<std::string> row;
    if (lua_rawgeti(L, 1, i) == LUA_TTABLE)
      for (const std::string& c : columns) {
        push_field(L, -1, c.c_str());
        row.push_back(cell_text(L, -1));
        lua_pop(L, 1);
      }
    lua_pop(L, 1);
    rows.push_back(std::move(row));
  }
  std::string out = format_table(columns, rows);
  out += fmt::format("\n({} row{})", n, n == 1 ? "" : "s");
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}

}  // namespace

std::string format_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows, size_t max_rows) {
  std::vector<size_t> width(header.size());
  std::vector<bool> numeric(header.size(), true);
  const size_t shown = std::min(rows.size(), max_rows);
  for (size_t j = 0; j < header.size(); ++j) width[j] = visible_width(header[j]);
  for (size_t i = 0; i < shown; ++i)
    for (size_t j = 0; j < header.size() && j < rows[i].size(); ++j) {
      width[j] = std::max(width[j], visible_width(rows[i][j]));
      if (!rows[i][j].empty() && !looks_numeric(rows[i][j])) numeric[j] = false;
    }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t j = 0; j < header.size(); ++j) {
      const std::string c = j < cells.size() ? cells[j] : "";
      const std::string pad(width[j] - std::min(width[j], visible_width(c)), ' ');
      out += (j ? "  " : "") + (numeric[j] ? pad + c : c + (j + 1 < header.size() ? pad : ""));
    }
    return out;
  };
  std::string out = line(header) + "\n";
  for (size_t j = 0; j < header.size(); ++j) out += (j ? "  " : "") + std::string(width[j], '-');
  for (size_t i = 0; i < shown; ++i) out += "\n" + line(rows[i]);
  if (rows.size() > shown) out += fmt::format("\n... {} more rows", rows.size() - shown);
  return out;
}

void set_rows_metatable(lua_State* L, int idx, const std::vector<std::string>& columns) {
  idx = lua_absindex(L, idx);
  lua_createtable(L, 0, 3);  // metatable
  lua_createtable(L, 0, 1);  // its __index
  lua_createtable(L, static_cast<int>(columns.size()), 0);
  for (size_t j = 0; j < columns.size(); ++j) {
    lua_pushstring(L, columns[j].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(j + 1));
  }
  lua_setfield(L, -2, "columns");
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, lua_entry<rows_tostring>);
  lua_setfield(L, -2, "__tostring");
  lua_pushstring(L, "Rows");
  lua_setfield(L, -2, "__name");
  lua_setmetatable(L, idx);
}

std::string pretty(lua_State* L, int idx, const PrettyOptions& options) {
  int top = lua_gettop(L);
  PrettyOptions o = options;
  o.max_depth = std::clamp(o.max_depth, 0, kMaxPrettyDepth);
  if (!lua_checkstack(L, 2 * o.max_depth + 20)) o.max_depth = 1;
  std::string out = Printer(L, o).value(idx, 0, 0);
  lua_settop(L, top);
  return out;
}

}  // namespace shell
