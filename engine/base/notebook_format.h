// engine/base/notebook_format.h: a notebook's cells in jupytext's percent format with Lua's
// `--` comment prefix, and papermill's parameters (docs/notebook.md has the grammar). Text
// only: running a cell is the shell's (shell/notebook.h's load_cell).
//
//   ENG_ASSIGN_OR_RETURN(std::vector<Cell> cells, parse_notebook(text));
//   ENG_RETURN_IF_ERROR(inject_parameters(&cells, {{"steps", "3"}}));
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/base/status.h"

namespace eng {

enum class CellKind { kCode, kMarkdown, kRaw };

// Cells start at `-- %%` lines:
//   -- %% Optional title [markdown] tags=["parameters"] allow_error=true skip=true
struct Cell {
  CellKind kind = CellKind::kCode;
  std::string title;              // text after `-- %%` that is neither [type] nor key=value
  std::string source;             // code, or prose with the `-- ` prefix removed
  int first_line = 1;             // 1-based line of the first source line in the file
  std::vector<std::string> tags;  // tags=[...] / tag="..." ("parameters", "raises-exception", ...)
  bool allow_error = false;       // allow_error=true or tag "raises-exception" (papermill)
  bool skip = false;              // skip=true: shown, never run
  bool injected = false;          // the injected-parameters cell (-p)

  bool has_tag(std::string_view t) const;
};

// Splits a notebook's text into cells. Text before the first marker is a code cell (if not
// blank); a file without markers is one code cell. Errors name the line of a bad header.
Result<std::vector<Cell>> parse_notebook(std::string_view text);

// The Lua source for a -p value: numbers, true/false/nil and quoted strings as Lua literals,
// anything else as a string ("-p name=tiny" is name = "tiny").
std::string parameter_literal(std::string_view value);
// papermill: inserts an `injected-parameters` cell after the cell tagged `parameters` (at the
// top if there is none). Names must be Lua identifiers.
Status inject_parameters(std::vector<Cell>* cells,
                         const std::vector<std::pair<std::string, std::string>>& params);

// A code cell's lines (a trailing \r dropped) without its trailing blank and `--` comment
// lines: the lines whose shortest expression tail is the cell's value.
std::vector<std::string> cell_code_lines(const Cell& cell);

}  // namespace eng
