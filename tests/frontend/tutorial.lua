-- tests/frontend/tutorial.lua: what the tutorial tests (tutorial_*_test.lua) share: the list of
-- cells that cannot run as written, and the checks of a cell against what the tutorial printed.
-- Load it relative to the running script:
--   local t = dofile(arg[0]:match("^(.*)/") .. "/tutorial.lua")
local M = {missing = {}}

-- Lists a cell (or part of one) that cannot run, with what shardlab lacks.
function M.cannot(cell, why)
  M.missing[#M.missing + 1] = string.format("cell %d: %s", cell, why)
end

-- The value prints as the tutorial printed it.
function M.expect(got, want, what)
  assert(tostring(got) == want, string.format("%s: got %q, the tutorial %q", what, tostring(got),
                                              want))
end

-- A part listed as missing still fails, with an error containing `want` (so the list goes stale
-- loudly when it starts to run).
function M.fails(f, want, what)
  local ok, e = pcall(f)
  assert(not ok, what .. ": ran, but is listed as missing")
  assert(tostring(e):find(want, 1, true), what .. ": " .. tostring(e))
end

-- Leaves the global mesh unset and prints the cells that do not run under `title`.
function M.report(title)
  sl.set_mesh(nil)
  print(title)
  for _, m in ipairs(M.missing) do print("  " .. m) end
end

return M
