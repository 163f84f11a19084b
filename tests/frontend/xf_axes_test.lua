-- tests/frontend/xf_axes_test.lua: sl.auto_axes / sl.explicit_axes, the explicit-sharding
-- tutorial's examples ("Working around unimplemented sharding rules using auto_sharding",
-- "Using a mixture of sharding modes"), and their errors.
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")

local m = sl.make_mesh({4, 2}, {"X", "Y"})
sl.set_mesh(m)
-- f32[4@X, 4] + f32[4, 4@X] is an error in explicit mode (X would shard both dims) ...
local some_x = sl.reshard(sl.arange(16.0):reshape(4, 4), sl.P("X", nil))
local some_y = sl.reshard(sl.arange(16.0):reshape(4, 4), sl.P(nil, "X"))
h.expect_error(function() return some_x + some_y end,
               "add operation with inputs: f32[4@X,4], f32[4,4@X] produces an illegally sharded "
               .. "result: f32[4@X,4@X]")
-- ... and fine with auto_axes: the compiler chooses (here an all_to_all of y) and the result
-- is placed by out_sharding.
local add = sl.auto_axes(function(x, y) return x + y end,
                         {out_sharding = sl.P("X", nil), name = "add_auto"})
local r = add(some_x, some_y)
assert(tostring(sl.typeof(r)) == "f32[4@X,4]", sl.typeof(r))
local xt, rt = some_x:totable(), r:totable()
for i = 1, 4 do for j = 1, 4 do assert(rt[i][j] == 2 * xt[i][j]) end end
assert(r.mesh == m, "the result is back on the caller's (explicit) mesh")
local c = add:lower(some_x, some_y):compile()
assert(c:text():find("all_to_all", 1, true) or c:text():find("all_gather", 1, true), c:text())
assert(add:cache_info().compiles == 1)
add(some_x, some_y)
assert(add:cache_info().compiles == 1, "cached like sl.jit")
-- out_sharding at the call (JAX's `add2(x, y, out_sharding=P(...))`): the trailing table; each
-- spec is its own cached variant, and the function's own cache is untouched.
local add_kw = sl.auto_axes(function(x, y) return x + y end)
local r1 = add_kw(some_x, some_y, {out_sharding = sl.P("X", nil)})
local r2 = add_kw(some_x, some_y, {out_sharding = sl.P(nil, "X")})
assert(tostring(sl.typeof(r1)) == "f32[4@X,4]" and tostring(sl.typeof(r2)) == "f32[4,4@X]",
       tostring(sl.typeof(r1)) .. " " .. tostring(sl.typeof(r2)))
for i = 1, 4 do for j = 1, 4 do assert(r1:totable()[i][j] == rt[i][j] and r2:totable()[i][j] == rt[i][j]) end end
add_kw(some_x, some_y, {out_sharding = sl.P("X", nil)})
h.expect_error(function() add(some_x, some_y, {out_sharding = sl.P(nil, "X")}) end,
               "out_sharding is given at the call and already at sl.auto_axes(f, {out_sharding = ...})")
-- A misspelled keyword holding a spec is an error, not a dict argument (regression: it was read
-- as a third argument).
h.expect_error(function() add_kw(some_x, some_y, {out_shardings = sl.P("X", nil)}) end,
               "unknown keyword 'out_shardings' in the call's last table (sl.auto_axes takes out_sharding at the call)")
h.expect_error(function() add_kw(some_x, some_y, {out_shardings = {sl.P("X", nil), sl.P()}}) end,
               "unknown keyword 'out_shardings'")
h.expect_error(function() add_kw(some_x, some_y, {out_sharding = sl.P("X", nil), donate = 1}) end,
               "unknown keyword 'donate'")
-- Inside a jit whose axes are all Auto already, auto_axes calls f as it is (JAX's: nothing to
-- switch, out_sharding not applied).
local am = sl.make_mesh({4, 2}, {"X", "Y"}, {axis_types = {sl.AxisType.Auto, sl.AxisType.Auto}})
local ax = sl.device_put(sl.arange(16.0):reshape(4, 4), sl.NamedSharding(am, sl.P("X", nil)))
local same = sl.jit(function(t) return add_kw(t, t, {out_sharding = sl.P(nil, "X")}) end)(ax)
for i = 1, 4 do for j = 1, 4 do assert(same:totable()[i][j] == 2 * ax:totable()[i][j]) end end
local scale = sl.explicit_axes(function(x) return x * 2 end)
assert(tostring(sl.typeof(scale(some_x, {in_sharding = sl.P(nil, "X")}))) == "f32[4,4@X]")
-- The result can feed explicit-mode ops again.
assert(tostring(sl.typeof(r * 2)) == "f32[4@X,4]")

-- explicit_axes on an Auto mesh: inside, shardings are part of the types.
local am = sl.make_mesh({2, 4}, {"X", "Y"}, {axis_types = "Auto"})
sl.use_mesh(am, function()
  local x = sl.device_put(sl.arange(16.0):reshape(4, 4), sl.P("X", "Y"))
  local seen
  local g = sl.explicit_axes(function(y)
    local z = y * 2
    seen = tostring(sl.typeof(z))
    return z
  end, {in_sharding = sl.P("X", "Y")})
  local z = g(x)
  assert(seen == "f32[4@X,4@Y]", seen)
  assert(z.mesh == am)
  local zt = z:totable()
  assert(zt[4][4] == 30 and zt[1][2] == 2)
  -- Explicit mode's errors apply inside.
  local bad = sl.explicit_axes(function(a, b) return a + b end)
  h.expect_error(function() bad(sl.device_put(x, sl.P("X", nil)), sl.device_put(x, sl.P(nil, "X"))) end,
                 "add operation with inputs: f32[4@X,4], f32[4,4@X] produces an illegally "
                 .. "sharded result: f32[4@X,4@X]")
  -- Inside a jit of the Auto mesh: part of the jit's program, Explicit inside (its errors too).
  seen = nil
  local mesh_inside
  local zj = sl.jit(function(t)
    mesh_inside = tostring(sl.get_abstract_mesh())
    return g(t) + 1
  end)(x)
  assert(seen == "f32[4@X,4@Y]" and mesh_inside:find("(Auto, Auto)", 1, true), seen)
  for i = 1, 4 do for j = 1, 4 do assert(zj:totable()[i][j] == zt[i][j] + 1) end end
  h.expect_error(function()
    sl.jit(function(a, b) return bad(sl.reshard(a, sl.P("X", nil)), sl.reshard(b, sl.P(nil, "X"))) end)(x, x)
  end, "add operation with inputs: f32[4@X,4], f32[4,4@X] produces an illegally sharded result: f32[4@X,4@X]")
end)

-- auto_axes over some axes (JAX's mixed abstract mesh): Auto over X, still Explicit over Y.
local seen_mesh, seen_type
local over_x = sl.auto_axes(function(t)
  seen_mesh, seen_type = tostring(sl.get_abstract_mesh()), tostring(sl.typeof(t))
  return t * 2
end, {axes = "X", out_sharding = sl.P("X", "Y")})
local xy = sl.reshard(sl.arange(16.0):reshape(4, 4), sl.P("X", "Y"))
local r_x = over_x(xy)
assert(seen_mesh == "AbstractMesh('X': 4, 'Y': 2, axis_types=(Auto, Explicit))", seen_mesh)
assert(seen_type == "f32[4,4@Y]", seen_type)
assert(tostring(sl.typeof(r_x)) == "f32[4@X,4@Y]" and r_x.mesh == m)
assert(sl.auto_axes(function(t) return t * 1 end, {axes = {"Y", "X"}, out_sharding = sl.P()})(some_x))
-- ... and inside a jit: X's conflicts are the partitioner's to resolve, Y's still errors.
local r_j = sl.jit(function(a, b) return add(a, b) end)(some_x, some_y)
assert(tostring(sl.typeof(r_j)) == "f32[4@X,4]")
for i = 1, 4 do for j = 1, 4 do assert(r_j:totable()[i][j] == rt[i][j]) end end
local add_x = sl.auto_axes(function(a, b) return a + b end, {axes = "X", out_sharding = sl.P("X", nil)})
local r_jx = sl.jit(function(a, b) return add_x(a, b) end)(some_x, some_y)
for i = 1, 4 do for j = 1, 4 do assert(r_jx:totable()[i][j] == rt[i][j]) end end
local some_yy = sl.reshard(sl.arange(16.0):reshape(4, 4), sl.P("Y", nil))
local some_yt = sl.reshard(sl.arange(16.0):reshape(4, 4), sl.P(nil, "Y"))
h.expect_error(function() sl.jit(function(a, b) return add_x(a, b) end)(some_yy, some_yt) end,
               "add operation with inputs: f32[4@Y,4], f32[4,4@Y] produces an illegally sharded result: f32[4@Y,4@Y]")
h.expect_error(function() sl.auto_axes(function(t) return t end, {axes = "Z", out_sharding = sl.P()})(some_x) end,
               "auto_axes: axes names 'Z', which is not an axis of Mesh('X': 4, 'Y': 2")

-- A mixed mesh: Explicit over Y only. The type names Y; X's layout is the partitioner's.
local mixed = sl.make_mesh({4, 2}, {"X", "Y"}, {axis_types = {"Auto", "Explicit"}})
local mx = sl.device_put(sl.arange(32.0):reshape(8, 4), sl.NamedSharding(mixed, sl.P("X", "Y")))
assert(tostring(sl.typeof(mx)) == "f32[8,4@Y]" and tostring(mx.sharding.spec) == "P('X', 'Y')")
local p1 = sl.device_put(sl.arange(16.0):reshape(4, 4), sl.NamedSharding(mixed, sl.P("X", nil)))
local p2 = sl.device_put(sl.arange(16.0):reshape(4, 4), sl.NamedSharding(mixed, sl.P(nil, "X")))
local p12 = p1 + p2  -- X is Auto: no type error
for i = 1, 4 do for j = 1, 4 do assert(p12:totable()[i][j] == 2 * ((i - 1) * 4 + j - 1)) end end
local q1 = sl.device_put(p1, sl.NamedSharding(mixed, sl.P("Y", nil)))
local q2 = sl.device_put(p1, sl.NamedSharding(mixed, sl.P(nil, "Y")))
h.expect_error(function() return q1 + q2 end,
               "add operation with inputs: f32[4@Y,4], f32[4,4@Y] produces an illegally sharded result: f32[4@Y,4@Y]")
-- with_sharding_constraint on a mesh not all Explicit names Auto axes only (JAX's error).
h.expect_error(function() sl.jit(function(t) return sl.with_sharding_constraint(t, sl.P("Y", nil)) end)(p1) end,
               "The spec of NamedSharding passed to with_sharding_constraint can only refer to Auto axes")
local wsc = sl.jit(function(t) return sl.with_sharding_constraint(t, sl.P(nil, "X")) end)(p1)
assert(tostring(wsc.sharding.spec) == "P(None, 'X')", tostring(wsc.sharding.spec))
h.expect_error(function() sl.auto_axes(function(t) return t end, {out_shardings = sl.P()}) end,
               "did you mean 'out_sharding'")
h.expect_error(function() sl.auto_axes(function(t) return t end, {out_sharding = sl.P("Z")})(some_x) end,
               "'Z'")

-- use_abstract_mesh inside a jit: another mesh of the same devices, whose axes are runs of the
-- jit mesh's ((X: 4, Y: 2) seen as (A: 8), or with other types).
local am8 = sl.AbstractMesh({8}, {"A"}, {"Explicit"})
assert(tostring(am8) == "AbstractMesh('A': 8, axis_types=(Explicit,))", tostring(am8))
local seen_am, seen_y
local x84 = sl.reshard(sl.arange(32.0):reshape(8, 4), sl.P("X", "Y"))
local viewed = sl.jit(function(t)
  local _ <close> = sl.use_abstract_mesh(am8)
  seen_am = tostring(sl.get_abstract_mesh())
  local y = sl.reshard(t, sl.P("A", nil))
  seen_y = tostring(sl.typeof(y))
  return y + 1
end)(x84)
assert(seen_am == "AbstractMesh('A': 8, axis_types=(Explicit,))", seen_am)
assert(seen_y == "f32[8@A,4]", seen_y)
assert(tostring(viewed.mesh) == "Mesh('A': 8, axis_types=(Explicit,))", tostring(viewed.mesh))
for i = 1, 8 do for j = 1, 4 do assert(viewed:totable()[i][j] == (i - 1) * 4 + j) end end
assert(tostring(sl.get_abstract_mesh()) == "AbstractMesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))")
-- A view an auto_axes body leaves open (no <close>) ends with the body's region (regression: the
-- region's end popped the view's types and left auto_axes' switch open for the rest of the jit);
-- closing a scope twice does nothing.
local after_region, after_twice
sl.jit(function(t)
  sl.auto_axes(function(u) local _ = sl.use_abstract_mesh(am8); return u end,
               {axes = "X", out_sharding = sl.P("X", "Y")})(t)
  after_region = tostring(sl.get_abstract_mesh())
  local s = sl.use_abstract_mesh(am8)
  getmetatable(s).__close(s)
  getmetatable(s).__close(s)
  after_twice = tostring(sl.get_abstract_mesh())
  return t
end)(x84)
assert(after_region == "AbstractMesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))", after_region)
assert(after_twice == after_region, after_twice)
h.expect_error(function()
  sl.jit(function(t) local _ <close> = sl.use_abstract_mesh(sl.AbstractMesh({4}, {"A"})); return t end)(xy)
end, "has 4 devices, the jit's mesh Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)) has 8")
h.expect_error(function()
  sl.jit(function(t) local _ <close> = sl.use_abstract_mesh(sl.AbstractMesh({2, 4}, {"P", "Q"})); return t end)(xy)
end, "are not runs of consecutive axes of the jit's mesh")
h.expect_error(function() sl.use_abstract_mesh(am8) end, "sl.use_abstract_mesh: only inside sl.jit")
-- The same axes with other types: the abstract mesh switches types only.
local auto_view = sl.AbstractMesh({4, 2}, {"X", "Y"}, {"Auto", "Explicit"})
local typed
local sum_v = sl.jit(function(a, b)
  local _ <close> = sl.use_abstract_mesh(auto_view)
  local s = a + b  -- X is Auto here: no type error
  typed = tostring(sl.typeof(s))
  return s
end)(some_x, some_y)
assert(typed == "f32[4,4]", typed)
assert(tostring(sum_v.mesh) == "Mesh('X': 4, 'Y': 2, axis_types=(Auto, Explicit))")
for i = 1, 4 do for j = 1, 4 do assert(sum_v:totable()[i][j] == rt[i][j]) end end
print("xf_axes_test ok")
