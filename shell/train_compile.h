// shell/train_compile.h: `shardlab train_compile <config.yml> key=value ...`
// (docs/train_compile.md).
#pragma once

namespace shell {

// argv[1] is "train_compile". Returns the exit status: 0 when the plan compiles and fits, 1 on
// any error or when the peak per device exceeds the device's HBM.
int run_train_compile(int argc, char** argv);

}  // namespace shell
