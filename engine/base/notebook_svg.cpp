// engine/base/notebook_svg.cpp: the SVG a notebook's HTML report inlines, rebuilt from an allow-list
// (a cell can return any string that starts with "<svg"; only drawing survives, never script).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "engine/base/notebook_report.h"

namespace eng {
namespace {

// Elements of drawings; anything else (script, foreignObject, a, use, image, style, ...) is
// dropped with everything inside it.
constexpr std::array<std::string_view, 14> kElements = {
    "svg", "g", "line", "polyline", "polygon", "rect", "circle", "ellipse", "path", "text",
    "tspan", "title", "desc", "defs"};
// Presentation and geometry attributes; no on*, href, src or style.
constexpr std::array<std::string_view, 38> kAttributes = {
    "xmlns", "version", "viewbox", "width", "height", "x", "y", "x1", "y1", "x2", "y2", "dx", "dy",
    "cx", "cy", "r", "rx", "ry", "d", "points", "transform", "class", "id", "fill",
    "fill-opacity", "stroke", "stroke-width", "stroke-opacity", "stroke-dasharray",
    "stroke-linecap", "stroke-linejoin", "opacity", "font-size", "font-family", "font-weight",
    "text-anchor", "dominant-baseline", "preserveaspectratio"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

template <size_t N>
bool allowed(const std::array<std::string_view, N>& list, std::string_view name) {
  const std::string l = lower(name);
  return std::find(list.begin(), list.end(), l) != list.end();
}

bool allowed_attribute(std::string_view name, std::string_view value) {
  const bool data = lower(name).starts_with("data-");
  if (!data && !allowed(kAttributes, name)) return false;
  const std::string v = lower(value);
  return v.find("javascript:") == std::string::npos && v.find("url(") == std::string::npos;
}

// Text or an attribute value re-escaped: entities already there stay, a bare & < > " is escaped.
std::string escape_keeping_entities(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '&') {
      size_t semi = s.find(';', i);
      bool entity = semi != std::string_view::npos && semi > i + 1 && semi - i <= 10 &&
                    std::all_of(s.begin() + i + 1, s.begin() + semi, [](char e) {
                      return std::isalnum(static_cast<unsigned char>(e)) || e == '#';
                    });
      out += entity ? "&" : "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.';
}

struct Tag {
  std::string name;
  std::string attributes;  // the kept ones, rebuilt: ` name="value"`
  bool closing = false;    // </name>
  bool self_closing = false;
  size_t end = 0;          // index after '>'
};

// Parses the tag that starts at s[i] == '<' (not a comment or declaration).
Tag parse_tag(std::string_view s, size_t i) {
  Tag t;
  size_t p = i + 1;
  if (p < s.size() && s[p] == '/') t.closing = true, ++p;
  while (p < s.size() && name_char(s[p])) t.name += s[p++];
  while (p < s.size() && s[p] != '>') {
    if (s[p] == '/' ) {
      t.self_closing = true;
      ++p;
      continue;
    }
    if (!name_char(s[p])) {
      ++p;
      continue;
    }
    std::string attr;
    while (p < s.size() && name_char(s[p])) attr += s[p++];
    std::string value;
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
    if (p < s.size() && s[p] == '=') {
      ++p;
      while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
      if (p < s.size() && (s[p] == '"' || s[p] == '\'')) {
        const char q = s[p++];
        size_t close = s.find(q, p);
        if (close == std::string_view::npos) close = s.size();
        value = std::string(s.substr(p, close - p));
        p = std::min(close + 1, s.size());
      } else {
        while (p < s.size() && !std::isspace(static_cast<unsigned char>(s[p])) && s[p] != '>') value += s[p++];
      }
    }
    t.self_closing = false;
    if (allowed_attribute(attr, value)) t.attributes += " " + attr + "=\"" + escape_keeping_entities(value) + "\"";
  }
  t.end = std::min(p + 1, s.size());
  return t;
}

}  // namespace

std::string sanitize_svg(std::string_view s) {
  std::string out;
  int dropped = 0;  // depth inside a dropped element
  for (size_t i = 0; i < s.size();) {
    if (s[i] != '<') {
      size_t next = std::min(s.find('<', i), s.size());
      if (dropped == 0) out += escape_keeping_entities(s.substr(i, next - i));
      i = next;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {  // comments go
      size_t end = s.find("-->", i + 4);
      i = end == std::string_view::npos ? s.size() : end + 3;
      continue;
    }
    if (i + 1 < s.size() && (s[i + 1] == '!' || s[i + 1] == '?')) {  // <!DOCTYPE, <![CDATA[, <?xml
      size_t end = s.find('>', i);
      i = end == std::string_view::npos ? s.size() : end + 1;
      continue;
    }
    Tag t = parse_tag(s, i);
    i = t.end;
    const bool keep = !t.name.empty() && allowed(kElements, t.name);
    if (t.closing) {
      if (dropped > 0) --dropped;
      else if (keep) out += "</" + t.name + ">";
    } else if (dropped > 0 || !keep) {
      if (!t.self_closing) ++dropped;
    } else {
      out += "<" + t.name + t.attributes + (t.self_closing ? "/>" : ">");
    }
  }
  return out;
}

bool is_svg(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  return b != std::string_view::npos && s.substr(b, 4) == "<svg" &&
         s.find("</svg>") != std::string_view::npos;
}

std::string svg_summary(std::string_view svg) {
  size_t n = 0;
  for (size_t p = svg.find("<polyline"); p != std::string_view::npos; p = svg.find("<polyline", p + 1))
    ++n;
  return fmt::format("<svg plot, {} bytes, {} polyline{}; plot.save(svg, \"plot.svg\") writes it>",
                     svg.size(), n, n == 1 ? "" : "s");
}

}  // namespace eng
