-- tests/frontend/lax_scan_test.lua: sl.lax.scan (jax.lax.scan; engine/frontend/scan.h) outside
-- and inside sl.jit, sl.grad and sl.shard_map: the carry pytree, stacked ys, xs = nil with
-- length, reverse, a gradient against the hand-computed one, and JAX's errors.
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")
local jnp, lax, P = sl.numpy, sl.lax, sl.P

local function close(a, b, what)
  if type(b) == "table" then
    assert(type(a) == "table" and #a == #b, what .. ": shapes differ")
    for i = 1, #b do close(a[i], b[i], what) end
    return
  end
  assert(math.abs(a - b) <= 1e-5 * math.max(1, math.abs(b)), string.format("%s: %s vs %s", what, a, b))
end

-- A running sum: the carry is the sum so far, y the carry before each step.
local xs = jnp.arange(5.)
local c, ys = lax.scan(function(carry, x) return carry + x, carry end, jnp.zeros({}), xs)
close(c:item(), 10, "sum")
close(ys:totable(), {0, 0, 1, 3, 6}, "sum ys")
assert(tostring(sl.typeof(ys)) == "f32[5]", tostring(sl.typeof(ys)))

-- reverse: from the last slice; ys stay in xs' order
c, ys = lax.scan(function(carry, x) return carry + x, carry end, jnp.zeros({}), xs, {reverse = true})
close(c:item(), 10, "reverse sum")
close(ys:totable(), {10, 9, 7, 4, 0}, "reverse ys")

-- a pytree carry and pytree xs / ys; rows of a 2-d xs
local m = jnp.arange(6.):reshape(3, 2)
local carry, out = lax.scan(function(cy, x)
  local s = cy.s + x.row
  return {s = s, n = cy.n + 1}, {sq = x.row * x.row, s = s}
end, {s = jnp.zeros({2}), n = jnp.zeros({})}, {row = m})
close(carry.s:totable(), {6, 9}, "pytree carry s")
close(carry.n:item(), 3, "pytree carry n")
close(out.sq:totable(), {{0, 1}, {4, 9}, {16, 25}}, "pytree ys sq")
close(out.s:totable(), {{0, 1}, {2, 4}, {6, 9}}, "pytree ys s")

-- xs = nil with length: x is nil, a nil y gives nil ys
local doubled, none = lax.scan(function(cy, x)
  assert(x == nil, "x is nil when xs is")
  return cy * 2, nil
end, jnp.ones({2}), nil, {length = 3})
close(doubled:totable(), {8, 8}, "length only")
assert(none == nil, "nil ys")
-- xs = {} (Python's ()) with length: x and the ys are empty tables
local _, empty = lax.scan(function(cy, x) return cy, x end, jnp.ones({2}), {}, {length = 2})
assert(type(empty) == "table" and next(empty) == nil, "() ys")

-- inside jit: the iterations traced into one program (the same values)
local jitted = sl.jit(function(v)
  return lax.scan(function(cy, x) return cy + x, cy end, jnp.zeros({}), v)
end)
local jc, jys = jitted(xs)
close(jc:item(), 10, "jit sum")
close(jys:totable(), {0, 0, 1, 3, 6}, "jit ys")

-- grad through the scan: c_{k+1} = c_k * w + x_k from c_0 = 1 over x = (1, 2, 3) gives
-- w^3 + w^2 + 2w + 3, whose derivative at w = 2 is 3w^2 + 2w + 2 = 18 (the value 8+4+4+3 = 19).
local function poly(w)
  local cy, _ = lax.scan(function(cy, x) return cy * w + x, cy end, jnp.ones({}), jnp.array({1., 2., 3.}))
  return cy
end
close(poly(jnp.array(2.)):item(), 19, "poly value")
close(sl.grad(poly)(jnp.array(2.)):item(), 18, "poly grad")
close(sl.grad(poly)(jnp.array(-1.)):item(), 3, "poly grad at -1")  -- 3 - 2 + 2
-- the gradient of a loss of the stacked ys: sum_k y_k with y_k = c_k (1, w + 1, w^2 + w + 2):
-- derivative 1 + 2w + 1 = 6 at w = 2
close(sl.grad(function(w)
  local _, ys = lax.scan(function(cy, x) return cy * w + x, cy end, jnp.ones({}), jnp.array({1., 2., 3.}))
  return jnp.sum(ys)
end)(jnp.array(2.)):item(), 6, "grad through ys")

-- inside shard_map (eager and jitted): per-device cumulative sums of each device's block
sl.set_mesh(sl.make_mesh({2}, {"i"}))
local cums = sl.shard_map(function(blk)
  local _, ys = lax.scan(function(cy, x) return cy + x, cy + x end, lax.pcast(jnp.zeros({}), "i", {to = "varying"}), blk)
  return ys
end, {in_specs = P("i"), out_specs = P("i")})
local v = sl.device_put(jnp.arange(6.), P("i"))
close(cums(v):totable(), {0, 1, 3, 3, 7, 12}, "shard_map cumsum")
close(sl.jit(cums)(v):totable(), {0, 1, 3, 3, 7, 12}, "jitted shard_map cumsum")
-- grad of a shard_map whose body scans: per device c_{k+1} = c_k w + x_k from 1 over its two
-- xs, loss = psum of c_2 + sum(ys): device 0 (1, 2) gives w^2 + 2w + 4, device 1 (3, 4)
-- w^2 + 4w + 8; at w = 2 the loss is 12 + 20 and its derivative (2w + 2) + (2w + 4) = 14.
local poly_sm = sl.shard_map(function(w, blk)
  local cy, ys = lax.scan(function(cy, x) return cy * w + x, cy end,
                          lax.pcast(jnp.ones({}), "i", {to = "varying"}), blk)
  return lax.psum(cy + jnp.sum(ys), "i")
end, {in_specs = {P(), P("i")}, out_specs = P()})
local xs4 = sl.device_put(jnp.array({1., 2., 3., 4.}), P("i"))
close(poly_sm(jnp.array(2.), xs4):item(), 32, "shard_map scan value")
close(sl.grad(poly_sm)(jnp.array(2.), xs4):item(), 14, "shard_map scan grad")
sl.set_mesh(nil)

-- an Explicit mesh: the shardings are part of the types (JAX's typematch), xs' leading axis
-- must be replicated
local em = sl.make_mesh({2}, {"X"})
sl.set_mesh(em)
local rows = sl.device_put(jnp.arange(8.):reshape(4, 2), P(nil, "X"))
local ec, eys = lax.scan(function(cy, r) return cy + r, cy end, sl.device_put(jnp.zeros({2}), P("X")), rows)
assert(tostring(sl.typeof(ec)) == "f32[2@X]" and tostring(sl.typeof(eys)) == "f32[4,2@X]")
close(ec:totable(), {12, 16}, "explicit sum")
h.expect_error(function()
  lax.scan(function(c, r) return sl.reshard(c, P()), c end, sl.device_put(jnp.zeros({2}), P("X")), rows)
end, "The input carry c has type float32[2@X] but the corresponding output carry component has "
     .. "type float32[2].\n\nRevise")
h.expect_error(function()
  lax.scan(function(c, r) return c, c end, jnp.zeros({2}), sl.device_put(rows, P("X")))
end, "0th dimension of all xs should be replicated. Got P('X')")
sl.set_mesh(nil)

-- JAX's errors
h.expect_error(function() lax.scan(function(cy, x) return cy, x end, jnp.zeros({}), {jnp.ones({3}), jnp.ones({4})}) end,
               "scan got values with different leading axis sizes: 3, 4.")
h.expect_error(function() lax.scan(function(cy, x) return cy, x end, jnp.zeros({}), jnp.ones({3}), {length = 4}) end,
               "scan got `length` argument of 4 which disagrees with leading axis sizes [3].")
h.expect_error(function() lax.scan(function(cy, x) return cy, x end, jnp.zeros({}), nil) end,
               "scan got no values to scan over and `length` not provided.")
h.expect_error(function() lax.scan(function(cy, x) return cy, x end, jnp.zeros({}), jnp.zeros({})) end,
               "scan got value with no leading axis to scan over: float32[].")
h.expect_error(function() lax.scan(function(cy, x) return cy end, jnp.zeros({}), xs) end,
               "scan body output must be a pair, got 1 value")
h.expect_error(function() lax.scan(function(carry, x) return jnp.ones({2}), x end, jnp.zeros({}), xs) end,
               "scan body function carry input and carry output must have equal types, but they "
               .. "differ:\n\nThe input carry carry has type float32[] but the corresponding output "
               .. "carry component has type float32[2], so the shapes do not match.\n\nRevise the "
               .. "function so that all output types match the corresponding input types.")
h.expect_error(function()
  lax.scan(function(carry, x) return {carry[1], carry[1]}, x end, {jnp.zeros({}), jnp.zeros({}, {dtype = "int32"})}, xs)
end, "The input carry component carry[1] has type int32[] but the corresponding output carry "
     .. "component has type float32[], so the dtypes do not match.")
h.expect_error(function() lax.scan(function(cy, x) return {cy}, x end, jnp.zeros({}), xs) end,
               "scan body function carry input and carry output must have the same pytree structure")
h.expect_error(function() lax.scan(function(cy, x) return cy, x end, jnp.zeros({}), xs, {unroll = -1}) end,
               "`unroll` must be a `bool` or a non-negative `int`.")
h.expect_error(function() lax.scan(function(cy, x) return cy, x end, jnp.zeros({}), xs, {length = 0, bogus = 1}) end,
               "bogus")
h.expect_error(function() lax.scan(function(cy, x) error("inside the body") end, jnp.zeros({}), xs) end,
               "inside the body")
h.expect_error(function() lax.scan(42, jnp.zeros({}), xs) end, "scan")
h.expect_error(function() lax.scan(function(cy, x) return cy, x end, jnp.zeros({}), nil, {length = 1e9}) end,
               "scan: length 1000000000 is over 65536: the scan is unrolled")
h.expect_error(function() lax.scan(function(cy, x) return cy, x end, jnp.zeros({}), nil, {length = 0}) end,
               "a zero-length scan is not supported")
-- unroll is accepted (every iteration is unrolled anyway)
close(select(1, lax.scan(function(cy, x) return cy + x, cy end, jnp.zeros({}), xs, {unroll = true})):item(), 10, "unroll")
print("lax_scan_test ok")
