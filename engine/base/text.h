// engine/base/text.h: small text utilities shared by the engine and the shell.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace eng {

// Levenshtein distance (insert, delete, substitute: cost 1 each).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` within a small edit distance (about a third of its length,
// at least 3), for "did you mean ...?" hints; "" when none is close.
std::string closest_match(std::string_view word, std::span<const std::string_view> candidates);

// Escapes <, >, & and " for XML, SVG and HTML text and attribute values.
std::string xml_escape(std::string_view s);

// `s` as a JSON string literal, quotes included: " and \ escaped, \n \t \r as themselves,
// other control characters as \u00XX; other bytes (UTF-8 included) unchanged.
std::string json_string(std::string_view s);

}  // namespace eng
