// ReLU^2 against finite differences.
#include <boost/test/unit_test.hpp>

#include "gradcheck.hpp"
#include "ringtrain/kernels/activations.hpp"

using namespace gradcheck;
namespace k = rt::kernels;

BOOST_AUTO_TEST_SUITE(activations)

BOOST_AUTO_TEST_CASE(relu2_forward_and_gradient) {
  std::mt19937 rng(5);
  auto h = random_vec(200, rng);
  auto da = random_vec(200, rng);
  std::vector<float> a(h.size()), dh(h.size());
  k::relu2_forward(h.data(), a.data(), int64_t(h.size()));
  auto ref = [](const std::vector<double>& x) {
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] * x[i] : 0;
    return y;
  };
  BOOST_TEST(rel_err(a, ref(to_double(h))) < 1e-7);
  auto g = numeric_grad(to_double(h), [&](const std::vector<double>& x) { return dot(ref(x), da); });
  k::relu2_backward(h.data(), da.data(), dh.data(), int64_t(h.size()));
  BOOST_TEST(rel_err(dh, g) < 1e-6);
  BOOST_TEST(std::abs(k::sigmoid(0.3f) - 1 / (1 + std::exp(-0.3))) < 1e-7);
}

BOOST_AUTO_TEST_SUITE_END()
