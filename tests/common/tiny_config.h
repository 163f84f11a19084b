// tests/common/tiny_config.h: small llama configs for tests. Each test keeps its own sizes;
// this sets exactly the keys it names (an empty field leaves the key at its default).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "engine/train/config.h"

namespace eng::testing {

struct TinyLlama {
  std::optional<std::string> model_name{};      // "llama-tiny" in the compiler-level tests
  std::optional<std::string> dataset{};         // "text:PATH"; default synthetic
  std::optional<int64_t> emb_dim{};             // base_emb_dim
  std::optional<int64_t> query_heads{};         // base_num_query_heads
  std::optional<int64_t> kv_heads{};            // base_num_kv_heads
  std::optional<int64_t> head_dim{};            // head_dim
  std::optional<int64_t> mlp_dim{};             // base_mlp_dim
  std::optional<int64_t> layers{};              // base_num_decoder_layers
  std::optional<int64_t> vocab_size{};          // vocab_size
  std::optional<int64_t> seq{};                 // max_target_length
  std::optional<double> per_device_batch{};     // per_device_batch_size
  std::optional<double> learning_rate{};        // learning_rate
  std::optional<int64_t> steps{};               // steps
  std::optional<double> warmup_steps_fraction{};  // warmup_steps_fraction
  std::optional<double> adam_eps{};             // adam_eps
  std::optional<std::string> dtype{};           // dtype (default bfloat16, as MaxText's)
};

// A Config with every given field set (each set is expected to succeed).
inline Config tiny_llama_config(const TinyLlama& t) {
  Config c;
  auto set = [&](const char* key, const auto& v) {
    if (v) {
      EXPECT_TRUE(c.set(key, *v).ok()) << key;
    }
  };
  set("model_name", t.model_name);
  set("dataset", t.dataset);
  set("base_emb_dim", t.emb_dim);
  set("base_num_query_heads", t.query_heads);
  set("base_num_kv_heads", t.kv_heads);
  set("head_dim", t.head_dim);
  set("base_mlp_dim", t.mlp_dim);
  set("base_num_decoder_layers", t.layers);
  set("vocab_size", t.vocab_size);
  set("max_target_length", t.seq);
  set("per_device_batch_size", t.per_device_batch);
  set("learning_rate", t.learning_rate);
  set("steps", t.steps);
  set("warmup_steps_fraction", t.warmup_steps_fraction);
  set("adam_eps", t.adam_eps);
  set("dtype", t.dtype);
  return c;
}

}  // namespace eng::testing
