// shell/cli.h: the lua-compatible command line (docs/shell.md): parse options, then a protected main.
#pragma once

namespace shell {

// Everything main() does; returns the process exit status (0 ok, 1 on any error).
int run_main(int argc, char** argv);

}  // namespace shell
