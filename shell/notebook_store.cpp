// shell/notebook_store.cpp: the report's header and footer from the store and git (runs, meshes,
// compile and step-time summaries), and one `events` row per cell.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/base/git.h"
#include "engine/base/hash.h"
#include "engine/base/text.h"
#include "shell/context.h"
#include "shell/notebook.h"

namespace shell {
namespace {

std::string cell_text(const eng::SqlValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&v))
    return std::isfinite(*d) ? fmt::format("{:.4g}", *d) : "";
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return "";
}

CellValue to_table(const eng::QueryResult& q) {
  CellValue t;
  t.columns = q.columns;
  for (const auto& row : q.rows) {
    std::vector<std::string>& out = t.rows.emplace_back();
    for (const eng::SqlValue& v : row) out.push_back(cell_text(v));
  }
  return t;
}

// "?, ?, ?" for n placeholders.
std::string placeholders(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += i ? ", ?" : "?";
  return s;
}

// "data=2, fsdp=2" from Mesh('diloco': 1, 'data': 2, ...): the axes larger than 1.
std::string compact_mesh(std::string_view repr) {
  std::string out;
  for (size_t q = repr.find('\''); q != std::string_view::npos; q = repr.find('\'', q + 1)) {
    size_t end = repr.find("': ", q + 1);
    if (end == std::string_view::npos) break;
    std::string_view name = repr.substr(q + 1, end - q - 1);
    size_t digits = end + 3, stop = repr.find_first_not_of("0123456789", digits);
    std::string_view size = repr.substr(digits, stop - digits);
    if (!size.empty() && size != "1")
      out += fmt::format("{}{}={}", out.empty() ? "" : ", ", name, size);
    q = end + 1;
  }
  return out.empty() ? "1 device" : out;
}

// Orders rows by the position of their run_id (column 0) in `ids` (the runs' start order).
void order_by_run(CellValue* t, const std::vector<std::string>& ids) {
  auto pos = [&](const std::vector<std::string>& row) {
    return std::find(ids.begin(), ids.end(), row[0]) - ids.begin();
  };
  std::stable_sort(t->rows.begin(), t->rows.end(),
                   [&](const auto& a, const auto& b) { return pos(a) < pos(b); });
}

}  // namespace

std::string git_revision(const std::string& dir) {
  return eng::git_revision(dir.empty() ? "." : dir).substr(0, 7);
}

eng::Status add_store_summary(ShellContext& ctx, int64_t since_ms, ReportInfo* info) {
  if (!ctx.store) return eng::ok_status();  // nothing in this notebook used the store
  ENG_RETURN_IF_ERROR(ctx.store->flush());  // steps still buffered by live trainers
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  // Runs this host began in the store since the notebook started: the runs it created (the
  // store has no process id; another process on this host writing the same file at the same
  // time would be counted too).
  eng::SqlValue args[] = {since_ms, std::string(host)};
  ENG_ASSIGN_OR_RETURN(
      eng::QueryResult runs,
      ctx.store->query(
          "SELECT r.run_id, r.name, r.status, "
          "(SELECT value FROM params p WHERE p.run_id = r.run_id AND p.key = 'mesh') AS mesh, "
          "(SELECT count(*) FROM steps s WHERE s.run_id = r.run_id) AS steps "
          "FROM runs r WHERE r.start_ms >= ? AND r.host = ? ORDER BY r.start_ms, r.rowid",
          args));
  info->runs = to_table(runs);
  if (runs.rows.empty()) return eng::ok_status();
  std::vector<eng::SqlValue> ids;
  std::vector<std::string> id_order;
  std::set<std::string> seen;
  for (auto& row : info->runs.rows) {  // run_id, name, status, mesh, steps
    ids.emplace_back(row[0]);
    id_order.push_back(row[0]);
    if (!row[3].empty() && seen.insert(row[3]).second) info->meshes.push_back(row[3]);
    if (!row[3].empty()) row[3] = compact_mesh(row[3]);  // the full form is in info->meshes
  }
  std::string in = placeholders(ids.size());
  ENG_ASSIGN_OR_RETURN(
      eng::QueryResult compile,
      ctx.store->query(fmt::format("SELECT * FROM v_compile_summary WHERE run_id IN ({}) "
                                   "ORDER BY fn_name",
                                   in),
                       ids));
  ENG_ASSIGN_OR_RETURN(
      eng::QueryResult steps,
      ctx.store->query(fmt::format("SELECT * FROM v_step_time_pct WHERE run_id IN ({})", in), ids));
  info->compile_summary = to_table(compile);
  info->step_time = to_table(steps);
  order_by_run(&info->compile_summary, id_order);
  order_by_run(&info->step_time, id_order);
  return eng::ok_status();
}

namespace {

std::string json_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + eng::json_string(items[i]);
  return out + "]";
}

// The kept output of a `cache` cell: ", \"outputs\": [...], \"value\": {...}, \"from_ms\": N".
std::string cached_output_json(const CellRun& r, int64_t from_ms) {
  std::string out = ", \"outputs\": [";
  for (size_t i = 0; i < r.outputs.size(); ++i)
    out += fmt::format("{}[\"{}\", {}]", i ? ", " : "", r.outputs[i].kind == Output::kSvg ? "svg" : "text",
                       eng::json_string(r.outputs[i].data));
  out += "]";
  if (r.has_value) {
    std::vector<std::string> rows;
    for (const auto& row : r.value.rows) rows.push_back(json_list(row));
    std::string rows_json = "[";
    for (size_t i = 0; i < rows.size(); ++i) rows_json += (i ? ", " : "") + rows[i];
    out += fmt::format(", \"value\": {{\"text\": {}, \"svg\": {}, \"columns\": {}, \"rows\": {}]}}",
                       eng::json_string(r.value.text), eng::json_string(r.value.svg), json_list(r.value.columns), rows_json);
  }
  return out + fmt::format(", \"from_ms\": {}", from_ms);
}

std::string source_hash(const Cell& c) { return fmt::format("{:016x}", eng::hash_bytes(c.source)); }

// The strings of one query's first column.
eng::Result<std::vector<std::string>> strings(eng::MetricsStore* store, std::string_view sql,
                                              const std::string& json) {
  eng::SqlValue args[] = {json};
  ENG_ASSIGN_OR_RETURN(eng::QueryResult q, store->query(sql, args));
  std::vector<std::string> out;
  for (const auto& row : q.rows) out.push_back(cell_text(row[0]));
  return out;
}

// A cached cell's results from its event payload (SQLite's JSON functions do the parsing).
eng::Result<CellRun> cached_run(eng::MetricsStore* store, const std::string& payload) {
  CellRun r;
  eng::SqlValue args[] = {payload};
  ENG_ASSIGN_OR_RETURN(
      eng::QueryResult outs,
      store->query("SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') "
                   "FROM json_each(?, '$.outputs') ORDER BY CAST(key AS INTEGER)",
                   args));
  for (const auto& row : outs.rows)
    r.outputs.push_back({cell_text(row[0]) == "svg" ? Output::kSvg : Output::kText, cell_text(row[1])});
  ENG_ASSIGN_OR_RETURN(
      eng::QueryResult head,
      store->query("SELECT json_type(?1, '$.value'), json_extract(?1, '$.value.text'), "
                   "json_extract(?1, '$.value.svg'), json_extract(?1, '$.seconds'), json_extract(?1, '$.from_ms')",
                   args));
  if (head.rows.size() != 1) return eng::invalid_argument("notebook: bad cached cell payload");
  const auto& h = head.rows[0];
  r.has_value = cell_text(h[0]) == "object";
  r.value.text = cell_text(h[1]);
  r.value.svg = cell_text(h[2]);
  if (const auto* d = std::get_if<double>(&h[3])) r.seconds = *d;
  if (const auto* i = std::get_if<int64_t>(&h[4])) r.reused_from_ms = *i;
  if (r.reused_from_ms == 0) return eng::invalid_argument("notebook: cached cell payload lacks from_ms");
  if (r.has_value) {
    ENG_ASSIGN_OR_RETURN(r.value.columns,
                         strings(store, "SELECT value FROM json_each(?, '$.value.columns') ORDER BY CAST(key AS INTEGER)", payload));
    ENG_ASSIGN_OR_RETURN(std::vector<std::string> rows,
                         strings(store, "SELECT value FROM json_each(?, '$.value.rows') ORDER BY CAST(key AS INTEGER)", payload));
    for (const std::string& row : rows) {
      ENG_ASSIGN_OR_RETURN(std::vector<std::string> cells,
                           strings(store, "SELECT value FROM json_each(?) ORDER BY CAST(key AS INTEGER)", row));
      r.value.rows.push_back(std::move(cells));
    }
  }
  return r;
}

}  // namespace

eng::Status log_cell_events(ShellContext& ctx, const std::string& notebook, int64_t started_ms,
                            const std::vector<CellRun>& runs) {
  ENG_ASSIGN_OR_RETURN(eng::MetricsStore * store, ctx.open_store());
  for (const CellRun& r : runs) {
    if (!r.ran && !r.reused()) continue;
    const Cell& c = *r.cell;
    eng::EventRow e;
    e.kind = "cell";
    e.level = r.error.empty() || c.allow_error ? "info" : "error";
    e.message = fmt::format("{}: In [{}] (line {}){}{}", notebook, r.count, c.first_line,
                            c.title.empty() ? "" : " " + c.title, r.reused() ? " (cached)" : "");
    const bool keep = c.has_tag("cache") && r.error.empty();
    e.payload_json = fmt::format(
        "{{\"notebook\": {}, \"started_ms\": {}, \"cell\": {}, \"line\": {}, \"title\": {}, "
        "\"source_hash\": \"{}\", \"seconds\": {:.6f}, \"ok\": {}{}{}}}",
        eng::json_string(notebook), started_ms, r.count, c.first_line, eng::json_string(c.title), source_hash(c),
        r.seconds, r.error.empty() ? "true" : "false", r.reused() ? ", \"reused\": true" : "",
        keep ? cached_output_json(r, r.reused() ? r.reused_from_ms : started_ms) : "");
    ENG_RETURN_IF_ERROR(store->record_event(e).status());
  }
  return eng::ok_status();
}

eng::Result<std::vector<std::pair<int, CellRun>>> load_resume(ShellContext& ctx, const std::string& notebook,
                                                              const std::vector<Cell>& cells) {
  ENG_ASSIGN_OR_RETURN(eng::MetricsStore * store, ctx.open_store());
  eng::SqlValue args[] = {notebook};
  // The previous run: the latest started_ms among this notebook's cell events.
  ENG_ASSIGN_OR_RETURN(
      eng::QueryResult prev,
      store->query("WITH c AS (SELECT json_extract(payload, '$.cell') AS cell, "
                   "json_extract(payload, '$.source_hash') AS hash, json_extract(payload, '$.ok') AS ok, "
                   "json_extract(payload, '$.started_ms') AS started, payload FROM events "
                   "WHERE kind = 'cell' AND json_valid(payload) AND json_extract(payload, '$.notebook') = ?1) "
                   "SELECT cell, hash, ok, payload FROM c WHERE started = (SELECT max(started) FROM c) "
                   "ORDER BY cell",
                   args));
  std::vector<std::pair<int, CellRun>> out;
  int n = 0;
  for (const Cell& c : cells) {
    if (c.kind != CellKind::kCode || c.skip) continue;
    ++n;
    const std::vector<eng::SqlValue>* row = nullptr;
    for (const auto& r : prev.rows)
      if (const auto* i = std::get_if<int64_t>(&r[0]); i && *i == n) row = &r;
    const auto* ok = row ? std::get_if<int64_t>(&(*row)[2]) : nullptr;
    if (row == nullptr || cell_text((*row)[1]) != source_hash(c) || ok == nullptr || *ok != 1) break;
    const std::string payload = cell_text((*row)[3]);
    if (!c.has_tag("cache") || payload.find("\"from_ms\"") == std::string::npos) continue;
    ENG_ASSIGN_OR_RETURN(CellRun r, cached_run(store, payload));
    r.count = n;
    out.emplace_back(n, std::move(r));
  }
  return out;
}

}  // namespace shell
