// engine/base/notebook_format.cpp: jupytext percent-format cells for Lua and papermill
// parameters (notebook_format.h).
#include "engine/base/notebook_format.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace eng {
namespace {

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string_view::npos ? "" : std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string line(text.substr(start, nl - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = nl + 1;
  }
  return lines;
}

// `-- %%` at the start of the line, followed by the end or a space.
bool is_marker(const std::string& line) {
  return line.rfind("-- %%", 0) == 0 && (line.size() == 5 || line[5] == ' ' || line[5] == '\t');
}

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// A metadata value: "string", 'string', [list, of, values], or a bare word (true, 3, ...).
// Returns the value's items (one for scalars) and advances pos.
Result<std::vector<std::string>> parse_value(const std::string& s, size_t* pos, int line) {
  auto quoted = [&](size_t* p) -> Result<std::string> {
    char q = s[*p];
    size_t end = s.find(q, *p + 1);
    if (end == std::string::npos) return invalid_argument("notebook: line {}: unterminated string in cell header", line);
    std::string v = s.substr(*p + 1, end - *p - 1);
    *p = end + 1;
    return v;
  };
  std::vector<std::string> items;
  if (*pos < s.size() && (s[*pos] == '"' || s[*pos] == '\'')) {
    ENG_ASSIGN_OR_RETURN(std::string v, quoted(pos));
    items.push_back(v);
  } else if (*pos < s.size() && s[*pos] == '[') {
    size_t p = *pos + 1;
    for (;;) {
      while (p < s.size() && (s[p] == ' ' || s[p] == ',')) ++p;
      if (p >= s.size()) return invalid_argument("notebook: line {}: unterminated list in cell header", line);
      if (s[p] == ']') break;
      if (s[p] == '"' || s[p] == '\'') {
        ENG_ASSIGN_OR_RETURN(std::string v, quoted(&p));
        items.push_back(v);
      } else {
        size_t e = s.find_first_of(" ,]", p);
        if (e == std::string::npos) e = s.size();
        items.push_back(s.substr(p, e - p));
        p = e;
      }
    }
    *pos = p + 1;
  } else {
    size_t e = s.find_first_of(" \t", *pos);
    if (e == std::string::npos) e = s.size();
    items.push_back(s.substr(*pos, e - *pos));
    *pos = e;
  }
  return items;
}

// The header after `-- %%`: title words, one [type], key=value metadata.
Status parse_header(const std::string& rest, int line, Cell* cell) {
  std::vector<std::string> title;
  size_t pos = 0;
  while (pos < rest.size()) {
    if (rest[pos] == ' ' || rest[pos] == '\t') {
      ++pos;
      continue;
    }
    if (rest[pos] == '[') {
      size_t close = rest.find(']', pos);
      std::string type = close == std::string::npos ? "" : rest.substr(pos + 1, close - pos - 1);
      if (type == "markdown" || type == "md") cell->kind = CellKind::kMarkdown;
      else if (type == "raw") cell->kind = CellKind::kRaw;
      else return invalid_argument("notebook: line {}: unknown cell type '[{}]' (markdown, md or raw)", line, type);
      pos = close + 1;
      continue;
    }
    size_t end = rest.find_first_of(" \t", pos);
    if (end == std::string::npos) end = rest.size();
    size_t eq = rest.find('=', pos);
    if (eq != std::string::npos && eq < end && is_identifier(rest.substr(pos, eq - pos))) {
      std::string key = rest.substr(pos, eq - pos);
      pos = eq + 1;
      ENG_ASSIGN_OR_RETURN(std::vector<std::string> items, parse_value(rest, &pos, line));
      std::string v = items.empty() ? "" : items[0];
      if (key == "tags" || key == "tag") {
        cell->tags.insert(cell->tags.end(), items.begin(), items.end());
      } else if (key == "allow_error" || key == "skip") {
        if (v != "true" && v != "false")
          return invalid_argument("notebook: line {}: {} expects true or false, got '{}'", line, key, v);
        (key == "skip" ? cell->skip : cell->allow_error) = v == "true";
      }  // other jupytext metadata (e.g. slideshow, lines_to_next_cell) is kept by editors, ignored here
      continue;
    }
    title.push_back(rest.substr(pos, end - pos));
    pos = end;
  }
  if (cell->has_tag("raises-exception")) cell->allow_error = true;
  std::string joined;
  for (const std::string& w : title) joined += (joined.empty() ? "" : " ") + w;
  cell->title = joined;
  return Status();
}

// Markdown and raw cells are comment lines: "-- text" -> "text", "--" -> "".
std::string uncomment(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) {
    std::string t = l;
    if (t.rfind("-- ", 0) == 0) t = t.substr(3);
    else if (t.rfind("--", 0) == 0) t = t.substr(2);
    out += t + "\n";
  }
  return out;
}

std::string lua_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\0': out += "\\0"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

bool is_number_literal(const std::string& v) {
  if (v.empty() || !(std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '-' || v[0] == '+' || v[0] == '.'))
    return false;
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  return end != v.c_str() && *end == '\0';
}

// A line that ends a cell's code without being code: blank or a `--` comment (not a block).
bool is_trailing_noise(const std::string& line) {
  std::string t = trim(line);
  return t.empty() || (t.rfind("--", 0) == 0 && t.rfind("--[[", 0) != 0 && t.rfind("--[=", 0) != 0);
}

}  // namespace

bool Cell::has_tag(std::string_view t) const {
  return std::find(tags.begin(), tags.end(), t) != tags.end();
}

Result<std::vector<Cell>> parse_notebook(std::string_view text) {
  std::vector<std::string> lines = split_lines(text);
  std::vector<Cell> cells;
  Cell current;
  std::vector<std::string> body;
  int body_start = 1;
  bool have_header = false;
  auto finish = [&]() {
    if (!have_header && std::all_of(body.begin(), body.end(), [](const std::string& l) { return trim(l).empty(); }))
      return;  // nothing before the first marker
    while (!body.empty() && trim(body.back()).empty()) body.pop_back();
    current.first_line = body_start;
    if (!have_header && std::all_of(body.begin(), body.end(), is_trailing_noise))
      current.kind = CellKind::kRaw;  // a comment header before the first marker: shown, not run
    if (current.kind == CellKind::kCode) {
      for (const std::string& l : body) current.source += l + "\n";
    } else {
      while (!body.empty() && trim(body.front()).empty()) body.erase(body.begin()), ++current.first_line;
      current.source = uncomment(body);
    }
    cells.push_back(std::move(current));
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const int lineno = static_cast<int>(i) + 1;
    if (i == 0 && lines[0].rfind("#!", 0) == 0) {  // shebang: keep the line count, drop the text
      body.push_back("");
      continue;
    }
    if (!is_marker(lines[i])) {
      body.push_back(lines[i]);
      continue;
    }
    finish();
    current = Cell();
    body.clear();
    have_header = true;
    body_start = lineno + 1;
    ENG_RETURN_IF_ERROR(parse_header(lines[i].substr(5), lineno, &current));
  }
  finish();
  return cells;
}

std::string parameter_literal(std::string_view value) {
  std::string v = trim(value);
  if (v == "true" || v == "false" || v == "nil" || is_number_literal(v)) return v;
  if (v.size() >= 2 && (v[0] == '"' || v[0] == '\'') && v.back() == v[0]) return lua_quote(v.substr(1, v.size() - 2));
  return lua_quote(value);
}

Status inject_parameters(std::vector<Cell>* cells,
                              const std::vector<std::pair<std::string, std::string>>& params) {
  if (params.empty()) return Status();
  Cell injected;
  injected.title = "injected-parameters";
  injected.tags = {"injected-parameters"};
  injected.injected = true;
  for (const auto& [name, value] : params) {
    if (!is_identifier(name)) return invalid_argument("notebook: -p: '{}' is not a Lua name", name);
    injected.source += fmt::format("{} = {}\n", name, parameter_literal(value));
  }
  auto it = std::find_if(cells->begin(), cells->end(), [](const Cell& c) { return c.has_tag("parameters"); });
  cells->insert(it == cells->end() ? cells->begin() : it + 1, std::move(injected));
  return Status();
}

std::vector<std::string> cell_code_lines(const Cell& cell) {
  std::vector<std::string> lines = split_lines(cell.source);
  while (!lines.empty() && is_trailing_noise(lines.back())) lines.pop_back();
  return lines;
}

}  // namespace eng
