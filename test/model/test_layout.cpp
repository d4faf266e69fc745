// Config presets, validation messages, parameter names/counts/groups and arena order.
#include <boost/test/unit_test.hpp>

#include <set>

#include "ringtrain/errors.hpp"
#include "ringtrain/model/config.hpp"
#include "ringtrain/model/layout.hpp"

using namespace rt::model;

BOOST_AUTO_TEST_SUITE(layout)

// nanochat's d8 (depth 8, vocab 32768, sequence_len 1024), from nanochat/gpt.py: the total of
// GPT.num_scaling_params() is 125,829,354 parameters, GPT.estimate_flops() 273,679,632 per token.
BOOST_AUTO_TEST_CASE(d8_counts_flops_windows) {
  auto c = ModelConfig::from_depth(8);
  c.validate();
  BOOST_TEST(c.n_embd == 512);
  BOOST_TEST(c.n_head == 4);
  const auto pc = count_params(c);
  BOOST_TEST(pc.total == 125829354);
  BOOST_TEST(pc.by_group[int(ParamGroup::wte)] == 16777216);
  BOOST_TEST(pc.by_group[int(ParamGroup::value_embeds)] == 67108864);
  BOOST_TEST(pc.by_group[int(ParamGroup::lm_head)] == 16777216);
  BOOST_TEST(pc.by_group[int(ParamGroup::transformer_matrices)] == 25166016);
  BOOST_TEST(pc.by_group[int(ParamGroup::scalars)] == 42);
  BOOST_TEST(flops_per_token(c) == 273679632);
  const std::vector<int64_t> w = {256, 256, 256, 1024, 256, 256, 256, 1024};
  BOOST_TEST(c.windows() == w, boost::test_tools::per_element());
  for (int64_t i = 0; i < 8; ++i) BOOST_TEST(c.has_value_embed(i) == (i % 2 == 1));
}

BOOST_AUTO_TEST_CASE(count_formula_any_depth) {
  for (int64_t d : {2, 4, 6, 12}) {
    auto c = ModelConfig::from_depth(d, 512, 1000);
    const int64_t C = c.n_embd, V = c.vocab_size, L = d, KVD = c.n_kv_head * c.head_dim;
    const int64_t nve = (L + 1) / 2;
    BOOST_TEST(count_params(c).total == 2 * V * C + nve * V * KVD + L * 12 * C * C + nve * 12 * c.n_kv_head + 2 * L + 26);
  }
}

BOOST_AUTO_TEST_CASE(validation_messages) {
  auto expect = [](ModelConfig c, const std::string& fragment) {
    try {
      c.validate();
      BOOST_ERROR("no error for: " + fragment);
    } catch (const rt::UsageError& e) {
      BOOST_TEST(std::string(e.what()).find(fragment) != std::string::npos, e.what());
    }
  };
  auto c = ModelConfig::from_depth(8);
  c.n_embd = 500;
  expect(c, "n_embd 500 is not divisible by head_dim 128");
  c = ModelConfig::from_depth(8);
  c.n_kv_head = 3;
  expect(c, "n_kv_head 3 does not divide n_head 4");
  c = ModelConfig::from_depth(8);
  c.window_pattern = "SSX";
  expect(c, "unknown letter 'X'");
  c = ModelConfig::from_depth(8);
  c.n_embd = 576;
  expect(c, "not divisible by head_dim");
}

// Odd depths as base_train builds them: the width rounded up to whole heads of head_dim.
BOOST_AUTO_TEST_CASE(odd_depths_round_the_width_up_to_whole_heads) {
  struct Case { int64_t depth, aspect, head_dim, n_embd, n_head; };
  for (const Case& k : {Case{5, 64, 128, 384, 3}, Case{7, 64, 128, 512, 4}, Case{3, 64, 128, 256, 2},
                        Case{1, 64, 128, 128, 1}, Case{8, 64, 128, 512, 4}, Case{9, 64, 128, 640, 5},
                        Case{20, 64, 128, 1280, 10}, Case{2, 64, 32, 128, 4}, Case{6, 48, 128, 384, 3}}) {
    const auto c = ModelConfig::from_depth(k.depth, 1024, 32768, k.aspect, k.head_dim);
    BOOST_TEST_CONTEXT("d" << k.depth << " aspect " << k.aspect << " head " << k.head_dim) {
      BOOST_TEST(c.n_embd == k.n_embd);
      BOOST_TEST(c.n_head == k.n_head);
      BOOST_TEST(c.n_kv_head == k.n_head);
      BOOST_CHECK_NO_THROW(c.validate());
    }
  }
  BOOST_CHECK_THROW(ModelConfig::from_depth(4, 1024, 32768, 0), rt::UsageError);
}

BOOST_AUTO_TEST_CASE(names_groups_and_order) {
  auto c = ModelConfig::from_depth(4, 256, 300);
  const auto specs = param_specs(c);
  std::set<std::string> names;
  for (const auto& s : specs) names.insert(s.name);
  BOOST_TEST(names.size() == specs.size());
  for (const char* n : {"transformer.wte.weight", "lm_head.weight", "value_embeds.1.weight", "value_embeds.3.weight",
                        "transformer.h.0.attn.c_q.weight", "transformer.h.3.attn.ve_gate.weight",
                        "transformer.h.2.mlp.c_proj.weight", "resid_lambdas", "x0_lambdas",
                        "smear_gate.weight", "smear_lambda", "backout_lambda"})
    BOOST_TEST(names.count(n) == 1, n);
  BOOST_TEST(names.count("value_embeds.0.weight") == 0);
  BOOST_TEST(names.count("transformer.h.0.attn.ve_gate.weight") == 0);
  // Arena order: lm_head, blocks from the last to the first, scalars, tables.
  BOOST_TEST(specs.front().name == "lm_head.weight");
  BOOST_TEST(specs[1].name == "transformer.h.3.attn.c_q.weight");
  BOOST_TEST(specs.back().name == "transformer.wte.weight");
  BOOST_TEST(std::string(group_name(param_group("transformer.h.1.attn.ve_gate.weight"))) == "transformer_matrices");
  BOOST_TEST(std::string(group_name(param_group("smear_gate.weight"))) == "scalars");
  BOOST_TEST(std::string(group_name(param_group("value_embeds.3.weight"))) == "value_embeds");
  BOOST_CHECK_THROW(param_group("nonsense"), rt::UsageError);
}

BOOST_AUTO_TEST_CASE(json_round_trip) {
  auto c = ModelConfig::from_depth(6, 512, 4096);
  c.window_pattern = "SL";
  c.n_kv_head = 1;
  const auto back = ModelConfig::from_json(c.to_json());
  BOOST_TEST(back.to_json() == c.to_json());
  BOOST_TEST(back.n_kv_head == 1);
  BOOST_CHECK_THROW(ModelConfig::from_json("{\"n_layer\": 2}"), rt::UsageError);
  BOOST_CHECK_THROW(ModelConfig::from_json("not json"), rt::UsageError);
}

BOOST_AUTO_TEST_SUITE_END()
