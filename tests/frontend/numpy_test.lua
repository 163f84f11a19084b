-- tests/frontend/numpy_test.lua: sl.numpy ops against plain Lua, sharded equal to one device
-- (random small programs on meshes of 1 to 8 devices, auto and explicit), the eager cache,
-- explicit-mode errors with JAX's texts, and bad input.
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")
local np = sl.numpy

local function close(a, b, tol)
  if type(a) == "table" then
    assert(type(b) == "table" and #a == #b, "shapes differ")
    for i = 1, #a do close(a[i], b[i], tol) end
    return
  end
  tol = tol or 1e-5
  assert(math.abs(a - b) <= tol * math.max(1, math.abs(b)), string.format("%.9g vs %.9g", a, b))
end

-- Values against hand-computed results (one device).
local a = sl.array({{1, 2, 3}, {4, 5, 6}})
local b = sl.array({{10, 20, 30}, {40, 50, 60}})
close((a + b):totable(), {{11, 22, 33}, {44, 55, 66}})
close((b - a):totable(), {{9, 18, 27}, {36, 45, 54}})
close((a * b):totable(), {{10, 40, 90}, {160, 250, 360}})
close((a * 2):totable(), {{2, 4, 6}, {8, 10, 12}})
close((2 * a):totable(), {{2, 4, 6}, {8, 10, 12}})
close((a / 4):totable(), {{0.25, 0.5, 0.75}, {1, 1.25, 1.5}})
close((-a):totable(), {{-1, -2, -3}, {-4, -5, -6}})
close((a + 1):totable(), {{2, 3, 4}, {5, 6, 7}})
close((1 - a):totable(), {{0, -1, -2}, {-3, -4, -5}})
close((a + sl.array({100, 200, 300})):totable(), {{101, 202, 303}, {104, 205, 306}})  -- broadcast
close((a * sl.array({{2}, {3}})):totable(), {{2, 4, 6}, {12, 15, 18}})
close(np.sum(a):item(), 21)
close(np.sum(a, 0):totable(), {5, 7, 9})
close(np.sum(a, 1):totable(), {6, 15})
close(np.sum(a, -1):totable(), {6, 15})
close(np.sum(a, {axis = 1, keepdims = true}):totable(), {{6}, {15}})
close(np.mean(a):item(), 3.5)
close(np.mean(a, 0):totable(), {2.5, 3.5, 4.5})
local c3 = sl.arange(24.0):reshape(2, 3, 4)
close(np.sum(c3, 1):totable(), {{12, 15, 18, 21}, {48, 51, 54, 57}})  -- a middle axis
close(np.matmul(a, sl.array({{1, 0}, {0, 1}, {1, 1}})):totable(), {{4, 5}, {10, 11}})
close(np.matmul(a, sl.array({1, 1, 1})):totable(), {6, 15})
close(np.dot(sl.array({1, 2, 3}), sl.array({4, 5, 6})):item(), 32)
close(np.reshape(a, {3, -1}):totable(), {{1, 2}, {3, 4}, {5, 6}})
close(np.concatenate({a, b}, 1):totable(), {{1, 2, 3, 10, 20, 30}, {4, 5, 6, 40, 50, 60}})
close(sl.lax.slice_in_dim(a, 1, 3, 1):totable(), {{2, 3}, {5, 6}})
close(sl.lax.slice_in_dim(a, -1, 2):totable(), {{4, 5, 6}})
assert(np.astype(a, "bfloat16").dtype == "bfloat16")
close(np.astype(np.astype(a, "bfloat16"), "float32"):totable(), a:totable())
local g = sl.nn.gelu(sl.array({-1, 0, 1}))
for i, v in ipairs({-1, 0, 1}) do
  local want = 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3)))
  close(g:totable()[i], want)
end

-- The unary ops of the table (exp, log, tanh, reciprocal) and what is built from them.
local u = sl.array({0.5, 1, 2})
for i, v in ipairs({0.5, 1, 2}) do
  close(np.exp(u):totable()[i], math.exp(v))
  close(np.log(u):totable()[i], math.log(v))
  close(np.tanh(u):totable()[i], math.tanh(v))
  close(np.reciprocal(u):totable()[i], 1 / v)
  close((u / sl.array({4, 4, 4})):totable()[i], v / 4)
  close((1 / u):totable()[i], 1 / v)
  close(sl.nn.sigmoid(u):totable()[i], 1 / (1 + math.exp(-v)))
  close(sl.nn.silu(u):totable()[i], v / (1 + math.exp(-v)))
end
close((a / sl.array({{1}, {2}})):totable(), {{1, 2, 3}, {2, 2.5, 3}})

-- Sharded equals one device: random small programs, random meshes and valid shardings.
local meshes = {
  {{1}, {"X"}}, {{2}, {"X"}}, {{4}, {"X"}}, {{2, 2}, {"X", "Y"}}, {{4, 2}, {"X", "Y"}},
  {{2, 4}, {"X", "Y"}}, {{8}, {"X"}},
}
math.randomseed(12345)  -- fixed seed: the same programs every run
local function rand(n) return math.random(0, n - 1) end
local function random_values(r, c)
  local t = {}
  for i = 1, r do t[i] = {} for j = 1, c do t[i][j] = (rand(2001) - 1000) / 250 end end
  return t
end
local function divides(n, m, axes)
  local p = 1
  for _, ax in ipairs(axes) do p = p * m:size(ax) end
  return n % p == 0
end
local function random_spec(m, r, c)  -- a valid spec for (r, c) on m
  local names = m:axis_names()
  local choices = {{}, {names[1]}}
  if #names > 1 then table.insert(choices, {names[2]}); table.insert(choices, {names[1], names[2]}) end
  for _ = 1, 10 do
    local d0, d1 = choices[rand(#choices) + 1], choices[rand(#choices) + 1]
    local used = {}
    local ok = divides(r, m, d0) and divides(c, m, d1)
    for _, ax in ipairs(d0) do used[ax] = true end
    for _, ax in ipairs(d1) do if used[ax] then ok = false end end
    if ok then return sl.P(#d0 > 0 and d0 or nil, #d1 > 0 and d1 or nil) end
  end
  return sl.P()
end
local programs = {
  function(x, y, w) return np.sum(x * y + x, 1) end,
  function(x, y, w) return np.matmul(x, w) * 0.5 end,
  function(x, y, w) return np.mean(x - y, 0) end,
  function(x, y, w) return np.sum(np.matmul(x + y, w)) end,
  function(x, y, w) return np.concatenate({x, y}, 0) + 1 end,
  function(x, y, w) return np.reshape(x, {-1}) * np.reshape(y, {-1}) end,
  function(x, y, w) return sl.nn.gelu(x) - y end,
  function(x, y, w) return np.tanh(x) / (np.exp(y) + 1) end,
  function(x, y, w) return np.mean(np.log(x * x + 1), 1) end,
  function(x, y, w) return np.sum(np.matmul(x, w), 0) end,
}
local checked = 0
for trial = 1, 120 do
  local mm = meshes[rand(#meshes) + 1]
  local explicit = rand(2) == 0
  local m = sl.make_mesh(mm[1], mm[2], {axis_types = explicit and "Explicit" or "Auto"})
  local r, c, k = ({4, 8})[rand(2) + 1], ({4, 8, 16})[rand(3) + 1], ({2, 4})[rand(2) + 1]
  local xv, yv, wv = random_values(r, c), random_values(r, c), random_values(c, k)
  local p = programs[rand(#programs) + 1]
  local want = p(sl.array(xv), sl.array(yv), sl.array(wv))  -- one device
  local xs = sl.array(xv, {sharding = random_spec(m, r, c), mesh = m})
  local ys = sl.array(yv, {sharding = random_spec(m, r, c), mesh = m})
  local ws = sl.array(wv, {sharding = random_spec(m, c, k), mesh = m})
  local ok, got = pcall(p, xs, ys, ws)
  if ok then
    close(got:totable(), want:totable(), 1e-4)
    checked = checked + 1
  else
    -- Explicit mode refuses some programs with JAX's errors; anything else is a bug.
    assert(explicit and (tostring(got):find("incompatible shardings for broadcasting", 1, true) or
                         tostring(got):find("illegally sharded result", 1, true) or
                         tostring(got):find("ambiguous", 1, true)), tostring(got))
  end
end
assert(checked >= 80, "only " .. checked .. " of 120 programs compared")

-- Explicit mode (make_mesh's default): JAX's errors, and the fixes JAX's tutorial shows.
local m = sl.make_mesh({4, 2}, {"X", "Y"})
sl.set_mesh(m)
local x = sl.ones({8, 4}, {sharding = sl.P("X", "Y")})
local xt = sl.ones({8, 4}, {sharding = sl.P("Y", "X")})
h.expect_error(function() return x + xt end,
               "add got incompatible shardings for broadcasting: ('X', 'Y'), ('Y', 'X').")
h.expect_error(function() return sl.with_sharding_constraint(x, sl.P("X", nil)) end,
               "`with_sharding_constraint` acts as an assert when all axes of mesh are of type " ..
               "`Explicit`. The array sharding: P('X', 'Y') did not match the sharding provided: " ..
               "P('X', None). Please use `jax.sharding.reshard`")
assert(tostring(sl.typeof(sl.reshard(x, sl.P("X", nil)))) == "f32[8@X,4]")
assert(tostring(sl.typeof(sl.with_sharding_constraint(x, sl.P("X", "Y")))) == "f32[8@X,4@Y]")
local lhs = sl.ones({8, 4}, {sharding = sl.P("X", "Y")})
local rhs = sl.ones({4, 8}, {sharding = sl.P("Y", "X")})
h.expect_error(function() return np.matmul(lhs, sl.ones({4, 8}, {sharding = sl.P("Y", nil)})) end,
               "ambiguous how the output should be sharded. Please specify the output sharding " ..
               "via the `out_sharding` parameter. Got lhs_contracting_spec=('Y',) and " ..
               "rhs_contracting_spec=('Y',)")
-- Free dims of both operands on X: JAX's dot_general rule gives a result naming X twice.
h.expect_error(function() return np.matmul(lhs, sl.ones({4, 8}, {sharding = sl.P(nil, "X")})) end,
               "dot_general operation with inputs: f32[8@X,4@Y], f32[4,8@X] produces an " ..
               "illegally sharded result: f32[8@X,8@X]")
-- A result naming X twice: JAX's DuplicateSpecError text, named after the lax primitive (jnp's
-- subtract is sub, divide div, equal eq with a bool result), eagerly and for a jit's arguments.
local xa = sl.device_put(sl.ones({8, 4}), sl.P("X", nil))
local xb = sl.device_put(sl.ones({8, 4}), sl.P(nil, "X"))
local illegal = " operation with inputs: f32[8@X,4], f32[8,4@X] produces an illegally sharded " ..
                "result: "
h.expect_error(function() return xa - xb end, "sub" .. illegal .. "f32[8@X,4@X]")
h.expect_error(function() return xa / xb end, "div" .. illegal .. "f32[8@X,4@X]")
h.expect_error(function() return np.equal(xa, xb) end, "eq" .. illegal .. "bool[8@X,4@X]")
h.expect_error(function() return np.maximum(xa, xb) end, "max" .. illegal .. "f32[8@X,4@X]")
h.expect_error(function() return sl.jit(function(a, b) return a * b end)(xa, xb) end,
               "mul" .. illegal .. "f32[8@X,4@X]")
-- One side's contracting dim sharded is no error (JAX's rule): the other side is gathered.
assert(tostring(sl.typeof(np.matmul(lhs, sl.ones({4, 8})))) == "f32[8@X,8]")
assert(tostring(sl.typeof(np.matmul(lhs, sl.ones({4, 8}, {sharding = sl.P(nil, "X")}),
                           {out_sharding = sl.P("X", nil)}))) == "f32[8@X,8]")
assert(tostring(sl.typeof(np.sum(x, 0))) == "f32[4@Y]" and tostring(sl.typeof(np.sum(x, 1))) == "f32[8@X]")
assert(tostring(sl.typeof(x * 3)) == "f32[8@X,4@Y]")

-- Bad input.
h.expect_error(function() return sl.ones({3, 4}) + sl.ones({5}) end,
               "add: Incompatible shapes for broadcasting: shapes=[(3, 4), (5,)]")
h.expect_error(function() return np.matmul(sl.ones({3, 4}), sl.ones({5, 2})) end,
               "got (4,) and (5,): matmul of (3, 4) and (5, 2)")
h.expect_error(function() return np.matmul(sl.ones({2, 3, 4}), sl.ones({2, 4, 5})) end,
               "batched right operand (2, 4, 5)")
h.expect_error(function() return np.reshape(x, {3, 5}) end,
               "cannot reshape array of shape (8, 4) (size 32) into shape (3, 5)")
h.expect_error(function() return np.sum(x, 2) end, "axis 2 is out of bounds for array of dimension 2")
h.expect_error(function() return np.divide(1, 2) end, "one operand at least")
-- Regression: a number broadcast against a size-0 dim read a freed shape (segfault).
h.expect_error(function() return 1 + sl.zeros({0}) end, "broadcast_to: () to (0,)")
h.expect_error(function() return x + "a" end, "expected Array or number")
assert(np.matmul(sl.arange(4), sl.arange(4)):item() == 14)  -- int32 (0 + 1 + 4 + 9)
h.expect_error(function() return np.matmul(sl.arange(4.0):astype("bfloat16"), sl.arange(4.0)) end,
               "matmul: the engine's kernel takes float32, got bf16[4]")
h.expect_error(function() return np.matmul(x, sl.ones({4, 2}, {mesh = sl.make_mesh({2}, {"Z"})})) end,
               "different meshes")
h.expect_error(function() return np.concatenate({x, sl.ones({8, 3})}, 0) end, "except along axis 0")
h.expect_error(function() return sl.reshard(x, sl.P("Q")) end, "names axis 'Q'")
h.expect_error(function() return sl.reshard(x, sl.P(nil, nil, "X")) end, "has 3 entries")

-- int32 arithmetic as jnp's: +, -, * and negation of int32 stay int32 (wrapping past 2^31),
-- a Lua integer next to int32 is int32 (JAX's weak types), a fraction or a float array promotes
-- to float32, and / is true division (float32); on a mesh as on one device.
local ia, ib = sl.arange(8), sl.arange(8) * 3
assert(tostring(sl.typeof(ia + ib)) == "i32[8]" and (ia + ib):totable()[8] == 28)
assert((ib - ia):totable()[8] == 14 and (ia * ib):totable()[8] == 147 and (-ia):totable()[8] == -7)
assert(tostring(sl.typeof(ia + 1)) == "i32[8]" and (ia + 1):totable()[1] == 1)
assert(tostring(sl.typeof(ia + 0.5)) == "f32[8]" and (ia + 0.5):totable()[1] == 0.5)
assert(tostring(sl.typeof(ia * 2.5)) == "f32[8]" and tostring(sl.typeof(ia / 1)) == "f32[8]")
assert(tostring(sl.typeof(ia + sl.ones({8}))) == "f32[8]" and (ia + sl.ones({8})):totable()[8] == 8)
local big = sl.full({2}, 2147483000, {dtype = "int32"})
assert((big + big):totable()[1] == -1296, "int32 addition wraps")
assert(sl.jit(function(a, b) return a * b + a end)(ia, ib):totable()[8] == 154)
local iX = sl.arange(8, {sharding = sl.P("X")})
assert(tostring(sl.typeof(iX + iX)) == "i32[8@X]" and (iX + iX):totable()[8] == 14)

-- int32 arrays move (reshard, identity jit, results returned twice).
local iy = sl.arange(8, {sharding = sl.P("X")})
assert(tostring(sl.typeof(sl.reshard(iy, sl.P()))) == "i32[8]" and sl.reshard(iy, sl.P()):totable()[8] == 7)
local i1, i2 = sl.jit(function(t) return t, t end)(iy)
assert(i1:totable()[3] == 2 and i2:totable()[3] == 2 and tostring(sl.typeof(i2)) == "i32[8@X]")
assert(sl.jit(function(t) return t end)(sl.full({}, 3, {dtype = "int32"})):item() == 3)

-- The eager cache: the same signature reuses its compilation (JAX's eager dispatch).
local t0 = os.clock()
for _ = 1, 200 do local _ = x * 3 end
assert(os.clock() - t0 < 5, "200 cached eager calls took " .. (os.clock() - t0) .. " s")
print("numpy_test ok (" .. checked .. " random programs sharded == one device)")
