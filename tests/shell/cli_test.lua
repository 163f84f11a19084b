-- tests/shell/cli_test.lua: the lua-compatible command line, run as child processes of the real binary.
local bin = assert(os.getenv("SHARDLAB_BIN"), "SHARDLAB_BIN not set")
local scratch = assert(os.getenv("SHARDLAB_SCRATCH"), "SHARDLAB_SCRATCH not set")

-- Runs a shell command; returns its combined stdout+stderr and exit code.
local function run(cmd)
  local p = assert(io.popen(cmd .. ' 2>&1; echo "rc=$?"'))
  local out = p:read("a")
  p:close()
  local body, rc = out:match("^(.-)rc=(%d+)\n$")
  return body, tonumber(rc)
end
local function sh(cmd) return string.format("cd %q && %s", scratch, cmd) end
local function shardlab(args) return sh(string.format("%q --db %q/cli.db %s", bin, scratch, args)) end
local function write(name, text)
  local f = assert(io.open(scratch .. "/" .. name, "w"))
  f:write(text)
  f:close()
  return name  -- relative: commands run in scratch (and Lua shortens long chunk names)
end
local function check(cond, what, out) assert(cond, what .. "\n--- output:\n" .. tostring(out)) end

-- -e runs a statement and exits; no script means no REPL.
local out, rc = run(shardlab("-e 'print(1 + 1)'"))
check(out == "2\n" and rc == 0, "-e prints and exits 0", out)
out, rc = run(shardlab("-e 'x = 20' -e 'print(x + 1)'"))
check(out == "21\n" and rc == 0, "-e twice, in order", out)
out, rc = run(shardlab("-e"))
check(rc == 1 and out:find("shardlab: '-e' needs argument", 1, true) and out:find("usage: shardlab"),
      "-e without argument", out)
out, rc = run(shardlab("-x"))
check(rc == 1 and out:find("unrecognized option '-x'", 1, true), "unknown option", out)
out, rc = run(shardlab("-h"))
check(rc == 0 and out:find("usage: shardlab [options] [script [args]]", 1, true) and
      out:find("--db PATH", 1, true), "-h prints usage", out)
out, rc = run(shardlab("-v"))
check(rc == 0 and out:find("^shardlab 0%.1 %(Lua 5%.4"), "-v prints the version", out)
out, rc = run(shardlab("--version"))
check(rc == 0 and out:find("^shardlab 0%.1 %(Lua 5%.4") and out:find("\nblas_core: %a+") and
      out:find("\ncpu: ") and out:find("\nmatmul_bf16: "), "--version names the CPU, BLAS core, paths", out)
-- The BLAS core (engine/tensor/blas.h): a bad SHARDLAB_OPENBLAS_CORETYPE is an error naming the
-- accepted ones, before any script runs.
out, rc = run(sh(string.format("SHARDLAB_OPENBLAS_CORETYPE=Skylake %q -e 'print(1)'", bin)))
check(rc == 1 and out:find("SHARDLAB_OPENBLAS_CORETYPE=Skylake: not an OpenBLAS 0.3.21 core type; accepted: ", 1, true)
      and out:find("Haswell, Zen, SkylakeX, Cooperlake", 1, true) and not out:find("\n1\n"),
      "unknown SHARDLAB_OPENBLAS_CORETYPE", out)
out, rc = run(shardlab("--notebook nb.lua -o r.md"))
check(rc == 1 and out:find("notebook: cannot open 'nb.lua'", 1, true), "--notebook with a missing file", out)

-- -l mod and -l g=mod; require "shardlab" is sl.
out = run(shardlab("-l g=string -e 'print(g.upper(\"ok\"))'"))
check(out == "OK\n", "-l g=mod", out)
out = run(shardlab("-l shardlab -e 'print(shardlab == sl, require(\"shardlab\") == sl)'"))
check(out == "true\ttrue\n", "-l shardlab / require", out)
out, rc = run(shardlab("-l no_such_module_xyz"))
check(rc == 1 and out:find("module 'no_such_module_xyz' not found", 1, true), "-l missing module", out)

-- Script arguments in arg (negative indices for interpreter and options) and in `...`.
local script = write("args.lua", [[
print(arg[0], arg[1], arg[2], #arg, select("#", ...), ...)
print(arg[-1], arg[-2] ~= nil)
]])
out, rc = run(shardlab(string.format("%q a 'b c'", script)))
local l1, l2 = out:match("^(.-)\n(.-)\n$")
check(rc == 0 and l1 == script .. "\ta\tb c\t2\t2\ta\tb c", "arg and ... for a script", out)
check(l2 == scratch .. "/cli.db\ttrue", "negative arg indices hold the options", out)
out = run(shardlab(string.format("-- %q x", script)))
check(out:find("\tx\t", 1, true), "-- then script", out)

-- stdin: `-`, and no script with stdin not a tty.
out, rc = run(sh(string.format("echo 'print(40 + 2)' | %q", bin)))
check(out == "42\n" and rc == 0, "stdin runs when not a tty", out)
out = run(sh(string.format("echo 'print(...)' | %q - p q", bin)))
check(out == "p\tq\n", "- runs stdin with args", out)
out, rc = run(sh(string.format("printf '1 + 1\\nerror(\"x\")\\nprint(\"alive\")\\n' | %q -i", bin)))
check(rc == 0 and out:find("sl> 2\n", 1, true) and out:find("alive", 1, true), "-i REPL on a pipe", out)

-- LUA_INIT_5_4 / LUA_INIT, and -E ignoring them.
out = run(sh(string.format("LUA_INIT='x = 5' %q -e 'print(x)'", bin)))
check(out == "5\n", "LUA_INIT", out)
out = run(sh(string.format("LUA_INIT='x = 5' LUA_INIT_5_4='x = 6' %q -e 'print(x)'", bin)))
check(out == "6\n", "LUA_INIT_5_4 wins", out)
local init = write("init.lua", "y = 7\n")
out = run(sh(string.format("LUA_INIT=@%s %q -e 'print(y)'", init, bin)))
check(out == "7\n", "LUA_INIT=@file", out)
out = run(sh(string.format("LUA_INIT='x = 5' %q -E -e 'print(x)'", bin)))
check(out == "nil\n", "-E ignores LUA_INIT", out)

-- Exit status and messages for failing scripts.
local bad = write("runtime_error.lua", "local t = nil\nprint(t.x)\n")
out, rc = run(shardlab(string.format("%q", bad)))
check(rc == 1 and out:find("shardlab: " .. bad .. ":2: attempt to index a nil value", 1, true) and
      out:find("stack traceback:", 1, true), "runtime error: message, traceback, exit 1", out)
local syntax = write("syntax_error.lua", "x = = 1\n")
out, rc = run(shardlab(string.format("%q", syntax)))
check(rc == 1 and out:find(syntax .. ":1: unexpected symbol near '='", 1, true), "syntax error", out)
out, rc = run(shardlab("no_such_script.lua"))
check(rc == 1 and out:find("cannot open no_such_script.lua", 1, true), "missing script", out)
out, rc = run(shardlab("-e 'os.exit(3)'"))
check(rc == 3, "os.exit code passes through", out)
out, rc = run(shardlab("-e 'sl.mesh{data=\"two\"}'"))
check(rc == 1 and out:find("sl.mesh: argument 'data' expected integer, got string", 1, true),
      "wrong argument type from -e", out)
out, rc = run(shardlab("-e 'sl.sql(\"SELEC 1\")'"))
check(rc == 1 and out:find('store: near "SELEC": syntax error (in "SELEC 1")', 1, true), "bad SQL", out)
out, rc = run(shardlab("-e 'error({})'"))
check(rc == 1 and out:find("(error object is a table value)", 1, true), "non-string error", out)

-- The store is opened lazily: no file unless sl.sql runs.
os.remove(scratch .. "/lazy.db")
run(sh(string.format("%q --db lazy.db -e 'print(1)'", bin)))
check(io.open(scratch .. "/lazy.db") == nil, "print(1) must not create the store", "")
out = run(sh(string.format("SHARDLAB_DB=lazy.db %q -e 'print(#sl.sql(\"SELECT * FROM runs\"), sl.db_path())'", bin)))
check(out == "0\tlazy.db\n", "SHARDLAB_DB names the store", out)
check(io.open(scratch .. "/lazy.db") ~= nil, "sl.sql creates the store", "")

-- Bad store paths give one clear message.
out, rc = run(sh(string.format("%q --db no/such/dir/x.db -e 'sl.sql(\"SELECT 1\")'", bin)))
check(rc == 1 and out:find("store: cannot open 'no/such/dir/x.db': directory 'no/such/dir' does not exist",
                           1, true), "missing directory", out)
write("corrupt.db", string.rep("garbage!", 1024))
out, rc = run(sh(string.format("%q --db corrupt.db -e 'sl.sql(\"SELECT 1\")'", bin)))
check(rc == 1 and out:find("store: cannot open 'corrupt.db': file is not a database", 1, true),
      "corrupt file", out)
print("cli_test: ok")
