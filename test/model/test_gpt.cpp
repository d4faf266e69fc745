// The model on its own: initial loss, gradient-ready ranges, gradient accumulation,
// touched tokens, bad inputs, and a finite-difference check of a few parameters.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>

#include "ringtrain/errors.hpp"
#include "ringtrain/model/gpt.hpp"

using namespace rt::model;

namespace {

ModelConfig tiny(int64_t L = 3, int64_t kv = 2) {
  ModelConfig c;
  c.n_layer = L;
  c.n_embd = 64;
  c.head_dim = 16;
  c.n_head = 4;
  c.n_kv_head = kv;
  c.vocab_size = 97;
  c.sequence_len = 16;
  c.window_pattern = "SL";
  return c;
}

std::vector<int32_t> random_ids(int64_t n, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(rng() % V);
  return v;
}

// Makes the zero-initialised matrices non-zero so every gradient is non-trivial.
void perturb(GPT& m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> U(-0.05f, 0.05f);
  for (auto& p : m.params().all())
    if (p.name.find("c_proj") != std::string::npos || p.name == "lm_head.weight")
      for (int64_t i = 0; i < p.numel; ++i) p.data[i] = U(rng);
  m.params().get("smear_lambda").data[0] = 0.4f;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt)

BOOST_AUTO_TEST_CASE(d8_initial_loss_is_log_vocab) {
  GPT m(ModelConfig::from_depth(8));
  m.init_weights(1);
  const int64_t B = 1, T = 64;
  auto idx = random_ids(B * T, 32768, 2), tgt = random_ids(B * T, 32768, 3);
  const float loss = m.forward(idx.data(), tgt.data(), B, T, nullptr, false);
  BOOST_TEST(std::abs(loss - std::log(32768.0)) < 0.01, "loss " << loss);
}

BOOST_AUTO_TEST_CASE(grad_ready_ranges_cover_the_arena_in_order) {
  GPT m(tiny());
  m.init_weights(5);
  perturb(m, 6);
  const int64_t B = 2, T = 16;
  auto idx = random_ids(B * T, 97, 7), tgt = random_ids(B * T, 97, 8);
  m.forward(idx.data(), tgt.data(), B, T);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  m.params().zero_grad();
  m.backward(1.0f, [&](int64_t off, int64_t n) { ranges.push_back({off, n}); });
  BOOST_TEST(ranges.size() == 8u);  // lm_head, block 2, its table, block 1, block 0, its table, scalars, wte
  std::vector<int> covered(m.params().size(), 0);
  for (auto [off, n] : ranges)
    for (int64_t i = off; i < off + n; ++i) covered[i]++;
  for (int c : covered) BOOST_TEST_REQUIRE(c == 1);
  BOOST_TEST(ranges[0].first == m.params().get("lm_head.weight").offset);
  BOOST_TEST(ranges[1].first == m.params().get("transformer.h.2.attn.c_q.weight").offset);
  BOOST_TEST(ranges.back().first == m.params().get("transformer.wte.weight").offset);
  // Touched tokens: sorted unique input ids; only their wte rows have gradient.
  const auto& touched = m.touched_tokens();
  std::vector<int32_t> want(idx);
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  BOOST_TEST(touched == want, boost::test_tools::per_element());
  const auto& wte = m.params().get("transformer.wte.weight");
  for (int64_t v = 0; v < 97; ++v) {
    float mx = 0;
    for (int64_t j = 0; j < 64; ++j) mx = std::max(mx, std::abs(wte.grad[v * 64 + j]));
    const bool used = std::binary_search(want.begin(), want.end(), int32_t(v));
    BOOST_TEST((mx > 0) == used);
  }
}

BOOST_AUTO_TEST_CASE(backward_accumulates_with_loss_scale) {
  GPT m(tiny());
  m.init_weights(9);
  perturb(m, 10);
  const int64_t B = 2, T = 16;
  auto idx = random_ids(B * T, 97, 11), tgt = random_ids(B * T, 97, 12);
  tgt[3] = -1;
  m.params().zero_grad();
  m.forward(idx.data(), tgt.data(), B, T);
  m.backward(1.0f);
  std::vector<float> once(m.params().grad(), m.params().grad() + m.params().size());
  m.params().zero_grad();
  for (int r = 0; r < 2; ++r) {
    m.forward(idx.data(), tgt.data(), B, T);
    m.backward(0.5f);
  }
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < m.params().size(); ++i) {
    diff = std::max(diff, double(std::abs(m.params().grad()[i] - once[i])));
    scale = std::max(scale, double(std::abs(once[i])));
  }
  BOOST_TEST(scale > 0);
  BOOST_TEST(diff <= 1e-5 * scale);
  BOOST_CHECK_THROW(m.backward(1.0f), rt::RuntimeError);  // needs a new forward
}

BOOST_AUTO_TEST_CASE(finite_differences_on_sampled_parameters) {
  // Float32 forward, so central differences with a large step and a loose tolerance:
  // this catches wrong formulas, the PyTorch comparison catches the rest.
  GPT m(tiny(2, 4));
  m.init_weights(13);
  perturb(m, 14);
  const int64_t B = 1, T = 16;
  auto idx = random_ids(B * T, 97, 15), tgt = random_ids(B * T, 97, 16);
  m.params().zero_grad();
  m.forward(idx.data(), tgt.data(), B, T);
  m.backward(1.0f);
  std::mt19937 rng(17);
  int checked = 0;
  for (auto& p : m.params().all()) {
    for (int s = 0; s < 2; ++s) {
      int64_t i = int64_t(rng() % p.numel);
      if (p.name == "transformer.wte.weight" || p.name.rfind("value_embeds", 0) == 0)
        i = int64_t(idx[s]) * (p.numel / 97) + int64_t(rng() % (p.numel / 97));
      const float keep = p.data[i];
      const float h = 1e-2f * std::max(1.0f, std::abs(keep));
      p.data[i] = keep + h;
      const double up = m.forward(idx.data(), tgt.data(), B, T, nullptr, false);
      p.data[i] = keep - h;
      const double down = m.forward(idx.data(), tgt.data(), B, T, nullptr, false);
      p.data[i] = keep;
      const double fd = (up - down) / (2 * h);
      BOOST_TEST(std::abs(fd - p.grad[i]) <= 2e-3 + 0.05 * std::abs(fd), p.name << "[" << i << "] fd " << fd << " analytic " << p.grad[i]);
      ++checked;
    }
  }
  BOOST_TEST(checked > 20);
}

BOOST_AUTO_TEST_CASE(last_position_logits_match_the_loss) {
  GPT m(tiny());
  m.init_weights(18);
  perturb(m, 19);
  const int64_t B = 2, T = 11, V = 97;
  auto idx = random_ids(B * T, V, 20);
  std::vector<int32_t> tgt(B * T, -1);
  tgt[T - 1] = 7;
  tgt[2 * T - 1] = 42;
  std::vector<float> losses(B * T), logits(B * V);
  m.forward(idx.data(), tgt.data(), B, T, losses.data(), false);
  m.forward_last_logits(idx.data(), B, T, logits.data());
  for (int64_t b = 0; b < B; ++b) {
    double mx = -1e30, s = 0;
    for (int64_t j = 0; j < V; ++j) {
      BOOST_TEST(std::abs(logits[b * V + j]) <= 15.0f);
      mx = std::max(mx, double(logits[b * V + j]));
    }
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[b * V + j] - mx);
    const double want = mx + std::log(s) - logits[b * V + tgt[(b + 1) * T - 1]];
    BOOST_TEST(std::abs(losses[(b + 1) * T - 1] - want) < 1e-4, "row " << b);
  }
}

BOOST_AUTO_TEST_CASE(bad_inputs_are_usage_errors) {
  GPT m(tiny());
  std::vector<int32_t> idx(16, 5), tgt(16, 5);
  idx[2] = 97;
  BOOST_CHECK_THROW(m.forward(idx.data(), tgt.data(), 1, 16), rt::UsageError);
  BOOST_CHECK_THROW(m.reserve(1, 161), rt::UsageError);  // rotary table holds 10 * 16
  auto c = tiny();
  c.n_kv_head = 3;
  BOOST_CHECK_THROW(GPT{c}, rt::UsageError);
}

BOOST_AUTO_TEST_SUITE_END()
