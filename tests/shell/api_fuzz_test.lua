-- tests/shell/api_fuzz_test.lua: a thousand random calls of the Lua API (issues 16, 30): every sl.*
-- function, every method and metamethod of every bound type (__gc included), with random
-- arguments (wrong types, huge and NaN numbers, forged userdata, finalised objects). Each call
-- must return or raise a Lua error with a string message; the process must survive. Fixed seed.
local calls, errors = 0, 0
math.randomseed(1616)

-- Long-running or file-writing entry points stay out (their bad input is tested elsewhere).
local skip = {["sl.trainer"] = true, ["Trainer:train"] = true, ["plot.save"] = true,
              ["sl.timing"] = true, ["Trainer:step"] = true}

local function fresh_values()
  local cfg = sl.config{model = "llama-tiny", steps = 3, base_num_decoder_layers = 1,
                        max_target_length = 16, per_device_batch_size = 1}
  local mesh = sl.mesh{data = 2, devices = 2}
  local t = sl.trainer(cfg, mesh, {store = false})
  local values = {
    nil, true, false, 0, 1, -1, 2, 3, 2 ^ 31, 2 ^ 63, -2 ^ 63, 1e300, -1e300, 0 / 0, 1 / 0, 0.5,
    "", "data", "fsdp", "params/token_embedder/embedding", string.rep("x", 10000), "SELECT 1",
    {}, {1, 2, 3}, {data = 2}, {{"embed", {"fsdp"}}}, {dims = {0, 1}}, {verbose = true},
    {steps = 1, quiet = true}, {"data", "tensor"}, print, function() error("cb") end,
    mesh, sl.P("data"), sl.P(), cfg, t, t:compile(), t:step(), t:shardings(), sl.rules(),
    sl.NamedSharding(mesh, sl.P("data")), sl.sql("SELECT 1 AS a"), t:param("params/decoder/decoder_norm/scale"),
    debug.setmetatable(io.tmpfile(), debug.getmetatable(mesh)), coroutine.create(print),
  }
  return values
end

-- Every callable: sl.* and plot.* functions, then each bound type's methods and metamethods.
local targets = {}
for name, f in pairs(sl) do
  if type(f) == "function" and not skip["sl." .. name] then targets[#targets + 1] = {"sl." .. name, f} end
end
for name, f in pairs(plot) do
  if type(f) == "function" and not skip["plot." .. name] then targets[#targets + 1] = {"plot." .. name, f} end
end
local first = fresh_values()
for i = 1, 48 do
  local v = first[i]
  local mt = debug.getmetatable(v)
  if type(v) == "userdata" and mt and type(mt.__name) == "string" then
    local methods = type(mt.__index) == "table" and mt.__index or mt.__methods or {}
    for k, f in pairs(methods) do
      if type(f) == "function" and not skip[mt.__name .. ":" .. k] then
        targets[#targets + 1] = {mt.__name .. ":" .. k, f}
        skip[mt.__name .. ":" .. k] = true  -- once per type
      end
    end
    for _, meta in ipairs{"__gc", "__tostring", "__eq", "__index", "__len"} do
      if type(mt[meta]) == "function" and not skip[mt.__name .. "." .. meta] then
        targets[#targets + 1] = {mt.__name .. "." .. meta, mt[meta]}
        skip[mt.__name .. "." .. meta] = true
      end
    end
  end
end
table.sort(targets, function(a, b) return a[1] < b[1] end)
assert(#targets > 40, "only " .. #targets .. " callables found")

local values = fresh_values()
local nv = 48  -- the length of the values list, nils included
for round = 1, 1000 do
  if round % 200 == 0 then values = fresh_values() end  -- new objects after many were finalised
  local target = targets[math.random(#targets)]
  local args = {}
  local n = math.random(0, 4)
  for i = 1, n do args[i] = values[math.random(nv)] end
  local ok, err = pcall(target[2], table.unpack(args, 1, n))
  calls = calls + 1
  if not ok then
    errors = errors + 1
    assert(type(err) == "string", target[1] .. " raised a " .. type(err))
  end
end
collectgarbage()
collectgarbage()
print(string.format("api_fuzz_test ok: %d calls over %d callables, %d clean Lua errors, no crash",
                    calls, #targets, errors))
