// tests/common/text_corpus.h: a small text corpus of varied bytes for the model tests' short
// training runs (synthetic batches repeat one token, which a model predicts at once: a loss
// near 0 that compares nothing). Fortunes format: documents separated by "%" lines.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace eng::testing {

// Writes the corpus to the test temp dir (the file name carries `tag` and the pid) and returns
// its path; the same bytes on every call.
inline std::string varied_text_file(std::string_view tag) {
  const std::string path =
      fmt::format("{}shardlab_{}_text_{}.txt", ::testing::TempDir(), tag, ::getpid());
  std::ofstream f(path);
  uint32_t x = 12345;
  for (int doc = 0; doc < 60; ++doc) {
    for (int i = 0; i < 20 + doc % 17; ++i) {
      x = x * 1103515245u + 12345u;
      f << static_cast<char>('a' + (x >> 16) % 26);
      if ((x >> 8) % 5 == 0) f << ' ';
    }
    f << "\n%\n";
  }
  return path;
}

}  // namespace eng::testing
