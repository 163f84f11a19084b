-- tests/shell/limits_test.lua: array sizes are checked against kMaxArrayBytes
-- (engine/base/limits.h) before anything is allocated (issue 16 item 2): the error names the
-- array, its size and the limit, and a shape_only trainer (which allocates nothing) still works.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error

local huge = sl.config{vocab_size = 2 ^ 30}
expect_error(function() sl.trainer(huge, nil, {store = false}) end,
             "parameter 'params/token_embedder/embedding': array f32 (1073741824, 256) needs " ..
             "1099511627776 bytes, over the limit of 68719476736 bytes per array")
-- Nothing was half-built: the process goes on and a normal trainer works.
local plan = sl.trainer(huge, nil, {shape_only = true})
assert(plan ~= nil)
local t = sl.trainer(sl.config{base_num_decoder_layers = 1, max_target_length = 16,
                               per_device_batch_size = 1, steps = 1}, nil, {store = false})
t:train{quiet = true}
print("limits_test: ok")
