// engine/base/git.h: the commit checked out in a directory's repository, read from .git
// without running git (the run recorder's runs.git_rev, the notebook report's header).
#pragma once

#include <filesystem>
#include <string>

namespace eng {

// The 40-hex commit of HEAD in the repository containing `dir` (searched upwards): HEAD, then
// the ref it names (loose, else packed-refs); a worktree's .git file ("gitdir: ...") and its
// commondir are followed. "" outside a repository or when HEAD cannot be resolved.
std::string git_revision(std::filesystem::path dir);

}  // namespace eng
