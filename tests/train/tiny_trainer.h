// tests/train/tiny_trainer.h: a tiny llama config on a test-written corpus, and temp dirs,
// shared by the async, timing, checkpoint and store tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "engine/train/trainer.h"
#include "tests/common/tiny_config.h"

namespace eng::testing {

namespace fs = std::filesystem;

inline std::string tiny_corpus_path() {
  // One shared file; written under a per-process name and renamed so that concurrent test
  // processes (ctest -j) never read a half-written corpus.
  fs::path p = fs::temp_directory_path() / "shardlab_tiny_corpus.txt";
  if (!fs::exists(p)) {
    fs::path tmp = p.string() + fmt::format(".{}", ::getpid());
    {
      std::ofstream f(tmp);
      const char* lines[] = {"the quick brown fox jumps over the lazy dog. ",
                             "a stitch in time saves nine. ", "all that glitters is not gold. ",
                             "the early bird catches the worm. "};
      for (int i = 0; i < 400; ++i) f << lines[(i * 7) % 4];
    }
    fs::rename(tmp, p);
  }
  return p.string();
}

// 2 layers, emb 64, seq 32, batch 2: a step takes a few ms.
// scan_layers=false: the tests read layers_<l> arrays by name.
inline Config tiny_config(int64_t steps) {
  Config c = tiny_llama_config({.dataset = "text:" + tiny_corpus_path(),
                                .emb_dim = 64,
                                .query_heads = 2,
                                .kv_heads = 2,
                                .head_dim = 32,
                                .mlp_dim = 128,
                                .layers = 2,
                                .seq = 32,
                                .per_device_batch = 2.0,
                                .learning_rate = 3e-3,
                                .steps = steps});
  EXPECT_TRUE(c.set("scan_layers", false).ok());
  return c;
}

// A fresh directory under the system temp dir, removed when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = fs::temp_directory_path() / fmt::format("shardlab_{}_{}_{}", tag, ::getpid(), counter()++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  fs::path path_;
};

}  // namespace eng::testing
