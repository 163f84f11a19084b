// shell/notebook.cpp: runs notebook cells in one Lua state with fd-level output capture; the --notebook command and the REPL's %run.
#include "shell/notebook.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/dist/dist.h"
#include "shell/bindings.h"
#include "shell/repl.h"
#include "shell/context.h"
#include "shell/interrupt.h"
#include "shell/lua_binding.h"
#include "shell/pretty.h"

namespace shell {
namespace {

constexpr const char* kSinkKey = "shardlab.notebook.sink";  // registry: lightuserdata Capture*

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Redirects fds 1 and 2 into one temporary file while a cell runs, so Lua's print, io.write
// and the engine's C/C++ writes (from any thread) all land in the cell, in order.
class Capture {
 public:
  Capture() {
    char path[] = "/tmp/shardlab-cell-XXXXXX";
    fd_ = mkstemp(path);
    if (fd_ >= 0) unlink(path);
    std::fflush(stdout);
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);  // io.write and C++ printf keep their order with stderr
  }
  ~Capture() {
    end();
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

  void begin() {
    std::fflush(stdout);
    std::fflush(stderr);
    if (ftruncate(fd_, 0) != 0) return;
    lseek(fd_, 0, SEEK_SET);
    read_ = 0;
    saved_out_ = dup(STDOUT_FILENO);
    saved_err_ = dup(STDERR_FILENO);
    dup2(fd_, STDOUT_FILENO);
    dup2(fd_, STDERR_FILENO);
    active_ = true;
  }
  // Everything written since the last take().
  std::string take() {
    std::fflush(stdout);
    std::fflush(stderr);
    std::string out;
    char buf[65536];
    for (;;) {
      ssize_t n = pread(fd_, buf, sizeof buf, static_cast<off_t>(read_));
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      read_ += static_cast<size_t>(n);
    }
    return out;
  }
  void end() {
    if (!active_) return;
    std::fflush(stdout);
    std::fflush(stderr);
    dup2(saved_out_, STDOUT_FILENO);
    dup2(saved_err_, STDERR_FILENO);
    close(saved_out_);
    close(saved_err_);
    active_ = false;
  }

  // plot.show while a cell runs: the text so far, then the image.
  std::vector<Output>* outputs = nullptr;

 private:
  int fd_ = -1;
  int saved_out_ = -1, saved_err_ = -1;
  size_t read_ = 0;
  bool active_ = false;
};

void append_text(std::vector<Output>* outs, std::string text) {
  if (text.empty()) return;
  if (!outs->empty() && outs->back().kind == Output::kText) outs->back().data += text;
  else outs->push_back({Output::kText, std::move(text)});
}

// Out[n] = value in the global table Out (created on first use), raw access only.
void set_out(lua_State* L, int n, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  lua_pushstring(L, "Out");
  if (lua_rawget(L, -2) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushstring(L, "Out");
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  lua_pushvalue(L, idx);
  lua_rawseti(L, -2, n);
  lua_pop(L, 2);
}

// Rows (an array of flat tables, e.g. sl.sql's result) become a table in the report: columns
// from rows.columns (sl.sql), else every row's string keys: non-numeric ones (labels) first,
// then the numeric ones, each group sorted by name.
bool table_value(lua_State* L, int idx, CellValue* v) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE || lua_rawlen(L, idx) == 0 || lua_rawlen(L, idx) > 500) return false;
  std::vector<std::string> cols;
  if (lua_getmetatable(L, idx)) {
    lua_pushstring(L, "__index");
    if (lua_rawget(L, -2) == LUA_TTABLE) {
      lua_pushstring(L, "columns");
      if (lua_rawget(L, -2) == LUA_TTABLE)
        for (lua_Integer i = 1; lua_rawgeti(L, -1, i) == LUA_TSTRING; ++i, lua_pop(L, 1))
          cols.emplace_back(lua_tostring(L, -1));
      lua_pop(L, 2);  // the nil that ended the loop (or columns), then columns
    }
    lua_pop(L, 2);
  }
  const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, idx));
  const bool given = !cols.empty();
  std::set<std::string> numeric;  // columns holding a number in some row
  for (lua_Integer i = 1; i <= n; ++i) {  // every row a table of scalars under string keys
    if (lua_rawgeti(L, idx, i) != LUA_TTABLE || lua_rawlen(L, -1) != 0) return lua_pop(L, 1), false;
    std::vector<std::string> keys;
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {
      int t = lua_type(L, -1);
      bool scalar = t == LUA_TNUMBER || t == LUA_TSTRING || t == LUA_TBOOLEAN;
      if (lua_type(L, -2) != LUA_TSTRING || !scalar) return lua_pop(L, 3), false;
      keys.emplace_back(lua_tostring(L, -2));
      if (t == LUA_TNUMBER) numeric.insert(keys.back());
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    for (const std::string& k : keys)
      if (!given && std::find(cols.begin(), cols.end(), k) == cols.end()) cols.push_back(k);
  }
  if (!given)  // labels (non-numeric columns) first, then numbers; each group sorted by name
    std::sort(cols.begin(), cols.end(), [&](const std::string& a, const std::string& b) {
      bool na = numeric.count(a) > 0, nb = numeric.count(b) > 0;
      return na != nb ? nb : a < b;
    });
  if (cols.empty()) return false;
  PrettyOptions plain;
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, idx, i);
    std::vector<std::string> row;
    for (const std::string& c : cols) {
      lua_pushstring(L, c.c_str());
      lua_rawget(L, -2);
      row.push_back(lua_isnil(L, -1) ? "" : lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : pretty(L, -1, plain));
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    v->rows.push_back(std::move(row));
  }
  v->columns = std::move(cols);
  return true;
}

// The results on the stack above `base` as the report's value.
CellValue describe_results(lua_State* L, int base) {
  CellValue v;
  int n = lua_gettop(L) - base;
  PrettyOptions plain;
  for (int i = 1; i <= n; ++i) v.text += (i > 1 ? "\t" : "") + pretty(L, base + i, plain);
  if (n == 1 && lua_type(L, base + 1) == LUA_TSTRING) {
    size_t len = 0;
    const char* s = lua_tolstring(L, base + 1, &len);
    if (is_svg({s, len})) v.svg.assign(s, len);
  }
  // A value that draws itself (t:pipeline(): its metatable's __svg string) shows the drawing.
  if (n == 1 && luaL_getmetafield(L, base + 1, "__svg") != LUA_TNIL) {
    size_t len = 0;
    const char* s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : nullptr;
    if (s != nullptr && is_svg({s, len})) v.svg.assign(s, len);
    lua_pop(L, 1);
  }
  if (n == 1 && v.svg.empty()) table_value(L, base + 1, &v);
  return v;
}

std::string cell_label(const Cell& c) {
  return c.injected ? "the injected-parameters cell" : fmt::format("the cell at line {}", c.first_line);
}

std::string base_name(const std::string& path) {
  size_t s = path.find_last_of('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

eng::Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return eng::invalid_argument("notebook: cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

eng::Status write_file(const std::string& path, const std::string& text) {
  std::error_code ec;  // create the report's directory if needed (like `mkdir -p`)
  if (std::filesystem::path parent = std::filesystem::path(path).parent_path(); !parent.empty())
    std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !(out << text) || !out.flush()) return eng::invalid_argument("notebook: cannot write '{}'", path);
  return eng::Status();
}

// os.exit inside a notebook records its code and raises: the cell stops, run_cells stops the
// notebook after it and the report is still written (the process then exits with the code).
// Recorded in the registry, so a pcall around os.exit cannot hide it.
constexpr const char* kExitKey = "shardlab.notebook_exit";

int notebook_os_exit(lua_State* L) {
  int code = EXIT_SUCCESS;
  if (lua_isboolean(L, 1)) code = lua_toboolean(L, 1) ? EXIT_SUCCESS : EXIT_FAILURE;
  else if (!lua_isnoneornil(L, 1)) code = static_cast<int>(luaL_checkinteger(L, 1));
  lua_pushinteger(L, code);
  lua_setfield(L, LUA_REGISTRYINDEX, kExitKey);
  return luaL_error(L, "os.exit(%d): the notebook stops here", code);
}

std::optional<int> take_exit_request(lua_State* L) {
  std::optional<int> code;
  if (lua_getfield(L, LUA_REGISTRYINDEX, kExitKey) == LUA_TNUMBER) code = static_cast<int>(lua_tointeger(L, -1));
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, kExitKey);
  return code;
}

// Under mpirun every process runs each cell (docs/distributed.md): once the steps it
// dispatched have run (a step's error is the cell's), every process learns the others' errors,
// so all stop at the same cell; the cell's error (process 0's report) names each other
// process's: `process 1: <message>` or `process 1: the same error`.
void merge_process_errors(lua_State* L, CellRun* r) {
  if (eng::dist::process().count == 1) return;
  if (std::string step_error = settle_steps(L); !step_error.empty() && r->error.empty())
    r->error = std::move(step_error);
  std::vector<std::string> all;
  const eng::Status s = eng::dist::end_line(process_outcome(!r->error.empty(), r->error), &all);
  if (!s.ok()) {
    r->error += (r->error.empty() ? "" : "\n") + s.message();
    return;
  }
  std::string others = other_process_errors(all);
  if (others.empty()) return;
  others.pop_back();  // the last line's newline
  r->error += (r->error.empty() ? "" : "\n") + others;
}

// The notebook's text: under mpirun process 0 reads the file and every process gets its text
// (or its error), so only process 0's host needs the file.
eng::Result<std::string> read_notebook(const std::string& path) {
  if (eng::dist::process().count == 1) return read_file(path);
  int ok = 0;
  std::string text;
  if (eng::dist::process().index == 0) {
    eng::Result<std::string> r = read_file(path);
    ok = r.ok();
    text = r.ok() ? std::move(*r) : r.status().message();
  }
  ENG_RETURN_IF_ERROR(eng::dist::broadcast_from_first(&ok, &text));
  if (!ok) return eng::Status(eng::Code::kNotFound, text);
  return text;
}

// Runs the cells with capture; stops at the first error unless allowed. Returns true if no
// disallowed error happened.
// `reuse` (--resume) holds, by cell number, results to show instead of running the cell.
bool run_cells(lua_State* L, const std::vector<Cell>& cells, const std::string& chunkname, bool allow_errors,
               const std::vector<std::pair<int, CellRun>>& reuse, std::vector<CellRun>* runs, ReportInfo* info) {
  Capture cap;
  if (!cap.ok()) {
    info->ok = false;
    info->failed_at = "setup (cannot create a capture file in /tmp)";
    return false;
  }
  lua_pushlightuserdata(L, &cap);
  lua_setfield(L, LUA_REGISTRYINDEX, kSinkKey);
  bool stopped = false;
  int count = 0;
  const int top = lua_gettop(L);
  for (const Cell& cell : cells) {
    CellRun r;
    r.cell = &cell;
    if (cell.kind != CellKind::kCode || cell.skip) {
      runs->push_back(std::move(r));
      continue;
    }
    if (stopped) {
      (info->exit_code >= 0 ? r.not_run_after_exit : r.not_run_after_error) = true;
      runs->push_back(std::move(r));
      continue;
    }
    r.count = ++count;
    if (auto it = std::find_if(reuse.begin(), reuse.end(), [&](const auto& p) { return p.first == count; });
        it != reuse.end()) {
      r = it->second;
      r.cell = &cell;
      runs->push_back(std::move(r));
      continue;
    }
    r.ran = true;
    cap.outputs = &r.outputs;
    const double t0 = now_s();
    cap.begin();
    int status = load_cell(L, cell, chunkname);
    if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
    r.seconds = now_s() - t0;
    if (status != LUA_OK) {
      const char* msg = lua_tostring(L, -1);
      r.error = msg ? msg : "(error object is not a string)";
    } else if (lua_gettop(L) > top) {
      r.has_value = true;
      r.value = describe_results(L, top);
      set_global_raw(L, "_", top + 1);
      set_out(L, r.count, top + 1);
    }
    merge_process_errors(L, &r);
    append_text(&r.outputs, cap.take());
    cap.end();
    cap.outputs = nullptr;
    lua_settop(L, top);
    if (std::optional<int> code = take_exit_request(L)) {  // os.exit: stop here, still report
      r.error = fmt::format("os.exit({}) called: the notebook stops here", *code);
      stopped = true;
      info->exit_code = *code;
      info->ok = *code == 0;
      info->failed_at = fmt::format("In [{}] ({}: os.exit({}))", r.count, cell_label(cell), *code);
      std::fprintf(stderr, "shardlab: notebook: %s called os.exit(%d)\n", cell_label(cell).c_str(), *code);
    } else if (!r.error.empty()) {
      bool allowed = allow_errors || cell.allow_error;
      std::fprintf(stderr, "shardlab: notebook: %s failed%s: %s\n", cell_label(cell).c_str(),
                   allowed ? " (allowed)" : "", r.error.substr(0, r.error.find('\n')).c_str());
      if (!allowed) {
        stopped = true;
        info->ok = false;
        info->failed_at = fmt::format("In [{}] ({})", r.count, cell_label(cell));
        fail_open_runs(L, r.error);  // the error ends the notebook: its open runs end FAILED
      }
    }
    if (shell_terminate_requested() && !stopped) {  // SIGTERM: no further cell runs
      stopped = true;
      info->ok = false;
      info->failed_at = fmt::format("In [{}] ({}: SIGTERM)", r.count, cell_label(cell));
    }
    runs->push_back(std::move(r));
  }
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, kSinkKey);
  return !stopped;
}

struct NotebookArgs {
  std::string file, out, db;
  bool html = false, allow_errors = false, resume = false;
  std::vector<std::pair<std::string, std::string>> params;
  std::string error;
};

NotebookArgs parse_args(int argc, char** argv) {
  NotebookArgs a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](const char* opt) -> std::string {
      if (i + 1 >= argc) {
        a.error = fmt::format("'{}' needs argument", opt);
        return "";
      }
      return argv[++i];
    };
    if (s == "--notebook") a.file = value("--notebook");
    else if (s.rfind("--notebook=", 0) == 0) a.file = s.substr(11);
    else if (s == "-o") a.out = value("-o");
    else if (s == "--db") a.db = value("--db");
    else if (s.rfind("--db=", 0) == 0) a.db = s.substr(5);
    else if (s == "--html") a.html = true;
    else if (s == "--allow-errors") a.allow_errors = true;
    else if (s == "--resume") a.resume = true;
    else if (s == "-p") {
      std::string p = value("-p");
      size_t eq = p.find('=');
      if (eq != std::string::npos) a.params.emplace_back(p.substr(0, eq), p.substr(eq + 1));
      else if (!p.empty()) a.params.emplace_back(p, value("-p"));  // papermill's `-p name value`
    } else if (a.error.empty()) {
      a.error = fmt::format("unrecognized notebook option '{}'", s);
    }
    if (!a.error.empty()) break;
  }
  if (a.error.empty() && a.file.empty()) a.error = "'--notebook' needs argument";
  return a;
}

struct NotebookMain {
  NotebookArgs* args = nullptr;
  ShellContext* ctx = nullptr;
  int exit_code = 1;
  // What the cells say: os.exit's code, else 0 when none failed (or errors were allowed).
  int cells_exit_code() const { return info.exit_code >= 0 ? info.exit_code : info.ok ? 0 : 1; }
  // Filled by notebook_pmain; the report is written from them after lua_close, when every
  // trainer the notebook made has ended its run (the runs table shows their final status).
  bool cells_ran = false;
  std::vector<Cell> cells;
  std::vector<CellRun> runs;  // point into cells
  ReportInfo info;
  double t0 = 0;
  int64_t start_ms = 0;
};

// Inside lua_pcall (open_shardlab uses raising API).
int notebook_pmain_body(lua_State* L) {
  auto* m = static_cast<NotebookMain*>(lua_touserdata(L, 1));
  NotebookArgs& a = *m->args;
  luaL_openlibs(L);
  lua_getglobal(L, "os");
  lua_pushcfunction(L, notebook_os_exit);
  lua_setfield(L, -2, "exit");
  lua_pop(L, 1);
  open_shardlab(L, m->ctx);
  lua_createtable(L, 0, 1);  // arg[0] = the notebook, as for a script
  lua_pushstring(L, a.file.c_str());
  lua_rawseti(L, -2, 0);
  lua_setglobal(L, "arg");

  eng::Result<std::string> text = read_notebook(a.file);
  eng::Result<std::vector<Cell>> cells = text.ok() ? parse_notebook(*text) : text.status();
  eng::Status s = cells.ok() ? inject_parameters(&*cells, a.params) : cells.status();
  if (!s.ok()) {
    std::fprintf(stderr, "shardlab: %s\n", s.message().c_str());
    return 0;
  }
  ReportInfo& info = m->info;
  info.notebook = a.file;
  for (const auto& [k, v] : a.params) info.params += fmt::format("{}{}={}", info.params.empty() ? "" : ", ", k, v);
  m->t0 = now_s();
  m->start_ms = eng::unix_ms();
  const int64_t start_ms = m->start_ms;
  info.date = report_date(start_ms);
  info.git_rev = git_revision(std::filesystem::path(a.file).parent_path().string());
  std::vector<std::pair<int, CellRun>> reuse;
  if (a.resume && eng::dist::process().count > 1) {  // only process 0 has the store
    std::fprintf(stderr, "shardlab: notebook: --resume is not supported under mpirun (running every cell)\n");
  } else if (a.resume) {  // a store problem only means nothing is reused
    eng::Result<std::vector<std::pair<int, CellRun>>> r = load_resume(*m->ctx, a.file, *cells);
    if (r.ok()) reuse = std::move(*r);
    else std::fprintf(stderr, "shardlab: notebook: --resume: %s (running every cell)\n", r.status().message().c_str());
  }
  m->cells = std::move(*cells);
  const std::shared_ptr<void> watch = watch_mpirun_terminal();  // Ctrl-C under mpirun
  run_cells(L, m->cells, "@" + base_name(a.file), a.allow_errors, reuse, &m->runs, &info);
  m->cells_ran = true;
  return 0;
}

// After lua_close: the store's part of the report, then the report itself.
void write_report(NotebookMain* m) {
  NotebookArgs& a = *m->args;
  ReportInfo& info = m->info;
  const std::vector<CellRun>& runs = m->runs;
  const int64_t start_ms = m->start_ms;
  eng::Status s;
  info.seconds = now_s() - m->t0;
  // The report's header and footer come from the store; a store problem is a warning only.
  eng::Status stored = add_store_summary(*m->ctx, start_ms, &info);
  if (stored.ok()) stored = log_cell_events(*m->ctx, a.file, start_ms, runs);
  if (!stored.ok())
    std::fprintf(stderr, "shardlab: notebook: %s (the report lacks the store's part)\n",
                 stored.message().c_str());

  std::string stem = a.out;
  bool html_only = stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".html") == 0;
  if (html_only) stem.resize(stem.size() - 5);
  else if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".md") == 0) stem.resize(stem.size() - 3);
  std::vector<std::string> written;
  if (!html_only) {
    std::vector<std::pair<std::string, std::string>> files;
    std::string md = render_markdown(info, runs, base_name(stem) + "_files", &files);
    s = write_file(a.out, md);
    if (s.ok() && !files.empty()) {
      std::string dir = stem + "_files";
      for (const auto& [name, svg] : files)
        if (s.ok()) s = write_file(dir + "/" + name, svg);
    }
    written.push_back(a.out);
  }
  if (s.ok() && (a.html || html_only)) {
    written.push_back(stem + ".html");
    s = write_file(written.back(), render_html(info, runs));
  }
  if (!s.ok()) {
    std::fprintf(stderr, "shardlab: %s\n", s.message().c_str());
    return;
  }
  int n = 0, reused = 0;
  for (const CellRun& r : runs) n += r.ran, reused += r.reused();
  std::printf("shardlab: notebook %s: %d code cells %s%s in %.2fs; wrote %s\n", a.file.c_str(), n,
              info.ok ? "ran" : ("ran, failed at " + info.failed_at).c_str(),
              reused ? fmt::format(" ({} cached cells reused)", reused).c_str() : "", info.seconds,
              fmt::format("{}", fmt::join(written, ", ")).c_str());
  std::fflush(stdout);
  m->exit_code = m->cells_exit_code();
}

int notebook_pmain(lua_State* L) { return call_guarded_main(L, notebook_pmain_body); }

}  // namespace

bool notebook_display(lua_State* L, const std::string& svg) {
  lua_getfield(L, LUA_REGISTRYINDEX, kSinkKey);
  auto* cap = static_cast<Capture*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  if (cap == nullptr || cap->outputs == nullptr) return false;
  append_text(cap->outputs, cap->take());
  cap->outputs->push_back({Output::kSvg, svg});
  return true;
}

int run_notebook_cli(int argc, char** argv) {
  NotebookArgs a = parse_args(argc, argv);
  if (!a.error.empty()) {
    std::fprintf(stderr,
                 "shardlab: %s\nusage: shardlab --notebook FILE.lua [-o REPORT.md] [--html] [-p name=value ...] "
                 "[--allow-errors] [--resume] [--db PATH]\n",
                 a.error.c_str());
    return EXIT_FAILURE;
  }
  if (a.out.empty()) {  // beside the current directory: <stem>.report.md
    std::string stem = base_name(a.file);
    if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".lua") == 0) stem.resize(stem.size() - 4);
    a.out = stem + ".report.md";
  }
  ShellContext ctx;
  if (!a.db.empty()) ctx.db_path = a.db;
  else if (const char* env = std::getenv("SHARDLAB_DB"); env && *env) ctx.db_path = env;
  lua_State* L = luaL_newstate();
  if (L == nullptr) return EXIT_FAILURE;
  NotebookMain m;
  m.args = &a;
  m.ctx = &ctx;
  lua_pushcfunction(L, notebook_pmain);
  lua_pushlightuserdata(L, &m);
  int status = lua_pcall(L, 1, 0, 0);
  if (status != LUA_OK) report(L, status, "shardlab");
  lua_close(L);  // every trainer's run ends here, before the report reads the runs table
  if (m.cells_ran && eng::dist::process().index == 0) write_report(&m);  // process 0 writes it
  else if (m.cells_ran) m.exit_code = m.cells_exit_code();  // the others: no report to write
  if (ctx.store) {
    eng::Status s = ctx.store->flush();
    if (!s.ok()) std::fprintf(stderr, "shardlab: %s\n", s.message().c_str());
  }
  finish_terminate();  // after SIGTERM: end by it, once the report is written
  return status == LUA_OK ? m.exit_code : EXIT_FAILURE;
}

// ---- %run ---------------------------------------------------------------------------------------

void magic_run(lua_State* L, const std::vector<std::string>& words) {
  std::string file;
  std::vector<std::pair<std::string, std::string>> params;
  for (size_t i = 1; i < words.size(); ++i) {
    if (words[i] == "-p" && i + 1 < words.size()) {
      std::string p = words[++i];
      size_t eq = p.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "%%run: -p expects name=value, got '%s'\n", p.c_str());
        return;
      }
      params.emplace_back(p.substr(0, eq), p.substr(eq + 1));
    } else if (file.empty()) {
      file = words[i];
    } else {
      std::fprintf(stderr, "%%run: unexpected argument '%s'\n", words[i].c_str());
      return;
    }
  }
  if (file.empty()) {
    std::fprintf(stderr, "usage: %%run FILE.lua [-p name=value ...]\n");
    return;
  }
  eng::Result<std::string> text = read_file(file);
  eng::Result<std::vector<Cell>> cells = text.ok() ? parse_notebook(*text) : text.status();
  eng::Status s = cells.ok() ? inject_parameters(&*cells, params) : cells.status();
  if (!s.ok()) {
    std::fprintf(stderr, "%%run: %s\n", s.message().c_str());
    return;
  }
  PrettyOptions o;
  o.color = context(L).color;
  o.rows = true;
  const std::string chunk = "@" + base_name(file);
  const int top = lua_gettop(L);
  for (const Cell& cell : *cells) {
    if (cell.kind != CellKind::kCode || cell.skip) continue;
    int status = load_cell(L, cell, chunk);
    if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
    if (status != LUA_OK) {
      report(L, status, nullptr);
      if (!cell.allow_error) {
        std::fprintf(stderr, "%%run: stopped at %s\n", cell_label(cell).c_str());
        lua_settop(L, top);
        return;
      }
    } else if (lua_gettop(L) > top) {
      set_global_raw(L, "_", top + 1);
      std::string out;
      for (int i = top + 1; i <= lua_gettop(L); ++i) {
        size_t len = 0;
        const char* str = lua_type(L, i) == LUA_TSTRING ? lua_tolstring(L, i, &len) : nullptr;
        out += (i > top + 1 ? "\t" : "") + (str && is_svg({str, len}) ? svg_summary({str, len}) : pretty(L, i, o));
      }
      std::printf("%s\n", out.c_str());
    }
    std::fflush(stdout);
    lua_settop(L, top);
  }
}

// The shortest tail of the code lines that is an expression (and leaves a valid body) is the
// cell's value; a trailing `;` hides it, as in the REPL.
int load_cell(lua_State* L, const Cell& cell, const std::string& chunkname) {
  const std::vector<std::string> lines = eng::cell_code_lines(cell);
  const std::string pad(cell.injected ? 0 : std::max(0, cell.first_line - 1), '\n');
  const size_t n = lines.size();
  for (size_t k = 1; k <= n; ++k) {
    std::string expr, body;
    for (size_t i = n - k; i < n; ++i) expr += (i > n - k ? "\n" : "") + lines[i];
    const size_t b = expr.find_first_not_of(" \t\r\n"), e = expr.find_last_not_of(" \t\r\n");
    const std::string t = b == std::string::npos ? "" : expr.substr(b, e - b + 1);
    const bool quiet = !t.empty() && t.back() == ';';
    if (quiet) expr = t.substr(0, t.size() - 1);
    std::string ret = "return " + expr + "\n;";
    if (luaL_loadbuffer(L, ret.data(), ret.size(), "=expr") != LUA_OK) {
      lua_pop(L, 1);
      continue;
    }
    lua_pop(L, 1);
    for (size_t i = 0; i < n - k; ++i) body += lines[i] + "\n";
    std::string code = pad + body + (quiet ? "do local _ = " + expr + "\nend" : ret);
    if (luaL_loadbuffer(L, code.data(), code.size(), chunkname.c_str()) == LUA_OK) return LUA_OK;
    lua_pop(L, 1);
  }
  std::string code = pad + cell.source;
  return luaL_loadbuffer(L, code.data(), code.size(), chunkname.c_str());
}

}  // namespace shell
