-- tests/shell/printing_test.lua: printing for people (issue 15 item 8): arrays and big tables
-- summarised, sl.sql results as an aligned table in SELECT order, c:temps as a table with names
-- and layers, compile output quiet in scripts (verbose names the mesh), a Compiled names its mesh.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error
for _, suffix in ipairs{"", "-wal", "-shm"} do os.remove(sl.db_path() .. suffix) end

local function lines(s) return select(2, s:gsub("\n", "")) + 1 end

-- Long arrays and big tables are summarised; short ones print whole.
local big = {}
for i = 1, 65536 do big[i] = i end
local s = sl.pretty(big)
assert(s == "{1, 2, 3, 4, 5, 6, 7, 8, ..., 65535, 65536} (65536 items)", s)
assert(sl.pretty({1, 2, 3}) == "{1, 2, 3}")
local keys = {}
for i = 1, 100 do keys["k" .. string.format("%03d", i)] = i end
s = sl.pretty(keys)
assert(s:find("(100 keys)", 1, true) and lines(s) < 50, s)

-- t:param: still a Lua array, printed as path, type, statistics and a few values.
local cfg = sl.config{model = "llama-tiny", steps = 3, base_num_decoder_layers = 2,
                      max_target_length = 16, per_device_batch_size = 1}
local t = sl.trainer(cfg, sl.mesh{data = 2, devices = 2})
local emb = t:param("params/token_embedder/embedding")
assert(#emb == 65536 and type(emb[1]) == "number")
assert(emb.type == "f32[256,256]" and emb.shape[1] == 256 and emb.shape[2] == 256)
s = tostring(emb)
assert(s:find("^params/token_embedder/embedding: f32%[256,256%] %(65536 values%) min ") and lines(s) == 2, s)
assert(lines(sl.pretty(emb)) == 2)

-- Compile: quiet in a script; verbose prints MaxText's lines, each naming the mesh.
local out = {}
local real_print = print
print = function(...) out[#out + 1] = table.concat({...}, "\t") end
local c = t:compile()
assert(#out == 0, "compile must be quiet in a script")
t:compile{verbose = true}
print = real_print
assert(#out == 1, #out)
local printed = {}
for l in out[1]:gmatch("[^\n]+") do printed[#printed + 1] = l end
assert(#printed == 2)
for _, l in ipairs(printed) do
  assert(l:find("^%[train_step on Mesh%('data': 2%) %(2 devices%)%] "), l)
end
assert(printed[1]:find("Total estimated memory size", 1, true))
expect_error(function() t:compile{verbos = true} end, "did you mean 'verbose'")
assert(tostring(c):find("Mesh('data': 2) (2 devices)", 1, true), tostring(c))
assert(c.mesh == sl.mesh{data = 2, devices = 2})

-- c:temps(n): rows with name, type, size, live range, op, layer; printed as a table.
local temps = c:temps(5)
assert(#temps == 5 and temps.columns[1] == "name" and temps[1].bytes >= temps[2].bytes)
assert(type(temps[1].name) == "string" and temps[1].first <= temps[1].last and temps[1].layer ~= nil)
assert(c:text():find("\n%s*" .. temps[1].name:match("^%a+") .. ":"), "the name is the value's name in c:text()")
s = sl.pretty(temps, {rows = true})
assert(lines(s) == 8, s)  -- header, rule, 5 rows, count
assert(s:find("^name%s+type%s+size%s+bytes%s+first%s+last%s+op%s+layer%s+offset\n"), s)
assert(tostring(temps) == s)

-- sl.sql: an aligned table in SELECT order (not alphabetical), still an array of rows.
t:train{steps = 3, quiet = true}
local rows = sl.sql("SELECT step, loss, step_time_s AS a_time FROM steps ORDER BY step DESC LIMIT 3")
assert(#rows == 3 and rows[1].step == 2 and rows.columns[3] == "a_time")
s = tostring(rows)
local header = s:match("^[^\n]+")
assert(header:find("^step%s+loss%s+a_time$"), header)
assert(lines(s) == 6, s)  -- header, rule, 3 rows, "(3 rows)"
assert(s:find("\n%-%-%-%-  %-%-%-"), s)
assert(s:find("\n   2  "), "numbers are right-aligned: " .. s)
assert(sl.pretty(rows, {rows = true}) == s)
print("printing_test ok")
