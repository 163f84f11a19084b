// engine/base/git.cpp: reading HEAD's commit from .git (see git.h).
#include "engine/base/git.h"

#include <fstream>
#include <system_error>

namespace eng {
namespace {

std::string first_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::string git_revision(std::filesystem::path dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  dir = fs::absolute(dir, ec);
  for (; !dir.empty(); dir = dir.parent_path()) {
    fs::path git = dir / ".git";
    if (fs::is_regular_file(git, ec)) {  // "gitdir: <path>"
      const std::string l = first_line(git);
      if (!l.starts_with("gitdir: ")) return "";
      git = fs::path(l.substr(8));
      if (git.is_relative()) git = dir / git;
    } else if (!fs::is_directory(git, ec)) {
      if (dir == dir.parent_path()) break;
      continue;
    }
    std::string head = first_line(git / "HEAD");
    if (!head.starts_with("ref: ")) return head;  // detached
    const std::string ref = head.substr(5);
    fs::path common = git;
    if (fs::exists(git / "commondir", ec))
      common = fs::weakly_canonical(git / first_line(git / "commondir"), ec);
    for (const fs::path& base : {git, common}) {
      std::string rev = first_line(base / ref);
      if (!rev.empty()) return rev;
    }
    std::ifstream packed(common / "packed-refs");
    for (std::string line; std::getline(packed, line);)
      if (line.size() > 41 && line.substr(41) == ref) return line.substr(0, 40);
    return "";
  }
  return "";
}

}  // namespace eng
