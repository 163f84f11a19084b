-- tests/shell/repl_test.lua: REPL features through a pipe (`shardlab -i` without a terminal):
-- `$ cmd`, _ / _LAST / _RESULTS, who(), sl.timing, and no timer line when stdin is not a tty.
local bin = assert(os.getenv("SHARDLAB_BIN"), "SHARDLAB_BIN not set")
local scratch = assert(os.getenv("SHARDLAB_SCRATCH"), "SHARDLAB_SCRATCH not set")

-- Feeds `lines` to the REPL; returns everything it printed (prompts included).
local function repl(lines)
  local input = scratch .. "/repl_input.lua"
  local f = assert(io.open(input, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  local p = assert(io.popen(string.format("cd %q && %q --db %q/repl.db -i < %q 2>&1", scratch, bin,
                                          scratch, input)))
  local out = p:read("a")
  p:close()
  return out
end
local function check(cond, what, out) assert(cond, what .. "\n--- output:\n" .. tostring(out)) end
local function has(out, s) return out:find(s, 1, true) ~= nil end

-- `$ cmd` prints the output; the string (trailing newline dropped) becomes _ and _LAST.
local out = repl{
  "$ printf 'alpha\\nbeta\\n'",
  "print('len', #_, _LAST == _)",
  "$ exit 3",
  "print('empty', _ == '')",
}
check(has(out, "sl> alpha\nbeta\n"), "$ prints the command's output", out)
check(has(out, "len\t10\ttrue"), "$ output (without the trailing newline) is _ and _LAST", out)
check(has(out, "empty\ttrue"), "a failing command with no output gives ''", out)

-- _RESULTS collects the first value of every command that produced one (`;` included), in order.
out = repl{
  "40 + 2",
  "'x', 'y';",
  "print('no value')",
  "$ echo shell",
  "nil",
  "print(#_RESULTS, _RESULTS[1], _RESULTS[2], _RESULTS[3], _LAST, _)",
  "_RESULTS = 'clobbered'",
  "7",
  "print(type(_RESULTS), _RESULTS[1])",
}
check(has(out, "3\t42\tx\tshell\tnil\tnil"), "_RESULTS / _LAST / _ after values, ';', $ and nil", out)
check(has(out, "table\t7"), "_RESULTS is recreated when overwritten", out)

-- who() lists user globals (name, type, value), sorted; who(true) adds the system ones.
out = repl{
  "alpha = 5",
  "zeta = sl.mesh{data = 2}",
  "function helper() end",
  "$ true",
  "who()",
  "print('--')",
  "who(true)",
}
local user = out:match("== User globals ==\n(.-)sl> ")
check(user, "who() prints a User globals section", out)
check(user == "  alpha   number    5\n" ..
              "  helper  function\n" ..
              "  zeta    Mesh      Mesh('diloco': 1, 'data': 2, 'stage': 1, 'fsdp': 1, 'fsdp...\n",
      "who() lists exactly the user's globals, aligned", user)
check(has(out, "== System globals ==") and out:find("\n  sl%s+table") and out:find("\n  _LAST%s+string"),
      "who(true) lists system globals too", out)

-- sl.timing toggles and reports the setting; no timer line without a terminal.
out = repl{
  "sl.timing()",
  "sl.timing(false)",
  "sl.timing()",
  "sl.timing(true)",
  "local t = os.clock() while os.clock() - t < 0.15 do end",
  "sl.timing('x')",
}
check(has(out, "sl> true\nsl> false\nsl> false\nsl> true\n"), "sl.timing([on]) returns the setting", out)
check(not out:find("%[%d+%.%d+s%]"), "no [0.1234s] line when stdin is not a terminal", out)
check(has(out, "sl.timing: argument 'on' expected boolean"), "sl.timing rejects non-booleans", out)
print("repl_test: ok")
