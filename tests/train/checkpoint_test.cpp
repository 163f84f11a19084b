// tests/train/checkpoint_test.cpp: safetensors checkpoints: bitwise resume, SIGKILL during a
// write, truncated/corrupted files refused, params-only and cross-mesh restore, and a
// stdlib-only Python reader.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#include "engine/base/clock.h"
#include "engine/train/checkpoint.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

using testing::TempDir;
using testing::tiny_config;
namespace fs = std::filesystem;

Config ckpt_config(const std::string& base, int64_t period) {
  Config c = tiny_config(10);
  EXPECT_TRUE(c.set("enable_checkpointing", true).ok());
  EXPECT_TRUE(c.set("base_output_directory", base).ok());
  EXPECT_TRUE(c.set("run_name", "resume").ok());
  EXPECT_TRUE(c.set("checkpoint_period", period).ok());
  EXPECT_TRUE(c.set("save_checkpoint_on_completion", false).ok());
  return c;
}

std::vector<double> losses(Trainer& t, int64_t steps) {
  std::vector<double> out;
  Status s = t.train(steps, [&](const StepMetrics& m) {
    out.push_back(m.loss);
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

std::vector<double> uninterrupted(int64_t steps) {
  auto t = Trainer::create(tiny_config(10), Mesh()).value();
  return losses(*t, steps);
}

TEST(CheckpointTest, ResumeFromStep5IsBitwiseEqual) {
  const std::vector<double> full = uninterrupted(10);
  TempDir dir("resume");
  {
    auto t = Trainer::create(ckpt_config(dir.str(), 5), Mesh()).value();
    EXPECT_EQ(t->restored_from(), "");
    std::vector<double> first = losses(*t, 6);  // steps 0..5, checkpoint after step 5
    EXPECT_EQ(first, std::vector<double>(full.begin(), full.begin() + 6));
  }
  EXPECT_EQ(list_checkpoints(dir / "resume/checkpoints"), (std::vector<int64_t>{5}));
  auto t = Trainer::create(ckpt_config(dir.str(), 5), Mesh()).value();
  EXPECT_EQ(t->restored_from(), checkpoint_path(dir / "resume/checkpoints", 5));
  EXPECT_EQ(t->current_step(), 6);
  EXPECT_EQ(t->data()->position(), 6);
  std::vector<double> rest = losses(*t, 4);  // steps 6..9
  EXPECT_EQ(rest, std::vector<double>(full.begin() + 6, full.end()));
}

TEST(CheckpointTest, KeepsOnlyTheNewest) {
  TempDir dir("keep");
  Config c = ckpt_config(dir.str(), 2);
  ASSERT_TRUE(c.set("max_num_checkpoints_to_keep", int64_t{2}).ok());
  ASSERT_TRUE(c.set("save_checkpoint_on_completion", true).ok());
  auto t = Trainer::create(c, Mesh()).value();
  losses(*t, 8);  // 2, 4, 6 on period, 7 on completion
  EXPECT_EQ(list_checkpoints(dir / "resume/checkpoints"), (std::vector<int64_t>{6, 7}));
}

// The child half of the SIGKILL test: runs only when the parent sets the env var.
TEST(CheckpointKillChild, TrainsUntilKilled) {
  const char* base = std::getenv("SHARDLAB_CKPT_KILL_DIR");
  if (base == nullptr) GTEST_SKIP() << "run by CheckpointTest.SigkillDuringWriteKeepsThePrevious";
  Config c = ckpt_config(base, 3);
  ASSERT_TRUE(c.set("debug_checkpoint_delay_steps", "6").ok());
  ASSERT_TRUE(c.set("debug_checkpoint_delay_seconds", 60.0).ok());  // killed long before
  auto t = Trainer::create(c, Mesh()).value();
  losses(*t, 10);
  FAIL() << "the parent should have killed this process";
}

TEST(CheckpointTest, SigkillDuringWriteKeepsThePreviousCheckpoint) {
  const std::vector<double> full = uninterrupted(10);
  TempDir dir("kill");
  const std::string root = dir / "resume/checkpoints";
  const std::string tmp = checkpoint_path(root, 6) + ".tmp";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // exec a fresh copy of this binary (a forked multithreaded process must not keep running).
    ::setenv("SHARDLAB_CKPT_KILL_DIR", dir.str().c_str(), 1);
    ::execl("/proc/self/exe", "train_test", "--gtest_filter=CheckpointKillChild.*", nullptr);
    ::_exit(127);
  }
  const double deadline = now_seconds() + 60;
  while (!fs::exists(tmp) && now_seconds() < deadline) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) FAIL() << "child exited early, status " << st;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(fs::exists(tmp)) << "the child never started writing checkpoint 6";
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{3}));  // 6 never committed
  EXPECT_TRUE(fs::exists(tmp));                                    // the partial file is ignored
  auto t = Trainer::create(ckpt_config(dir.str(), 3), Mesh()).value();
  EXPECT_EQ(t->current_step(), 4);
  std::vector<double> rest = losses(*t, 3);  // steps 4..6 (6 re-saves over the leftover .tmp)
  EXPECT_EQ(rest, std::vector<double>(full.begin() + 4, full.begin() + 7));
  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{3, 6}));
  EXPECT_FALSE(fs::exists(tmp));
}

std::string saved_checkpoint(const TempDir& dir) {
  auto t = Trainer::create(ckpt_config(dir.str(), 2), Mesh()).value();
  losses(*t, 3);
  return checkpoint_path(dir / "resume/checkpoints", 2);
}

void copy_with(const std::string& from, const std::string& to, FunctionRef<void(std::string&)> edit) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  edit(bytes);
  std::ofstream(to, std::ios::binary) << bytes;
}

TEST(CheckpointTest, TruncatedOrCorruptedFilesAreRefused) {
  TempDir dir("corrupt");
  const std::string good = saved_checkpoint(dir);
  ASSERT_TRUE(read_checkpoint(good).ok());
  struct Case {
    const char* name;
    void (*edit)(std::string&);
    const char* expect;
  };
  const Case cases[] = {
      {"truncated", [](std::string& b) { b.resize(b.size() - 100); }, "truncated"},
      {"tiny", [](std::string& b) { b.resize(5); }, "truncated"},
      {"flipped", [](std::string& b) { b[b.size() - 7] ^= 0x10; }, "corrupted: crc32"},
      {"header", [](std::string& b) { b[8] = '#'; }, "header is not valid JSON"},
      {"step", [](std::string& b) { b.replace(b.find("\"step\":\"2\""), 10, "\"step\":\"4\""); },
       "corrupted: crc32"},
      {"trailing", [](std::string& b) { b += "xxxx"; }, "trailing bytes"},
  };
  for (const Case& c : cases) {
    const std::string bad = dir / (std::string(c.name) + ".safetensors");
    copy_with(good, bad, c.edit);
    Result<CheckpointFile> r = read_checkpoint(bad);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    // The trainer refuses it too: no half-loaded state.
    Config cfg = tiny_config(10);
    ASSERT_TRUE(cfg.set("load_full_state_path", bad).ok());
    Result<std::unique_ptr<Trainer>> t = Trainer::create(cfg, Mesh());
    ASSERT_FALSE(t.ok()) << c.name;
    EXPECT_EQ(t.status().message(), r.status().message());
  }
  Result<CheckpointFile> missing = read_checkpoint(dir / "nope.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.safetensors"), std::string::npos);
}

TEST(CheckpointTest, LoadParametersPathRestoresParamsOnly) {
  TempDir dir("params");
  const std::string path = saved_checkpoint(dir);
  Config c = tiny_config(10);
  ASSERT_TRUE(c.set("load_parameters_path", fs::path(path).parent_path().string()).ok());  // a step dir
  auto t = Trainer::create(c, Mesh()).value();
  EXPECT_EQ(t->current_step(), 0);
  EXPECT_EQ(t->data()->position(), 0);
  CheckpointFile f = read_checkpoint(path).value();
  const std::string w = "params/decoder/layers_0/mlp/wi_0/kernel";
  std::vector<float> got = t->fetch_argument(w).value();
  ASSERT_EQ(got.size() * 4, static_cast<size_t>(f.find(w)->end - f.find(w)->begin));
  EXPECT_EQ(std::memcmp(got.data(), f.bytes(*f.find(w)), got.size() * 4), 0);
  std::vector<float> mu = t->fetch_argument("opt_state/mu/decoder/layers_0/mlp/wi_0/kernel").value();
  EXPECT_EQ(mu, std::vector<float>(mu.size(), 0.0f));  // optimizer state starts fresh
}

TEST(CheckpointTest, RestoresOntoAnotherMesh) {
  TempDir dir("mesh");
  const std::string path = saved_checkpoint(dir);  // one device
  CheckpointFile f = read_checkpoint(path).value();
  for (const char* axis : {"data", "fsdp"}) {  // replicated, then sharded params and state
    Mesh two = Mesh::create({axis}, {2}).value();
    Config c = tiny_config(10);
    ASSERT_TRUE(c.set("load_full_state_path", path).ok());
    auto t = Trainer::create(c, two).value();
    EXPECT_EQ(t->current_step(), 3);
    for (const char* name : {"params/decoder/layers_1/self_attention/query/kernel",
                             "opt_state/nu/decoder/layers_1/mlp/wo/kernel"}) {
      const CheckpointFile::Entry* e = f.find(name);
      ASSERT_NE(e, nullptr) << name;
      std::vector<float> got = t->fetch_argument(name).value();
      EXPECT_EQ(std::memcmp(got.data(), f.bytes(*e), got.size() * 4), 0) << axis << " " << name;
    }
    ASSERT_TRUE(t->step_and_wait().ok()) << axis;  // and it trains on from there
  }
}

TEST(CheckpointTest, ReadableByAStdlibPythonReader) {
  if (std::system("python3 -c 'import json, struct, zlib' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 not available";
  TempDir dir("python");
  const std::string path = saved_checkpoint(dir);
  const std::string script = dir / "read.py";
  std::ofstream(script) << R"(import json, struct, sys, zlib
with open(sys.argv[1], "rb") as f:
    data = f.read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
meta = header.pop("__metadata__")
body = data[8 + n:]
crc = meta["crc32"]
zeroed = data[8:8 + n].replace(b'"crc32":"%s"' % crc.encode(), b'"crc32":"00000000"', 1)
assert "%08x" % zlib.crc32(zeroed + body) == crc, "crc mismatch"
def tensor(name):
    t = header[name]
    b, e = t["data_offsets"]
    fmt = {"F32": "f", "I32": "i"}[t["dtype"]]
    return struct.unpack("<%d%s" % ((e - b) // 4, fmt), body[b:e]), t["shape"]
(step,), _ = tensor("step")
w, shape = tensor("params/decoder/layers_0/mlp/wi_0/kernel")
print(meta["step"], meta["data_position"], step, shape[0], shape[1], repr(w[0]), len(header))
)";
  const std::string out_file = dir / "out.txt";
  ASSERT_EQ(std::system(fmt::format("python3 '{}' '{}' > '{}'", script, path, out_file).c_str()), 0);
  std::ifstream in(out_file);
  std::string meta_step, position, first;
  int64_t step = 0, rows = 0, cols = 0, count = 0;
  in >> meta_step >> position >> step >> rows >> cols >> first >> count;
  EXPECT_EQ(meta_step, "2");
  EXPECT_EQ(position, "3");
  EXPECT_EQ(step, 3);  // optax count after steps 0..2
  EXPECT_EQ(rows, 64);
  EXPECT_EQ(cols, 128);
  CheckpointFile f = read_checkpoint(path).value();
  float w0 = 0;
  std::memcpy(&w0, f.bytes(*f.find("params/decoder/layers_0/mlp/wi_0/kernel")), 4);
  EXPECT_DOUBLE_EQ(std::strtod(first.c_str(), nullptr), static_cast<double>(w0));
  EXPECT_EQ(count, static_cast<int64_t>(f.tensors.size()));
}

TEST(CheckpointTest, Crc32MatchesZlib) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the standard check value
  EXPECT_EQ(crc32("6789", 4, crc32("12345", 5)), 0xCBF43926u);
}

}  // namespace
}  // namespace eng
