// engine/frontend/array_print.cpp: an array as NumPy prints it: numpy's array2string with
// floatmode "maxprec", summarised past 1000 elements; a tracer as JAX prints one.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/frontend/array_print.h"
#include "engine/frontend/eager_manual.h"
#include "engine/frontend/numpy.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::frontend {

namespace {

// One element as NumPy prints it (floatmode "maxprec"): at most 8 fractional digits, trailing
// zeros dropped ("0.5", "2."); scientific for magnitudes NumPy prints so (>= 1e8, < 1e-4).
std::string format_number(double v, DType d, bool scientific) {
  if (d == DType::kI32) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (scientific) return fmt::format("{:.8e}", v);
  // The shortest text that reads back as the same float32 (NumPy's "unique"), unless it needs
  // more than 8 fractional digits or an exponent: then rounded to 8.
  std::string t = fmt::format("{}", static_cast<float>(v));
  const size_t dot = t.find('.');
  if (t.find_first_of("eE") != std::string::npos ||
      (dot != std::string::npos && t.size() - dot - 1 > 8)) {
    t = fmt::format("{:.8f}", static_cast<double>(static_cast<float>(v)));
    while (!t.empty() && t.back() == '0') t.pop_back();
  } else if (dot == std::string::npos) {
    t += ".";
  }
  return t;  // ends with "." when integral
}

// numpy's array2string: nested brackets, elements right-aligned to one width, rows of a
// rank-k array separated by k-1 blank lines; over 1000 elements, only `edge` items at each
// end of every dim with "..." between (numpy's threshold and edgeitems).
struct Printer {
  const std::vector<double>& v;
  const Shape& shape;
  DType dtype;
  bool summarize;
  const char* comma = ",";  // numpy's repr; its str separates by spaces alone ("")
  bool scientific = false;
  size_t int_width = 1, frac_width = 0;  // columns before and after the decimal point
  static constexpr int64_t kEdge = 3;

  std::vector<int64_t> shown(int dim) const {
    std::vector<int64_t> idx;
    const int64_t n = shape[dim];
    for (int64_t i = 0; i < n; ++i)
      if (!summarize || n <= 2 * kEdge || i < kEdge || i >= n - kEdge) idx.push_back(i);
    return idx;
  }
  void measure() {
    for (double x : v) {
      const double a = std::fabs(x);
      scientific = scientific || (std::isfinite(a) && (a >= 1e8 || (a > 0 && a < 1e-4)));
    }
    for (double x : v) {
      const std::string s = format_number(x, dtype, scientific);
      const size_t dot = s.find('.');
      int_width = std::max(int_width, dot == std::string::npos ? s.size() : dot);
      if (dot != std::string::npos && !scientific)
        frac_width = std::max(frac_width, s.size() - dot);
    }
  }
  std::string cell(double x) const {
    std::string s = format_number(x, dtype, scientific);
    const size_t dot = s.find('.');
    const size_t head = dot == std::string::npos || scientific ? s.size() : dot;
    const size_t tail = dot == std::string::npos || scientific ? 0 : s.size() - dot;
    return std::string(int_width > head ? int_width - head : 0, ' ') + s +
           std::string(frac_width > tail ? frac_width - tail : 0, ' ');
  }
  void print(std::string& out, int dim, int64_t offset, int indent) const {
    if (dim == shape.rank()) {
      out += cell(v[offset]);
      return;
    }
    const int64_t stride = shape.prod(dim + 1, shape.rank());
    const std::vector<int64_t> idx = shown(dim);
    // After an element (or numpy's "..." for the rows left out): a space in the last dim, else
    // a line per remaining dim and the indent.
    auto separate = [&](const char* what) {
      out += what;
      if (dim == shape.rank() - 1)
        out += " ";
      else
        out += std::string(static_cast<size_t>(shape.rank() - dim - 1), '\n') +
               std::string(indent + 1, ' ');
    };
    out += "[";
    for (size_t k = 0; k < idx.size(); ++k) {
      if (k > 0) separate(comma);
      if (summarize && k > 0 && idx[k] != idx[k - 1] + 1) separate(*comma ? "...," : "...");
      print(out, dim + 1, offset + idx[k] * stride, indent + 1);
    }
    out += "]";
  }
};

}  // namespace

std::string array_str(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Printer p{values, shape, dtype, shape.numel() > 1000};
  p.comma = "";
  p.measure();
  std::string body;
  p.print(body, 0, 0, 0);
  if (shape.rank() == 0 && !body.empty() && body.back() == '.') body += "0";  // numpy: 3.0
  return body;
}

Result<std::string> array_repr(const Value& a) {
  if (a.is_tracer() && a.trace->eager()) return eager_repr(a);
  if (a.is_tracer()) {
    Result<NamedSharding> s = sharding_of(a);
    PartitionSpec spec =
        s.ok() ? remove_size_one_mesh_axis(s->spec, s->mesh) : PartitionSpec();
    return fmt::format(
        "Traced<{}>with<DynamicJaxprTrace>",
        typeof_string(dtype_name(a.dtype), a.shape, &spec, &a.trace->mesh()));
  }
  // An unreduced array prints its type, not values (jax.Array's __repr__).
  if (const NamedSharding& s = a.data->array.sharding; !s.spec.partial().empty())
    return fmt::format("Array(shape={}, dtype={}, sharding={})", np::py_shape(a.shape),
                       dtype_long_name(a.dtype), s.to_string());
  ENG_ASSIGN_OR_RETURN(std::vector<double> v, fetch(*a.data));
  // Only the shown elements are gathered for printing big arrays? fetch gathers all; the
  // array limit (engine/base/limits.h) bounds it.
  Printer p{v, a.shape, a.dtype, a.shape.numel() > 1000};
  p.measure();
  std::string body;
  const std::string prefix = "Array(";
  p.print(body, 0, 0, static_cast<int>(prefix.size()));
  if (a.shape.numel() == 0) body = fmt::format("[], shape={}", a.shape.to_string());
  return fmt::format("{}{}, dtype={})", prefix, body, dtype_long_name(a.dtype));
}

}  // namespace eng::frontend
