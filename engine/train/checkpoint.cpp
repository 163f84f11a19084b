// engine/train/checkpoint.cpp: safetensors writing (atomic, checksummed) and verified reading.
#include "engine/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/base/file.h"
#include "engine/base/text.h"

namespace eng {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "shardlab-checkpoint";
constexpr int kCrcWidth = 8;  // hex digits: the header keeps its length when the crc is filled in

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

std::string_view safetensors_dtype(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kI32: return "I32";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

std::optional<DType> parse_safetensors_dtype(std::string_view s) {
  if (s == "F32") return DType::kF32;
  if (s == "I32") return DType::kI32;
  if (s == "BF16") return DType::kBF16;
  return std::nullopt;
}


std::string errno_text() { return std::strerror(errno); }

Status write_all(int fd, const void* p, size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("checkpoint: writing '{}': {}", path, errno_text());
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return ok_status();
}

Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return io_error("checkpoint: cannot open directory '{}': {}", dir, errno_text());
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return io_error("checkpoint: fsync of directory '{}': {}", dir, errno_text());
  return ok_status();
}

// Temporary files of this checkpoint left by a writer that was killed (this one committed).
void remove_leftover_temp_files(const std::string& path) {
  const fs::path final_path(path);
  const std::string prefix = final_path.filename().string() + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(final_path.parent_path(), ec), end; !ec && it != end;
       it.increment(ec))
    if (it->path().filename().string().rfind(prefix, 0) == 0) ::unlink(it->path().c_str());
}

std::string make_header(std::span<const CheckpointTensorSpec> tensors,
                        const std::map<std::string, std::string>& metadata, uint32_t crc,
                        int64_t data_bytes) {
  std::string h = "{\"__metadata__\":{";
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = kFormat;
  meta["format_version"] = kCheckpointFormatVersion;
  meta["data_bytes"] = fmt::format("{}", data_bytes);
  meta["crc32"] = fmt::format("{:08x}", crc);
  bool first = true;
  for (const auto& [k, v] : meta) {
    h += fmt::format("{}{}:{}", first ? "" : ",", json_string(k), json_string(v));
    first = false;
  }
  h += "}";
  int64_t offset = 0;
  for (const CheckpointTensorSpec& t : tensors) {
    const int64_t bytes = t.shape.numel() * dtype_size(t.dtype);
    h += fmt::format(",{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                     json_string(t.name), safetensors_dtype(t.dtype),
                     fmt::join(t.shape.dims(), ","), offset, offset + bytes);
    offset += bytes;
  }
  h += "}";
  while (h.size() % 8 != 0) h += ' ';
  return h;
}

// ---- a small JSON reader, enough for safetensors headers -----------------------------------

struct JsonField;
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string str;
  std::vector<Json> items;        // kArray
  std::vector<JsonField> fields;  // kObject, in file order
};
// Declared after Json (not std::pair<std::string, Json> inside it): a pair of the incomplete
// Json is an error to clang 14 with libstdc++ 12.
struct JsonField {
  std::string key;
  Json value;
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}
  Result<Json> parse() {
    ENG_ASSIGN_OR_RETURN(Json v, value(0));
    skip_ws();
    if (pos_ != s_.size()) return error("trailing characters");
    return v;
  }

 private:
  Status error(std::string_view what) const {
    return data_loss("{} at byte {}", what, pos_);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  Result<Json> value(int depth) {
    if (depth > 16) return error("nesting too deep");
    skip_ws();
    if (pos_ >= s_.size()) return error("unexpected end of JSON");
    Json v;
    const char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::kObject;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return v; }
      for (;;) {
        skip_ws();
        ENG_ASSIGN_OR_RETURN(std::string key, string());
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ':') return error("expected ':'");
        ++pos_;
        ENG_ASSIGN_OR_RETURN(Json item, value(depth + 1));
        v.fields.push_back(JsonField{std::move(key), std::move(item)});
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
        if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return v; }
        return error("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = Json::kArray;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return v; }
      for (;;) {
        ENG_ASSIGN_OR_RETURN(Json item, value(depth + 1));
        v.items.push_back(std::move(item));
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
        if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return v; }
        return error("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = Json::kString;
      ENG_ASSIGN_OR_RETURN(v.str, string());
      return v;
    }
    if (s_.substr(pos_, 4) == "null") { pos_ += 4; return v; }
    if (s_.substr(pos_, 4) == "true") { pos_ += 4; v.kind = Json::kBool; v.number = 1; return v; }
    if (s_.substr(pos_, 5) == "false") { pos_ += 5; v.kind = Json::kBool; return v; }
    const size_t start = pos_;
    while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' ||
                                s_[pos_] == '+' || s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      ++pos_;
    if (pos_ == start) return error("unexpected character");
    v.kind = Json::kNumber;
    const std::string num(s_.substr(start, pos_ - start));
    char* end = nullptr;
    v.number = std::strtod(num.c_str(), &end);
    if (end != num.c_str() + num.size()) return error("malformed number");
    return v;
  }
  Result<std::string> string() {
    if (pos_ >= s_.size() || s_[pos_] != '"') return error("expected a string");
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) break;
        char e = s_[pos_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u': {
            if (pos_ + 4 > s_.size()) return error("short \\u escape");
            const long cp = std::strtol(std::string(s_.substr(pos_, 4)).c_str(), nullptr, 16);
            pos_ += 4;
            if (cp >= 0x80) return error("non-ASCII \\u escape not supported");
            out += static_cast<char>(cp);
            break;
          }
          default: out += e;
        }
        continue;
      }
      out += c;
    }
    if (pos_ >= s_.size()) return error("unterminated string");
    ++pos_;
    return out;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// A whole number in [0, 2^53]: exact in a double, and safe to cast (larger values and NaN
// would make the cast undefined).
bool is_uint(const Json& j) {
  return j.kind == Json::kNumber && j.number >= 0 && j.number <= static_cast<double>(kMaxStep) &&
         j.number == std::floor(j.number);
}

// Tensors' byte ranges must be disjoint: overlapping ranges with a valid checksum would load
// one tensor's bytes as another's.
Status check_no_overlap(const std::string& path,
                        const std::vector<CheckpointFile::Entry>& tensors) {
  std::vector<const CheckpointFile::Entry*> order;
  for (const CheckpointFile::Entry& e : tensors)
    if (e.end > e.begin) order.push_back(&e);  // an empty tensor overlaps nothing
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end)
      return data_loss("checkpoint '{}': tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path,
                       order[i - 1]->spec.name, order[i - 1]->begin, order[i - 1]->end,
                       order[i]->spec.name, order[i]->begin, order[i]->end);
  return ok_status();
}

// The counters a restore continues from: whole numbers in [0, kMaxStep] when present.
Status check_counters(const CheckpointFile& f) {
  for (const char* key : {"step", "data_position"}) {
    if (f.metadata.count(key) == 0) continue;
    ENG_ASSIGN_OR_RETURN(int64_t v, f.metadata_int(key));
    if (v < 0 || v > kMaxStep)
      return data_loss("checkpoint '{}': __metadata__ '{}' is {}, outside [0, {}]", f.path, key, v,
                       kMaxStep);
  }
  return ok_status();
}

// Parses the header JSON into `out`'s metadata and tensor table (offsets checked against
// data_size).
Status parse_header(const std::string& path, std::string_view header, int64_t data_size,
                    CheckpointFile& out) {
  Result<Json> parsed = JsonParser(header).parse();
  if (!parsed.ok())
    return data_loss("checkpoint '{}': header is not valid JSON: {}", path, parsed.status().message());
  if (parsed->kind != Json::kObject)
    return data_loss("checkpoint '{}': header is not a JSON object", path);
  // Names seen so far (views into `parsed`): a header of N tensors is checked in O(N), not by
  // a scan of the table per tensor (200k entries took minutes; issue 30).
  std::unordered_set<std::string_view> seen;
  seen.reserve(parsed->fields.size());
  for (const auto& [name, v] : parsed->fields) {
    if (name == "__metadata__") {
      if (v.kind != Json::kObject) return data_loss("checkpoint '{}': __metadata__ is not an object", path);
      for (const auto& [k, mv] : v.fields) {
        if (mv.kind != Json::kString)
          return data_loss("checkpoint '{}': __metadata__ value '{}' is not a string", path, k);
        out.metadata[k] = mv.str;
      }
      continue;
    }
    CheckpointFile::Entry e;
    e.spec.name = name;
    const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    if (v.kind == Json::kObject)
      for (const auto& [k, fv] : v.fields) {
        if (k == "dtype") dtype = &fv;
        if (k == "shape") shape = &fv;
        if (k == "data_offsets") offsets = &fv;
      }
    if (!dtype || dtype->kind != Json::kString || !shape || shape->kind != Json::kArray || !offsets ||
        offsets->kind != Json::kArray || offsets->items.size() != 2)
      return data_loss("checkpoint '{}': tensor '{}' needs dtype, shape and data_offsets [begin, end]",
                       path, name);
    std::optional<DType> dt = parse_safetensors_dtype(dtype->str);
    if (!dt) return data_loss("checkpoint '{}': tensor '{}' has unsupported dtype '{}' (F32, I32, BF16)",
                              path, name, dtype->str);
    e.spec.dtype = *dt;
    std::vector<int64_t> dims;
    for (const Json& d : shape->items) {
      if (!is_uint(d) || dims.size() >= 64)
        return data_loss("checkpoint '{}': tensor '{}' has a bad shape", path, name);
      dims.push_back(static_cast<int64_t>(d.number));
    }
    Result<Shape> checked = Shape::checked(std::move(dims));
    if (!checked.ok())
      return data_loss("checkpoint '{}': tensor '{}': {}", path, name, checked.status().message());
    e.spec.shape = std::move(checked).value();
    if (!seen.insert(name).second)
      return data_loss("checkpoint '{}': tensor '{}' appears twice in the header", path, name);
    if (!is_uint(offsets->items[0]) || !is_uint(offsets->items[1]))
      return data_loss("checkpoint '{}': tensor '{}' has bad data_offsets", path, name);
    e.begin = static_cast<int64_t>(offsets->items[0].number);
    e.end = static_cast<int64_t>(offsets->items[1].number);
    const int64_t want = e.spec.shape.numel() * dtype_size(e.spec.dtype);
    if (e.end < e.begin || e.end - e.begin != want)
      return data_loss("checkpoint '{}': tensor '{}' spans {} bytes [{}, {}) but its shape {} needs {}",
                       path, name, e.end - e.begin, e.begin, e.end, e.spec.shape.to_string(), want);
    if (e.end > data_size)
      return data_loss("checkpoint '{}': truncated: tensor '{}' ends at data byte {} but the file has "
                       "only {} data bytes", path, name, e.end, data_size);
    out.tensors.push_back(std::move(e));
  }
  return check_no_overlap(path, out.tensors);
}

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

Result<int64_t> write_checkpoint(const std::string& path,
                                 std::span<const CheckpointTensorSpec> tensors,
                                 FunctionRef<Status(int, void*)> fill,
                                 const std::map<std::string, std::string>& metadata,
                                 const CheckpointWriteOptions& options) {
  int64_t data_bytes = 0;
  for (const CheckpointTensorSpec& t : tensors) data_bytes += t.shape.numel() * dtype_size(t.dtype);
  const fs::path final_path(path);
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(final_path.parent_path(), ec)))
    return failed_precondition("checkpoint: '{}' is a symbolic link; not writing through it",
                               final_path.parent_path().string());
  fs::create_directories(final_path.parent_path(), ec);
  if (ec) return io_error("checkpoint: cannot create '{}': {}", final_path.parent_path().string(), ec.message());
  ENG_ASSIGN_OR_RETURN(TempFile temp, create_temp_file(path, "checkpoint"));
  const std::string tmp = temp.path;
  const int fd = temp.fd.release();
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  // The header is written twice: first with a zero crc, then (same length) with the real one.
  std::string header = make_header(tensors, metadata, 0, data_bytes);
  uint64_t len = header.size();
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(len >> (8 * i));
  Status s = write_all(fd, len_le, 8, tmp);
  if (s.ok()) s = write_all(fd, header.data(), header.size(), tmp);
  if (!s.ok()) return fail(s);
  // The checksum covers the header (with the crc written as zeros) and the data, so a
  // corrupted step or data position is caught too.
  uint32_t crc = crc32(header.data(), header.size());
  std::vector<char> buf;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (options.debug_delay_s > 0 && i == tensors.size() / 2)
      std::this_thread::sleep_for(std::chrono::duration<double>(options.debug_delay_s));
    buf.resize(static_cast<size_t>(tensors[i].shape.numel() * dtype_size(tensors[i].dtype)));
    s = fill(static_cast<int>(i), buf.data());
    if (s.ok()) s = write_all(fd, buf.data(), buf.size(), tmp);
    if (!s.ok()) return fail(s);
    crc = crc32(buf.data(), buf.size(), crc);
  }
  const std::string final_header = make_header(tensors, metadata, crc, data_bytes);
  ENG_CHECK(final_header.size() == header.size(), "checkpoint: header length changed {} -> {}",
            header.size(), final_header.size());
  if (::pwrite(fd, final_header.data(), final_header.size(), 8) != static_cast<ssize_t>(final_header.size()))
    return fail(io_error("checkpoint: writing header of '{}': {}", tmp, errno_text()));
  if (::fsync(fd) != 0) return fail(io_error("checkpoint: fsync '{}': {}", tmp, errno_text()));
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return io_error("checkpoint: close '{}': {}", tmp, errno_text());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status r = io_error("checkpoint: rename '{}' -> '{}': {}", tmp, path, errno_text());
    ::unlink(tmp.c_str());
    return r;
  }
  remove_leftover_temp_files(path);
  ENG_RETURN_IF_ERROR(fsync_dir(final_path.parent_path().string()));
  ENG_RETURN_IF_ERROR(fsync_dir(final_path.parent_path().parent_path().string()));
  return static_cast<int64_t>(8 + len + static_cast<uint64_t>(data_bytes));
}

const CheckpointFile::Entry* CheckpointFile::find(const std::string& name) const {
  for (const Entry& e : tensors)
    if (e.spec.name == name) return &e;
  return nullptr;
}

Result<int64_t> CheckpointFile::metadata_int(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) return data_loss("checkpoint '{}': __metadata__ has no '{}'", path, key);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || errno == ERANGE)
    return data_loss("checkpoint '{}': __metadata__ '{}' is '{}', not an integer", path, key, it->second);
  return static_cast<int64_t>(v);
}

namespace {

// Where a checkpoint's bytes come from: a file read piece by piece (so a huge file that is
// not a checkpoint is refused after its first bytes, not read whole), or memory.
using ReadAt = FunctionRef<Status(void* dst, int64_t n, int64_t offset)>;

constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;  // the safetensors format's own limit

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : INT64_MAX;
}

// The data section is exactly the tensors (no holes, no extra bytes), and fits in memory.
Status check_data_section(const CheckpointFile& f, int64_t data_size) {
  int64_t covered = 0;
  for (const CheckpointFile::Entry& e : f.tensors) covered += e.end - e.begin;
  if (covered != data_size)
    return data_loss("checkpoint '{}': the tensors cover {} of the {} data bytes", f.path, covered,
                     data_size);
  if (data_size > physical_memory_bytes())
    return resource_exhausted("checkpoint '{}': {} data bytes, more than this machine's {} bytes "
                              "of memory", f.path, data_size, physical_memory_bytes());
  return ok_status();
}

Status check_crc(CheckpointFile& out, std::string header) {
  const std::string recorded = fmt::format("\"crc32\":\"{}\"", out.metadata["crc32"]);
  const size_t at = header.find(recorded);
  if (out.metadata["crc32"].size() != kCrcWidth || at == std::string::npos)
    return data_loss("checkpoint '{}': corrupted: __metadata__ crc32 '{}' is malformed", out.path,
                     out.metadata["crc32"]);
  header.replace(at, recorded.size(), "\"crc32\":\"00000000\"");
  uint32_t got = crc32(header.data(), header.size());
  got = crc32(out.data.data(), out.data.size(), got);
  const std::string got_hex = fmt::format("{:08x}", got);
  if (out.metadata["crc32"] != got_hex)
    return data_loss("checkpoint '{}': corrupted: crc32 of header and data is {} but the header "
                     "records {}", out.path, got_hex, out.metadata["crc32"]);
  return ok_status();
}

Result<CheckpointFile> load_checkpoint(const std::string& path, int64_t size, ReadAt read) {
  CheckpointFile out;
  out.path = path;
  if (size < 8)
    return data_loss("checkpoint '{}': truncated: {} bytes, shorter than the 8-byte header length",
                     path, size);
  unsigned char len_le[8];
  ENG_RETURN_IF_ERROR(read(len_le, 8, 0));
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(len_le[i]) << (8 * i);
  if (len > static_cast<uint64_t>(size - 8))
    return data_loss("checkpoint '{}': truncated: header length {} but only {} bytes follow", path,
                     len, size - 8);
  if (len > static_cast<uint64_t>(kMaxHeaderBytes))
    return data_loss("checkpoint '{}': header length {} is over the {}-byte limit", path, len,
                     kMaxHeaderBytes);
  std::string header(len, '\0');
  ENG_RETURN_IF_ERROR(read(header.data(), static_cast<int64_t>(len), 8));
  const int64_t data_size = size - 8 - static_cast<int64_t>(len);
  ENG_RETURN_IF_ERROR(parse_header(path, header, data_size, out));
  if (out.metadata["format"] != kFormat)
    return data_loss("checkpoint '{}': __metadata__ format is '{}', expected '{}'", path,
                     out.metadata["format"], kFormat);
  if (out.metadata["format_version"] != kCheckpointFormatVersion)
    return unimplemented("checkpoint '{}': format_version '{}' is not supported (this build reads '{}')",
                         path, out.metadata["format_version"], kCheckpointFormatVersion);
  ENG_ASSIGN_OR_RETURN(int64_t want_bytes, out.metadata_int("data_bytes"));
  if (want_bytes != data_size)
    return data_loss("checkpoint '{}': {}: header says {} data bytes, the file has {}", path,
                     data_size < want_bytes ? "truncated" : "trailing bytes", want_bytes, data_size);
  ENG_RETURN_IF_ERROR(check_data_section(out, data_size));
  out.data.resize(static_cast<size_t>(data_size));
  ENG_RETURN_IF_ERROR(read(out.data.data(), data_size, 8 + static_cast<int64_t>(len)));
  ENG_RETURN_IF_ERROR(check_crc(out, std::move(header)));
  ENG_RETURN_IF_ERROR(check_counters(out));
  return out;
}

}  // namespace

Result<CheckpointFile> read_checkpoint(const std::string& where) {
  std::error_code ec;
  const std::string path =
      fs::is_directory(where, ec) ? (fs::path(where) / kCheckpointFileName).string() : where;
  ENG_ASSIGN_OR_RETURN(OpenedFile f, open_regular_file(path, "checkpoint"));
  return load_checkpoint(path, f.size, [&](void* dst, int64_t n, int64_t offset) {
    return read_at(f, dst, n, offset, "checkpoint", path);
  });
}

Result<CheckpointFile> parse_checkpoint(const std::string& path, std::string_view bytes) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  return load_checkpoint(path, size, [&](void* dst, int64_t n, int64_t offset) -> Status {
    if (offset < 0 || n < 0 || offset > size || n > size - offset)
      return data_loss("checkpoint '{}': truncated: {} bytes at offset {} of {}", path, n, offset,
                       size);
    std::memcpy(dst, bytes.data() + offset, static_cast<size_t>(n));
    return ok_status();
  });
}

std::string checkpoint_root(const std::string& base_output_directory, const std::string& run_name) {
  return (fs::path(base_output_directory) / run_name / "checkpoints").string();
}

std::string checkpoint_path(const std::string& root, int64_t step) {
  return (fs::path(root) / fmt::format("{}", step) / kCheckpointFileName).string();
}

std::vector<int64_t> list_checkpoints(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    // Only names this code writes: digits of a step in [0, kMaxStep] (a 20-digit name is not one).
    const std::string name = it->path().filename().string();
    int64_t step = -1;
    const auto [ptr, err] = std::from_chars(name.data(), name.data() + name.size(), step);
    if (name.empty() || err != std::errc() || ptr != name.data() + name.size() || step < 0 ||
        step > kMaxStep || !std::isdigit(static_cast<unsigned char>(name[0])))
      continue;
    // A step directory (or its file) that is a symbolic link is not one this code wrote: a
    // planted link could point a resume at any file (issue 30).
    std::error_code st_ec;
    if (!fs::is_directory(it->symlink_status(st_ec))) continue;
    if (fs::exists(fs::symlink_status(it->path() / kCheckpointFileName, st_ec)))
      steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Status prune_checkpoints(const std::string& root, int64_t keep) {
  if (keep <= 0) return ok_status();
  std::vector<int64_t> steps = list_checkpoints(root);
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i) {
    std::error_code ec;
    fs::remove_all(fs::path(root) / fmt::format("{}", steps[i]), ec);
    if (ec) return io_error("checkpoint: cannot delete '{}': {}", (fs::path(root) / fmt::format("{}", steps[i])).string(), ec.message());
  }
  return ok_status();
}

}  // namespace eng
