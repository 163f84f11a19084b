// engine/compile/serialize.cpp: the binary encoding of Program and Executable (little-endian,
// length-prefixed), and its bounds-checked decoder.
#include "engine/compile/serialize.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/base/check_trap.h"
#include "engine/base/hash.h"
#include "engine/base/limits.h"
#include "engine/ir/builder.h"

namespace eng {

namespace {

class Writer {
 public:
  void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  void f64(double v) { raw(&v, sizeof v); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void str(std::string_view s) {
    i64(static_cast<int64_t>(s.size()));
    buf_.append(s);
  }
  void strs(const std::vector<std::string>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  void ints(const std::vector<int64_t>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (int64_t x : v) i64(x);
  }
  std::string take() && { return std::move(buf_); }

 private:
  void raw(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string buf_;
};

// Reads with a sticky error: after the first failure every read returns zero values and
// status() names what was being read and where.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  uint8_t u8(const char* what) {
    uint8_t v = 0;
    raw(&v, 1, what);
    return v;
  }
  uint32_t u32(const char* what) {
    uint32_t v = 0;
    raw(&v, sizeof v, what);
    return v;
  }
  int64_t i64(const char* what) {
    int64_t v = 0;
    raw(&v, sizeof v, what);
    return v;
  }
  double f64(const char* what) {
    double v = 0;
    raw(&v, sizeof v, what);
    return v;
  }
  bool boolean(const char* what) { return u8(what) != 0; }
  // A count of items each at least min_item_bytes long: bounded by the bytes left.
  size_t count(const char* what, size_t min_item_bytes) {
    const int64_t n = i64(what);
    if (!ok()) return 0;
    // Divided, not multiplied: n * min_item_bytes wrapped for n near 2^62 (length_error).
    if (n < 0 || static_cast<uint64_t>(n) > (b_.size() - pos_) / min_item_bytes) {
      fail(fmt::format("{}: count {} exceeds the {} bytes left", what, n, b_.size() - pos_));
      return 0;
    }
    return static_cast<size_t>(n);
  }
  std::string str(const char* what) {
    const size_t n = count(what, 1);
    if (!ok()) return {};
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::vector<std::string> strs(const char* what) {
    std::vector<std::string> v(count(what, 8));
    for (auto& s : v) s = str(what);
    return v;
  }
  std::vector<int64_t> ints(const char* what) {
    std::vector<int64_t> v(count(what, 8));
    for (auto& x : v) x = i64(what);
    return v;
  }
  // An enum stored as u8 that must be <= max.
  template <typename E>
  E enumeration(const char* what, int max) {
    const uint8_t v = u8(what);
    if (ok() && v > max) fail(fmt::format("{}: value {} out of range [0, {}]", what, v, max));
    return static_cast<E>(ok() ? v : 0);
  }
  void fail(std::string msg) {
    if (error_.empty()) error_ = fmt::format("{} (at byte {})", msg, pos_);
  }
  bool ok() const { return error_.empty(); }
  bool at_end() const { return pos_ == b_.size(); }
  Status status() const {
    return ok() ? ok_status() : data_loss("executable decode: {}", error_);
  }

 private:
  void raw(void* out, size_t n, const char* what) {
    if (!ok()) return;
    if (b_.size() - pos_ < n) {
      fail(fmt::format("{}: needs {} bytes, {} left", what, n, b_.size() - pos_));
      return;
    }
    std::memcpy(out, b_.data() + pos_, n);
    pos_ += n;
  }
  std::string_view b_;
  size_t pos_ = 0;
  std::string error_;
};

constexpr int kMaxDType = static_cast<int>(DType::kI32);
constexpr int kMaxOpKind = kNumOps - 1;
constexpr int kMaxArgRole = static_cast<int>(ArgRole::kBatch);
constexpr int kMaxAxisType = static_cast<int>(AxisType::kManual);
constexpr int kMaxSlotKind = static_cast<int>(BufferSlot::Kind::kNone);

void write_spec(Writer& w, const PartitionSpec& s) {
  w.i64(s.rank());
  for (const auto& d : s.dims()) w.strs(d);
  w.strs(s.partial());
}

PartitionSpec read_spec(Reader& r) {
  std::vector<PartitionSpec::DimAxes> dims(r.count("spec rank", 8));
  for (auto& d : dims) d = r.strs("spec axes");
  std::vector<std::string> partial = r.strs("spec partial");
  return PartitionSpec(std::move(dims), std::move(partial));
}

// One type for every axis is written as that type (the format before per-axis types; the
// empty mesh as Auto); mixed types as kMixedAxisTypes, then one type per axis.
constexpr uint8_t kMixedAxisTypes = 0x80;

void write_mesh(Writer& w, const Mesh& m) {
  w.strs(m.axis_names());
  w.ints(m.axis_sizes());
  const std::vector<AxisType>& types = m.axis_types();
  const bool mixed = std::any_of(types.begin(), types.end(),
                                 [&](AxisType t) { return t != types[0]; });
  if (!mixed) {
    w.u8(static_cast<uint8_t>(types.empty() ? AxisType::kAuto : types[0]));
    return;
  }
  w.u8(kMixedAxisTypes);
  for (AxisType t : types) w.u8(static_cast<uint8_t>(t));
}

Mesh read_mesh(Reader& r) {
  std::vector<std::string> names = r.strs("mesh axis names");
  std::vector<int64_t> sizes = r.ints("mesh axis sizes");
  const uint8_t first = r.u8("mesh axis type");
  std::vector<AxisType> types;
  if (first == kMixedAxisTypes) {
    for (size_t i = 0; i < names.size(); ++i)
      types.push_back(r.enumeration<AxisType>("mesh axis type", kMaxAxisType));
  } else if (r.ok() && first > kMaxAxisType) {
    r.fail(fmt::format("mesh axis type: value {} out of range [0, {}]", first, kMaxAxisType));
  } else {
    types.assign(names.size(), static_cast<AxisType>(first));
  }
  if (!r.ok()) return Mesh();
  Result<Mesh> m = Mesh::create(std::move(names), std::move(sizes), std::move(types));
  if (!m.ok()) {
    r.fail(m.status().message());
    return Mesh();
  }
  return *std::move(m);
}

void write_value(Writer& w, const ValueInfo& v) {
  w.ints(v.shape.dims());
  w.u8(static_cast<uint8_t>(v.dtype));
  w.strs(v.logical);
  w.boolean(v.spec.has_value());
  if (v.spec) write_spec(w, *v.spec);
  w.str(v.name);
  w.i64(v.producer);
  w.str(v.checkpoint_name);
  w.i64(v.remat_scope);
  w.boolean(v.recomputed);
  w.i64(v.pipeline_iteration);
}

ValueInfo read_value(Reader& r) {
  ValueInfo v;
  std::vector<int64_t> dims = r.ints("value shape");
  if (dims.size() > 64) r.fail(fmt::format("value shape: rank {}", dims.size()));
  Result<Shape> shape = Shape::checked(std::move(dims));
  if (shape.ok()) {
    v.shape = std::move(shape).value();
  } else {
    r.fail(fmt::format("value shape: {}", shape.status().message()));
  }
  v.dtype = r.enumeration<DType>("value dtype", kMaxDType);
  v.logical = r.strs("value logical axes");
  if (r.boolean("value has spec")) v.spec = read_spec(r);
  v.name = r.str("value name");
  v.producer = static_cast<int32_t>(r.i64("value producer"));
  v.checkpoint_name = r.str("value checkpoint_name");
  v.remat_scope = static_cast<int32_t>(r.i64("value remat_scope"));
  v.recomputed = r.boolean("value recomputed");
  v.pipeline_iteration = static_cast<int32_t>(r.i64("value pipeline_iteration"));
  return v;
}

// Attributes: every stored field through op.h's walker (for_each_stored_attr), in its order.
void write_field(Writer& w, int v) { w.i64(v); }
void write_field(Writer& w, int64_t v) { w.i64(v); }
void write_field(Writer& w, double v) { w.f64(v); }
void write_field(Writer& w, bool v) { w.boolean(v); }
void write_field(Writer& w, DType v) { w.u8(static_cast<uint8_t>(v)); }
void write_field(Writer& w, const std::vector<std::string>& v) { w.strs(v); }
void write_field(Writer& w, const std::vector<int64_t>& v) { w.ints(v); }
// None as "" (the format before LogicalAxes; a name is never empty).
void write_field(Writer& w, const LogicalAxes& v) { w.strs(logical_axis_names(v)); }

void read_field(Reader& r, const char* what, int& v) { v = static_cast<int>(r.i64(what)); }
void read_field(Reader& r, const char* what, int64_t& v) { v = r.i64(what); }
void read_field(Reader& r, const char* what, double& v) { v = r.f64(what); }
void read_field(Reader& r, const char* what, bool& v) { v = r.boolean(what); }
void read_field(Reader& r, const char* what, DType& v) {
  v = r.enumeration<DType>(what, kMaxDType);
}
void read_field(Reader& r, const char* what, std::vector<std::string>& v) { v = r.strs(what); }
void read_field(Reader& r, const char* what, std::vector<int64_t>& v) { v = r.ints(what); }
void read_field(Reader& r, const char* what, LogicalAxes& v) { v = to_logical_axes(r.strs(what)); }

void write_attrs(Writer& w, const OpAttrs& a) {
  for_each_stored_attr(a, [&](const AttrField&, const auto& v) { write_field(w, v); });
}

OpAttrs read_attrs(Reader& r) {
  OpAttrs a;
  for_each_stored_attr(a, [&](const AttrField& f, auto& v) {
    const std::string what = fmt::format("attr {}", f.name);
    read_field(r, what.c_str(), v);
  });
  return a;
}

void write_program(Writer& w, const Program& p) {
  w.str(p.name());
  w.i64(static_cast<int64_t>(p.values().size()));
  for (const ValueInfo& v : p.values()) write_value(w, v);
  w.i64(static_cast<int64_t>(p.args().size()));
  for (const Argument& a : p.args()) {
    w.i64(a.value);
    w.u8(static_cast<uint8_t>(a.role));
  }
  w.i64(static_cast<int64_t>(p.instrs().size()));
  for (const Instr& in : p.instrs()) {
    w.u8(static_cast<uint8_t>(in.kind));
    w.ints(std::vector<int64_t>(in.inputs.begin(), in.inputs.end()));
    w.ints(std::vector<int64_t>(in.outputs.begin(), in.outputs.end()));
    write_attrs(w, in.attrs);
  }
  w.i64(static_cast<int64_t>(p.outputs().size()));
  for (const ProgramOutput& o : p.outputs()) {
    w.i64(o.value);
    w.str(o.name);
    w.i64(o.aliased_arg);
  }
}

struct DecodedInstr {
  OpKind kind;
  std::vector<int64_t> inputs, outputs;
  OpAttrs attrs;
};

struct DecodedOutput {
  int64_t value;
  std::string name;
  int64_t aliased;
};

Result<Program> replay_program(const std::string& name, const std::vector<ValueInfo>& values,
                               const std::vector<std::pair<int64_t, ArgRole>>& args,
                               const std::vector<DecodedInstr>& instrs,
                               const std::vector<DecodedOutput>& outs);

// Rebuilds the program through the Builder, replaying values in id order (an argument, or
// the first output of its producing instruction), then restores every ValueInfo verbatim.
// A program that does not replay to the same ids is rejected.
Result<Program> read_program(Reader& r) {
  const std::string name = r.str("program name");
  std::vector<ValueInfo> values(r.count("value count", 8));
  for (auto& v : values) v = read_value(r);
  std::vector<std::pair<int64_t, ArgRole>> args(r.count("argument count", 9));
  for (auto& [v, role] : args) {
    v = r.i64("argument value");
    role = r.enumeration<ArgRole>("argument role", kMaxArgRole);
  }
  std::vector<DecodedInstr> instrs(r.count("instruction count", 17));
  for (auto& in : instrs) {
    in.kind = r.enumeration<OpKind>("instruction op", kMaxOpKind);
    in.inputs = r.ints("instruction inputs");
    in.outputs = r.ints("instruction outputs");
    in.attrs = read_attrs(r);
  }
  std::vector<DecodedOutput> outs(r.count("output count", 24));
  for (auto& o : outs) {
    o.value = r.i64("output value");
    o.name = r.str("output name");
    o.aliased = r.i64("output aliased_arg");
  }
  ENG_RETURN_IF_ERROR(r.status());

  auto bad = [&](std::string what) { return data_loss("executable decode: program '{}': {}", name, what); };
  // The builder's shape inference checks its inputs with ENG_CHECK (invariants of traced
  // programs); for decoded bytes a failed check is a bad entry, caught here.
  try {
    CheckTrap trap;
    return replay_program(name, values, args, instrs, outs);
  } catch (const CheckFailure& e) {
    return bad(fmt::format("does not rebuild: {}", e.what()));
  }
}

Result<Program> replay_program(const std::string& name, const std::vector<ValueInfo>& values,
                               const std::vector<std::pair<int64_t, ArgRole>>& args,
                               const std::vector<DecodedInstr>& instrs,
                               const std::vector<DecodedOutput>& outs) {
  const int64_t n = static_cast<int64_t>(values.size());
  auto bad = [&](std::string what) { return data_loss("executable decode: program '{}': {}", name, what); };
  Builder b(name);
  size_t next_arg = 0;
  for (int64_t v = 0; v < n; ++v) {
    const int32_t producer = values[v].producer;
    if (producer < 0) {
      if (next_arg >= args.size() || args[next_arg].first != v)
        return bad(fmt::format("value {} is not the next argument", v));
      const ValueInfo& info = values[v];
      if (!info.logical.empty() && static_cast<int>(info.logical.size()) != info.shape.rank())
        return bad(fmt::format("argument {} has {} logical axes for rank {}", v,
                               info.logical.size(), info.shape.rank()));
      b.argument(info.name, info.shape, info.dtype, info.logical, args[next_arg].second);
      ++next_arg;
      continue;
    }
    if (producer >= static_cast<int32_t>(instrs.size()))
      return bad(fmt::format("value {} has producer {} of {}", v, producer, instrs.size()));
    const DecodedInstr& in = instrs[producer];
    if (in.outputs.empty() || in.outputs[0] != v) continue;  // a later output of its producer
    if (static_cast<size_t>(producer) != b.program().instrs().size())
      return bad(fmt::format("instruction {} out of order", producer));
    std::vector<ValueId> inputs;
    for (int64_t x : in.inputs) {
      if (x < 0 || x >= v) return bad(fmt::format("instruction {} reads value {}", producer, x));
      inputs.push_back(static_cast<ValueId>(x));
    }
    std::vector<ValueId> got = b.emit(in.kind, std::move(inputs), in.attrs);
    if (got.size() != in.outputs.size())
      return bad(fmt::format("instruction {} has {} outputs, rebuilt {}", producer,
                             in.outputs.size(), got.size()));
    for (size_t k = 0; k < got.size(); ++k)
      if (got[k] != in.outputs[k])
        return bad(fmt::format("instruction {} output {} is value {}, rebuilt {}", producer, k,
                               in.outputs[k], got[k]));
  }
  if (next_arg != args.size() || b.program().instrs().size() != instrs.size() ||
      static_cast<int64_t>(b.program().values().size()) != n)
    return bad("arguments, instructions or values left over");
  for (const DecodedOutput& o : outs) {
    if (o.value < 0 || o.value >= n || o.aliased < -1 ||
        o.aliased >= static_cast<int64_t>(args.size()))
      return bad(fmt::format("output '{}' names value {} / argument {}", o.name, o.value, o.aliased));
    const ValueInfo& src = values[o.value];
    if (o.aliased >= 0) {
      const ValueInfo& a = values[args[o.aliased].first];
      if (a.shape != src.shape || a.dtype != src.dtype)
        return bad(fmt::format("output '{}' aliases an argument of another type", o.name));
    }
    b.output(static_cast<ValueId>(o.value), o.name, static_cast<int>(o.aliased));
  }
  for (int64_t v = 0; v < n; ++v) {
    // The recorded info replaces the rebuilt one: it must describe the same array.
    ValueInfo& info = b.mutable_info(static_cast<ValueId>(v));
    const ValueInfo& rec = values[v];
    if (info.shape != rec.shape || info.dtype != rec.dtype)
      return bad(fmt::format("value {} is recorded as {} but rebuilds as {}", v, rec.type_string(),
                             info.type_string()));
    if ((!rec.logical.empty() && static_cast<int>(rec.logical.size()) != rec.shape.rank()) ||
        (rec.spec && rec.spec->rank() > rec.shape.rank()))
      return bad(fmt::format("value {} has logical axes or a spec of another rank", v));
    info = rec;
  }
  return std::move(b).finish();
}

std::atomic<uint64_t> g_next_loaded_id{1};

}  // namespace

// Friend of Executable: reads and writes its private fields.
struct ExecutableCodec {
  static void write(Writer& w, const Executable& e) {
    write_program(w, e.program_);
    write_program(w, e.global_);
    w.i64(static_cast<int64_t>(e.arg_shardings_.size()));
    for (const NamedSharding& s : e.arg_shardings_) {
      write_mesh(w, s.mesh);
      write_spec(w, s.spec);
    }
    write_mesh(w, e.mesh_);
    w.i64(static_cast<int64_t>(e.slots_.size()));
    for (const BufferSlot& s : e.slots_) {
      w.u8(static_cast<uint8_t>(s.kind));
      w.i64(s.index);
      w.i64(s.offset);
      w.i64(s.bytes);
    }
    w.i64(static_cast<int64_t>(e.temps_.size()));
    for (const TempInfo& t : e.temps_) {
      w.i64(t.value);
      w.i64(t.bytes);
      w.i64(t.first_instr);
      w.i64(t.last_instr);
      w.i64(t.offset);
      w.u8(t.host ? 1 : 0);
    }
    const MemoryAnalysis& m = e.memory_;
    for (int64_t x : {m.argument_bytes, m.output_bytes, m.alias_bytes, m.temp_bytes,
                      m.host_temp_bytes})
      w.i64(x);
    w.f64(e.cost_.flops);
    w.f64(e.cost_.bytes_accessed);
    w.i64(static_cast<int64_t>(e.cost_.collective_bytes.size()));
    for (const auto& [axes, bytes] : e.cost_.collective_bytes) {
      w.str(axes);
      w.f64(bytes);
    }
    w.i64(e.output_region_bytes_);
  }

  static Result<std::shared_ptr<const Executable>> read(Reader& r) {
    auto e = std::make_shared<Executable>();
    ENG_ASSIGN_OR_RETURN(e->program_, read_program(r));
    ENG_ASSIGN_OR_RETURN(e->global_, read_program(r));
    e->arg_shardings_.resize(r.count("argument shardings", 16));
    for (NamedSharding& s : e->arg_shardings_) {
      s.mesh = read_mesh(r);
      s.spec = read_spec(r);
    }
    e->mesh_ = read_mesh(r);
    e->slots_.resize(r.count("slots", 25));
    for (BufferSlot& s : e->slots_) {
      s.kind = r.enumeration<BufferSlot::Kind>("slot kind", kMaxSlotKind);
      s.index = static_cast<int>(r.i64("slot index"));
      s.offset = r.i64("slot offset");
      s.bytes = r.i64("slot bytes");
    }
    e->temps_.resize(r.count("temps", 40));
    for (TempInfo& t : e->temps_) {
      t.value = static_cast<ValueId>(r.i64("temp value"));
      t.bytes = r.i64("temp bytes");
      t.first_instr = static_cast<int>(r.i64("temp first"));
      t.last_instr = static_cast<int>(r.i64("temp last"));
      t.offset = r.i64("temp offset");
      t.host = r.u8("temp host") != 0;
    }
    MemoryAnalysis& m = e->memory_;
    m.argument_bytes = r.i64("argument bytes");
    m.output_bytes = r.i64("output bytes");
    m.alias_bytes = r.i64("alias bytes");
    m.temp_bytes = r.i64("temp bytes");
    m.host_temp_bytes = r.i64("host temp bytes");
    e->cost_.flops = r.f64("flops");
    e->cost_.bytes_accessed = r.f64("bytes accessed");
    const size_t nc = r.count("collective bytes", 16);
    for (size_t i = 0; i < nc; ++i) {
      std::string axes = r.str("collective axes");
      e->cost_.collective_bytes[axes] = r.f64("collective bytes");
    }
    e->output_region_bytes_ = r.i64("output region bytes");
    ENG_RETURN_IF_ERROR(r.status());
    if (!r.at_end()) return data_loss("executable decode: trailing bytes after the executable");
    ENG_RETURN_IF_ERROR(validate(*e));
    e->id_ = (uint64_t{1} << 63) | g_next_loaded_id.fetch_add(1);  // disjoint from compile()'s
    return std::shared_ptr<const Executable>(std::move(e));
  }

  // The slots must describe memory the runtime will actually have: a checksum-valid entry
  // from a buggy writer must still never make the runtime write out of bounds.
  static Status validate(const Executable& e) {
    const Program& p = e.program_;
    auto bad = [](std::string what) { return data_loss("executable decode: {}", what); };
    ENG_RETURN_IF_ERROR(validate_sizes(e));
    if (e.slots_.size() != p.values().size())
      return bad(fmt::format("{} slots for {} values", e.slots_.size(), p.values().size()));
    if (e.arg_shardings_.size() != p.args().size())
      return bad(fmt::format("{} argument shardings for {} arguments", e.arg_shardings_.size(),
                             p.args().size()));
    for (size_t v = 0; v < e.slots_.size(); ++v) {
      const BufferSlot& s = e.slots_[v];
      const int64_t need = p.values()[v].bytes();
      if (s.bytes != need || s.offset < 0 || s.offset > kMaxTensorElements * 8)  // end: no overflow
        return bad(fmt::format("slot {} holds {} bytes at {}, value needs {}", v, s.bytes, s.offset, need));
      switch (s.kind) {
        case BufferSlot::Kind::kTemp:
          if (s.offset + s.bytes > e.arena_bytes())
            return bad(fmt::format("temp slot {} ends at {} past the arena ({})", v,
                                   s.offset + s.bytes, e.arena_bytes()));
          break;
        case BufferSlot::Kind::kOutput:
          if (s.index < 0 || s.index >= static_cast<int>(p.outputs().size()) ||
              s.offset + s.bytes > e.output_region_bytes_)
            return bad(fmt::format("output slot {} (output {}) outside the output region", v, s.index));
          break;
        case BufferSlot::Kind::kArgument:
          if (s.index < 0 || s.index >= static_cast<int>(p.args().size()))
            return bad(fmt::format("argument slot {} names argument {}", v, s.index));
          break;
        case BufferSlot::Kind::kNone: return bad(fmt::format("value {} has no slot", v));
      }
    }
    return ok_status();
  }

  // The sizes and ranges the memory report and the runtime read: non-negative, bounded, and
  // naming values and instructions that exist; argument shardings fit their arguments.
  static Status validate_sizes(const Executable& e) {
    auto bad = [](std::string what) { return data_loss("executable decode: {}", what); };
    const MemoryAnalysis& m = e.memory_;
    constexpr int64_t kMaxBytes = kMaxTensorElements * 8;
    for (int64_t x : {m.argument_bytes, m.output_bytes, m.alias_bytes, m.temp_bytes,
                      m.host_temp_bytes, e.output_region_bytes_})
      if (x < 0 || x > kMaxBytes) return bad(fmt::format("memory size {} out of range", x));
    const int64_t values = static_cast<int64_t>(e.program_.values().size());
    const int64_t instrs = static_cast<int64_t>(e.program_.instrs().size());
    for (const TempInfo& t : e.temps_)
      if (t.value < 0 || t.value >= values || t.bytes < 0 || t.bytes > kMaxBytes || t.offset < 0 ||
          t.offset > kMaxBytes || t.first_instr < -1 || t.first_instr > instrs ||
          t.last_instr < -1 || t.last_instr > instrs)
        return bad(fmt::format("temp of value {} ({} bytes at {}, instructions {}..{}) out of range",
                               t.value, t.bytes, t.offset, t.first_instr, t.last_instr));
    const Program& g = e.global_;
    if (e.arg_shardings_.size() != g.args().size())
      return bad(fmt::format("{} argument shardings for {} global arguments",
                             e.arg_shardings_.size(), g.args().size()));
    for (size_t i = 0; i < e.arg_shardings_.size(); ++i) {
      Status s = e.arg_shardings_[i].validate(g.value(g.args()[i].value).shape);
      if (!s.ok()) return bad(fmt::format("argument {} sharding: {}", i, s.message()));
    }
    return ok_status();
  }
};

std::string serialize_program(const Program& p) {
  Writer w;
  write_program(w, p);
  return std::move(w).take();
}

Result<Program> deserialize_program(std::string_view bytes) {
  Reader r(bytes);
  ENG_ASSIGN_OR_RETURN(Program p, read_program(r));
  if (!r.at_end()) return data_loss("program decode: trailing bytes");
  return p;
}

std::string serialize_executable(const Executable& exe) {
  Writer w;
  ExecutableCodec::write(w, exe);
  return std::move(w).take();
}

Result<std::shared_ptr<const Executable>> deserialize_executable(std::string_view bytes) {
  Reader r(bytes);
  return ExecutableCodec::read(r);
}

uint64_t digest64(std::string_view bytes, uint64_t seed) {
  uint64_t lanes[8];
  for (int i = 0; i < 8; ++i) lanes[i] = 0xcbf29ce484222325ULL ^ hash_mix(seed, i);
  const size_t n = bytes.size();
  const unsigned char* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < n; ++i) lanes[i & 7] = (lanes[i & 7] ^ p[i]) * 0x100000001b3ULL;
  uint64_t h = hash_mix(seed, n);
  for (uint64_t l : lanes) h = hash_mix(h, l);
  return h;
}

}  // namespace eng
