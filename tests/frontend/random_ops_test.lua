-- tests/frontend/random_ops_test.lua: issue 13's random-program test. A few hundred random small
-- programs built from sl.numpy's ops (random shapes, meshes of 1 to 8 devices, random valid
-- input shardings, reshards and out_shardings, auto and explicit mode) run on the simulated
-- devices (every program under sl.jit, a third also eagerly) and in a plain-Lua reference
-- (below, in double): equal within float32 rounding. Gradients from sl.grad of
-- sum(program * C) equal central finite differences of the reference. In explicit mode a
-- program may be refused with one of JAX's explicit-sharding errors (counted, and they must
-- stay a minority); any other error fails the test.
math.randomseed(20261124)
local np = sl.np
local PROGRAMS = tonumber(os.getenv("RANDOM_OPS_PROGRAMS") or "300")

-- ---- plain-Lua reference: {shape = {...}, data = {...}} row-major -----------------------
local R = {}
local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end
local function unravel(k, shape)
  local idx = {}
  for i = #shape, 1, -1 do
    idx[i] = k % shape[i]
    k = (k - idx[i]) // shape[i]
  end
  return idx
end
local function ravel(idx, shape)
  local k = 0
  for i = 1, #shape do k = k * shape[i] + idx[i] end
  return k
end
local function new(shape, f)
  local t = {shape = shape, data = {}}
  for k = 0, numel(shape) - 1 do t.data[k + 1] = f(unravel(k, shape)) end
  return t
end
local function get(a, idx) return a.data[ravel(idx, a.shape) + 1] end
local function copy(t) local c = {} for i, v in ipairs(t) do c[i] = v end return c end
local function bshape(a, b)
  local r = math.max(#a, #b)
  local s = {}
  for i = 1, r do
    local da, db = a[i - (r - #a)] or 1, b[i - (r - #b)] or 1
    if da ~= db and da ~= 1 and db ~= 1 then return nil end
    s[i] = da == 1 and db or da
  end
  return s
end
local function bget(a, idx, r)
  local off, j = r - #a.shape, {}
  for i = 1, #a.shape do j[i] = a.shape[i] == 1 and 0 or idx[i + off] end
  return get(a, j)
end
local function nanmax(x, y) if x ~= x or y ~= y then return 0 / 0 end return math.max(x, y) end
local function nanmin(x, y) if x ~= x or y ~= y then return 0 / 0 end return math.min(x, y) end
local B = {
  add = function(x, y) return x + y end, subtract = function(x, y) return x - y end,
  multiply = function(x, y) return x * y end, maximum = nanmax, minimum = nanmin,
  equal = function(x, y) return x == y and 1 or 0 end,
  not_equal = function(x, y) return x ~= y and 1 or 0 end,
  less = function(x, y) return x < y and 1 or 0 end,
  less_equal = function(x, y) return x <= y and 1 or 0 end,
  greater = function(x, y) return x > y and 1 or 0 end,
  greater_equal = function(x, y) return x >= y and 1 or 0 end,
}
function R.binary(f, a, b)
  local s = bshape(a.shape, b.shape)
  return new(s, function(idx) return B[f](bget(a, idx, #s), bget(b, idx, #s)) end)
end
function R.where(c, x, y)
  local s = bshape(bshape(c.shape, x.shape), y.shape)
  return new(s, function(idx)
    if bget(c, idx, #s) ~= 0 then return bget(x, idx, #s) end
    return bget(y, idx, #s)
  end)
end
local U = {tanh = math.tanh, negative = function(x) return -x end, exp = math.exp}
function R.unary(f, a) return new(a.shape, function(idx) return U[f](get(a, idx)) end) end
-- Reduction over axis (0-based) or all (nil): f(acc, x), acc starting at the first element.
local function reduce(a, axis, keepdims, f)
  if axis == nil then
    local acc = a.data[1]
    for k = 2, #a.data do acc = f(acc, a.data[k]) end
    local s = {}
    if keepdims then for i = 1, #a.shape do s[i] = 1 end end
    return {shape = s, data = {acc}}
  end
  local ax = axis < 0 and axis + #a.shape or axis
  local s = copy(a.shape)
  s[ax + 1] = 1
  local r = new(s, function(idx)
    local j = copy(idx)
    local acc
    for i = 0, a.shape[ax + 1] - 1 do
      j[ax + 1] = i
      acc = acc == nil and get(a, j) or f(acc, get(a, j))
    end
    return acc
  end)
  if not keepdims then table.remove(r.shape, ax + 1) end
  return r
end
local function plus(x, y) return x + y end
function R.sum(a, axis, keepdims) return reduce(a, axis, keepdims, plus) end
function R.mean(a, axis, keepdims)
  local s = reduce(a, axis, keepdims, plus)
  local n = axis and a.shape[(axis < 0 and axis + #a.shape or axis) + 1] or #a.data
  for k = 1, #s.data do s.data[k] = s.data[k] / n end
  return s
end
function R.max(a, axis, keepdims) return reduce(a, axis, keepdims, nanmax) end
function R.min(a, axis, keepdims) return reduce(a, axis, keepdims, nanmin) end
function R.argmax(a, axis)
  if axis == nil then a = {shape = {#a.data}, data = a.data}; axis = 0 end
  local ax = axis < 0 and axis + #a.shape or axis
  local s = copy(a.shape)
  table.remove(s, ax + 1)
  return new(s, function(idx)
    local j = copy(idx)
    table.insert(j, ax + 1, 0)
    local best, at = nil, 0
    for i = 0, a.shape[ax + 1] - 1 do
      j[ax + 1] = i
      local v = get(a, j)
      if best == nil or v > best then best, at = v, i end
    end
    return at
  end)
end
function R.softmax(a, axis, log)
  local m = R.max(a, axis, true)
  local z = R.binary("subtract", a, m)
  local e = R.unary("exp", z)
  local s = R.sum(e, axis, true)
  if log then return R.binary("subtract", z, R.unary("log", s)) end
  return new(e.shape, function(idx) return get(e, idx) / bget(s, idx, #e.shape) end)
end
U.log = math.log
function R.transpose(a, perm)
  local s = {}
  for i, p in ipairs(perm) do s[i] = a.shape[p + 1] end
  return new(s, function(idx)
    local j = {}
    for i, p in ipairs(perm) do j[p + 1] = idx[i] end
    return get(a, j)
  end)
end
-- numpy basic indexing with items as x[...] takes them (0-based).
function R.index(a, items)
  local regular = 0
  for _, it in ipairs(items) do
    if type(it) == "number" or type(it) == "table" then regular = regular + 1 end
  end
  local full = {}
  for _, it in ipairs(items) do
    if it == "..." then
      for _ = 1, #a.shape - regular do full[#full + 1] = {} end
    else
      full[#full + 1] = it
    end
  end
  local d = 0
  for _, it in ipairs(full) do if it ~= "newaxis" then d = d + 1 end end
  for _ = d + 1, #a.shape do full[#full + 1] = {} end
  local s, plan, dim = {}, {}, 0  -- plan: per output dim {src dim, start, step} or newaxis
  local fixed = {}
  for _, it in ipairs(full) do
    if it == "newaxis" then
      s[#s + 1] = 1
      plan[#plan + 1] = false
    else
      dim = dim + 1
      local n = a.shape[dim]
      if type(it) == "number" then
        fixed[dim] = it < 0 and it + n or it
      else
        local step = it[3] or 1
        local function clamp(i) i = i < 0 and i + n or i return math.max(0, math.min(n, i)) end
        local start, stop = clamp(it[1] or 0), clamp(it[2] or n)
        s[#s + 1] = stop > start and (stop - start + step - 1) // step or 0
        plan[#plan + 1] = {dim, start, step}
      end
    end
  end
  return new(s, function(idx)
    local j = {}
    for k, v in pairs(fixed) do j[k] = v end
    for o, p in ipairs(plan) do if p then j[p[1]] = p[2] + idx[o] * p[3] end end
    return get(a, j)
  end)
end
function R.concatenate(xs, axis)
  local s = copy(xs[1].shape)
  s[axis + 1] = 0
  for _, x in ipairs(xs) do s[axis + 1] = s[axis + 1] + x.shape[axis + 1] end
  return new(s, function(idx)
    local j, at = copy(idx), idx[axis + 1]
    for _, x in ipairs(xs) do
      if at < x.shape[axis + 1] then j[axis + 1] = at return get(x, j) end
      at = at - x.shape[axis + 1]
    end
  end)
end
function R.reshape(a, shape) return {shape = shape, data = a.data} end
-- einsum over all letters: the output's, then a sum over the others.
function R.einsum(spec, a, b)
  local lhs, out = spec:match("^(.-)%->(.*)$")
  local terms, ops = {}, {a, b}
  for t in lhs:gmatch("[^,]+") do terms[#terms + 1] = t end
  local size, summed = {}, {}
  for k, t in ipairs(terms) do
    for i = 1, #t do size[t:sub(i, i)] = ops[k].shape[i] end
  end
  for c in pairs(size) do if not out:find(c, 1, true) then summed[#summed + 1] = c end end
  table.sort(summed)
  local s = {}
  for i = 1, #out do s[i] = size[out:sub(i, i)] end
  local ssh = {}
  for i, c in ipairs(summed) do ssh[i] = size[c] end
  return new(s, function(idx)
    local val = {}
    for i = 1, #out do val[out:sub(i, i)] = idx[i] end
    local acc = 0
    for k = 0, numel(ssh) - 1 do
      local sidx = unravel(k, ssh)
      for i, c in ipairs(summed) do val[c] = sidx[i] end
      local p = 1
      for o, t in ipairs(terms) do
        local j = {}
        for i = 1, #t do j[i] = val[t:sub(i, i)] end
        p = p * get(ops[o], j)
      end
      acc = acc + p
    end
    return acc
  end)
end

-- Issue 29's JAX names (engine/frontend/numpy_jax.h), in double.
local function sign(x) if x > 0 then return 1 elseif x < 0 then return -1 end return x end
U.sqrt, U.abs, U.sign, U.sin, U.cos, U.floor = math.sqrt, math.abs, sign, math.sin, math.cos,
                                                math.floor
U.log1p = function(x) return math.log(1 + x) end
U.expm1 = function(x) return math.exp(x) - 1 end
U.square = function(x) return x * x end
U.relu = function(x) if x ~= x then return x end return x > 0 and x or 0 end  -- max(x, 0)
local function logaddexp(x, y)
  local m = math.max(x, y)
  return m + math.log(math.exp(x - m) + math.exp(y - m))
end
U.softplus = function(x) return logaddexp(x, 0) end
B.logaddexp = logaddexp
B.power = function(x, p) return x ^ p end
function R.prod(a, axis, keepdims)
  return reduce(a, axis, keepdims, function(x, y) return x * y end)
end
function R.var(a, axis, keepdims)
  local m = R.mean(a, axis, true)
  local c = R.binary("subtract", a, m)
  return R.mean(R.binary("multiply", c, c), axis, keepdims)
end
function R.std(a, axis, keepdims) return R.unary("sqrt", R.var(a, axis, keepdims)) end
function R.any(a, axis, keepdims)  -- a float mask, as np.any's here
  local mask = new(a.shape, function(idx) return get(a, idx) ~= 0 and 1 or 0 end)
  return reduce(mask, axis, keepdims, math.max)
end
function R.logsumexp(a, axis, keepdims)
  local m = R.max(a, axis, true)
  local e = R.unary("exp", R.binary("subtract", a, m))
  local r = R.binary("add", m, R.unary("log", R.sum(e, axis, true)))
  if not keepdims then
    if axis == nil then
      r.shape = {}
    else
      table.remove(r.shape, (axis < 0 and axis + #a.shape or axis) + 1)
    end
  end
  return r
end
function R.cumsum(a, axis)
  local ax = axis < 0 and axis + #a.shape or axis
  return new(a.shape, function(idx)
    local j, acc = copy(idx), 0
    for i = 0, idx[ax + 1] do j[ax + 1] = i; acc = acc + get(a, j) end
    return acc
  end)
end
function R.moveaxis(a, src, dst)  -- one axis
  local order = {}
  for i = 0, #a.shape - 1 do if i ~= src then order[#order + 1] = i end end
  table.insert(order, dst + 1, src)
  return R.transpose(a, order)
end
function R.tile(a, reps)  -- #reps == rank
  local s = {}
  for i, d in ipairs(a.shape) do s[i] = d * reps[i] end
  return new(s, function(idx)
    local j = {}
    for i = 1, #idx do j[i] = idx[i] % a.shape[i] end
    return get(a, j)
  end)
end
function R.take(a, ids, axis)
  local ax = axis < 0 and axis + #a.shape or axis
  local s = copy(a.shape)
  s[ax + 1] = #ids
  return new(s, function(idx)
    local j = copy(idx)
    local i = ids[idx[ax + 1] + 1]
    j[ax + 1] = i < 0 and i + a.shape[ax + 1] or i
    return get(a, j)
  end)
end

-- Traced indices: jnp.pad with pairs, lax.dynamic_slice_in_dim (JAX's start: negative from
-- the end, then clamped so the window fits), x[i] (a size-1 slice along axis 0, dim removed).
function R.pad(a, widths)
  local s = {}
  for i, d in ipairs(a.shape) do s[i] = d + widths[i][1] + widths[i][2] end
  return new(s, function(idx)
    local j = {}
    for i = 1, #idx do
      j[i] = idx[i] - widths[i][1]
      if j[i] < 0 or j[i] >= a.shape[i] then return 0 end
    end
    return get(a, j)
  end)
end
function R.dslice(a, start, size, axis)
  local n = a.shape[axis + 1]
  local first = math.max(0, math.min(start < 0 and start + n or start, n - size))
  local s = copy(a.shape)
  s[axis + 1] = size
  return new(s, function(idx)
    local j = copy(idx)
    j[axis + 1] = idx[axis + 1] + first
    return get(a, j)
  end)
end
function R.dindex(a, start)
  local row = R.dslice(a, start, 1, 0)
  local s = {}
  for i = 2, #row.shape do s[i - 1] = row.shape[i] end
  return {shape = s, data = row.data}
end

-- ---- programs: steps over a pool of values; the same steps run on either backend --------
-- step = {op, a, b, c (pool indices), p (parameters)}; op "input" takes argument p.
local REF, DEV = {}, {}
for _, f in ipairs({"add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal",
                    "less", "less_equal", "greater", "greater_equal"}) do
  REF[f] = function(v, st) return R.binary(f, v[st.a], v[st.b]) end
  DEV[f] = function(v, st) return np[f](v[st.a], v[st.b]) end
end
DEV.add = function(v, st) return v[st.a] + v[st.b] end        -- the operators, too
DEV.multiply = function(v, st) return v[st.a] * v[st.b] end
for _, f in ipairs({"tanh", "negative", "exp"}) do
  REF[f] = function(v, st) return R.unary(f, v[st.a]) end
  DEV[f] = function(v, st) return np[f](v[st.a]) end
end
REF.where = function(v, st) return R.where(v[st.a], v[st.b], v[st.c]) end
DEV.where = function(v, st) return np.where(v[st.a], v[st.b], v[st.c]) end
for _, f in ipairs({"sum", "mean", "max", "min"}) do
  REF[f] = function(v, st) return R[f](v[st.a], st.p.axis, st.p.keepdims) end
  DEV[f] = function(v, st) return np[f](v[st.a], {axis = st.p.axis, keepdims = st.p.keepdims}) end
end
REF.argmax = function(v, st) return R.argmax(v[st.a], st.p.axis) end
DEV.argmax = function(v, st) return np.argmax(v[st.a], st.p.axis) end
REF.softmax = function(v, st) return R.softmax(v[st.a], st.p.axis, st.p.log) end
DEV.softmax = function(v, st)
  return (st.p.log and sl.nn.log_softmax or sl.nn.softmax)(v[st.a], st.p.axis)
end
REF.transpose = function(v, st) return R.transpose(v[st.a], st.p.perm) end
DEV.transpose = function(v, st)
  if st.p.T then return v[st.a].T end
  return np.transpose(v[st.a], st.p.perm)
end
REF.index = function(v, st) return R.index(v[st.a], st.p.items) end
DEV.index = function(v, st) return v[st.a][st.p.items] end
REF.concatenate = function(v, st) return R.concatenate({v[st.a], v[st.b]}, st.p.axis) end
DEV.concatenate = function(v, st) return np.concatenate({v[st.a], v[st.b]}, st.p.axis) end
REF.reshape = function(v, st) return R.reshape(v[st.a], st.p.shape) end
DEV.reshape = function(v, st) return np.reshape(v[st.a], st.p.shape) end
REF.einsum = function(v, st)
  return R.einsum(st.p.spec, v[st.a], st.b and v[st.b])
end
DEV.einsum = function(v, st)
  if st.b then return np.einsum(st.p.spec, v[st.a], v[st.b], {out_sharding = st.p.out}) end
  return np.einsum(st.p.spec, v[st.a], {out_sharding = st.p.out})
end
-- issue 29's names
for _, f in ipairs({"sqrt", "abs", "sign", "sin", "cos", "floor", "log1p", "expm1", "square"}) do
  REF[f] = function(v, st) return R.unary(f, v[st.a]) end
  DEV[f] = function(v, st) return np[f](v[st.a]) end
end
for _, f in ipairs({"relu", "softplus"}) do
  REF[f] = function(v, st) return R.unary(f, v[st.a]) end
  DEV[f] = function(v, st) return sl.nn[f](v[st.a]) end
end
REF.logaddexp = function(v, st) return R.binary("logaddexp", v[st.a], v[st.b]) end
DEV.logaddexp = function(v, st) return np.logaddexp(v[st.a], v[st.b]) end
REF.power = function(v, st)
  return R.binary("power", v[st.a], {shape = {}, data = {st.p.p}})
end
DEV.power = function(v, st) return np.power(v[st.a], st.p.p) end
REF.clip = function(v, st)
  local lo = R.binary("maximum", v[st.a], {shape = {}, data = {st.p.lo}})
  return R.binary("minimum", lo, {shape = {}, data = {st.p.hi}})
end
DEV.clip = function(v, st) return np.clip(v[st.a], st.p.lo, st.p.hi) end
for _, f in ipairs({"prod", "var", "std", "any", "logsumexp"}) do
  REF[f] = function(v, st) return R[f](v[st.a], st.p.axis, st.p.keepdims) end
  local dev = f == "logsumexp" and sl.nn.logsumexp or np[f]
  DEV[f] = function(v, st) return dev(v[st.a], {axis = st.p.axis, keepdims = st.p.keepdims}) end
end
REF.cumsum = function(v, st) return R.cumsum(v[st.a], st.p.axis) end
DEV.cumsum = function(v, st) return np.cumsum(v[st.a], st.p.axis) end
REF.stack = function(v, st)
  local a, b = v[st.a], v[st.b]
  local s = copy(a.shape)
  table.insert(s, st.p.axis + 1, 1)
  return R.concatenate({{shape = s, data = a.data}, {shape = s, data = b.data}}, st.p.axis)
end
DEV.stack = function(v, st) return np.stack({v[st.a], v[st.b]}, st.p.axis) end
REF.split = function(v, st)
  local a = v[st.a]
  local n = a.shape[st.p.axis + 1] // st.p.sections
  local items = {}
  for i = 1, st.p.axis do items[i] = {} end
  items[st.p.axis + 1] = {st.p.piece * n, (st.p.piece + 1) * n}
  return R.index(a, items)
end
DEV.split = function(v, st) return np.split(v[st.a], st.p.sections, st.p.axis)[st.p.piece + 1] end
REF.expand_dims = function(v, st)
  local s = copy(v[st.a].shape)
  table.insert(s, st.p.axis + 1, 1)
  return {shape = s, data = v[st.a].data}
end
DEV.expand_dims = function(v, st) return np.expand_dims(v[st.a], st.p.axis) end
REF.squeeze = function(v, st)
  local s = {}
  for _, d in ipairs(v[st.a].shape) do if d ~= 1 then s[#s + 1] = d end end
  return {shape = s, data = v[st.a].data}
end
DEV.squeeze = function(v, st) return np.squeeze(v[st.a]) end
REF.swapaxes = function(v, st)
  local perm = {}
  for i = 0, #v[st.a].shape - 1 do perm[i + 1] = i end
  perm[st.p.i + 1], perm[st.p.j + 1] = st.p.j, st.p.i
  return R.transpose(v[st.a], perm)
end
DEV.swapaxes = function(v, st) return np.swapaxes(v[st.a], st.p.i, st.p.j) end
REF.moveaxis = function(v, st) return R.moveaxis(v[st.a], st.p.i, st.p.j) end
DEV.moveaxis = function(v, st) return np.moveaxis(v[st.a], st.p.i, st.p.j) end
REF.tile = function(v, st) return R.tile(v[st.a], st.p.reps) end
DEV.tile = function(v, st) return np.tile(v[st.a], st.p.reps) end
REF.pad = function(v, st) return R.pad(v[st.a], st.p.widths) end
DEV.pad = function(v, st) return np.pad(v[st.a], st.p.widths) end
REF.dslice = function(v, st) return R.dslice(v[st.a], st.p.start, st.p.size, st.p.axis) end
DEV.dslice = function(v, st)
  return sl.lax.dynamic_slice_in_dim(v[st.a], np.array(st.p.start), st.p.size, st.p.axis)
end
REF.dindex = function(v, st) return R.dindex(v[st.a], st.p.start) end
DEV.dindex = function(v, st) return v[st.a][np.array(st.p.start)] end
REF.remainder = function(v, st)  -- Lua's float % is Python's (floor), as jnp.remainder
  return new(copy(v[st.a].shape), function(idx) return get(v[st.a], idx) % st.p.c end)
end
DEV.remainder = function(v, st) return v[st.a] % st.p.c end
REF.take = function(v, st) return R.take(v[st.a], st.p.ids, st.p.axis) end
DEV.take = function(v, st) return np.take(v[st.a], st.p.ids, st.p.axis) end
REF.full_like = function(v, st)
  return R.binary("add", v[st.a], {shape = {}, data = {st.p.c}})
end
DEV.full_like = function(v, st) return v[st.a] + np.full_like(v[st.a], st.p.c) end
REF.reshard = function(v, st) return v[st.a] end
DEV.reshard = function(v, st) return sl.reshard(v[st.a], st.p.spec) end

local function run(backend, steps, args)
  local v = {}
  for k, st in ipairs(steps) do
    if st.op == "input" then v[k] = args[st.p.n] else v[k] = backend[st.op](v, st) end
  end
  return v[#steps]
end

-- ---- the generator -------------------------------------------------------------------------
local MESHES = {{{1}, {"X"}}, {{2}, {"X"}}, {{4}, {"X"}}, {{8}, {"X"}}, {{2, 2}, {"X", "Y"}},
                {{4, 2}, {"X", "Y"}}, {{2, 4}, {"X", "Y"}}, {{2, 2, 2}, {"X", "Y", "Z"}}}
local DIMS = {1, 2, 2, 3, 4, 4, 6, 8}
local function pick(t) return t[math.random(#t)] end

-- A random valid spec for shape on the mesh (as P's arguments: nil, an axis, or two axes).
local function random_spec(mesh_def, shape)
  local used, parts = {}, {}
  for i, d in ipairs(shape) do
    parts[i] = false
    if math.random() < 0.6 then
      local k = math.random(#mesh_def[2])
      local name, size = mesh_def[2][k], mesh_def[1][k]
      if not used[name] and size > 1 and d % size == 0 then
        used[name] = true
        parts[i] = name
      end
    end
  end
  local n = #parts
  while n > 0 and not parts[n] do n = n - 1 end  -- trailing Nones dropped
  local args = {}
  for i = 1, n do args[i] = parts[i] or nil end
  return sl.P(table.unpack(args, 1, n))
end

local function random_shape(max_rank)
  local s = {}
  for i = 1, math.random(1, max_rank or 3) do s[i] = pick(DIMS) end
  return s
end

local function gen_program(mesh_def)
  local steps, vals, inputs = {}, {}, {}
  local function push(st, val)
    steps[#steps + 1] = st
    vals[#vals + 1] = val
    return #steps
  end
  local function input(shape)
    local data = {}
    for k = 1, numel(shape) do data[k] = math.random() * 4 - 2 end
    inputs[#inputs + 1] = {shape = shape, data = data, spec = random_spec(mesh_def, shape)}
    return push({op = "input", p = {n = #inputs}}, {shape = shape, data = data})
  end
  local function pool_pick()  -- a float value of the pool
    return math.random(#steps)
  end
  -- a value whose shape broadcasts with shape: a pool value or a new input
  local function partner(shape)
    local tries = {}
    for k = 1, #steps do if bshape(vals[k].shape, shape) then tries[#tries + 1] = k end end
    if #tries > 0 and math.random() < 0.5 then return pick(tries) end
    local s = {}
    local drop = math.random(0, #shape)
    for i = drop + 1, #shape do s[#s + 1] = math.random() < 0.25 and 1 or shape[i] end
    if #s == 0 then s = {1} end
    return input(s)
  end
  local function small(shape) return numel(shape) <= 96 end

  input(random_shape())
  for _ = 1, math.random(2, 5) do
    local a = pool_pick()
    local x = vals[a]
    local r = #x.shape
    local kind = pick({"binary", "binary", "compare", "where", "unary", "reduce", "reduce",
                       "softmax", "transpose", "index", "index", "concat", "reshape", "matmul",
                       "einsum", "einsum", "reshard", "unary29", "unary29", "binary29",
                       "reduce29", "reduce29", "moves29", "moves29", "take29",
                       "index29"})
    local st = {a = a, p = {}}
    if kind == "binary" or kind == "compare" then
      st.op = pick(kind == "binary" and {"add", "subtract", "multiply", "maximum", "minimum"}
                   or {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
      st.b = partner(x.shape)
      if math.random() < 0.5 then st.a, st.b = st.b, st.a end
      if not small(bshape(vals[st.a].shape, vals[st.b].shape)) then st = nil end
    elseif kind == "where" then
      st.op = "where"
      st.b = partner(x.shape)
      st.c = partner(x.shape)
      local s = bshape(bshape(x.shape, vals[st.b].shape), vals[st.c].shape)
      if not s or not small(s) then st = nil end
    elseif kind == "unary" then
      local big = 0
      for _, v in ipairs(x.data) do big = math.max(big, math.abs(v)) end
      st.op = pick(big < 4 and {"tanh", "negative", "exp"} or {"tanh", "negative"})
    elseif kind == "reduce" and r >= 1 then
      st.op = pick({"sum", "mean", "max", "min"})
      if math.random() < 0.8 then st.p.axis = math.random(-r, r - 1) end
      st.p.keepdims = math.random() < 0.3
    elseif kind == "softmax" and r >= 1 then
      st.op = "softmax"
      st.p = {axis = math.random(-r, r - 1), log = math.random() < 0.5}
    elseif kind == "transpose" and r >= 2 then
      st.op = "transpose"
      local perm = {}
      for i = 0, r - 1 do table.insert(perm, math.random(#perm + 1), i) end
      st.p.perm = perm
      if math.random() < 0.3 then
        st.p.T = true
        st.p.perm = {}
        for i = r - 1, 0, -1 do st.p.perm[#st.p.perm + 1] = i end
      end
    elseif kind == "index" and r >= 1 then
      st.op = "index"
      -- items for the first k dims (then maybe "..."), or for the last k dims after "..."
      local items, k = {}, math.random(1, r)
      local front = k == r or math.random() < 0.6
      for i = 1, k do
        local n = x.shape[front and i or r - k + i]
        local u = math.random()
        if u < 0.3 then
          items[i] = math.random(-n, n - 1)
        elseif u < 0.85 then
          local start = math.random(0, n - 1)
          local stop = math.random(start + 1, n)
          items[i] = {math.random() < 0.2 and start - n or start, stop, math.random(1, 3)}
        else
          items[i] = {}
        end
      end
      if not front then table.insert(items, 1, "...")
      elseif math.random() < 0.2 then items[#items + 1] = "..." end
      if math.random() < 0.2 then table.insert(items, math.random(1, #items + 1), "newaxis") end
      st.p.items = items
    elseif kind == "concat" and r >= 1 then
      st.op = "concatenate"
      st.p.axis = math.random(0, r - 1)
      local s = copy(x.shape)
      s[st.p.axis + 1] = pick(DIMS)
      st.b = input(s)
      if math.random() < 0.5 then st.a, st.b = st.b, st.a end
      if not small(s) then st = nil end
    elseif kind == "reshape" and r >= 1 then
      st.op = "reshape"
      if r >= 2 and math.random() < 0.5 then
        local i = math.random(1, r - 1)
        local s = {}
        for k = 1, r do
          if k == i then s[#s + 1] = x.shape[k] * x.shape[k + 1] elseif k ~= i + 1 then s[#s + 1] = x.shape[k] end
        end
        st.p.shape = s
      else
        st.p.shape = {numel(x.shape)}
      end
    elseif (kind == "matmul" or kind == "einsum") and r >= 1 and r <= 3 then
      -- a random two-operand einsum: x's letters, some shared with a new operand, new ones
      st.op = "einsum"
      local letters, la = "abcdefg", ""
      for i = 1, r do la = la .. letters:sub(i, i) end
      local lb, shape_b = "", {}
      for i = 1, r do
        if math.random() < 0.5 then lb = lb .. la:sub(i, i); shape_b[#shape_b + 1] = x.shape[i] end
      end
      for i = 1, math.random(0, 2) do
        lb = lb .. letters:sub(r + i, r + i)
        shape_b[#shape_b + 1] = pick(DIMS)
      end
      local all, out = la .. lb:gsub("[" .. la .. "]", ""), ""
      for i = 1, #all do
        if math.random() < 0.6 then
          local c = all:sub(i, i)
          out = math.random() < 0.5 and out .. c or c .. out
        end
      end
      local one_operand = #lb == 0 or kind == "matmul" and false
      if one_operand then
        st.p.spec = la .. "->" .. out
      else
        st.b = input(shape_b)
        st.p.spec = la .. "," .. lb .. "->" .. out
      end
      local ref = R.einsum(st.p.spec, x, st.b and vals[st.b])
      if not small(ref.shape) or #ref.shape > 3 then st = nil
      elseif math.random() < 0.6 then st.p.out = random_spec(mesh_def, ref.shape) end
    elseif kind == "unary29" then
      local lo, big = math.huge, 0
      for _, v in ipairs(x.data) do lo = math.min(lo, v); big = math.max(big, math.abs(v)) end
      local ops = {"abs", "sign", "sin", "cos", "floor", "square", "relu", "softplus"}
      if lo > 0.01 then ops[#ops + 1] = "sqrt" end    -- away from sqrt's infinite slope at 0
      if lo > -0.9 then ops[#ops + 1] = "log1p" end
      if big < 4 then ops[#ops + 1] = "expm1" end
      st.op = pick(ops)
    elseif kind == "binary29" then
      local u = math.random()
      if u < 0.4 then
        st.op = "logaddexp"
        st.b = partner(x.shape)
        if math.random() < 0.5 then st.a, st.b = st.b, st.a end
        if not small(bshape(vals[st.a].shape, vals[st.b].shape)) then st = nil end
      elseif u < 0.7 then
        st.op = "power"
        st.p.p = pick({2, 3, -1, 0})
        for _, v in ipairs(x.data) do if st.p.p < 0 and math.abs(v) < 0.1 then st = nil break end end
      else
        st.op = "clip"
        st.p.lo = math.random() * 2 - 1.5
        st.p.hi = st.p.lo + math.random() * 2
      end
    elseif kind == "reduce29" and r >= 1 then
      st.op = pick({"prod", "var", "std", "any", "logsumexp", "cumsum"})
      if st.op == "cumsum" then
        st.p.axis = math.random(-r, r - 1)
      else
        if math.random() < 0.8 then st.p.axis = math.random(-r, r - 1) end
        st.p.keepdims = math.random() < 0.3
        local n = st.p.axis and x.shape[(st.p.axis % r) + 1] or numel(x.shape)
        if st.op == "std" and n < 2 then st = nil end  -- sqrt's slope at a zero variance
      end
    elseif kind == "moves29" and r >= 1 then
      st.op = pick({"stack", "split", "expand_dims", "squeeze", "swapaxes", "moveaxis", "tile",
                    "full_like"})
      if st.op == "stack" then
        st.p.axis = math.random(0, r)
        st.b = input(copy(x.shape))
        if not small(x.shape) then st = nil end
      elseif st.op == "split" then
        st.p.axis = math.random(0, r - 1)
        local n = x.shape[st.p.axis + 1]
        st.p.sections = n % 2 == 0 and 2 or 1
        st.p.piece = math.random(0, st.p.sections - 1)
      elseif st.op == "expand_dims" then
        st.p.axis = math.random(0, r)
      elseif st.op == "swapaxes" or st.op == "moveaxis" then
        st.p.i, st.p.j = math.random(0, r - 1), math.random(0, r - 1)
      elseif st.op == "tile" then
        st.p.reps = {}
        for i = 1, r do st.p.reps[i] = math.random() < 0.3 and 2 or 1 end
        if numel(x.shape) * 2 ^ r > 96 then st = nil end
      elseif st.op == "full_like" then
        st.p.c = math.random() * 2 - 1
      end
    elseif kind == "take29" and r >= 1 then
      st.op = "take"
      st.p.axis = math.random(0, r - 1)
      local n = x.shape[st.p.axis + 1]
      st.p.ids = {}
      for i = 1, math.random(1, 4) do st.p.ids[i] = math.random(-n, n - 1) end
    elseif kind == "index29" and r >= 1 then
      st.op = pick({"pad", "dslice", "dindex", "remainder"})
      if st.op == "pad" then
        st.p.widths = {}
        for i = 1, r do st.p.widths[i] = {math.random(0, 1), math.random(0, 1)} end
        if numel(x.shape) * 2 ^ r > 96 then st = nil end
      elseif st.op == "remainder" then
        st.p.c = pick({0.7, -1.3, 2})
      else
        st.p.axis = st.op == "dslice" and math.random(0, r - 1) or 0
        local n = x.shape[st.p.axis + 1]
        st.p.size = math.random(1, n)
        st.p.start = math.random(-n - 1, n + 1)
      end
    elseif kind == "reshard" then
      st.op = "reshard"
      st.p.spec = random_spec(mesh_def, x.shape)
    else
      st = nil
    end
    if st then
      local ok, val = pcall(REF[st.op], vals, st)
      assert(ok, st.op .. ": reference failed: " .. tostring(val))
      if numel(val.shape) > 0 then push(st, val) end
    end
  end
  -- Sometimes end with argmax (an int32 result; no gradient).
  local last = vals[#steps]
  if #last.shape >= 1 and math.random() < 0.1 then
    local st = {op = "argmax", a = #steps, p = {}}
    if math.random() < 0.7 then st.p.axis = math.random(0, #last.shape - 1) end
    push(st, R.argmax(last, st.p.axis))
  end
  return steps, vals[#steps], inputs
end

-- ---- running and comparing -------------------------------------------------------------
local function flatten(t, out)
  out = out or {}
  if type(t) ~= "table" then out[#out + 1] = t return out end
  for _, v in ipairs(t) do flatten(v, out) end
  return out
end
local function nested(shape, data, at, d)
  at, d = at or 0, d or 1
  if d > #shape then return data[at + 1] end
  local t, inner = {}, numel({table.unpack(shape, d + 1)})
  for i = 0, shape[d] - 1 do t[i + 1] = nested(shape, data, at + i * inner, d + 1) end
  return t
end
local function show(v)
  if type(v) ~= "table" then return tostring(v) end
  local parts = {}
  for i = 1, #v do parts[i] = show(v[i]) end
  return "{" .. table.concat(parts, ",") .. "}"
end
local function describe(steps)
  local parts = {}
  for k, st in ipairs(steps) do
    local p = {}
    for key, v in pairs(st.p) do
      p[#p + 1] = key .. "=" .. show(v)
    end
    parts[#parts + 1] = string.format("%d:%s(%s,%s,%s){%s}", k, st.op, st.a, st.b, st.c,
                                      table.concat(p, ","))
  end
  return table.concat(parts, " ")
end
local function same(got_shape, got, ref, what, prog)
  assert(#got_shape == #ref.shape, what .. ": rank " .. #got_shape .. " vs " .. #ref.shape ..
         " in " .. prog)
  for i = 1, #got_shape do
    assert(got_shape[i] == ref.shape[i], what .. ": shape differs in " .. prog)
  end
  local worst = 0
  for k = 1, #ref.data do
    local r, g = ref.data[k], got[k]
    local err = math.abs(g - r) / (4e-6 + 2e-6 * math.max(1, math.abs(r)))
    if r ~= r then err = g ~= g and 0 or math.huge end
    worst = math.max(worst, err)
    if err > 1 then
      error(string.format("%s: element %d is %.9g, reference %.9g\n  program: %s", what, k, g, r,
                          prog))
    end
  end
  return worst
end

local EXPLICIT_ERRORS = {"incompatible shardings", "illegally sharded result", "ambiguous",
                         "acts as an assert"}
local refusals = {}
local function explicit_refusal(msg)
  for _, pat in ipairs(EXPLICIT_ERRORS) do
    if tostring(msg):find(pat, 1, true) then
      refusals[pat] = (refusals[pat] or 0) + 1
      return true
    end
  end
  return false
end

-- d/dx1 of sum(ref(x) * C) by central differences in double, for up to 6 elements of x1.
local function finite_differences(steps, inputs, cdata)
  local function loss(args)
    local out = run(REF, steps, args)
    local s = 0
    for k, v in ipairs(out.data) do s = s + v * cdata[k] end
    return s
  end
  local args = {}
  for i, inp in ipairs(inputs) do args[i] = {shape = inp.shape, data = copy(inp.data)} end
  local g, h = {}, 1e-4
  for k = 1, math.min(6, #args[1].data) do
    local x0 = args[1].data[k]
    local function at(d) args[1].data[k] = x0 + d local v = loss(args) args[1].data[k] = x0 return v end
    local g1 = (at(h) - at(-h)) / (2 * h)
    local g2 = (at(h / 4) - at(-h / 4)) / (h / 2)
    -- a kink (max, where, ...) within h: no derivative to compare
    g[k] = math.abs(g1 - g2) <= 1e-4 * (1 + math.abs(g1)) and g1 or false
  end
  return g
end

local stats = {programs = 0, explicit_refused = 0, explicit = 0, eager = 0, grads = 0,
               grad_elems = 0, kinks = 0, worst = 0, ops = {}}
for n = 1, PROGRAMS do
  local mdef = MESHES[(n - 1) % #MESHES + 1]
  local explicit = ((n - 1) // #MESHES) % 2 == 1  -- every mesh in both modes
  local mesh = sl.make_mesh(mdef[1], mdef[2], {axis_types = explicit and "Explicit" or "Auto"})
  sl.set_mesh(mesh)
  local steps, ref, inputs = gen_program(mdef)
  local prog = string.format("#%d on %s: %s", n, tostring(mesh), describe(steps))
  for _, st in ipairs(steps) do stats.ops[st.op] = (stats.ops[st.op] or 0) + 1 end
  local args = {}
  for i, inp in ipairs(inputs) do
    args[i] = sl.device_put(sl.array(nested(inp.shape, inp.data)), inp.spec)
  end
  local f = sl.jit(function(...) return run(DEV, steps, {...}) end, {name = "random_ops"})
  local ok, out = pcall(f, table.unpack(args))
  stats.explicit = stats.explicit + (explicit and 1 or 0)
  if not ok then
    assert(explicit and explicit_refusal(out), "unexpected error: " .. tostring(out) .. "\n  " .. prog)
    stats.explicit_refused = stats.explicit_refused + 1
  else
    stats.programs = stats.programs + 1
    stats.worst = math.max(stats.worst, same(out.shape, flatten(out:totable()), ref, "jit", prog))
    if n % 3 == 0 then  -- eagerly, op by op
      local e = run(DEV, steps, args)
      same(e.shape, flatten(e:totable()), ref, "eager", prog)
      stats.eager = stats.eager + 1
    end
    if n % 3 == 1 and out.dtype == "float32" then  -- sl.grad vs finite differences
      local cdata = {}
      for k = 1, #ref.data do cdata[k] = math.random() * 2 - 1 end
      local C = sl.array(nested(ref.shape, cdata))
      local loss = function(...) return np.sum(run(DEV, steps, {...}) * C) end
      local gok, g = pcall(sl.grad(loss), table.unpack(args))
      if not gok then
        assert(explicit and explicit_refusal(g), "grad: " .. tostring(g) .. "\n  " .. prog)
      else
        assert(sl.typeof(g) == sl.typeof(args[1]), "grad's type " .. sl.typeof(g) ..
               " is not its input's " .. sl.typeof(args[1]) .. " in " .. prog)
        local got = flatten(g:totable())
        for k, fd in pairs(finite_differences(steps, inputs, cdata)) do
          if fd then
            local tol = 2e-3 * (1 + math.abs(fd))
            if math.abs(got[k] - fd) > tol then
              error(string.format("grad element %d: %.7g, finite differences %.7g\n  %s", k,
                                  got[k], fd, prog))
            end
            stats.grad_elems = stats.grad_elems + 1
          else
            stats.kinks = stats.kinks + 1
          end
        end
        stats.grads = stats.grads + 1
      end
    end
  end
end
sl.set_mesh(nil)

local ops = {}
for op, c in pairs(stats.ops) do ops[#ops + 1] = op .. "=" .. c end
table.sort(ops)
print(string.format("random_ops: %d programs ran (%d explicit refused of %d explicit), %d also "
                    .. "eagerly, %d gradients (%d elements checked, %d at kinks), worst error "
                    .. "%.3f of tolerance", stats.programs, stats.explicit_refused,
                    stats.explicit, stats.eager, stats.grads, stats.grad_elems, stats.kinks,
                    stats.worst))
print("ops: " .. table.concat(ops, " "))
for pat, c in pairs(refusals) do print(string.format("explicit-mode refusals '%s': %d", pat, c)) end
assert(stats.programs + stats.explicit_refused == PROGRAMS)
assert(stats.explicit_refused < stats.explicit / 2, "explicit mode refused most programs")
assert(stats.grads >= PROGRAMS / 6 and stats.grad_elems >= PROGRAMS / 2)
