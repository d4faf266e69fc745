// Schedules and scaling rules against values computed by hand from the spec.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "ringtrain/errors.hpp"
#include "ringtrain/model/layout.hpp"
#include "ringtrain/optim/muon_adamw.hpp"
#include "ringtrain/optim/schedule.hpp"
#include "small_model.hpp"

using namespace rt::optim;

BOOST_AUTO_TEST_SUITE(optim_schedule)

BOOST_AUTO_TEST_CASE(warmdown_rounds_half_to_even_like_python) {
  BOOST_TEST(warmdown_iters(2000) == 1300);
  BOOST_TEST(warmdown_iters(10) == 6);   // 6.5 -> 6
  BOOST_TEST(warmdown_iters(30) == 20);  // 19.5 -> 20
  BOOST_TEST(warmdown_iters(50) == 32);  // 32.5 -> 32
}

BOOST_AUTO_TEST_CASE(lr_multiplier_warmup_constant_warmdown) {
  const double tol = 1e-12;
  BOOST_TEST(std::abs(lr_multiplier(0, 2000) - 0.025) < tol);
  BOOST_TEST(std::abs(lr_multiplier(19, 2000) - 0.5) < tol);
  BOOST_TEST(std::abs(lr_multiplier(39, 2000) - 1.0) < tol);
  BOOST_TEST(std::abs(lr_multiplier(40, 2000) - 1.0) < tol);
  BOOST_TEST(std::abs(lr_multiplier(700, 2000) - 1.0) < tol);
  BOOST_TEST(std::abs(lr_multiplier(1500, 2000) - 540.0 / 1300.0) < tol);  // p = 500/1300
  BOOST_TEST(std::abs(lr_multiplier(1999, 2000) - 65.95 / 1300.0) < tol);
  BOOST_TEST(std::abs(lr_multiplier(2000, 2000) - 0.05) < tol);
}

BOOST_AUTO_TEST_CASE(muon_momentum_ramps) {
  const double tol = 1e-12;
  BOOST_TEST(std::abs(muon_momentum(0, 2000) - 0.85) < tol);
  BOOST_TEST(std::abs(muon_momentum(200, 2000) - 0.91) < tol);
  BOOST_TEST(std::abs(muon_momentum(400, 2000) - 0.97) < tol);
  BOOST_TEST(std::abs(muon_momentum(700, 2000) - 0.97) < tol);   // warm-down starts at 700
  BOOST_TEST(std::abs(muon_momentum(1350, 2000) - 0.935) < tol); // halfway down
  BOOST_TEST(std::abs(muon_momentum(2000, 2000) - 0.90) < tol);
  // Overlapping ramps (N - W = 35 < 400): the warm-up is checked first.
  BOOST_TEST(std::abs(muon_momentum(100, 100) - 0.88) < tol);
}

BOOST_AUTO_TEST_CASE(muon_weight_decay_cosine) {
  const double tol = 1e-12;
  BOOST_TEST(std::abs(muon_weight_decay(0, 2000, 0.2) - 0.2) < tol);
  BOOST_TEST(std::abs(muon_weight_decay(1000, 2000, 0.2) - 0.1) < tol);
  BOOST_TEST(std::abs(muon_weight_decay(500, 2000, 0.2) - 0.1 * (1 + std::sqrt(0.5))) < tol);
  BOOST_TEST(std::abs(muon_weight_decay(2000, 2000, 0.2)) < tol);
}

BOOST_AUTO_TEST_CASE(d8_scaling_at_batch_4096) {
  BOOST_TEST(scaling_param_count(8, 512, 4, 4, 128, 32768) == 41943232);
  BOOST_TEST(reference_scaling_param_count() == 110100912);
  BOOST_TEST(std::abs(batch_lr_scale(4096) - 0.0883883) < 1e-7);
  BOOST_TEST(std::abs(model_dim_lr_scale(512) - 1.2247449) < 1e-7);
  BOOST_TEST(std::abs(weight_decay_scaled(4096, 41943232, 110100912) - 0.064965) < 1e-6);
  BOOST_TEST(batch_lr_scale(524288) == 1.0);
  BOOST_TEST(model_dim_lr_scale(768) == 1.0);
  BOOST_CHECK_THROW(batch_lr_scale(0), rt::UsageError);
}

// base_train's rules for the batch and the horizon (scripts/base_train.py): d8 at V 32768
// trains 262,144 tokens a step for 1,920 steps; d12 is the reference (2^19 tokens).
BOOST_AUTO_TEST_CASE(nanochat_batch_and_horizon) {
  const int64_t d8 = scaling_param_count(8, 512, 4, 4, 128, 32768), d12 = reference_scaling_param_count();
  BOOST_TEST(auto_total_batch(12, d8, d12) == 262144);
  BOOST_TEST(horizon_steps(12, d8, 262144) == 1920);
  BOOST_TEST(target_tokens(12, d8) == 503318784);
  BOOST_TEST(auto_total_batch(12, d12, d12) == 524288);
  BOOST_TEST(horizon_steps(12, d12, 524288) == 2520);
  // d20, nanochat's default depth: 435,160,240 scaling parameters, 2^20 tokens, 4,980 steps.
  const int64_t d20 = scaling_param_count(20, 1280, 10, 10, 128, 32768);
  BOOST_TEST(d20 == 435160240);
  BOOST_TEST(auto_total_batch(12, d20, d12) == 1048576);
  BOOST_TEST(horizon_steps(12, d20, 1048576) == 4980);
  // --steps wins over the ratio elsewhere; here a ratio of 0 or a batch of 0 is refused.
  BOOST_CHECK_THROW(target_tokens(0, d8), rt::UsageError);
  BOOST_CHECK_THROW(horizon_steps(12, d8, 0), rt::UsageError);
}

// The weight-decay reference is d12 at the run's vocabulary: at V 8192 the reference is
// smaller and so is the decay (it was taken at V 32768, 1.21x too strong).
BOOST_AUTO_TEST_CASE(weight_decay_reference_at_the_runs_vocabulary) {
  BOOST_TEST(reference_scaling_param_count(32768) == 110100912);
  BOOST_TEST(reference_scaling_param_count(8192) == 91226544);
  BOOST_TEST(reference_scaling_param_count(32768, 64, 64) == 12 * 12 * 768 * 768 + 6 * 12 * 12 + 32768 * 768);
  const int64_t d8 = scaling_param_count(8, 512, 4, 4, 128, 8192);
  BOOST_TEST(std::abs(weight_decay_scaled(262144, d8, reference_scaling_param_count(8192)) -
                      0.28 * std::sqrt(0.5) * 91226544.0 / double(d8)) < 1e-12);
  BOOST_TEST(std::abs(weight_decay_scaled(262144, d8, 91226544, 0.1) / weight_decay_scaled(262144, d8, 91226544) - 0.1 / 0.28) < 1e-12);
}

// The tunable settings reach the schedules.
BOOST_AUTO_TEST_CASE(schedule_shape_flags) {
  TrainingHyper h;
  h.warmup_steps = 10, h.warmdown_ratio = 0.5, h.final_lr_frac = 0.0;
  const double tol = 1e-12;
  BOOST_TEST(std::abs(lr_multiplier(0, 100, h) - 0.1) < tol);
  BOOST_TEST(std::abs(lr_multiplier(50, 100, h) - 1.0) < tol);
  BOOST_TEST(std::abs(lr_multiplier(75, 100, h) - 0.5) < tol);
  BOOST_TEST(std::abs(lr_multiplier(100, 100, h)) < tol);
  h.warmup_steps = 0, h.warmdown_ratio = 0;  // constant
  BOOST_TEST(lr_multiplier(0, 100, h) == 1.0);
  BOOST_TEST(lr_multiplier(99, 100, h) == 1.0);
  BOOST_TEST(std::abs(muon_momentum(1000, 2000, h) - 0.97) < tol);  // no warm-down of the momentum either
}

BOOST_AUTO_TEST_CASE(learning_rate_flags_reach_the_groups) {
  optim_test::SmallConfig c;
  rt::model::ParamSet ps;
  optim_test::declare_params(ps, c);
  MuonAdamWOptions o{8192, 2000, c.n_embd, 0, 0, {}};
  o.hyper.matrix_lr = 0.04, o.hyper.embedding_lr = 0.6, o.hyper.unembedding_lr = 0.016, o.hyper.scalar_lr = 1.0;
  o.hyper.weight_decay = 0.14;
  MuonAdamW opt(ps, o);
  MuonAdamW nanochat(ps, {8192, 2000, c.n_embd, 0, 0, {}});
  for (size_t i = 0; i < 5; ++i)  // each scaled group twice as fast
    BOOST_TEST(std::abs(opt.adamw_groups()[i].lr - 2 * nanochat.adamw_groups()[i].lr) < 1e-15);
  BOOST_TEST(opt.adamw_groups()[5].lr == 0.2);  // smear and backout: fixed
  BOOST_TEST(std::abs(opt.muon_lr() - 2 * nanochat.muon_lr()) < 1e-15);
  BOOST_TEST(std::abs(opt.weight_decay_scaled() - 0.5 * nanochat.weight_decay_scaled()) < 1e-15);
}

BOOST_AUTO_TEST_CASE(groups_and_learning_rates_of_a_small_model) {
  optim_test::SmallConfig c;
  rt::model::ParamSet ps;
  optim_test::declare_params(ps, c);
  MuonAdamW opt(ps, {8192, 2000, c.n_embd, 0, 0, {}});
  const double b = 0.125, d = std::sqrt(6.0);  // sqrt(8192/524288), (128/768)^-0.5
  struct Expect { const char* group; double lr, beta1, beta2, wd; size_t n; };
  const Expect expect[] = {{"lm_head", 0.008 * b * d, 0.8, 0.96, 0.01, 1},
                           {"wte", 0.3 * b * d, 0.8, 0.995, 0.001, 1},
                           {"value_embeds", 0.15 * b * d, 0.8, 0.995, 0.01, 1},
                           {"resid_lambdas", 0.005 * b, 0.8, 0.95, 0.05, 1},
                           {"x0_lambdas", 0.5 * b, 0.96, 0.95, 0.0, 1},
                           {"scalars", 0.2, 0.8, 0.95, 0.0, 3}};
  BOOST_TEST_REQUIRE(opt.adamw_groups().size() == 6u);
  for (size_t i = 0; i < 6; ++i) {
    const AdamWGroup& g = opt.adamw_groups()[i];
    BOOST_TEST(g.name == expect[i].group);
    BOOST_TEST(std::abs(g.lr - expect[i].lr) < 1e-12);
    BOOST_TEST(g.beta1 == expect[i].beta1);
    BOOST_TEST(g.beta2 == expect[i].beta2);
    BOOST_TEST(g.weight_decay == expect[i].wd);
    BOOST_TEST(g.params.size() == expect[i].n);
  }
  // 6 matrices per layer plus one ve_gate (layer 1).
  BOOST_TEST(opt.muon_matrices().size() == 13u);
  BOOST_TEST(std::abs(opt.muon_lr() - 0.02 * b) < 1e-15);
  // D_model = 2 * 12 C^2 + 2*12 (ve_gate) + V*C.
  const double d_model = 2 * 12 * 128.0 * 128 + 24 + 512.0 * 128;
  // D_ref: d12 at this model's vocabulary (512), as base_train builds its reference.
  BOOST_TEST(std::abs(opt.weight_decay_scaled() - 0.28 * b * double(reference_scaling_param_count(512)) / d_model) < 1e-12);
  BOOST_TEST(std::abs(muon_shape_lr_factor(512, 128) - 2.0) < 1e-15);
  BOOST_TEST(muon_shape_lr_factor(128, 512) == 1.0);
}

BOOST_AUTO_TEST_CASE(groups_agree_with_the_model_layout) {
  // The model's own arena order and grouping (lm_head first, tables last), d2 and d3.
  for (int64_t layers : {2, 3}) {
    rt::model::ModelConfig cfg;
    cfg.n_layer = layers;
    cfg.n_embd = 128;
    cfg.n_head = cfg.n_kv_head = 2;
    cfg.head_dim = 64;
    cfg.vocab_size = 512;
    cfg.sequence_len = 64;
    rt::model::ParamSet ps;
    for (const auto& spec : rt::model::param_specs(cfg)) ps.add(spec.name, spec.shape);
    ps.finalize();
    MuonAdamW opt(ps, {8192, 100, cfg.n_embd, 0, 0, {}});
    std::vector<bool> is_muon(ps.all().size(), false);
    for (const auto& m : opt.muon_matrices()) is_muon[m.param] = true;
    int64_t d_model = 0;
    for (size_t i = 0; i < ps.all().size(); ++i) {
      const auto& p = ps.all()[i];
      const auto g = rt::model::param_group(p.name);
      BOOST_TEST_INFO(p.name);
      BOOST_TEST(is_muon[i] == (g == rt::model::ParamGroup::transformer_matrices));
      if (g == rt::model::ParamGroup::transformer_matrices || g == rt::model::ParamGroup::lm_head)
        d_model += p.numel;
    }
    BOOST_TEST(d_model == scaling_param_count(layers, 128, 2, 2, 64, 512));
    const double b = 0.125;
    BOOST_TEST(std::abs(opt.weight_decay_scaled() - 0.28 * b * double(reference_scaling_param_count(512)) / double(d_model)) <
               1e-12);
  }
}

BOOST_AUTO_TEST_CASE(unknown_parameter_is_a_usage_error) {
  rt::model::ParamSet ps;
  ps.add("transformer.wte.weight", {4, 4});
  ps.add("some.other.weight", {4, 4});
  ps.finalize();
  BOOST_CHECK_THROW(MuonAdamW(ps, {8192, 10, 128, 0, 0, {}}), rt::UsageError);
}

BOOST_AUTO_TEST_SUITE_END()
