-- tests/frontend/fuzz_test.lua: a few thousand random calls of the front-end's API (sl.numpy,
-- sl.nn, sl.lax, sl.random, the array constructors, sl.jit / grad / shard_map and the Array,
-- Jitted, Lowered and PRNGKey methods and operators) with random arguments: arrays of other
-- shapes, dtypes and meshes, leaked tracers, finalised and forged userdata, NaN and huge
-- numbers. Each call returns or raises a Lua error with a string message; the process survives.
math.randomseed(1313)
local calls, errors = 0, 0

local m8 = sl.make_mesh({4, 2}, {"X", "Y"})
local ma = sl.make_mesh({2}, {"a"}, {axis_types = "Auto"})
local leaked
sl.jit(function(t) leaked = t; return t end)(sl.ones({4}))
local dead = sl.ones({2})
getmetatable(dead)  -- protected: the name
local forged = debug.setmetatable(io.tmpfile(), debug.getmetatable(sl.ones({1})))

local function values()
  return {
    nil, true, 0, 1, -1, 2, 3, 7, 2 ^ 31, -2 ^ 63, 1e300, 0 / 0, 1 / 0, 0.5, -0.0,
    "", "X", "Y", "a", "float32", "int32", "bfloat16", "gelu", string.rep("x", 1000),
    {}, {1}, {2, 2}, {8, 4}, {{1, 2}, {3, 4}}, {-1}, {0}, {1, "a"}, {axis = 0}, {axis = 99},
    {keepdims = true}, {out_sharding = sl.P("X")}, {is_causal = true}, {tiled = true},
    {{0, 1}, {1, 0}}, {"X", "Y"}, {dtype = "int32"}, {sharding = sl.P("X", "Y")},
    {mesh = m8}, {in_specs = {sl.P("X")}, out_specs = sl.P("X")},
    sl.P(), sl.P("X"), sl.P("X", "Y"), sl.P("Y", "X"), sl.P("a"), sl.P("Z"), sl.P(nil, nil, "X"),
    m8, ma, sl.get_mesh(), sl.random.key(1),
    sl.ones({8, 4}), sl.ones({8, 4}, {sharding = sl.P("X", "Y"), mesh = m8}),
    sl.ones({4}, {mesh = ma, sharding = sl.P("a")}), sl.arange(6), sl.full({}, 2),
    sl.ones({2, 3, 4}), sl.ones({1, 4, 2, 2}), sl.ones({3}, {dtype = "bfloat16"}),
    sl.array({{1, 2}, {3, 4}}), sl.zeros({0}), leaked, forged,
    sl.jit(function(t) return t * 2 end), sl.grad(function(t) return sl.np.sum(t) end),
    print, function() error("cb") end, function() return 1 end, coroutine.create(print),
  }
end

local targets = {}
local function add_table(prefix, t)
  for name, f in pairs(t) do
    if type(f) == "function" then targets[#targets + 1] = {prefix .. name, f} end
  end
end
add_table("sl.np.", sl.np)
add_table("sl.nn.", sl.nn)
add_table("sl.lax.", sl.lax)
add_table("sl.random.", sl.random)
for _, name in ipairs({"array", "zeros", "ones", "full", "arange", "device_put", "make_mesh",
                       "jit", "grad", "value_and_grad", "shard_map", "reshard",
                       "with_sharding_constraint", "typeof", "visualize", "use_mesh"}) do
  targets[#targets + 1] = {"sl." .. name, sl[name]}
end
-- Methods and operators of every front-end type, called through their values.
local probes = {sl.ones({8, 4}, {sharding = sl.P("X", "Y"), mesh = m8}), leaked,
                sl.jit(function(t) return t + 1 end), sl.jit(function(t) return t end):lower(sl.ones({2})),
                sl.random.key(3)}
for _, v in ipairs(probes) do
  local mt = debug.getmetatable(v)
  for k, f in pairs(mt) do
    if type(f) == "function" and k ~= "__gc" then targets[#targets + 1] = {tostring(k), f} end
  end
  for k, f in pairs(mt.__methods or (type(mt.__index) == "table" and mt.__index) or {}) do
    if type(f) == "function" then targets[#targets + 1] = {k, f, v} end
  end
end
table.sort(targets, function(x, y) return x[1] < y[1] end)

local vals = values()
local nvals = 70
for round = 1, 40 do
  for _, t in ipairs(targets) do
    local args = {}
    local n = math.random(0, 4)
    local start = 1
    if t[3] ~= nil then args[1] = t[3]; start = 2; n = n + 1 end
    for i = start, n do args[i] = vals[math.random(1, nvals)] end
    local ok, err = pcall(t[2], table.unpack(args, 1, n))
    calls = calls + 1
    if not ok then
      errors = errors + 1
      assert(type(err) == "string", t[1] .. " raised a non-string error: " .. tostring(err))
    end
  end
  if round % 10 == 0 then collectgarbage() end
end
sl.set_mesh(nil)
-- Finalised values: every method errors cleanly.
local gone = sl.ones({2})
local gc = debug.getmetatable(gone).__gc
gc(gone)
assert(not pcall(function() return gone + 1 end))
assert(not pcall(gone.totable, gone))
print(string.format("fuzz_test ok: %d calls, %d errors, the shell survived", calls, errors))
