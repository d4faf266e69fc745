// Optimizer state checkpoints and sharded Muon steps: both must reproduce an uninterrupted,
// unsharded run bit for bit.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/optim/muon_adamw.hpp"
#include "small_model.hpp"

using namespace rt::optim;
using optim_test::SmallConfig;

namespace {

const MuonAdamWOptions kOptions{8192, 100, 128, 0, 0};

// Fills grads of every set identically for step `it`.
void same_grads(std::vector<rt::model::ParamSet*> sets, int64_t it) {
  for (auto* ps : sets) optim_test::fill_grads(*ps, 1000 + uint32_t(it));
}

bool same_params(const rt::model::ParamSet& a, const rt::model::ParamSet& b) {
  return a.size() == b.size() && std::equal(a.data(), a.data() + a.size(), b.data());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_state)

BOOST_AUTO_TEST_CASE(resumed_run_equals_uninterrupted_run) {
  SmallConfig c;
  rt::model::ParamSet a, b;
  optim_test::declare_params(a, c);
  optim_test::declare_params(b, c);
  optim_test::fill_params(a, 1);
  MuonAdamW opt_a(a, kOptions);
  for (int64_t it = 0; it < 3; ++it) {
    same_grads({&a}, it);
    opt_a.step(it);
  }
  // "Checkpoint": parameters and optimizer state; then a fresh optimizer resumes from it.
  const std::vector<char> state = opt_a.save_state();
  std::copy(a.data(), a.data() + a.size(), b.data());
  MuonAdamW opt_b(b, kOptions);
  opt_b.load_state(state);
  BOOST_TEST((opt_b.save_state() == state));  // exact round trip
  for (int64_t it = 3; it < 5; ++it) {
    same_grads({&a, &b}, it);
    opt_a.step(it);
    opt_b.step(it);
  }
  BOOST_TEST(same_params(a, b));
  BOOST_TEST((opt_a.save_state() == opt_b.save_state()));

  // Without the state the resumed run differs (the test above can fail).
  rt::model::ParamSet fresh;
  optim_test::declare_params(fresh, c);
  optim_test::fill_params(fresh, 1);
  MuonAdamW opt_f(fresh, kOptions);
  for (int64_t it = 0; it < 3; ++it) {
    same_grads({&fresh}, it);
    opt_f.step(it);
  }
  MuonAdamW opt_g(fresh, kOptions);  // new state, same parameters
  rt::model::ParamSet a2;
  optim_test::declare_params(a2, c);
  std::copy(fresh.data(), fresh.data() + fresh.size(), a2.data());
  MuonAdamW opt_a2(a2, kOptions);
  opt_a2.load_state(opt_f.save_state());
  same_grads({&fresh, &a2}, 3);
  opt_g.step(3);
  opt_a2.step(3);
  BOOST_TEST(!same_params(fresh, a2));
}

BOOST_AUTO_TEST_CASE(state_of_another_model_is_a_usage_error) {
  SmallConfig c;
  rt::model::ParamSet a;
  optim_test::declare_params(a, c);
  MuonAdamW opt_a(a, kOptions);
  const std::vector<char> state = opt_a.save_state();

  SmallConfig other = c;
  other.vocab_size = 256;
  rt::model::ParamSet b;
  optim_test::declare_params(b, other);
  MuonAdamW opt_b(b, kOptions);
  BOOST_CHECK_THROW(opt_b.load_state(state), rt::UsageError);
  try {
    opt_b.load_state(state);
  } catch (const rt::UsageError& e) {
    const std::string msg = e.what();
    BOOST_TEST_INFO(msg);
    BOOST_TEST(msg.find("transformer.wte.weight") != std::string::npos);
    BOOST_TEST(msg.find('\n') == std::string::npos);
  }

  SmallConfig deeper = c;
  deeper.n_layer = 3;
  rt::model::ParamSet d;
  optim_test::declare_params(d, deeper);
  MuonAdamW opt_d(d, kOptions);
  BOOST_CHECK_THROW(opt_d.load_state(state), rt::UsageError);

  std::vector<char> truncated(state.begin(), state.end() - 5);
  BOOST_CHECK_THROW(opt_a.load_state(truncated), rt::UsageError);
  std::vector<char> bad_magic = state;
  bad_magic[0] = 'X';
  BOOST_CHECK_THROW(opt_a.load_state(bad_magic), rt::UsageError);
  std::vector<char> bad_version = state;
  bad_version[8] = 99;
  BOOST_CHECK_THROW(opt_a.load_state(bad_version), rt::UsageError);
  opt_a.load_state(state);  // the original still loads after failed attempts
}

BOOST_AUTO_TEST_CASE(muon_over_a_partition_equals_a_full_step) {
  SmallConfig c;
  rt::model::ParamSet full, parts;
  optim_test::declare_params(full, c);
  optim_test::declare_params(parts, c);
  optim_test::fill_params(full, 2);
  optim_test::fill_params(parts, 2);
  MuonAdamW opt_full(full, kOptions);
  MuonAdamW opt_parts(parts, kOptions);
  const size_t n = opt_parts.muon_matrices().size();
  BOOST_TEST_REQUIRE(n > 2u);
  std::vector<int> even, odd;
  for (size_t k = 0; k < n; ++k) (k % 2 ? odd : even).push_back(int(k));
  for (int64_t it = 0; it < 2; ++it) {
    same_grads({&full, &parts}, it);
    opt_full.step(it);
    opt_parts.step_adamw(it);
    opt_parts.step_muon(it, odd);  // any order: the matrices are independent
    opt_parts.step_muon(it, even);
  }
  BOOST_TEST(same_params(full, parts));
  BOOST_TEST((opt_full.save_state() == opt_parts.save_state()));

  // Leaving a matrix out leaves exactly that matrix unchanged.
  const auto& first = parts.all()[opt_parts.muon_matrices()[0].param];
  std::vector<float> before(first.data, first.data + first.numel);
  std::vector<int> rest(even.begin() + 1, even.end());
  rest.insert(rest.end(), odd.begin(), odd.end());
  same_grads({&parts}, 2);
  opt_parts.step_muon(2, rest);
  BOOST_TEST(std::equal(before.begin(), before.end(), first.data));
  BOOST_CHECK_THROW(opt_parts.step_muon(2, {int(n)}), rt::RuntimeError);
}

BOOST_AUTO_TEST_SUITE_END()
