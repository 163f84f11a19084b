// engine/train/expert_load.cpp: t:experts()'s numbers and table from the last step's metrics.
#include "engine/train/expert_load.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "engine/model/moe.h"

namespace eng {

namespace {

// "moe/layer_<l>/expert_<e>/<kind>" -> (l, e, kind); false for other names.
bool parse_load_name(const std::string& name, int64_t& l, int64_t& e, std::string& kind) {
  char buf[16] = {};
  long long ll = 0, ee = 0;
  if (std::sscanf(name.c_str(), "moe/layer_%lld/expert_%lld/%15s", &ll, &ee, buf) != 3)
    return false;
  l = ll;
  e = ee;
  kind = buf;
  return l >= 0 && e >= 0 && e < 1 << 20 && l < 1 << 20;
}

std::string sparkline(const std::vector<double>& xs) {
  static const char* kBars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  const double hi = xs.empty() ? 0 : *std::max_element(xs.begin(), xs.end());
  std::string s;
  for (double x : xs)
    s += kBars[hi > 0 ? std::clamp(static_cast<int>(x / hi * 7.0 + 0.5), 0, 7) : 0];
  return s;
}

}  // namespace

Result<ExpertLoad> expert_load(Trainer& t, std::string_view fn) {
  const ModelConfig& m = t.config().model;
  if (!m.moe.enabled())
    return failed_precondition("{}: model {} has no experts (num_experts = {})", fn, m.name,
                               m.moe.num_experts);
  ENG_ASSIGN_OR_RETURN(StepMetrics sm, with_context(fn, t.last_step_metrics()));
  ExpertLoad out;
  std::map<int64_t, ExpertLoad::Layer>& layers = out.layers;
  const int64_t E = m.moe.num_experts;
  double lb = 0;
  for (const auto& [name, v] : sm.extra) {
    if (name == "learning/moe_lb_loss") lb = v;
    int64_t l = 0, e = 0;
    std::string kind;
    if (!parse_load_name(name, l, e, kind) || e >= E) continue;
    ExpertLoad::Layer& ll = layers[l];
    ll.tokens.resize(E);
    ll.dropped.resize(E);
    (kind == "tokens" ? ll.tokens : ll.dropped)[e] = v;
  }
  // The dropless dispatch (sparse_matmul) has no capacity: 0, and nothing is dropped.
  const int64_t C = m.moe.sparse_matmul ? 0 : moe_capacity(m.moe, t.config().max_target_length);
  const std::string limit = m.moe.sparse_matmul
                                ? std::string("none dropped (dropless: sparse_matmul)")
                                : fmt::format("dropped over the capacity of {} per sequence", C);
  std::string text = fmt::format(
      "expert load at step {}: tokens routed to each expert (top-{} of {}), {}; "
      "learning/moe_lb_loss {:.6g}\n{:<6}",
      sm.step, m.moe.num_experts_per_tok, E, limit, lb, "layer");
  for (int64_t e = 0; e < E; ++e) text += fmt::format(" {:>9}", fmt::format("expert_{}", e));
  text += fmt::format(" {:>9}  load\n", "dropped");
  for (const auto& [l, load] : layers) {
    double dropped = 0;
    text += fmt::format("{:<6}", l);
    for (int64_t e = 0; e < E; ++e) {
      text += fmt::format(" {:>9.0f}", load.tokens[e]);
      dropped += load.dropped[e];
    }
    text += fmt::format(" {:>9.0f}  {}\n", dropped, sparkline(load.tokens));
  }
  out.step = sm.step;
  out.capacity = C;
  out.text = std::move(text);
  return out;
}

}  // namespace eng
