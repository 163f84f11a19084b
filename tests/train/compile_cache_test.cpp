// tests/train/compile_cache_test.cpp: the compile cache end to end (MaxText's compile_cache_test
// and PR 4174): one compile per run after an AOT compile, the double compile with an unsharded
// shaped batch and its explanation, a second PROCESS loading the persistent entry, damaged
// entries recompiled, which changes change the key, and LRU eviction under a size limit.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "engine/base/hash.h"
#include "engine/compile/cache.h"
#include "engine/compile/jit.h"
#include "engine/compile/serialize.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

namespace fs = std::filesystem;
using eng::testing::TempDir;
using eng::testing::tiny_config;

// 4 devices: data=2, fsdp=2 (mesh_from_config fills fsdp), so the batch is i32[8@(data,fsdp),32].
Mesh mesh4(const Config& c) { return mesh_from_config(c, 4).value(); }

Config cache_config(int64_t steps, const std::string& cache_dir = "") {
  Config c = tiny_config(steps);
  EXPECT_TRUE(c.set("ici_data_parallelism", int64_t{2}).ok());
  EXPECT_TRUE(c.set("max_inflight_steps", int64_t{0}).ok());
  if (!cache_dir.empty()) {
    EXPECT_TRUE(c.set("compilation_cache_dir", cache_dir).ok());
    EXPECT_TRUE(c.set("persistent_cache_min_compile_time_secs", 0.0).ok());  // MaxText PR 4996
  }
  return c;
}

// Captures log_compiles / explain_cache_misses lines while alive.
class LogCapture {
 public:
  LogCapture() { set_compile_log_sink([this](std::string_view l) { text_ += std::string(l) + "\n"; }); }
  ~LogCapture() { set_compile_log_sink(nullptr); }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

std::vector<std::vector<SqlValue>> rows(MetricsStore& s, const std::string& sql, const std::string& run) {
  SqlValue a[] = {run};
  Result<QueryResult> r = s.query(sql, a);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->rows : std::vector<std::vector<SqlValue>>{};
}

std::string text(const SqlValue& v) { return std::holds_alternative<std::string>(v) ? std::get<std::string>(v) : ""; }

// Losses of `steps` steps, as exact hex floats, plus a digest of every parameter after them.
std::string train_fingerprint(Trainer& t, int steps) {
  std::string out;
  for (int i = 0; i < steps; ++i) {
    Result<StepMetrics> m = t.step_and_wait();
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (m.ok()) out += fmt::format("{:a} ", m->loss);
  }
  uint64_t h = 0;
  for (int k = 0; k < t.layout().num_params; ++k) {
    const std::string& name = t.program().value(t.program().args()[k].value).name;
    std::vector<float> p = t.fetch_argument(name).value();
    h = hash_mix(h, digest64(std::string_view(reinterpret_cast<const char*>(p.data()), p.size() * 4)));
  }
  return out + fmt::format("params {:016x}", h);
}

TEST(CompileCacheTest, AotCompileThenStepsCompilesOnce) {
  ExecutableCache::global().clear();
  TempDir dir("cc_once");
  auto store = MetricsStore::open(dir / "m.db").value();
  Config c = cache_config(4);
  auto t = Trainer::create(c, mesh4(c), {.store = store.get()}).value();
  ASSERT_TRUE(t->compile().ok());
  ASSERT_TRUE(t->train(3, [](const StepMetrics&) { return true; }).ok());
  EXPECT_EQ(t->num_compiles(), 1);
  auto r = rows(*store, "SELECT outcome, step, reason_kind FROM compilations WHERE run_id = ? AND "
                        "cache_level = 'tracing' ORDER BY compile_id", t->run_id());
  ASSERT_EQ(r.size(), 4u);  // the AOT miss, then steps 0, 1, 2 hit
  EXPECT_EQ(text(r[0][0]), "miss");
  EXPECT_EQ(text(r[0][2]), "never_seen");
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(text(r[i][0]), "hit");
    EXPECT_EQ(std::get<int64_t>(r[i][1]), i - 1);
  }
  auto compiles = rows(*store, "SELECT count(*) FROM compilations WHERE run_id = ? AND compile_s IS NOT NULL",
                       t->run_id());
  EXPECT_EQ(std::get<int64_t>(compiles[0][0]), 1);
  auto mem = rows(*store, "SELECT m.argument_size_in_bytes, m.peak_memory_in_bytes, m.est_total_bytes "
                          "FROM memory_analysis m JOIN compilations c USING (compile_id) WHERE c.run_id = ?",
                  t->run_id());
  ASSERT_EQ(mem.size(), 1u);
  EXPECT_EQ(std::get<int64_t>(mem[0][1]), std::get<int64_t>(mem[0][2]));  // peak = arg + out + temp - alias
  auto cost = rows(*store, "SELECT count(*) FROM cost_analysis a JOIN compilations c USING (compile_id) "
                           "WHERE c.run_id = ? AND a.key IN ('flops', 'bytes accessed')", t->run_id());
  EXPECT_EQ(std::get<int64_t>(cost[0][0]), 2);
}

TEST(CompileCacheTest, UnshardedShapedBatchCompilesTwiceAndExplainsWhy) {
  ExecutableCache::global().clear();
  TempDir dir("cc_bug");
  auto store = MetricsStore::open(dir / "m.db").value();
  Config c = cache_config(4);
  ASSERT_TRUE(c.set("aot_shaped_batch_sharding", false).ok());
  ASSERT_TRUE(c.set("explain_cache_misses", true).ok());
  LogCapture log;
  auto t = Trainer::create(c, mesh4(c), {.store = store.get()}).value();
  ASSERT_TRUE(t->compile().ok());
  ASSERT_TRUE(t->train(3, [](const StepMetrics&) { return true; }).ok());
  EXPECT_EQ(t->num_compiles(), 2);  // MaxText before PR 4174: the AOT compile, then step 0's
  auto r = rows(*store, "SELECT outcome, step, reason_kind, reason_text FROM compilations WHERE "
                        "run_id = ? AND cache_level = 'tracing' ORDER BY compile_id", t->run_id());
  ASSERT_EQ(r.size(), 4u);  // AOT miss, step 0 miss, steps 1 and 2 hit
  EXPECT_EQ(text(r[1][0]), "miss");
  EXPECT_EQ(std::get<int64_t>(r[1][1]), 0);
  EXPECT_EQ(text(r[1][2]), "types");
  const std::string why = text(r[1][3]);
  EXPECT_NE(why.find("TRACING CACHE MISS at Trainer::step"), std::string::npos) << why;
  EXPECT_NE(why.find("different input types:"), std::string::npos) << why;
  EXPECT_NE(why.find("  * at inputs, now i32[8@(data,fsdp),32] and before i32[8,32]"), std::string::npos) << why;
  EXPECT_EQ(why.find("params/"), std::string::npos) << "only the batch differs: " << why;
  EXPECT_NE(log.text().find(why), std::string::npos);
  EXPECT_EQ(text(r[2][0]), "hit");
  EXPECT_EQ(text(r[3][0]), "hit");
  auto steps = rows(*store, "SELECT compiled FROM steps WHERE run_id = ? ORDER BY step", t->run_id());
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(std::get<int64_t>(steps[0][0]), 1);
  EXPECT_EQ(std::get<int64_t>(steps[1][0]), 0);
}

TEST(CompileCacheTest, LogCompilesPrintsJaxMessagesAndMemory) {
  ExecutableCache::global().clear();
  TempDir dir("cc_log");
  Config c = cache_config(2, dir / "cache");
  ASSERT_TRUE(c.set("log_compiles", true).ok());
  LogCapture log;
  auto t = Trainer::create(c, mesh4(c)).value();
  ASSERT_TRUE(t->compile().ok());
  const std::string& s = log.text();
  EXPECT_NE(s.find("Compiling jit_train_step with global shapes and types ["), std::string::npos) << s;
  EXPECT_NE(s.find("i32[8@(data,fsdp),32]"), std::string::npos) << s;
  EXPECT_NE(s.find("]. Argument mapping: ("), std::string::npos) << s;
  EXPECT_NE(s.find("Finished XLA compilation of jit(train_step) in "), std::string::npos) << s;
  EXPECT_NE(s.find("Total estimated memory size: "), std::string::npos) << s;
  EXPECT_NE(s.find("Note that compiler could over-estimate the HBM usage."), std::string::npos) << s;
  EXPECT_NE(s.find("Writing jit_train_step to persistent compilation cache with key 'jit_train_step-" +
                   t->last_compile().key + "'"), std::string::npos) << s;
}

TEST(CompileCacheTest, MinCompileTimeSkipsTheWrite) {
  ExecutableCache::global().clear();
  TempDir dir("cc_skip");
  Config c = cache_config(2, dir / "cache");
  ASSERT_TRUE(c.set("persistent_cache_min_compile_time_secs", 1000.0).ok());
  auto store = MetricsStore::open(dir / "m.db").value();
  auto t = Trainer::create(c, mesh4(c), {.store = store.get()}).value();
  ASSERT_TRUE(t->compile().ok());
  auto r = rows(*store, "SELECT reason_text FROM compilations WHERE run_id = ? AND outcome = 'skip'", t->run_id());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(text(r[0][0]).find("Not writing persistent cache entry for 'jit_train_step' because it took < "
                               "1000.00 seconds to compile ("), std::string::npos) << text(r[0][0]);
  EXPECT_TRUE(!fs::exists(dir / "cache") || fs::is_empty(dir / "cache"));
}

// ---- a second process ----------------------------------------------------------------------

// Runs only when exec'd by SecondProcessLoadsThePersistentEntry: trains with the cache dir and
// writes the fingerprint and the compile count next to the store.
TEST(CompileCacheChild, TrainsFromTheCache) {
  const char* dir = std::getenv("SHARDLAB_COMPILE_CACHE_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run by CompileCacheTest.SecondProcessLoadsThePersistentEntry";
  const std::string d = dir;
  auto store = MetricsStore::open(d + "/child.db").value();
  Config c = cache_config(3, d + "/cache");
  ASSERT_TRUE(c.set("log_compiles", true).ok());
  auto t = Trainer::create(c, mesh4(c), {.store = store.get()}).value();
  ASSERT_TRUE(t->compile().ok());
  const std::string fp = train_fingerprint(*t, 3);
  std::ofstream(d + "/child.txt") << t->run_id() << "\n" << t->num_compiles() << "\n" << fp << "\n";
}

TEST(CompileCacheTest, SecondProcessLoadsThePersistentEntry) {
  ExecutableCache::global().clear();
  TempDir dir("cc_proc");
  std::string fresh;
  {
    Config c = cache_config(3, dir / "cache");
    auto t = Trainer::create(c, mesh4(c)).value();
    ASSERT_TRUE(t->compile().ok());
    EXPECT_EQ(t->num_compiles(), 1);
    fresh = train_fingerprint(*t, 3);
  }
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir / "cache")) {
    EXPECT_EQ(e.path().filename().string().rfind("jit_train_step-", 0), 0u) << e.path();
    ++entries;
  }
  EXPECT_EQ(entries, 1);  // as MaxText's compile_cache_test: exactly one jit_train_step entry

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("SHARDLAB_COMPILE_CACHE_CHILD_DIR", dir.str().c_str(), 1);
    ::execl("/proc/self/exe", "compile_cache_test", "--gtest_filter=CompileCacheChild.*", nullptr);
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::ifstream f(dir / "child.txt");
  std::string run, compiles, fp;
  std::getline(f, run);
  std::getline(f, compiles);
  std::getline(f, fp);
  EXPECT_EQ(compiles, "0");       // the second process compiled nothing
  EXPECT_EQ(fp, fresh);           // and the loaded executable trains bitwise like a fresh one
  auto store = MetricsStore::open(dir / "child.db").value();
  auto r = rows(*store, "SELECT outcome, cache_level, compile_s FROM compilations WHERE run_id = ? "
                        "AND cache_level != 'tracing' ORDER BY compile_id", run);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(text(r[0][0]), "miss");  // not in the (fresh) process's executable cache
  EXPECT_EQ(text(r[0][1]), "executable");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(r[0][2]));
  EXPECT_EQ(text(r[1][0]), "hit");
  EXPECT_EQ(text(r[1][1]), "persistent");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(r[1][2]));  // no compile time: nothing compiled
  auto none = rows(*store, "SELECT count(*) FROM compilations WHERE run_id = ? AND compile_s IS NOT NULL", run);
  EXPECT_EQ(std::get<int64_t>(none[0][0]), 0);
}

// ---- damaged entries -----------------------------------------------------------------------

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_file(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

TEST(CompileCacheTest, DamagedEntriesAreDetectedReportedAndRecompiled) {
  TempDir dir("cc_bad");
  const std::string cache = dir / "cache";
  Config c = cache_config(2, cache);
  std::string entry_path, good, fresh;
  {
    ExecutableCache::global().clear();
    auto t = Trainer::create(c, mesh4(c)).value();
    ASSERT_TRUE(t->compile().ok());
    entry_path = cache + "/" + t->last_compile().key_name;
    fresh = train_fingerprint(*t, 2);
  }
  good = read_file(entry_path);
  ASSERT_GT(good.size(), 100u);
  // A foreign entry: a valid entry for another key (another batch size) under this name.
  std::string foreign;
  {
    ExecutableCache::global().clear();
    Config other = cache_config(2, dir / "other");
    ASSERT_TRUE(other.set("per_device_batch_size", 4.0).ok());
    auto t = Trainer::create(other, mesh4(other)).value();
    ASSERT_TRUE(t->compile().ok());
    foreign = read_file(dir / "other" + "/" + t->last_compile().key_name);
  }
  std::string flipped = good;
  flipped[flipped.size() - 9] ^= 0x5a;
  std::string version = good;
  version[8] = 99;
  std::string magic = good;
  magic[0] = 'X';
  const std::pair<std::string, std::string> cases[] = {
      {flipped, "checksum mismatch"},
      {good.substr(0, good.size() / 2), "truncated entry"},
      {good.substr(0, 5), "truncated entry"},
      {magic, "bad magic"},
      {version, "format version 99"},
      {foreign, "foreign entry: it holds key"},
  };
  for (const auto& [bytes, expect] : cases) {
    SCOPED_TRACE(expect);
    ExecutableCache::global().clear();
    write_file(entry_path, bytes);
    TempDir sdir("cc_bad_store");
    auto store = MetricsStore::open(sdir / "m.db").value();
    Config e = c;
    ASSERT_TRUE(e.set("explain_cache_misses", true).ok());
    LogCapture log;
    auto t = Trainer::create(e, mesh4(e), {.store = store.get()}).value();
    ASSERT_TRUE(t->compile().ok());
    EXPECT_EQ(t->num_compiles(), 1);  // recompiled, never executed
    auto r = rows(*store, "SELECT reason_text FROM compilations WHERE run_id = ? AND "
                          "cache_level = 'persistent' AND outcome = 'miss'", t->run_id());
    ASSERT_EQ(r.size(), 1u);
    EXPECT_NE(text(r[0][0]).find(expect), std::string::npos) << text(r[0][0]);
    EXPECT_NE(log.text().find("PERSISTENT COMPILATION CACHE MISS for 'jit_train_step' with key '" +
                              t->last_compile().key_name + "': "), std::string::npos) << log.text();
    EXPECT_EQ(train_fingerprint(*t, 2), fresh);  // the run succeeds, as a fresh compile
    EXPECT_EQ(read_file(entry_path), good);      // and the entry was rewritten
  }
}

// ---- the key -------------------------------------------------------------------------------

CacheKey aot_key(const Config& c, const Mesh& m) {
  auto t = Trainer::create(c, m, {.shape_only = true}).value();
  Signature sig = t->aot_signature().value();
  return make_cache_key("train_step", program_digest(t->program()), m,
                        compile_options_from_config(c).value(), sig);
}

// The Jit alone (no trainer, no store): it returns what happened for the caller to record.
TEST(JitTest, LookupReturnsTheEventAndWritesNothing) {
  ExecutableCache::global().clear();
  Config c = cache_config(2);
  const Mesh m = mesh4(c);
  auto t = Trainer::create(c, m, {.shape_only = true}).value();
  Jit jit("train_step", &t->program(), m, compile_options_from_config(c).value(), {});
  EXPECT_EQ(jit.current(), nullptr);
  const Signature sig = t->aot_signature().value();
  Result<CompileEvent> first = jit.lookup(sig, "JitTest");
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(first->compiled);
  EXPECT_FALSE(first->tracing_hit);
  ASSERT_EQ(first->records.size(), 2u);  // tracing miss, executable miss (compiled)
  EXPECT_EQ(first->records[0].outcome + "/" + first->records[0].level, "miss/tracing");
  EXPECT_EQ(first->records[0].reason_kind, "never_seen");
  EXPECT_TRUE(first->records[0].with_signature);
  EXPECT_EQ(first->records[1].outcome + "/" + first->records[1].level, "miss/executable");
  EXPECT_TRUE(first->records[1].compile_s.has_value());
  EXPECT_EQ(first->analysis_record, 1);
  ASSERT_EQ(first->notes.size(), 1u);
  EXPECT_EQ(first->notes[0].kind, "compile");
  EXPECT_EQ(jit.num_compiles(), 1);
  EXPECT_EQ(jit.current(), first->exe);
  EXPECT_EQ(jit.last().outcome, "miss");

  Result<CompileEvent> again = jit.lookup(sig, "JitTest");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->tracing_hit);
  EXPECT_FALSE(again->compiled);
  ASSERT_EQ(again->records.size(), 1u);
  EXPECT_EQ(again->records[0].outcome + "/" + again->records[0].level, "hit/tracing");
  EXPECT_EQ(jit.num_compiles(), 1);

  // A second Jit of the same function finds the executable in the process-wide cache.
  Jit other("train_step", &t->program(), m, compile_options_from_config(c).value(), {});
  Result<CompileEvent> shared = other.lookup(sig, "JitTest");
  ASSERT_TRUE(shared.ok());
  EXPECT_FALSE(shared->compiled);
  EXPECT_EQ(shared->records[1].outcome + "/" + shared->records[1].level, "hit/executable");
  EXPECT_EQ(shared->exe, first->exe);
}

TEST(CompileCacheTest, KeyChangesWithShardingShapeDtypeAndOptionsOnly) {
  Config c = cache_config(2);
  const Mesh m = mesh4(c);
  const CacheKey base = aot_key(c, m);
  EXPECT_EQ(base.hex().size(), 32u);
  EXPECT_EQ(base.name(), "jit_train_step-" + base.hex());

  Config unrelated = c;
  ASSERT_TRUE(unrelated.set("log_period", int64_t{7}).ok());
  ASSERT_TRUE(unrelated.set("run_name", "another").ok());
  ASSERT_TRUE(unrelated.set("log_compiles", true).ok());
  EXPECT_EQ(aot_key(unrelated, m).hex(), base.hex());

  CacheKey sharding = base;
  sharding.signature.args.back().sharding.spec = PartitionSpec();  // a batch arg unsharded
  EXPECT_NE(sharding.hex(), base.hex());
  CacheKey dtype = base;
  dtype.signature.args[0].dtype = DType::kBF16;
  EXPECT_NE(dtype.hex(), base.hex());
  CacheKey shape = base;
  shape.signature.args.back().shape = Shape{16, 32};
  EXPECT_NE(shape.hex(), base.hex());

  Config batch = c;  // a config that changes shapes changes the program and the signature
  ASSERT_TRUE(batch.set("per_device_batch_size", 4.0).ok());
  EXPECT_NE(aot_key(batch, m).hex(), base.hex());
  Config steps = c;  // steps sets the learning-rate schedule traced into the program
  ASSERT_TRUE(steps.set("steps", int64_t{99}).ok());
  EXPECT_NE(aot_key(steps, m).program, base.program);
  Config zero1 = c;
  ASSERT_TRUE(zero1.set("shard_optimizer_over_data", true).ok());
  EXPECT_NE(aot_key(zero1, m).hex(), base.hex());
  Config skip = c;
  ASSERT_TRUE(skip.set("skip_trivial_specs", true).ok());
  const CacheKey skip_key = aot_key(skip, m);
  EXPECT_NE(skip_key.hex(), base.hex());
  EXPECT_EQ(skip_key.signature, base.signature);
  const MissExplanation why = explain_miss(skip_key, std::span<const CacheKey>(&base, 1), "test");
  EXPECT_EQ(why.kind, "context");
  EXPECT_NE(why.text.find("  * skip_trivial_specs differs: now true and before false"), std::string::npos)
      << why.text;
  Config remat = c;  // remat rewrites the traced program, so it reaches the key through it
  ASSERT_TRUE(remat.set("remat_policy", std::string("none")).ok());
  EXPECT_NE(aot_key(remat, m).program, base.program);
  const Mesh other = Mesh::create({"data", "fsdp"}, {4, 1}).value();
  EXPECT_NE(make_cache_key("train_step", base.program, other, compile_options_from_config(c).value(),
                           base.signature).hex(), base.hex());
}

TEST(CompileCacheTest, ExecutableRoundTripsBitwise) {
  Config c = cache_config(2);
  auto t = Trainer::create(c, mesh4(c), {.shape_only = true}).value();
  auto exe = t->compile().value();
  const std::string bytes = serialize_executable(*exe);
  auto back = deserialize_executable(bytes).value();
  EXPECT_EQ(serialize_executable(*back), bytes);
  EXPECT_NE(back->id(), exe->id());
  EXPECT_EQ(back->program().to_text(), exe->program().to_text());
  EXPECT_EQ(back->global_program().fingerprint(), exe->global_program().fingerprint());
  EXPECT_EQ(back->argument_shardings(), exe->argument_shardings());
  EXPECT_EQ(back->memory().peak_bytes(), exe->memory().peak_bytes());
  EXPECT_EQ(back->cost().collective_bytes, exe->cost().collective_bytes);
  for (size_t cut : {size_t{0}, size_t{1}, bytes.size() / 3, bytes.size() - 1})
    EXPECT_FALSE(deserialize_executable(std::string_view(bytes).substr(0, cut)).ok()) << cut;
}


// Issue 16 items 2 and 6: an entry that is a directory threw std::ios_base::failure; a FIFO
// blocked in open(). Both are misses naming what the entry is.
TEST(CompileCacheTest, NonRegularEntriesAreMissesWithoutBlocking) {
  TempDir dir("cc_nonregular");
  const std::string cache = dir / "cache";
  Config c = cache_config(2);
  const CacheKey key = aot_key(c, mesh4(c));
  const std::string path = persistent_entry_path(cache, key);
  fs::create_directories(path);
  PersistentLoad d = persistent_load(cache, key);
  EXPECT_EQ(d.exe, nullptr);
  EXPECT_NE(d.miss_reason.find("is a directory, not a regular file"), std::string::npos)
      << d.miss_reason;
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  PersistentLoad f = persistent_load(cache, key);
  EXPECT_EQ(f.exe, nullptr);
  EXPECT_NE(f.miss_reason.find("is a FIFO, not a regular file"), std::string::npos) << f.miss_reason;
}

// Issue 16 item 3: a forged payload whose digest was recomputed reached the program builder
// (ENG_CHECK abort), std::length_error and a signed overflow. Every one is now a data_loss.
TEST(CompileCacheTest, ForgedPayloadsAreRefusedNotCrashes) {
  Config c = cache_config(2);
  auto t = Trainer::create(c, mesh4(c), {.shape_only = true}).value();
  const std::string good = serialize_executable(*t->compile().value());
  int refused = 0;
  uint64_t rng = 12345;
  for (int i = 0; i < 300; ++i) {
    std::string bad = good;
    rng = hash_mix(rng, i);
    const size_t at = (rng >> 8) % (bad.size() - 8);
    const int64_t values[] = {INT64_MAX, INT64_MIN, -1, int64_t{1} << 62, 7, 0};
    std::memcpy(&bad[at], &values[rng % 6], 8);
    auto r = deserialize_executable(bad);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().message();
      ++refused;
    }
  }
  EXPECT_GT(refused, 100);  // the rest land in floats or names: another valid executable
}

// ---- size-bounded eviction (jax_compilation_cache_max_size) ---------------------------------

TEST(CompileCacheTest, MaxSizeEvictsLeastRecentlyUsedEntries) {
  TempDir dir("cc_lru");
  const std::string cache = dir / "cache";
  Config c = cache_config(2);
  auto t = Trainer::create(c, mesh4(c), {.shape_only = true}).value();
  auto exe = t->compile().value();
  // Three keys whose entries have the same size: only the program digest differs.
  const CacheKey base = aot_key(c, mesh4(c));
  CacheKey keys[3] = {base, base, base};
  for (int i = 0; i < 3; ++i) keys[i].program[0] = static_cast<char>('a' + i);
  const auto path = [&](int i) { return persistent_entry_path(cache, keys[i]); };

  PersistentCacheOptions o{.dir = cache, .min_compile_time_s = 0};
  PersistentStore a = persistent_store(o, keys[0], *exe, 0);
  ASSERT_TRUE(a.written) << a.skip_reason << a.status.message();
  const int64_t entry = a.entry_bytes;
  ASSERT_EQ(static_cast<int64_t>(fs::file_size(path(0))), entry);
  o.max_size_bytes = 2 * entry + entry / 2;  // holds two entries
  PersistentStore b = persistent_store(o, keys[1], *exe, 0);
  ASSERT_TRUE(b.written);
  EXPECT_EQ(b.entry_bytes, entry);
  EXPECT_TRUE(b.evicted.empty());
  // Entry 0 was written first, then 1; a persistent hit on 0 makes 1 the least recently used.
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(path(0), now - std::chrono::seconds(30));
  fs::last_write_time(path(1), now - std::chrono::seconds(20));
  PersistentLoad hit = persistent_load(cache, keys[0]);
  ASSERT_NE(hit.exe, nullptr) << hit.miss_reason;
  EXPECT_GT(fs::last_write_time(path(0)), now - std::chrono::seconds(5));  // refreshed
  PersistentStore w = persistent_store(o, keys[2], *exe, 0);
  ASSERT_TRUE(w.written) << w.skip_reason << w.status.message();
  EXPECT_EQ(w.evicted, std::vector<std::string>{keys[1].name()});
  EXPECT_TRUE(fs::exists(path(0)));
  EXPECT_FALSE(fs::exists(path(1)));
  EXPECT_TRUE(fs::exists(path(2)));
  EXPECT_NE(persistent_load(cache, keys[0]).exe, nullptr);  // the survivors still load
  EXPECT_NE(persistent_load(cache, keys[2]).exe, nullptr);

  // Rewriting an entry that is present (a damaged entry recompiled) neither counts its old
  // copy nor evicts it: at exactly two entries' room nothing goes.
  o.max_size_bytes = 2 * entry;
  PersistentStore again = persistent_store(o, keys[2], *exe, 0);
  EXPECT_TRUE(again.written);
  EXPECT_TRUE(again.evicted.empty());
  EXPECT_TRUE(fs::exists(path(0)) && fs::exists(path(2)));

  // An entry bigger than the whole cache is not written, and nothing is evicted for it.
  o.max_size_bytes = entry - 1;
  PersistentStore big = persistent_store(o, keys[1], *exe, 0);
  EXPECT_FALSE(big.written);
  EXPECT_TRUE(big.evicted.empty());
  EXPECT_EQ(big.skip_reason, fmt::format("Not writing persistent cache entry with key '{}' since its size "
                                         "({} bytes) exceeds the maximum cache size ({} bytes)",
                                         keys[1].name(), entry, entry - 1));
  EXPECT_FALSE(fs::exists(path(1)));
  EXPECT_TRUE(fs::exists(path(0)) && fs::exists(path(2)));

  // -1: no limit, nothing evicted.
  o.max_size_bytes = -1;
  PersistentStore unbounded = persistent_store(o, keys[1], *exe, 0);
  EXPECT_TRUE(unbounded.written);
  EXPECT_TRUE(unbounded.evicted.empty());
  EXPECT_TRUE(fs::exists(path(0)) && fs::exists(path(1)) && fs::exists(path(2)));
}

TEST(CompileCacheTest, MaxSizeZeroWritesNothing) {
  ExecutableCache::global().clear();
  TempDir dir("cc_lru0");
  Config c = cache_config(2, dir / "cache");
  ASSERT_TRUE(c.set("compilation_cache_max_size", int64_t{0}).ok());
  ASSERT_TRUE(c.set("log_compiles", true).ok());
  auto store = MetricsStore::open(dir / "m.db").value();
  LogCapture log;
  auto t = Trainer::create(c, mesh4(c), {.store = store.get()}).value();
  ASSERT_TRUE(t->compile().ok());
  auto r = rows(*store, "SELECT reason_text, entry_bytes FROM compilations WHERE run_id = ? AND "
                        "cache_level = 'persistent' AND outcome = 'skip'", t->run_id());
  ASSERT_EQ(r.size(), 1u);
  const std::string expect = "Not writing persistent cache entry with key '" + t->last_compile().key_name +
                             "' since its size (";
  EXPECT_NE(text(r[0][0]).find(expect), std::string::npos) << text(r[0][0]);
  EXPECT_NE(text(r[0][0]).find("exceeds the maximum cache size (0 bytes)"), std::string::npos) << text(r[0][0]);
  EXPECT_NE(log.text().find(expect), std::string::npos) << log.text();
  EXPECT_TRUE(rows(*store, "SELECT 1 FROM compilations WHERE run_id = ? AND outcome = 'write'", t->run_id()).empty());
  EXPECT_TRUE(!fs::exists(dir / "cache") || fs::is_empty(dir / "cache"));
}

}  // namespace
}  // namespace eng
