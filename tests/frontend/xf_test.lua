-- tests/frontend/xf_test.lua: sl.jit / sl.grad transformations beyond one array in, one out
-- (docs/frontend.md "Transformations"): pytrees (tables of Arrays) as arguments and results,
-- grad over table arguments and has_aux, the exact seed, donate_argnums, static_argnums,
-- the jit cache's miss/hit rows, and bad input (each a clear error; the shell survives).
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

local m = sl.make_mesh({4, 2}, {"X", "Y"})
sl.set_mesh(m)
local a = sl.device_put(sl.arange(32.0):reshape(8, 4), sl.P("X", "Y"))

-- Results: several Lua returns, and tables (lists and records, nested), each leaf an Array
-- with the sharding the program gave it.
local f = sl.jit(function(x) return {s = np.sum(x), d = x * 2, l = {x + 1, x}}, x end)
local r, same = f(a)
close(r.s:item(), 496)
close(r.d:totable(), (a * 2):totable())
close(r.l[1]:totable(), (a + 1):totable())
close(r.l[2]:totable(), a:totable())
close(same:totable(), a:totable())
assert(#r.l == 2 and tostring(sl.typeof(r.d)) == "f32[8@X,4@Y]", sl.typeof(r.d))

-- Arguments: a table of Arrays is flattened into the program's arguments (named by key path,
-- integer keys first, then names sorted, as JAX sorts dict keys); its structure is part of
-- the signature.
local g = sl.jit(function(p, x) return np.matmul(x, p.w) + p.b end, {name = "xf_affine"})
local params = {w = sl.ones({4, 2}), b = sl.ones({2})}
close(g(params, sl.ones({3, 4})):totable(), {{5, 5}, {5, 5}, {5, 5}})
local text = g:lower(params, sl.ones({3, 4})):as_text()
assert(text:find("# a:f32[2] batch p.b", 1, true) and text:find("# b:f32[4,2] batch p.w", 1, true), text)
g({w = sl.ones({4, 2}), b = sl.ones({2}), c = sl.ones({2})}, sl.ones({3, 4}))
assert(g:cache_info().compiles == 2)
assert(g:cache_info().last_miss:find("at args[0] (p), now {b=f32[2], c=f32[2], w=f32[4,2]} " ..
                                      "and before {b=f32[2], w=f32[4,2]}", 1, true),
       g:cache_info().last_miss)

-- grad over a table argument gives a table of gradients of the same structure; argnums a
-- number or a list; value_and_grad and grad with has_aux return the aux tree untouched.
local function loss(p, x) return np.sum(np.matmul(x, p.w) + p.b) end
local x3 = sl.ones({3, 4})
local gp = sl.grad(loss)(params, x3)
close(gp.w:totable(), {{3, 3}, {3, 3}, {3, 3}, {3, 3}})
close(gp.b:totable(), {3, 3})
local gp2, gx = sl.grad(loss, {0, 1})(params, x3)
close(gp2.b:totable(), {3, 3})
close(gx:totable(), {{2, 2, 2, 2}, {2, 2, 2, 2}, {2, 2, 2, 2}})
local v, aux, gw = sl.value_and_grad(function(p, x)
  local y = np.matmul(x, p.w)
  return np.sum(y), {y = y}
end, {has_aux = true})(params, x3)
close(v:item(), 24)
close(aux.y:totable(), {{4, 4}, {4, 4}, {4, 4}})
close(gw.w:totable(), {{3, 3}, {3, 3}, {3, 3}, {3, 3}})
local dx, aux2 = sl.grad(function(t) return np.sum(t * t), t * 3 end, 0, {has_aux = true})(a)
close(dx:totable(), (a * 2):totable())
close(aux2:totable(), (a * 3):totable())
-- ... also inside jit (inlined into the same program), with a table argument.
local jg = sl.jit(function(p, x) return sl.grad(loss)(p, x) end)(params, x3)
close(jg.w:totable(), gp.w:totable())

-- The seed is exactly 1: d sum(x) / dx is 1.0 in every element, bitwise (the engine's
-- masked_mean_loss entry point divides by 1 + 1e-8, which is 1 in float32).
for _, row in ipairs(sl.grad(function(t) return np.sum(t) end)(a):totable()) do
  for _, e in ipairs(row) do assert(e == 1.0, e) end
end
local dl = sl.grad(function(t) return np.sum(t * 0.5) end)(a):totable()
assert(dl[3][2] == 0.5, dl[3][2])

-- donate_argnums: the donated input's buffers hold the result (no output buffer argument:
-- the program's output aliases the argument), and the donated Array is deleted, with JAX's
-- error on reuse. A donation matching no result (shape) leaves the input alive.
local upd = sl.jit(function(x, y) return x + y end, {donate_argnums = 0, name = "xf_upd"})
local plain = sl.jit(function(x, y) return x + y end)
local x = sl.ones({8, 4}, {sharding = sl.P("X", "Y")})
local kd = upd:lower(x, a):compile()
local kp = plain:lower(x, a):compile()
-- Per device: (8, 4) f32 on 4 x 2 devices is 16 bytes; with donation no third buffer.
assert(kd.memory.argument_bytes == 2 * 16 and kp.memory.argument_bytes == 3 * 16,
       kd.memory.argument_bytes .. " " .. kp.memory.argument_bytes)
assert(kd.memory.alias_bytes == 16, kd.memory.alias_bytes)
local y = upd(x, a)
close(y:totable(), (a + 1):totable())
h.expect_error(function() return x + 1 end, "Array has been deleted with shape=float32[8,4].")
h.expect_error(function() print(x) end, "Array has been deleted with shape=float32[8,4].")
h.expect_error(function() return upd(x, a) end, "Array has been deleted with shape=float32[8,4].")
h.expect_error(function() return x:totable() end, "Array has been deleted")
for _ = 1, 3 do y = upd(y, a) end  -- the functional-update loop: each call reuses the buffer
close(y:totable()[8][4], 32 + 3 * 31)
assert(upd:cache_info().compiles == 1)
-- An array passed twice, or held by a traced function, is copied: nobody sees it change.
local z = upd(a, a)
close(z:totable()[8][4], 62)
close(a:totable()[8][4], 31)
local shrink = sl.jit(function(t) return np.sum(t, 0) end, {donate_argnums = 0})
local keep = sl.ones({8, 4}, {sharding = sl.P("X", "Y")})
shrink(keep)
close(keep:totable()[1][1], 1)  -- (4,) cannot live in an (8, 4) buffer: not donated
-- Tables donate their leaves.
local step = sl.jit(function(p, d) return {w = p.w - d, b = p.b} end, {donate_argnums = 0})
local p0 = {w = sl.ones({4, 2}), b = sl.zeros({2})}
local p1 = step(p0, sl.ones({4, 2}))
close(p1.w:totable(), {{0, 0}, {0, 0}, {0, 0}, {0, 0}})
h.expect_error(function() return p0.w + 1 end, "Array has been deleted")

-- static_argnums: numbers, strings and booleans, part of the cache key (negative counts from
-- the end, as JAX's).
local s = sl.jit(function(t, mode, k)
  if mode == "scale" then return t * k end
  return t + k
end, {static_argnums = {1, -1}})
close(s(a, "scale", 3):totable(), (a * 3):totable())
close(s(a, "shift", 3):totable(), (a + 3):totable())
close(s(a, "scale", 3):totable(), (a * 3):totable())
assert(s:cache_info().compiles == 2)
assert(s:cache_info().last_miss:find("at args[1] (mode), now static string=shift and before " ..
                                     "static string=scale", 1, true), s:cache_info().last_miss)
local b = sl.jit(function(t, flag) if flag then return t * 2 end return t end, {static_argnums = 1})
close(b(a, true):totable(), (a * 2):totable())
close(b(a, false):totable(), a:totable())

-- The jit cache: called twice with one signature it compiles once (a miss row, then a hit
-- row); a different input sharding recompiles, and the explanation names the argument and
-- both shardings.
local before = #sl.sql("select 1 from compilations where fn_name = 'xf_cache'")
local c = sl.jit(function(t) return t * 2 end, {name = "xf_cache"})
c(a)
c(a)
c(sl.device_put(a, sl.P(nil, "Y")))
assert(c:cache_info().compiles == 2 and c:cache_info().entries == 2)
local rows = sl.sql("select outcome, reason_kind, reason_text from compilations " ..
                    "where fn_name = 'xf_cache' order by compile_id")
assert(#rows == before + 3, #rows)
local r1, r2, r3 = rows[#rows - 2], rows[#rows - 1], rows[#rows]
assert(r1.outcome == "miss" and r1.reason_kind == "never_seen", r1.outcome)
assert(r2.outcome == "hit", r2.outcome)
assert(r3.outcome == "miss" and r3.reason_kind == "types", r3.outcome)
assert(r3.reason_text:find("at args[0] (t), now f32[8,4@Y] and before f32[8@X,4@Y]", 1, true),
       r3.reason_text)

-- Bad input: clear errors naming the function and the values; the shell survives each.
h.expect_error(function() s(a, "scale") end,
               "jitted function has static_argnums=(-1, 1) but was called with only 2 positional arguments")
h.expect_error(function() sl.jit(function(t) return t end, {static_argnums = 3})(a) end,
               "static_argnums=(3,) but was called with only 1 positional argument")
h.expect_error(function() s(a, a, 3) end,
               "Non-hashable static arguments are not supported: argument 2 (static_argnums 1) is an Array")
h.expect_error(function() s(a, {}, 3) end, "(static_argnums 1) is a table")
h.expect_error(function() sl.jit(function(t) return t end, {static_argnums = 0, donate_argnums = 0}) end,
               "argument 0 is in both static_argnums and donate_argnums")
h.expect_error(function() sl.jit(function(t) return t end, {static_argnums = "x"}) end, "static_argnums")
h.expect_error(function() sl.jit(function(t) return t end, {donate_argnums = 2})(a) end,
               "donate_argnums=(2,) but was called with only 1 positional argument")
h.expect_error(function() g({w = sl.ones({4, 2}), b = 3}, x3) end, "argument 1.b is number")
h.expect_error(function() sl.jit(function(t) return {t, "x"} end)(a) end,
               "the function must return Arrays; result 1[2] is string")
local cyc = {}
cyc.self = cyc
h.expect_error(function() sl.jit(function(t) return t end)(cyc) end, "argument 1.self contains itself (a pytree must be a tree)")
h.expect_error(function() sl.jit(function(t) return t end)({}) end, "argument 1 is a table with no Arrays")
h.expect_error(function() sl.jit(function(t) return t[1]:totable() end)({a}) end, "this is a traced array")
h.expect_error(function() sl.grad(function(p) return p.w end)(params) end,
               "Gradient only defined for scalar-output functions. Output had shape: (4, 2)")
h.expect_error(function() sl.grad(function(t) return np.sum(t) end, {has_aux = true})(a) end,
               "with has_aux the function must return two values")
h.expect_error(function() sl.grad(function(t) return np.sum(t) end, {has_ax = true}) end,
               "did you mean 'has_aux'")
local rec
rec = sl.jit(function(t) return rec({t}) end)
h.expect_error(function() rec(a) end, "recursion through jit")
assert(sl.jit(function(t) return t end)(a):totable()[2][3] == a:totable()[2][3], "alive")
print("xf_test ok")
