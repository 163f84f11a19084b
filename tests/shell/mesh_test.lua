-- tests/shell/mesh_test.lua: sl.mesh and sl.P print JAX's forms and reject bad input with clear messages.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error

local m = sl.mesh{data = 2, fsdp = -1, tensor = 2, devices = 8}
assert(tostring(m) == "Mesh('diloco': 1, 'data': 2, 'stage': 1, 'fsdp': 2, 'fsdp_transpose': 1, " ..
  "'context': 1, 'context_usp_ulysses': 1, 'context_autoregressive': 1, 'tensor': 2, " ..
  "'tensor_sequence': 1, 'expert': 1, 'autoregressive': 1, axis_types=(Auto, Auto, Auto, Auto, " ..
  "Auto, Auto, Auto, Auto, Auto, Auto, Auto, Auto))", tostring(m))
assert(m:devices() == 8 and m:size("fsdp") == 2 and m:mode() == "auto")
assert(#m:axis_names() == 12 and m:axis_names()[2] == "data")
assert(m:shape().tensor == 2 and m:shape().expert == 1)
assert(m == sl.mesh{data = 2, fsdp = 2, tensor = 2}, "meshes compare by value")
assert(m ~= sl.mesh{data = 2, fsdp = 2, tensor = 2, mode = "explicit"})
local e = sl.mesh{fsdp = 4, mode = "explicit"}
assert(tostring(e):find("'fsdp': 4", 1, true) and tostring(e):find("axis_types=(Explicit,", 1, true))
assert(sl.mesh{}:devices() == 1)

-- Bad input: both numbers named, argument names and expectations, did-you-mean.
expect_error(function() sl.mesh{data = 2, tensor = 4, devices = 7} end,
             "Number of devices per slice 7 does not match the product of the ICI parallelism 8")
expect_error(function() sl.mesh{data = "two"} end, "sl.mesh: argument 'data' expected integer, got string")
expect_error(function() sl.mesh{data = 1.5} end, "sl.mesh: argument 'data' expected integer, got number (1.5)")
expect_error(function() sl.mesh{data = 2^40, fsdp = 2^40} end,
             "sl.mesh: the product of the axis sizes overflows at fsdp=1099511627776")
expect_error(function() sl.mesh{dta = 2} end, "sl.mesh: unknown key 'dta' (did you mean 'data'?)")
expect_error(function() sl.mesh{fsdp = -1} end, "sl.mesh: fsdp=-1 needs devices=N to fill it")
expect_error(function() sl.mesh{fsdp = -1, devices = 6, data = 4} end, "6 devices are not divisible by 4")
expect_error(function() sl.mesh{mode = "manual"} end, "argument 'mode' expected \"auto\" or \"explicit\"")
expect_error(function() sl.mesh(8) end, "sl.mesh: argument 'options' expected table, got number")
expect_error(function() m:size("nope") end, "Mesh:size: no axis 'nope'")
expect_error(function() m.devices(42) end, "Mesh:devices: argument #1 expected Mesh, got number")

-- PartitionSpec: nil -> None, string, table -> tuple.
local p = sl.P("fsdp", nil, {"data", "tensor"})
assert(tostring(p) == "P('fsdp', None, ('data', 'tensor'))", tostring(p))
assert(tostring(sl.P()) == "P()", tostring(sl.P()))
assert(tostring(sl.P(nil)) == "P(None)", tostring(sl.P(nil)))
assert(tostring(sl.P("data")) == "P('data')", tostring(sl.P("data")))
assert(p:rank() == 3 and #p:dims()[2] == 0 and p:dims()[3][2] == "tensor")
assert(p == sl.P("fsdp", nil, {"data", "tensor"}) and p ~= sl.P("fsdp"))
expect_error(function() sl.P("data", 3) end, "sl.P: argument #2 expected string, table of strings or nil, got number")
expect_error(function() sl.P({"data", 1}) end, "expected table of strings, item 2 is number")

-- The session survives all of the above.
assert(sl.mesh{data = 2}:devices() == 2)
print("mesh_test: ok")
