// engine/compile/cache.h: the compile cache: keys (program digest + every argument's shape,
// dtype and sharding + compile options), JAX-vocabulary miss explanations, the process-wide
// in-memory executable cache and the persistent (on-disk) cache. Notes: docs/compile-cache.md.
//
//   CacheKey key = make_cache_key("train_step", program_digest(traced), mesh, options, sig);
//   if (auto exe = ExecutableCache::global().find(key)) ...                   // executable level
//   PersistentLoad l = persistent_load(dir, key);                            // persistent level
//   if (!l.exe) { compile ...; PersistentStore s = persistent_store(popts, key, *exe, secs); }
//
// A persistent entry is "<dir>/jit_<fn>-<32 hex>": a header (magic, format version, engine
// version, key name and key text), the payload size and its digest, then the serialized
// Executable. persistent_load verifies all of it before decoding; any mismatch is a miss with
// the reason, never an executable.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/compile/executable.h"

namespace eng {

// Bump when the compiler's output for the same key changes (the engine's "jaxlib version").
constexpr std::string_view kEngineVersion = "shardlab-engine-1";

// One argument as the caller holds it (JAX's aval + sharding).
struct ArgType {
  std::string name;           // "inputs", "params/decoder/layers_0/mlp/wi_0/kernel"
  Shape shape;                // global
  DType dtype = DType::kF32;
  NamedSharding sharding;     // as placed (Array::sharding) or as a shaped batch carries it
  // Non-empty: the argument's type as a jitted function's signature writes it, in place of
  // the array's (engine/frontend/jit_function.h): a pytree "{b=f32[2], w=f32[4,2]}" or a
  // static value "static string=scale". Part of the key.
  std::string type_text;
  // type_text, else the jax.typeof form: "i32[16@(data,fsdp),256]" (size-1 axes not printed).
  std::string type_string() const;
  bool operator==(const ArgType&) const = default;
};

struct Signature {
  std::vector<ArgType> args;  // in program argument order
  std::string to_string() const;            // "f32[64@fsdp,256], ..., i32[16@data,32]"
  std::string shardings_string() const;     // "P('fsdp', None), ..., P('data', None)"
  bool operator==(const Signature&) const = default;
};

// The program's arguments typed with the given shardings (one per argument).
Signature signature_of(const Program& p, std::span<const NamedSharding> shardings);

// 32 hex digits over the whole serialized traced program (ops, every attribute, shapes,
// dtypes, names, logical axes, remat tags): anything the config changes in the trace.
std::string program_digest(const Program& traced);
// Every CompileOptions field, canonical "name=value" lines (rules in base.yml form).
std::string compile_options_string(const CompileOptions& o);

struct CacheKey {
  std::string fn_name;         // "train_step"
  std::string program;         // program_digest of the traced (unsharded) program
  Mesh mesh;                   // names, sizes, axis types
  std::string options;         // compile_options_string
  Signature signature;

  std::string module_name() const { return "jit_" + fn_name; }  // "jit_train_step"
  // The canonical text hashed into hex(); stored in persistent entries and compared on load.
  std::string text() const;
  std::string hex() const;     // 32 hex digits of text() (and of the format/engine version)
  std::string name() const;    // "jit_train_step-<hex>": JAX's logged key and the file name
  bool operator==(const CacheKey&) const = default;
};

CacheKey make_cache_key(std::string fn_name, std::string program, const Mesh& mesh,
                        const CompileOptions& options, Signature signature);

// Why `now` missed, diffed against the closest of `seen` in JAX's explain_cache_misses
// vocabulary. kind: never_seen | context | pytree | types | unavailable (the compilations
// table's reason_kind). text starts "TRACING CACHE MISS at {site}:"; `defined_at` (JAX's
// "for f defined at file:line"; "" = not said) names where the function was built. One
// explanation for the trainer's step (engine/compile/jit.h) and jitted functions
// (engine/frontend/jit_function.h).
struct MissExplanation {
  std::string kind;
  std::string text;
};
MissExplanation explain_miss(const CacheKey& now, std::span<const CacheKey> seen,
                             std::string_view site, std::string_view defined_at = "");

// The in-memory executable cache, one per process and keyed by the FULL key, so every
// Trainer (and REPL re-creation of one) in the process shares it safely: an Executable is
// immutable and a Runtime prepares its own arenas for it. Bounded: the oldest entries go
// beyond kCapacity. Thread-safe.
class ExecutableCache {
 public:
  static constexpr size_t kCapacity = 64;
  static ExecutableCache& global();
  std::shared_ptr<const Executable> find(const CacheKey& key) const;
  void insert(const CacheKey& key, std::shared_ptr<const Executable> exe);
  void clear();
  size_t size() const;

 private:
  struct Entry {
    CacheKey key;
    std::shared_ptr<const Executable> exe;
    uint64_t order;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;  // by hex()
  uint64_t next_order_ = 0;
};

struct PersistentCacheOptions {
  std::string dir;                   // compilation_cache_dir; "" = off
  double min_compile_time_s = 1.0;   // persistent_cache_min_compile_time_secs
  int64_t min_entry_size_bytes = 0;  // persistent_cache_min_entry_size_bytes (0, -1: no limit)
  // compilation_cache_max_size (JAX's jax_compilation_cache_max_size): the most bytes the
  // entries in `dir` may hold. -1 (any negative): no limit; 0: nothing is ever written.
  int64_t max_size_bytes = -1;
};

std::string persistent_entry_path(const std::string& dir, const CacheKey& key);

struct PersistentLoad {
  std::shared_ptr<const Executable> exe;  // null: a miss
  std::string miss_reason;                // why (no entry, truncated, checksum, foreign, ...)
  int64_t entry_bytes = 0;                // file size when one was found
  double load_s = 0;
};
// A hit sets the entry's modification time to now (JAX's LRUCache touches it), so the
// size-bounded eviction in persistent_store drops the least recently USED entries first.
PersistentLoad persistent_load(const std::string& dir, const CacheKey& key);

struct PersistentStore {
  bool written = false;
  std::string skip_reason;  // JAX's "Not writing persistent cache entry ..." text when skipped
  int64_t entry_bytes = 0;
  std::vector<std::string> evicted;  // entry names removed to make room, oldest first
  Status status;            // an I/O error while writing (the run goes on without the entry)
};
// Writes atomically (temp file + fsync + rename) unless compile_s or the entry size is under
// the thresholds, or the entry alone is bigger than max_size_bytes. With a limit, the other
// entries ("jit_*" files in dir, least recently used first by modification time) are evicted
// until they and the new entry fit; the entry being written is never evicted. Eviction and
// write hold an flock on "<dir>/.lockfile" so concurrent writers do not over-fill the dir.
PersistentStore persistent_store(const PersistentCacheOptions& o, const CacheKey& key,
                                 const Executable& exe, double compile_s);

// Where log_compiles / explain_cache_misses lines go: stderr by default; the shell or a test
// may capture them. A sink of nullptr restores stderr.
void set_compile_log_sink(std::function<void(std::string_view)> sink);
void compile_log(std::string_view line);

}  // namespace eng
