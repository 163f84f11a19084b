// tests/fuzz/lua_args_fuzz.cpp: argument parsing of sl.config, sl.mesh and sl.P with Lua
// values decoded from the fuzz bytes (nil, booleans, boundary integers, floats, strings, known
// key names, nested tables), called inside lua_pcall in a state with the shardlab bindings
// (shell/bindings.h). A result or a Lua error are both fine; a crash, an abort or a hang not.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <lua.hpp>

#include "shell/bindings.h"
#include "shell/context.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

constexpr const char* kNames[] = {
    "vocab_size", "steps", "base_num_decoder_layers", "per_device_batch_size",
    "max_target_length", "run_name", "base_emb_dim", "model_name", "learning_rate",
    "enable_checkpointing", "checkpoint_period", "log_period", "ici_fsdp_parallelism",
    "dtype", "data", "fsdp", "tensor", "devices", "axis_types", "stage", "sequence", "expert",
    "Explicit", "Auto", "llama-tiny", "max_inflight_steps", "global_batch_size"};
constexpr int kNumNames = sizeof(kNames) / sizeof(kNames[0]);

struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t byte() { return n == 0 ? 0 : (--n, *p++); }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | byte();
    return v;
  }
};

void push_value(lua_State* L, Reader& r, int depth) {
  switch (r.byte() % 8) {
    case 0: lua_pushnil(L); break;
    case 1: lua_pushboolean(L, r.byte() & 1); break;
    case 2: lua_pushinteger(L, static_cast<lua_Integer>(r.u64())); break;
    case 3: lua_pushinteger(L, static_cast<int8_t>(r.byte())); break;
    case 4: {
      const uint64_t bits = r.u64();
      double d;
      std::memcpy(&d, &bits, sizeof d);
      lua_pushnumber(L, d);
      break;
    }
    case 5: {
      std::string s;
      for (int len = r.byte() % 24; len > 0; --len) s += static_cast<char>(r.byte());
      lua_pushlstring(L, s.data(), s.size());
      break;
    }
    case 6: lua_pushstring(L, kNames[r.byte() % kNumNames]); break;
    default:
      if (depth >= 2) {
        lua_pushnil(L);
        break;
      }
      lua_newtable(L);
      for (int i = r.byte() % 6; i > 0 && r.n > 0; --i) {
        if (r.byte() % 3 == 0) lua_pushinteger(L, i);  // array part
        else push_value(L, r, depth + 1);              // any key, names most often
        if (lua_isnil(L, -1) || (lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) !=
                                                                         lua_tonumber(L, -1))) {
          lua_pop(L, 1);
          continue;
        }
        push_value(L, r, depth + 1);
        lua_rawset(L, -3);
      }
  }
}

lua_State* shared_state() {
  static shell::ShellContext ctx;
  static lua_State* L = [] {
    ctx.db_path = ":memory:";
    lua_State* s = luaL_newstate();
    luaL_openlibs(s);
    lua_pushcfunction(s, [](lua_State* l) -> int {
      shell::open_shardlab(l, static_cast<shell::ShellContext*>(lua_touserdata(l, 1)));
      return 0;
    });
    lua_pushlightuserdata(s, &ctx);
    if (lua_pcall(s, 1, 0, 0) != LUA_OK) std::abort();
    return s;
  }();
  return L;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lua_State* L = shared_state();
  Reader r{data, size};
  static constexpr const char* kFunctions[] = {"config", "mesh", "P"};
  lua_getglobal(L, "sl");
  lua_getfield(L, -1, kFunctions[r.byte() % 3]);
  int nargs = 0;
  for (int want = 1 + r.byte() % 4; nargs < want && (nargs == 0 || r.n > 0); ++nargs)
    push_value(L, r, 0);
  const int rc = lua_pcall(L, nargs, LUA_MULTRET, 0);  // an error is a fine answer
  if (std::getenv("SHARDLAB_FUZZ_VERBOSE") != nullptr)
    std::fprintf(stderr, "%s: %s\n", rc == LUA_OK ? "ok" : "error", luaL_tolstring(L, -1, nullptr));
  lua_settop(L, 0);
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}

namespace eng::fuzz {

std::vector<std::string> seed_inputs() {
  // Function byte, argument count byte, then one table of (key tag, name index, value) pairs.
  auto table_call = [](char fn, std::initializer_list<std::pair<int, int>> kv) {
    std::string s{fn, 0, 7, static_cast<char>(kv.size())};
    for (auto [name, value] : kv) {
      s += std::string{6, static_cast<char>(name)};   // key: a known name (the 1 % 3 != 0 byte)
      s.insert(s.size() - 2, 1, 1);
      s += std::string{3, static_cast<char>(value)};  // value: a small integer
    }
    return s;
  };
  return {table_call(0, {{0, 64}, {1, 3}, {2, 1}}), table_call(1, {{15, 2}, {17, 4}}),
          std::string{2, 2, 6, 14, 6, 15}, std::string{2, 1, 5, 3, 'x', 'y', 'z'}};
}

}  // namespace eng::fuzz
