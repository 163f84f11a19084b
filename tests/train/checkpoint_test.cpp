// tests/train/checkpoint_test.cpp: safetensors checkpoints: bitwise resume, SIGKILL during a
// write, truncated/corrupted files refused, params-only and cross-mesh restore, and a
// stdlib-only Python reader.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#include "engine/base/clock.h"
#include "engine/store/metrics_store.h"
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
  // Pinned: these tests count the period's checkpoints (MaxText's default, true, also saves
  // step 0; CheckpointTest.SaveCheckpointOnStartSavesStepZeroOnce covers it).
  EXPECT_TRUE(c.set("save_checkpoint_on_start", false).ok());
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

// MaxText's save_checkpoint_on_start (default true): step 0 is saved when checkpointing is on,
// once (a one-step run's completion save does not repeat it); a resumed run still continues
// from the latest checkpoint and saves nothing it restored.
TEST(CheckpointTest, SaveCheckpointOnStartSavesStepZeroOnce) {
  const std::vector<double> full = uninterrupted(10);
  TempDir dir("onstart");
  auto store = MetricsStore::open(dir / "m.db").value();
  Config c = ckpt_config(dir.str(), 5);
  ASSERT_TRUE(c.set("save_checkpoint_on_start", true).ok());
  ASSERT_TRUE(c.set("save_checkpoint_on_completion", true).ok());
  const fs::path ckpts = dir / "resume/checkpoints";
  {
    auto t = Trainer::create(c, Mesh(), {.store = store.get()}).value();
    EXPECT_EQ(losses(*t, 1), std::vector<double>(full.begin(), full.begin() + 1));
  }
  EXPECT_EQ(list_checkpoints(ckpts), (std::vector<int64_t>{0}));
  {
    auto t = Trainer::create(c, Mesh(), {.store = store.get()}).value();  // resumes after 0
    EXPECT_EQ(t->restored_from(), checkpoint_path(ckpts, 0));
    EXPECT_EQ(t->current_step(), 1);
    EXPECT_EQ(losses(*t, 6), std::vector<double>(full.begin() + 1, full.begin() + 7));
  }
  EXPECT_EQ(list_checkpoints(ckpts), (std::vector<int64_t>{0, 5, 6}));  // 5: period, 6: last
  {
    auto t = Trainer::create(c, Mesh(), {.store = store.get()}).value();
    EXPECT_EQ(t->current_step(), 7);
    EXPECT_EQ(losses(*t, 3), std::vector<double>(full.begin() + 7, full.end()));
  }
  EXPECT_EQ(list_checkpoints(ckpts), (std::vector<int64_t>{0, 5, 6, 9}));
  // Every save is a row of the checkpoints table: four saves, none of a step twice.
  QueryResult rows = store->query("SELECT step FROM checkpoints ORDER BY step").value();
  ASSERT_EQ(rows.rows.size(), 4u);
  for (size_t i = 0; i < rows.rows.size(); ++i)
    EXPECT_EQ(std::get<int64_t>(rows.rows[i][0]), (std::vector<int64_t>{0, 5, 6, 9})[i]);

  // Off: no step 0.
  TempDir off("onstart_off");
  Config o = ckpt_config(off.str(), 5);
  ASSERT_TRUE(o.set("save_checkpoint_on_start", false).ok());
  auto u = Trainer::create(o, Mesh()).value();
  losses(*u, 3);
  EXPECT_EQ(list_checkpoints(off / "resume/checkpoints"), (std::vector<int64_t>{}));
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
  // The writer's temporary file: state.safetensors.tmp.<random> beside the final name.
  auto tmp_exists = [&] {
    const fs::path final_path(checkpoint_path(root, 6));
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(final_path.parent_path(), ec))
      if (e.path().filename().string().rfind("state.safetensors.tmp.", 0) == 0) return true;
    return false;
  };
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // exec a fresh copy of this binary (a forked multithreaded process must not keep running).
    ::setenv("SHARDLAB_CKPT_KILL_DIR", dir.str().c_str(), 1);
    ::execl("/proc/self/exe", "train_test", "--gtest_filter=CheckpointKillChild.*", nullptr);
    ::_exit(127);
  }
  const double deadline = now_seconds() + 60;
  while (!tmp_exists() && now_seconds() < deadline) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) FAIL() << "child exited early, status " << st;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(tmp_exists()) << "the child never started writing checkpoint 6";
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{3}));  // 6 never committed
  EXPECT_TRUE(tmp_exists());                                       // the partial file is ignored
  auto t = Trainer::create(ckpt_config(dir.str(), 3), Mesh()).value();
  EXPECT_EQ(t->current_step(), 4);
  std::vector<double> rest = losses(*t, 3);  // steps 4..6 (6 re-saves over the leftover .tmp)
  EXPECT_EQ(rest, std::vector<double>(full.begin() + 4, full.begin() + 7));
  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{3, 6}));
  EXPECT_FALSE(tmp_exists());
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

// ---- hostile files (issue 16 items 2, 4, 6, 9, 10) ----------------------------------------

// A two-tensor checkpoint: "a" (2,) at [0, 8) and "b" (2,) at [8, 16), step 1.
std::string two_tensor_checkpoint(const TempDir& dir) {
  const std::string path = dir / "two/state.safetensors";
  const CheckpointTensorSpec specs[] = {{"a", DType::kF32, Shape{2}}, {"b", DType::kF32, Shape{2}}};
  Result<int64_t> r = write_checkpoint(
      path, specs,
      [](int i, void* dst) {
        const float v[2] = {1.0f + i, 2.0f + i};
        std::memcpy(dst, v, sizeof v);
        return ok_status();
      },
      {{"step", "1"}, {"data_position", "2"}});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return path;
}

// Rewrites the header with `from` replaced by `to`, and recomputes the checksum (and the
// length prefix), as a forger would.
std::string forged(const std::string& good, const std::string& from, const std::string& to) {
  std::ifstream in(good, std::ios::binary);
  std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i)
    len |= static_cast<uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
  std::string header = b.substr(8, len), data = b.substr(8 + len);
  const size_t at = header.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  header.replace(at, from.size(), to);
  const size_t crc_at = header.find("\"crc32\":\"") + 9;
  header.replace(crc_at, 8, "00000000");
  const uint32_t crc = crc32(data.data(), data.size(), crc32(header.data(), header.size()));
  header.replace(crc_at, 8, fmt::format("{:08x}", crc));
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(header.size() >> (8 * i));
  return out + header + data;
}

TEST(CheckpointTest, ForgedHeadersWithValidChecksumsAreRefused) {
  TempDir dir("forged");
  const std::string good = two_tensor_checkpoint(dir);
  ASSERT_TRUE(read_checkpoint(good).ok());
  struct Case {
    const char *name, *from, *to, *expect;
  };
  const Case cases[] = {
      {"overlap", "[8,16]", "[4,12]", "overlap"},
      {"duplicate", "\"b\":", "\"a\":", "'a' appears twice"},
      {"negative_step", "\"step\":\"1\"", "\"step\":\"-1\"", "'step' is -1, outside"},
      {"max_step", "\"step\":\"1\"", "\"step\":\"9223372036854775807\"", "outside"},
      {"huge_step", "\"step\":\"1\"", "\"step\":\"99999999999999999999\"", "not an integer"},
      {"max_position", "\"data_position\":\"2\"", "\"data_position\":\"9223372036854775807\"",
       "'data_position' is 9223372036854775807, outside"},
      {"numel_overflow", "\"shape\":[2]", "\"shape\":[4294967296,4294967296]", "more than"},
      {"huge_dim", "\"shape\":[2]", "\"shape\":[1e300]", "bad shape"},
  };
  for (const Case& c : cases) {
    const std::string bytes = forged(good, c.from, c.to);
    const std::string bad = dir / (std::string(c.name) + ".safetensors");
    std::ofstream(bad, std::ios::binary) << bytes;
    for (const Result<CheckpointFile>& r : {read_checkpoint(bad), parse_checkpoint(bad, bytes)}) {
      ASSERT_FALSE(r.ok()) << c.name;
      EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().message();
      EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    }
  }
}

TEST(CheckpointTest, NonRegularAndHugeFilesAreRefusedWithoutBlocking) {
  TempDir dir("fifo");
  const std::string fifo = dir / "fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<CheckpointFile> r = read_checkpoint(fifo);  // blocked in open() before
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a FIFO, not a regular file"), std::string::npos)
      << r.status().message();
  Result<CheckpointFile> dev = read_checkpoint("/dev/zero");
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.status().message().find("is a character device"), std::string::npos);
  // A sparse 100 GB file of zeros: refused after its header, not read whole.
  const std::string huge = dir / "huge.safetensors";
  {
    std::ofstream(huge).put('\0');
  }
  fs::resize_file(huge, int64_t{100} << 30);
  const double t0 = now_seconds();
  Result<CheckpointFile> h = read_checkpoint(huge);
  ASSERT_FALSE(h.ok());
  EXPECT_LT(now_seconds() - t0, 5.0);
  EXPECT_NE(h.status().message().find("header is not valid JSON"), std::string::npos)
      << h.status().message();
}

TEST(CheckpointTest, StepDirectoriesThatAreNotStepsAreSkipped) {
  TempDir dir("steps");
  const std::string good = two_tensor_checkpoint(dir);
  for (const char* name : {"3", "99999999999999999999", "9007199254740993", "+4", "-5"}) {
    fs::create_directories(fs::path(dir / "root") / name);
    fs::copy_file(good, fs::path(dir / "root") / name / kCheckpointFileName);
  }
  EXPECT_EQ(list_checkpoints(dir / "root"), (std::vector<int64_t>{3}));  // stoll threw before
}

TEST(CheckpointTest, TempFileNeverFollowsAPlantedSymlink) {
  TempDir dir("symlink");
  const std::string victim = dir / "victim.txt";
  std::ofstream(victim) << "precious";
  const std::string path = dir / "two/state.safetensors";
  fs::create_directories(dir / "two");
  fs::create_symlink(victim, path + ".tmp");
  two_tensor_checkpoint(dir);
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious");
  EXPECT_TRUE(read_checkpoint(path).ok());
}

TEST(CheckpointTest, ACorruptLatestCheckpointFallsBackToTheLatestValidOne) {
  TempDir dir("fallback");
  {
    auto t = Trainer::create(ckpt_config(dir.str(), 2), Mesh()).value();
    losses(*t, 5);  // checkpoints 2 and 4
  }
  const std::string root = dir / "resume/checkpoints";
  ASSERT_EQ(list_checkpoints(root), (std::vector<int64_t>{2, 4}));
  copy_with(checkpoint_path(root, 4), checkpoint_path(root, 4),
            [](std::string& b) { b[b.size() - 7] ^= 0x10; });
  Result<std::unique_ptr<Trainer>> t = Trainer::create(ckpt_config(dir.str(), 2), Mesh());
  ASSERT_TRUE(t.ok()) << t.status().message();  // refused to start before
  EXPECT_EQ((*t)->current_step(), 3);
  EXPECT_EQ((*t)->restored_from(), checkpoint_path(root, 2));
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
