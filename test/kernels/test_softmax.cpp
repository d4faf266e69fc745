// Row softmax (with temperature) against a double reference and finite differences.
#include <boost/test/unit_test.hpp>

#include "gradcheck.hpp"
#include "ringtrain/kernels/softmax.hpp"

using namespace gradcheck;
namespace k = rt::kernels;

BOOST_AUTO_TEST_SUITE(softmax)

BOOST_AUTO_TEST_CASE(forward_and_gradient) {
  std::mt19937 rng(12);
  const int64_t rows = 3, cols = 17;
  for (float temp : {1.0f, 0.7f}) {
    auto x = random_vec(rows * cols, rng, -5, 5);
    auto dy = random_vec(x.size(), rng);
    auto ref = [&](const std::vector<double>& xd) {
      std::vector<double> y(xd.size());
      for (int64_t r = 0; r < rows; ++r) {
        double m = -1e300, s = 0;
        for (int64_t j = 0; j < cols; ++j) m = std::max(m, xd[r * cols + j]);
        for (int64_t j = 0; j < cols; ++j) s += std::exp((xd[r * cols + j] - m) / temp);
        for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = std::exp((xd[r * cols + j] - m) / temp) / s;
      }
      return y;
    };
    std::vector<float> y(x.size()), dx(x.size());
    k::softmax_forward(x.data(), y.data(), rows, cols, temp);
    BOOST_TEST(rel_err(y, ref(to_double(x))) < 1e-6);
    auto g = numeric_grad(to_double(x), [&](const std::vector<double>& xd) { return dot(ref(xd), dy); });
    k::softmax_backward(y.data(), dy.data(), dx.data(), rows, cols, temp);
    BOOST_TEST(rel_err(dx, g) < 1e-5);
  }
}

BOOST_AUTO_TEST_SUITE_END()
