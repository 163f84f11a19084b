// engine/compile/cache.cpp: cache keys, miss explanations, the in-memory executable cache and
// the persistent cache's entry files.
#include "engine/compile/cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/base/clock.h"
#include "engine/base/file.h"
#include "engine/compile/serialize.h"

namespace eng {

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'S', 'L', 'X', 'C', 'A', 'C', 'H', 'E'};

std::string hex128(std::string_view bytes) {
  return fmt::format("{:016x}{:016x}", digest64(bytes, 0x5eed1), digest64(bytes, 0x5eed2));
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// "  * shard_mode differs: now explicit and before auto" for each differing name=value line.
std::vector<std::string> option_diffs(const std::string& now, const std::string& before) {
  std::map<std::string, std::string> a, b;
  for (const auto& l : split_lines(now)) a[l.substr(0, l.find('='))] = l.substr(l.find('=') + 1);
  for (const auto& l : split_lines(before)) b[l.substr(0, l.find('='))] = l.substr(l.find('=') + 1);
  std::vector<std::string> out;
  for (const auto& [k, v] : a)
    if (!b.count(k) || b[k] != v)
      out.push_back(fmt::format("  * {} differs: now {} and before {}", k, v,
                                b.count(k) ? b[k] : "(unset)"));
  for (const auto& [k, v] : b)
    if (!a.count(k)) out.push_back(fmt::format("  * {} differs: now (unset) and before {}", k, v));
  return out;
}

// The type as the explanation shows it: jax.typeof, plus the spec (and mesh) when the typeof
// strings alone would not show the difference (size-1 axes are not printed).
std::string shown_type(const ArgType& now, const ArgType& other) {
  std::string s = now.type_string();
  if (s == other.type_string() && !(now.sharding == other.sharding)) {
    s += " with " + now.sharding.spec.to_string();
    if (!(now.sharding.mesh == other.sharding.mesh)) s += " on " + now.sharding.mesh.to_string();
  }
  return s;
}

int arg_diffs(const Signature& a, const Signature& b) {
  if (a.args.size() != b.args.size()) return 1 << 20;
  int n = 0;
  for (size_t i = 0; i < a.args.size(); ++i) n += a.args[i] == b.args[i] ? 0 : 1;
  return n;
}

bool same_pytree(const Signature& a, const Signature& b) {
  if (a.args.size() != b.args.size()) return false;
  for (size_t i = 0; i < a.args.size(); ++i)
    if (a.args[i].name != b.args[i].name) return false;
  return true;
}

std::mutex g_log_mu;
std::function<void(std::string_view)> g_log_sink;

}  // namespace

// ---- keys ----------------------------------------------------------------------------------

std::string ArgType::type_string() const {
  if (!type_text.empty()) return type_text;
  return typeof_string(dtype_name(dtype), shape, &sharding.spec, &sharding.mesh);
}

std::string Signature::to_string() const {
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i].type_string();
  return out;
}

std::string Signature::shardings_string() const {
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i].sharding.spec.to_string();
  return out;
}

Signature signature_of(const Program& p, std::span<const NamedSharding> shardings) {
  ENG_CHECK(shardings.size() == p.args().size(), "signature_of: {} shardings for {} arguments",
            shardings.size(), p.args().size());
  Signature s;
  for (size_t k = 0; k < p.args().size(); ++k) {
    const ValueInfo& v = p.value(p.args()[k].value);
    s.args.push_back({v.name, v.shape, v.dtype, shardings[k], ""});
  }
  return s;
}

std::string program_digest(const Program& traced) { return hex128(serialize_program(traced)); }

std::string compile_options_string(const CompileOptions& o) {
  std::string rules;
  for (const LogicalAxisRule& r : o.rules.rules()) rules += (rules.empty() ? "" : ", ") + r.to_string();
  // Regions of other axis types (auto_axes / explicit_axes inside a jit): "[3, 5) Auto,
  // Explicit" each; no line without any, as before they existed.
  std::string regions;
  for (const AxisTypeRegion& r : o.axis_type_regions) {
    std::vector<std::string> types;
    for (AxisType t : r.types) types.push_back(std::string(axis_type_name(t)));
    regions += fmt::format("{}[{}, {}) {}", regions.empty() ? "" : "; ", r.begin, r.end,
                           fmt::join(types, ", "));
  }
  return fmt::format(
      "logical_axis_rules=[{}]\nshard_mode={}\nshard_optimizer_over_data={}\n"
      "skip_trivial_specs={}\nverify_plan={}\npartition_axes={}\n",
      rules, shard_mode_name(o.shard_mode), o.shard_optimizer_over_data,
      o.skip_trivial_specs, o.verify_plan, o.axes.to_string()) + (o.manual ? "manual=true\n" : "") +
         (regions.empty() ? "" : fmt::format("axis_type_regions={}\n", regions));
}

std::string CacheKey::text() const {
  std::string s = fmt::format("fn={}\nprogram={}\nmesh={}\n{}", fn_name, program, mesh.to_string(),
                              options);
  for (const ArgType& a : signature.args) {
    s += fmt::format("arg {} {}[{}] {}", a.name, dtype_name(a.dtype), a.shape.to_list(),
                     a.sharding.spec.to_string());
    if (!(a.sharding.mesh == mesh)) s += " on " + a.sharding.mesh.to_string();
    if (!a.type_text.empty()) s += " type " + a.type_text;
    s += "\n";
  }
  return s;
}

std::string CacheKey::hex() const {
  return hex128(fmt::format("{}\nformat={}\n{}", kEngineVersion, kExecutableFormatVersion, text()));
}

std::string CacheKey::name() const { return module_name() + "-" + hex(); }

CacheKey make_cache_key(std::string fn_name, std::string program, const Mesh& mesh,
                        const CompileOptions& options, Signature signature) {
  return CacheKey{std::move(fn_name), std::move(program), mesh, compile_options_string(options),
                  std::move(signature)};
}

// ---- explanations --------------------------------------------------------------------------

MissExplanation explain_miss(const CacheKey& now, std::span<const CacheKey> seen,
                             std::string_view site, std::string_view defined_at) {
  std::string head = fmt::format("TRACING CACHE MISS at {}:\n", site);
  const std::string where = defined_at.empty() ? "" : fmt::format(" defined at {}", defined_at);
  const CacheKey* closest = nullptr;
  int best = 0;
  for (const CacheKey& k : seen) {
    if (k.fn_name != now.fn_name) continue;
    const int score = (k.program != now.program ? 1 << 26 : 0) + (k.options != now.options ? 1 << 25 : 0) +
                      (!(k.mesh == now.mesh) ? 1 << 24 : 0) + arg_diffs(now.signature, k.signature);
    if (closest == nullptr || score < best) closest = &k, best = score;
  }
  if (closest == nullptr) {
    const std::string id = now.program.empty() ? "" : " id=" + now.program.substr(0, 12);
    return {"never_seen",
            head + fmt::format("  never seen function:\n    {}{}{}", now.fn_name, id, where)};
  }
  std::string text =
      head + fmt::format(
                 "  for {}{}\n"
                 "  all previously seen cache keys differ. For the closest previous key:\n",
                 now.fn_name, where);
  const CacheKey& b = *closest;
  if (b.program != now.program || b.options != now.options || !(b.mesh == now.mesh)) {
    text += "  Tracing context doesn't match, e.g. due to config or context manager.";
    if (b.program != now.program)
      text += fmt::format("\n  * traced program differs (model or optimizer config): now {} and before {}",
                          now.program, b.program);
    if (!(b.mesh == now.mesh))
      text += fmt::format("\n  * mesh differs: now {} and before {}", now.mesh.to_string(), b.mesh.to_string());
    for (const std::string& d : option_diffs(now.options, b.options)) text += "\n" + d;
    return {"context", text};
  }
  if (!same_pytree(now.signature, b.signature)) {
    text += "  different input pytree:";
    const size_t n = std::max(now.signature.args.size(), b.signature.args.size());
    for (size_t i = 0; i < n; ++i) {
      const std::string x = i < now.signature.args.size() ? now.signature.args[i].name : "(none)";
      const std::string y = i < b.signature.args.size() ? b.signature.args[i].name : "(none)";
      if (x != y) {
        text += fmt::format("\n  * at input path args[{}], now {} and before {}, so the argument "
                            "names differ", i, x, y);
        break;
      }
    }
    return {"pytree", text};
  }
  text += "  different input types:";
  int shown = 0, differing = 0;
  for (size_t i = 0; i < now.signature.args.size(); ++i) {
    const ArgType& x = now.signature.args[i];
    const ArgType& y = b.signature.args[i];
    if (x == y) continue;
    ++differing;
    if (shown++ >= 16) continue;
    text += fmt::format("\n  * at {}, now {} and before {}", x.name, shown_type(x, y), shown_type(y, x));
  }
  if (differing > 16) text += fmt::format("\n  ... and {} more", differing - 16);
  if (differing == 0)
    return {"unavailable", head + "  cache miss explanation unavailable"};
  return {"types", text};
}

// ---- in-memory cache -----------------------------------------------------------------------

ExecutableCache& ExecutableCache::global() {
  static ExecutableCache* cache = new ExecutableCache();  // never destroyed: used at exit
  return *cache;
}

std::shared_ptr<const Executable> ExecutableCache::find(const CacheKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key.hex());
  if (it == entries_.end() || !(it->second.key == key)) return nullptr;
  return it->second.exe;
}

void ExecutableCache::insert(const CacheKey& key, std::shared_ptr<const Executable> exe) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_[key.hex()] = Entry{key, std::move(exe), next_order_++};
  while (entries_.size() > kCapacity) {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.order < oldest->second.order) oldest = it;
    entries_.erase(oldest);
  }
}

void ExecutableCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

size_t ExecutableCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

// ---- persistent cache ----------------------------------------------------------------------

std::string persistent_entry_path(const std::string& dir, const CacheKey& key) {
  return (fs::path(dir) / key.name()).string();
}

namespace {

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& s, std::string_view v) {
  put_u64(s, v.size());
  s.append(v);
}

// A cursor over the header; false once the file is too short.
struct HeaderReader {
  std::string_view b;
  size_t pos = 0;
  bool get(void* out, size_t n) {
    if (b.size() - pos < n) return false;
    std::memcpy(out, b.data() + pos, n);
    pos += n;
    return true;
  }
  bool str(std::string* out) {
    uint64_t n = 0;
    if (!get(&n, 8) || n > b.size() - pos) return false;
    *out = std::string(b.substr(pos, n));
    pos += n;
    return true;
  }
};

// The header checks, in order; "" when the entry may be decoded.
std::string check_entry(std::string_view file, const CacheKey& key, std::string_view* payload) {
  HeaderReader r{file};
  char magic[8];
  if (!r.get(magic, 8)) return fmt::format("truncated entry: {} bytes, shorter than the header", file.size());
  if (std::memcmp(magic, kMagic, 8) != 0) return "foreign entry: bad magic (not a shardlab cache entry)";
  uint32_t version = 0;
  std::string engine, name, text;
  if (!r.get(&version, 4)) return "truncated entry: header cut short";
  if (version != kExecutableFormatVersion)
    return fmt::format("foreign entry: format version {}, this engine reads {}", version,
                       kExecutableFormatVersion);
  if (!r.str(&engine) || !r.str(&name) || !r.str(&text)) return "truncated entry: header cut short";
  if (engine != kEngineVersion)
    return fmt::format("foreign entry: written by engine '{}', this is '{}'", engine, kEngineVersion);
  if (name != key.name()) return fmt::format("foreign entry: it holds key '{}', wanted '{}'", name, key.name());
  if (text != key.text()) return "foreign entry: same key name but a different key text (hash collision)";
  uint64_t size = 0, digest = 0;
  if (!r.get(&size, 8) || !r.get(&digest, 8)) return "truncated entry: header cut short";
  if (file.size() - r.pos != size)
    return fmt::format("truncated entry: payload has {} bytes, header says {}", file.size() - r.pos, size);
  *payload = file.substr(r.pos);
  const uint64_t got = digest64(*payload);
  if (got != digest)
    return fmt::format("corrupt entry: checksum mismatch: payload digest {:016x}, header says {:016x}",
                       got, digest);
  return "";
}

// Removes the least recently used entries of `dir` (oldest modification time first; the name
// breaks ties) until they and `incoming` bytes fit in `max_bytes`. `keep` (the entry about to
// be written, possibly an old copy being replaced) is neither counted nor evicted; temp files
// of in-flight writes and non-entry files are left alone.
std::vector<std::string> evict_lru(const std::string& dir, const std::string& keep, int64_t max_bytes,
                                   int64_t incoming) {
  struct Entry {
    fs::file_time_type mtime;
    std::string name;
    int64_t bytes;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == keep || name.rfind("jit_", 0) != 0 || name.find(".tmp.") != std::string::npos) continue;
    std::error_code fe;
    if (!it->is_regular_file(fe) || fe) continue;
    const uintmax_t bytes = it->file_size(fe);
    if (fe) continue;
    const fs::file_time_type mtime = it->last_write_time(fe);
    if (fe) continue;
    entries.push_back({mtime, name, static_cast<int64_t>(bytes)});
    total += static_cast<int64_t>(bytes);
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.mtime != b.mtime ? a.mtime < b.mtime : a.name < b.name;
  });
  std::vector<std::string> evicted;
  for (const Entry& e : entries) {
    if (total + incoming <= max_bytes) break;
    std::error_code re;
    if (fs::remove(fs::path(dir) / e.name, re)) evicted.push_back(e.name);
    total -= e.bytes;  // gone (or removed by another process meanwhile)
  }
  return evicted;
}

}  // namespace

PersistentLoad persistent_load(const std::string& dir, const CacheKey& key) {
  PersistentLoad out;
  const double t0 = now_seconds();
  const std::string path = persistent_entry_path(dir, key);
  // A regular file of at most 1 GiB (a FIFO or a directory is a miss, without blocking).
  Result<std::string> read = read_regular_file(path, "compile cache", int64_t{1} << 30);
  if (!read.ok()) {
    const bool missing = read.status().code() == Code::kNotFound;
    out.miss_reason = missing ? "no entry" : read.status().message();
    return out;
  }
  const std::string& file = *read;
  out.entry_bytes = static_cast<int64_t>(file.size());
  std::string_view payload;
  out.miss_reason = check_entry(file, key, &payload);
  if (!out.miss_reason.empty()) return out;
  Result<std::shared_ptr<const Executable>> exe = deserialize_executable(payload);
  if (!exe.ok()) {
    out.miss_reason = "corrupt entry: " + exe.status().message();
    return out;
  }
  out.exe = *std::move(exe);
  std::error_code ec;  // LRU: a hit is a use (best effort: the entry may be evicted meanwhile)
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);
  out.load_s = now_seconds() - t0;
  return out;
}

PersistentStore persistent_store(const PersistentCacheOptions& o, const CacheKey& key,
                                 const Executable& exe, double compile_s) {
  PersistentStore out;
  if (compile_s < o.min_compile_time_s) {
    out.skip_reason = fmt::format(
        "Not writing persistent cache entry for '{}' because it took < {:.2f} seconds to compile "
        "({:.2f}s)", key.module_name(), o.min_compile_time_s, compile_s);
    return out;
  }
  const std::string payload = serialize_executable(exe);
  std::string file(kMagic, 8);
  put_u32(file, kExecutableFormatVersion);
  put_str(file, kEngineVersion);
  put_str(file, key.name());
  put_str(file, key.text());
  put_u64(file, payload.size());
  put_u64(file, digest64(payload));
  file += payload;
  out.entry_bytes = static_cast<int64_t>(file.size());
  if (o.min_entry_size_bytes > 0 && out.entry_bytes < o.min_entry_size_bytes) {
    out.skip_reason = fmt::format(
        "Not writing persistent cache entry with key '{}' since its size ({} bytes) is less than "
        "threshold ({} bytes)", key.name(), out.entry_bytes, o.min_entry_size_bytes);
    return out;
  }
  const bool bounded = o.max_size_bytes >= 0;
  if (bounded && out.entry_bytes > o.max_size_bytes) {
    out.skip_reason = fmt::format(
        "Not writing persistent cache entry with key '{}' since its size ({} bytes) exceeds the "
        "maximum cache size ({} bytes)", key.name(), out.entry_bytes, o.max_size_bytes);
    return out;
  }
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  const std::string path = persistent_entry_path(o.dir, key);
  int lock_fd = -1;
  if (bounded) {
    const std::string lock_path = (fs::path(o.dir) / ".lockfile").string();
    lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (lock_fd >= 0) ::flock(lock_fd, LOCK_EX);  // best effort: without it, still correct alone
    out.evicted = evict_lru(o.dir, key.name(), o.max_size_bytes, out.entry_bytes);
  }
  struct Unlock {
    int fd;
    ~Unlock() {
      if (fd >= 0) ::close(fd);  // releases the flock
    }
  } unlock{lock_fd};
  Result<TempFile> temp = create_temp_file(path, "compile cache");  // O_EXCL | O_NOFOLLOW
  if (!temp.ok()) {
    out.status = temp.status();
    return out;
  }
  const std::string tmp = temp->path;
  const int fd = temp->fd.release();
  size_t done = 0;
  while (done < file.size()) {
    const ssize_t n = ::write(fd, file.data() + done, file.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool synced = done == file.size() && ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(tmp.c_str(), path.c_str()) != 0) {
    out.status = io_error("compile cache: writing '{}' failed after {} of {} bytes: {}", path, done,
                          file.size(), std::strerror(errno));
    std::remove(tmp.c_str());
    return out;
  }
  out.written = true;
  return out;
}

// ---- logging -------------------------------------------------------------------------------

void set_compile_log_sink(std::function<void(std::string_view)> sink) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log_sink = std::move(sink);
}

void compile_log(std::string_view line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (g_log_sink) {
    g_log_sink(line);
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fputc('\n', stderr);
  }
}

}  // namespace eng
