// shell/repl.cpp: the read-eval-print loop: Readline input, history file, lua.c's evaluation rules, auto-print.
#include "shell/repl.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <readline/history.h>
#include <readline/readline.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/base/thread_pool.h"
#include "engine/dist/dist.h"
#include "engine/train/trainer.h"
#include "shell/context.h"
#include "shell/interrupt.h"
#include "shell/lua_binding.h"
#include "shell/notebook.h"
#include "shell/pretty.h"

namespace shell {
namespace {

constexpr const char* kPrompt = "sl> ";
constexpr const char* kPrompt2 = "..> ";
constexpr int kHistoryMax = 1000;
constexpr double kTimingMin = 0.1;  // seconds: faster commands print no `[0.0123s]`

enum class Read { kLine, kEof, kInterrupted };

volatile sig_atomic_t g_prompt_sigint = 0;  // Ctrl-C while waiting at the prompt
std::string* g_line = nullptr;              // where on_line stores a finished line
bool g_line_done = false;                   // on_line ran
bool g_line_eof = false;                    // on_line got NULL (Ctrl-D)

void on_prompt_sigint(int) { g_prompt_sigint = 1; }
void on_child_sigint(int) {}  // Ctrl-C during `$ cmd` stops the command, not the shell

void on_line(char* line) {
  if (line == nullptr) {
    g_line_eof = true;
  } else {
    *g_line = line;
    std::free(line);
  }
  g_line_done = true;
  rl_callback_handler_remove();
}

// Ctrl-C at the prompt: show "^C" after the text, then drop the line.
void drop_line() {
  rl_point = rl_end;
  rl_redisplay();
  std::fputs("^C\n", rl_outstream);
  std::fflush(rl_outstream);
  rl_replace_line("", 0);
  rl_free_line_state();
  rl_callback_sigcleanup();
  rl_callback_handler_remove();
}

// Process 0 under mpirun (docs/distributed.md): the user's terminal is mpirun's stdin, and
// mpirun forwards what it reads through a pipe, process 0's stdin. Readline reads that pipe
// and writes to stdout (mpirun's pty, so its output stays in order with the results); while
// it reads a line, the terminal itself is put in Readline's raw mode, so mpirun forwards each
// key at once, and with ISIG off, so Ctrl-C is a key that drops the line instead of a SIGINT
// to mpirun (which would end the job). While a line runs, LineWatcher keeps ISIG off (below);
// between lines the terminal is as the user had it.
FILE* g_terminal = nullptr;  // the controlling terminal (opened from mpirun's stdin)
pid_t g_mpirun = 0;          // process 0's parent, which reads that terminal
// While a line runs (LineWatcher below) the terminal stays non-canonical without echo and
// with ISIG off, so Ctrl-C is still a byte mpirun forwards; the user's modes are kept here.
termios g_user_modes = {};
std::atomic<bool> g_running_modes{false};  // the terminal is in the running modes
// Keys typed while a line ran (the watcher read them from the pipe): Readline reads them
// first at the next prompt (typeahead_getc), so nothing typed ahead is lost.
std::string g_typeahead;
size_t g_typeahead_next = 0;

// Process 0 is not in the terminal's foreground process group (mpirun is): changing the
// terminal's modes would stop it with SIGTTOU unless the signal is blocked.
template <typename F>
void with_sigttou_blocked(F f) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTTOU);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  f();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void prep_mpirun_terminal(int meta) {
  FILE* in = rl_instream;
  rl_instream = g_terminal;  // Readline's raw mode, on the terminal rather than the pipe
  with_sigttou_blocked([&] {
    rl_prep_terminal(meta);
    termios t = {};
    if (tcgetattr(fileno(g_terminal), &t) == 0) {
      t.c_lflag &= ~ISIG;
      tcsetattr(fileno(g_terminal), TCSADRAIN, &t);
    }
  });
  rl_instream = in;
  winsize ws = {};  // SIGWINCH goes to mpirun's group: read the size at each prompt
  if (ioctl(fileno(g_terminal), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    rl_set_screen_size(ws.ws_row, ws.ws_col);
}

void deprep_mpirun_terminal() {
  FILE* in = rl_instream;
  rl_instream = g_terminal;
  with_sigttou_blocked([] { rl_deprep_terminal(); });
  rl_instream = in;
}

// Back to the user's modes after a line, and before a signal ends process 0 (a second Ctrl-C,
// the SIGTERM watchdog: interrupt.h's set_fatal_interrupt_cleanup) or it exits (atexit:
// os.exit in a line). Async-signal-safe: an atomic exchange, pthread_sigmask, tcsetattr.
void restore_user_modes() {
  if (g_terminal == nullptr || !g_running_modes.exchange(false)) return;
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTTOU);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  tcsetattr(fileno(g_terminal), TCSADRAIN, &g_user_modes);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void enter_running_modes() {
  with_sigttou_blocked([] {
    const int fd = fileno(g_terminal);
    if (tcgetattr(fd, &g_user_modes) != 0) return;
    termios t = g_user_modes;
    t.c_lflag &= ~(ICANON | ECHO | ISIG | IEXTEN);
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(fd, TCSADRAIN, &t) == 0) g_running_modes.store(true);
  });
}

int typeahead_getc(FILE* stream) {
  if (g_typeahead_next < g_typeahead.size())
    return static_cast<unsigned char>(g_typeahead[g_typeahead_next++]);
  g_typeahead.clear();
  g_typeahead_next = 0;
  return rl_getc(stream);
}

bool typeahead_pending() { return g_typeahead_next < g_typeahead.size(); }

// Process 0 under mpirun with the terminal, while a line runs: a thread reads mpirun's pipe.
// Ctrl-C (byte 3) becomes SIGUSR1 to mpirun, which forwards it to every process: each one's
// running chunk is interrupted (shell/interrupt.h) and t:train stops everywhere after the same
// step. Any other byte is typeahead for the next prompt. Started once the line is read, stopped
// (a self-pipe) after the line's outcome exchange, before the next read. On SIGTERM it gives
// the terminal back at once. A line that reads stdin itself (io.read) competes with it for the
// keys (docs/distributed.md).
class LineWatcher {
 public:
  LineWatcher() {
    if (pipe2(stop_, O_CLOEXEC) != 0) return;
    enter_running_modes();
    thread_ = std::thread([this] { watch(); });
  }
  ~LineWatcher() {
    if (thread_.joinable()) {
      const char byte = 1;
      (void)!write(stop_[1], &byte, 1);
      thread_.join();
    }
    for (int fd : stop_)
      if (fd >= 0) close(fd);
    restore_user_modes();
  }
  LineWatcher(const LineWatcher&) = delete;
  LineWatcher& operator=(const LineWatcher&) = delete;

 private:
  void watch() {
    eng::block_interrupt_signals();  // SIGINT, SIGTERM, SIGUSR1 belong to the Lua thread
    pollfd fds[3] = {{stop_[0], POLLIN, 0}, {STDIN_FILENO, POLLIN, 0},
                     {shell_terminate_fd(), POLLIN, 0}};
    for (;;) {
      if (poll(fds, fds[2].fd >= 0 ? 3 : 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) return;
      if (fds[2].fd >= 0 && fds[2].revents != 0) return restore_user_modes();  // SIGTERM
      if (fds[1].revents == 0) continue;
      char buf[256];
      const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
      if (n <= 0) return;  // mpirun closed the pipe: Readline sees the end at the next prompt
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] != 3) g_typeahead.push_back(buf[i]);
        else if (getppid() == g_mpirun) kill(g_mpirun, SIGUSR1);  // forwarded to every process
      }
    }
  }

  int stop_[2] = {-1, -1};
  std::thread thread_;
};

int on_ctrl_c_key(int, int) {
  g_prompt_sigint = 1;
  return 0;
}

// Readline's callback interface, so Ctrl-C can clear the line without killing the shell.
Read read_tty_line(const std::string& prompt, std::string* out) {
  g_line = out;
  g_line_done = g_line_eof = false;
  g_prompt_sigint = 0;
  struct sigaction sa = {}, old = {};
  sa.sa_handler = on_prompt_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: select() must wake up
  sigaction(SIGINT, &sa, &old);
  rl_callback_handler_install(prompt.c_str(), on_line);
  Read result = Read::kLine;
  while (!g_line_done) {
    if (typeahead_pending()) {  // keys typed while the last line ran (under mpirun)
      rl_callback_read_char();
      if (g_prompt_sigint && !g_line_done) {
        drop_line();
        result = Read::kInterrupted;
        break;
      }
      continue;
    }
    int fd = fileno(rl_instream);
    const int wake = shell_terminate_fd();  // SIGTERM (handled on any thread) writes to it
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(fd, &fds);
    if (wake >= 0) FD_SET(wake, &fds);
    int r = select(std::max(fd, wake) + 1, &fds, nullptr, nullptr, nullptr);
    if (shell_terminate_requested()) {  // leave the line as typed; the REPL ends
      rl_callback_sigcleanup();
      rl_callback_handler_remove();
      std::fputs("\n", rl_outstream);
      g_line_eof = true;
      break;
    }
    if (g_prompt_sigint) {
      drop_line();
      result = Read::kInterrupted;
      break;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      rl_callback_handler_remove();
      g_line_eof = true;
      break;
    }
    rl_callback_read_char();
    if (g_prompt_sigint && !g_line_done) {  // Ctrl-C read as a key (under mpirun)
      drop_line();
      result = Read::kInterrupted;
      break;
    }
  }
  sigaction(SIGINT, &old, nullptr);
  if (result == Read::kLine && g_line_eof) result = Read::kEof;
  return result;
}

Read read_plain_line(const std::string& prompt, std::string* out) {
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  char buf[4096];
  out->clear();
  while (std::fgets(buf, sizeof buf, stdin)) {
    *out += buf;
    if (!out->empty() && out->back() == '\n') {
      out->pop_back();
      return Read::kLine;
    }
  }
  return out->empty() ? Read::kEof : Read::kLine;
}

// _PROMPT / _PROMPT2 from the globals (raw access: never raises), else the defaults.
std::string prompt(lua_State* L, bool first) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  lua_pushstring(L, first ? "_PROMPT" : "_PROMPT2");
  lua_rawget(L, -2);
  std::string p = first ? kPrompt : kPrompt2;
  if (lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER) p = lua_tostring(L, -1);
  lua_pop(L, 2);
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool incomplete(lua_State* L, int status) {
  if (status != LUA_ERRSYNTAX) return false;
  size_t len = 0;
  const char* msg = lua_tolstring(L, -1, &len);
  constexpr std::string_view eof = "<eof>";
  return len >= eof.size() && std::string_view(msg + len - eof.size()) == eof;
}

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string_view::npos ? "" : std::string(s.substr(b, e - b + 1));
}

// Under mpirun process 0's stdin is a pipe from mpirun, which forwards its own stdin. The user
// is at a terminal when mpirun's stdin is this process's controlling terminal (tcgetpgrp
// answers only for that) and mpirun is the terminal's foreground job (not `mpirun ... < file`,
// not `mpirun ... &`).
bool mpirun_reads_terminal() {
  const pid_t parent = getppid();
  const std::string parent_stdin = fmt::format("/proc/{}/fd/0", parent);
  const int fd = open(parent_stdin.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool yes = isatty(fd) && tcgetpgrp(fd) == getpgid(parent);
  close(fd);
  return yes;
}

// Under mpirun with several processes: lines are read by process 0 and run everywhere.
bool lockstep() { return eng::dist::process().count > 1; }

// Process 0 under mpirun that reads the terminal: g_terminal, opened from mpirun's stdin. The
// user's modes come back after each line (LineWatcher), before a signal ends the process and
// at exit (os.exit in a line).
bool open_mpirun_terminal() {
  const std::string parent_stdin = fmt::format("/proc/{}/fd/0", getppid());
  const int fd = open(parent_stdin.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC);
  g_terminal = fd >= 0 ? fdopen(fd, "r+") : nullptr;
  if (g_terminal == nullptr) return false;
  g_mpirun = getppid();
  set_fatal_interrupt_cleanup(restore_user_modes);
  std::atexit(restore_user_modes);
  return true;
}

class Repl {
 public:
  explicit Repl(lua_State* L)
      : L_(L),
        tty_(isatty(STDIN_FILENO)),
        mpirun_tty_(!tty_ && lockstep() && eng::dist::process().index == 0 &&
                    mpirun_reads_terminal()) {}

  void run() {
    if (tty_ || mpirun_tty_) setup_readline();
    if (mpirun_tty_) setup_mpirun_terminal();
    int top = lua_gettop(L_);
    for (;;) {
      std::string line;
      Read r = read(prompt(L_, true), &line);
      if (r == Read::kEof || shell_terminate_requested()) break;
      if (r == Read::kInterrupted) continue;
      failed_ = false;
      handle(line);
      lua_settop(L_, top);
      if (lockstep()) {
        settle_steps();
        exchange_outcome();
      }
      watcher_.reset();  // the terminal is the user's again before the next prompt
      if (shell_terminate_requested()) break;  // SIGTERM: end the session (docs/shell.md)
    }
    if (tty_ || mpirun_tty_) std::fputs("\n", stdout);
  }

 private:
  Read read(const std::string& p, std::string* out) {
    if (lockstep()) return read_in_lockstep(p, out);
    return tty_ ? read_tty_line(p, out) : read_plain_line(p, out);
  }

  // Under mpirun: process 0 reads, every process gets the line and runs it (docs/distributed.md).
  Read read_in_lockstep(const std::string& p, std::string* out) {
    int code = static_cast<int>(Read::kEof);
    if (eng::dist::process().index == 0)
      code = static_cast<int>(tty_ || mpirun_tty_ ? read_tty_line(p, out)
                                                  : read_plain_line(p, out));
    const eng::Status s = eng::dist::broadcast_from_first(&code, out);
    if (!s.ok()) {
      std::fprintf(stderr, "shardlab: %s\n", s.message().c_str());
      return Read::kEof;
    }
    return static_cast<Read>(code);
  }

  // An error of the line: printed at once by process 0 (and without mpirun); under mpirun the
  // others keep theirs for exchange_outcome, which process 0 prints.
  void report_error(int status) {
    if (lockstep()) {
      const char* msg = lua_tostring(L_, -1);
      error_ = msg ? msg : "(error object is not a string)";
      failed_ = true;
      if (eng::dist::process().index != 0) return lua_pop(L_, 1);
    }
    report(L_, status, nullptr);
  }

  // Under mpirun a line ends when the steps it dispatched have run (shell::settle_steps); a
  // step's error is the line's error.
  void settle_steps() {
    const std::string error = shell::settle_steps(L_);
    if (error.empty() || failed_) return;
    lua_pushstring(L_, error.c_str());
    report_error(LUA_ERRRUN);
  }

  // Under mpirun, after every line: each process learns whether each other's line failed and
  // why; process 0 prints the others' errors as `process p: <message>` (the same message as its
  // own once: `process 1: the same error`). Every process keeps going.
  void exchange_outcome() {
    std::vector<std::string> all;
    const eng::Status s = eng::dist::end_line(process_outcome(failed_, error_), &all);
    if (!s.ok()) {
      std::fprintf(stderr, "shardlab: %s\n", s.message().c_str());
      return;
    }
    if (eng::dist::process().index != 0) return;
    std::fputs(other_process_errors(all).c_str(), stderr);
    std::fflush(stderr);
  }

  void setup_readline() {
    rl_readline_name = "shardlab";  // $if shardlab in ~/.inputrc
    rl_catch_signals = 0;
    install_completion(L_);
    const char* env = std::getenv("SHARDLAB_HISTORY");
    const char* home = std::getenv("HOME");
    if (env && *env) history_ = env;
    else if (home && *home) history_ = std::string(home) + "/.shardlab_history";
    stifle_history(kHistoryMax);
    if (!history_.empty()) read_history(history_.c_str());
  }

  // Readline on mpirun's pipe, with the terminal's modes set through g_terminal.
  void setup_mpirun_terminal() {
    if (!open_mpirun_terminal()) return;
    rl_instream = stdin;
    rl_outstream = stdout;
    rl_prep_term_function = prep_mpirun_terminal;
    rl_deprep_term_function = deprep_mpirun_terminal;
    rl_bind_key(3, on_ctrl_c_key);  // Ctrl-C arrives as a key
    rl_getc_function = typeahead_getc;
    std::fflush(stderr);  // errors in order with the prompts: mpirun reads stderr separately
    dup2(STDOUT_FILENO, STDERR_FILENO);
  }

  void remember(const std::string& chunk) {
    if (trim(chunk).empty()) return;
    note_input(L_, chunk);  // %hist
    if (!tty_ && !mpirun_tty_) return;
    HIST_ENTRY* last = history_length > 0 ? history_get(history_base + history_length - 1) : nullptr;
    if (last == nullptr || chunk != last->line) add_history(chunk.c_str());
    if (!history_.empty() && write_history(history_.c_str()) != 0 && !history_warned_) {
      std::fprintf(stderr, "shardlab: cannot write history file '%s'\n", history_.c_str());
      history_warned_ = true;
    }
  }

  void handle(const std::string& raw) {
    std::string line = trim(raw);
    if (line.empty()) return;
    if (line[0] == '?') {
      remember(raw);
      return help(trim(line.substr(1)));
    }
    if (line[0] == '%') {  // IPython-style magics: %run, %timeit, %time, %hist (shell/notebook.h)
      remember(raw);
      watch_line();
      auto start = std::chrono::steady_clock::now();
      run_magic(L_, line);
      return show_time(seconds_since(start));
    }
    if (line[0] == '$') {  // trepl's shell escape
      remember(raw);
      watch_line();  // Ctrl-C: mpirun's SIGUSR1 reaches the command too (its process group)
      auto start = std::chrono::steady_clock::now();
      shell_escape(trim(line.substr(1)));
      return show_time(seconds_since(start));
    }
    if (line[0] == '=') line = trim(line.substr(1));  // `=expr`, a Lua 5.1 habit
    if (line.empty()) return;
    bool quiet = line.back() == ';';
    std::string expr = quiet ? line.substr(0, line.size() - 1) : line;
    std::string ret = "return " + expr + ";";
    int status = luaL_loadbuffer(L_, ret.data(), ret.size(), "=stdin");
    std::string chunk = line, entered = trim(raw);  // code to run; text for the history
    if (status != LUA_OK) {
      lua_pop(L_, 1);
      status = load_statement(&chunk, &entered);
      if (status == -1) return;  // Ctrl-C or end of input inside a multi-line chunk
    }
    remember(entered);
    if (status != LUA_OK) return report_error(status);
    int base = lua_gettop(L_) - 1;
    watch_line();
    auto start = std::chrono::steady_clock::now();
    status = docall(L_, 0, LUA_MULTRET);
    double seconds = seconds_since(start);
    if (status != LUA_OK) report_error(status);
    else print_results(base, quiet);
    // t:train stopped on Ctrl-C (under mpirun every process did; process 0 says it once).
    if (status == LUA_OK && shell_interrupt_was_taken() && eng::dist::process().index == 0) {
      std::fprintf(stderr, "interrupted! (stopped after the current step)\n");
      std::fflush(stderr);
    }
    show_time(seconds);
  }

  // Process 0 under mpirun with the terminal: from here until the line's outcome is exchanged,
  // Ctrl-C interrupts every process (LineWatcher).
  void watch_line() {
    if (mpirun_tty_ && g_terminal != nullptr && !watcher_) watcher_ = std::make_unique<LineWatcher>();
  }

  // trepl's timer: `[0.0123s]` at the right edge after a slow command, on a terminal only.
  void show_time(double seconds) {
    if ((!tty_ && !mpirun_tty_) || !context(L_).timing || seconds < kTimingMin) return;
    int rows = 0, cols = 0;
    rl_get_screen_size(&rows, &cols);
    if (cols < 20) cols = 80;
    std::string t = fmt::format("[{:.4f}s]", seconds);
    std::printf("%*s\n", cols - 1, t.c_str());  // cols - 1: no autowrap onto an empty line
    std::fflush(stdout);
  }

  // `$ cmd`: runs cmd through popen (its stderr goes straight to the terminal), prints its
  // output and keeps it (without trailing newlines) as the result (`_`, `_LAST`, `_RESULTS`),
  // as trepl does.
  void shell_escape(const std::string& cmd) {
    if (cmd.empty()) {
      std::printf("$ cmd runs a shell command; its output becomes _\n");
      return;
    }
    std::fflush(stdout);
    struct sigaction sa = {}, old = {};
    sa.sa_handler = on_child_sigint;  // a handler, not SIG_IGN: the child must not inherit it
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old);
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) {
      sigaction(SIGINT, &old, nullptr);
      std::fprintf(stderr, "$: cannot run '%s': %s\n", cmd.c_str(), std::strerror(errno));
      return;
    }
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) {
      std::fwrite(buf, 1, n, stdout);
      std::fflush(stdout);
      out.append(buf, n);
    }
    pclose(p);
    sigaction(SIGINT, &old, nullptr);
    while (!out.empty() && out.back() == '\n') out.pop_back();  // `$ git rev-parse HEAD`: a hash
    lua_pushlstring(L_, out.data(), out.size());
    keep_result(-1);
    lua_pop(L_, 1);
  }

  // `_` and `_LAST` become the value; `_RESULTS` (created if missing) gets it appended.
  void keep_result(int idx) {
    idx = lua_absindex(L_, idx);
    set_global_raw(L_, "_", idx);
    set_global_raw(L_, "_LAST", idx);
    if (lua_isnil(L_, idx)) return;
    lua_rawgeti(L_, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    lua_pushstring(L_, "_RESULTS");
    if (lua_rawget(L_, -2) != LUA_TTABLE) {
      lua_pop(L_, 1);
      lua_newtable(L_);
      lua_pushstring(L_, "_RESULTS");
      lua_pushvalue(L_, -2);
      lua_rawset(L_, -4);
    }
    lua_pushvalue(L_, idx);
    lua_rawseti(L_, -2, static_cast<lua_Integer>(lua_rawlen(L_, -2)) + 1);
    lua_pop(L_, 2);
  }

  // lua.c's multiline: keep reading while the chunk is incomplete (`<eof>` syntax errors).
  // Returns a load status with the chunk or error on the stack, or -1 if the user gave up.
  int load_statement(std::string* chunk, std::string* entered) {
    for (;;) {
      int status = luaL_loadbuffer(L_, chunk->data(), chunk->size(), "=stdin");
      if (!incomplete(L_, status)) return status;
      lua_pop(L_, 1);
      std::string more;
      Read r = read(prompt(L_, false), &more);
      if (r != Read::kLine) {
        if (r == Read::kEof) remember(*entered);
        return -1;
      }
      *chunk += "\n" + more;
      *entered += "\n" + more;
    }
  }

  void print_results(int base, bool quiet) {
    int n = lua_gettop(L_) - base;
    if (n <= 0) return;
    keep_result(base + 1);
    if (quiet) return;
    PrettyOptions o;
    o.color = context(L_).color;
    o.rows = true;
    std::vector<std::string> parts;
    bool multiline = false;
    for (int i = 1; i <= n; ++i) {
      parts.push_back(pretty(L_, base + i, o));
      multiline |= parts.back().find('\n') != std::string::npos;
    }
    // Several values share a line (tab-separated, as lua.c prints) unless one is multi-line.
    std::string out = fmt::format("{}", fmt::join(parts, multiline ? "\n" : "\t"));
    std::printf("%s\n", out.c_str());
    std::fflush(stdout);
  }

  // ?name: the docstring registered for a binding (sl.doc), a type, or a value's type.
  void help(const std::string& name) {
    if (name.empty()) {
      std::printf("?name shows the docstring of a binding, e.g. ?sl.mesh; ?sl lists the API.\n"
                  "Tab completes names; a trailing ';' hides a result; _ (also _LAST) is the last\n"
                  "result and _RESULTS all of them; $ cmd runs a shell command; who() lists your\n"
                  "globals; sl.timing(false) hides the [0.0123s] shown after slow commands.\n");
      return;
    }
    std::string doc;
    lua_getfield(L_, LUA_REGISTRYINDEX, "shardlab.doc");
    if (lua_getfield(L_, -1, name.c_str()) == LUA_TSTRING) doc = lua_tostring(L_, -1);
    lua_pop(L_, 2);
    if (doc.empty()) {
      std::string expr = "return " + name;
      for (char& c : expr) if (c == ':') c = '.';
      if (luaL_loadbuffer(L_, expr.data(), expr.size(), "=help") == LUA_OK &&
          lua_pcall(L_, 0, 1, 0) == LUA_OK)
        doc = find_doc(L_, -1);
      lua_pop(L_, 1);
    }
    if (doc.empty()) std::printf("no help for '%s'\n", name.c_str());
    else std::printf("%s\n", doc.c_str());
    std::fflush(stdout);
  }

  lua_State* L_;
  bool tty_;                     // stdin is a terminal: use Readline
  bool mpirun_tty_;              // process 0 under mpirun, which reads the user's terminal
  std::string history_;          // history file; "" = none
  bool history_warned_ = false;  // warned once about an unwritable history file
  bool failed_ = false;          // the current line raised an error (under mpirun)
  std::string error_;            // ... its message
  std::unique_ptr<LineWatcher> watcher_;  // while a line runs (watch_line)
};

}  // namespace

bool interactive_input() {
  if (!lockstep()) return isatty(STDIN_FILENO);
  int code = 0;
  std::string unused;
  if (eng::dist::process().index == 0) code = isatty(STDIN_FILENO) || mpirun_reads_terminal();
  const eng::Status s = eng::dist::broadcast_from_first(&code, &unused);
  if (!s.ok()) std::fprintf(stderr, "shardlab: %s\n", s.message().c_str());
  return s.ok() && code != 0;
}

int load_stdin(lua_State* L) {
  if (!lockstep()) return luaL_loadfile(L, nullptr);
  int code = 0;
  std::string chunk;
  if (eng::dist::process().index == 0) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, stdin)) > 0;) chunk.append(buf, n);
  }
  const eng::Status s = eng::dist::broadcast_from_first(&code, &chunk);
  if (!s.ok()) {
    lua_pushstring(L, s.message().c_str());
    return LUA_ERRFILE;
  }
  if (chunk.starts_with("#")) chunk.insert(0, "--");  // lua.c skips a first `#!` line
  return luaL_loadbuffer(L, chunk.data(), chunk.size(), "=stdin");
}

std::shared_ptr<void> watch_mpirun_terminal() {
  if (!lockstep() || eng::dist::process().index != 0 || isatty(STDIN_FILENO) ||
      !mpirun_reads_terminal() || !open_mpirun_terminal())
    return nullptr;
  return std::make_shared<LineWatcher>();
}

void run_repl(lua_State* L) {
  context(L).interactive = true;
  Repl(L).run();
}

std::string settle_steps(lua_State* L) {
  std::string first;
  for (const eng::Trainer* t : context(L).trainers) {
    const eng::Status s = const_cast<eng::Trainer*>(t)->wait_all();  // live userdata
    if (!s.ok() && first.empty()) first = s.message();
  }
  return first;
}

std::string process_outcome(bool failed, const std::string& error) {
  return failed ? "E" + error : "K";
}

std::string other_process_errors(const std::vector<std::string>& all) {
  std::string out;
  std::vector<size_t> same;
  for (size_t p = 1; p < all.size(); ++p) {
    if (all[p][0] != 'E') continue;
    if (all[0][0] == 'E' && all[p] == all[0]) same.push_back(p);
    else out += fmt::format("process {}: {}\n", p, std::string_view(all[p]).substr(1));
  }
  if (same.size() == 1) out += fmt::format("process {}: the same error\n", same[0]);
  if (same.size() > 1) out += fmt::format("processes {}: the same error\n", fmt::join(same, ", "));
  return out;
}

}  // namespace shell
