// shell/pretty.cpp: recursive, sorted, depth-limited rendering of Lua values for the REPL.
#include "shell/pretty.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>

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
    std::vector<Entry> entries;
    lua_pushnil(L_);
    while (lua_next(L_, idx) != 0) {
      Entry e;
      int kt = lua_type(L_, -2);
      if (kt == LUA_TNUMBER && lua_isinteger(L_, -2) && lua_tointeger(L_, -2) >= 1 &&
          lua_tointeger(L_, -2) <= n) {
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
    for (const Entry& e : entries) {
      parts.push_back(e.kind == 0 ? e.value : fmt::format("{} = {}", e.key, e.value));
      len += visible_width(parts.back()) + 2;
      multiline |= parts.back().find('\n') != std::string::npos;
    }
    if (!multiline && static_cast<int>(len) + indent <= o_.width)
      return fmt::format("{{{}}}", fmt::join(parts, ", "));
    std::string pad(indent + 2, ' ');
    std::string out = "{\n";
    for (const std::string& s : parts) out += pad + s + ",\n";
    return out + std::string(indent, ' ') + "}";
  }

  lua_State* L_;
  const PrettyOptions& o_;
  std::set<const void*> open_;  // tables being printed (cycle detection)
};

}  // namespace

std::string pretty(lua_State* L, int idx, const PrettyOptions& options) {
  int top = lua_gettop(L);
  lua_checkstack(L, 2 * options.max_depth + 20);
  std::string out = Printer(L, options).value(idx, 0, 0);
  lua_settop(L, top);
  return out;
}

}  // namespace shell
