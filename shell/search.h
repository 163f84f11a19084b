// shell/search.h: `shardlab search <config.yml> key=value ... --vary KEY=V1,V2 ...`
// (docs/train_compile.md, "shardlab search").
#pragma once

#include <cstdint>
#include <string>

namespace shell {

// argv[1] is "search". Returns the exit status: 0 when some candidate fits, 1 on any error or
// when none fits.
int run_search(int argc, char** argv);

// The one-line progress bar both `shardlab search` and sl.search print on a terminal (stderr):
// "search [#########-----------] 37/216, 12 fit, 9.3 s".
std::string search_progress_bar(int64_t done, int64_t total, int64_t fitting, double elapsed_s);

}  // namespace shell
