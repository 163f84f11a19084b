// engine/train/expert_load.h: the mixture-of-experts load of a trainer's last step (t:experts();
// docs/sharding.md "Mixture of experts"): tokens routed to each expert and tokens dropped over
// the capacity, per layer, read from the step's `moe/layer_<l>/expert_<e>/{tokens,dropped}`
// metrics, and the table that prints them with a sparkline per layer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/train/trainer.h"

namespace eng {

struct ExpertLoad {
  struct Layer {
    std::vector<double> tokens, dropped;  // per expert
  };
  int64_t step = 0;
  int64_t capacity = 0;             // tokens per expert per sequence (moe_capacity; 0 dropless)
  std::map<int64_t, Layer> layers;  // by layer index
  std::string text;                 // the printed table
};

// Errors (naming fn): a model without experts, no step run yet.
Result<ExpertLoad> expert_load(Trainer& t, std::string_view fn);

}  // namespace eng
