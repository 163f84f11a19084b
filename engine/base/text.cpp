// engine/base/text.cpp: edit distance, did-you-mean, XML and JSON escaping.
#include "engine/base/text.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "engine/base/limits.h"

namespace eng {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_match(std::string_view word, std::span<const std::string_view> candidates) {
  std::string best;
  // Edit distance is quadratic: a word longer than any name is close to none (limits.h).
  if (static_cast<int64_t>(word.size()) > kMaxNameLength) return best;
  size_t best_d = std::max<size_t>(3, word.size() / 3) + 1;
  for (std::string_view c : candidates) {
    size_t d = edit_distance(word, c);
    // A long enough fragment of the candidate also counts ("learning" -> learning_rate).
    if (word.size() >= 4 && c.find(word) != std::string_view::npos) d = std::min<size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = std::string(c);
    }
  }
  return best;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

}  // namespace eng
