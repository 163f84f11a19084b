-- tests/shell/hostile_test.lua: Lua code that attacks the bindings (issue 16 items 1, 2, 5) gets a
-- clear Lua error and the process survives: finalisers called by hand, forged metatables, C++
-- exceptions inside a binding, a `print` that raises inside t:compile().
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error

-- Metatables are protected: getmetatable gives the type's name, and it cannot be replaced.
local m = sl.mesh{data = 2, devices = 2}
assert(getmetatable(m) == "Mesh", tostring(getmetatable(m)))
expect_error(function() getmetatable(m).__gc(m) end, "attempt to call a nil value")
expect_error(function() setmetatable(sl.rules(), {}) end, "cannot change a protected metatable")
assert(m:devices() == 2)

-- __gc called by hand (through the debug library): the value is dead, not freed twice.
local gc = debug.getmetatable(m).__gc
gc(m)
expect_error(function() m:devices() end, "Mesh:devices: argument #1 is a Mesh that was already finalised")
expect_error(function() return tostring(m) end, "already finalised")
expect_error(function() gc(m) end, "Mesh.__gc: this Mesh was already finalised")
assert(not (m == sl.mesh{data = 2, devices = 2}))

-- Type confusion: a foreign userdata given a Mesh's metatable is not a Mesh.
local u = debug.setmetatable(io.tmpfile(), debug.getmetatable(sl.mesh{}))
expect_error(function() return u:devices() end, "Mesh:devices: argument #1 expected a real Mesh")
-- ... nor is one bound type passed as another.
local p = sl.P("data")
expect_error(function() return debug.getmetatable(m).__methods.devices(p) end, "expected Mesh, got PartitionSpec")

-- A trainer finalised by hand: its methods and its step handles fail cleanly.
local cfg = sl.config{model = "llama-tiny", steps = 4, base_num_decoder_layers = 1,
                      max_target_length = 16, per_device_batch_size = 1}
local t = sl.trainer(cfg, nil, {store = false})
local h = t:step()
assert(h.loss > 0)
local h2 = t:step()
debug.getmetatable(t).__gc(t)
expect_error(function() t:step() end, "Trainer:step: argument #1 is a Trainer that was already finalised")
expect_error(function() return h2.loss end, "the trainer of step 1 was already finalised")
expect_error(function() return h2:wait() end, "already finalised")
expect_error(function() return tostring(t) end, "already finalised")

-- A 2^30-row embedding is refused before anything is allocated (engine/base/limits.h): a Lua
-- error, never an exception or an abort. (lua_entry also turns any C++ exception into one.)
expect_error(function() sl.trainer(sl.config{vocab_size = 2 ^ 30}, nil, {store = false}) end,
             "sl.trainer: ")

-- t:compile calls the user's print only after its C++ frames are gone (issue 16 item 5): a
-- print that raises gives its error, and the trainer still works afterwards.
local t2 = sl.trainer(cfg, nil, {store = false})
local real_print = print
print = function() error("print refused") end
expect_error(function() t2:compile{verbose = true} end, "print refused")
print = real_print
local c = t2:compile()  -- quiet in a script: print is not called
assert(tostring(c):find("^Compiled%(train_step: %d+ instructions, Mesh%(1 device%), peak"), tostring(c))
assert(t2:step().loss > 0)
collectgarbage()
collectgarbage()
print("hostile_test ok")
