// engine/compile/jit.cpp: the three cache levels of one traced function, consulted in order.
#include "engine/compile/jit.h"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "engine/base/clock.h"

namespace eng {

Jit::Jit(std::string fn_name, const Program* traced, Mesh mesh, CompileOptions options,
         JitOptions jit_options)
    : fn_name_(std::move(fn_name)),
      traced_(traced),
      mesh_(std::move(mesh)),
      options_(std::move(options)),
      jit_options_(std::move(jit_options)),
      digest_(program_digest(*traced)) {}

const CacheKey* Jit::current_key() const {
  return current_ >= 0 ? &entries_[static_cast<size_t>(current_)].key : nullptr;
}

Result<std::shared_ptr<const Executable>> Jit::compile_for(const Signature& sig) const {
  // The global program with every argument's spec fixed to the signature's: the executable
  // is compiled for exactly the types it is keyed by.
  Program p = *traced_;
  for (size_t k = 0; k < sig.args.size(); ++k) {
    if (!(sig.args[k].sharding.mesh == mesh_))
      return invalid_argument("compile: argument '{}' lives on {}, the {}'s mesh is {}",
                              sig.args[k].name, sig.args[k].sharding.mesh.to_string(), fn_name_,
                              mesh_.to_string());
    p.mutable_value(p.args()[k].value).spec = sig.args[k].sharding.spec;
  }
  return eng::compile(p, mesh_, options_);
}

bool Jit::tracing_hit(const CacheKey& key, CompileEvent& ev) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!(entries_[i].key == key)) continue;
    current_ = static_cast<int>(i);
    current_exe_ = entries_[i].exe;
    last_ = {key.hex(), key.name(), "hit", "tracing", "", "", 0};
    ev.records.push_back({"hit", "tracing", "", "", {}, {}, false});
    ev.tracing_hit = true;
    ev.exe = current_exe_;
    return true;
  }
  return false;
}

void Jit::persistent_level(CompileEvent& ev, CompileInfo& info) {
  const CacheKey& key = ev.key;
  PersistentLoad l = persistent_load(jit_options_.persistent.dir, key);
  if (l.exe) {
    ev.exe = l.exe;
    if (jit_options_.log_compiles)
      compile_log(fmt::format("Persistent compilation cache hit for '{}' with key '{}'",
                              key.module_name(), key.name()));
    ev.records.push_back({"hit",
                          "persistent",
                          "",
                          fmt::format("loaded {} in {:.3f} s", key.name(), l.load_s),
                          {},
                          l.entry_bytes,
                          false});
    ev.analysis_record = static_cast<int>(ev.records.size()) - 1;
    info.level = "persistent";
    return;
  }
  if (jit_options_.explain_misses)
    compile_log(fmt::format("PERSISTENT COMPILATION CACHE MISS for '{}' with key '{}': {}",
                            key.module_name(), key.name(), l.miss_reason));
  const bool none = l.miss_reason == "no entry";
  ev.records.push_back({"miss",
                        "persistent",
                        none ? "never_seen" : "unavailable",
                        l.miss_reason,
                        {},
                        l.entry_bytes > 0 ? std::optional<int64_t>(l.entry_bytes) : std::nullopt,
                        false});
  if (!none)
    ev.notes.push_back(
        {"compile_cache", "warning",
         fmt::format("persistent cache entry {} rejected: {}", key.name(), l.miss_reason)});
}

void Jit::persistent_write(CompileEvent& ev, double dt) {
  const CacheKey& key = ev.key;
  PersistentStore w = persistent_store(jit_options_.persistent, key, *ev.exe, dt);
  if (w.written || !w.skip_reason.empty() || !w.status.ok()) {
    std::string text = w.written       ? persistent_entry_path(jit_options_.persistent.dir, key)
                       : w.status.ok() ? w.skip_reason
                                       : w.status.message();
    ev.records.push_back({w.written ? "write" : "skip", "persistent", "", std::move(text), dt,
                          w.entry_bytes, false});
  }
  if (jit_options_.log_compiles && w.written)
    compile_log(fmt::format("Writing {} to persistent compilation cache with key '{}'",
                            key.module_name(), key.name()));
  else if (jit_options_.log_compiles && !w.skip_reason.empty())
    compile_log(w.skip_reason);
  if (!w.status.ok()) compile_log(w.status.message());
}

Status Jit::compile_level(CompileEvent& ev, CompileInfo& info, const std::string& why_kind) {
  const CacheKey& key = ev.key;
  constexpr int exe_record = 1;  // records: tracing miss, executable miss[, persistent miss]
  if (jit_options_.log_compiles)
    compile_log(fmt::format(
        "Compiling {} with global shapes and types [{}]. Argument mapping: ({}).",
        key.module_name(), key.signature.to_string(), key.signature.shardings_string()));
  const double t0 = now_seconds();
  ENG_ASSIGN_OR_RETURN(ev.exe, compile_for(key.signature));
  if (jit_options_.debug_compile_delay_s > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(jit_options_.debug_compile_delay_s));
  const double dt = now_seconds() - t0;
  ++num_compiles_;
  ev.compiled = true;
  info.outcome = "miss";
  info.level = jit_options_.persistent.dir.empty() ? "executable" : "persistent";  // last to miss
  info.compile_s = dt;
  ev.records[static_cast<size_t>(exe_record)].compile_s = dt;
  ev.analysis_record = exe_record;
  if (jit_options_.log_compiles) {
    compile_log(fmt::format("Finished XLA compilation of jit({}) in {:.9f} sec", fn_name_, dt));
    compile_log(ev.exe->memory().to_string());
    compile_log("Note that compiler could over-estimate the HBM usage.");
  }
  ev.notes.push_back({entries_.empty() ? "compile" : "recompile", "info",
                      fmt::format("compiled {} in {:.3f} s ({})", fn_name_, dt, why_kind)});
  if (!jit_options_.persistent.dir.empty()) persistent_write(ev, dt);
  return ok_status();
}

Result<CompileEvent> Jit::lookup(Signature sig, std::string_view site) {
  CompileEvent ev;
  ev.key = make_cache_key(fn_name_, digest_, mesh_, options_, std::move(sig));
  // 1. tracing: this function's own cache.
  if (tracing_hit(ev.key, ev)) return ev;
  std::vector<CacheKey> seen;
  for (const Entry& e : entries_) seen.push_back(e.key);
  const MissExplanation why = explain_miss(ev.key, seen, site, jit_options_.defined_at);
  if (jit_options_.explain_misses) compile_log(why.text);
  ev.records.push_back({"miss", "tracing", why.kind, why.text, {}, {}, true});
  CompileInfo info{ev.key.hex(), ev.key.name(), "hit", "executable", why.kind, why.text, 0};
  // 2. executable: the process-wide in-memory cache, by the full key.
  ev.exe = ExecutableCache::global().find(ev.key);
  if (ev.exe) {
    ev.records.push_back({"hit", "executable", "", "", {}, {}, false});
    ev.analysis_record = 1;
  } else {
    ev.records.push_back({"miss",
                          "executable",
                          "never_seen",
                          "not in this process's executable cache",
                          {},
                          {},
                          false});
    // 3. persistent: compilation_cache_dir; then a real compile.
    if (!jit_options_.persistent.dir.empty()) persistent_level(ev, info);
    if (!ev.exe) ENG_RETURN_IF_ERROR(compile_level(ev, info, why.kind));
    ExecutableCache::global().insert(ev.key, ev.exe);
  }
  entries_.push_back({ev.key, ev.exe});
  current_ = static_cast<int>(entries_.size()) - 1;
  current_exe_ = ev.exe;
  last_ = std::move(info);
  return ev;
}

}  // namespace eng
