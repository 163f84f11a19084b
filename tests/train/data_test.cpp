// tests/train/data_test.cpp: synthetic, text and .npy sources and their errors.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine/train/data.h"

namespace eng {
namespace {

namespace fs = std::filesystem;

ResolvedConfig tiny(const std::string& type, const std::string& path, int64_t b = 2, int64_t t = 8) {
  Config c;
  EXPECT_TRUE(c.set("dataset_type", type).ok());
  EXPECT_TRUE(c.set("dataset_path", path).ok());
  EXPECT_TRUE(c.set("per_device_batch_size", static_cast<double>(b)).ok());
  EXPECT_TRUE(c.set("max_target_length", t).ok());
  return resolve_config(c, 1).value();
}

std::string temp_file(const std::string& name, const std::string& contents) {
  fs::path p = fs::temp_directory_path() / ("shardlab_data_test_" + name);
  std::ofstream(p, std::ios::binary) << contents;
  return p.string();
}

TEST(DataTest, SyntheticIsMaxTextsZeros) {
  auto src = make_data_source(tiny("synthetic", "")).value();
  HostBatch b;
  src->next(b);
  EXPECT_EQ(b.inputs, std::vector<int32_t>(16, 0));
  EXPECT_EQ(b.inputs_position[9], 1);
  EXPECT_EQ(b.targets_segmentation[15], 1);
  EXPECT_EQ(src->position(), 1);
}

TEST(DataTest, TextTargetsAreInputsShiftedByOne) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + i % 26);
  auto src = make_data_source(tiny("text", temp_file("abc.txt", text))).value();
  HostBatch b;
  src->next(b);
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t + 1 < 8; ++t) EXPECT_EQ(b.targets[r * 8 + t], b.inputs[r * 8 + t + 1]);
  // Deterministic and seekable: batch 1 is the same whether reached by next() or set_position.
  HostBatch b1, again;
  src->next(b1);
  auto src2 = make_data_source(tiny("text", temp_file("abc.txt", text))).value();
  src2->set_position(1);
  src2->next(again);
  EXPECT_EQ(b1.inputs, again.inputs);
}

TEST(DataTest, TextErrorsNameTheFile) {
  auto missing = make_data_source(tiny("text", "/nonexistent/shardlab.txt"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot open '/nonexistent/shardlab.txt'"), std::string::npos);
  auto empty = make_data_source(tiny("text", temp_file("empty.txt", "")));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("is empty"), std::string::npos);
  auto shortf = make_data_source(tiny("text", temp_file("short.txt", "abc")));
  ASSERT_FALSE(shortf.ok());
  EXPECT_NE(shortf.status().message().find("has 3 tokens, fewer than one sequence of 8"), std::string::npos);
  // T + 1 tokens are exactly one window (T inputs, T targets shifted by one); T are too few.
  EXPECT_FALSE(make_data_source(tiny("text", temp_file("eight.txt", "abcdefgh"))).ok());
  auto nine = make_data_source(tiny("text", temp_file("nine.txt", "abcdefghi")));
  ASSERT_TRUE(nine.ok()) << nine.status().message();
  HostBatch b;
  (*nine)->next(b);
  EXPECT_EQ(b.inputs[0], 'a');
  EXPECT_EQ(b.inputs[7], 'h');
  EXPECT_EQ(b.targets[7], 'i');
}

std::string npy(const std::string& descr, const std::string& payload, size_t n) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                       std::to_string(n) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + payload;
}

TEST(DataTest, NpyTokensLoadAndAreRangeChecked) {
  std::string payload;
  for (int i = 0; i < 40; ++i) {
    uint16_t v = static_cast<uint16_t>(i % 50);
    payload.append(reinterpret_cast<const char*>(&v), 2);
  }
  auto src = make_data_source(tiny("tokens", temp_file("ok.npy", npy("<u2", payload, 40)))).value();
  HostBatch b;
  src->next(b);
  EXPECT_EQ(b.targets[0], b.inputs[1]);
  std::string bad;
  for (int i = 0; i < 40; ++i) {
    int32_t v = i == 17 ? 300 : 1;
    bad.append(reinterpret_cast<const char*>(&v), 4);
  }
  auto r = make_data_source(tiny("tokens", temp_file("bad.npy", npy("<i4", bad, 40))));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("token 300 at index 17 is outside the vocabulary [0, 256)"),
            std::string::npos);
  auto notnpy = make_data_source(tiny("tokens", temp_file("x.npy", "hello world, not numpy")));
  EXPECT_NE(notnpy.status().message().find("not a .npy file"), std::string::npos);
}

// Issue 16 item 6: a FIFO blocked in open(); /dev/zero and /dev/urandom were read forever.
TEST(DataTest, NonRegularFilesAreRefusedAtOnce) {
  const fs::path fifo =
      fs::temp_directory_path() / fmt::format("shardlab_data_fifo_{}", ::getpid());
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string type : {"text", "tokens"}) {
    auto r = make_data_source(tiny(type, fifo.string()));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("is a FIFO, not a regular file"), std::string::npos)
        << r.status().message();
  }
  fs::remove(fifo);
  for (const char* dev : {"/dev/zero", "/dev/urandom"}) {
    auto r = make_data_source(tiny("text", dev));
    ASSERT_FALSE(r.ok()) << dev;
    EXPECT_NE(r.status().message().find("is a character device, not a regular file"),
              std::string::npos) << r.status().message();
  }
  auto dir = make_data_source(tiny("text", fs::temp_directory_path().string()));
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos);
}

}  // namespace
}  // namespace eng
