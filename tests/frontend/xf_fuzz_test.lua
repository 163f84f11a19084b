-- tests/frontend/xf_fuzz_test.lua: the transformations with hostile arguments (fixed seed):
-- sl.vmap, sl.auto_axes, sl.explicit_axes, donate/static options and the Jitted values they
-- make, called with tables, cycles, deleted Arrays, tracers of returned jits, functions.
-- Every call either works or raises a string error; the shell survives.
math.randomseed(11)
local np = sl.numpy
local m8 = sl.make_mesh({4, 2}, {"X", "Y"})
sl.set_mesh(m8)
local leaked
sl.jit(function(t) leaked = t; return t end)(sl.ones({4}))
local deleted = sl.ones({8, 4})
sl.jit(function(t) return t * 2 end, {donate_argnums = 0})(deleted)
local cyc = {}
cyc.me = cyc
local vals = {
  nil, 0, 1, -1, 2, 1e300, 0 / 0, true, false, "", "X", "a", {}, {0}, {0, nil}, {nil, 0},
  {1, 2}, {in_axes = 0}, {out_axes = 1}, {in_axes = {0, 0}}, {axes = "X"}, {axes = {"X", "Y"}},
  {out_sharding = sl.P("X")}, {in_sharding = sl.P("Z")}, {donate_argnums = 0},
  {static_argnums = {0, 1}}, {has_aux = true}, {argnums = {0, 5}}, {w = sl.ones({4, 2})},
  {sl.ones({8, 4}), sl.ones({8, 4})}, {a = {b = {c = sl.ones({2})}}}, cyc, leaked, deleted,
  sl.P(), sl.P("X"), m8, sl.ones({8, 4}), sl.ones({8}), sl.arange(6.0), sl.full({}, 2),
  sl.ones({8, 4}, {sharding = sl.P("X", "Y")}), sl.ones({3}, {dtype = "int32"}),
  function(x) return x end, function(x, y) return x + y end, function() return {1} end,
  function(x) return np.sum(x), {x} end, function(x) error("cb") end, print,
}
local nvals = 52
local makers = {sl.vmap, sl.auto_axes, sl.explicit_axes, sl.jit, sl.grad, sl.value_and_grad}
local calls, errors = 0, 0
local function try(f, ...)
  local ok, err = pcall(f, ...)
  calls = calls + 1
  if not ok then
    errors = errors + 1
    assert(type(err) == "string", "a non-string error: " .. tostring(err))
  end
  return ok, err
end
for round = 1, 600 do
  local make = makers[math.random(1, #makers)]
  local fns = {function(x) return x * 2 end, function(x, y) return np.sum(x) end,
               function(p) return {p, p} end, vals[math.random(1, nvals)]}
  local ok, jitted = try(make, fns[math.random(1, #fns)], vals[math.random(1, nvals)],
                         vals[math.random(1, nvals)])
  if ok and jitted then
    for _ = 1, 3 do
      local args, n = {}, math.random(0, 3)
      for i = 1, n do args[i] = vals[math.random(1, nvals)] end
      try(jitted, table.unpack(args, 1, n))
      try(function() return jitted:lower(table.unpack(args, 1, n)) end)
    end
  end
  if round % 50 == 0 then collectgarbage() end
end
sl.set_mesh(nil)
assert(errors > 0 and errors < calls, errors .. " of " .. calls)
print(string.format("xf_fuzz_test ok: %d calls, %d errors, the shell survived", calls, errors))
