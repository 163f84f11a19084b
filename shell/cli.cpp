// shell/cli.cpp: option parsing and the protected main, following lua.c (5.4) so `lua` users feel at home.
#include "shell/cli.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/tensor/blas.h"
#include "engine/tensor/system_info.h"
#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/interrupt.h"
#include "shell/lua_binding.h"
#include "shell/notebook.h"
#include "shell/repl.h"
#include "shell/search.h"
#include "shell/train_compile.h"

namespace shell {
namespace {

constexpr const char* kProgname = "shardlab";

// The options, as data: the usage text is generated from this table.
struct OptionHelp {
  const char* flag;  // as typed
  const char* help;  // one line
};
constexpr OptionHelp kOptions[] = {
    {"-e stat", "execute string 'stat'"},
    {"-i", "enter interactive mode after executing 'script'"},
    {"-l mod", "require library 'mod' into global 'mod'"},
    {"-l g=mod", "require library 'mod' into global 'g'"},
    {"-v", "show version information"},
    {"--version", "show the version, the CPU, the BLAS core and the kernel paths, and exit"},
    {"-E", "ignore environment variables (LUA_INIT, LUA_PATH, LUA_CPATH)"},
    {"-W", "turn warnings on"},
    {"--db PATH", "metrics store (default $SHARDLAB_DB or ./shardlab.db)"},
    {"--notebook F", "run notebook F (cells: -- %%) and write a report; see docs/notebook.md"},
    {"  -o REPORT", "  with --notebook: the report (default <F's stem>.report.md; *.html: HTML only)"},
    {"  --html", "  with --notebook: also write the report as one HTML page"},
    {"  -p name=value", "  with --notebook: set a parameter (also -p name value; repeatable)"},
    {"  --allow-errors", "  with --notebook: run every cell even after one fails"},
    {"  --resume", "  with --notebook: reuse the stored outputs of unchanged `cache` cells"},
    {"-h, --help", "show this help"},
    {"--", "stop handling options"},
    {"-", "stop handling options and execute stdin"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: %s [options] [script [args]]\nAvailable options are:\n", kProgname);
  for (const OptionHelp& o : kOptions) std::fprintf(out, "  %-16s %s\n", o.flag, o.help);
  std::fprintf(out,
               "Commands:\n"
               "  %s train_compile <config.yml> [key=value ...] [--shardings]\n"
               "                   MaxText's train_compile on MaxText's YAML: a shape-only plan\n"
               "                   for compile_topology; exit 1 when it does not fit\n"
               "  %s search <config.yml> [key=value ...] --vary KEY=V1,V2,... [--vary mesh=AXES]\n"
               "                   plan every mesh x value on compile_topology, rank what fits\n"
               "                   (search --help; docs/train_compile.md)\n",
               kProgname, kProgname);
  std::fflush(out);
}

void print_version() {
  std::printf("shardlab 0.1 (%s)\n", LUA_COPYRIGHT);
  std::fflush(stdout);
}

// --version: the banner, then what this process runs on (a slow run explains itself).
void print_full_version() {
  print_version();
  std::fputs(eng::system_info_text().c_str(), stdout);
  std::fflush(stdout);
}

// What the command line asked for. Parsed before Lua starts, so parsing never raises.
struct Options {
  bool interactive = false;  // -i
  bool version = false;      // -v (or -i)
  bool ignore_env = false;   // -E
  bool has_e = false;        // any -e
  bool help = false;         // -h / --help
  bool full_version = false; // --version
  bool notebook = false;     // --notebook: notebook mode parses the whole command line itself
  std::string db;            // --db
  int script = 0;            // argv index of the script ("-" = stdin), 0 if none
  int first_action = 1;      // argv index where -e/-l/-W scanning starts
  int options_end = 1;       // argv index after the last option
  std::string error;         // non-empty: print it and the usage, exit 1
};

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  auto needs_arg = [&](const char* opt) {
    o.error = fmt::format("'{}' needs argument", opt);
  };
  for (; i < argc; ++i) {
    const char* a = argv[i];
    if (a[0] != '-') break;  // the script
    if (std::strcmp(a, "--") == 0) {
      ++i;
      break;
    }
    if (std::strcmp(a, "-") == 0) break;  // stdin as the script
    if (std::strcmp(a, "-h") == 0 || std::strcmp(a, "--help") == 0) {
      o.help = true;
    } else if (std::strcmp(a, "--version") == 0) {
      o.full_version = true;
    } else if (std::strcmp(a, "--db") == 0) {
      if (i + 1 >= argc) return needs_arg(a), o;
      o.db = argv[++i];
    } else if (std::strncmp(a, "--db=", 5) == 0) {
      o.db = a + 5;
    } else if (std::strcmp(a, "--notebook") == 0 || std::strncmp(a, "--notebook=", 11) == 0) {
      o.notebook = true;
      return o;
    } else if (std::strcmp(a, "-i") == 0) {
      o.interactive = o.version = true;
    } else if (std::strcmp(a, "-v") == 0) {
      o.version = true;
    } else if (std::strcmp(a, "-E") == 0) {
      o.ignore_env = true;
    } else if (std::strcmp(a, "-W") == 0) {
    } else if (a[1] == 'e' || a[1] == 'l') {
      if (a[1] == 'e') o.has_e = true;
      if (a[2] == '\0') {
        if (i + 1 >= argc || argv[i + 1][0] == '-') return needs_arg(a), o;
        ++i;
      }
    } else {
      o.error = fmt::format("unrecognized option '{}'", a);
      return o;
    }
  }
  o.options_end = i;
  o.script = i < argc ? i : 0;
  return o;
}

// Runs a loaded chunk (or reports the load error).
int dochunk(lua_State* L, int status) {
  if (status == LUA_OK) status = docall(L, 0, 0);
  return report(L, status, kProgname);
}

int dostring(lua_State* L, const char* s, const char* name) {
  return dochunk(L, luaL_loadbuffer(L, s, std::strlen(s), name));
}

// -l mod or -l g=mod: g = require(mod).
int dolibrary(lua_State* L, const char* spec) {
  std::string global = spec, mod = spec;
  if (const char* eq = std::strchr(spec, '=')) {
    global.assign(spec, eq - spec);
    mod = eq + 1;
  }
  lua_getglobal(L, "require");
  lua_pushstring(L, mod.c_str());
  int status = docall(L, 1, 1);
  if (status == LUA_OK) lua_setglobal(L, global.c_str());
  return report(L, status, kProgname);
}

int handle_luainit(lua_State* L) {
  const char* name = "=LUA_INIT_5_4";
  const char* init = std::getenv("LUA_INIT_5_4");
  if (init == nullptr) {
    name = "=LUA_INIT";
    init = std::getenv("LUA_INIT");
  }
  if (init == nullptr) return LUA_OK;
  if (init[0] == '@') return dochunk(L, luaL_loadfile(L, init + 1));
  return dostring(L, init, name);
}

// arg[0] = script, arg[1..] = its arguments, negative indices = interpreter and options.
void create_arg_table(lua_State* L, char** argv, int argc, int script) {
  lua_createtable(L, argc - script - 1 > 0 ? argc - script - 1 : 0, script + 1);
  for (int i = 0; i < argc; ++i) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

// -e, -l and -W, in command-line order.
bool run_actions(lua_State* L, char** argv, const Options& o) {
  for (int i = 1; i < o.options_end; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--db") == 0) {
      ++i;
      continue;
    }
    if (a[0] != '-' || (a[1] != 'e' && a[1] != 'l' && a[1] != 'W') ||
        std::strncmp(a, "--", 2) == 0)
      continue;
    if (a[1] == 'W') {
      lua_warning(L, "@on", 0);
      continue;
    }
    const char* extra = a[2] != '\0' ? a + 2 : argv[++i];
    int status = a[1] == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
    if (status != LUA_OK) return false;
  }
  return true;
}

int handle_script(lua_State* L, char** argv, int script) {
  const char* fname = argv[script];
  if (std::strcmp(fname, "-") == 0 && std::strcmp(argv[script - 1], "--") != 0) fname = nullptr;
  int status = luaL_loadfile(L, fname);
  if (status == LUA_OK) {
    lua_getglobal(L, "arg");
    int n = static_cast<int>(luaL_len(L, -1));
    luaL_checkstack(L, n + 3, "too many arguments to script");
    for (int i = 1; i <= n; ++i) lua_rawgeti(L, -i, i);
    lua_remove(L, -n - 1);  // the arg table
    status = docall(L, n, LUA_MULTRET);
  }
  return report(L, status, kProgname);
}

struct MainArgs {
  int argc;
  char** argv;
  const Options* options;
  ShellContext* ctx;
};

// lua.c's pmain: runs inside lua_pcall; pushes true when everything succeeded.
int pmain_body(lua_State* L) {
  auto* m = static_cast<MainArgs*>(lua_touserdata(L, 1));
  const Options& o = *m->options;
  luaL_checkversion(L);
  if (o.ignore_env) {
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  luaL_openlibs(L);
  open_shardlab(L, m->ctx);
  create_arg_table(L, m->argv, m->argc, o.script);
  lua_gc(L, LUA_GCRESTART);
  lua_gc(L, LUA_GCGEN, 0, 0);
  if (o.version) print_version();
  if (!o.ignore_env && handle_luainit(L) != LUA_OK) return 0;
  if (!run_actions(L, m->argv, o)) return 0;
  if (o.script > 0) {
    // key=value arguments override every sl.config of the script (MaxText's argv).
    auto overrides = script_config_overrides(std::span(m->argv + o.script + 1, m->argv + m->argc));
    if (!overrides.ok()) {
      lua_pushstring(L, overrides.status().message().c_str());
      return report(L, LUA_ERRRUN, kProgname), 0;
    }
    m->ctx->arg_overrides = *std::move(overrides);
    if (handle_script(L, m->argv, o.script) != LUA_OK) return 0;
    if (!m->ctx->arg_overrides.empty() && !m->ctx->arg_overrides_applied) {
      std::string given;
      for (const eng::ConfigOverride& a : m->ctx->arg_overrides) given += " " + a.token;
      lua_pushstring(L, fmt::format("script arguments{} were not applied: the script made no "
                                    "sl.config (they override a script's config)",
                                    given).c_str());
      return report(L, LUA_ERRRUN, kProgname), 0;
    }
  }
  if (o.interactive) {
    run_repl(L);
  } else if (o.script == 0 && !o.has_e && !o.version) {
    if (interactive_input()) {
      print_version();
      run_repl(L);
    } else if (dochunk(L, load_stdin(L)) != LUA_OK) {
      return 0;
    }
  }
  lua_pushboolean(L, 1);
  return 1;
}

int pmain(lua_State* L) { return call_guarded_main(L, pmain_body); }

}  // namespace

int run_main(int argc, char** argv) {
  install_terminate_handler();  // SIGTERM ends runs KILLED, at once (shell/interrupt.h)
  if (argc > 1 && std::strcmp(argv[1], "train_compile") == 0) return run_train_compile(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "search") == 0) return run_search(argc, argv);
  Options o = parse(argc, argv);
  if (o.notebook) return run_notebook_cli(argc, argv);
  if (!o.error.empty()) {
    std::fprintf(stderr, "%s: %s\n", kProgname, o.error.c_str());
    print_usage(stderr);
    return EXIT_FAILURE;
  }
  if (o.help) {
    print_usage(stdout);
    return EXIT_SUCCESS;
  }
  // OpenBLAS's core is chosen when it loads (engine/tensor/blas.h): a bad
  // SHARDLAB_OPENBLAS_CORETYPE is reported here, before anything loads it.
  if (eng::Status s = eng::check_blas_environment(); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgname, s.message().c_str());
    return EXIT_FAILURE;
  }
  eng::blas_info();  // load it now, before any other thread reads the environment
  if (o.full_version) {
    print_full_version();
    return EXIT_SUCCESS;
  }
  ShellContext ctx;
  if (!o.db.empty()) ctx.db_path = o.db;
  else if (const char* env = std::getenv("SHARDLAB_DB"); env && *env) ctx.db_path = env;
  const char* term = std::getenv("TERM");
  ctx.color = isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr &&
              !(term && std::strcmp(term, "dumb") == 0);

  lua_State* L = luaL_newstate();
  if (L == nullptr) {
    std::fprintf(stderr, "%s: cannot create state: not enough memory\n", kProgname);
    return EXIT_FAILURE;
  }
  MainArgs args{argc, argv, &o, &ctx};
  lua_gc(L, LUA_GCSTOP);
  lua_pushcfunction(L, pmain);
  lua_pushlightuserdata(L, &args);
  int status = lua_pcall(L, 1, 1, 0);
  bool ok = lua_toboolean(L, -1);
  report(L, status, kProgname);
  if (!ok || status != LUA_OK) fail_open_runs(L, last_reported_error());  // runs end FAILED
  lua_close(L);  // runs __gc before ctx (and its store) goes away
  if (ctx.store) {
    eng::Status s = ctx.store->flush();
    if (!s.ok()) std::fprintf(stderr, "%s: %s\n", kProgname, s.message().c_str());
  }
  finish_terminate();  // after SIGTERM: end by it, now that every run is recorded
  return (ok && status == LUA_OK) ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace shell
