// shell/main.cpp: the shardlab executable: an interactive Lua shell over the training engine.
// Under `mpirun -np P shardlab ...` every process runs the same command line (engine/dist,
// docs/distributed.md); process 0 prints and writes the store, the others are silent unless
// SHARDLAB_ALL_PROCESSES_PRINT=1.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/base/thread_pool.h"
#include "engine/dist/dist.h"
#include "shell/cli.h"
#include "shell/interrupt.h"

namespace {

// Removes `--local-devices N` / `--local-devices=N` (before any `--`) from argv; returns N, 0
// when absent, -1 when malformed.
int take_local_devices(int& argc, char** argv) {
  int n = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    const char* value = nullptr;
    int used = 1;
    if (std::strcmp(argv[i], "--local-devices") == 0) {
      value = i + 1 < argc ? argv[i + 1] : "";
      used = 2;
    } else if (std::strncmp(argv[i], "--local-devices=", 16) == 0) {
      value = argv[i] + 16;
    } else {
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(value, &end, 10);
    n = (*value && *end == '\0' && v >= 1 && v <= 4096) ? static_cast<int>(v) : -1;
    for (int k = i; k + used <= argc; ++k) argv[k] = argv[k + used];
    argc -= used;
    --i;
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int local_devices = take_local_devices(argc, argv);
  if (local_devices < 0) {
    std::fprintf(stderr, "shardlab: --local-devices expects a device count in [1, 4096]\n");
    return EXIT_FAILURE;
  }
  // The threads MPI starts inherit a mask without SIGINT, SIGTERM and SIGUSR1 (Ctrl-C under
  // mpirun): their handlers (shell/interrupt.h) must run on the thread that runs Lua.
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  eng::block_interrupt_signals();
  const eng::Status s = eng::dist::init(&argc, &argv, local_devices);
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  if (!s.ok()) {
    std::fprintf(stderr, "shardlab: %s\n", s.message().c_str());
    eng::dist::finalize();
    return EXIT_FAILURE;
  }
  const char* all = std::getenv("SHARDLAB_ALL_PROCESSES_PRINT");
  if (eng::dist::process().index > 0 && !(all && std::strcmp(all, "1") == 0))
    if (!std::freopen("/dev/null", "w", stdout)) return EXIT_FAILURE;
  int rc = shell::run_main(argc, argv);
  // Under mpirun: how every process ended. A process whose script failed ends the others within
  // seconds (each names the error) instead of leaving them in a collective (dist::end_job).
  std::string error = rc == EXIT_SUCCESS ? "" : shell::last_reported_error();
  error = error.substr(0, error.find('\n'));  // the message, not its traceback
  const eng::Status end = eng::dist::end_job(rc == EXIT_SUCCESS || !error.empty() ? error : "exit status 1");
  if (!end.ok()) {
    std::fprintf(stderr, "shardlab: %s\n", end.message().c_str());
    rc = EXIT_FAILURE;
  }
  eng::dist::finalize();
  return rc;
}
