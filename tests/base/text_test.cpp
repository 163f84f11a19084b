// tests/base/text_test.cpp: the one JSON escaper (engine/base/text.h) and the git revision
// reader (engine/base/git.h) that the store, checkpoints, the run recorder and notebooks share.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/base/git.h"
#include "engine/base/text.h"

namespace eng {
namespace {

TEST(JsonString, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_string(""), "\"\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_string("l1\nl2\tx\r"), "\"l1\\nl2\\tx\\r\"");
  EXPECT_EQ(json_string(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"");  // UTF-8 bytes pass through
}

// A repository laid out by hand: HEAD naming a loose ref, then a packed one, then detached;
// a worktree's .git file with its commondir; and a directory outside any repository.
TEST(GitRevision, ReadsHeadLooseAndPackedRefsAndWorktrees) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("git_rev_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path git = root / "repo" / ".git";
  fs::create_directories(git / "refs" / "heads");
  fs::create_directories(root / "repo" / "sub" / "dir");
  auto write = [](const fs::path& p, const std::string& text) { std::ofstream(p) << text; };
  const std::string a(40, 'a'), b(40, 'b'), c(40, 'c');
  write(git / "HEAD", "ref: refs/heads/main\n");
  write(git / "refs" / "heads" / "main", a + "\n");
  EXPECT_EQ(git_revision(root / "repo" / "sub" / "dir"), a);  // found upwards
  fs::remove(git / "refs" / "heads" / "main");
  write(git / "packed-refs", "# pack-refs with: peeled\n" + b + " refs/heads/main\n");
  EXPECT_EQ(git_revision(root / "repo"), b);
  // A worktree: .git is a file naming its git dir, whose commondir holds the refs.
  fs::create_directories(git / "worktrees" / "w");
  write(git / "worktrees" / "w" / "HEAD", "ref: refs/heads/main\n");
  write(git / "worktrees" / "w" / "commondir", "../..\n");
  fs::create_directories(root / "w");
  write(root / "w" / ".git", "gitdir: " + (git / "worktrees" / "w").string() + "\n");
  EXPECT_EQ(git_revision(root / "w"), b);
  write(git / "HEAD", c + "\n");  // detached
  EXPECT_EQ(git_revision(root / "repo"), c);
  fs::remove_all(root);
}

}  // namespace
}  // namespace eng
