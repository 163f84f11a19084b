// engine/train/maxtext_yaml.cpp: YAML documents read with yaml-cpp and typed as MaxText's loader
// types them (the only includer of yaml-cpp; its exceptions stop here).
#include "engine/train/maxtext_yaml.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

namespace eng {

namespace {

constexpr int kMaxDepth = 64;  // nested lists/mappings in one value

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// [0-9][0-9_]* from s[i]; returns false when no digit is there.
bool digits(std::string_view s, size_t& i) {
  if (i >= s.size() || !is_digit(s[i])) return false;
  while (i < s.size() && (is_digit(s[i]) || s[i] == '_')) ++i;
  return true;
}

// [eE][-+]?[0-9]+ from s[i] (sign optional unless `signed_only`).
bool exponent(std::string_view s, size_t& i, bool sign_required) {
  if (i >= s.size() || (s[i] != 'e' && s[i] != 'E')) return false;
  size_t j = i + 1;
  if (j < s.size() && (s[j] == '-' || s[j] == '+'))
    ++j;
  else if (sign_required)
    return false;
  if (j >= s.size() || !is_digit(s[j])) return false;
  while (j < s.size() && is_digit(s[j])) ++j;
  i = j;
  return true;
}

std::string without_underscores(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out.push_back(c);
  return out;
}

// OmegaConf's float resolver (YAML 1.1's, plus exponents without a dot: 1e-5).
bool float_text(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  const std::string_view rest = s.substr(i);
  if (rest == ".inf" || rest == ".Inf" || rest == ".INF") return true;
  if (i == 0 && (s == ".nan" || s == ".NaN" || s == ".NAN")) return true;
  if (i < s.size() && s[i] == '.') {  // .5, .5e+3 (no sign before the dot form's digits)
    ++i;
    if (!digits(s, i)) return false;
    exponent(s, i, true);
    return i == s.size();
  }
  if (!digits(s, i)) return false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && (is_digit(s[i]) || s[i] == '_')) ++i;
    exponent(s, i, false);
    return i == s.size();
  }
  return exponent(s, i, false) && i == s.size();
}

double float_value(std::string_view s) {
  std::string t = without_underscores(s);
  const bool negative = !t.empty() && t[0] == '-';
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) t.erase(0, 1);
  double v = 0;
  if (t == ".inf" || t == ".Inf" || t == ".INF") {
    v = std::numeric_limits<double>::infinity();
  } else if (t == ".nan" || t == ".NaN" || t == ".NAN") {
    v = std::numeric_limits<double>::quiet_NaN();
  } else {
    if (t[0] == '.') t.insert(t.begin(), '0');
    std::from_chars(t.data(), t.data() + t.size(), v);  // checked by float_text; may be inf
  }
  return negative ? -v : v;
}

// Python's repr of a string: single quotes unless the text has one and no double quote.
std::string quoted(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back(q);
  return out;
}

Result<YamlValue> convert(const YAML::Node& node, int depth, std::string_view name) {
  if (depth > kMaxDepth)
    return invalid_argument("config: {}: values nested deeper than {} levels", name, kMaxDepth);
  YamlValue v;
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return v;
    case YAML::NodeType::Scalar:
      if (node.Tag() == "?") return plain_scalar(node.Scalar());
      v.kind = YamlValue::Kind::kString;  // quoted: always a string
      v.s = node.Scalar();
      return v;
    case YAML::NodeType::Sequence:
      v.kind = YamlValue::Kind::kList;
      for (const YAML::Node& item : node) {
        ENG_ASSIGN_OR_RETURN(YamlValue x, convert(item, depth + 1, name));
        v.items.push_back(std::move(x));
      }
      return v;
    case YAML::NodeType::Map:
      v.kind = YamlValue::Kind::kMap;
      for (const auto& kv : node) {
        v.keys.push_back(kv.first.IsScalar() ? kv.first.Scalar() : std::string("?"));
        ENG_ASSIGN_OR_RETURN(YamlValue x, convert(kv.second, depth + 1, name));
        v.items.push_back(std::move(x));
      }
      return v;
  }
  return v;
}

}  // namespace

YamlValue plain_scalar(std::string_view t) {
  YamlValue v;
  static const std::set<std::string_view> kNull = {"", "~", "null", "Null", "NULL"};
  static const std::set<std::string_view> kTrue = {"true", "True", "TRUE", "yes", "Yes",
                                                   "YES",  "on",   "On",   "ON"};
  static const std::set<std::string_view> kFalse = {"false", "False", "FALSE", "no", "No",
                                                    "NO",    "off",   "Off",   "OFF"};
  if (kNull.count(t)) return v;
  if (kTrue.count(t) || kFalse.count(t)) {
    v.kind = YamlValue::Kind::kBool;
    v.b = kTrue.count(t) > 0;
    return v;
  }
  size_t i = (!t.empty() && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
  size_t j = i;
  if (digits(t, j) && j == t.size()) {  // [-+]?[0-9][0-9_]*
    const std::string d = without_underscores(t.substr(t[0] == '+' ? 1 : 0));
    int64_t x = 0;
    auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), x);
    if (ec == std::errc() && end == d.data() + d.size()) {
      v.kind = YamlValue::Kind::kInt;
      v.i = x;
      return v;
    }
  }
  if (t.size() > i + 2 && t[i] == '0' && (t[i + 1] == 'x' || t[i + 1] == 'X')) {
    const std::string d = without_underscores(t.substr(i + 2));
    uint64_t x = 0;
    auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), x, 16);
    if (!d.empty() && ec == std::errc() && end == d.data() + d.size() &&
        x <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      v.kind = YamlValue::Kind::kInt;
      v.i = t[0] == '-' ? -static_cast<int64_t>(x) : static_cast<int64_t>(x);
      return v;
    }
  }
  if (float_text(t)) {
    v.kind = YamlValue::Kind::kFloat;
    v.f = float_value(t);
    return v;
  }
  v.kind = YamlValue::Kind::kString;
  v.s = std::string(t);
  return v;
}

const char* YamlValue::type_name() const {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "a boolean";
    case Kind::kInt:
      return "an integer";
    case Kind::kFloat:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kList:
      return "a list";
    case Kind::kMap:
      return "a mapping";
  }
  return "?";
}

std::string YamlValue::to_string() const {
  switch (kind) {
    case Kind::kNull:
      return "None";
    case Kind::kBool:
      return b ? "True" : "False";
    case Kind::kInt:
      return fmt::format("{}", i);
    case Kind::kFloat:
      if (std::isnan(f)) return "nan";
      if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
      return fmt::format("{}", f);
    case Kind::kString:
      return quoted(s);
    case Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < items.size(); ++k) out += (k ? ", " : "") + items[k].to_string();
      return out + "]";
    }
    case Kind::kMap: {
      std::string out = "{";
      for (size_t k = 0; k < items.size(); ++k)
        out += (k ? ", " : "") + quoted(keys[k]) + ": " + items[k].to_string();
      return out + "}";
    }
  }
  return "?";
}

Result<YamlDocument> parse_yaml_document(std::string_view text, std::string_view name) {
  // yaml-cpp recurses once per nesting level while parsing: refuse absurd flow nesting before
  // it does (block nesting needs a line per level, which a config does not have).
  int depth = 0, deepest = 0;
  for (char c : text) {
    if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    if ((c == ']' || c == '}') && depth > 0) --depth;
  }
  if (deepest > kMaxDepth)
    return invalid_argument("config: {}: brackets nested deeper than {} levels", name, kMaxDepth);
  YamlDocument doc;
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    if (root.IsNull() || !root.IsDefined()) return doc;  // an empty file: no keys
    if (!root.IsMap())
      return invalid_argument(
          "config: {}: not a MaxText config: expected a YAML mapping of keys (key: value lines), "
          "got {}",
          name, root.IsScalar() ? "a single scalar" : "a list");
    std::set<std::string> seen;
    for (const auto& kv : root) {
      if (!kv.first.IsScalar())
        return invalid_argument("config: {}: line {}: a key must be a plain name", name,
                                kv.first.Mark().line + 1);
      const std::string key = kv.first.Scalar();
      if (!seen.insert(key).second)
        return invalid_argument("config: {}: line {}: key '{}' is given twice", name,
                                kv.first.Mark().line + 1, key);
      ENG_ASSIGN_OR_RETURN(YamlValue v, convert(kv.second, 1, name));
      doc.keys.emplace_back(key, std::move(v));
    }
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return invalid_argument("config: {}: not valid YAML: {}", name, e.msg);
    return invalid_argument("config: {}: not valid YAML (line {}, column {}): {}", name,
                            e.mark.line + 1, e.mark.column + 1, e.msg);
  } catch (const std::exception& e) {
    return invalid_argument("config: {}: not valid YAML: {}", name, e.what());
  }
  return doc;
}

bool is_yaml_path(std::string_view arg) {
  return arg.find('=') == std::string_view::npos &&
         (arg.ends_with(".yml") || arg.ends_with(".yaml"));
}

}  // namespace eng
