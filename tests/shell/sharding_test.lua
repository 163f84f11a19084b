-- tests/shell/sharding_test.lua: t:shardings / t:audit / sl.visualize / sl.logical_to_mesh /
-- sl.rules through the real binary, against MaxText's worked examples (its utils/sharding.py).
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error
local function count(s, pat)
  local n = 0
  for _ in s:gmatch(pat) do n = n + 1 end
  return n
end

-- sl.logical_to_mesh and sl.rules: MaxText's wrapper (size-1 axes dropped) on fsdp=4, tensor=2.
local m = sl.mesh{fsdp = 4, tensor = 2}
assert(tostring(sl.logical_to_mesh({"embed", "mlp"}, m)) == "P('fsdp', 'tensor')")
assert(tostring(sl.logical_to_mesh({"mlp", "embed"}, m)) == "P('tensor', 'fsdp')")
assert(tostring(sl.logical_to_mesh({"embed", "q_heads", "kv"}, m)) == "P('fsdp', 'tensor', None)")
assert(tostring(sl.logical_to_mesh({"vocab", "embed_vocab"}, m)) == "P('tensor', 'fsdp')")
assert(tostring(sl.logical_to_mesh({"norm"}, m)) == "P('tensor',)" or
       tostring(sl.logical_to_mesh({"norm"}, m)) == "P('tensor')")
assert(tostring(sl.logical_to_mesh({"embed", false, "mlp"}, m)) == "P('fsdp', None, 'tensor')")
assert(tostring(sl.logical_to_mesh({"activation_embed_and_logits_batch", "activation_norm_length"},
                                   sl.mesh{data = 2, fsdp = 2})) == "P(('data', 'fsdp'), None)")
-- Overrides merge as MaxText's logical_axis_rules: 'mlp' -> [] replicates the MLP dim.
assert(tostring(sl.logical_to_mesh({"embed", "mlp"}, m, {{"mlp", {}}})) == "P('fsdp', None)")
local rules = sl.rules()
assert(#rules == 76 and rules[1][1] == "circular_repeats")
assert(tostring(rules):find("['embed', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']]", 1, true))
local merged = sl.rules{{"embed", {"tensor"}}}
assert(merged[#merged][1] == "embed" and merged[#merged][2][1] == "tensor")
-- 'mlp' (rule 48) now comes before the appended 'embed' rule and takes tensor first.
assert(tostring(sl.logical_to_mesh({"embed", "mlp"}, m, merged)) == "P(None, 'tensor')")
assert(#sl.rules({{"embed", {"fsdp"}}}, {replace = true}) == 1)
expect_error(function() sl.logical_to_mesh("embed", m) end,
             "sl.logical_to_mesh: argument 'names' expected table, got string")
expect_error(function() sl.logical_to_mesh({"embed"}, "mesh") end,
             "sl.logical_to_mesh: argument 'mesh' expected Mesh, got string")
expect_error(function() sl.logical_to_mesh({"embed", 3}, m) end, "names[2]")
expect_error(function() sl.rules{{"embed", 5}} end, "rule #1 ('embed') expected mesh axes")
expect_error(function() sl.visualize({4, -4}) end, "expected positive integer dims, dim 1 is number -4")
expect_error(function() sl.logical_to_mesh({"embed", "embed"}, m) end, "more than once")

-- NamedSharding prints JAX's form; sl.typeof the jax.typeof form.
local s = sl.NamedSharding(m, sl.P("fsdp", "tensor"))
assert(tostring(s):find("^NamedSharding%(mesh=Mesh%("))
assert(tostring(s):find("spec=P('fsdp', 'tensor'))", 1, true))
assert(s.spec == sl.P("fsdp", "tensor"))
assert(tostring(sl.typeof({256, 768}, s)) == "f32[256@fsdp,768@tensor]")
expect_error(function() sl.NamedSharding(m, sl.P("fsdpp")) end, "names axis 'fsdpp', which is not in Mesh(")

-- sl.visualize on (shape, sharding) pairs: one cell per device, labelled "CPU i".
local g = sl.visualize({256, 768}, s)
assert(count(g, "CPU %d") == 8, g)
assert(g:find("CPU 0", 1, true) and g:find("CPU 7", 1, true))
local rep = sl.visualize({8, 8}, sl.P("fsdp"), m)   -- replicated over tensor: cells "CPU 0,1"
assert(rep:find("CPU 0,1", 1, true), rep)
assert(count(rep, "CPU %d") == 4)
expect_error(function() sl.visualize({256, 768}, sl.P("fsdpp"), m) end, "fsdpp")
expect_error(function() sl.visualize({255, 768}, s) end, "255")
expect_error(function() sl.visualize("wi") end, "sl.visualize: argument #1 expected a row of t:shardings() or a shape")
expect_error(function() sl.visualize({4, 4}, 7) end, "argument 'sharding' expected NamedSharding or PartitionSpec")
-- dims are 1-based, as Lua numbers things: 0 and rank + 1 are out of range, naming the rank.
expect_error(function() sl.visualize({8, 8, 8}, sl.P("fsdp"), m, {dims = {1, 4}}) end,
             "sl.visualize: option 'dims' {1, 4} out of range for rank 3 (dims are 1-based: 1 to 3)")
expect_error(function() sl.visualize({8, 8, 8}, sl.P("fsdp"), m, {dims = {0}}) end,
             "option 'dims' {0} out of range for rank 3 (dims are 1-based: 1 to 3)")
-- Rank 3: pick two dims; the header numbers them as they were named.
local g3 = sl.visualize({8, 8, 8}, sl.P("fsdp", nil, "tensor"), m, {dims = {1, 3}})
assert(count(g3, "CPU %d") == 8, g3)
assert(g3:find("showing dims 1 (down) and 3 (across) of shape (8, 8, 8)", 1, true), g3)
local g3b = sl.visualize({8, 8, 8}, sl.P("fsdp", nil, "tensor"), m, {dims = {3, 1}})
assert(g3b:find("showing dims 3 (down) and 1 (across)", 1, true), g3b)
local g3c = sl.visualize({8, 8, 8}, sl.P("fsdp", nil, "tensor"), m, {dims = {1}})
assert(g3c:find("showing dim 1 of shape (8, 8, 8)\ndim 3 is sharded too (2 ways)", 1, true), g3c)

-- A trainer on fsdp=4 x tensor=2: every row matches MaxText's worked examples.
local cfg = sl.config{model = "llama-tiny", base_num_decoder_layers = 2, max_target_length = 32,
                      per_device_batch_size = 1, scan_layers = false}  -- layers_<l> paths
local t = sl.trainer(cfg, m, {shape_only = true})
local tab = t:shardings()
assert(#tab == 3 * (1 + 2 * 9 + 2) + 1 + 6, #tab)  -- params, mu, nu; step; 6 batch arrays
local paths = t:paths()  -- what the REPL completes t:param("/t:visualize(" strings from
assert(#paths == #tab and paths[1] == tab[1].path and paths[#paths] == tab[#tab].path, #paths)
local function row(path)
  local r = tab:find(path)
  assert(r, "no row " .. path)
  return r
end
local wi = row("params/decoder/layers_0/mlp/wi_0/kernel")
assert(tostring(wi.spec) == "P('fsdp', 'tensor')")
assert(wi.type == "f32[256@fsdp,704@tensor]", wi.type)
assert(wi.logical == "('embed', 'mlp')")
assert(wi.physical == "('fsdp', 'tensor')")
assert(wi.local_shape[1] == 64 and wi.local_shape[2] == 352)
assert(wi.bytes == 64 * 352 * 4)
assert(wi.role == "param" and wi.dtype == "f32")
assert(tostring(row("params/decoder/layers_0/mlp/wo/kernel").spec) == "P('tensor', 'fsdp')")
assert(tostring(row("params/token_embedder/embedding").spec) == "P('tensor', 'fsdp')")
assert(row("params/token_embedder/embedding").bytes == 128 * 64 * 4)
local norm = row("params/decoder/decoder_norm/scale")
assert(tostring(norm.spec) == tostring(sl.P("tensor")) and norm.local_shape[1] == 128)
assert(tostring(row("params/decoder/layers_1/self_attention/query/kernel").spec) == "P('fsdp', 'tensor', None)")
assert(tostring(row("inputs").spec) == "P('fsdp', None)")
assert(row("inputs").type == "i32[8@fsdp,32]", row("inputs").type)
assert(row("inputs").local_shape[1] == 2)
-- Optimizer state follows its parameter.
assert(tostring(row("opt_state/mu/decoder/layers_0/mlp/wi_0/kernel").spec) == "P('fsdp', 'tensor')")
assert(tostring(sl.typeof(wi)) == wi.type)
-- Iteration, the printed forms and the total.
local n, sum = 0, 0
for _, r in ipairs(tab) do n, sum = n + 1, sum + r.bytes end
assert(n == #tab and sum == tab:bytes())
local text = tostring(tab)
assert(text:find("^fsdp: 4, tensor: 2 %(8 devices%)"), text:sub(1, 80))
assert(text:find("params/decoder/layers_0/mlp/wi_0/kernel%s+f32%[256@fsdp,704@tensor%]%s+%('embed', 'mlp'%)%s+P%('fsdp', 'tensor'%)%s+%(64, 352%)"))
local dump = tab:dump()
assert(dump:find("^fsdp: 4, tensor: 2\n"))
assert(dump:find(" params/decoder/layers_0/mlp/wi_0/kernel\n    Shape:     f32[256@fsdp,704@tensor]\n" ..
                 "    Logical:   ('embed', 'mlp')\n    Physical:  ('fsdp', 'tensor')\n", 1, true))
assert(tostring(wi):find("Physical:  ('fsdp', 'tensor')", 1, true))
local only = t:shardings("mlp/wi_0")
assert(#only == 3 * 2, #only)  -- two layers x (param, mu, nu)

-- Visualize rows and trainer arrays.
local gw = sl.visualize(wi)
assert(gw:find("params/decoder/layers_0/mlp/wi_0/kernel  f32[256@fsdp,704@tensor]", 1, true))
assert(count(gw, "CPU %d") == 8)
local gq = t:visualize("params/decoder/layers_0/self_attention/query/kernel", {dims = {1, 2}})
assert(count(gq, "CPU %d") == 8, gq)
expect_error(function() t:visualize("params/decoder/layers_0/mlp/wi0/kernel") end,
             "did you mean 'params/decoder/layers_0/mlp/wi_0/kernel'?")
expect_error(function() t:visualize(42) end, "Trainer:visualize: argument 'path' expected string")

-- The audit: fsdp=4 x tensor=2 shards every large param on both axes; the norms miss fsdp.
local a = t:audit()
assert(not a.exceeds and a.tolerance == 0.02)
assert(a.target_axes[1] == "fsdp" and a.target_axes[2] == "tensor")
assert(a.offenders[1].path:find("norm/scale$") and a.offenders[1].unsharded_axes[1] == "fsdp")
-- Replicating the MLP dim (a rule override) leaves the MLP kernels unsharded on tensor.
local t2 = sl.trainer(sl.config{model = "llama-tiny", base_num_decoder_layers = 2, max_target_length = 32,
                                per_device_batch_size = 1, logical_axis_rules = {{"mlp", {}}},
                                scan_layers = false},
                      m, {shape_only = true})
assert(tostring(t2:shardings():find("params/decoder/layers_0/mlp/wi_0/kernel").spec) == "P('fsdp', None)")
local a2 = t2:audit()
assert(a2.exceeds, a2.summary)
assert(a2.offenders[1].path:find("/mlp/") and a2.offenders[1].unsharded_axes[1] == "tensor", a2.summary)
assert(tostring(a2):find("Unsharded parameter percentage", 1, true), tostring(a2))
assert(t2:audit(0.9).exceeds == false)
expect_error(function() t2:audit(2) end, "sharding_tolerance must be in [0, 1], got 2")
expect_error(function() t2:audit("x") end, "Trainer:audit: argument 'tolerance' expected number")

-- Bad input on a trainer: a rule naming an unknown mesh axis, a malformed rule.
expect_error(function() sl.config{logical_axis_rules = {{"embed", {"fsdpp"}}}} end,
             "rule #1 ('embed') names mesh axis 'fsdpp', which is not one of MaxText's mesh axes (did you mean 'fsdp'?)")
local bad = sl.trainer(sl.config{model = "llama-tiny", base_num_decoder_layers = 1, max_target_length = 32,
                                 per_device_batch_size = 1, logical_axis_rules = "[['embed', ['fsdpp']]]"},
                       m, {shape_only = true})
expect_error(function() bad:shardings() end, "names mesh axis 'fsdpp'")
expect_error(function() bad:compile() end, "names mesh axis 'fsdpp'")
expect_error(function() sl.rules{{"embed", {"tensr"}}} end, "did you mean 'tensor'?")
expect_error(function() sl.config{logical_axis_rules = {{"embed"}}} end, "rule #1 ('embed') expected mesh axes")
local unparsable = sl.trainer(sl.config{model = "llama-tiny", base_num_decoder_layers = 1, max_target_length = 32,
                                         per_device_batch_size = 1, logical_axis_rules = "[['embed', 'fsdp'"},
                               m, {shape_only = true})
expect_error(function() unparsable:shardings() end, "logical_axis_rules: expected ']' at position 17")

-- Snapshots: a recorded run stores its table once per step, with the mesh. (The store file
-- persists across test runs: count only this run's snapshots.)
local count_snaps = "SELECT count(DISTINCT snapshot_id) AS n, count(*) AS rows FROM tensor_shardings"
local before = sl.sql(count_snaps)[1]
local run = sl.trainer(sl.config{model = "llama-tiny", base_num_decoder_layers = 1, max_target_length = 32,
                                 per_device_batch_size = 1, steps = 2, scan_layers = false},
                       sl.mesh{data = 2, fsdp = 2, tensor = 2})
local rt = run:shardings()
run:shardings()
local snaps = sl.sql(count_snaps)[1]
assert(snaps.n - before.n == 1 and snaps.rows - before.rows == #rt, snaps.n - before.n)
local stored = sl.sql([[SELECT ts.spec, ts.type, ts.bytes_per_device, m.repr FROM tensor_shardings ts
                        JOIN meshes m USING (mesh_id) WHERE ts.path = ? ORDER BY ts.rowid DESC]], "params/decoder/layers_0/mlp/wi_0/kernel")
assert(stored[1].spec == "P('fsdp', 'tensor')" and stored[1].type == "f32[256@fsdp,704@tensor]")
assert(stored[1].bytes_per_device == 128 * 352 * 4)
assert(stored[1].repr:find("'data': 2", 1, true))
local ra = run:audit()
assert(#ra.offenders > 0 and ra.offenders[1].unsharded_axes[1] == "fsdp")
-- The rule that fired for each dim (issue 11): MaxText's worked example wo (mlp, embed) on
-- fsdp=4, tensor=2: 'mlp' #48 takes fsdp_transpose, so 'embed' #50 is skipped and #51 fires.
local tr = sl.trainer(sl.config{model = "llama-tiny", per_device_batch_size = 1, scan_layers = false},
                      sl.mesh{fsdp = 4, tensor = 2, devices = 8}, {shape_only = true})
local wo = tr:shardings():find("params/decoder/layers_0/mlp/wo/kernel")
assert(wo.rules[1].logical == "mlp" and wo.rules[1].fired == 48, wo.rules[1].fired)
assert(wo.rules[1].rule == "['mlp', ['fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive']]")
assert(wo.rules[1].axes[1] == "tensor" and #wo.rules[1].axes == 1)
assert(wo.rules[2].logical == "embed" and wo.rules[2].fired == 51 and wo.rules[2].axes[1] == "fsdp")
assert(#wo.rules[2].skipped == 1 and wo.rules[2].skipped[1].rule == 50)
assert(wo.rules[2].skipped[1].reason == "mesh axis 'fsdp_transpose' is already used by dim 0 ('mlp', #48)",
       wo.rules[2].skipped[1].reason)
local plain = tostring(tr:shardings("layers_0/mlp/wo"))
assert(plain:find("bytes/device  rules\n", 1, true), plain)
assert(plain:find("('mlp' #48, 'embed' #51)", 1, true), plain)
assert(not plain:find("skipped", 1, true))
local why = tostring(tr:shardings("layers_0/mlp/wo", {skipped = true}))
assert(why:find("    dim 1 'embed': fired #51 ['embed', ['fsdp', 'context', 'context_usp_ulysses', 'expert']] -> 'fsdp'\n", 1, true), why)
assert(why:find("      skipped #50 ['embed', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']]: " ..
                "mesh axis 'fsdp_transpose' is already used by dim 0 ('mlp', #48)", 1, true), why)
assert(tostring(tr:shardings{skipped = true}):find("dim 0 'norm': fired #52 ['norm', ['tensor']] -> 'tensor'", 1, true))
-- A later rule of a settled name is skipped as such; the step counter has no names.
local seq = tr:shardings():find("inputs")
assert(seq.rules[1].fired == 2 and seq.rules[2].logical == "activation_norm_length")
assert(tostring(tr:shardings("step")):find("  -\n", 1, true))
-- The merged list numbers: llama2-7b's ['norm', 'fsdp'] is appended last (#76).
local t7 = sl.trainer(sl.config{model = "llama2-7b", per_device_batch_size = 1},
                      sl.mesh{fsdp = 4, devices = 4}, {shape_only = true})
local norm = t7:shardings():find("params/decoder/decoder_norm/scale")
assert(norm.rules[1].fired == 76 and norm.rules[1].rule == "['norm', 'fsdp']" and tostring(norm.spec) == "P('fsdp')")
expect_error(function() tr:shardings("wo", {skiped = true}) end, "unknown key 'skiped' (did you mean 'skipped'?)")
expect_error(function() tr:shardings("wo", 3) end, "Trainer:shardings: argument 'options' expected a table {skipped = true}")
print("sharding_test ok")
