// tests/fuzz/notebook_fuzz.cpp: the notebook parser (engine/base/notebook_format.cpp) over arbitrary
// text: cells or an error, never a crash or hang; accepted cells have sane line numbers.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/base/notebook_format.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  eng::Result<std::vector<eng::Cell>> r = eng::parse_notebook(text);
  if (r.ok())
    for (const eng::Cell& c : *r)
      if (c.first_line < 1 || c.source.size() > size + 1) {  // + the final newline it adds
        std::fprintf(stderr, "line %d source %zu of %zu\n", c.first_line, c.source.size(), size);
        std::abort();
      }
  return 0;
}

namespace eng::fuzz {

std::vector<std::string> seed_inputs() {
  return {
      "print(1)\n",
      "-- %% Setup tags=[\"parameters\"]\nsteps = 3\n-- %% [markdown]\n-- # Title\n-- text\n"
      "-- %% Train allow_error=true\nerror('x')\n-- %% skip=true\nprint(2)\n",
      "local x = 1\n-- %% [raw]\n-- raw text\n-- %% tag=\"raises-exception\"\nx\n",
      "-- %% [markdown] tags=[\"a\", \"b\"\n-- unclosed\n-- %% bad=\n",
  };
}

}  // namespace eng::fuzz
