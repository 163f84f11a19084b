-- tests/shell/helpers.lua: assertions shared by the Lua test scripts. Load it relative to the
-- running script (the tests run from a scratch directory):
--   local h = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua")          (tests/shell)
--   local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")  (tests/notebook)
local M = {}

-- Calls fn and asserts that it raises an error whose text contains needle (plain find).
function M.expect_error(fn, needle)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error containing: " .. needle)
  assert(tostring(err):find(needle, 1, true),
         "error was: " .. tostring(err) .. "\nexpected: " .. needle)
end

return M
