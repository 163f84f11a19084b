-- tests/notebook/plot_test.lua: the plot module (spark, line, save, show) through the real binary.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua").expect_error
assert(sl.plot == plot and require("plot") == plot)
assert(sl.help(plot.line):find("plot.line{name = rows", 1, true))

-- Sparklines: eight levels from min to max, then min/max/last.
assert(plot.spark{1, 2, 3, 4, 5, 6, 7, 8} == "▁▂▃▄▅▆▇█  min 1  max 8  last 8", plot.spark{1, 2, 3, 4, 5, 6, 7, 8})
assert(plot.spark{3, 3} == "▁▁  min 3  max 3  last 3")
assert(plot.spark{} == "(no data)")
local long = {}
for i = 1, 1000 do long[i] = i end
local bars = plot.spark(long, 10):match("^(.-)  min")
assert(utf8.len(bars) == 10, bars)                                  -- averaged into 10 buckets
assert(plot.spark{{step = 0, loss = 5}, {step = 1, loss = 1}}:find("^█▁  min 1  max 5  last 1"))
assert(plot.spark{{0, 2}, {1, 4}}:find("last 4", 1, true))          -- {x, y} pairs
expect_error(function() plot.spark("x") end, "plot.spark: argument 'xs' expected")

-- Rows from the store: x = step, y = loss (rows.columns order), NULLs skipped. (sl.sql is
-- read-only unless asked to write.)
local w = {write = true}
sl.sql("CREATE TEMP TABLE t (run TEXT, step INTEGER, tokens REAL, loss REAL)", w)
for s = 0, 9 do
  if s == 5 then sl.sql("INSERT INTO t VALUES ('a', ?, ?, NULL)", w, s, s * 100)
  else sl.sql("INSERT INTO t VALUES ('a', ?, ?, ?)", w, s, s * 100, 10 - s) end
end
local rows = sl.sql("SELECT run, step, tokens, loss FROM t ORDER BY step")
local svg = plot.line{loss = rows}
local pts = svg:match('<polyline[^>]- points="([^"]*)"')
local n = select(2, pts:gsub(",", ","))
assert(n == 9, "9 points (the NULL loss skipped), got " .. n)
-- No step/loss columns: the first two numeric columns.
local svg2 = plot.line{tok = sl.sql("SELECT tokens, step FROM t")}
assert(svg2:find("<polyline", 1, true))

-- Several series: a legend, sorted names, titles and labels escaped for XML.
svg = plot.line{["b&b"] = {1, 2, 3}, a = {{1, 1}, {2, 4}}, title = "x < y", ylabel = "loss", logy = true}
assert(svg:find("^<svg xmlns=\"http://www.w3.org/2000/svg\""))
assert(svg:find('class="legend"', 1, true) and svg:find(">b&amp;b</text>", 1, true))
assert(svg:find(">x &lt; y</text>", 1, true) and svg:find("loss (log)", 1, true))
assert(svg:find('data-name="a"', 1, true) < svg:find('data-name="b&amp;b"', 1, true))
assert(select(2, svg:gsub("<polyline", "")) == 2)
assert(not plot.line{one = {1, 2}}:find('class="legend"', 1, true))      -- one series: no legend
assert(select(2, plot.line{s = {1, 3, 2}, ema = 0.5}:gsub("<polyline", "")) == 2)  -- raw + smoothed
expect_error(function() plot.line{} end, "plot.line: no series given")
expect_error(function() plot.line{{1, 2}} end, "series must be named")
expect_error(function() plot.line{s = "x"} end, "plot.line: argument 's' expected")
expect_error(function() plot.line{s = {1}, ema = 1} end, "ema must be in [0, 1)")

-- save and show (outside a notebook: a summary line).
assert(plot.save(svg, "p.svg") == "p.svg")
local f = assert(io.open("p.svg"))
assert(f:read("a") == svg)
f:close()
plot.show(svg)
expect_error(function() plot.show("not svg") end, "expected an SVG string")
print("plot_test ok")
