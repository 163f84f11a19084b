// tests/fuzz/fuzz_driver.cpp: runs a fuzz target without libFuzzer, as a bounded CTest test.
//
//   safetensors_fuzz --corpus tests/fuzz/corpus/safetensors --mutations 3000 --seconds 60
//   safetensors_fuzz --save-seeds tests/fuzz/corpus/safetensors     # (re)write the seed files
//   safetensors_fuzz crash-1234                                       # replay one input
//
// Each corpus file and generated seed runs once, then mutations of them (bit flips, byte
// and 8-byte integer overwrites with boundary values, inserts, deletes, truncation, splices)
// run until the count or the time is reached. The mutation stream is deterministic for a
// --seed; with SHARDLAB_FUZZ_KEEP=1 each input is first written to ./fuzz-last-input, so a
// crashing one is left behind for replay.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/base/clock.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

void run_one(const std::string& input) {
  static const bool keep = std::getenv("SHARDLAB_FUZZ_KEEP") != nullptr;
  if (keep) write_all("fuzz-last-input", input);
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

constexpr int64_t kBoundary[] = {0,         1,         -1,        0x7f,       0x80,      0xff,
                                 0x7fffffff, INT64_MAX, INT64_MIN, 1LL << 32, 1LL << 62,
                                 -(1LL << 31)};

std::string mutate(std::string s, const std::vector<std::string>& pool, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // overwrite a byte
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
        break;
      case 2:  // an 8-byte boundary value (counts, sizes, ids are int64 little-endian)
        if (s.size() >= 8) {
          const int64_t v = kBoundary[pick(std::size(kBoundary))];
          std::memcpy(&s[pick(s.size() - 7)], &v, 8);
        }
        break;
      case 3:  // insert bytes
        s.insert(pick(s.size() + 1), std::string(1 + pick(16), static_cast<char>(rng())));
        break;
      case 4:  // delete a range
        if (!s.empty()) {
          const size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(64, s.size() - at)));
        }
        break;
      case 5:  // truncate
        s.resize(pick(s.size() + 1));
        break;
      case 6: {  // splice: a prefix of this one, the tail of another
        const std::string& o = pool[pick(pool.size())];
        s = s.substr(0, pick(s.size() + 1)) + o.substr(pick(o.size() + 1));
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string corpus, save;
  long mutations = 1000;
  double seconds = 60;
  uint64_t seed = 1;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--corpus") corpus = next();
    else if (a == "--save-seeds") save = next();
    else if (a == "--mutations") mutations = std::atol(next().c_str());
    else if (a == "--seconds") seconds = std::atof(next().c_str());
    else if (a == "--seed") seed = std::strtoull(next().c_str(), nullptr, 10);
    else files.push_back(a);
  }
  const std::vector<std::string> seeds = eng::fuzz::seed_inputs();
  if (!save.empty()) {
    fs::create_directories(save);
    for (size_t i = 0; i < seeds.size(); ++i) write_all(fs::path(save) / ("seed-" + std::to_string(i)), seeds[i]);
    std::printf("wrote %zu seeds to %s\n", seeds.size(), save.c_str());
    return 0;
  }
  std::vector<std::string> pool = seeds;
  if (!corpus.empty()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(corpus, ec))
      if (e.is_regular_file()) pool.push_back(read_all(e.path()));
  }
  for (const std::string& f : files) pool.push_back(read_all(f));
  for (const std::string& input : pool) run_one(input);
  const size_t saved = pool.size();
  std::mt19937_64 rng(seed);
  const double deadline = eng::now_seconds() + seconds;
  long done = 0;
  for (; done < mutations && eng::now_seconds() < deadline && !pool.empty(); ++done)
    run_one(mutate(pool[rng() % pool.size()], pool, rng));
  std::printf("%zu corpus inputs and seeds, %ld mutations: no crash\n", saved, done);
  return 0;
}
