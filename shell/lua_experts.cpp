// shell/lua_experts.cpp: t:experts() (shell/lua_experts.h).
#include "shell/lua_experts.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/model/moe.h"

namespace shell {

namespace {

struct LayerLoad {
  std::vector<double> tokens, dropped;
};

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
  for (double x : xs) s += kBars[hi > 0 ? std::clamp(static_cast<int>(x / hi * 7.0 + 0.5), 0, 7) : 0];
  return s;
}

int experts_tostring(lua_State* L) {
  lua_getfield(L, 1, "text");
  return 1;
}

}  // namespace

Result<int> push_trainer_experts(lua_State* L, eng::Trainer& t) {
  constexpr std::string_view fn = "Trainer:experts";
  const eng::ModelConfig& m = t.config().model;
  if (!m.moe.enabled())
    return eng::failed_precondition("{}: model {} has no experts (num_experts = {})", fn, m.name,
                                    m.moe.num_experts);
  ENG_ASSIGN_OR_RETURN(eng::StepMetrics sm, with_context(fn, t.last_step_metrics()));
  std::map<int64_t, LayerLoad> layers;
  const int64_t E = m.moe.num_experts;
  double lb = 0;
  for (const auto& [name, v] : sm.extra) {
    if (name == "learning/moe_lb_loss") lb = v;
    int64_t l = 0, e = 0;
    std::string kind;
    if (!parse_load_name(name, l, e, kind) || e >= E) continue;
    LayerLoad& ll = layers[l];
    ll.tokens.resize(E);
    ll.dropped.resize(E);
    (kind == "tokens" ? ll.tokens : ll.dropped)[e] = v;
  }
  const int64_t C = eng::moe_capacity(m.moe, t.config().max_target_length);
  std::string text = fmt::format(
      "expert load at step {}: tokens routed to each expert (top-{} of {}), dropped over the "
      "capacity of {} per sequence; learning/moe_lb_loss {:.6g}\n{:<6}",
      sm.step, m.moe.num_experts_per_tok, E, C, lb, "layer");
  for (int64_t e = 0; e < E; ++e) text += fmt::format(" {:>9}", fmt::format("expert_{}", e));
  text += fmt::format(" {:>9}  load\n", "dropped");
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, sm.step);
  lua_setfield(L, -2, "step");
  lua_pushinteger(L, C);
  lua_setfield(L, -2, "capacity");
  lua_createtable(L, static_cast<int>(layers.size()), 0);
  for (const auto& [l, load] : layers) {
    double dropped = 0;
    text += fmt::format("{:<6}", l);
    for (int64_t e = 0; e < E; ++e) {
      text += fmt::format(" {:>9.0f}", load.tokens[e]);
      dropped += load.dropped[e];
    }
    text += fmt::format(" {:>9.0f}  {}\n", dropped, sparkline(load.tokens));
    lua_createtable(L, 0, 2);
    for (const auto& [key, xs] : {std::pair{"tokens", &load.tokens}, {"dropped", &load.dropped}}) {
      lua_createtable(L, static_cast<int>(xs->size()), 0);
      for (size_t e = 0; e < xs->size(); ++e) {
        lua_pushnumber(L, (*xs)[e]);
        lua_rawseti(L, -2, static_cast<lua_Integer>(e + 1));
      }
      lua_setfield(L, -2, key);
    }
    lua_rawseti(L, -2, l + 1);
  }
  lua_setfield(L, -2, "layers");
  lua_pushstring(L, text.c_str());
  lua_setfield(L, -2, "text");
  if (luaL_newmetatable(L, "shardlab.ExpertLoad")) {
    lua_pushcfunction(L, experts_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_setmetatable(L, -2);
  return 1;
}

}  // namespace shell
