// shell/main.cpp: the shardlab executable: an interactive Lua shell over the training engine.
#include "shell/cli.h"

int main(int argc, char** argv) { return shell::run_main(argc, argv); }
