-- tests/shell/shell_api_test.lua: pretty printing, docstrings for every binding, sl.help.
local pretty = sl.pretty
assert(pretty(1) == "1" and pretty(1.5) == "1.5" and pretty("s") == "s" and pretty(nil) == "nil")
assert(pretty({}) == "{}")
assert(pretty({3, 2, 1}) == "{3, 2, 1}", pretty({3, 2, 1}))
assert(pretty({b = 1, a = "x", 10}) == '{10, a = "x", b = 1}', pretty({b = 1, a = "x", 10}))
assert(pretty({["not id"] = true, [2.5] = false}) == '{[2.5] = false, ["not id"] = true}',
       pretty({["not id"] = true, [2.5] = false}))
assert(pretty({a = {b = {c = {}}}}, {depth = 2}) == "{a = {b = {...}}}", pretty({a = {b = {c = {}}}}, {depth = 2}))
local cyc = {}
cyc.self = cyc
assert(pretty(cyc) == "{self = <cycle>}", pretty(cyc))
assert(pretty({m = sl.P("data")}) == "{m = P('data')}", pretty({m = sl.P("data")}))
local obj = setmetatable({}, {__tostring = function() return "Obj()" end})
assert(pretty({obj}) == "{Obj()}")
local broken = setmetatable({}, {__tostring = function() error("nope") end})
assert(pretty(broken):find("<__tostring error:", 1, true))
local long = {}
for i = 1, 30 do long["key" .. i] = i end
assert(pretty(long):find("^{\n  key1 = 1,\n  key10 = 10,\n"), pretty(long))
assert(pretty({1}, {color = true}) == "{\27[36m1\27[0m}")

-- Every binding has a docstring, reachable by value and by name.
local function check_docs(t, prefix)
  for k, v in pairs(t) do
    if type(v) == "function" then
      local doc = sl.help(v)
      assert(type(doc) == "string" and #doc > 10, "no docstring for " .. prefix .. k)
      assert(sl.doc[prefix .. k] == doc, "sl.doc['" .. prefix .. k .. "'] differs")
    end
  end
end
check_docs(sl, "sl.")
assert(sl.help("sl.mesh"):find("^sl.mesh{data=2"))
assert(sl.help(sl.mesh{}):find("^Mesh\n"), "help of a value is its type's doc")
assert(sl.help(sl.mesh{}):find("m:devices() -> integer", 1, true))
assert(sl.help(sl.P()):find("p:rank()", 1, true))
assert(sl.help(sl):find("sl.sql(query, ...)", 1, true))
assert(not pcall(sl.help, 42))
assert(sl.version:find("^shardlab 0.1"))
print("shell_api_test: ok")
