-- tests/shell/ergonomics_test.lua: the behaviours issue 15 item 13 found at odds with the docs:
-- `shardlab -h` lists every flag, "did you mean" has one wording and a distance cut-off,
-- m:shape() prints in mesh order, c.cache is documented and completes.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error
local bin = assert(os.getenv("SHARDLAB_BIN"), "SHARDLAB_BIN not set")

-- -h: every flag the binary takes, notebook mode's included.
local help = io.popen("'" .. bin .. "' -h"):read("a")
for _, flag in ipairs{"-e stat", "-i", "-l mod", "-v", "-E", "-W", "--db PATH", "--notebook F", "-o REPORT",
                      "--html", "-p name=value", "--allow-errors", "--resume", "-h, --help"} do
  assert(help:find("\n%s+" .. flag:gsub("%p", "%%%0")), "-h lacks " .. flag .. ":\n" .. help)
end

-- One wording, " (did you mean 'x'?)", and nothing suggested for a word that is not close.
expect_error(function() sl.config{learning_rat = 1} end, "sl.config: unknown key 'learning_rat' (did you mean 'learning_rate'?)")
expect_error(function() sl.config():get("stpes") end, "Config:get: unknown key 'stpes' (did you mean 'steps'?)")
expect_error(function() sl.config():set("stpes", 1) end, "Config:set: unknown key 'stpes' (did you mean 'steps'?)")
for _, f in ipairs{function() sl.config{bogus = 1} end, function() sl.config():get("bogus") end,
                   function() sl.mesh{bogus = 2} end} do
  local ok, err = pcall(f)
  assert(not ok and err:find("unknown key 'bogus'", 1, true) and not err:find("did you mean", 1, true), err)
end
expect_error(function() sl.mesh{fdsp = 2} end, "sl.mesh: unknown key 'fdsp' (did you mean 'fsdp'?)")

-- m:shape() keeps the mesh's axis order when printed (and is still a table by name).
local shape = sl.mesh{data = 2, fsdp = 2, devices = 4}:shape()
assert(shape.fsdp == 2 and shape.diloco == 1)
local printed = tostring(shape)
assert(printed:find("^{diloco = 1, data = 2, stage = 1, fsdp = 2, fsdp_transpose = 1,"), printed)
assert(sl.pretty(shape) == printed)

-- c.cache: a documented property of Compiled (so ?Compiled and completion list it).
local doc = sl.help("Compiled")
assert(doc:find("c.cache", 1, true) and doc:find("c.mesh", 1, true), doc)
local t = sl.trainer(sl.config{model = "llama-tiny", base_num_decoder_layers = 1, max_target_length = 16,
                               per_device_batch_size = 1}, nil, {store = false})
local c = t:compile()
assert(c.cache.outcome == "miss" or c.cache.outcome == "hit")
local methods = debug.getmetatable(c).__methods
assert(methods.cache ~= nil and methods.mesh ~= nil and methods.memory ~= nil, "c.cache must complete")
print("ergonomics_test ok")
