// shell/complete.cpp: Readline tab completion of keywords, globals, fields and methods (trepl's rules).
//
// "sl.me<TAB>" resolves `sl`, then lists its keys and those reachable through the metatable
// __index chain (tables only, at most 20 hops, never calling a function), so C++ userdata
// methods complete too. Suffixes: "." for a table, "(" for a function, ":" for a userdata with
// a metatable. After ":" only functions are offered. Names starting with "_" only once "_" is typed.
// Inside calls: a key of `sl.config{` completes from the engine's config keys (as "key="), and
// a string passed to `t:param("`, `t:visualize("` or `t:shardings("` from t:paths() (the
// closing quote is added once one path is left).
#include <readline/readline.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "engine/train/config.h"
#include "shell/repl.h"

namespace shell {
namespace {

lua_State* g_L = nullptr;  // the state whose globals complete
constexpr int kMaxHops = 20;
const char* const kKeywords[] = {"and", "break", "do", "else", "elseif", "end", "false", "for",
                                 "function", "goto", "if", "in", "local", "nil", "not", "or",
                                 "repeat", "return", "then", "true", "until", "while"};

bool is_identifier(const char* s) {
  if (!(std::isalpha(static_cast<unsigned char>(*s)) || *s == '_')) return false;
  for (; *s; ++s)
    if (!(std::isalnum(static_cast<unsigned char>(*s)) || *s == '_')) return false;
  return true;
}

const char* suffix(lua_State* L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TTABLE: return ".";
    case LUA_TFUNCTION: return "(";
    case LUA_TUSERDATA:
      if (lua_getmetatable(L, idx)) {
        lua_pop(L, 1);
        return ":";
      }
      return "";
    default: return "";
  }
}

// Pushes the table to search after the value at idx: itself if a table, else its
// metatable's __index (if a table). Returns false (pushing nothing) when there is none.
bool push_index_table(lua_State* L, int idx, bool self) {
  if (self && lua_type(L, idx) == LUA_TTABLE) {
    lua_pushvalue(L, idx);
    return true;
  }
  if (!lua_getmetatable(L, idx)) return false;
  lua_pushstring(L, "__index");
  lua_rawget(L, -2);
  if (lua_type(L, -1) == LUA_TTABLE) {
    lua_remove(L, -2);
    return true;
  }
  lua_pop(L, 1);  // __index is a function: types with properties keep their names in __methods
  lua_pushstring(L, "__methods");
  lua_rawget(L, -2);
  lua_remove(L, -2);
  if (lua_type(L, -1) == LUA_TTABLE) return true;
  lua_pop(L, 1);
  return false;
}

// Raw lookup of `key` in the value at idx, following __index tables. Pushes the result (or nil).
void lookup(lua_State* L, int idx, const std::string& key) {
  idx = lua_absindex(L, idx);
  lua_pushvalue(L, idx);
  for (int hop = 0; hop < kMaxHops; ++hop) {
    int cur = lua_gettop(L);
    if (lua_type(L, cur) == LUA_TTABLE) {
      lua_pushlstring(L, key.data(), key.size());
      if (lua_rawget(L, cur) != LUA_TNIL) {
        lua_remove(L, cur);
        return;
      }
      lua_pop(L, 1);
    }
    if (!push_index_table(L, cur, false)) break;
    lua_remove(L, cur);
  }
  lua_pop(L, 1);
  lua_pushnil(L);
}

// Adds prefix + key + suffix for every identifier key of the value at idx (and its __index chain).
void collect(lua_State* L, int idx, const std::string& prefix, const std::string& partial,
             bool methods_only, std::set<std::string>* out) {
  idx = lua_absindex(L, idx);
  bool self = true;
  lua_pushvalue(L, idx);
  for (int hop = 0; hop < kMaxHops; ++hop) {
    int cur = lua_gettop(L);
    if (!push_index_table(L, cur, self)) break;
    self = false;
    int t = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, t) != 0) {
      if (lua_type(L, -2) == LUA_TSTRING) {
        const char* k = lua_tostring(L, -2);
        bool hidden = k[0] == '_' && (partial.empty() || partial[0] != '_');
        if (is_identifier(k) && !hidden && std::strncmp(k, partial.c_str(), partial.size()) == 0 &&
            (!methods_only || lua_type(L, -1) == LUA_TFUNCTION))
          out->insert(prefix + k + suffix(L, -1));
      }
      lua_pop(L, 1);
    }
    lua_remove(L, cur);  // continue from the __index table
  }
  lua_pop(L, 1);
}

std::vector<std::string> candidates(lua_State* L, const std::string& word) {
  std::set<std::string> out;
  int top = lua_gettop(L);
  lua_checkstack(L, 2 * kMaxHops + 20);
  size_t sep = word.find_last_of(".:");
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  if (sep == std::string::npos) {
    for (const char* k : kKeywords)
      if (std::strncmp(k, word.c_str(), word.size()) == 0) out.insert(k);
    collect(L, -1, "", word, false, &out);
  } else {
    // Resolve "a.b:c" -> a, then b, from the globals.
    std::string path = word.substr(0, sep);
    size_t start = 0;
    bool ok = true;
    while (ok && start <= path.size()) {
      size_t end = path.find_first_of(".:", start);
      if (end == std::string::npos) end = path.size();
      std::string key = path.substr(start, end - start);
      ok = !key.empty();
      if (ok) {
        lookup(L, -1, key);
        lua_remove(L, -2);
        ok = lua_type(L, -1) == LUA_TTABLE || lua_type(L, -1) == LUA_TUSERDATA;
      }
      start = end + 1;
    }
    if (ok) collect(L, -1, word.substr(0, sep + 1), word.substr(sep + 1), word[sep] == ':', &out);
  }
  lua_settop(L, top);
  return {out.begin(), out.end()};
}

// ---- Inside calls ------------------------------------------------------------------------------

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// line[0, pos) without trailing blanks.
std::string before(const std::string& line, size_t pos) {
  while (pos > 0 && std::isspace(static_cast<unsigned char>(line[pos - 1]))) --pos;
  return line.substr(0, pos);
}

// The innermost '{' before pos that is still open there (quoted text skipped), or npos.
size_t open_brace(const std::string& line, size_t pos) {
  std::vector<size_t> open;
  char quote = 0;
  for (size_t i = 0; i < pos; ++i) {
    const char c = line[i];
    if (quote != 0) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '{') {
      open.push_back(i);
    } else if (c == '}' && !open.empty()) {
      open.pop_back();
    }
  }
  return open.empty() ? std::string::npos : open.back();
}

// `sl.config{steps = 10, learn`: the word at start is a key of sl.config's table (not a value).
bool is_config_key(const std::string& line, size_t start) {
  const std::string b = before(line, start);
  if (b.empty() || (b.back() != '{' && b.back() != ',')) return false;
  const size_t brace = open_brace(line, start);
  if (brace == std::string::npos) return false;
  const std::string callee = before(line, brace);
  constexpr std::string_view kCallee = "sl.config";
  return ends_with(callee, kCallee) &&
         (callee.size() == kCallee.size() || !is_name_char(callee[callee.size() - kCallee.size() - 1]));
}

// `t:param("params/dec`: the receiver's name ("t", "runs.t") when the word at start opens the
// string argument of :param, :visualize or :shardings; "" otherwise.
std::string path_receiver(const std::string& line, size_t start) {
  if (start == 0 || (line[start - 1] != '"' && line[start - 1] != '\'')) return "";
  std::string b = before(line, start - 1);
  if (b.empty() || b.back() != '(') return "";
  b = before(b, b.size() - 1);
  for (std::string_view method : {":param", ":visualize", ":shardings"}) {
    if (!ends_with(b, method)) continue;
    const std::string receiver = b.substr(0, b.size() - method.size());
    size_t i = receiver.size();
    while (i > 0 && (is_name_char(receiver[i - 1]) || receiver[i - 1] == '.')) --i;
    return receiver.substr(i);
  }
  return "";
}

// Pushes the value named by "a.b.c" from the globals (raw lookups, __index tables followed;
// nil when a step is missing).
void push_named(lua_State* L, const std::string& name) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  for (size_t start = 0; start <= name.size();) {
    size_t end = name.find('.', start);
    if (end == std::string::npos) end = name.size();
    const int t = lua_type(L, -1);
    if (end == start || (t != LUA_TTABLE && t != LUA_TUSERDATA)) {
      lua_pop(L, 1);
      lua_pushnil(L);
      return;
    }
    lookup(L, -1, name.substr(start, end - start));
    lua_remove(L, -2);
    start = end + 1;
  }
}

// The paths of receiver:paths() (a Trainer's state) starting with partial; none on any error.
std::vector<std::string> path_candidates(lua_State* L, const std::string& receiver, const std::string& partial) {
  std::vector<std::string> out;
  const int top = lua_gettop(L);
  static const char kCall[] = "local o = ... return o:paths()";
  push_named(L, receiver);
  if (lua_type(L, -1) == LUA_TUSERDATA && luaL_loadstring(L, kCall) == LUA_OK) {
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TTABLE) {
      const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, -1));
      for (lua_Integer i = 1; i <= n; ++i) {
        if (lua_rawgeti(L, -1, i) == LUA_TSTRING) {
          std::string p = lua_tostring(L, -1);
          if (p.compare(0, partial.size(), partial) == 0) out.push_back(std::move(p));
        }
        lua_pop(L, 1);
      }
    }
  }
  lua_settop(L, top);
  return out;
}

std::vector<std::string> config_key_candidates(const std::string& partial) {
  std::set<std::string> out;
  for (const eng::ConfigKey& k : eng::config_keys())
    if (k.name.substr(0, partial.size()) == partial) out.insert(std::string(k.name) + "=");
  return {out.begin(), out.end()};
}

char* dup(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

char** complete(const char* text, int start, int end) {
  rl_attempted_completion_over = 1;  // never fall back to file names
  rl_completion_suppress_append = 1; // we add our own suffixes
  if (g_L == nullptr) return nullptr;
  const std::string line(rl_line_buffer, static_cast<size_t>(end));
  const size_t at = static_cast<size_t>(start);
  size_t quote = at;  // '/' breaks words: a path string starts after its quote
  while (quote > 0 && (is_name_char(line[quote - 1]) || std::strchr("/.-", line[quote - 1]))) --quote;
  const std::string receiver = path_receiver(line, quote);
  std::vector<std::string> matches;
  if (!receiver.empty()) {
    for (const std::string& p : path_candidates(g_L, receiver, line.substr(quote)))
      matches.push_back(p.substr(at - quote));  // Readline replaces only the text after `at`
  } else {
    matches = is_config_key(line, at) ? config_key_candidates(text) : candidates(g_L, text);
  }
  if (matches.empty()) return nullptr;
  if (!receiver.empty() && matches.size() == 1) matches[0] += line[quote - 1];  // close the string
  // Readline wants [common prefix, match1, match2, ..., NULL].
  std::string common = matches[0];
  for (const std::string& m : matches) {
    size_t i = 0;
    while (i < common.size() && i < m.size() && common[i] == m[i]) ++i;
    common.resize(i);
  }
  auto** out = static_cast<char**>(std::malloc((matches.size() + 2) * sizeof(char*)));
  size_t n = 0;
  out[n++] = dup(matches.size() == 1 ? matches[0] : common);
  if (matches.size() > 1)
    for (const std::string& m : matches) out[n++] = dup(m);
  out[n] = nullptr;
  return out;
}

}  // namespace

void install_completion(lua_State* L) {
  g_L = L;
  rl_attempted_completion_function = complete;
  static char breaks[] = " \t\n\"\\'><=;+-*/%^~#{}()[],";
  rl_basic_word_break_characters = breaks;
}

}  // namespace shell
