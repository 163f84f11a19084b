// engine/compile/jit.h: one traced function's compile cache, the way jax.jit holds it: the
// tracing level (every signature this function was compiled or loaded for), then the
// process-wide executable cache, then the persistent cache (compilation_cache_dir). Notes:
// docs/compile-cache.md.
//
//   Jit jit("train_step", &traced, mesh, options, {.persistent = {.dir = dir}});
//   ENG_ASSIGN_OR_RETURN(CompileEvent ev, jit.lookup(signature_of(traced, shardings), "AOT"));
//   recorder.record_compile(ev, step);          // the caller records; the Jit writes no store
//   runtime.execute(*jit.current(), ...);
//
// A lookup never writes a store: it returns a CompileEvent (one record per cache level it
// consulted, the notes worth an event row, and which record the analysis belongs to) for the
// caller to record. log_compiles / explain_cache_misses lines go to compile_log.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/compile/cache.h"

namespace eng {

// The outcome of the last lookup (Compiled.key / Compiled.cache in the shell).
struct CompileInfo {
  std::string key;          // CacheKey::hex(): 32 hex digits
  std::string key_name;     // "jit_train_step-<hex>"
  std::string outcome;      // hit (tracing, executable or persistent) | miss (compiled)
  std::string level;        // the level that answered: tracing | executable | persistent
  std::string reason_kind;  // of the tracing miss ("" on a tracing hit)
  std::string reason_text;
  double compile_s = 0;  // compile time (0 unless compiled)
};

// One consulted cache level: a `compilations` row without its run and step.
struct CacheRecord {
  std::string outcome;      // hit | miss | write | skip
  std::string level;        // tracing | executable | persistent
  std::string reason_kind;  // "" = none
  std::string reason_text;
  std::optional<double> compile_s;
  std::optional<int64_t> entry_bytes;
  bool with_signature = false;  // the tracing miss carries the input signature
};

// Something worth an `events` row: a compile, a recompile, a rejected persistent entry.
struct CompileNote {
  std::string kind;   // compile | recompile | compile_cache
  std::string level;  // info | warning
  std::string message;
};

struct CompileEvent {
  CacheKey key;
  std::vector<CacheRecord> records;  // in the order the levels were consulted
  int analysis_record = -1;          // the record the memory/cost analysis belongs to
  std::vector<CompileNote> notes;
  bool tracing_hit = false;
  bool compiled = false;  // a real compile ran
  std::shared_ptr<const Executable> exe;
};

struct JitOptions {
  PersistentCacheOptions persistent;  // dir "" = no persistent level
  bool log_compiles = false;          // jax_log_compiles
  bool explain_misses = false;        // jax_explain_cache_misses
  double debug_compile_delay_s = 0;   // added to every real compile
  std::string defined_at;             // where the function was built, for miss explanations
};

class Jit {
 public:
  // `traced` is not owned and must outlive the Jit; its argument specs are replaced per
  // signature in a copy before compiling.
  Jit(std::string fn_name, const Program* traced, Mesh mesh, CompileOptions options,
      JitOptions jit_options);

  // Looks `sig` up level by level; compiles on a full miss. `site` names the caller in the
  // miss explanation ("Trainer::step"). Errors: a signature on another mesh, compile errors.
  Result<CompileEvent> lookup(Signature sig, std::string_view site);

  // The executable the last lookup chose (null before any) and its key.
  const std::shared_ptr<const Executable>& current() const { return current_exe_; }
  const CacheKey* current_key() const;
  const CompileInfo& last() const { return last_; }
  int64_t num_compiles() const { return num_compiles_; }
  const std::string& fn_name() const { return fn_name_; }

 private:
  struct Entry {
    CacheKey key;
    std::shared_ptr<const Executable> exe;
  };
  bool tracing_hit(const CacheKey& key, CompileEvent& ev);
  void persistent_level(CompileEvent& ev, CompileInfo& info);
  Status compile_level(CompileEvent& ev, CompileInfo& info, const std::string& why_kind);
  void persistent_write(CompileEvent& ev, double compile_s);
  Result<std::shared_ptr<const Executable>> compile_for(const Signature& sig) const;

  std::string fn_name_;
  const Program* traced_;  // not owned
  Mesh mesh_;
  CompileOptions options_;
  JitOptions jit_options_;
  std::string digest_;          // program_digest(*traced_)
  std::vector<Entry> entries_;  // the tracing cache, in insertion order
  int current_ = -1;            // index into entries_
  std::shared_ptr<const Executable> current_exe_;
  CompileInfo last_;
  int64_t num_compiles_ = 0;
};

}  // namespace eng
